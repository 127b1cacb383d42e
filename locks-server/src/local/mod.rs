//! The node's lock table, shared by the lock server actor and the fast path, in shards.
//!
//! [`LocalTable`] owns the node's lock tables, one [`LockTable`] per **shard**, each behind its
//! own mutex, and is the only code that applies an input to them (through
//! [`Sharding::apply`], or its parts for the fast path): it picks the shard (or shards) an
//! input is about, steps that shard's table ([`LockTable::step`]) and delivers its
//! effects through the [`Router`] *while it holds that shard's lock*, so that the messages of
//! one operation on a lock reach every agent before those of the next (an agent then sees one
//! lock's versions in order, whichever thread applied them). A send that fails is fed back into
//! the same shard as [`TableInput::Undelivered`].
//!
//! **Shards.** A lock goes to the shard its *root key* hashes to, so a hierarchy is always in
//! one shard and each shard decides exactly what one table holding everything would; which
//! shard an input goes to, and what spans shards, is decided in
//! [`crate::node_core::sharding`] (which states the rules and their argument).
//!
//! Two shells call it:
//! - the [`crate::LockServer`] actor, for requests that come as messages (from agent actors
//!   and from other nodes), node down, and the end of lock-delays, as its core
//!   (`crate::node_core`) decides;
//! - the **fast path** ([`LocalTable::fast_lock`], [`LocalTable::release`],
//!   [`LocalTable::unlock`]), called by a transaction on the caller's own thread, with no actor
//!   hop and no wake-up of another thread. It applies the very same `Lock`, `Unlock` and
//!   `RemoveAgent` operations of the table, so the table decides exactly as it would for a
//!   message: a fast-path request never overtakes a waiter or a converter (FIFO), its grant
//!   carries the fencing version, and hierarchy is the table's. What differs is only who reads
//!   the answer: the requesting agent is told nothing but a refusal
//!   ([`LockTable::lock_quiet`], [`LockTable::step_quiet`]: its notices are not even built),
//!   and the caller reads the grant from the table ([`LockTable::holds`]); an agent that starts
//!   later learns the same state from [`LocalTable::agent_state`]. Everybody else gets exactly
//!   the messages a request sent as a message would have caused.
//!
//! During the start-delay of a clustered node nothing is granted: the requests that come as
//! messages are kept in order by the node's core (`crate::node_core`) and served when it ends,
//! and until then the fast path answers [`FastLock::NotNow`] so that its caller sends the
//! request as a message behind them (`LocalTable::open_fast_path` lets it in).
//!
//! This module is the shell that holds the shards behind their mutexes, carries the messages
//! through the router, and runs the fast path; the simulations run the same
//! [`Sharding::apply`] over plain tables. Work on the whole table (the report and the snapshot,
//! the release of a downed node's ghosts, the removal of an agent with many locks) is taken a
//! slice at a time (`whole.rs`), so that no shard's mutex, and no turn of the node's thread,
//! lasts a whole pass over a large table.
//!
//! **Per-peer quotas.** A `Lock` of another node's agent that comes as a message is checked
//! against the quota book ([`crate::node_core::quota`]) before the table sees it, and refused with
//! `Rejection::QuotaExceeded` when it would take that node past a quota. The book follows
//! what the table tells other nodes' agents about their entries (every notice to one passes
//! through this shell's send, under the shard's lock), and forgets an agent removed or found
//! gone and a node that went down. The node's own agents, and so the fast path, are not
//! counted.
//!
//! Lock order: shards in ascending index, then the router's
//! registry (inside a delivery). Nothing takes a shard while holding a higher one; the `used`
//! map of [`Sharding`] is never held together with a shard. The quota book is taken last, and
//! nothing is taken while it is held.

mod reads;
mod whole;

pub use crate::node_core::sharding::{After, Carrier, Delivery, MAX_SHARDS, ShardAccess, Sharding};

use crate::data_dir::VersionReserve;
use crate::node_core::quota::{PeerQuotas, QuotaBook};
use crate::router::{Presence, RouteError, Router};
use crate::table::{LockTable, TableEffect, TableInput};
use locks_core::proto::{AgentMessage, LockNotice, Quota, Rejection, ServerRequest};
use locks_core::{AgentId, LockId, Mode};
use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tracing::debug;

/// How many shards a node's table has.
pub const SHARDS: usize = 16;

/// Removes from `effects` the messages to `agent` (after [`LockTable::step_quiet`], only a
/// refusal can be left for it) and returns the refusal's reason, if there was one.
fn take_rejection(effects: &mut Vec<TableEffect>, agent: &AgentId) -> Option<Rejection> {
    let mut refused = None;
    effects.retain_mut(|effect| match effect {
        TableEffect::Send { to, msg } if to == agent => {
            if let AgentMessage::Rejected { reason, .. } = msg {
                refused.get_or_insert_with(|| reason.clone());
            }
            false
        }
        _ => true,
    });
    refused
}

/// What [`LocalTable::fast_lock`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FastLock {
    /// Granted now: the agent holds its direct lock (in this mode, the group of everything it
    /// asked for on that id) and every ancestor's intention; the lock's version is the fencing
    /// token.
    Granted {
        /// The agent's direct mode on the lock.
        mode: Mode,
        /// The lock's version.
        version: u64,
    },
    /// Queued in the table, as a `Lock` message would have been: the agent must follow the
    /// request up (the table's answer was not sent to it; see [`LocalTable::agent_state`]).
    Queued,
    /// Not tried: the node is in its start-delay. Send the request as a message.
    NotNow,
    /// Refused by the table (nothing changed).
    Rejected(Rejection),
    /// The node has stopped: nothing is granted any more.
    Stopped,
}

/// Whom the quota book forgets once an input is applied.
enum Forget {
    Node(locks_core::NodeId),
    Agent(AgentId),
}

/// The shards' tables, and what keeps their versions below the ceiling on disk: every path
/// that may change a table takes it through [`Shards::lock`].
struct Shards {
    tables: Box<[Mutex<LockTable>]>,
    reserve: VersionReserve,
}

impl Shards {
    /// Shard `i`'s table, to change it: the ceiling on disk is moved first if the shard's
    /// version nears it (once per half a reserve; nothing per grant).
    fn lock(&self, i: usize) -> MutexGuard<'_, LockTable> {
        let table = self.tables[i].lock();
        self.reserve.ensure(table.version());
        table
    }
}

/// Shards behind a mutex each, locked in the order asked for.
impl ShardAccess for &Shards {
    fn with_shards<T>(&mut self, ids: &[usize], f: impl FnOnce(&mut [&mut LockTable]) -> T) -> T {
        let mut guards: smallvec::SmallVec<[MutexGuard<'_, LockTable>; 2]> =
            ids.iter().map(|&i| self.lock(i)).collect();
        let mut tables: smallvec::SmallVec<[&mut LockTable; 2]> =
            guards.iter_mut().map(|g| &mut **g).collect();
        f(&mut tables)
    }

    fn read<T>(&self, id: usize, f: impl FnOnce(&LockTable) -> T) -> T {
        f(&self.tables[id].lock())
    }
}

/// The shards' [`Carrier`]: the table's messages through the router, booked in the quotas.
struct Routed<'a>(&'a LocalTable);

impl Carrier for Routed<'_> {
    fn send(&mut self, to: &AgentId, msg: AgentMessage) -> Delivery {
        self.0.send(to, msg)
    }

    fn send_notices(
        &mut self,
        to: &AgentId,
        notices: Vec<LockNotice>,
    ) -> Result<(), Vec<LockNotice>> {
        self.0.send_notices(to, notices)
    }
}

/// The shards one transaction has put requests in, so that its release visits only those. A
/// set of bits, updated by the transaction's own calls, which its own lock serializes (so
/// relaxed loads and stores suffice).
#[derive(Debug, Default)]
pub struct Touched(AtomicU64);

impl Touched {
    /// Whether no shard was used yet (the transaction has taken nothing on the fast path).
    pub fn none(&self) -> bool {
        self.0.load(Ordering::Relaxed) == 0
    }

    /// Every shard.
    pub fn all() -> Touched {
        Touched(AtomicU64::new(u64::MAX))
    }

    fn mark(&self, shard: usize) {
        // A load and, the first time, a store: the transaction's calls are serialized by its
        // own lock, so no two marks race, and the common case is a plain read.
        let bits = self.0.load(Ordering::Relaxed);
        if bits & (1 << shard) == 0 {
            self.0.store(bits | (1 << shard), Ordering::Relaxed);
        }
    }

    fn bits(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The node's lock table in shards, and the shell that applies inputs to them (see the
/// module documentation). What changes the table from outside the crate acts only for the
/// transaction whose [`Presence`] the caller holds.
pub struct LocalTable {
    shards: Shards,
    sharding: Sharding,
    /// The start-delay has passed and the kept requests are applied: the fast path may try.
    serving: AtomicBool,
    /// The node's lock server has stopped.
    stopped: AtomicBool,
    /// What the agents of each peer node take of the table (`crate::node_core::quota`). Taken
    /// inside a shard's lock (a notice is recorded as it is sent), never the other way round.
    quotas: Mutex<QuotaBook>,
    router: Arc<Router>,
    /// The node's thread, once its lock server runs: a release there too large for one turn
    /// is left to the lock server, paced.
    home: std::sync::OnceLock<std::thread::ThreadId>,
}

impl std::fmt::Debug for LocalTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTable")
            .field("node", self.router.node())
            .field("shards", &self.shards.tables.len())
            .finish_non_exhaustive()
    }
}

impl LocalTable {
    /// The table of the router's node, one `make()` per shard (every one with the same node,
    /// modes and version base). With `start_delay`, the fast path grants nothing until
    /// `LocalTable::open_fast_path`.
    pub fn new(
        router: Arc<Router>,
        make: impl FnMut() -> LockTable,
        start_delay: bool,
    ) -> LocalTable {
        let sharding = Sharding::new(SHARDS);
        LocalTable {
            shards: Shards {
                tables: sharding.tables(make).into_iter().map(Mutex::new).collect(),
                reserve: VersionReserve::none(),
            },
            sharding,
            serving: AtomicBool::new(!start_delay),
            stopped: AtomicBool::new(false),
            quotas: Mutex::new(QuotaBook::new(router.node().clone(), PeerQuotas::default())),
            router,
            home: std::sync::OnceLock::new(),
        }
    }

    /// Limits what the agents of one peer node may take of the table (see [`PeerQuotas`]).
    pub(crate) fn with_quotas(self, limits: PeerQuotas) -> LocalTable {
        *self.quotas.lock() = QuotaBook::new(self.router.node().clone(), limits);
        self
    }

    /// Keeps the versions below a ceiling in the node's data directory (see
    /// [`crate::data_dir`]).
    pub(crate) fn with_reserve(mut self, reserve: VersionReserve) -> LocalTable {
        self.shards.reserve = reserve;
        self
    }

    /// Every shard hands out versions above `floor` from now on, and with a data directory
    /// also after a restart: the ceiling on disk is above `floor` when this returns. (A leader
    /// member on this node raises them to a term it accepts: see `locks-leader`.)
    pub fn raise_versions(&self, floor: u64) {
        for i in 0..self.shards.tables.len() {
            self.shards.lock(i).raise_version(floor);
        }
        self.shards.reserve.ensure(floor);
    }

    /// The router the table's messages go through.
    pub(crate) fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// The shard of `lock` (for tests that need locks in the same or different shards).
    pub fn shard(&self, lock: &LockId) -> usize {
        self.sharding.shard_of(lock)
    }

    /// Sends a shard's message through the router, and says what became of it. What it tells
    /// an agent of another node about its own entry, or what its failure makes the table do
    /// to that agent, then goes into the quota book (under the shard's lock, so in the order
    /// the table decided).
    fn send(&self, to: &AgentId, msg: AgentMessage) -> Delivery {
        let told = match &msg {
            AgentMessage::Notice(n) if to.node() != self.router.node() => {
                Some((n.lock.clone(), n.state))
            }
            _ => None,
        };
        let delivery = self.deliver(to, msg);
        if let Some((lock, state)) = told {
            let mut quotas = self.quotas.lock();
            match delivery {
                Delivery::Sent => quotas.notice(to, &lock, state),
                Delivery::TooLarge => quotas.withdrawn(to, &lock),
                Delivery::Gone => quotas.remove_agent(to),
            }
        } else if delivery == Delivery::Gone && to.node() != self.router.node() {
            self.quotas.lock().remove_agent(to);
        }
        delivery
    }

    /// Sends several notices to an agent of another node as one message (see
    /// [`Carrier::send_notices`]), and books them as [`Self::send`] does; gives them back if
    /// that did not go as sent.
    fn send_notices(&self, to: &AgentId, notices: Vec<LockNotice>) -> Result<(), Vec<LockNotice>> {
        // Kept to give back: on a refusal the router has consumed the message.
        let back = notices.clone();
        match self.delivery(to, self.router.send_agent_notices(to, notices)) {
            Delivery::Sent => {
                let mut quotas = self.quotas.lock();
                for notice in &back {
                    quotas.notice(to, &notice.lock, notice.state);
                }
                Ok(())
            }
            Delivery::TooLarge | Delivery::Gone => Err(back),
        }
    }

    /// [`Self::send`] without the quota book.
    fn deliver(&self, to: &AgentId, msg: AgentMessage) -> Delivery {
        self.delivery(to, self.router.send_agent(to, msg))
    }

    /// What a send's result means to the table.
    fn delivery(&self, to: &AgentId, sent: Result<(), RouteError>) -> Delivery {
        match sent {
            Ok(()) => Delivery::Sent,
            // A remote node that is down: its agents are removed by the node-down handling,
            // not here, so a partition does not look like a death.
            Err(RouteError::NotConnected(node)) => {
                crate::limited!(self.router.warnings(), "notice to a disconnected node", warn, node = %self.router.node(), peer = %node, agent = %to, "notice to an agent on a disconnected node dropped");
                Delivery::Sent
            }
            Err(RouteError::Unsendable { node, reason }) => {
                debug!(node = %self.router.node(), agent = %to, peer = %node, reason, "a message to an agent cannot be sent");
                Delivery::TooLarge
            }
            Err(err) => {
                debug!(node = %self.router.node(), agent = %to, %err, "agent unreachable; releasing its locks");
                Delivery::Gone
            }
        }
    }

    /// Applies `input` and delivers what the table says; returns the ghosts to release once
    /// the lock-delay has passed (feed them back as [`TableInput::DelayOver`]).
    pub(crate) fn apply(&self, input: TableInput) -> Vec<Vec<AgentId>> {
        // After the table: from then on no entry of theirs is left to be told about.
        let forget = match &input {
            TableInput::NodeDown { node, .. } => Some(Forget::Node(node.clone())),
            TableInput::Request(ServerRequest::RemoveAgent { agent }) => {
                Some(Forget::Agent(agent.clone()))
            }
            _ => None,
        };
        let mut shards = &self.shards;
        let ghosts = self.sharding.apply(&mut shards, input, &mut Routed(self));
        match forget {
            Some(Forget::Node(node)) => self.quotas.lock().node_down(&node),
            Some(Forget::Agent(agent)) => self.quotas.lock().remove_agent(&agent),
            None => {}
        }
        ghosts
    }

    /// A request that came as a message (and that the node's core let through: see
    /// `crate::node_core`), applied unless it would take a peer past a quota.
    pub(crate) fn admit(&self, request: ServerRequest) {
        tracing::trace!(target: "lock_path", hop = 7, agent = %request.agent(), "to its shard");
        if let ServerRequest::RaiseVersions { floor, .. } = &request {
            // On disk before the table answers: the answer promises versions above `floor`
            // after a restart too.
            self.shards.reserve.ensure(*floor);
        }
        if let ServerRequest::Lock { agent, lock, .. }
        | ServerRequest::TryLock { agent, lock, .. } = &request
        {
            // Taken and let go before the table: only this shell adds a peer's entries, and
            // whatever happens meanwhile on other threads only lowers the counts.
            let admitted = self.quotas.lock().admit(agent, lock);
            if let Err(quota) = admitted {
                return self.refuse_over_quota(agent, lock, quota);
            }
        }
        self.apply(TableInput::Request(request));
    }

    /// Tells `agent` its `Lock` of `lock` is refused for `quota`, and counts it.
    fn refuse_over_quota(&self, agent: &AgentId, lock: &LockId, quota: Quota) {
        let limit = self.quotas.lock().limits().limit(quota);
        self.router.metrics().quota_refused(quota);
        crate::limited!(self.router.warnings(), "request over a peer quota", warn, node = %self.router.node(), peer = %agent.node(), %agent, quota = quota.name(), limit, "a peer's lock request refused: it would pass the per-peer quota");
        let msg = AgentMessage::Rejected {
            node: self.router.node().clone(),
            lock: lock.clone(),
            reason: Rejection::QuotaExceeded { quota, limit },
        };
        if let Err(err) = self.router.send_agent(agent, msg) {
            debug!(node = %self.router.node(), %agent, %err, "a quota refusal cannot be sent");
        }
    }

    /// The start-delay is over and the requests kept meanwhile are served: the fast path may
    /// grant from now on.
    pub(crate) fn open_fast_path(&self) {
        self.serving.store(true, Ordering::Release);
    }

    /// Steps shard `i` with what `step` returns, delivers it, and finishes (see
    /// [`Sharding::finish`]); returns what `step` returned beside the effects.
    fn on_shard<T>(
        &self,
        i: usize,
        step: impl FnOnce(&mut LockTable) -> (Vec<TableEffect>, T),
    ) -> T {
        let mut send = Routed(self);
        let mut after = After::default();
        let out = {
            let mut table = self.shards.lock(i);
            let (effects, out) = step(&mut table);
            self.sharding
                .deliver(i, &mut table, effects, &mut after, &mut send);
            out
        };
        let mut shards = &self.shards;
        self.sharding.finish(&mut shards, after, &mut send);
        out
    }

    /// The fast path of `Lock`: applies `agent`'s request for `lock` in `mode` now, on the
    /// caller's thread, and says whether it holds the lock (see [`FastLock`]); marks the shard
    /// in `touched`. Everybody else is told what the table says, as for any request.
    pub fn fast_lock(
        &self,
        presence: &Presence,
        lock: &LockId,
        mode: Mode,
        touched: &Touched,
    ) -> FastLock {
        self.fast_lock_as(presence.id(), lock, mode, touched)
    }

    /// [`Self::fast_lock`] for any agent id (the crate's own).
    pub(crate) fn fast_lock_as(
        &self,
        agent: &AgentId,
        lock: &LockId,
        mode: Mode,
        touched: &Touched,
    ) -> FastLock {
        if !self.serving.load(Ordering::Acquire) {
            return FastLock::NotNow;
        }
        let i = self.sharding.shard_of(lock);
        touched.mark(i);
        self.on_shard(i, |table| {
            if self.stopped.load(Ordering::Acquire) {
                return (Vec::new(), FastLock::Stopped);
            }
            let (mut effects, held) = table.lock_quiet(agent, lock, mode);
            // What is left for the requester is a refusal, if anything.
            let refused = take_rejection(&mut effects, agent);
            let held = held.filter(|_| refused.is_none());
            if held.is_none() && refused.is_none() {
                // Before anybody hears of the wait: from now on the agent's probes are kept
                // for the actor that will follow the request up.
                self.router.idle_agent_waits(agent);
            }
            let answer = match (refused, held) {
                (Some(reason), _) => FastLock::Rejected(reason),
                (None, Some((mode, version))) => FastLock::Granted { mode, version },
                (None, None) => FastLock::Queued,
            };
            (effects, answer)
        })
    }

    /// The fast path of `Unlock`: releases the direct lock of the transaction of `presence` on
    /// `lock` (or withdraws its request) now. Refused when it has no direct lock there.
    pub fn unlock(&self, presence: &Presence, lock: &LockId) -> Result<(), Rejection> {
        self.unlock_as(presence.id(), lock)
    }

    /// [`Self::unlock`] for any agent id.
    pub(crate) fn unlock_as(&self, agent: &AgentId, lock: &LockId) -> Result<(), Rejection> {
        let request = ServerRequest::Unlock {
            agent: agent.clone(),
            lock: lock.clone(),
        };
        let refused = self.on_shard(self.sharding.shard_of(lock), |table| {
            let mut effects = table.step_quiet(request);
            let refused = take_rejection(&mut effects, agent);
            (effects, refused)
        });
        match refused {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }

    /// The fast path of `RemoveAgent`: releases everything the transaction of `presence` has
    /// in the shards of `touched`, now.
    pub fn release(&self, presence: &Presence, touched: &Touched) {
        self.release_as(presence.id(), touched);
    }

    /// [`Self::release`] for any agent id.
    pub(crate) fn release_as(&self, agent: &AgentId, touched: &Touched) {
        self.release_in(agent, touched.bits());
    }

    /// Releases everything the transaction of `presence`, whose actor runs, has in the shards
    /// of `touched` and in those its messages used so far, now, on the caller's thread (the
    /// agent's own `RemoveAgent`, which follows whatever it sent, covers requests still on
    /// their way).
    pub fn release_started(&self, presence: &Presence, touched: &Touched) {
        let agent = presence.id();
        self.release_in(agent, touched.bits() | self.sharding.used_by(agent));
    }

    /// Releases what `agent` has in the shards of `bits`. A part of [`whole::RELEASE_SLICE`]
    /// locks per shard at most is released now; what is left (a transaction of many locks) is
    /// released now too, a part at a time with the shard's mutex let go between parts, on any
    /// thread but the node's, and on the node's thread by the node's lock server, paced (see
    /// [`LocalTable::remove_agent`]), so that no release holds the node's thread for long.
    fn release_in(&self, agent: &AgentId, bits: u64) {
        let left = self.release_first(agent, bits);
        if left == 0 {
            return;
        }
        if self.on_node_thread() {
            // Behind whatever the thread has queued: a waiter granted a little later, nothing
            // granted twice (each part is the agent's own `Unlock`s).
            if self
                .router
                .send_server(
                    self.router.node(),
                    ServerRequest::RemoveAgent {
                        agent: agent.clone(),
                    },
                )
                .is_ok()
            {
                return;
            }
        }
        for shard in self.sharding.members(left) {
            while !self.on_shard(shard, |t| t.step_release_some(agent, whole::RELEASE_SLICE)) {}
        }
    }

    /// Releases at most [`whole::RELEASE_SLICE`] of `agent`'s locks in each shard of `bits`
    /// (all of them where it has no more); returns the shards where it has more left.
    fn release_first(&self, agent: &AgentId, bits: u64) -> u64 {
        let mut left = 0;
        for shard in self.sharding.members(bits) {
            if !self.on_shard(shard, |t| t.step_release_some(agent, whole::RELEASE_SLICE)) {
                left |= 1 << shard;
            }
        }
        left
    }

    /// Whether the calling thread is the node's (the one its lock server runs on).
    fn on_node_thread(&self) -> bool {
        self.home
            .get()
            .is_some_and(|home| *home == std::thread::current().id())
    }

    /// The node's lock server runs on the calling thread (called once, when it starts).
    pub(crate) fn set_home(&self) {
        let _ = self.home.set(std::thread::current().id());
    }

    /// A transaction's agent actor starts: its removal must also reach the shards its fast
    /// path used, since its requests come as messages from now on.
    pub fn agent_started(&self, presence: &Presence, touched: &Touched) {
        self.sharding.agent_started(presence.id(), touched.bits());
    }

    /// The node's lock server stopped: the fast path grants nothing from now on.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }
}
