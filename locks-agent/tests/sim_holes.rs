//! Deadlock-resolution holes a review of the agent found, each played on the simulated network
//! with the real lock tables under many delivery orders (seeds). Each failed on the agent as it
//! was before its fix:
//!
//! - a real deadlock stayed unresolved while an agent whose requests were all met (an `Any`
//!   request granted on another node) sat queued ahead in the lock's queue: the agents behind
//!   it counted on it to pass the queue on to the holder, and it never analysed or forwarded;
//! - views forwarded earlier were never withdrawn when the waits they showed ended, so an agent
//!   aborted (or surrendered) on a cycle that no longer existed;
//! - with `abort_on_deadlock`, an agent aborted when the lock to give up was a copy of a
//!   `Majority` request it was only queued on, and did not need: a silent surrender does;
//! - an agent that forwarded its view of a lock and then withdrew from that lock forgot the
//!   view, and refused it ever after, while the holder it had sent it to counted on it having
//!   the view: a cycle through the holder, whose victim was that agent, stayed unresolved.

mod sim;

use locks_agent::{Deadlock, Options, Req, TransactionStatus};
use locks_core::{AgentId, LockId, Mode, ModeTable, NodeId, lock_id};
use sim::{Ask, Sim};

/// Delivery orders per scenario, unless `AGENT_SIM_SEEDS` asks for more.
const SEEDS: u64 = 40;

fn n(i: usize) -> NodeId {
    NodeId::new(format!("n{i}")).unwrap()
}

/// Client `k`'s agent (agents live on n1; client k was created k-th).
fn agent(k: u64) -> AgentId {
    AgentId::new(n(1), 1, k)
}

/// A network of `nodes` nodes and clients 1..=clients.
fn setup(seed: u64, nodes: usize, clients: u64, options: impl Fn(u64) -> Options) -> Sim {
    let modes = ModeTable::standard();
    let mut sim = Sim::new(seed, modes.clone());
    for i in 1..=nodes {
        sim.add_server(n(i), i as u64 * 1_000_000);
    }
    sim.auto_end = false;
    for k in 1..=clients {
        sim.add_client(agent(k), options(k), vec![]);
    }
    sim
}

/// Client `k` asks for `lock` on `nodes` (as `lock_nowait_on` would) and everything in flight
/// is delivered.
fn ask(sim: &mut Sim, k: u64, lock: &LockId, mode: Mode, nodes: &[usize], req: Req) {
    let ask = Ask {
        lock: lock.clone(),
        mode,
        nodes: nodes.iter().map(|i| n(*i)).collect(),
        req,
    };
    sim.ask(&agent(k), ask).expect("request accepted");
    quiet(sim);
}

fn lock(sim: &mut Sim, k: u64, lock: &LockId, mode: Mode) {
    ask(sim, k, lock, mode, &[1], Req::All);
}

fn unlock(sim: &mut Sim, k: u64, lock: &LockId) {
    sim.with_core(&agent(k), |c| c.unlock(lock).expect("unlock accepted"));
    quiet(sim);
}

fn quiet(sim: &mut Sim) {
    sim.run(100_000)
        .unwrap_or_else(|e| panic!("{e}\n{}", sim.dump()));
}

fn kill(sim: &mut Sim, k: u64) {
    sim.kill(&agent(k));
    quiet(sim);
}

fn status(sim: &Sim, k: u64) -> TransactionStatus {
    sim.status(&agent(k))
}

fn has_all(sim: &Sim, k: u64) -> Vec<Deadlock> {
    match status(sim, k) {
        TransactionStatus::HaveAllLocks { deadlocks } => deadlocks,
        other => panic!(
            "client {k} should have all its locks: {other:?}\n{}",
            sim.dump()
        ),
    }
}

#[test]
fn a_satisfied_agent_queued_ahead_does_not_hide_a_deadlock() {
    // Clients h0 < f < m < t. L and K on n1.
    let (h0, f, m, t) = (1, 2, 3, 4);
    let (l, k) = (lock_id!["l"], lock_id!["k"]);
    for seed in sim::seeds(SEEDS) {
        let mut sim = setup(seed, 2, 4, |_| Options::default());
        lock(&mut sim, h0, &l, Mode::X);
        lock(&mut sim, t, &l, Mode::X);
        // Granted on n2, so f has all its locks, and still queued on n1.
        ask(&mut sim, f, &l, Mode::S, &[1, 2], Req::Any);
        assert!(status(&sim, f).have_all_locks(), "seed {seed}");
        lock(&mut sim, m, &k, Mode::X);
        lock(&mut sim, m, &l, Mode::S);
        // t holds L; m's view of L changed holders while it waited.
        kill(&mut sim, h0);
        assert!(status(&sim, t).have_all_locks(), "seed {seed}");
        // t waits for m on K, m for t on L: t, the largest, gives L up.
        lock(&mut sim, t, &k, Mode::X);
        let expected = Deadlock {
            victim: agent(t),
            lock: l.clone(),
            node: n(1),
        };
        assert_eq!(has_all(&sim, m), vec![expected], "seed {seed}");
        assert_eq!(status(&sim, t), TransactionStatus::Waiting, "seed {seed}");
        kill(&mut sim, m);
        kill(&mut sim, f);
        has_all(&sim, t);
    }
}

/// X holds R, Y holds K, M holds Q and P. X waits for K and Q (its views of them reach Y and
/// M), then gets both; Y waits for P (held by M) and M for R (held by X). There is no cycle:
/// X waits for nobody any more. M's copy of K still said X waits for Y.
fn stale_view_scenario(seed: u64, abort_on_deadlock: bool) -> Sim {
    let (x, y, m) = (1, 2, 3);
    let (r, k, q, p) = (lock_id!["r"], lock_id!["k"], lock_id!["q"], lock_id!["p"]);
    let mut sim = setup(seed, 1, 3, |c| Options {
        abort_on_deadlock: abort_on_deadlock && c == m,
        ..Options::default()
    });
    lock(&mut sim, x, &r, Mode::X);
    lock(&mut sim, y, &k, Mode::X);
    lock(&mut sim, m, &q, Mode::X);
    lock(&mut sim, m, &p, Mode::X);
    lock(&mut sim, x, &k, Mode::X);
    lock(&mut sim, x, &q, Mode::X);
    unlock(&mut sim, y, &k);
    unlock(&mut sim, m, &q);
    assert!(status(&sim, x).have_all_locks(), "seed {seed}");
    lock(&mut sim, y, &p, Mode::X);
    lock(&mut sim, m, &r, Mode::X);
    sim
}

#[test]
fn a_stale_forwarded_view_makes_nobody_abort() {
    for seed in sim::seeds(SEEDS) {
        let mut sim = stale_view_scenario(seed, true);
        assert_eq!(sim.stats.aborts, 0, "seed {seed}\n{}", sim.dump());
        assert_eq!(status(&sim, 3), TransactionStatus::Waiting, "seed {seed}");
        kill(&mut sim, 1);
        assert_eq!(has_all(&sim, 3), vec![], "seed {seed}");
    }
}

#[test]
fn a_stale_forwarded_view_makes_nobody_surrender() {
    for seed in sim::seeds(SEEDS) {
        let mut sim = stale_view_scenario(seed, false);
        assert_eq!(sim.stats.surrenders, 0, "seed {seed}\n{}", sim.dump());
        kill(&mut sim, 1);
        assert_eq!(has_all(&sim, 3), vec![], "seed {seed}");
    }
}

#[test]
fn abort_on_deadlock_surrenders_a_queued_copy_the_requirement_can_spare() {
    // h holds L on n3. v gets L by majority (n1, n2) and is queued on n3; a queues on n3
    // behind v and holds K; v then waits for K: v waits for a, a for v (ahead of it on n3).
    let (h, a, v) = (1, 2, 3);
    let (l, k) = (lock_id!["l"], lock_id!["k"]);
    for seed in sim::seeds(SEEDS) {
        let mut sim = setup(seed, 3, 3, |c| Options {
            abort_on_deadlock: c == v,
            ..Options::default()
        });
        ask(&mut sim, h, &l, Mode::X, &[3], Req::All);
        lock(&mut sim, a, &k, Mode::X);
        ask(&mut sim, v, &l, Mode::X, &[1, 2, 3], Req::Majority);
        assert!(status(&sim, v).have_all_locks(), "seed {seed}");
        ask(&mut sim, a, &l, Mode::X, &[3], Req::All);
        lock(&mut sim, v, &k, Mode::X);
        // v gave up its place on n3 silently: the client keeps L by majority.
        assert_eq!(sim.stats.aborts, 0, "seed {seed}\n{}", sim.dump());
        assert!(sim.client(&agent(v)).core.is_running(), "seed {seed}");
        assert_eq!(status(&sim, v), TransactionStatus::Waiting, "seed {seed}");
        kill(&mut sim, h);
        let expected = Deadlock {
            victim: agent(v),
            lock: l.clone(),
            node: n(3),
        };
        assert_eq!(has_all(&sim, a), vec![expected.clone()], "seed {seed}");
        kill(&mut sim, a);
        assert_eq!(has_all(&sim, v), vec![expected], "seed {seed}");
    }
}

#[test]
fn an_agent_that_withdrew_after_forwarding_a_view_still_sees_the_cycle_in_it() {
    // b holds H2, c holds H0, a holds H1. a, then c, wait for H2: c's view (a and c waiting)
    // reaches b, and c withdraws. Then b waits for c on H0 and c for a on H1: the cycle
    // a -> b -> c -> a, whose victim c (the largest) knows of a's wait on b only through the
    // view it withdrew from, which b counts on it having.
    let (a, b, c) = (1, 2, 3);
    let (h0, h1, h2) = (lock_id!["h0"], lock_id!["h1"], lock_id!["h2"]);
    for seed in sim::seeds(SEEDS) {
        let mut sim = setup(seed, 1, 3, |_| Options::default());
        lock(&mut sim, b, &h2, Mode::X);
        lock(&mut sim, c, &h0, Mode::S);
        lock(&mut sim, a, &h1, Mode::S);
        lock(&mut sim, a, &h2, Mode::S);
        lock(&mut sim, c, &h2, Mode::S);
        unlock(&mut sim, c, &h2);
        lock(&mut sim, b, &h0, Mode::X);
        lock(&mut sim, c, &h1, Mode::X);
        let expected = Deadlock {
            victim: agent(c),
            lock: h0.clone(),
            node: n(1),
        };
        assert_eq!(has_all(&sim, b), vec![expected], "seed {seed}");
        assert_eq!(status(&sim, c), TransactionStatus::Waiting, "seed {seed}");
        kill(&mut sim, b);
        assert_eq!(status(&sim, c), TransactionStatus::Waiting, "seed {seed}");
        kill(&mut sim, a);
        has_all(&sim, c);
    }
}
