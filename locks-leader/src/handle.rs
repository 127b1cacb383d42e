//! [`start`] and the [`Member`] handle.
//!
//! A handle is cheap to clone; the member stops when the last clone is dropped or on
//! [`Member::stop`]. Every call goes to the member's actor on its node's thread and its answer
//! comes back on a oneshot channel, so a handle works from any runtime or thread. The leader
//! this member believes in is published on a `tokio::sync::watch` channel
//! ([`Member::leader`], [`Member::changes`]), which needs no particular runtime either.
//! [`Member::is_leader`] does not trust that channel alone: it checks the leader's
//! [`LeaderProof`] against the node's leases at the moment it is asked.

use crate::actor::{Client, MemberActor};
use crate::callbacks::Callbacks;
use crate::core::MemberCore;
use crate::error::{CallError, Error};
use crate::info::MemberInfo;
use crate::lease::{SharedProof, lease_valid};
use crate::options::{ElectionMode, GroupOptions};
use crate::remembered::TermRecord;
use crate::term::{Role, Term};
use actix::prelude::*;
use futures::channel::oneshot;
use locks_core::{Key, LockId, MemberId};
use locks_server::Node;
use locks_server::embed::{NodeInternals, Port};
use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use tokio::sync::watch;

/// The timeout of [`Member::leader_call`] and [`Member::call`] (Erlang's 5 s).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The election lock of `group`: `["locks_leader", group]`.
pub fn election_lock(group: &Key) -> LockId {
    LockId::from_iter([Key::from("locks_leader"), group.clone()])
}

/// The sync lock of `group`: `["locks_leader_sync", group]` (under its own root, so no group
/// name can make it a descendant of an election lock).
pub fn sync_lock(group: &Key) -> LockId {
    LockId::from_iter([Key::from("locks_leader_sync"), group.clone()])
}

/// Starts a member of `group` on `node`, with `callbacks` as its state, in `role`, in
/// majority mode (the default [`GroupOptions`]; see [`start_with`]). Returns once its `init`
/// has run and it has asked for the election lock (a candidate) and started watching it; the
/// election goes on in the background (see [`Member::changes`]).
///
/// A service whose leader hands out ids (a fuller example, with a broadcast to the followers,
/// is in the crate documentation):
///
/// ```
/// use locks_leader::{CallReturn, Callbacks, Caller, Ctx, Elected, Handled, MemberId, Role, start};
/// use locks_server::{Node, NodeConfig};
/// use std::time::Duration;
///
/// struct Ids(u64);
///
/// impl Callbacks for Ids {
///     type Call = ();
///     type Reply = u64;
///     type Cast = ();
///     type Broadcast = u64;
///     type Info = ();
///
///     // The new leader tells every member the last id handed out.
///     fn elected(&mut self, _: Option<&MemberId>, _: &mut Ctx<'_, Self>) -> Elected<u64> {
///         Elected::Broadcast(self.0)
///     }
///     fn surrendered(&mut self, last: u64, _: &mut Ctx<'_, Self>) -> Handled<u64> {
///         self.0 = last;
///         Handled::Ok
///     }
///     fn from_leader(&mut self, last: u64, _: &mut Ctx<'_, Self>) -> Handled<u64> {
///         self.0 = last;
///         Handled::Ok
///     }
///     fn handle_leader_call(&mut self, _: (), _: Caller, _: &mut Ctx<'_, Self>) -> CallReturn<u64, u64> {
///         self.0 += 1;
///         CallReturn::ReplyBroadcast(self.0, self.0) // the followers learn it too
///     }
///     fn handle_call(&mut self, _: (), _: Caller, _: &mut Ctx<'_, Self>) -> CallReturn<u64, u64> {
///         CallReturn::Reply(self.0)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let node = Node::start(NodeConfig::new("doc")).await.unwrap();
/// let member = start(&node, "ids", Ids(0), Role::Candidate).await.unwrap();
/// // Alone in its group, the member elects itself; wait for it, bounded.
/// let term = tokio::time::timeout(Duration::from_secs(20), member.wait_for_leader())
///     .await
///     .expect("elected within 20 s")
///     .unwrap();
/// assert_eq!(&term.leader, member.id());
/// // A leader call goes to whichever member leads, from any member.
/// assert_eq!(member.leader_call(()).await, Ok(1));
/// node.shutdown().await;
/// # }
/// ```
pub async fn start<C: Callbacks>(
    node: &Node,
    group: impl Into<Key>,
    callbacks: C,
    role: Role,
) -> Result<Member<C>, Error> {
    start_with(node, group, callbacks, role, GroupOptions::default()).await
}

/// Starts a member as [`start`] does, with `options`: majority or islands mode, and the
/// group's configured nodes. Every member of a group must be started with the same mode.
pub async fn start_with<C: Callbacks>(
    node: &Node,
    group: impl Into<Key>,
    callbacks: C,
    role: Role,
    options: GroupOptions,
) -> Result<Member<C>, Error> {
    if !node.is_running() {
        return Err(Error::NodeStopped);
    }
    let group = group.into();
    let lock = election_lock(&group);
    let fresh = node.next_agent_id();
    let agent_id = fresh.id().clone();
    let id = fresh.member();
    let (leader_tx, leader_rx) = watch::channel(None);
    let (ready_tx, ready_rx) = oneshot::channel();
    let record = TermRecord::open(node, &group).map_err(|e| Error::DataDir(e.to_string()))?;
    let mut core = MemberCore::with_options(
        agent_id,
        role,
        lock,
        node.modes().clone(),
        callbacks,
        &options,
    );
    if let Some(term) = record.as_ref().and_then(TermRecord::recalled) {
        core.recall(term.clone());
    }
    let actor_node = node.clone();
    let sync = sync_lock(&group);
    let proof: SharedProof = Arc::new(RwLock::new(None));
    let actor_proof = proof.clone();
    let addr = MemberActor::start_in_arbiter(node.arbiter(), move |_ctx| {
        MemberActor::new(
            core,
            fresh,
            actor_node,
            sync,
            leader_tx,
            actor_proof,
            ready_tx,
        )
        .with_record(record)
    });
    ready_rx.await.map_err(|_| Error::NodeStopped)??;
    Ok(Member {
        inner: Arc::new(Inner {
            id,
            group,
            mode: options.mode(),
            addr,
            leader: leader_rx,
            proof,
            router: node.router().clone(),
        }),
    })
}

/// A watch of the leader one member believes in ([`Member::changes`]): the latest value, and
/// a wait for the next. Runtime-agnostic, and every wait is cancel-safe (dropping it loses no
/// change: the next wait sees it).
#[derive(Clone, Debug)]
pub struct LeaderChanges(watch::Receiver<Option<Term>>);

impl LeaderChanges {
    /// The term of the leader the member believes in now (`None`: no leader), marked as seen.
    pub fn current(&mut self) -> Option<Term> {
        self.0.borrow_and_update().clone()
    }

    /// Waits for a value not yet seen (at once if one came since the last
    /// [`current`](LeaderChanges::current) or wait); [`Error::Stopped`] once the member has
    /// stopped. Not bounded: wrap it in a timeout.
    pub async fn changed(&mut self) -> Result<(), Error> {
        self.0.changed().await.map_err(|_| Error::Stopped)
    }

    /// Waits until the leader's term satisfies `f` (at once if it does now) and returns it,
    /// marked as seen; [`Error::Stopped`] if the member stops first. Not bounded: wrap it in a
    /// timeout.
    pub async fn wait_for(
        &mut self,
        f: impl FnMut(&Option<Term>) -> bool,
    ) -> Result<Option<Term>, Error> {
        match self.0.wait_for(f).await {
            Ok(term) => Ok(term.clone()),
            Err(_) => Err(Error::Stopped),
        }
    }
}

struct Inner<C: Callbacks> {
    id: MemberId,
    group: Key,
    mode: ElectionMode,
    addr: Addr<MemberActor<C>>,
    leader: watch::Receiver<Option<Term>>,
    proof: SharedProof,
    router: Port,
}

impl<C: Callbacks> Drop for Inner<C> {
    fn drop(&mut self) {
        self.addr.do_send(Client::Stop(None));
    }
}

/// A handle on a running group member.
pub struct Member<C: Callbacks> {
    inner: Arc<Inner<C>>,
}

impl<C: Callbacks> Clone for Member<C> {
    fn clone(&self) -> Self {
        Member {
            inner: self.inner.clone(),
        }
    }
}

impl<C: Callbacks> std::fmt::Debug for Member<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("id", &self.inner.id)
            .field("leader", &*self.inner.leader.borrow())
            .finish()
    }
}

fn stopped<T>() -> Result<T, CallError> {
    Err(CallError::Stopped("the member is not running".into()))
}

impl<C: Callbacks> Member<C> {
    /// This member.
    pub fn id(&self) -> &MemberId {
        &self.inner.id
    }

    /// The group this member belongs to.
    pub fn group(&self) -> &Key {
        &self.inner.group
    }

    /// Majority or islands.
    pub fn mode(&self) -> ElectionMode {
        self.inner.mode
    }

    /// The leader this member believes in now, with its term (`term.leader.node()` is the
    /// leader's node, `term.epoch` the number that grows with every leadership). `None` while
    /// it knows of none. For a leader in majority mode this is its own term once established;
    /// use [`Member::is_leader`] to know whether it may act as leader at this instant.
    pub fn leader(&self) -> Option<Term> {
        self.inner.leader.borrow().clone()
    }

    /// Whether this member leads now. In majority mode this is checked at the call: the member
    /// believes it leads and the node's leases on a majority of the group's nodes, where it
    /// holds the election lock, are valid now.
    pub fn is_leader(&self) -> bool {
        let proof = self
            .inner
            .proof
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        proof.as_ref().is_some_and(|p| {
            p.term.leader == self.inner.id && p.holds(|n| lease_valid(&self.inner.router, n))
        })
    }

    /// A watch of the leader this member believes in: [`LeaderChanges::changed`] wakes on every
    /// change (every value [`Member::leader`] takes: a new leader or term, or `None` when it
    /// has none). The stream of leader changes a node's console prints.
    pub fn changes(&self) -> LeaderChanges {
        LeaderChanges(self.inner.leader.clone())
    }

    /// Waits until this member believes in some leader (at once if it does) and returns its
    /// term. Fails if the member stops first. Not bounded: wrap it in a timeout.
    pub async fn wait_for_leader(&self) -> Result<Term, Error> {
        let found = self.changes().wait_for(|t| t.is_some()).await?;
        found.ok_or(Error::Stopped)
    }

    /// A leader call with [`DEFAULT_CALL_TIMEOUT`]: handled by the leader's
    /// `handle_leader_call`; held back while no leader is known. The request is made at the
    /// call (before the future is polled), so calls and casts made one after the other from one
    /// task reach the leader in that order.
    pub fn leader_call(
        &self,
        req: C::Call,
    ) -> impl Future<Output = Result<C::Reply, CallError>> + Send + 'static {
        self.leader_call_timeout(req, DEFAULT_CALL_TIMEOUT)
    }

    /// A leader call that fails with [`CallError::Timeout`] after `timeout`.
    pub fn leader_call_timeout(
        &self,
        req: C::Call,
        timeout: Duration,
    ) -> impl Future<Output = Result<C::Reply, CallError>> + Send + 'static {
        let (reply, rx) = oneshot::channel();
        self.inner.addr.do_send(Client::LeaderCall {
            req,
            timeout,
            reply,
        });
        async move { rx.await.unwrap_or_else(|_| stopped()) }
    }

    /// A leader cast: handled by the leader's `handle_leader_cast`; no answer, no guarantee.
    pub fn leader_cast(&self, msg: C::Cast) {
        self.inner.addr.do_send(Client::LeaderCast(msg));
    }

    /// A call handled by this member's `handle_call`, with [`DEFAULT_CALL_TIMEOUT`]; made at
    /// the call, like [`Member::leader_call`].
    pub fn call(
        &self,
        req: C::Call,
    ) -> impl Future<Output = Result<C::Reply, CallError>> + Send + 'static {
        self.call_timeout(req, DEFAULT_CALL_TIMEOUT)
    }

    /// A call handled by this member's `handle_call`, failing after `timeout`.
    pub fn call_timeout(
        &self,
        req: C::Call,
        timeout: Duration,
    ) -> impl Future<Output = Result<C::Reply, CallError>> + Send + 'static {
        let (reply, rx) = oneshot::channel();
        self.inner.addr.do_send(Client::Call {
            req,
            timeout,
            reply,
        });
        async move { rx.await.unwrap_or_else(|_| stopped()) }
    }

    /// A cast handled by this member's `handle_cast`.
    pub fn cast(&self, msg: C::Cast) {
        self.inner.addr.do_send(Client::Cast(msg));
    }

    /// A local message for this member's `handle_info`.
    pub fn info_msg(&self, msg: C::Info) {
        self.inner.addr.do_send(Client::Info(msg));
    }

    /// `from_leader(msg)` to every member this leader has synced; fails with
    /// [`CallError::NotLeader`] unless this member leads.
    pub async fn broadcast(&self, msg: C::Broadcast) -> Result<(), CallError> {
        let (reply, rx) = oneshot::channel();
        self.inner.addr.do_send(Client::Broadcast { msg, reply });
        rx.await.unwrap_or_else(|_| stopped())
    }

    /// What this member knows now.
    pub async fn info(&self) -> Result<MemberInfo, Error> {
        let (reply, rx) = oneshot::channel();
        self.inner.addr.do_send(Client::Query(reply));
        rx.await.map_err(|_| Error::Stopped)
    }

    /// The candidates this member knows of, itself included if it is one.
    pub async fn candidates(&self) -> Result<Vec<MemberId>, Error> {
        Ok(self.info().await?.candidates)
    }

    /// The workers this member knows of (the leader knows every worker that found it).
    pub async fn workers(&self) -> Result<Vec<MemberId>, Error> {
        Ok(self.info().await?.workers)
    }

    /// See [`crate::Ctx::alive`].
    pub async fn alive(&self) -> Result<Vec<MemberId>, Error> {
        Ok(self.info().await?.alive)
    }

    /// Stops the member and waits until it has left: said goodbye, released its locks and
    /// watches, answered its callers.
    pub async fn stop(&self) {
        let (done, rx) = oneshot::channel();
        self.inner.addr.do_send(Client::Stop(Some(done)));
        let _ = rx.await;
    }
}
