//! Randomized end to end: 16 clients on one node take random sets of read and write locks on a
//! small tree, in random orders, so deadlocks are frequent. Every transaction must end with all
//! its locks, and an oracle that sees every transaction while it holds everything finds no two
//! incompatible holders — on one lock, or on a lock and its ancestor or descendant (expanded
//! with the intention modes). Bounded in iterations; a hang fails at the harness bound. The same
//! across two nodes linked by TCP: each lock on one node, the other, or both, so that the
//! notices of a lock and its ancestors reach the agents of the other node as runs.

mod common;

use common::{Harness, bounded, cluster};
use locks_agent::{Options, Req, begin_transaction};
use locks_core::{LockId, Mode, ModeTable, NodeId, lock_id};
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

/// What a client of the two-node test holds: `(lock, node)` copies with their modes, the
/// ancestors' intention modes included.
type Copies = Vec<((LockId, NodeId), Mode)>;

/// The copies of `direct` (each lock on its nodes), expanded as [`expand`] does.
fn expand_on(direct: &[(LockId, Mode, Vec<NodeId>)], modes: &ModeTable) -> Copies {
    direct
        .iter()
        .flat_map(|(lock, mode, nodes)| {
            let expanded = expand(&[(lock.clone(), *mode)], modes);
            nodes
                .iter()
                .flat_map(move |n| {
                    expanded
                        .clone()
                        .into_iter()
                        .map(move |(l, m)| ((l, n.clone()), m))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Who holds which copies now, checked as each client enters.
#[derive(Default)]
struct CopyOracle {
    holding: HashMap<u64, Copies>,
    checks: usize,
}

impl CopyOracle {
    fn enter(&mut self, client: u64, held: Copies, modes: &ModeTable) {
        for (other, theirs) in &self.holding {
            for (copy, mine) in &held {
                for (their_copy, their_mode) in theirs {
                    assert!(
                        copy != their_copy || modes.compatible(*mine, *their_mode),
                        "clients {client} ({mine}) and {other} ({their_mode}) both hold {} on {}",
                        copy.0,
                        copy.1
                    );
                }
            }
        }
        self.checks += 1;
        self.holding.insert(client, held);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_two_nodes_lock_random_sets_on_either_or_both_and_never_conflict() {
    let hs = cluster(&["ra", "rb"]).await;
    let names = [hs[0].node.id().clone(), hs[1].node.id().clone()];
    let modes = ModeTable::standard();
    let oracle = Arc::new(Mutex::new(CopyOracle::default()));
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let node = hs[(client % 2) as usize].node.clone();
        let (names, oracle, modes) = (names.clone(), oracle.clone(), modes.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (client + 1).wrapping_mul(0x2545_F491));
            for _ in 0..ROUNDS {
                let set: Vec<(LockId, Mode, Vec<NodeId>)> = random_set(&mut rng)
                    .into_iter()
                    .map(|(lock, mode)| {
                        let nodes = match rng.below(3) {
                            0 => vec![names[0].clone()],
                            1 => vec![names[1].clone()],
                            _ => names.to_vec(),
                        };
                        (lock, mode, nodes)
                    })
                    .collect();
                let txn = begin_transaction(&node, Options::default()).await.unwrap();
                for (lock, mode, nodes) in &set {
                    txn.lock_nowait_on(lock.clone(), *mode, nodes, Req::All)
                        .await
                        .unwrap();
                }
                txn.await_all_locks().await.unwrap();
                oracle
                    .lock()
                    .unwrap()
                    .enter(client, expand_on(&set, &modes), &modes);
                tokio::task::yield_now().await;
                oracle.lock().unwrap().holding.remove(&client);
                txn.end().await.unwrap();
            }
        }));
    }
    for task in tasks {
        bounded(task).await.unwrap();
    }
    assert_eq!(oracle.lock().unwrap().checks, CLIENTS as usize * ROUNDS);
    for h in &hs {
        h.wait_all_released().await;
    }
}
