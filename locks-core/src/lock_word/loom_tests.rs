//! Loom models of the lock word: every interleaving (up to `LOOM_MAX_PREEMPTIONS` preemptions)
//! and every memory-order outcome loom knows of, for small scenarios of Chronicle Map's procedures.
//!
//! The protected data sits in a `loom::cell::UnsafeCell`: loom fails a model when two accesses
//! to it conflict without a happens-before edge between them, so a missing exclusion *or* a
//! too-weak ordering on an acquire or release shows up as a failure. Time-limited procedures run
//! under [`Attempts`] (loom has no clock), so every model terminates.
//!
//! Run: `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2
//! cargo test -p locks-core --release --lib loom`.

// The data cell is loom's `UnsafeCell`, which hands out raw pointers; every dereference below
// is checked by loom itself (that is the point of the model).
#![allow(unsafe_code)]

use super::{Access, Attempts, LockWord, LockWordError, WordState};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;

/// A lock word and the data it protects.
#[derive(Default)]
struct Guarded {
    word: LockWord,
    data: UnsafeCell<u64>,
}

impl Guarded {
    fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Reads the data; the caller claims a read, update or write lock.
    fn get(&self) -> u64 {
        // SAFETY: loom tracks this access; a concurrent write without happens-before fails the
        // model, which is the property under test.
        self.data.with(|p| unsafe { *p })
    }

    /// Writes the data; the caller claims the write lock.
    fn set(&self, value: u64) {
        // SAFETY: as in `get`: loom reports any conflicting concurrent access.
        self.data.with_mut(|p| unsafe { *p = value })
    }
}

#[test]
fn loom_read_write_exclusion() {
    loom::model(|| {
        let g = Guarded::new();
        let writer = {
            let g = g.clone();
            thread::spawn(move || {
                if g.word.write_with_limit(&mut Attempts::new(2)).is_ok() {
                    g.set(g.get() + 1);
                    g.word.release_write().unwrap();
                    return true;
                }
                false
            })
        };
        let reader = {
            let g = g.clone();
            thread::spawn(move || {
                if g.word.read_with_limit(&mut Attempts::new(1)).is_ok() {
                    assert!(g.get() <= 1);
                    g.word.release_read().unwrap();
                }
            })
        };
        if g.word.read_with_limit(&mut Attempts::new(1)).is_ok() {
            let seen = g.get();
            assert!(seen <= 1);
            assert!(!g.word.state().write_held());
            g.word.release_read().unwrap();
        }
        reader.join().unwrap();
        let wrote = writer.join().unwrap();
        assert_eq!(g.get(), u64::from(wrote));
        // No lock and no waiter left behind, whichever way it went.
        assert_eq!(g.word.state(), WordState::FREE);
    });
}

#[test]
fn loom_update_write_exclusion() {
    loom::model(|| {
        let g = Guarded::new();
        let writer = {
            let g = g.clone();
            thread::spawn(move || {
                if g.word.write_with_limit(&mut Attempts::new(1)).is_ok() {
                    g.set(7);
                    g.word.release_write().unwrap();
                }
            })
        };
        if g.word.update_with_limit(&mut Attempts::new(1)).is_ok() {
            let seen = g.get();
            assert!(seen == 0 || seen == 7);
            g.word.release_update().unwrap();
        }
        writer.join().unwrap();
        assert_eq!(g.word.state(), WordState::FREE);
    });
}

#[test]
fn loom_update_holders_exclude_each_other() {
    loom::model(|| {
        let word = Arc::new(LockWord::new());
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (word, inside) = (word.clone(), inside.clone());
                thread::spawn(move || {
                    if word.try_update().is_ok() {
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                        inside.fetch_sub(1, Ordering::SeqCst);
                        word.release_update().unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(word.state(), WordState::FREE);
    });
}

#[test]
fn loom_upgrade_excludes_readers() {
    loom::model(|| {
        let g = Guarded::new();
        assert!(g.word.try_update().is_ok());
        let updater = {
            let g = g.clone();
            thread::spawn(move || {
                let before = g.get();
                match g.word.upgrade_with_limit(&mut Attempts::new(1)) {
                    Ok(()) => {
                        g.set(before + 1);
                        g.word.release_write().unwrap();
                    }
                    Err(e) => {
                        assert_eq!(e, LockWordError::TimedOut(Access::Write));
                        g.word.release_update().unwrap();
                    }
                }
            })
        };
        if g.word.try_read().is_ok() {
            assert!(g.get() <= 1);
            g.word.release_read().unwrap();
        }
        updater.join().unwrap();
        assert_eq!(g.word.state(), WordState::FREE);
    });
}

#[test]
fn loom_downgrade_to_read_keeps_writers_out() {
    loom::model(|| {
        let g = Guarded::new();
        let first = {
            let g = g.clone();
            thread::spawn(move || {
                if g.word.try_write().is_ok() {
                    g.set(10);
                    g.word.downgrade_to_read().unwrap();
                    // Still a reader: no writer can have come in between.
                    assert_eq!(g.get(), 10);
                    g.word.release_read().unwrap();
                }
            })
        };
        if g.word.write_with_limit(&mut Attempts::new(1)).is_ok() {
            g.set(20);
            g.word.release_write().unwrap();
        }
        first.join().unwrap();
        assert_eq!(g.word.state(), WordState::FREE);
    });
}

#[test]
fn loom_downgrade_to_update_admits_readers_only() {
    loom::model(|| {
        let g = Guarded::new();
        let first = {
            let g = g.clone();
            thread::spawn(move || {
                if g.word.try_write().is_ok() {
                    g.set(10);
                    g.word.downgrade_to_update().unwrap();
                    assert_eq!(g.get(), 10);
                    g.word.release_update().unwrap();
                }
            })
        };
        // A second update holder never overlaps the downgraded one; readers may.
        if g.word.try_update().is_ok() {
            let seen = g.get();
            assert!(seen == 0 || seen == 10);
            g.word.release_update().unwrap();
        } else if g.word.try_read().is_ok() {
            let seen = g.get();
            assert!(seen == 0 || seen == 10);
            g.word.release_read().unwrap();
        }
        first.join().unwrap();
        assert_eq!(g.word.state(), WordState::FREE);
    });
}

#[test]
fn loom_writers_exclude_each_other_and_keep_waits() {
    loom::model(|| {
        let g = Guarded::new();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let g = g.clone();
                thread::spawn(move || {
                    if g.word.write_with_limit(&mut Attempts::new(1)).is_ok() {
                        g.set(g.get() + 1);
                        g.word.release_write().unwrap();
                        return 1;
                    }
                    0
                })
            })
            .collect();
        let wrote: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(g.get(), wrote);
        // Releases carried every waiter's registration over, and every waiter took it back off.
        assert_eq!(g.word.state(), WordState::FREE);
    });
}

#[test]
fn loom_registered_wait_keeps_readers_out() {
    loom::model(|| {
        let word = Arc::new(LockWord::new());
        let registered = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (word, registered) = (word.clone(), registered.clone());
            thread::spawn(move || {
                word.register_wait().unwrap();
                registered.store(true, Ordering::Release);
            })
        };
        let saw_waiter = registered.load(Ordering::Acquire);
        let read = word.try_read();
        let update = word.try_update();
        if saw_waiter {
            // The registration happened before these attempts: both must be refused.
            assert!(matches!(read, Err(LockWordError::WouldBlock { .. })));
            assert!(matches!(update, Err(LockWordError::WouldBlock { .. })));
        }
        if read.is_ok() {
            word.release_read().unwrap();
        }
        if update.is_ok() {
            word.release_update().unwrap();
        }
        waiter.join().unwrap();
        assert_eq!(word.state().wait_count(), 1);
        word.deregister_wait().unwrap();
        assert_eq!(word.state(), WordState::FREE);
    });
}

#[test]
fn loom_waiting_writer_keeps_new_readers_out() {
    loom::model(|| {
        let g = Guarded::new();
        // An old reader holds the lock, so the writer has to register and wait.
        assert!(g.word.try_read().is_ok());
        let writer = {
            let g = g.clone();
            thread::spawn(move || {
                let result = g.word.write_with_limit(&mut Attempts::new(2));
                if result.is_ok() {
                    g.set(1);
                    g.word.release_write().unwrap();
                }
                result
            })
        };
        let newcomer = {
            let g = g.clone();
            thread::spawn(move || {
                let saw_waiter = g.word.state().wait_count() > 0;
                let got_in = g.word.try_read().is_ok();
                if got_in {
                    let _ = g.get();
                    g.word.release_read().unwrap();
                }
                (saw_waiter, got_in)
            })
        };
        let (saw_waiter, got_in) = newcomer.join().unwrap();
        // The old reader leaves only now, so a writer that succeeded was registered during the
        // whole of the newcomer's attempt: a newcomer that saw it must have been refused.
        g.word.release_read().unwrap();
        let result = writer.join().unwrap();
        if result.is_ok() && saw_waiter {
            assert!(!got_in, "a new reader got in while a writer waited");
        }
        if let Err(e) = result {
            assert_eq!(e, LockWordError::TimedOut(Access::Write));
        }
        assert_eq!(g.word.state(), WordState::FREE);
    });
}

/// The single `fetch_sub` releases and downgrades that `RwuLock`'s guards use (module
/// `held`): they must publish the holder's writes exactly like Chronicle Map's CAS releases.
#[test]
fn loom_held_releases_publish_writes() {
    loom::model(|| {
        let g = Guarded::new();
        let first = {
            let g = g.clone();
            thread::spawn(move || {
                if g.word.try_write().is_ok() {
                    g.set(10);
                    g.word.downgrade_to_update_held();
                    assert_eq!(g.get(), 10);
                    g.word.release_update_held();
                }
            })
        };
        let second = {
            let g = g.clone();
            thread::spawn(move || {
                if g.word.write_with_limit(&mut Attempts::new(1)).is_ok() {
                    g.set(20);
                    g.word.downgrade_to_read_held();
                    assert_eq!(g.get(), 20);
                    g.word.release_read_held();
                }
            })
        };
        if g.word.try_write().is_ok() {
            g.set(30);
            g.word.release_write_held();
        }
        first.join().unwrap();
        second.join().unwrap();
        assert_eq!(g.word.state(), WordState::FREE);
    });
}

/// The blocking paths of `RwuLock` (short spins, then registration, then waiting without
/// limit) under loom: a blocking writer or upgrader against a reader, with a census of who is
/// inside. (The reader only tries: two spinning threads exceed loom's branch budget.)
#[test]
fn loom_rwu_blocking_write_and_upgrade() {
    use crate::RwuLock;
    for upgrade in [false, true] {
        loom::model(move || {
            let lock = Arc::new(RwuLock::new(0u64));
            let writer_inside = Arc::new(AtomicBool::new(false));
            let readers_inside = Arc::new(AtomicUsize::new(0));
            let writer = {
                let (lock, w, r) = (lock.clone(), writer_inside.clone(), readers_inside.clone());
                thread::spawn(move || {
                    let mut guard = if upgrade {
                        lock.update().upgrade()
                    } else {
                        lock.write()
                    };
                    w.store(true, Ordering::SeqCst);
                    assert_eq!(r.load(Ordering::SeqCst), 0);
                    *guard += 1;
                    w.store(false, Ordering::SeqCst);
                })
            };
            if let Some(guard) = lock.try_read() {
                readers_inside.fetch_add(1, Ordering::SeqCst);
                assert!(!writer_inside.load(Ordering::SeqCst));
                assert!(*guard <= 1);
                readers_inside.fetch_sub(1, Ordering::SeqCst);
            }
            writer.join().unwrap();
            assert_eq!(*lock.read(), 1);
            assert_eq!(lock.state(), WordState::FREE);
        });
    }
}
