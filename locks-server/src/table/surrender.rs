//! `Surrender`: a deadlock's victim gives up its entries on a lock and the locks below it, and
//! goes to the back of their queues; the table applies it only while the cycle it breaks still
//! holds here.
//!
//! What is checked: every wait of the cycle that lies in this table (the node's other shards
//! are checked by `node_core/sharding.rs` before), by the same rules the agents build their graphs
//! with ([`locks_core::waits`]); and the lock's version, unless the waits are a whole cycle
//! through the victim ([`closes_cycle`]). A refused surrender is answered with the lock's
//! current queue ([`Note::NotSurrendered`]), so the victim learns its surrender is over.

use super::LockTable;
use super::notify::{self, Audience, Sends};
use super::ops::Edit;
use locks_core::proto::{AgentMessage, LockNotice, Note, Wait};
use locks_core::waits::blockers_of;
use locks_core::{AgentId, LockId};

impl LockTable {
    /// `Surrender`: the agent's entries on `lock` and its descendants go to the back.
    ///
    /// Applied when every wait given still holds, and either the lock is at the version the
    /// victim decided on, or the waits are a whole cycle through the victim, into it on `lock`
    /// (its locks are all here): then the cycle is real now, whatever else changed on the lock
    /// since (a waiter joined behind, say), and refusing would only make the victim, which told
    /// its client of the loss already, find the same cycle and surrender again.
    pub(super) fn surrender(
        &mut self,
        agent: &AgentId,
        lock: &LockId,
        version: u64,
        waits: &[Wait],
    ) -> Sends {
        let whole = closes_cycle(agent, lock, waits);
        self.surrender_checked(agent, lock, version, waits, whole)
    }

    /// [`LockTable::surrender`] with `waits` the cycle's waits in this table and `whole` whether
    /// the cycle's waits (here and in other shards of the node, which the caller checked) are
    /// a whole cycle through the victim.
    pub(super) fn surrender_checked(
        &mut self,
        agent: &AgentId,
        lock: &LockId,
        version: u64,
        waits: &[Wait],
        whole: bool,
    ) -> Sends {
        let found = self.agents.lookup(agent).and_then(|a| {
            let s = self.locks.find(lock.keys())?;
            let rec = self.locks.get(s)?;
            ((rec.version == version || whole) && rec.entry(a).is_some()).then_some((a, s))
        });
        let Some((a, s)) = found.filter(|_| waits.iter().all(|w| self.still_waits(w))) else {
            tracing::trace!(%agent, %lock, version, "stale or unknown surrender ignored");
            return self.refresh(agent, lock, version);
        };
        let mut targets: Vec<(LockId, u32)> = self
            .agents
            .get(a)
            .into_iter()
            .flat_map(|slot| slot.locks.iter().copied())
            .filter_map(|t| {
                let rec = self.locks.get(t)?;
                (t == s || rec.id.is_descendant_of(lock)).then(|| (rec.id.clone(), t))
            })
            .collect();
        targets.sort_unstable();
        let note = Note::Surrendered {
            agent: agent.clone(),
            version,
        };
        let v = self.next_version();
        let mut out = Sends::new();
        let mut touched = false;
        for (_, t) in targets {
            let aud = Audience {
                note: (t == s).then_some(&note),
                ..Audience::default()
            };
            touched |= self.apply(t, a, Edit::Requeue, &aud, v, &mut out);
        }
        self.finish(a, touched, v);
        out
    }

    /// Whether `w.waiter` waits for `w.blocker` on `w.lock` in this table now (the rules of
    /// [`locks_core::waits`], the same the agents build their graphs with).
    pub(crate) fn still_waits(&self, w: &Wait) -> bool {
        let Some(rec) = self
            .locks
            .find(w.lock.keys())
            .and_then(|s| self.locks.get(s))
        else {
            return false;
        };
        let view = notify::view(rec, &self.modes, &self.agents);
        blockers_of(&self.modes, &view, &w.waiter).contains(&&w.blocker)
    }

    /// The answer to a stale surrender: the agent's entry on the lock now, with the whole queue
    /// even when it holds the lock. A holder of a lock nobody waits on gets no view otherwise, so
    /// without this an agent that decided on an old copy could never learn the current version,
    /// and a deadlock it alone can break would stay. Nothing is sent if the agent has no entry there.
    /// The notice carries [`Note::NotSurrendered`] with the version the agent surrendered: the
    /// lock may not have changed (the surrender was refused because a wait of its cycle no
    /// longer holds), and the agent must still learn that its surrender is over.
    fn refresh(&self, agent: &AgentId, lock: &LockId, surrendered: u64) -> Sends {
        let mut out = Sends::new();
        let found = self.agents.lookup(agent).and_then(|a| {
            let rec = self.locks.get(self.locks.find(lock.keys())?)?;
            Some((rec, rec.entry(a)?.state()))
        });
        if let Some((rec, state)) = found {
            let view = notify::view(rec, &self.modes, &self.agents);
            out.push((
                agent.clone(),
                AgentMessage::Notice(LockNotice {
                    node: self.node.clone(),
                    lock: rec.id.clone(),
                    version: rec.version,
                    state,
                    queue: Some(std::sync::Arc::new(view)),
                    note: Some(Box::new(Note::NotSurrendered {
                        version: surrendered,
                    })),
                }),
            ));
        }
        out
    }
}

/// Whether `waits` are one whole cycle through `agent` whose edge into it is on `lock`: each
/// wait's blocker is the next one's waiter, the last one's the first's (the order a victim
/// sends them in, `locks-agent`'s `probe.rs`).
pub(crate) fn closes_cycle(agent: &AgentId, lock: &LockId, waits: &[Wait]) -> bool {
    let n = waits.len();
    n >= 2
        && (0..n).all(|i| waits[i].blocker == waits[(i + 1) % n].waiter)
        && waits.iter().any(|w| w.blocker == *agent && w.lock == *lock)
}
