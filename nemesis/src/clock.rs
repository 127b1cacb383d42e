//! The one clock of an experiment: `CLOCK_MONOTONIC` in nanoseconds.
//!
//! The node processes print their lines with this clock (`node --mono`) and the driver stamps
//! its own actions with it, so all of them sort on one time line (on one machine; the clock is
//! system-wide on Linux, unlike `std::time::Instant` values, which mean nothing outside their
//! process).

/// A point on `CLOCK_MONOTONIC`, in nanoseconds.
pub type Ns = u64;

/// Nanoseconds per millisecond.
pub const MS: Ns = 1_000_000;

/// Now, on `CLOCK_MONOTONIC`.
pub fn now() -> Ns {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and clock_gettime writes only to it;
    // CLOCK_MONOTONIC is always supported on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    (ts.tv_sec as Ns) * 1_000_000_000 + ts.tv_nsec as Ns
}

/// `ns` as milliseconds with one decimal, for reports.
pub fn ms(ns: Ns) -> String {
    format!("{:.1}", ns as f64 / MS as f64)
}
