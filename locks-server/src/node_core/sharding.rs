//! How a node's table is split into shards, and the one function that applies an input to
//! them: [`Sharding::apply`]. Pure and synchronous over the shards' tables; who holds them
//! (a mutex per shard in [`crate::local::LocalTable`], which keeps their versions below the data
//! directory's ceiling, plain tables in the simulations) is the
//! [`ShardAccess`] the caller passes, and who carries the messages is its `send`.
//!
//! **Rules** (their argument follows):
//! - a lock goes to the shard its root key hashes to, so a hierarchy is in one shard;
//! - a request about a lock goes to that lock's shard; the agent is noted as having used it;
//! - `RemoveAgent` goes to the shards the agent used (every shard for an agent not noted);
//! - node down and the end of a lock-delay go to every shard;
//! - a `Surrender` holds every shard its cycle's waits are in (ascending: the lock order),
//!   checks the waits outside the surrendered lock's shard there, and is applied in that shard
//!   with its own waits if they all hold (told whether all the waits together are a whole cycle
//!   through the victim, which lets a moved-on version pass), with all of them (which it cannot
//!   find, so it answers as to a stale surrender) otherwise;
//! - a message that cannot be delivered is fed back into the shard that sent it, as
//!   [`TableInput::Undelivered`]; an agent found gone is then removed from every other shard
//!   too, once the shard that found it is released (each agent once);
//! - notices next to each other in a shard's effects, all to one agent of another node (a lock
//!   and its ancestors), go to the carrier as one run ([`Carrier::send_notices`]); a run it
//!   gives back goes one notice at a time, each fed back like any message. Either way the
//!   agent is sent the same notices in the same order.
//!
//! **Why the shards decide as one table would.** Every decision of the table about a lock reads
//! only the records of its own hierarchy (the lock, its ancestors, its descendants), which are all
//! in one shard, so each shard decides exactly what one table holding everything would for the
//! locks it has; transactions on disjoint hierarchies then take and release locks from different
//! threads without sharing a mutex. What spans shards is decided across them as the rules above
//! say: an agent's removal reaches every shard it has anything in (the fast path's shards are in
//! the transaction's [`Touched`](crate::local::Touched), those its messages used in the `used`
//! map); an agent found gone in one shard is removed from the others, as one table would have
//! removed it everywhere; a surrender whose cycle crosses shards is checked in all of them before
//! it is applied, or answered as stale, as one table would. Reads about an agent visit the
//! shards one after the other; reads of the whole node (snapshot, report, census) visit them a
//! slice of records at a time (`crate::local`).
//!
//! Each shard hands out its own versions (from the same base): a lock's versions grow, which
//! is all a fencing version promises; versions of locks in different shards are not comparable,
//! as those of different nodes are not. For the agents, one node's shards are like several
//! lock servers: the messages of different locks may reach an agent in any relative order,
//! which the agent protocol allows for any two locks (they may be on different nodes).
//!
//! Invariant: the `used` map lists, for every agent that sent requests as messages (or whose
//! actor started after the fast path, [`Sharding::agent_started`]), a superset of the shards
//! it has anything in, except those its fast path used before (which the transaction keeps).

use crate::table::{LockTable, TableEffect, TableInput, Undelivered, closes_cycle};
use locks_core::proto::{AgentMessage, LockNotice, ServerRequest, Wait};
use locks_core::{AgentId, LockId, NodeId};
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::collections::{HashMap, HashSet};

/// The most shards a table can have (shard sets are 64-bit sets).
pub const MAX_SHARDS: usize = 64;

/// The shards of a table an input needs, held together while it is applied.
pub trait ShardAccess {
    /// Runs `f` on the tables of shards `ids` (ascending, distinct), all held exclusively, in
    /// that order.
    fn with_shards<T>(&mut self, ids: &[usize], f: impl FnOnce(&mut [&mut LockTable]) -> T) -> T;

    /// Runs `f` on shard `id`'s table, to read it.
    fn read<T>(&self, id: usize, f: impl FnOnce(&LockTable) -> T) -> T;
}

/// Plain tables (a simulation's node).
impl ShardAccess for [LockTable] {
    fn with_shards<T>(&mut self, ids: &[usize], f: impl FnOnce(&mut [&mut LockTable]) -> T) -> T {
        let mut tables: SmallVec<[&mut LockTable; 2]> = self
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| ids.contains(i))
            .map(|(_, t)| t)
            .collect();
        f(&mut tables)
    }

    fn read<T>(&self, id: usize, f: impl FnOnce(&LockTable) -> T) -> T {
        f(&self[id])
    }
}

/// What became of a message a shard sent (the `send` of [`Sharding::apply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Sent, or dropped for a reason the table does not act on (a node that is down).
    Sent,
    /// The agent is gone: the table removes it.
    Gone,
    /// The message does not fit in a frame to the agent's node.
    TooLarge,
}

/// Who carries the messages the shards send (the `send` of [`Sharding::apply`]): any
/// `FnMut(&AgentId, AgentMessage) -> Delivery` carries them one by one.
pub trait Carrier {
    /// Sends `msg` to `to`, and says what became of it.
    fn send(&mut self, to: &AgentId, msg: AgentMessage) -> Delivery;

    /// Sends several notices of one operation to `to`, an agent of another node, as one
    /// message, in order; or gives them back unsent (then each goes through
    /// [`Carrier::send`], which says what became of it). Gives them back unless overridden.
    fn send_notices(
        &mut self,
        to: &AgentId,
        notices: Vec<LockNotice>,
    ) -> Result<(), Vec<LockNotice>> {
        let _ = to;
        Err(notices)
    }
}

impl<F: FnMut(&AgentId, AgentMessage) -> Delivery> Carrier for F {
    fn send(&mut self, to: &AgentId, msg: AgentMessage) -> Delivery {
        self(to, msg)
    }
}

/// `first` and the notices to `to` that follow it in `effects`, taken from there.
fn notices_to(
    to: &AgentId,
    first: LockNotice,
    effects: &mut std::iter::Peekable<std::vec::IntoIter<TableEffect>>,
) -> Vec<LockNotice> {
    let mut run = vec![first];
    while let Some(TableEffect::Send {
        to: next,
        msg: AgentMessage::Notice(_),
    }) = effects.peek()
    {
        if next != to {
            break;
        }
        if let Some(TableEffect::Send {
            msg: AgentMessage::Notice(notice),
            ..
        }) = effects.next()
        {
            run.push(notice);
        }
    }
    run
}

/// Where an input goes.
enum Route {
    /// One shard.
    One(usize),
    /// These shards (a set).
    Some(u64),
    /// A surrender whose waits may be in several shards.
    Surrender,
}

/// What deliveries left to do once their shard is released.
#[derive(Debug, Default)]
pub struct After {
    /// Ghosts whose lock-delay starts now.
    later: Vec<Vec<AgentId>>,
    /// Agents a shard found gone (with that shard): the other shards must forget them too.
    gone: Vec<(usize, AgentId)>,
}

/// A node's shards: which one a lock is in, which ones an agent used, and how an input is
/// applied to them (see the module documentation).
pub struct Sharding {
    count: usize,
    /// Hashes a root key to its shard (fixed keys: the same lock is in the same shard in
    /// every run, which keeps runs comparable).
    hasher: ahash::RandomState,
    /// Per agent, the shards its messages used (see the module documentation).
    used: Mutex<HashMap<AgentId, u64, ahash::RandomState>>,
}

impl Clone for Sharding {
    fn clone(&self) -> Sharding {
        Sharding {
            count: self.count,
            hasher: self.hasher.clone(),
            used: Mutex::new(self.used.lock().clone()),
        }
    }
}

impl std::fmt::Debug for Sharding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharding")
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

impl Sharding {
    /// `count` shards (1 to [`MAX_SHARDS`]; clamped).
    pub fn new(count: usize) -> Sharding {
        Sharding {
            count: count.clamp(1, MAX_SHARDS),
            hasher: ahash::RandomState::with_seeds(
                0x6c6f_636b_7320_7368,
                0x6172_6473_2062_7920,
                0x726f_6f74_206b_6579,
                0x2068_6173_6865_7321,
            ),
            used: Mutex::new(HashMap::default()),
        }
    }

    /// How many shards.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The shards' tables, one `make()` each, numbering their ghosts apart
    /// ([`LockTable::with_ghost_serials`]): a node's ghosts are unique across its shards, so a
    /// `DelayOver`, which goes to every shard, releases only the ghosts it names.
    pub fn tables(&self, mut make: impl FnMut() -> LockTable) -> Vec<LockTable> {
        let step = self.count as u64;
        (0..step)
            .map(|i| make().with_ghost_serials(i + 1, step))
            .collect()
    }

    /// Every shard, as a set.
    pub fn all(&self) -> u64 {
        u64::MAX >> (MAX_SHARDS - self.count)
    }

    /// The shards of the set `bits`, ascending.
    pub fn members(&self, bits: u64) -> impl Iterator<Item = usize> + use<> {
        (0..self.count).filter(move |i| bits & (1 << i) != 0)
    }

    /// The shard of `lock`: its root key's (an empty id, which every shard refuses alike, in
    /// the first).
    pub fn shard_of(&self, lock: &LockId) -> usize {
        match lock.keys().first() {
            Some(root) => (self.hasher.hash_one(root) >> 32) as usize % self.count,
            None => 0,
        }
    }

    /// A transaction's agent actor starts: its removal must also reach the shards its fast
    /// path used (`bits`), since its requests come as messages from now on.
    pub fn agent_started(&self, agent: &AgentId, bits: u64) {
        *self.used.lock().entry(agent.clone()).or_default() |= bits;
    }

    /// The shards a `RemoveAgent` of `agent` goes to (every shard for an agent not noted),
    /// no longer noted: what routing its `RemoveAgent` does, for a shell that removes the
    /// agent a part at a time.
    pub fn forget_agent(&self, agent: &AgentId) -> u64 {
        self.used.lock().remove(agent).unwrap_or(self.all())
    }

    /// The shards `agent`'s messages used so far (none noted: the empty set).
    pub fn used_by(&self, agent: &AgentId) -> u64 {
        self.used.lock().get(agent).copied().unwrap_or(0)
    }

    fn mark_used(&self, agent: &AgentId, shard: usize) {
        let mut used = self.used.lock();
        match used.get_mut(agent) {
            Some(bits) => *bits |= 1 << shard,
            None => {
                used.insert(agent.clone(), 1 << shard);
            }
        }
    }

    fn route(&self, input: &TableInput) -> Route {
        match input {
            TableInput::Request(request) => match request {
                ServerRequest::Lock { lock, .. }
                | ServerRequest::TryLock { lock, .. }
                | ServerRequest::Convert { lock, .. }
                | ServerRequest::Unlock { lock, .. }
                | ServerRequest::SurrenderTo { lock, .. }
                | ServerRequest::Watch { lock, .. }
                | ServerRequest::Unwatch { lock, .. }
                | ServerRequest::RaiseVersions { lock, .. } => Route::One(self.shard_of(lock)),
                ServerRequest::Surrender { .. } => Route::Surrender,
                ServerRequest::RemoveAgent { agent } => {
                    let used = self.used.lock().remove(agent);
                    Route::Some(used.unwrap_or(self.all()))
                }
            },
            TableInput::Undelivered { why, .. } => match why {
                Undelivered::TooLarge(AgentMessage::Notice(notice)) => {
                    Route::One(self.shard_of(&notice.lock))
                }
                Undelivered::TooLarge(AgentMessage::Watched { lock, .. }) => {
                    Route::One(self.shard_of(lock))
                }
                Undelivered::TooLarge(_) | Undelivered::Gone => Route::Some(self.all()),
            },
            TableInput::NodeDown { node, .. } => {
                self.forget_node(node);
                Route::Some(self.all())
            }
            TableInput::DelayOver(_) => Route::Some(self.all()),
        }
    }

    fn forget_node(&self, node: &NodeId) {
        self.used.lock().retain(|agent, _| agent.node() != node);
    }

    /// Applies `input` to the shards it is about, passing every message they send to `send`,
    /// in order, with the sending shard held; returns the ghosts to release once the
    /// lock-delay has passed (feed them back as [`TableInput::DelayOver`]).
    pub fn apply<S: ShardAccess + ?Sized>(
        &self,
        shards: &mut S,
        input: TableInput,
        send: &mut impl Carrier,
    ) -> Vec<Vec<AgentId>> {
        let mut after = After::default();
        match self.route(&input) {
            Route::One(i) => {
                if let TableInput::Request(request) = &input {
                    self.mark_used(request.agent(), i);
                }
                shards.with_shards(&[i], |t| {
                    let table = &mut *t[0];
                    let effects = table.step(input);
                    self.deliver(i, table, effects, &mut after, send);
                });
            }
            Route::Some(bits) => {
                for i in self.members(bits) {
                    shards.with_shards(&[i], |t| {
                        let table = &mut *t[0];
                        let effects = table.step(input.clone());
                        self.deliver(i, table, effects, &mut after, send);
                    });
                }
            }
            Route::Surrender => {
                if let TableInput::Request(ServerRequest::Surrender {
                    agent,
                    lock,
                    version,
                    waits,
                }) = input
                {
                    self.surrender(shards, agent, lock, version, waits, &mut after, send);
                }
            }
        }
        self.finish(shards, after, send)
    }

    /// A surrender (see the module documentation).
    #[allow(clippy::too_many_arguments)]
    fn surrender<S: ShardAccess + ?Sized>(
        &self,
        shards: &mut S,
        agent: AgentId,
        lock: LockId,
        version: u64,
        waits: Vec<Wait>,
        after: &mut After,
        send: &mut impl Carrier,
    ) {
        let home = self.shard_of(&lock);
        let mut involved: SmallVec<[usize; 2]> =
            waits.iter().map(|w| self.shard_of(&w.lock)).collect();
        involved.push(home);
        involved.sort_unstable();
        involved.dedup();
        let Some(h) = involved.iter().position(|&i| i == home) else {
            return;
        };
        let whole = closes_cycle(&agent, &lock, &waits);
        shards.with_shards(&involved, |tables| {
            let others_hold = waits.iter().all(|w| {
                let i = self.shard_of(&w.lock);
                i == home
                    || involved
                        .iter()
                        .position(|&j| j == i)
                        .is_some_and(|k| tables[k].still_waits(w))
            });
            let table = &mut *tables[h];
            let effects = if others_hold {
                let here: Vec<Wait> = waits
                    .into_iter()
                    .filter(|w| self.shard_of(&w.lock) == home)
                    .collect();
                table.step_surrender(&agent, &lock, version, &here, whole)
            } else {
                table.step(TableInput::Request(ServerRequest::Surrender {
                    agent,
                    lock,
                    version,
                    waits,
                }))
            };
            self.deliver(home, table, effects, after, send);
        });
    }

    /// Delivers shard `shard`'s effects in order through `send`, with the shard held; a
    /// message that cannot be delivered is fed back into the shard and what that yields
    /// delivered in turn. What must wait for the shard's release goes to `after`.
    pub fn deliver(
        &self,
        shard: usize,
        table: &mut LockTable,
        effects: Vec<TableEffect>,
        after: &mut After,
        send: &mut impl Carrier,
    ) {
        if effects.is_empty() {
            // The common case of the fast path: nothing to send, nothing to allocate.
            return;
        }
        let mut batches = vec![effects];
        while let Some(batch) = batches.pop() {
            let mut batch = batch.into_iter().peekable();
            // Notices `send_notices` gave back, to send one by one first, and their addressee.
            let mut unsent: Option<(AgentId, std::vec::IntoIter<LockNotice>)> = None;
            loop {
                let retry = unsent
                    .as_mut()
                    .and_then(|(to, run)| Some((to.clone(), run.next()?)));
                let (to, msg) = match retry {
                    Some((to, notice)) => (to, AgentMessage::Notice(notice)),
                    None => {
                        unsent = None;
                        match batch.next() {
                            None => break,
                            Some(TableEffect::Send { to, msg }) => (to, msg),
                            Some(TableEffect::ReleaseLater(ghosts)) => {
                                after.later.push(ghosts);
                                continue;
                            }
                        }
                    }
                };
                // The notices of one operation to one agent of another node go as one message.
                let msg = match msg {
                    AgentMessage::Notice(first)
                        if unsent.is_none() && to.node() != table.node() =>
                    {
                        let mut run = notices_to(&to, first, &mut batch);
                        if run.len() > 1 {
                            match send.send_notices(&to, run) {
                                Ok(()) => {}
                                Err(back) => unsent = Some((to, back.into_iter())),
                            }
                            continue;
                        }
                        AgentMessage::Notice(run.pop().expect("a run holds its first notice"))
                    }
                    msg => msg,
                };
                // Only a message to another node can be too large for its frame, and only then
                // does the table need it back: a copy for every notice to a local agent (three
                // reference counts up and down) was a fortieth of a hot lock's hand-off.
                let copy = (to.node() != table.node()).then(|| msg.clone());
                let why = match (send.send(&to, msg), copy) {
                    (Delivery::Sent, _) => continue,
                    (Delivery::TooLarge, Some(msg)) => Undelivered::TooLarge(msg),
                    (Delivery::TooLarge, None) => {
                        tracing::debug!(node = %table.node(), agent = %to, "a message to a local agent reported too large; dropped");
                        continue;
                    }
                    (Delivery::Gone, _) => {
                        after.gone.push((shard, to.clone()));
                        Undelivered::Gone
                    }
                };
                batches.push(table.step(TableInput::Undelivered { agent: to, why }));
            }
        }
    }

    /// What is left once the shards that delivered are released: the agents some shard found
    /// gone are removed from every other shard (each agent once). Returns the ghosts to
    /// release later.
    pub fn finish<S: ShardAccess + ?Sized>(
        &self,
        shards: &mut S,
        mut after: After,
        send: &mut impl Carrier,
    ) -> Vec<Vec<AgentId>> {
        if after.gone.is_empty() {
            return after.later;
        }
        let mut done: HashSet<AgentId> = HashSet::new();
        while let Some((found_by, agent)) = after.gone.pop() {
            if !done.insert(agent.clone()) {
                continue;
            }
            self.used.lock().remove(&agent);
            for i in (0..self.count).filter(|&i| i != found_by) {
                shards.with_shards(&[i], |t| {
                    let table = &mut *t[0];
                    let effects = table.step(TableInput::Request(ServerRequest::RemoveAgent {
                        agent: agent.clone(),
                    }));
                    self.deliver(i, table, effects, &mut after, send);
                });
            }
        }
        after.later
    }
}

#[cfg(test)]
mod tests;
