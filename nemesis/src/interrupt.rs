//! SIGINT and SIGTERM end a run cleanly: the handler only sets a flag, the driver's waits see it
//! and return, and the run unwinds through the `Drop`s that kill the node processes and delete
//! the namespaces. (A SIGKILLed driver leaves them to [`crate::net::remove_stale`] of the next
//! run.)

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs the handler for SIGINT and SIGTERM.
pub fn install() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_signal` is an `extern "C" fn(c_int)` that does only an atomic store,
        // which is async-signal-safe; signal() touches no memory of ours.
        unsafe {
            libc::signal(signal, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// Whether SIGINT or SIGTERM arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
