//! The concurrency primitives the lock word uses: `std`'s normally, `loom`'s under `--cfg loom`,
//! so the very same code is model-checked (the facade of tokio's `src/loom/mod.rs`).
//!
//! Besides the atomics, the facade owns the *yielding directives* Chronicle Map's lock word allows between failed
//! attempts: under loom every one of them becomes `loom::thread::yield_now`, which tells the
//! model checker that the thread waits for another one (a spin loop without it never ends in a
//! model), and there is no real sleeping.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

/// A hint that this thread busy-waits (x86 `PAUSE`).
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Lets the OS (or loom) run another thread on this CPU.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// Gives the CPU away for a while. Under loom time does not exist, so this only yields.
#[inline]
pub(crate) fn sleep(duration: Duration) {
    #[cfg(loom)]
    {
        let _ = duration;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    std::thread::sleep(duration);
}
