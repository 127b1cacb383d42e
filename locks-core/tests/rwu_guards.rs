//! `RwuLock<T>`: what each guard allows beside it, the conversions between guards, and the
//! blocking waits (each bounded by a deadline that fails the test instead of hanging).

// Under `--cfg loom` the lock word is built on loom's atomics, which only work inside a model.
#![cfg(not(loom))]

use locks_core::lock_word::Access;
use locks_core::lock_word::LockWordError;
use locks_core::{ReadGuard, RwuLock, UpdateGuard, WriteGuard};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Polls `condition` until it holds, failing the test after 10 s.
fn eventually(what: &str, condition: impl FnMut() -> bool) {
    locks_testing::wait::eventually(Duration::from_secs(10), what, condition);
}

#[test]
fn guards_give_access_and_release_on_drop() {
    let lock = RwuLock::new(vec![1]);
    lock.write().push(2);
    assert_eq!(*lock.read(), vec![1, 2]);
    assert_eq!(lock.update().len(), 2);
    assert!(lock.state().is_free());
}

#[test]
fn a_write_guard_excludes_everything() {
    let lock = RwuLock::new(0);
    let w = lock.write();
    assert!(lock.try_read().is_none());
    assert!(lock.try_update().is_none());
    assert!(lock.try_write().is_none());
    assert_eq!(
        lock.read_timeout(Duration::ZERO).err(),
        Some(LockWordError::TimedOut(Access::Read))
    );
    assert_eq!(
        lock.update_timeout(Duration::from_millis(1)).err(),
        Some(LockWordError::TimedOut(Access::Update))
    );
    assert_eq!(
        lock.write_timeout(Duration::from_millis(1)).err(),
        Some(LockWordError::TimedOut(Access::Write))
    );
    drop(w);
    // The timed-out writer took its wait registration back.
    assert!(lock.state().is_free());
}

#[test]
fn readers_share_with_readers_and_one_update_holder() {
    let lock = RwuLock::new(5);
    let r1 = lock.read();
    let r2 = lock.try_read().expect("readers share");
    let u = lock.try_update().expect("update shares with readers");
    assert!(lock.try_update().is_none(), "one update holder at a time");
    assert!(lock.try_write().is_none());
    assert_eq!(*r1 + *r2 + *u, 15);
    assert_eq!(lock.state().read_count(), 2);
    assert!(lock.state().update_held());
    drop((r1, r2, u));
    assert!(lock.state().is_free());
}

#[test]
fn upgrade_waits_for_readers_and_gives_the_guard_back_on_failure() {
    let lock = RwuLock::new(String::from("a"));
    let u = lock.update();
    let r = lock.read();
    let u = u.try_upgrade().expect_err("a reader is present");
    let u = u
        .upgrade_timeout(Duration::from_millis(1))
        .expect_err("the reader stays");
    assert!(lock.state().update_held());
    assert_eq!(lock.state().wait_count(), 0);
    drop(r);
    let mut w = u.try_upgrade().expect("no reader left");
    w.push('b');
    drop(w);
    let w = lock.update().upgrade_timeout(Duration::from_secs(1)).ok();
    assert_eq!(w.as_deref().map(String::as_str), Some("ab"));
    drop(w);
    assert!(lock.state().is_free());
}

#[test]
fn downgrades_keep_writers_out() {
    let lock = RwuLock::new(1);
    let mut w = lock.write();
    *w = 2;
    let r = w.downgrade();
    assert_eq!(*r, 2);
    assert!(lock.try_write().is_none());
    let r2 = lock
        .try_read()
        .expect("readers may join a downgraded writer");
    assert!(lock.try_update().is_some());
    drop((r, r2));

    let mut w = lock.write();
    *w = 3;
    let u = w.downgrade_to_update();
    assert!(lock.try_update().is_none());
    assert!(lock.try_write().is_none());
    assert_eq!(*lock.try_read().expect("readers join an update holder"), 3);
    let w = u.upgrade();
    assert_eq!(*w, 3);
    drop(w);
    assert!(lock.state().is_free());
}

#[test]
fn blocking_write_waits_for_a_reader_and_keeps_new_readers_out() {
    let lock = Arc::new(RwuLock::new(0u64));
    let old_reader = lock.read();
    thread::scope(|s| {
        let writer = s.spawn(|| *lock.write() += 1);
        eventually("the writer registers its wait", || {
            lock.state().wait_count() == 1
        });
        // No writer starvation: newcomers are refused while the writer waits.
        assert!(lock.try_read().is_none());
        assert!(lock.try_update().is_none());
        assert_eq!(*old_reader, 0);
        drop(old_reader);
        writer.join().unwrap();
    });
    assert_eq!(*lock.read(), 1);
    assert!(lock.state().is_free());
}

#[test]
fn blocking_upgrade_waits_for_a_reader() {
    let lock = RwuLock::new(0u64);
    let reader = lock.read();
    let update = lock.update();
    thread::scope(|s| {
        let upgrader = s.spawn(move || *update.upgrade() += 1);
        eventually("the upgrader registers its wait", || {
            lock.state().wait_count() == 1
        });
        assert!(lock.try_read().is_none());
        drop(reader);
        upgrader.join().unwrap();
    });
    assert_eq!(*lock.read(), 1);
}

#[test]
fn blocking_read_and_update_wait_for_the_writer() {
    let lock = RwuLock::new(0u64);
    let mut w = lock.write();
    thread::scope(|s| {
        let reader = s.spawn(|| *lock.read());
        let updater = s.spawn(|| *lock.update());
        *w = 9;
        drop(w);
        assert_eq!(reader.join().unwrap(), 9);
        assert_eq!(updater.join().unwrap(), 9);
    });
    assert!(lock.state().is_free());
}

#[test]
fn value_access_without_locking() {
    let mut lock = RwuLock::<Vec<u8>>::default();
    lock.get_mut().push(1);
    let lock: RwuLock<Vec<u8>> = RwuLock::from(lock.into_inner());
    assert_eq!(lock.into_inner(), vec![1]);
    let unsized_lock: &RwuLock<[u8]> = &RwuLock::new([1u8, 2, 3]);
    assert_eq!(unsized_lock.read().len(), 3);
}

#[test]
fn debug_shows_the_value_or_that_it_is_locked() {
    let lock = RwuLock::new(7);
    assert_eq!(
        format!("{lock:?}"),
        "RwuLock { value: 7, state: WordState { read_count: 0, update: false, write: false, wait_count: 0 } }"
    );
    let w = lock.write();
    assert!(format!("{lock:?}").starts_with("RwuLock { value: <locked>"));
    assert_eq!(format!("{w:?}"), "7");
}

#[test]
fn send_and_sync_bounds() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<RwuLock<Vec<u8>>>();
    send_sync::<ReadGuard<'static, u64>>();
    send_sync::<UpdateGuard<'static, u64>>();
    send_sync::<WriteGuard<'static, u64>>();
    // A lock around a `Send` but not `Sync` value can still move between threads.
    send::<RwuLock<std::cell::Cell<u8>>>();
}
