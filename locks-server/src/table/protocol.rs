//! The whole lock-server protocol as one function of the table: [`LockTable::step`].
//!
//! Everything that changes a node's lock table is a [`TableInput`]: a request from an agent,
//! a peer node that went down, the end of a lock-delay, and a message the shell could not
//! deliver. Everything the table wants done is a [`TableEffect`]: a message to send, or ghosts
//! to release once the lock-delay has passed. The shells (the `LockServer` actor and the fast
//! path of the node, both through `crate::local::LocalTable`) and the simulations call this one
//! function. What it carries out and what it decides:
//!
//! - **node down** (whether a peer is down and whether its locks wait out a lock-delay is the
//!   node core's decision, `crate::node_core`): with `ghosts`, every entry and watch of that
//!   node's agents goes to a ghost ([`LockTable::ghost_agents_of`]) and the table asks to be
//!   told when the delay has passed ([`TableEffect::ReleaseLater`]); without, the agents are
//!   removed at once. The table's own node is never "down";
//! - **agent unreachable** (decided here): a message the shell could not deliver because its agent
//!   is gone removes the agent ([`Undelivered::Gone`]), as if it had sent `RemoveAgent`, so its
//!   locks are never lost; a message that does not fit in a frame to the agent's node
//!   ([`Undelivered::TooLarge`]) withdraws the agent's requests that put it on that lock and tells
//!   it so (`Rejection::QueueTooLarge`), since a truncated queue would hide whom it waits for;
//! - **ghosts are told nothing** (decided here): no effect is ever addressed to a ghost.
//!
//! Each `Gone` removes an agent and each `TooLarge` shortens a queue, so a shell that feeds the
//! failures of its sends back in ends.

use super::LockTable;
use locks_core::proto::{AgentMessage, LockNotice, Rejection, ServerRequest, Wait};
use locks_core::{AgentId, LockId, Mode, NodeId, held_in_hierarchy};

/// An input of the lock table (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableInput {
    /// A request of an agent.
    Request(ServerRequest),
    /// The node `node` went down. With `ghosts` (the node has a lock-delay), its agents' locks
    /// stay with ghosts until [`TableInput::DelayOver`]; without, they are released at once.
    NodeDown {
        /// The node.
        node: NodeId,
        /// Whether its agents' entries go to ghosts (rather than being released now).
        ghosts: bool,
    },
    /// The lock-delay of these ghosts has passed: release what they hold.
    DelayOver(Vec<AgentId>),
    /// A message of an earlier effect could not be delivered.
    Undelivered {
        /// The addressee.
        agent: AgentId,
        /// Why (with the message, when the table needs it back).
        why: Undelivered,
    },
}

/// Why a message could not be delivered to an agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Undelivered {
    /// The agent is gone (its mailbox closed, or it is not known on its node): whatever the
    /// message was, the agent is removed.
    Gone,
    /// This message does not fit in a frame to the agent's node: what it was about decides
    /// which of the agent's requests are withdrawn.
    TooLarge(AgentMessage),
}

/// What the table wants done, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableEffect {
    /// Send `msg` to `to` (never a ghost).
    Send {
        /// The addressee.
        to: AgentId,
        /// The message.
        msg: AgentMessage,
    },
    /// Feed [`TableInput::DelayOver`] with these ghosts back in once the lock-delay has passed.
    ReleaseLater(Vec<AgentId>),
}

impl LockTable {
    /// Applies one input and returns what to do (see the module documentation).
    pub fn step(&mut self, input: TableInput) -> Vec<TableEffect> {
        let sends = match input {
            TableInput::Request(request) => {
                tracing::trace!(target: "lock_path", hop = 8, agent = %request.agent(), "granted or queued");
                self.handle(request)
            }
            TableInput::NodeDown { node, ghosts } => {
                if node == self.node {
                    return Vec::new();
                }
                if ghosts {
                    let ghosts = self.ghost_agents_of(&node);
                    if ghosts.is_empty() {
                        return Vec::new();
                    }
                    tracing::debug!(node = %self.node, peer = %node, agents = ghosts.len(), "node down: its agents' locks go to nobody until the lock-delay has passed");
                    return vec![TableEffect::ReleaseLater(ghosts)];
                }
                let agents = self.agents_on(&node);
                tracing::debug!(node = %self.node, peer = %node, agents = agents.len(), "node down: releasing its agents' locks");
                let mut out = Vec::new();
                for agent in agents {
                    out.extend(self.handle(ServerRequest::RemoveAgent { agent }));
                }
                out
            }
            TableInput::DelayOver(ghosts) => {
                let mut out = Vec::new();
                for agent in ghosts {
                    out.extend(self.handle(ServerRequest::RemoveAgent { agent }));
                }
                out
            }
            TableInput::Undelivered { agent, why } => match why {
                Undelivered::Gone => self.handle(ServerRequest::RemoveAgent { agent }),
                Undelivered::TooLarge(msg) => self.cannot_tell(&agent, &msg),
            },
        };
        self.locks.evict();
        Self::effects(sends)
    }

    /// A `RemoveAgent` as [`LockTable::step`] applies it, from a borrowed id: the fast path's
    /// release, which would otherwise copy the id into a request (a reference count up and
    /// down per transaction).
    pub(crate) fn step_remove_agent(&mut self, agent: &AgentId) -> Vec<TableEffect> {
        let sends = self.remove_agent(agent);
        self.locks.evict();
        Self::effects(sends)
    }

    /// Releases some of `agent`'s locks: at most `max` of its direct locks, each by an `Unlock`
    /// (which takes the intentions it caused on its ancestors with it), or, once the agent has
    /// no more than `max` entries and watches, the agent as `RemoveAgent` does. Returns the
    /// effects and whether the agent is gone. For a shell that releases a large agent (a
    /// downed node's ghost) over several turns (`crate::local`): between two calls the table is
    /// exactly as if the agent had unlocked those locks itself, so every invariant holds, and
    /// the calls together release what one `RemoveAgent` would.
    pub(crate) fn step_release_some(
        &mut self,
        agent: &AgentId,
        max: usize,
    ) -> (Vec<TableEffect>, bool) {
        let Some(slot) = self.agents.lookup(agent).and_then(|a| self.agents.get(a)) else {
            return (Vec::new(), true);
        };
        if slot.locks.len() + slot.watches.len() <= max {
            return (self.step_remove_agent(agent), true);
        }
        let direct: Vec<LockId> = self
            .records_of(agent)
            .filter(|(a, rec)| rec.entry(*a).is_some_and(|e| e.direct.is_some()))
            .map(|(_, rec)| rec.id.clone())
            .take(max.max(1))
            .collect();
        if direct.is_empty() {
            // Only intentions and watches left (not reached: an intention has a direct lock
            // below it); the removal ends it whatever its size.
            return (self.step_remove_agent(agent), true);
        }
        let mut sends = super::Sends::new();
        for lock in direct {
            let unlocked = self.handle(ServerRequest::Unlock {
                agent: agent.clone(),
                lock,
            });
            // Told nothing, as by its removal.
            sends.extend(unlocked.into_iter().filter(|(to, _)| to != agent));
        }
        (Self::effects(sends), false)
    }

    /// A `Surrender` as [`LockTable::step`] applies it, with `waits` only the cycle's waits in
    /// this table (the caller checked the others, in other shards of the node) and `whole`
    /// whether all of them together are a whole cycle through the victim (`node_core/sharding.rs`).
    pub(crate) fn step_surrender(
        &mut self,
        agent: &AgentId,
        lock: &LockId,
        version: u64,
        waits: &[Wait],
        whole: bool,
    ) -> Vec<TableEffect> {
        let sends = self.surrender_checked(agent, lock, version, waits, whole);
        self.locks.evict();
        Self::effects(sends)
    }

    /// Applies `request` as [`LockTable::step`] does, except that nothing is sent to the agent
    /// that made it but a refusal: the same decisions, versions and messages to everybody else.
    /// For the node's fast path, whose caller reads its own state from the table
    /// ([`LockTable::holds`]) rather than from notices.
    pub fn step_quiet(&mut self, request: ServerRequest) -> Vec<TableEffect> {
        if let ServerRequest::Lock { agent, lock, mode } = &request {
            return self.lock_quiet(agent, lock, *mode).0;
        }
        let agent = request.agent().clone();
        let mut effects = self.step(TableInput::Request(request));
        effects.retain(|e| match e {
            TableEffect::Send { to, msg } => {
                to != &agent || matches!(msg, AgentMessage::Rejected { .. })
            }
            TableEffect::ReleaseLater(_) => true,
        });
        effects
    }

    /// [`LockTable::step_quiet`] of a `Lock` request, from borrowed ids, with what
    /// [`LockTable::holds`] would say right after it (`None` also when it was refused). The
    /// requester's notices are never built: on the fast path they were work thrown away under
    /// the table's lock (an allocation and a clone of the node and lock ids each, per lock of
    /// the path), and the answer is read from the records the operation just used.
    pub fn lock_quiet(
        &mut self,
        agent: &AgentId,
        lock: &LockId,
        mode: Mode,
    ) -> (Vec<TableEffect>, Option<(Mode, u64)>) {
        let (sends, placed) = self.lock_as(agent, lock, mode, true);
        let held = placed.and_then(|p| match p.ancestors_granted {
            // The placement just saw every ancestor's entry: the hierarchy's rule on what it
            // saw, without finding the ancestors again.
            Some(granted) => self
                .direct_held(p.agent, p.slot)
                .filter(|_| held_in_hierarchy(lock.keys(), true, |_| granted)),
            None => self.holds_at(p.agent, p.slot, lock),
        });
        self.locks.evict();
        (Self::effects(sends), held)
    }

    /// The table's messages as effects (never to a ghost).
    fn effects(sends: super::Sends) -> Vec<TableEffect> {
        if sends.is_empty() {
            // The usual fast-path operation tells nobody: no iterator to run.
            return Vec::new();
        }
        sends
            .into_iter()
            .filter(|(to, _)| !to.is_ghost())
            .map(|(to, msg)| TableEffect::Send { to, msg })
            .collect()
    }

    /// `msg` (about a lock, or a watch of it) cannot be sent to `agent`: its requests that put
    /// it on that lock (its direct locks on it and below, or its watch) are withdrawn and it is
    /// told each cannot be served here. Other messages are dropped.
    fn cannot_tell(&mut self, agent: &AgentId, msg: &AgentMessage) -> super::Sends {
        let (lock, watched) = match msg {
            AgentMessage::Notice(notice) => (notice.lock.clone(), false),
            AgentMessage::Watched { lock, .. } => (lock.clone(), true),
            _ => {
                tracing::debug!(node = %self.node, %agent, "a message to an agent cannot be sent; dropped");
                return Vec::new();
            }
        };
        tracing::debug!(node = %self.node, %agent, %lock, "a lock's queue cannot be sent to an agent; its requests there are withdrawn");
        let withdrawn: Vec<(LockId, ServerRequest)> = if watched {
            let request = ServerRequest::Unwatch {
                watcher: agent.clone(),
                lock: lock.clone(),
            };
            vec![(lock, request)]
        } else {
            self.direct_locks_within(agent, &lock)
                .into_iter()
                .map(|direct| {
                    let request = ServerRequest::Unlock {
                        agent: agent.clone(),
                        lock: direct.clone(),
                    };
                    (direct, request)
                })
                .collect()
        };
        let mut out = Vec::new();
        for (lock, request) in withdrawn {
            out.push((
                agent.clone(),
                AgentMessage::Rejected {
                    node: self.node.clone(),
                    lock,
                    reason: Rejection::QueueTooLarge,
                },
            ));
            // The agent is told of the withdrawal by the rejection; the notices of the
            // withdrawal itself would be the same queue that could not be sent.
            out.extend(
                self.handle(request)
                    .into_iter()
                    .filter(|(to, _)| to != agent),
            );
        }
        out
    }

    /// Whether `agent` holds its direct lock on `lock` ([`locks_core::held_in_hierarchy`], an
    /// entry holding when it is granted). Returns the direct mode and the lock's version.
    pub fn holds(&self, agent: &AgentId, lock: &LockId) -> Option<(Mode, u64)> {
        let a = self.agents.lookup(agent)?;
        self.holds_at(a, self.locks.find(lock.keys())?, lock)
    }

    /// [`LockTable::holds`] for interned agent `a` and `lock`'s record in slot `s`.
    fn holds_at(&self, a: u32, s: u32, lock: &LockId) -> Option<(Mode, u64)> {
        let held = self.direct_held(a, s)?;
        held_in_hierarchy(lock.keys(), true, |anc| {
            self.locks
                .find(anc)
                .is_some_and(|s| self.entry_granted(s, a))
        })
        .then_some(held)
    }

    /// Agent `a`'s direct mode on lock slot `s` and the lock's version, if its entry there is
    /// granted (whatever its ancestors say).
    fn direct_held(&self, a: u32, s: u32) -> Option<(Mode, u64)> {
        let rec = self.locks.get(s)?;
        let entry = rec.entry(a)?;
        let direct = entry.direct?;
        (entry.want.is_none() && entry.held.is_some()).then_some((direct, rec.version))
    }

    /// `agent`'s direct locks (lock, mode, the lock's version), in lock id order. For an agent
    /// whose every request was granted at once (the fast path), what it holds.
    pub fn direct_locks_of(&self, agent: &AgentId) -> Vec<(LockId, Mode, u64)> {
        let mut out: Vec<(LockId, Mode, u64)> = self
            .records_of(agent)
            .filter_map(|(a, rec)| Some((rec.id.clone(), rec.entry(a)?.direct?, rec.version)))
            .collect();
        out.sort_unstable_by(|x, y| x.0.cmp(&y.0));
        out
    }

    /// Whether `agent` has an entry or a watch in the table.
    pub fn knows(&self, agent: &AgentId) -> bool {
        self.agents.lookup(agent).is_some()
    }

    /// What `agent` has in the table, as the agent would know it from its notices: one notice
    /// per lock where it has an entry (its state and the lock's version, with the queue when
    /// it waits or converts there), in lock id order, each with the agent's direct mode on that
    /// lock if it has one. An agent that starts late (the node's fast path granted its first
    /// locks without one) learns its state from this.
    pub fn agent_state(&self, agent: &AgentId) -> Vec<(LockNotice, Option<Mode>)> {
        // Sorted before the notices are built: they are large to move, the slots are not.
        let mut records: smallvec::SmallVec<[(u32, &super::record::LockRecord); 8]> =
            self.records_of(agent).collect();
        records.sort_unstable_by(|x, y| x.1.id.cmp(&y.1.id));
        let mut out = Vec::with_capacity(records.len());
        out.extend(records.into_iter().filter_map(|(a, rec)| {
            let entry = rec.entry(a)?;
            let state = entry.state();
            let queued = rec.converting().next().is_some() || rec.waiting().next().is_some();
            let with_queue = super::notify::with_queue(&state, queued);
            let notice = LockNotice {
                node: self.node.clone(),
                lock: rec.id.clone(),
                version: rec.version,
                state,
                queue: with_queue.then(|| {
                    std::sync::Arc::new(super::notify::view(rec, &self.modes, &self.agents))
                }),
                note: None,
            };
            Some((notice, entry.direct))
        }));
        out
    }
}
