//! Figures for the lock table, without actors (BENCHMARKS.md, "Lock table"):
//! - memory: bytes per held lock with 1,000,000 single-level write locks held by 1,000 agents,
//!   measured by a counting global allocator (live heap bytes, table only);
//! - throughput: requests + releases per second for uncontended locks and for one hot lock
//!   that 8 agents take in turn.
//!
//! Run: `cargo run --release -p locks-server --example table_figures`

use locks_core::proto::ServerRequest;
use locks_core::{AgentId, Key, LockId, Mode, ModeTable, NodeId};
use locks_server::state_machine::LockTable;
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

/// The system allocator, counting live bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract is `System`'s; the counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded; the caller upholds `alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded; the caller upholds `alloc_zeroed`'s contract.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded; `ptr` was allocated by this allocator (hence by `System`) with
        // `layout`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded; `ptr` was allocated by `System` with `layout`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size, Relaxed);
            LIVE.fetch_sub(layout.size(), Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn node() -> NodeId {
    NodeId::new("bench").expect("valid node name")
}

fn agent(n: u64) -> AgentId {
    AgentId::new(node(), 1, n)
}

/// Bytes per held lock: `agents` agents each hold `per_agent` single-level write locks.
fn memory(agents: u64, per_agent: u64, key: impl Fn(u64) -> Key) -> f64 {
    let ids: Vec<AgentId> = (0..agents).map(agent).collect();
    let before = LIVE.load(Relaxed);
    let mut table = LockTable::new(node(), ModeTable::standard(), 0);
    for (a, id) in ids.iter().enumerate() {
        for i in 0..per_agent {
            let lock = LockId::from(key(a as u64 * per_agent + i));
            let fx = table.handle(ServerRequest::Lock {
                agent: id.clone(),
                lock,
                mode: Mode::X,
            });
            black_box(fx);
        }
    }
    let used = LIVE.load(Relaxed) - before;
    assert_eq!(table.lock_count() as u64, agents * per_agent);
    drop(table);
    used as f64 / (agents * per_agent) as f64
}

/// Requests + releases per second: one agent at a time takes and releases a free lock.
fn uncontended(pairs: u64) -> f64 {
    let agents: Vec<AgentId> = (0..1_000).map(agent).collect();
    let locks: Vec<LockId> = (0..10_000i64).map(|i| LockId::from(Key::Int(i))).collect();
    let mut table = LockTable::new(node(), ModeTable::standard(), 0);
    let start = Instant::now();
    for i in 0..pairs {
        let a = &agents[(i % 1_000) as usize];
        let l = &locks[(i % 10_000) as usize];
        black_box(table.handle(ServerRequest::Lock {
            agent: a.clone(),
            lock: l.clone(),
            mode: Mode::X,
        }));
        black_box(table.handle(ServerRequest::Unlock {
            agent: a.clone(),
            lock: l.clone(),
        }));
    }
    (2 * pairs) as f64 / start.elapsed().as_secs_f64()
}

/// Requests + releases per second: 8 agents queue for one write lock; the holder releases it
/// (the next is granted, the waiters are told) and queues again.
fn hot(rounds: u64) -> (f64, f64) {
    let agents: Vec<AgentId> = (0..8).map(agent).collect();
    let hot = LockId::from(["hot"]);
    let mut table = LockTable::new(node(), ModeTable::standard(), 0);
    for a in &agents {
        table.handle(ServerRequest::Lock {
            agent: a.clone(),
            lock: hot.clone(),
            mode: Mode::X,
        });
    }
    let mut messages = 0usize;
    let start = Instant::now();
    for i in 0..rounds {
        let a = &agents[(i % 8) as usize];
        let fx = table.handle(ServerRequest::Unlock {
            agent: a.clone(),
            lock: hot.clone(),
        });
        messages += fx.len();
        black_box(fx);
        let fx = table.handle(ServerRequest::Lock {
            agent: a.clone(),
            lock: hot.clone(),
            mode: Mode::X,
        });
        messages += fx.len();
        black_box(fx);
    }
    let secs = start.elapsed().as_secs_f64();
    (
        (2 * rounds) as f64 / secs,
        messages as f64 / (2 * rounds) as f64,
    )
}

fn main() {
    let int_keys = memory(1_000, 1_000, |i| Key::Int(i as i64));
    println!(
        "memory: 1,000,000 single-level write locks held by 1,000 agents: {int_keys:.1} bytes per held lock (integer keys)"
    );
    let str_keys = memory(1_000, 1_000, |i| Key::from(format!("acct-{i:08}")));
    println!(
        "memory: same with 13-byte string keys: {str_keys:.1} bytes per held lock (key payload included)"
    );
    let _ = uncontended(100_000);
    let up = uncontended(2_000_000);
    println!(
        "uncontended: {:.2} M requests+releases per second",
        up / 1e6
    );
    let _ = hot(100_000);
    let (hp, per_op) = hot(1_000_000);
    println!(
        "one hot lock, 8 agents: {:.2} M requests+releases per second ({per_op:.1} messages per operation)",
        hp / 1e6
    );
}
