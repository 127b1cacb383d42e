use super::*;
use locks_core::Mode::{self, IS, IX, S, X};
use locks_core::lock_id;
use locks_core::proto::{Conversion, QueueEntry};
use locks_core::waits::{first_blocked_by, holders_blocking};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn node() -> NodeId {
    NodeId::new("n1").unwrap()
}

fn agent(serial: u64) -> AgentId {
    AgentId::new(node(), 1, serial)
}

fn entry(a: u64, mode: Mode) -> QueueEntry {
    QueueEntry {
        agent: agent(a),
        mode,
    }
}

/// A view: holders, conversions `(agent, held, requested)`, waiters.
fn view(
    version: u64,
    granted: &[(u64, Mode)],
    converting: &[(u64, Mode, Mode)],
    waiting: &[(u64, Mode)],
) -> LockView {
    LockView {
        version,
        group: None,
        granted: granted.iter().map(|&(a, m)| entry(a, m)).collect(),
        converting: converting
            .iter()
            .map(|&(a, held, requested)| Conversion {
                agent: agent(a),
                held,
                requested,
            })
            .collect(),
        waiting: waiting.iter().map(|&(a, m)| entry(a, m)).collect(),
    }
}

fn graph(views: &[(LockId, LockView)]) -> ViewGraph {
    let n = node();
    ViewGraph::build(
        &ModeTable::standard(),
        views.iter().map(|(l, v)| (l, &n, v)),
    )
}

fn edges(g: &ViewGraph, a: u64) -> Vec<AgentId> {
    g.waits_for_set(&agent(a))
}

#[test]
fn waiting_for_ones_own_upgrade_is_not_a_deadlock() {
    // StickyLocking: T1 holds S alone and converts to X: granted at once in the table, but even a
    // view caught mid-way must not make T1 wait for itself.
    let g = graph(&[(lock_id!["l"], view(3, &[(1, S)], &[(1, S, X)], &[]))]);
    assert!(edges(&g, 1).is_empty());
    assert!(g.cycles().is_empty());
}

#[test]
fn erlang_lock_upgrade2_waits_for_the_child_reader_only() {
    // 1 holds L read and wants write; 2 reads L/1 (IS on L). 1 waits for 2; 2 waits for nobody.
    let g = graph(&[(
        lock_id!["l"],
        view(5, &[(1, S), (2, IS)], &[(1, S, X)], &[]),
    )]);
    assert_eq!(edges(&g, 1), vec![agent(2)]);
    assert!(edges(&g, 2).is_empty());
    assert!(g.cycles().is_empty());
}

#[test]
fn a_chain_is_not_a_cycle() {
    let g = graph(&[
        (lock_id!["b"], view(1, &[(2, X)], &[], &[(1, X)])),
        (lock_id!["c"], view(2, &[(3, X)], &[], &[(2, X)])),
        (lock_id!["d"], view(3, &[(4, X)], &[], &[(3, X)])),
    ]);
    assert_eq!(edges(&g, 1), vec![agent(2)]);
    assert_eq!(edges(&g, 2), vec![agent(3)]);
    assert_eq!(edges(&g, 3), vec![agent(4)]);
    assert!(g.cycles().is_empty());
}

#[test]
fn compatible_readers_do_not_wait_for_each_other() {
    // Two readers queued behind a writer are granted together when it leaves: 2 does not wait
    // for 1, so 1 waiting for 2 elsewhere is no cycle.
    let g = graph(&[
        (lock_id!["l"], view(4, &[(3, X)], &[], &[(1, S), (2, S)])),
        (lock_id!["k"], view(5, &[(2, X)], &[], &[(1, X)])),
    ]);
    assert_eq!(edges(&g, 1), vec![agent(2), agent(3)]);
    assert_eq!(edges(&g, 2), vec![agent(3)]);
    assert!(g.cycles().is_empty());
    // Readers holding together wait for nobody.
    let g = graph(&[(lock_id!["l"], view(6, &[(1, S), (2, S)], &[], &[]))]);
    assert_eq!(g.edge_count(), 0);
}

#[test]
fn fifo_waiters_wait_for_incompatible_entries_ahead_and_their_blockers() {
    // 3 holds S; 1 waits for X; 2 waits for S behind 1. 2 waits for 1 (X, incompatible) and for
    // 3, which blocks 1 although 2 could share with it.
    let g = graph(&[(lock_id!["l"], view(7, &[(3, S)], &[], &[(1, X), (2, S)]))]);
    assert_eq!(edges(&g, 1), vec![agent(3)]);
    assert_eq!(edges(&g, 2), vec![agent(1), agent(3)]);
}

#[test]
fn sticky_conversion_deadlock_is_a_cycle_with_the_larger_converter_as_victim() {
    let g = graph(&[(
        lock_id!["l"],
        view(9, &[(1, S), (2, S)], &[(1, S, X), (2, S, X)], &[]),
    )]);
    let cycles = g.cycles();
    assert_eq!(cycles.len(), 1);
    assert_eq!(cycles[0].agents, vec![agent(1), agent(2)]);
    assert_eq!(cycles[0].victim, agent(2));
    assert_eq!(cycles[0].lock, lock_id!["l"]);
}

#[test]
fn converters_go_before_waiters() {
    // 2 waits for IS: compatible with 1's S, but behind 1's conversion to X.
    let g = graph(&[(
        lock_id!["l"],
        view(9, &[(1, S), (3, S)], &[(1, S, X)], &[(2, IS)]),
    )]);
    assert_eq!(edges(&g, 1), vec![agent(3)]);
    assert_eq!(edges(&g, 2), vec![agent(1), agent(3)]);
}

#[test]
fn edges_through_intention_modes_on_ancestors() {
    // The Erlang suite's test 10: 1 writes [a,1], 2 writes [a,2]; both want to read [a]. Each
    // holds IX on [a]; a read there waits for both IX holders.
    let a = lock_id!["a"];
    let g = graph(&[(
        a.clone(),
        view(
            12,
            &[(1, IX), (2, IX)],
            &[(1, IX, SIX_OF_IX_AND_S), (2, IX, SIX_OF_IX_AND_S)],
            &[],
        ),
    )]);
    assert!(g.victim_cycle(&agent(1)).is_none());
    let c = g.victim_cycle(&agent(2)).expect("a cycle");
    assert_eq!(c.victim, agent(2));
    assert_eq!((c.lock, c.node), (a, node()));
}

/// What an IX holder needs to also read: `group(S, IX)`.
const SIX_OF_IX_AND_S: Mode = Mode::SIX;

#[test]
fn erlang_hierarchical_deadlock_through_parents() {
    // Test 13: 1 holds A, 2 holds B; 1 wants B/1 (IX on B), 2 wants A/1 (IX on A).
    let (a, b) = (lock_id!["A"], lock_id!["B"]);
    let g = graph(&[
        (a.clone(), view(3, &[(1, X)], &[], &[(2, IX)])),
        (b.clone(), view(4, &[(2, X)], &[], &[(1, IX)])),
    ]);
    let c = g.victim_cycle(&agent(2)).expect("a cycle");
    assert_eq!(c.victim, agent(2));
    // The edge into the victim: 1 waits on B for 2.
    assert_eq!(c.lock, b);
    assert_eq!(g.waits_for(&agent(1), &agent(2)).unwrap().0.len(), 1);
}

#[test]
fn the_victim_is_the_same_whichever_agent_computes_it() {
    // A 4-cycle in a scrambled id order; every subset that contains the whole cycle, in any
    // order, names the same victim and lock.
    let ids = [3u64, 1, 4, 2];
    let views: Vec<(LockId, LockView)> = (0..4)
        .map(|i| {
            let holder = ids[(i + 1) % 4];
            let waiter = ids[i];
            (
                lock_id!["l", holder as i64],
                view(10 + i as u64, &[(holder, X)], &[], &[(waiter, X)]),
            )
        })
        .collect();
    let expected = graph(&views).cycles();
    assert_eq!(expected.len(), 1);
    assert_eq!(expected[0].victim, agent(4));
    // The edge into 4 comes from 1, which waits on ["l", 4].
    assert_eq!(expected[0].lock, lock_id!["l", 4]);
    let mut perm = views.clone();
    for rot in 0..4 {
        perm.rotate_left(1);
        if rot % 2 == 1 {
            perm.reverse();
        }
        // An unrelated chain hanging off the cycle does not change the choice.
        let mut with_extra = perm.clone();
        with_extra.push((lock_id!["x"], view(50, &[(2, X)], &[], &[(9, X)])));
        assert_eq!(graph(&perm).cycles(), expected);
        assert_eq!(graph(&with_extra).cycles(), expected);
        assert_eq!(graph(&with_extra).victims(), expected);
    }
}

#[test]
fn two_cycles_each_get_their_own_victim() {
    let g = graph(&[
        (lock_id!["a"], view(1, &[(1, X)], &[], &[(2, X)])),
        (lock_id!["b"], view(2, &[(2, X)], &[], &[(1, X)])),
        (lock_id!["c"], view(3, &[(3, X)], &[], &[(4, X)])),
        (lock_id!["d"], view(4, &[(4, X)], &[], &[(3, X)])),
    ]);
    let victims: Vec<AgentId> = g.cycles().into_iter().map(|c| c.victim).collect();
    assert_eq!(victims, vec![agent(2), agent(4)]);
}

#[test]
fn dot_export_names_agents_and_locks() {
    let g = graph(&[
        (lock_id!["a"], view(1, &[(1, X)], &[], &[(2, X)])),
        (lock_id!["b"], view(2, &[(2, X)], &[], &[(1, X)])),
    ]);
    let dot = g.to_dot();
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(
        dot.contains("<n1.1.1>") && dot.contains("<n1.1.2>"),
        "{dot}"
    );
    assert!(dot.contains("[a]@n1") && dot.contains("[b]@n1"), "{dot}");
}

#[test]
fn a_larger_agent_reached_only_through_a_cycle_does_not_hide_its_victim() {
    // The real cycle is 1 <-> 3. Outdated views add 3 -> 5 -> 1: the component is {1, 3, 5},
    // whose largest agent is 5, but 3 is still the largest agent of the cycle {1, 3} and must
    // give way; 5 is the largest of the (apparent) cycle 1 -> 3 -> 5 -> 1 and gives way too.
    let g = graph(&[
        (lock_id!["a"], view(1, &[(1, X)], &[], &[(3, X)])),
        (lock_id!["b"], view(2, &[(3, X)], &[], &[(1, X)])),
        (lock_id!["c"], view(3, &[(5, X)], &[], &[(3, X)])),
        (lock_id!["d"], view(4, &[(1, X)], &[], &[(5, X)])),
    ]);
    assert_eq!(g.cycles().len(), 1);
    assert_eq!(g.cycles()[0].victim, agent(5));
    let victims: Vec<(AgentId, LockId)> = g
        .victims()
        .into_iter()
        .map(|c| (c.victim, c.lock))
        .collect();
    assert_eq!(
        victims,
        vec![(agent(3), lock_id!["b"]), (agent(5), lock_id!["c"])]
    );
}

#[test]
fn an_agent_reaching_a_cycle_it_is_not_on_is_no_victim() {
    // 9 waits for the cycle 1 <-> 2 but nobody waits for 9.
    let g = graph(&[
        (lock_id!["a"], view(1, &[(1, X)], &[], &[(2, X), (9, X)])),
        (lock_id!["b"], view(2, &[(2, X)], &[], &[(1, X)])),
    ]);
    assert!(g.victim_cycle(&agent(9)).is_none());
    assert_eq!(g.victims().len(), 1);
    assert_eq!(g.victims()[0].victim, agent(2));
    assert_eq!(g.reaching(&agent(2)), [agent(1), agent(2), agent(9)].into());
}

#[test]
fn the_edges_of_one_agent_in_a_view_each_way() {
    let modes = ModeTable::standard();
    let views = [
        view(1, &[(1, X)], &[], &[(2, X), (3, S), (4, S), (5, X)]),
        view(
            2,
            &[(1, S), (2, S)],
            &[(1, S, X), (2, S, X)],
            &[(3, IS), (4, X)],
        ),
        view(
            3,
            &[(1, IX), (2, IS)],
            &[(2, IS, S)],
            &[(3, S), (4, IX), (5, IS)],
        ),
        view(
            4,
            &[(1, S), (2, S), (3, IS)],
            &[],
            &[(4, X), (5, S), (6, IS)],
        ),
        view(5, &[(1, X)], &[], &[]),
    ];
    for v in &views {
        for a in 1..=6 {
            let me = agent(a);
            let mut expected: Vec<&AgentId> = view_edges(&modes, v)
                .into_iter()
                .filter(|(w, _)| **w == me)
                .map(|(_, b)| b)
                .collect();
            let mut got = blockers_of(&modes, v, &me);
            expected.sort();
            got.sort();
            assert_eq!(got, expected, "agent {a} in view {}", v.version);
            // The first pending agent with an edge to `a`, if `a` holds and does not convert.
            let edges = view_edges(&modes, v);
            let first = v
                .converting
                .iter()
                .map(|c| &c.agent)
                .chain(v.waiting.iter().map(|w| &w.agent))
                .find(|x| edges.contains(&(*x, &me)))
                .filter(|_| v.holds(&me) && !v.converting.iter().any(|c| c.agent == me));
            assert_eq!(first_blocked_by(&modes, v, &me), first, "holder {a}");
            assert_eq!(
                is_waited_for(&modes, v, &me),
                edges.iter().any(|(_, b)| **b == me),
                "waited for: {a} in view {}",
                v.version
            );
        }
    }
}

/// One agent of a random view: its place in the queues (0 none, 1 holder, 2 converting holder,
/// 3 waiter), its held and requested modes, and its places in the two orders.
type RandomAgent = (u8, usize, usize, u32, u32);

/// A view from random agents (serials 0..), in the orders their sort keys give.
fn random_view(agents: &[RandomAgent]) -> LockView {
    let mut granted: Vec<(u32, QueueEntry)> = Vec::new();
    let mut pending: Vec<(u32, Result<Conversion, QueueEntry>)> = Vec::new();
    for (serial, &(role, held, requested, g, p)) in agents.iter().enumerate() {
        let (held, requested) = (Mode::ALL[held], Mode::ALL[requested]);
        let a = agent(serial as u64);
        if matches!(role, 1 | 2) {
            let e = QueueEntry {
                agent: a.clone(),
                mode: held,
            };
            granted.push((g, e));
        }
        match role {
            2 => pending.push((
                p,
                Ok(Conversion {
                    agent: a,
                    held,
                    requested,
                }),
            )),
            3 => pending.push((
                p,
                Err(QueueEntry {
                    agent: a,
                    mode: requested,
                }),
            )),
            _ => {}
        }
    }
    granted.sort_by_key(|(k, _)| *k);
    pending.sort_by_key(|(k, _)| *k);
    let (converting, waiting): (Vec<_>, Vec<_>) =
        pending.into_iter().map(|(_, e)| e).partition(Result::is_ok);
    LockView {
        version: 1,
        group: None,
        granted: granted.into_iter().map(|(_, e)| e).collect(),
        converting: converting.into_iter().filter_map(Result::ok).collect(),
        waiting: waiting.into_iter().filter_map(Result::err).collect(),
    }
}

/// The edges of the module documentation, rule by rule, with no cleverness.
fn naive_edges(modes: &ModeTable, view: &LockView) -> BTreeSet<(AgentId, AgentId)> {
    let pending: Vec<(&AgentId, Mode)> = view
        .converting
        .iter()
        .map(|c| (&c.agent, c.requested))
        .chain(view.waiting.iter().map(|w| (&w.agent, w.mode)))
        .collect();
    let mut out = BTreeSet::new();
    for (i, &(x, m)) in pending.iter().enumerate() {
        let ahead = &pending[..i];
        for h in &view.granted {
            let blocks_me = !modes.compatible(m, h.mode);
            let blocks_ahead = ahead
                .iter()
                .any(|&(z, mz)| *z != h.agent && !modes.compatible(mz, h.mode));
            if (blocks_me || blocks_ahead) && h.agent != *x {
                out.insert((x.clone(), h.agent.clone()));
            }
        }
        for &(y, my) in ahead {
            if !modes.compatible(m, my) && y != x {
                out.insert((x.clone(), y.clone()));
            }
        }
    }
    out
}

/// Checks the linear-time edges, per-agent questions and graph of random views made of
/// `agents` (and of `others`, for a second view) against the definition computed naively.
fn check_against_naive(
    agents: &[RandomAgent],
    others: &[RandomAgent],
) -> Result<(), TestCaseError> {
    let modes = ModeTable::standard();
    let v = random_view(agents);
    let expected = naive_edges(&modes, &v);
    let got = view_edges(&modes, &v);
    let got_set: BTreeSet<(AgentId, AgentId)> = got
        .iter()
        .map(|(x, y)| ((*x).clone(), (*y).clone()))
        .collect();
    prop_assert_eq!(got.len(), got_set.len(), "an edge listed twice");
    prop_assert_eq!(&got_set, &expected);

    let all: Vec<&AgentId> = v
        .granted
        .iter()
        .map(|e| &e.agent)
        .chain(v.converting.iter().map(|c| &c.agent))
        .chain(v.waiting.iter().map(|w| &w.agent))
        .collect();
    let mut listed: Vec<&AgentId> = Vec::new();
    for a in &all {
        if !listed.contains(a) {
            listed.push(a);
        }
    }
    prop_assert_eq!(&v.agents(), &listed);

    let index = ViewIndex::new(&modes, &v);
    let mut by_waiter: BTreeMap<&AgentId, Vec<&AgentId>> = BTreeMap::new();
    for (w, b) in &expected {
        by_waiter.entry(w).or_default().push(b);
    }
    let waited: BTreeSet<&AgentId> = expected.iter().map(|(_, b)| b).collect();
    for me in &(0..agents.len() as u64 + 1).map(agent).collect::<Vec<_>>() {
        let mine = by_waiter.get(me).cloned().unwrap_or_default();
        prop_assert_eq!(
            blockers_of(&modes, &v, me),
            mine.clone(),
            "blockers of {}",
            me
        );
        let holders: Vec<&AgentId> = mine
            .iter()
            .copied()
            .filter(|b| !v.converting.iter().any(|c| c.agent == **b))
            .filter(|b| !v.waiting.iter().any(|w| w.agent == **b))
            .collect();
        prop_assert_eq!(
            holders_blocking(&modes, &v, me),
            holders,
            "holders blocking {}",
            me
        );
        let is_waited = waited.contains(me);
        prop_assert_eq!(
            is_waited_for(&modes, &v, me),
            is_waited,
            "waited for: {}",
            me
        );
        let pending =
            v.converting.iter().any(|c| c.agent == *me) || v.waiting.iter().any(|w| w.agent == *me);
        prop_assert_eq!(index.is_pending(me), pending, "pending: {}", me);
        let first = v
            .converting
            .iter()
            .map(|c| &c.agent)
            .chain(v.waiting.iter().map(|w| &w.agent))
            .find(|x| expected.contains(&((*x).clone(), me.clone())))
            .filter(|_| v.holds(me) && !pending);
        prop_assert_eq!(
            first_blocked_by(&modes, &v, me),
            first,
            "first blocked by {}",
            me
        );
        prop_assert_eq!(
            index.first_blocked_by(me),
            first,
            "indexed: first blocked by {}",
            me
        );
    }

    // Two views sharing agents: each edge is labelled with the views that cause it, and the
    // graph does not depend on the order of the views.
    let n = node();
    let (l, k) = (lock_id!["l"], lock_id!["k"]);
    let w = random_view(others);
    let g = ViewGraph::build(&modes, [(&l, &n, &v), (&k, &n, &w)]);
    let reversed = ViewGraph::build(&modes, [(&k, &n, &w), (&l, &n, &v)]);
    prop_assert_eq!(g.to_dot(), reversed.to_dot());
    let mut labels: BTreeMap<(AgentId, AgentId), BTreeSet<(LockId, NodeId)>> = BTreeMap::new();
    for (lock, edges) in [(&l, expected), (&k, naive_edges(&modes, &w))] {
        for e in edges {
            labels
                .entry(e)
                .or_default()
                .insert((lock.clone(), n.clone()));
        }
    }
    let everyone: BTreeSet<&AgentId> = listed.iter().copied().chain(w.agents()).collect();
    prop_assert_eq!(g.agent_count(), everyone.len());
    prop_assert_eq!(g.edge_count(), labels.len());
    for ((from, to), label) in &labels {
        prop_assert_eq!(
            g.waits_for(from, to).map(|x| &x.0),
            Some(label),
            "{} -> {}",
            from,
            to
        );
    }
    Ok(())
}

/// Up to `max` random agents of a view, as `random_view` takes them.
fn random_agents(max: usize) -> impl Strategy<Value = Vec<RandomAgent>> {
    proptest::collection::vec(
        (
            0u8..4,
            0..Mode::COUNT,
            0..Mode::COUNT,
            any::<u32>(),
            any::<u32>(),
        ),
        0..max,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// On large random views the linear-time edges, per-agent questions and graph agree with
    /// the definition computed naively.
    #[test]
    fn large_random_views_match_the_naive_definition(
        agents in random_agents(300),
        others in random_agents(100),
    ) {
        check_against_naive(&agents, &others)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// So do short ones (the usual queue), which `view_edges` and the view index scan instead of
    /// hashing: every size up to a little past where they switch.
    #[test]
    fn short_random_views_match_the_naive_definition(
        agents in random_agents(24),
        others in random_agents(24),
    ) {
        check_against_naive(&agents, &others)?;
    }
}
