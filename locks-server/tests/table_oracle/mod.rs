//! The oracle's checks of `table_proptest` after every step: safety and group modes
//! (`check_invariants`), FIFO with conversions first (`check_fifo`), and the notices replayed
//! against the table (`check_replay`). The module doc of `table_proptest.rs` lists what each
//! one asserts.

use super::common::{t, view_covers_waits};
use super::{AGENTS, Harness, held_direct};
use locks_core::proto::{EntryState, ServerRequest};
use locks_core::waits::blockers_of;
use locks_core::{AgentId, LockId, Mode};
use locks_server::TableSnapshot;
use proptest::prelude::*;
use std::collections::HashMap;

impl Harness {
    pub(super) fn check_invariants(&self, after: &TableSnapshot) -> Result<(), TestCaseError> {
        let modes = &self.modes;
        for l in &after.locks {
            prop_assert!(
                !l.entries.is_empty() || !l.watchers.is_empty(),
                "leaked record"
            );
            // Pairwise compatible holders, each agent once.
            for (i, a) in l.granted.iter().enumerate() {
                for b in &l.granted[i + 1..] {
                    prop_assert!(a.agent != b.agent);
                    prop_assert!(modes.compatible(a.mode, b.mode), "{:?}", l);
                }
            }
            // The group: compatible with c exactly when every holder is.
            for c in Mode::ALL {
                let each = l.granted.iter().all(|h| modes.compatible(c, h.mode));
                prop_assert_eq!(l.group.is_none_or(|g| modes.compatible(c, g)), each);
            }
            prop_assert_eq!(l.group.is_none(), l.granted.is_empty());
            // Settled: the heads of the queues cannot be granted.
            let others_ok = |agent: &AgentId, m: Mode| {
                l.granted
                    .iter()
                    .filter(|h| h.agent != *agent)
                    .all(|h| modes.compatible(m, h.mode))
            };
            if let Some(c) = l.converting.first() {
                prop_assert!(!others_ok(&c.agent, c.requested), "lost wake-up {:?}", l);
            } else if let Some(w) = l.waiting.first() {
                prop_assert!(!others_ok(&w.agent, w.mode), "lost wake-up {:?}", l);
            }
            // The wait-for rules (`locks_core::waits`, the deadlock detector's model of the
            // grant order of `table/grant.rs`) see why every entry the order leaves pending
            // waits: it has a blocker in the lock's view.
            let view = l.view();
            for e in l.entries.iter().filter(|e| e.state.is_waiting()) {
                prop_assert!(
                    !blockers_of(modes, &view, &e.agent).is_empty(),
                    "{:?} waits for nobody the wait-for rules see: {:?}",
                    e.agent,
                    l
                );
            }
            // Entries agree with the queues and with the model.
            prop_assert_eq!(
                l.entries.len(),
                l.granted.len() + l.waiting.len(),
                "every entry holds or waits"
            );
            for e in &l.entries {
                let serial = e.agent.serial();
                prop_assert_eq!(
                    e.direct,
                    self.direct.get(&(serial, l.lock.clone())).copied()
                );
                let need = self.need(serial, &l.lock);
                prop_assert!(need.is_some(), "entry without need");
                let need = need.unwrap_or(Mode::X);
                match e.state {
                    EntryState::Granted(h) => prop_assert_eq!(h, need),
                    EntryState::Waiting(w) => prop_assert_eq!(w, need),
                    EntryState::Converting { held, requested } => {
                        prop_assert!(!modes.covers(held, need));
                        prop_assert_eq!(requested, modes.group(need, held));
                    }
                    EntryState::Absent => prop_assert!(false, "absent entry listed"),
                }
            }
        }
        // Every needed entry exists.
        for (a, lock) in self.direct.keys() {
            for id in lock.ancestors().chain([lock.clone()]) {
                prop_assert!(after.lock(&id).and_then(|l| l.entry(&t(*a))).is_some());
            }
        }
        // Safety across the hierarchy: the modes implied by held direct locks.
        let mut implied: HashMap<LockId, Vec<(u64, Mode)>> = HashMap::new();
        for ((a, lock), m) in &self.direct {
            if held_direct(after, modes, *a, lock, *m) {
                implied.entry(lock.clone()).or_default().push((*a, *m));
                for anc in lock.ancestors() {
                    implied
                        .entry(anc)
                        .or_default()
                        .push((*a, modes.intention(*m)));
                }
            }
        }
        for (lock, list) in &implied {
            for (i, (a, m)) in list.iter().enumerate() {
                for (b, n) in &list[i + 1..] {
                    prop_assert!(
                        a == b || modes.compatible(*m, *n),
                        "T{} {} and T{} {} both held on {}",
                        a,
                        m,
                        b,
                        n,
                        lock
                    );
                }
            }
        }
        Ok(())
    }

    pub(super) fn check_fifo(
        &self,
        req: &ServerRequest,
        before: &TableSnapshot,
        after: &TableSnapshot,
    ) -> Result<(), TestCaseError> {
        let actor = req.agent();
        let surrendering = matches!(req, ServerRequest::Surrender { .. });
        for l in &after.locks {
            let old = before.lock(&l.lock);
            let was_holder =
                |a: &AgentId| old.is_some_and(|o| o.granted.iter().any(|h| h.agent == *a));
            let old_wait: Vec<&AgentId> =
                old.map_or(Vec::new(), |o| o.waiting.iter().map(|w| &w.agent).collect());
            let old_conv: Vec<&AgentId> = old.map_or(Vec::new(), |o| {
                o.converting.iter().map(|c| &c.agent).collect()
            });
            let still_waiting = |a: &AgentId| l.waiting.iter().any(|w| w.agent == *a);
            let still_converting = |a: &AgentId| l.converting.iter().any(|c| c.agent == *a);
            for h in &l.granted {
                if !was_holder(&h.agent) {
                    // Granted from the wait queue (or at once): nobody converts, nobody ahead waits.
                    prop_assert!(
                        l.converting.is_empty(),
                        "wait-queue grant while converting: {:?}",
                        l
                    );
                    let ahead: &[&AgentId] = match old_wait.iter().position(|a| **a == h.agent) {
                        Some(p) => &old_wait[..p],
                        None => &old_wait[..],
                    };
                    for w in ahead {
                        let moved = surrendering && *w == actor;
                        prop_assert!(
                            moved || !still_waiting(w),
                            "{:?} overtook {:?} on {:?}",
                            h.agent,
                            w,
                            l
                        );
                    }
                } else if let Some(p) = old_conv.iter().position(|a| **a == h.agent) {
                    if still_converting(&h.agent) || h.agent == *actor {
                        continue;
                    }
                    for c in &old_conv[..p] {
                        prop_assert!(
                            !still_converting(c),
                            "conversion of {:?} overtook {:?}",
                            h.agent,
                            c
                        );
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn check_replay(&self, after: &TableSnapshot) -> Result<(), TestCaseError> {
        for a in 1..=AGENTS {
            let agent = t(a);
            for id in &self.ids {
                let told = self
                    .replay
                    .get(&(agent.clone(), id.clone()))
                    .map_or(EntryState::Absent, |(_, s)| *s);
                prop_assert_eq!(told, after.state(&agent, id), "T{} on {}", a, id);
            }
        }
        // A waiter's last view shows exactly what is ahead of it now.
        for l in &after.locks {
            let now = l.view();
            for e in l.entries.iter().filter(|e| e.state.is_waiting()) {
                let view = self.views.get(&(e.agent.clone(), l.lock.clone()));
                prop_assert!(view.is_some(), "waiter without a view");
                let Some(view) = view else { continue };
                if view.granted != now.granted {
                    // Quiet releases since the view: it shows everyone the waiter waits for,
                    // and more only in agents removed since (which confirm no deadlock).
                    let key = (e.agent.clone(), l.lock.clone());
                    let gone = self.gone_since.get(&key).map_or(&[][..], |g| &g[..]);
                    let then: Vec<AgentId> = blockers_of(&self.modes, view, &e.agent)
                        .into_iter()
                        .cloned()
                        .collect();
                    let waits: Vec<AgentId> = blockers_of(&self.modes, &now, &e.agent)
                        .into_iter()
                        .cloned()
                        .collect();
                    if let Err(e) = view_covers_waits(&then, &waits, gone) {
                        prop_assert!(false, "{:?} on {}: {}", key.0, l.lock, e);
                    }
                    prop_assert!(matches!(e.state, EntryState::Waiting(_)));
                    continue;
                }
                prop_assert_eq!(
                    &view.granted,
                    &now.granted,
                    "stale holders for {:?}",
                    e.agent
                );
                prop_assert_eq!(view.group, now.group);
                let upto = |v: &[locks_core::proto::QueueEntry]| {
                    let p = v
                        .iter()
                        .position(|w| w.agent == e.agent)
                        .map_or(v.len(), |p| p + 1);
                    v[..p].to_vec()
                };
                match e.state {
                    EntryState::Converting { .. } => {
                        let p = now
                            .converting
                            .iter()
                            .position(|c| c.agent == e.agent)
                            .map_or(0, |p| p + 1);
                        prop_assert!(view.converting.len() >= p);
                        prop_assert_eq!(&view.converting[..p], &now.converting[..p]);
                    }
                    _ => {
                        prop_assert_eq!(&view.converting, &now.converting);
                        prop_assert_eq!(upto(&view.waiting), upto(&now.waiting));
                    }
                }
            }
        }
        Ok(())
    }
}
