//! Stdout of the node: one event per line, optionally prefixed with the `CLOCK_MONOTONIC` time.
//!
//! With `--mono`, each line starts with the time in nanoseconds on `CLOCK_MONOTONIC`, which on
//! Linux is one clock for every process of the machine (unlike `std::time::Instant`, whose
//! values mean nothing outside the process), so a driver can order the lines of several nodes
//! and its own actions on one time line. The time is taken when the line is written, under the
//! stdout lock, so the prefixes of one process never go backwards.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static MONO: AtomicBool = AtomicBool::new(false);

/// Prefixes every later line with the `CLOCK_MONOTONIC` time (`--mono`).
pub fn set_mono(on: bool) {
    MONO.store(on, Ordering::Relaxed);
}

/// Nanoseconds on `CLOCK_MONOTONIC` (comparable across the processes of one machine).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC is always supported on Linux,
    // and clock_gettime writes nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Writes one line to stdout (with the time first under `--mono`). A closed stdout is ignored:
/// the node keeps serving its peers. Whatever the line holds, it stays one line: a line feed,
/// carriage return or other control or invisible character in it is written escaped
/// (`locks_core::escape`), though everything printed is escaped before it gets here (lock
/// paths by `slash`, names by their character set).
pub fn emit(line: &str) {
    let escaped;
    let line = if line
        .chars()
        .any(|c| c != '\\' && locks_core::escape::needs_escape(c))
    {
        escaped = locks_core::escape::Escaped::new(line).to_string();
        escaped.as_str()
    } else {
        line
    };
    let mut out = std::io::stdout().lock();
    let _ = if MONO.load(Ordering::Relaxed) {
        writeln!(out, "{} {line}", monotonic_ns())
    } else {
        writeln!(out, "{line}")
    };
    let _ = out.flush();
}

/// `println!` for the node's stdout: formats, then [`emit`]s.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::node_cli::out::emit(&format!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0);
        assert!(b >= a);
    }
}
