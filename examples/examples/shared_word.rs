//! One lock word shared by two processes, as Chronicle Map uses it (Chronicle Map's).
//!
//! The parent creates a small file in a fresh temporary directory and maps it; the zero-filled
//! file is a free lock word followed by a counter. It starts a second copy of this program as a
//! child (`shared_word --child <file>`), which maps the same file. Both wait for each other, then
//! each adds 1 to the counter N times, every time under the write lock of the lock word in the
//! mapping, with a read of the counter and a separate write back (a lost update would show if
//! the two processes were ever inside together). The parent waits for the child and checks the
//! counter is exactly 2N.
//!
//! ```text
//! offset 0   lock word (Chronicle Map's layout: readers, update, write, waiters)
//! offset 8   counter
//! offset 16  processes arrived (a start barrier)
//! ```
//!
//! Run: `cargo run --release -p examples --example shared_word [N]` (N defaults to 200000).

use locks_core::lock_word::LockWordRef;
use memmap2::MmapMut;
use std::error::Error;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

const FILE_LEN: u64 = 64;
const DEFAULT_N: u64 = 200_000;
/// Time limit of each write-lock acquisition (Chronicle Map's design forbids waiting without limit).
const LOCK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long either process waits for the other to show up, and the parent for the child.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);

/// The three words of the shared file, borrowed from the mapping.
struct Shared<'a> {
    word: LockWordRef<'a>,
    counter: &'a AtomicU64,
    arrived: &'a AtomicU64,
}

/// Views the first three 8-byte words of `map` as atomics.
fn shared(map: &mut MmapMut) -> Result<Shared<'_>> {
    if map.len() < 24 {
        return Err("the shared file is too short".into());
    }
    let base = map.as_mut_ptr().cast::<u64>();
    if !base.is_aligned() {
        return Err("the mapping is not 8-byte aligned".into());
    }
    // SAFETY: (all three `from_ptr` calls) `base` is 8-byte aligned (checked; mappings are
    // page aligned) and points to at least 24 bytes that stay mapped, readable and writable for
    // as long as the `&mut MmapMut` borrow this function's result is tied to. Every access to
    // these bytes, in this process and in the other one, goes through these atomics; no `&[u8]`
    // view of the mapping is used while they live. (Atomics shared between processes are outside
    // Rust's memory model, which knows only threads; the same lock-free instructions on the same
    // physical memory are what Chronicle Map and every shared-memory lock rely on.)
    let (word, counter, arrived) = unsafe {
        (
            AtomicU64::from_ptr(base),
            AtomicU64::from_ptr(base.add(1)),
            AtomicU64::from_ptr(base.add(2)),
        )
    };
    Ok(Shared {
        word: LockWordRef::from_atomic(word),
        counter,
        arrived,
    })
}

/// Maps the file at `path` read-write and shared.
fn map(path: &Path) -> Result<MmapMut> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    // SAFETY: the file lives in a directory this program created for itself; only the parent and
    // the child map it, and they change it only through the atomics of `shared`. Nobody
    // truncates it while it is mapped (the parent removes it after the child has exited).
    Ok(unsafe { MmapMut::map_mut(&file)? })
}

/// What both processes do: meet at the start barrier, then add 1 to the counter `n` times under
/// the write lock.
fn work(shared: &Shared<'_>, n: u64, who: &str) -> Result<()> {
    shared.arrived.fetch_add(1, Ordering::SeqCst);
    let deadline = Instant::now() + PROCESS_TIMEOUT;
    while shared.arrived.load(Ordering::SeqCst) < 2 {
        if Instant::now() > deadline {
            return Err(format!("{who}: the other process never arrived").into());
        }
        std::thread::yield_now();
    }
    for _ in 0..n {
        shared.word.write_timeout(LOCK_TIMEOUT)?;
        // A read and a separate write: only mutual exclusion keeps increments from being lost.
        // Relaxed is enough: the lock word's acquire and release order these accesses.
        let value = shared.counter.load(Ordering::Relaxed);
        shared.counter.store(value + 1, Ordering::Relaxed);
        shared.word.release_write()?;
    }
    Ok(())
}

fn child(path: &Path, n: u64) -> Result<()> {
    let mut map = map(path)?;
    let shared = shared(&mut map)?;
    work(&shared, n, "child")
}

/// Waits for the child to exit, for at most [`PROCESS_TIMEOUT`].
fn wait_for(child: &mut Child) -> Result<()> {
    let deadline = Instant::now() + PROCESS_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            return if status.success() {
                Ok(())
            } else {
                Err(format!("the child failed: {status}").into())
            };
        }
        if Instant::now() > deadline {
            child.kill()?;
            return Err("the child did not finish in time".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn parent(dir: &Path, n: u64) -> Result<()> {
    let path = dir.join("lock-word.bin");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    file.set_len(FILE_LEN)?; // zero-filled: a free lock word and a zero counter
    drop(file);
    let mut map = map(&path)?;
    let shared = shared(&mut map)?;

    let mut child = Command::new(std::env::current_exe()?)
        .arg("--child")
        .arg(&path)
        .arg(n.to_string())
        .spawn()?;
    println!(
        "parent {} and child {} each add 1 to a shared counter {n} times under one lock word",
        std::process::id(),
        child.id()
    );
    let started = Instant::now();
    let mine = work(&shared, n, "parent");
    let theirs = wait_for(&mut child);
    mine?;
    theirs?;
    let elapsed = started.elapsed();

    let total = shared.counter.load(Ordering::SeqCst);
    println!("counter = {total} (expected {}) in {elapsed:.2?}", 2 * n);
    println!("lock word at the end: {}", shared.word.state());
    if total != 2 * n {
        return Err(format!("lost updates: {} of {}", 2 * n - total, 2 * n).into());
    }
    if !shared.word.state().is_free() {
        return Err("the lock word was left held".into());
    }
    println!("mutual exclusion held across the two processes");
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let path = PathBuf::from(args.get(1).ok_or("--child needs the file")?);
        let n = args.get(2).ok_or("--child needs N")?.parse()?;
        return child(&path, n);
    }
    let n = match args.first() {
        Some(n) => n.parse()?,
        None => DEFAULT_N,
    };
    let dir = std::env::temp_dir().join(format!("locks-shared-word-{}", std::process::id()));
    fs::create_dir(&dir)?;
    let result = parent(&dir, n);
    let _ = fs::remove_dir_all(&dir);
    result
}
