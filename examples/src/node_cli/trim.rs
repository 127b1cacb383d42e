//! Giving freed memory back to the system: after the node released what clients held (a
//! session ended, a client connection closed, a peer went down), a thread of its own asks the
//! allocator to return its free pages (`malloc_trim(0)` under glibc).
//!
//! Why: glibc's malloc keeps the pages it freed in its arenas (one per thread that allocated,
//! up to eight per core), so a node whose clients once held a million locks keeps that memory
//! after they are gone, and a client that fills and empties sessions in a loop ratchets the
//! node up to its worst case. `malloc_trim(0)` returns every whole free page of every arena.
//!
//! What this module guarantees:
//! - nothing here runs on the node's thread but [`Trimmer::nudge`], which only wakes the
//!   trimming thread (a bounded channel of one slot: a nudge while one is pending is free);
//! - the allocator is trimmed at most once per [`GAP`], and after a nudge [`ROUNDS`] times in a
//!   row, a [`GAP`] apart: what a release frees after the event that announced it (a large
//!   session's locks are released over several turns of the node's thread) is returned too;
//! - on a target without glibc the trimmer does nothing (other allocators give memory back on
//!   their own or not at all; there is no portable call).

use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

/// The shortest time between two trims.
pub const GAP: Duration = Duration::from_millis(500);

/// How many trims follow one nudge, [`GAP`] apart.
pub const ROUNDS: u32 = 4;

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

/// The thread: waits for a nudge, then trims [`ROUNDS`] times [`GAP`] apart (a nudge meanwhile
/// starts the rounds over), then waits again.
fn run(woken: &Receiver<()>, mut trim: impl FnMut()) {
    while woken.recv().is_ok() {
        let mut left = ROUNDS;
        while left > 0 {
            trim();
            left -= 1;
            match woken.recv_timeout(GAP) {
                Ok(()) => left = ROUNDS,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

/// Returns the allocator's free pages to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim takes no pointer and may be called from any thread at any time; it
    // takes each arena's own lock while it walks it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// No portable way to give memory back: nothing to do.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

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
            run(&woken, || *counted.lock().unwrap() += 1);
        });
        drop(trimmer);
        thread.join().unwrap();
        // One pending nudge: its first round, then the handle was gone.
        let trims = *count.lock().unwrap();
        assert!((1..=ROUNDS).contains(&trims), "{trims}");
    }
}
