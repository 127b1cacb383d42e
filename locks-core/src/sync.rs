#![allow(unused_imports)] // used once the lock word lands
//! The atomics the lock word uses: `std`'s normally, `loom`'s under `--cfg loom`, so the same
//! code is model-checked.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
