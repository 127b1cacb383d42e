//! The configurations explored: the targeted ones of the three defects a reviewer found (which
//! random simulations had missed), and a generator of small random ones.

use super::seeded::Rng;
use super::world::{AgentSpec, Config, Op};
use locks_agent::{Options, Req};
use locks_core::{LockId, Mode, lock_id};

fn agent(name: &str, node: usize, script: Vec<Op>) -> AgentSpec {
    AgentSpec {
        name: name.into(),
        node,
        options: Options::default(),
        script,
    }
}

fn aborting(mut a: AgentSpec) -> AgentSpec {
    a.options.abort_on_deadlock = true;
    a
}

fn lock(lock: LockId, mode: Mode) -> Op {
    Op::Lock {
        lock,
        mode,
        nodes: vec![0],
        req: Req::All,
        wait: true,
    }
}

fn lock_nowait(lock: LockId, mode: Mode) -> Op {
    Op::Lock {
        lock,
        mode,
        nodes: vec![0],
        req: Req::All,
        wait: false,
    }
}

fn lock_nowait_on(lock: LockId, mode: Mode, nodes: Vec<usize>, req: Req) -> Op {
    Op::Lock {
        lock,
        mode,
        nodes,
        req,
        wait: false,
    }
}

/// Defect 1: a real deadlock is never resolved while a satisfied agent sits in a queue. The
/// "shared view" rule lets `M` leave the view of `L` to `F`, the first waiter `T` blocks, but
/// `F` has all its locks (its `Any` request is granted on n2) and never forwards. Ids order
/// `H0 < F < M < T` (creation order on one node).
pub fn defect1() -> Config {
    let (l, k) = (lock_id!["L"], lock_id!["K"]);
    Config {
        name: "defect1".into(),
        nodes: 2,
        agents: vec![
            agent("H0", 0, vec![lock(l.clone(), Mode::X), Op::End]),
            agent(
                "F",
                0,
                vec![lock_nowait_on(l.clone(), Mode::S, vec![0, 1], Req::Any)],
            ),
            agent(
                "M",
                0,
                vec![lock(k.clone(), Mode::X), lock_nowait(l.clone(), Mode::S)],
            ),
            agent("T", 0, vec![lock_nowait(l, Mode::X), lock(k, Mode::X)]),
        ],
        // H0 locks L; T and F queue on it; M locks K and queues on L; H0 ends; T locks K.
        order: Some(vec![0, 3, 1, 2, 2, 0, 3]),
        calm: true,
    }
}

/// Defect 1 with three agents: `T` changes the holders of `L` while `M` waits by converting
/// its `S` up to `X`, so no fourth agent is needed; `F` waits on n1 ahead of `M` but has all
/// its locks (its `Any` request is granted on n2). Ids order `F < M < T`.
pub fn defect1_three() -> Config {
    let (l, k) = (lock_id!["L"], lock_id!["K"]);
    Config {
        name: "defect1-3".into(),
        nodes: 2,
        agents: vec![
            agent(
                "F",
                0,
                vec![lock_nowait_on(l.clone(), Mode::X, vec![0, 1], Req::Any)],
            ),
            agent(
                "M",
                0,
                vec![lock(k.clone(), Mode::X), lock_nowait(l.clone(), Mode::S)],
            ),
            agent(
                "T",
                0,
                vec![
                    lock(l.clone(), Mode::S),
                    lock_nowait(l, Mode::X),
                    lock(k, Mode::X),
                ],
            ),
        ],
        // T locks L S; F queues on L at n1 (granted at n2); M locks K and queues on L; T
        // converts L up to X; T locks K.
        order: Some(vec![2, 0, 1, 1, 2, 2]),
        calm: true,
    }
}

/// Defect 2: forwarded views never expire. `M`'s copy of `K` still says `X` waits for `Y`
/// after `Y` unlocked it, so `M` sees `M -> X -> Y -> M` and aborts (it holds `P`, claimed).
pub fn defect2(abort: bool) -> Config {
    let (r, k, q, p) = (lock_id!["R"], lock_id!["K"], lock_id!["Q"], lock_id!["P"]);
    let m = agent(
        "M",
        0,
        vec![
            lock(q.clone(), Mode::X),
            lock(p.clone(), Mode::X),
            Op::Unlock(q.clone()),
            lock(r.clone(), Mode::X),
        ],
    );
    Config {
        name: if abort {
            "defect2"
        } else {
            "defect2-surrender"
        }
        .into(),
        nodes: 1,
        agents: vec![
            agent(
                "X",
                0,
                vec![
                    lock(r, Mode::X),
                    lock_nowait(k.clone(), Mode::X),
                    lock_nowait(q, Mode::X),
                ],
            ),
            agent(
                "Y",
                0,
                vec![
                    lock(k.clone(), Mode::X),
                    Op::Unlock(k),
                    lock_nowait(p, Mode::X),
                ],
            ),
            if abort { aborting(m) } else { m },
        ],
        // X locks R, Y locks K, M locks Q and P; X asks for K and Q; Y unlocks K, M unlocks
        // Q; Y asks for P; M locks R.
        order: Some(vec![0, 1, 2, 2, 0, 0, 1, 2, 1, 2]),
        calm: true,
    }
}

/// Defect 3: `convert` answers Ok while the server refuses it (a conversion is pending on the
/// entry), and the agent drops the refusal, so it believes `IS` where the table has `S`.
pub fn defect3() -> Config {
    let (a, ab) = (lock_id!["a"], lock_id!["a", "b"]);
    Config {
        name: "defect3".into(),
        nodes: 1,
        agents: vec![
            agent(
                "A",
                0,
                vec![
                    lock(a.clone(), Mode::S),
                    lock_nowait(ab.clone(), Mode::X),
                    Op::Convert(a.clone(), Mode::IS),
                    Op::Unlock(ab),
                ],
            ),
            agent("B", 0, vec![lock(a, Mode::S), Op::End]),
        ],
        // A and B lock [a]; A asks for [a, b], converts [a] and unlocks [a, b]; B ends.
        order: Some(vec![0, 1, 0, 0, 0, 1]),
        calm: true,
    }
}

/// Found by the generator (`free-40`): `convert` sends `Convert` only to the nodes where the
/// agent already knows the request held. An `Any` request granted on n1 and n2, converted
/// before the grant of n2 has arrived, keeps `S` on n2 while the agent believes `IS`.
pub fn convert_any() -> Config {
    let k = lock_id!["k"];
    Config {
        name: "convert-any".into(),
        nodes: 2,
        agents: vec![agent(
            "B",
            1,
            vec![
                lock_nowait_on(k.clone(), Mode::S, vec![0, 1], Req::Any),
                Op::Convert(k, Mode::IS),
            ],
        )],
        order: None,
        calm: false,
    }
}

/// Hand-picked small shapes that must pass: a two-agent cycle across two nodes, a cycle
/// through a parent and its child (every interleaving of calls and messages), and an `Any`
/// request racing a blocking one (calls in quiescent states only: freely interleaved, it has
/// more than 100,000 states).
pub fn classics() -> Vec<Config> {
    let (a, ab, k) = (lock_id!["a"], lock_id!["a", "b"], lock_id!["k"]);
    let on = |lock: LockId, mode: Mode, node: usize| Op::Lock {
        lock,
        mode,
        nodes: vec![node],
        req: Req::All,
        wait: true,
    };
    vec![
        Config {
            name: "cycle-2-nodes".into(),
            nodes: 2,
            agents: vec![
                agent(
                    "A",
                    0,
                    vec![
                        on(a.clone(), Mode::X, 0),
                        on(k.clone(), Mode::X, 1),
                        Op::End,
                    ],
                ),
                agent(
                    "B",
                    1,
                    vec![
                        on(k.clone(), Mode::X, 1),
                        on(a.clone(), Mode::X, 0),
                        Op::End,
                    ],
                ),
            ],
            order: None,
            calm: false,
        },
        Config {
            name: "cycle-parent-child".into(),
            nodes: 1,
            agents: vec![
                agent(
                    "A",
                    0,
                    vec![lock(ab.clone(), Mode::X), lock(k.clone(), Mode::X), Op::End],
                ),
                agent(
                    "B",
                    0,
                    vec![lock(k.clone(), Mode::S), lock(a.clone(), Mode::S), Op::End],
                ),
            ],
            order: None,
            calm: false,
        },
        Config {
            name: "any-vs-all".into(),
            nodes: 2,
            agents: vec![
                agent(
                    "A",
                    0,
                    vec![
                        lock_nowait_on(a.clone(), Mode::X, vec![0, 1], Req::Any),
                        lock(k.clone(), Mode::X),
                        Op::End,
                    ],
                ),
                agent(
                    "B",
                    1,
                    vec![
                        lock(k, Mode::X),
                        Op::Lock {
                            lock: a,
                            mode: Mode::X,
                            nodes: vec![0, 1],
                            req: Req::All,
                            wait: true,
                        },
                        Op::End,
                    ],
                ),
            ],
            order: None,
            calm: true,
        },
    ]
}

/// How big the generated configurations are.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    /// The most agents.
    pub agents: usize,
    /// The most calls before the optional `end`.
    pub calls: usize,
    /// Calls only in quiescent states (see `Config::calm`).
    pub calm: bool,
}

/// A random small configuration, a function of `seed`: 1 or 2 nodes, 2 to `size.agents`
/// agents on random nodes (so ids order every way), scripts of 1 to `size.calls` calls on the
/// locks `[a]`, `[a, b]` and `[k]`: `lock` and `lock_nowait`, on one node or on both with any
/// requirement, `unlock` and `convert` (down) of a lock asked for before, and often `end`.
/// One agent in four aborts on deadlocks. With `size.calm`, calls are made only in quiescent
/// states.
pub fn generated(seed: u64, size: Size) -> Config {
    let mut rng = Rng::new(seed);
    let nodes = 1 + rng.below(2);
    let count = 2 + rng.below(size.agents - 1);
    let pool = [lock_id!["a"], lock_id!["a", "b"], lock_id!["k"]];
    let names = ["A", "B", "C", "D"];
    let mut agents = Vec::new();
    for name in names.iter().take(count) {
        let mut asked: Vec<(LockId, Mode)> = Vec::new();
        let mut script = Vec::new();
        let calls = 1 + rng.below(size.calls);
        for _ in 0..calls {
            let kind = if asked.is_empty() { 0 } else { rng.below(6) };
            match kind {
                // Unlock a lock asked for.
                4 => {
                    let i = rng.below(asked.len());
                    let (l, _) = asked.remove(i);
                    script.push(Op::Unlock(l));
                }
                // Convert down (X to S, S to IS).
                5 => {
                    let i = rng.below(asked.len());
                    let (l, m) = asked[i].clone();
                    let to = if m == Mode::X { Mode::S } else { Mode::IS };
                    asked[i].1 = to;
                    script.push(Op::Convert(l, to));
                }
                _ => {
                    let l = pool[rng.below(pool.len())].clone();
                    let mode = if rng.chance(2) { Mode::S } else { Mode::X };
                    let (node_list, req) = if nodes == 2 {
                        match rng.below(4) {
                            0 => (vec![0], Req::All),
                            1 => (vec![1], Req::All),
                            _ => {
                                let reqs = [Req::All, Req::Any, Req::Majority, Req::AllAlive];
                                (vec![0, 1], reqs[rng.below(4)])
                            }
                        }
                    } else {
                        (vec![0], Req::All)
                    };
                    match asked.iter_mut().find(|(x, _)| *x == l) {
                        Some(e) if mode == Mode::X => e.1 = Mode::X,
                        Some(_) => {}
                        None => asked.push((l.clone(), mode)),
                    }
                    script.push(Op::Lock {
                        lock: l,
                        mode,
                        nodes: node_list,
                        req,
                        wait: rng.chance(2),
                    });
                }
            }
        }
        if !rng.chance(3) {
            script.push(Op::End);
        }
        let mut a = agent(name, rng.below(nodes), script);
        a.options.abort_on_deadlock = rng.chance(4);
        agents.push(a);
    }
    Config {
        name: format!("{}-{seed}", if size.calm { "calm" } else { "free" }),
        nodes,
        agents,
        order: None,
        calm: size.calm,
    }
}

/// Dropped `lock` calls (`Op::Drop`, at any moment of the call's life): the waiter that drops
/// behind a holder, the waiter of a two-agent cycle whose drop races the deadlock resolution, an
/// upgrade dropped behind another reader, and a waiter on two nodes. At quiescence the tables
/// must keep nothing of a withdrawn request (agents and tables agree) and nobody waits on
/// nothing.
pub fn drops() -> Vec<Config> {
    let (l, k) = (lock_id!["l"], lock_id!["k"]);
    let on = |lock: LockId, mode: Mode, nodes: Vec<usize>| Op::Lock {
        lock,
        mode,
        nodes,
        req: Req::All,
        wait: true,
    };
    // Calls in any order (`calm`: only in quiescent states, to keep the larger ones small);
    // a drop may come at any moment either way.
    let config = |name: &str, nodes: usize, calm: bool, agents: Vec<AgentSpec>| Config {
        name: name.into(),
        nodes,
        agents,
        order: None,
        calm,
    };
    vec![
        config(
            "drop-waiter",
            1,
            false,
            vec![
                agent("A", 0, vec![lock(l.clone(), Mode::X), Op::End]),
                agent("B", 0, vec![lock(l.clone(), Mode::X), Op::Drop]),
                agent("C", 0, vec![lock(l.clone(), Mode::X)]),
            ],
        ),
        config(
            "drop-in-cycle",
            1,
            false,
            vec![
                agent(
                    "A",
                    0,
                    vec![lock(l.clone(), Mode::X), lock(k.clone(), Mode::X)],
                ),
                agent(
                    "B",
                    0,
                    vec![lock(k.clone(), Mode::X), lock(l.clone(), Mode::X), Op::Drop],
                ),
            ],
        ),
        config(
            "drop-upgrade",
            1,
            true,
            vec![
                agent("A", 0, vec![lock(l.clone(), Mode::S), Op::End]),
                agent(
                    "B",
                    0,
                    vec![lock(l.clone(), Mode::S), lock(l.clone(), Mode::X), Op::Drop],
                ),
                agent("C", 0, vec![lock(l.clone(), Mode::S)]),
            ],
        ),
        config(
            "drop-two-nodes",
            2,
            true,
            vec![
                agent("A", 1, vec![on(l.clone(), Mode::X, vec![0, 1]), Op::End]),
                agent("B", 0, vec![on(l.clone(), Mode::X, vec![0, 1]), Op::Drop]),
            ],
        ),
    ]
}
