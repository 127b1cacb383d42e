//! Decoding a buffer that claims a huge length must not allocate for the claim. This binary
//! installs a global allocator that records, per thread, the largest single allocation, and
//! checks it around the decode of crafted buffers.

use locks_core::codec::{self, DEFAULT_MAX_FRAME, decode_envelope};
use locks_core::proto::{Envelope, PROTOCOL_VERSION};
use locks_core::{Key, LockId};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Tracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: the thread-local may already be gone while a thread is torn down.
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every call is forwarded unchanged to the system allocator; the bookkeeping only
// touches a `Cell<usize>` thread-local with const initialisation, which never allocates.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded with the caller's layout, under the caller's contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as above; `ptr` and `layout` come from this allocator, i.e. from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Tracking = Tracking;

/// The largest single allocation `f` makes on this thread.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    let out = f();
    (out, LARGEST.with(Cell::get))
}

/// serde preallocates a sequence to at most 1 MiB, whatever its claimed length.
const ONE_MIB: usize = 1 << 20;

fn claim_2_pow_40() -> Vec<u8> {
    let mut out = vec![253];
    out.extend_from_slice(&(1u64 << 40).to_le_bytes());
    out
}

#[test]
fn a_2_pow_40_element_vector_claim_does_not_allocate() {
    let claim = claim_2_pow_40();
    let (result, largest) =
        largest_allocation(|| codec::decode::<Vec<u64>>(&claim, DEFAULT_MAX_FRAME));
    assert!(result.is_err());
    assert!(largest <= ONE_MIB, "largest allocation {largest} bytes");

    let (result, largest) =
        largest_allocation(|| codec::decode::<LockId>(&claim, DEFAULT_MAX_FRAME));
    assert!(result.is_err());
    assert!(largest <= ONE_MIB, "largest allocation {largest} bytes");

    let (result, largest) =
        largest_allocation(|| codec::decode::<Vec<Key>>(&claim, DEFAULT_MAX_FRAME));
    assert!(result.is_err());
    assert!(largest <= ONE_MIB, "largest allocation {largest} bytes");
}

#[test]
fn a_2_pow_40_byte_string_claim_does_not_allocate() {
    // Message::Server(ServerRequest::RemoveAgent { agent }) with a node name of 2^40 bytes.
    let mut bytes = vec![PROTOCOL_VERSION as u8, 0, 4];
    bytes.extend_from_slice(&claim_2_pow_40());
    let (result, largest) = largest_allocation(|| decode_envelope(&bytes));
    assert!(result.is_err());
    assert!(largest <= ONE_MIB, "largest allocation {largest} bytes");
    let (result, largest) = largest_allocation(|| codec::decode::<Envelope>(&bytes, 64));
    assert!(result.is_err());
    assert!(largest <= ONE_MIB, "largest allocation {largest} bytes");
}

#[test]
fn a_60_mib_string_claim_in_a_small_frame_does_not_allocate() {
    // Below the hard frame limit, so only the per-buffer claim limit stops it.
    let mut bytes = vec![PROTOCOL_VERSION as u8, 0, 4, 253];
    bytes.extend_from_slice(&(60u64 << 20).to_le_bytes());
    let (result, largest) = largest_allocation(|| decode_envelope(&bytes));
    assert!(result.is_err());
    assert!(largest <= 64 << 10, "largest allocation {largest} bytes");
}
