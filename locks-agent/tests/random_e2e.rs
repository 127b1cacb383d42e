//! Randomized end to end: 16 clients on one node take random sets of read and write locks on a
//! small tree, in random orders, so deadlocks are frequent. Every transaction must end with all
//! its locks, and an oracle that sees every transaction while it holds everything finds no two
//! incompatible holders — on one lock, or on a lock and its ancestor or descendant (expanded
//! with the intention modes). Bounded in iterations; a hang fails at the harness bound.

mod common;

use common::{Harness, bounded};
use locks_agent::{Options, begin_transaction};
use locks_core::{LockId, Mode, ModeTable, lock_id};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const CLIENTS: u64 = 16;
const ROUNDS: usize = 12;

/// Every lock a holder effectively has: its direct locks, and the intention mode on each
/// ancestor of each of them.
fn expand(direct: &[(LockId, Mode)], modes: &ModeTable) -> Vec<(LockId, Mode)> {
    let mut out = Vec::new();
    for (lock, mode) in direct {
        out.push((lock.clone(), *mode));
        for ancestor in lock.ancestors() {
            out.push((ancestor, modes.intention(*mode)));
        }
    }
    out
}

#[derive(Default)]
struct Oracle {
    /// What each client holds right now (expanded).
    holding: HashMap<u64, Vec<(LockId, Mode)>>,
    checks: usize,
}

impl Oracle {
    fn enter(&mut self, client: u64, held: Vec<(LockId, Mode)>, modes: &ModeTable) {
        for (other, theirs) in &self.holding {
            for (lock, mine) in &held {
                for (their_lock, their_mode) in theirs {
                    assert!(
                        lock != their_lock || modes.compatible(*mine, *their_mode),
                        "clients {client} ({mine}) and {other} ({their_mode}) both hold {lock}"
                    );
                }
            }
        }
        self.checks += 1;
        self.holding.insert(client, held);
    }

    fn leave(&mut self, client: u64) {
        self.holding.remove(&client);
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_set(rng: &mut Rng) -> Vec<(LockId, Mode)> {
    // A tree of one root, 3 tables and 3 rows per table.
    let mut set: Vec<(LockId, Mode)> = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let table = rng.below(3) as i64;
        let lock = match rng.below(4) {
            0 => lock_id!["db", table],
            _ => lock_id!["db", table, rng.below(3) as i64],
        };
        let mode = if rng.below(3) == 0 {
            Mode::READ
        } else {
            Mode::WRITE
        };
        if let Some(existing) = set.iter_mut().find(|(l, _)| *l == lock) {
            existing.1 = std::cmp::max(existing.1, mode);
        } else {
            set.push((lock, mode));
        }
    }
    if rng.below(10) == 0 {
        set.push((lock_id!["db"], Mode::READ));
    }
    set
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_clients_random_lock_sets_all_complete_and_never_conflict() {
    let h = Harness::new("random").await;
    let modes = ModeTable::standard();
    let oracle = Arc::new(Mutex::new(Oracle::default()));
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let (node, oracle, modes) = (h.node.clone(), oracle.clone(), modes.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ (client + 1).wrapping_mul(0x9E37_79B9));
            let mut deadlocks = 0;
            for _ in 0..ROUNDS {
                let set = random_set(&mut rng);
                let txn = begin_transaction(&node, Options::default()).await.unwrap();
                for (lock, mode) in &set {
                    txn.lock_nowait(lock.clone(), *mode).await.unwrap();
                }
                let result = txn.await_all_locks().await.unwrap();
                deadlocks += usize::from(!result.deadlocks.is_empty());
                oracle
                    .lock()
                    .unwrap()
                    .enter(client, expand(&set, &modes), &modes);
                tokio::task::yield_now().await;
                oracle.lock().unwrap().leave(client);
                txn.end().await.unwrap();
            }
            deadlocks
        }));
    }
    let mut deadlocks = 0;
    for task in tasks {
        deadlocks += bounded(task).await.unwrap();
    }
    let checks = oracle.lock().unwrap().checks;
    assert_eq!(checks, CLIENTS as usize * ROUNDS);
    println!("{checks} transactions checked, {deadlocks} of them went through a deadlock");
    // Every transaction ended: the releases follow on the node's thread.
    h.wait_all_released().await;
}
