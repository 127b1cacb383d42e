//! Giving freed memory back to the system: after the node released what clients held (a
//! session ended, a client connection closed, a peer went down), a thread of its own asks the
//! allocators to return their free pages (every jemalloc arena purged, `malloc_trim(0)` under
//! glibc).
//!
//! Why: an allocator keeps the pages it freed in its arenas (glibc's malloc until it is
//! trimmed, jemalloc until a later allocation in the same arena finds their decay time past),
//! so a node whose clients once held a million locks keeps that memory after they are gone,
//! and a client that fills and empties sessions in a loop ratchets the node up to its worst
//! case. A purge of every jemalloc arena and `malloc_trim(0)` return every whole free page.
//!
//! What this module guarantees:
//! - nothing here runs on the node's thread but [`Trimmer::nudge`], which only wakes the
//!   trimming thread (a bounded channel of one slot: a nudge while one is pending is free);
//! - the allocator is trimmed at most once per [`GAP`]; after a nudge it is trimmed a [`GAP`]
//!   apart until [`ROUNDS`] trims in a row gave nothing back (at most [`MAX_ROUNDS`] times):
//!   what a release frees after the event that announced it (a large session's locks are
//!   released over many turns of the node's thread, slower on a loaded machine) is returned
//!   too;
//! - the node allocates with jemalloc (the `node` binary's global allocator on unix: per-thread
//!   caches, a tenth to a sixth less CPU per operation on the serving node than glibc's
//!   malloc); its arenas keep freed pages for a while (their decay) and return them as later
//!   allocations pass by, so an idle node would keep them: the trimmer purges them. glibc's
//!   malloc, which serves C code, is trimmed too; where neither exists nothing is done.

use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

/// The shortest time between two trims.
pub const GAP: Duration = Duration::from_millis(500);

/// How many trims in a row that give nothing back end the trims that follow a nudge.
pub const ROUNDS: u32 = 4;

/// The most trims that follow one nudge: a release that goes on for longer (a paced release of
/// millions of locks on a loaded machine) is trimmed again at its next nudge.
pub const MAX_ROUNDS: u32 = 240;

/// The handle that wakes the trimming thread. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Trimmer {
    wake: SyncSender<()>,
}

impl Trimmer {
    /// Starts the trimming thread; it ends when every [`Trimmer`] is dropped.
    pub fn start() -> std::io::Result<Trimmer> {
        let (wake, woken) = sync_channel(1);
        std::thread::Builder::new()
            .name("trim".to_owned())
            .spawn(move || run(&woken, trim))?;
        Ok(Trimmer { wake })
    }

    /// Says that memory may have been freed: the thread trims soon (see the module
    /// documentation). Never blocks.
    pub fn nudge(&self) {
        match self.wake.try_send(()) {
            // A nudge already waits: it covers this one.
            Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
        }
    }
}

/// The thread: waits for a nudge, then trims [`GAP`] apart as long as [`Rounds`] says, a
/// nudge meanwhile starting the count over. Then it waits again.
fn run(woken: &Receiver<()>, mut trim: impl FnMut() -> bool) {
    while woken.recv().is_ok() {
        let mut rounds = Rounds::default();
        while rounds.after_trim(trim()) {
            match woken.recv_timeout(GAP) {
                Ok(()) => rounds = Rounds::default(),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

/// When the trims that follow a nudge end: once [`ROUNDS`] trims in a row gave nothing back (a
/// release paced over many turns of the node's thread frees its memory over seconds, and a
/// trim that gives some back means more may follow), or after [`MAX_ROUNDS`] trims.
#[derive(Debug, Default)]
struct Rounds {
    idle: u32,
    done: u32,
}

impl Rounds {
    /// Counts a trim (`gave_back`: it returned memory); whether another one follows.
    fn after_trim(&mut self, gave_back: bool) -> bool {
        self.idle = if gave_back { 0 } else { self.idle + 1 };
        self.done += 1;
        self.idle < ROUNDS && self.done < MAX_ROUNDS
    }
}

/// Returns the allocators' free pages to the system; whether any came back.
///
/// The node's own allocations go to jemalloc (the binary's global allocator on unix): every
/// arena's unused pages are purged, whichever thread freed them. What C code allocates goes to
/// glibc's malloc, trimmed as well.
fn trim() -> bool {
    let before = resident_pages();
    let purged = purge_jemalloc();
    let trimmed = malloc_trim();
    trimmed || (purged && resident_pages() < before)
}

/// Purges the unused pages of every jemalloc arena; whether the call was made.
#[cfg(unix)]
fn purge_jemalloc() -> bool {
    // `MALLCTL_ARENAS_ALL` (4096) names every arena.
    const PURGE_ALL: &std::ffi::CStr = c"arena.4096.purge";
    // SAFETY: a void mallctl (no old or new value, null pointers and zero length, as jemalloc
    // documents for `arena.<i>.purge`) with a NUL-terminated name; it may be called from any
    // thread, jemalloc taking each arena's lock.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    rc == 0
}

/// No jemalloc: nothing to purge.
#[cfg(not(unix))]
fn purge_jemalloc() -> bool {
    false
}

/// glibc's `malloc_trim(0)`; whether it gave memory back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn malloc_trim() -> bool {
    // SAFETY: malloc_trim takes no pointer and may be called from any thread at any time; it
    // takes each arena's own lock while it walks it.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// No portable way to give glibc's memory back: nothing to do.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn malloc_trim() -> bool {
    false
}

/// The process's resident pages (`/proc/self/statm`), 0 where there is no such file.
fn resident_pages() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_nudge_gives_its_rounds_and_the_thread_ends_with_its_handles() {
        let (wake, woken) = sync_channel(1);
        let trimmer = Trimmer { wake };
        let count = Arc::new(Mutex::new(0u32));
        let counted = count.clone();
        trimmer.nudge();
        // Nudges while one waits are free.
        trimmer.nudge();
        trimmer.nudge();
        let thread = std::thread::spawn(move || {
            run(&woken, || {
                *counted.lock().unwrap() += 1;
                false
            });
        });
        drop(trimmer);
        thread.join().unwrap();
        // One pending nudge: its first round, then the handle was gone.
        let trims = *count.lock().unwrap();
        assert!((1..=ROUNDS).contains(&trims), "{trims}");
    }

    #[test]
    fn trims_go_on_while_they_give_memory_back_and_end_after_rounds_that_do_not() {
        let count = |gave_back: &dyn Fn(u32) -> bool| {
            let mut rounds = Rounds::default();
            let mut n = 0;
            loop {
                n += 1;
                if !rounds.after_trim(gave_back(n)) {
                    return n;
                }
            }
        };
        assert_eq!(count(&|_| false), ROUNDS);
        assert_eq!(count(&|n| n <= 6), 6 + ROUNDS);
        // Every other trim gives memory back: never ROUNDS idle in a row, so the cap ends it.
        assert_eq!(count(&|n| n % 2 == 0), MAX_ROUNDS);
        assert_eq!(count(&|_| true), MAX_ROUNDS);
    }
}
