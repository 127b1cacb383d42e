//! Rule 3's exception, the quiet release: a local holder that ends hands the lock on without
//! telling the waiters that already waited for whoever it lets in, and the next notice to an
//! older pending entry of that lock goes to all of them. The cases one by one, then the whole
//! class generated (`class`: remote agents, ghosts and the lock-delay's end, which the oracle of
//! `table_proptest.rs` does not model), checked against the two promises the agents rely on.

mod common;

use common::*;
use locks_core::proto::{EntryState, ServerRequest};
use locks_core::{AgentId, LockId, Mode, NodeId, lock_id};
use locks_server::state_machine::{LockTable, Sends};

/// The agents told anything by `fx`, in order.
fn told(fx: &Sends) -> Vec<String> {
    notices(fx).into_iter().map(|(to, _, _)| to).collect()
}

/// A hot lock: T1 holds it in `X`, T2, T3 and T4 wait for `X` in that order.
fn hot(tb: &mut LockTable, l: &LockId) {
    for n in 1..=4 {
        lock(tb, n, l, Mode::X);
    }
}

#[test]
fn ending_holders_of_a_hot_lock_tell_each_waiter_only_of_its_own_grant() {
    let mut tb = table();
    let l = lock_id!["hot"];
    hot(&mut tb, &l);
    let fx = remove(&mut tb, 1);
    assert_eq!(
        notices(&fx),
        vec![("T2".into(), l.clone(), EntryState::Granted(Mode::X))]
    );
    // The new holder gets the queue (rule 4): it learns who waits for it first hand.
    let queue = notice_to(&fx, 2, &l).and_then(|n| n.queue.clone()).unwrap();
    assert_eq!(queue.waiting.len(), 2);
    let fx = remove(&mut tb, 2);
    assert_eq!(told(&fx), vec!["T3"]);
    // A transaction that queues now is told the queue as it is, and nobody else hears of it.
    let fx = lock(&mut tb, 5, &l, Mode::X);
    assert_eq!(told(&fx), vec!["T5"]);
    let fx = remove(&mut tb, 3);
    assert_eq!(told(&fx), vec!["T4"]);
}

#[test]
fn after_a_quiet_release_the_next_notice_to_an_older_waiter_goes_to_every_waiter() {
    let mut tb = table();
    let l = lock_id!["hot"];
    hot(&mut tb, &l);
    assert_eq!(told(&remove(&mut tb, 1)), vec!["T2"]);
    // T3 asks again for what it waits for: it is answered where it stands, and T4, which
    // missed the release too, is told with it.
    let fx = lock(&mut tb, 3, &l, Mode::S);
    assert_eq!(told(&fx), vec!["T3", "T4"]);
    let now = tb.view(&l).unwrap();
    for n in [3, 4] {
        assert_eq!(*notice_to(&fx, n, &l).unwrap().queue.clone().unwrap(), now);
    }
    // Everyone pending is up to date again: the same question tells T3 alone.
    assert_eq!(told(&lock(&mut tb, 3, &l, Mode::S)), vec!["T3"]);
}

#[test]
fn a_grant_a_waiter_could_share_is_told_to_every_waiter() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::X);
    lock(&mut tb, 2, &l, Mode::S);
    lock(&mut tb, 3, &l, Mode::X);
    lock(&mut tb, 4, &l, Mode::IS);
    // T2 gets S; T4 (IS) would share it, and waits now only because T3 is ahead of it: it
    // waits for T2 through T3, which its last view does not show.
    let fx = remove(&mut tb, 1);
    assert_eq!(told(&fx), vec!["T2", "T3", "T4"]);
}

#[test]
fn a_pending_conversion_makes_a_release_loud() {
    let mut tb = table();
    let l = lock_id!["l"];
    lock(&mut tb, 1, &l, Mode::S);
    lock(&mut tb, 2, &l, Mode::S);
    lock(&mut tb, 3, &l, Mode::X);
    // T2 converts S -> X behind T1's S.
    lock(&mut tb, 2, &l, Mode::X);
    let fx = remove(&mut tb, 1);
    assert_eq!(told(&fx), vec!["T2", "T3"]);
}

#[test]
fn an_unlock_or_a_remote_agent_s_removal_tells_every_waiter() {
    // An unlock: the holder still runs, and could confirm a wait it no longer has.
    let mut tb = table();
    let l = lock_id!["hot"];
    hot(&mut tb, &l);
    let fx = unlock(&mut tb, 1, &l);
    assert_eq!(told(&fx), vec!["T1", "T2", "T3", "T4"]);

    // A holder of another node: its removal may come from that node leaving the cluster
    // while the agent still runs.
    let mut tb = table();
    let remote = AgentId::new(NodeId::new("n2").unwrap(), 1, 9);
    let fx = tb.handle(ServerRequest::Lock {
        agent: remote.clone(),
        lock: l.clone(),
        mode: Mode::X,
    });
    assert_eq!(fx.len(), 1);
    for n in 2..=4 {
        lock(&mut tb, n, &l, Mode::X);
    }
    let fx = tb.handle(ServerRequest::RemoveAgent { agent: remote });
    assert_eq!(told(&fx), vec!["T2", "T3", "T4"]);
}

/// A ghost is local by name, but stands for an agent of a node that went down, which may
/// still run: its waiters' views show that agent, never told of the rename, so its removal
/// after the lock-delay must tell them.
#[test]
fn a_ghost_s_removal_tells_every_waiter() {
    let mut tb = table();
    let l = lock_id!["hot"];
    let far = AgentId::new(NodeId::new("far").unwrap(), 7, 1);
    tb.handle(ServerRequest::Lock {
        agent: far.clone(),
        lock: l.clone(),
        mode: Mode::X,
    });
    for n in 2..=4 {
        lock(&mut tb, n, &l, Mode::X);
    }
    let ghosts = tb.ghost_agents_of(far.node());
    let fx = tb.handle(ServerRequest::RemoveAgent {
        agent: ghosts[0].clone(),
    });
    assert_eq!(told(&fx), vec!["T2", "T3", "T4"]);
}

#[test]
fn a_removed_waiter_is_told_ahead_of_as_ever() {
    let mut tb = table();
    let l = lock_id!["hot"];
    hot(&mut tb, &l);
    // T2 leaves the queue: those behind it are told, since their views showed it ahead.
    let fx = remove(&mut tb, 2);
    assert_eq!(told(&fx), vec!["T3", "T4"]);
}

/// The whole class of operations around a quiet release, on one table, checked after every
/// step: local agents that end, unlock or ask again; remote agents whose removal comes from
/// their node leaving while they run; the remote node going down (its agents turn into
/// ghosts, which are removed after the lock-delay); all six modes on a small tree.
mod class {
    use super::*;
    use locks_core::ModeTable;
    use locks_core::proto::{AgentMessage, LockView};
    use locks_core::waits::{blockers_of, pending_of};
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    const LOCAL: u64 = 6;
    const REMOTE: u64 = 2;

    fn far() -> NodeId {
        NodeId::new("far").unwrap()
    }

    fn agent(i: u64) -> AgentId {
        if i < LOCAL {
            t(i + 1)
        } else {
            AgentId::new(far(), 7, i)
        }
    }

    fn locks() -> Vec<LockId> {
        vec![
            lock_id!["a"],
            lock_id!["a", "x"],
            lock_id!["a", "y"],
            lock_id!["b"],
        ]
    }

    #[derive(Clone, Debug)]
    enum Step {
        Lock(u64, usize, Mode),
        Unlock(u64, usize),
        /// A local agent ends; a remote one's removal comes from its node leaving (its agents
        /// then count this node as gone, and forget its queues).
        Remove(u64),
        /// The remote node goes down: its agents' entries go to ghosts.
        NodeDown,
        /// The lock-delay is over: the ghosts are removed.
        DelayOver,
    }

    fn step() -> impl Strategy<Value = Step> {
        let a = 0..LOCAL + REMOTE;
        let l = 0..4usize;
        let m = prop::sample::select(Mode::ALL.to_vec());
        prop_oneof![
            10 => (a.clone(), l.clone(), m).prop_map(|(a, l, m)| Step::Lock(a, l, m)),
            2 => (a.clone(), l).prop_map(|(a, l)| Step::Unlock(a, l)),
            4 => a.prop_map(Step::Remove),
            1 => Just(Step::NodeDown),
            1 => Just(Step::DelayOver),
        ]
    }

    #[derive(Default)]
    struct World {
        /// The last queue each agent was sent with a notice, by lock.
        views: HashMap<(AgentId, LockId), Arc<LockView>>,
        /// The local agents that ended since each of those views was sent.
        ended_since: HashMap<(AgentId, LockId), Vec<AgentId>>,
        ghosts: Vec<AgentId>,
        /// Each ghost's agent: a rename tells nobody, so views name either.
        renamed: HashMap<AgentId, AgentId>,
    }

    fn pending_in(view: &LockView, a: &AgentId) -> bool {
        pending_of(view).any(|(p, _)| p == a)
    }

    impl World {
        fn apply(&mut self, tb: &mut LockTable, step: &Step) -> Result<(), TestCaseError> {
            let ids = locks();
            let fx = match step {
                Step::Lock(a, l, mode) => tb.handle(ServerRequest::Lock {
                    agent: agent(*a),
                    lock: ids[*l].clone(),
                    mode: *mode,
                }),
                Step::Unlock(a, l) => tb.handle(ServerRequest::Unlock {
                    agent: agent(*a),
                    lock: ids[*l].clone(),
                }),
                Step::Remove(a) => {
                    let gone = agent(*a);
                    let fx = tb.handle(ServerRequest::RemoveAgent {
                        agent: gone.clone(),
                    });
                    self.views.retain(|(x, _), _| *x != gone);
                    self.ended_since.retain(|(x, _), _| *x != gone);
                    if gone.node() == &node() {
                        for key in self.views.keys() {
                            self.ended_since
                                .entry(key.clone())
                                .or_default()
                                .push(gone.clone());
                        }
                    }
                    fx
                }
                Step::NodeDown => {
                    // The remote agents hear that this node is down from their side, and
                    // forget what they knew of its queues (`locks-agent`'s node down).
                    self.views.retain(|(x, _), _| x.node() != &far());
                    self.ended_since.retain(|(x, _), _| x.node() != &far());
                    let agents = tb.agents_on(&far());
                    let ghosts = tb.ghost_agents_of(&far());
                    prop_assert_eq!(agents.len(), ghosts.len());
                    for (a, g) in agents.into_iter().zip(&ghosts) {
                        self.renamed.insert(g.clone(), a);
                    }
                    self.ghosts.extend(ghosts);
                    Sends::new()
                }
                Step::DelayOver => {
                    let mut fx = Sends::new();
                    for ghost in std::mem::take(&mut self.ghosts) {
                        fx.extend(tb.handle(ServerRequest::RemoveAgent { agent: ghost }));
                    }
                    fx
                }
            };
            // Who was told what about each lock in this step.
            let told: Vec<(AgentId, LockId)> = fx
                .iter()
                .filter_map(|(to, m)| match m {
                    AgentMessage::Notice(n) => Some((to.clone(), n.lock.clone())),
                    _ => None,
                })
                .collect();
            for (to, msg) in &fx {
                let AgentMessage::Notice(n) = msg else {
                    continue;
                };
                let key = (to.clone(), n.lock.clone());
                if n.state == EntryState::Absent {
                    // The agent strips its own place from what it knew of the queue
                    // (`locks-agent`'s knowledge, withdrawn entries): no longer pending there.
                    self.views.remove(&key);
                    self.ended_since.remove(&key);
                }
                let Some(q) = &n.queue else {
                    // A newer notice without the queue outdates the agent's own place in the
                    // one it had: it drops it (`locks-agent`'s knowledge).
                    if self.views.get(&key).is_some_and(|v| v.version < n.version) {
                        self.views.remove(&key);
                        self.ended_since.remove(&key);
                    }
                    continue;
                };
                // The agents' "shared" views: an agent pending in two views of a lock whose
                // holders differ takes it that everyone pending in the newer was sent it.
                // (A ghost's rename tells nobody, so it is no change of holders here.)
                let holders = |v: &LockView| -> Vec<(AgentId, Mode)> {
                    let mut h: Vec<_> = v
                        .granted
                        .iter()
                        .map(|e| {
                            (
                                self.renamed.get(&e.agent).unwrap_or(&e.agent).clone(),
                                e.mode,
                            )
                        })
                        .collect();
                    h.sort();
                    h
                };
                if let Some(before) = self.views.get(&key)
                    && holders(before) != holders(q)
                    && pending_in(before, to)
                    && pending_in(q, to)
                {
                    for (p, _) in pending_of(q).filter(|(p, _)| !p.is_ghost()) {
                        prop_assert!(
                            told.contains(&(p.clone(), n.lock.clone())),
                            "{to:?} takes {:?} at {} as sent to every pending agent, {p:?} \
                             was not told",
                            n.lock,
                            q.version
                        );
                    }
                }
                self.views.insert(key.clone(), q.clone());
                self.ended_since.remove(&key);
            }
            self.check_views(tb)
        }

        /// Every waiter's last view shows everyone it waits for, and beyond that only local
        /// agents that ended since.
        fn check_views(&self, tb: &LockTable) -> Result<(), TestCaseError> {
            let modes = ModeTable::standard();
            for l in tb.snapshot().locks {
                let now = l.view();
                for e in l.entries.iter().filter(|e| e.state.is_waiting()) {
                    if e.agent.is_ghost() {
                        continue; // told nothing, ever
                    }
                    let key = (e.agent.clone(), l.lock.clone());
                    let view = self.views.get(&key);
                    prop_assert!(view.is_some(), "{:?} waits on {} unseen", e.agent, l.lock);
                    let Some(view) = view else { continue };
                    let named = |b: &AgentId| self.renamed.get(b).unwrap_or(b).clone();
                    let then: Vec<AgentId> = blockers_of(&modes, view, &e.agent)
                        .into_iter()
                        .map(named)
                        .collect();
                    let blockers: Vec<AgentId> = blockers_of(&modes, &now, &e.agent)
                        .into_iter()
                        .map(named)
                        .collect();
                    let ended = self.ended_since.get(&key).map_or(&[][..], |v| &v[..]);
                    if let Err(err) = view_covers_waits(&then, &blockers, ended) {
                        prop_assert!(false, "{:?} on {}: {}", e.agent, l.lock, err);
                    }
                }
            }
            Ok(())
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn every_waiter_sees_every_wait_and_shared_views_hold(
            steps in prop::collection::vec(step(), 1..80)
        ) {
            let mut tb = table();
            let mut world = World::default();
            for s in &steps {
                world.apply(&mut tb, s)?;
            }
        }
    }
}
