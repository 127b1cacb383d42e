//! The single-node scenarios of the Erlang test suite that concern deadlocks (tests 10 to
//! 14), StickyLocking's conversion deadlock and the original's granted-request bug, played on the simulated
//! network with the real lock table. "Client k: lock L ⇒ blocks" becomes "after everything in
//! flight is delivered, k is still waiting"; "kill k" ends k's transaction. Each scenario runs
//! under many delivery orders (seeds), and the simulation's oracles hold throughout.

mod sim;

use locks_agent::{Deadlock, Options, TransactionStatus};
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId, lock_id};
use sim::{Ask, Sim};

/// Delivery orders per scenario, unless `AGENT_SIM_SEEDS` asks for more.
const SEEDS: u64 = 40;

fn node() -> NodeId {
    NodeId::new("n1").unwrap()
}

fn agent(serial: u64) -> AgentId {
    AgentId::new(node(), 1, serial)
}

/// A network with one node and clients 1..=n (client k has agent id k: created in order).
fn setup(seed: u64, n: u64, options: impl Fn(u64) -> Options) -> Sim {
    let modes = ModeTable::standard();
    let mut sim = Sim::new(seed, modes.clone());
    sim.add_server(node(), 0);
    sim.auto_end = false;
    for k in 1..=n {
        sim.add_client(agent(k), options(k), vec![]);
    }
    sim
}

fn lock(sim: &mut Sim, k: u64, l: &LockId, mode: Mode) {
    sim.ask(&agent(k), Ask::on(&node(), l.clone(), mode))
        .expect("request accepted");
}

fn quiet(sim: &mut Sim) {
    sim.run(100_000)
        .unwrap_or_else(|e| panic!("{e}\n{}", sim.dump()));
}

/// "Kill k": ends k's transaction and delivers everything in flight.
fn kill(sim: &mut Sim, k: u64) {
    sim.kill(&agent(k));
    quiet(sim);
}

fn deadlocks(sim: &Sim, k: u64) -> Vec<Deadlock> {
    match sim.status(&agent(k)) {
        TransactionStatus::HaveAllLocks { deadlocks } => deadlocks,
        other => panic!(
            "client {k} should have all its locks: {other:?}\n{}",
            sim.dump()
        ),
    }
}

fn blocked(sim: &Sim, k: u64) {
    assert_eq!(
        sim.status(&agent(k)),
        TransactionStatus::Waiting,
        "client {k} should be blocked\n{}",
        sim.dump()
    );
}

#[test]
fn erlang_two_w_locks_parent_read_deadlock() {
    for seed in sim::seeds(SEEDS) {
        let (l0, l1, l2) = (lock_id!["t10"], lock_id!["t10", 1], lock_id!["t10", 2]);
        let mut sim = setup(seed, 2, |_| Options::default());
        lock(&mut sim, 1, &l1, Mode::X);
        quiet(&mut sim);
        lock(&mut sim, 2, &l2, Mode::X);
        quiet(&mut sim);
        lock(&mut sim, 1, &l0, Mode::S);
        quiet(&mut sim);
        blocked(&sim, 1);
        lock(&mut sim, 2, &l0, Mode::S);
        quiet(&mut sim);
        // Whoever surrendered, one of them has all its locks; it finishes first.
        let first = if sim.status(&agent(1)).have_all_locks() {
            1
        } else {
            2
        };
        let second = 3 - first;
        assert!(!deadlocks(&sim, first).is_empty(), "seed {seed}");
        kill(&mut sim, first);
        assert!(!deadlocks(&sim, second).is_empty(), "seed {seed}");
        kill(&mut sim, second);
    }
}

#[test]
fn erlang_two_clients_direct_deadlock() {
    for seed in sim::seeds(SEEDS) {
        let (a, b) = (lock_id!["t11", "a"], lock_id!["t11", "b"]);
        let mut sim = setup(seed, 2, |_| Options::default());
        lock(&mut sim, 1, &a, Mode::X);
        lock(&mut sim, 2, &b, Mode::X);
        quiet(&mut sim);
        lock(&mut sim, 1, &b, Mode::X);
        quiet(&mut sim);
        blocked(&sim, 1);
        lock(&mut sim, 2, &a, Mode::X);
        quiet(&mut sim);
        // Agent 2 (the larger) surrenders b; both record the same single deadlock.
        let expected = vec![Deadlock {
            victim: agent(2),
            lock: b.clone(),
            node: node(),
        }];
        assert_eq!(deadlocks(&sim, 1), expected, "seed {seed}");
        blocked(&sim, 2);
        kill(&mut sim, 1);
        assert_eq!(deadlocks(&sim, 2), expected, "seed {seed}");
        kill(&mut sim, 2);
    }
}

#[test]
fn erlang_three_clients_deadlock() {
    for seed in sim::seeds(SEEDS) {
        let (a, b, c) = (lock_id!["a"], lock_id!["b"], lock_id!["c"]);
        let mut sim = setup(seed, 3, |_| Options::default());
        lock(&mut sim, 1, &a, Mode::X);
        lock(&mut sim, 2, &b, Mode::X);
        lock(&mut sim, 3, &c, Mode::X);
        quiet(&mut sim);
        lock(&mut sim, 1, &c, Mode::X);
        lock(&mut sim, 2, &a, Mode::X);
        lock(&mut sim, 3, &b, Mode::X);
        quiet(&mut sim);
        // 3 surrenders c to 1; 2 was not in c's queue but is told.
        assert!(!deadlocks(&sim, 1).is_empty(), "seed {seed}");
        kill(&mut sim, 1);
        assert!(!deadlocks(&sim, 2).is_empty(), "seed {seed}");
        kill(&mut sim, 2);
        assert!(!deadlocks(&sim, 3).is_empty(), "seed {seed}");
        kill(&mut sim, 3);
    }
}

#[test]
fn erlang_two_clients_hierarchical_deadlock() {
    for seed in sim::seeds(SEEDS) {
        let (a, a1, b, b1) = (
            lock_id!["t13", "a"],
            lock_id!["t13", "a", 1],
            lock_id!["t13", "b"],
            lock_id!["t13", "b", 1],
        );
        let mut sim = setup(seed, 2, |_| Options::default());
        lock(&mut sim, 1, &a, Mode::X);
        lock(&mut sim, 2, &b, Mode::X);
        quiet(&mut sim);
        lock(&mut sim, 1, &b1, Mode::X);
        quiet(&mut sim);
        blocked(&sim, 1);
        lock(&mut sim, 2, &a1, Mode::X);
        quiet(&mut sim);
        assert!(!deadlocks(&sim, 1).is_empty(), "seed {seed}");
        kill(&mut sim, 1);
        assert!(!deadlocks(&sim, 2).is_empty(), "seed {seed}");
        kill(&mut sim, 2);
    }
}

#[test]
fn erlang_two_clients_abort_on_deadlock() {
    for seed in sim::seeds(SEEDS) {
        let (a, b) = (lock_id!["t14", "a"], lock_id!["t14", "b"]);
        let mut sim = setup(seed, 2, |k| Options {
            abort_on_deadlock: k == 2,
            ..Options::default()
        });
        lock(&mut sim, 1, &a, Mode::X);
        lock(&mut sim, 2, &b, Mode::X);
        quiet(&mut sim);
        lock(&mut sim, 1, &b, Mode::X);
        quiet(&mut sim);
        lock(&mut sim, 2, &a, Mode::X);
        quiet(&mut sim);
        // Agent 2 is the victim and was told it holds b: it aborts, and 1 gets b.
        assert_eq!(
            sim.client(&agent(2)).aborted,
            Some((b.clone(), node())),
            "seed {seed}"
        );
        deadlocks(&sim, 1);
        kill(&mut sim, 1);
    }
}

#[test]
fn sticky_conversion_deadlock_resolves() {
    // Lock Scenario 4: T1 and T2 hold S and both convert to X.
    for seed in sim::seeds(SEEDS) {
        let l = lock_id!["sticky"];
        let mut sim = setup(seed, 2, |_| Options::default());
        lock(&mut sim, 1, &l, Mode::S);
        lock(&mut sim, 2, &l, Mode::S);
        quiet(&mut sim);
        lock(&mut sim, 1, &l, Mode::X);
        lock(&mut sim, 2, &l, Mode::X);
        quiet(&mut sim);
        // The larger agent gives up its read lock; the other converts.
        assert_eq!(
            deadlocks(&sim, 1),
            vec![Deadlock {
                victim: agent(2),
                lock: l.clone(),
                node: node()
            }],
            "seed {seed}"
        );
        blocked(&sim, 2);
        kill(&mut sim, 1);
        deadlocks(&sim, 2);
        kill(&mut sim, 2);
    }
}

#[test]
fn erlang_surrendered_granted_request_is_not_claimed_until_regranted() {
    // Ids P < Q < R. Q locks X; P locks Y; R asks for X; Q asks for Y; P asks for X: a
    // deadlock in which Q must give up X, which it was told it holds. When P is killed, Y goes
    // to Q but X to R: Q must not claim all its locks until R is done (the original does).
    let (p, q, r) = (1, 2, 3);
    for seed in sim::seeds(SEEDS) {
        let (x, y) = (lock_id!["x58"], lock_id!["y58"]);
        let mut sim = setup(seed, 3, |_| Options::default());
        lock(&mut sim, q, &x, Mode::X);
        quiet(&mut sim);
        lock(&mut sim, p, &y, Mode::X);
        quiet(&mut sim);
        lock(&mut sim, r, &x, Mode::X);
        quiet(&mut sim);
        lock(&mut sim, q, &y, Mode::X);
        quiet(&mut sim);
        lock(&mut sim, p, &x, Mode::X);
        quiet(&mut sim);
        // Exactly one of them can have all its locks now, and it is not Q, which surrendered
        // X (with R and P both ahead of it in X's queue).
        assert!(!sim.status(&agent(q)).have_all_locks(), "seed {seed}");
        let mut order = Vec::new();
        for _ in 0..3 {
            let done: Vec<u64> = [p, q, r]
                .into_iter()
                .filter(|k| !order.contains(k) && sim.status(&agent(*k)).have_all_locks())
                .collect();
            assert_eq!(done.len(), 1, "seed {seed}: {done:?}\n{}", sim.dump());
            sim.kill(&agent(done[0]));
            order.push(done[0]);
            quiet(&mut sim);
        }
        assert_eq!(order.last(), Some(&q), "seed {seed}");
    }
}
