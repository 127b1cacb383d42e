//! `locks-leader`: leader election for clustered services, on the agents of `locks-agent`
//! (after Erlang's `locks_leader`).
//!
//! Members of a group start with [`start`] on a node, as candidates or workers. Candidates
//! compete for the group's election lock `["locks_leader", group]` on every node they see up;
//! the agents' deadlock resolution lets exactly one of each connected group hold it everywhere,
//! and that one, after taking the sync lock `["locks_leader_sync", group]`, leads; the others
//! follow. A leader has a [`Term`] larger than every term it has heard of, a fencing version for
//! what it writes. What happens when the network splits depends on the group's
//! [`ElectionMode`], chosen when its members start ([`start`] takes the default, majority;
//! [`start_with`] takes [`GroupOptions`]); every member of a group must use the same mode.
//!
//! ```text
//!   Member handle ─calls─▶ member actor (MemberCore + Callbacks) ◀─MemberDelivery─ Router ◀─ other members
//!                             │ election agent (AgentCore) ──Lock──▶ lock servers (the first node, then every node)
//!                             │ member ──Watch──▶ lock servers (the first node and its own node; every node once it held the first node, or for a worker)
//!                             │ ◀──Notice/Watched── lock servers            ◀─Forward── other agents
//!                             └─ sync lock: a Transaction (abort_on_deadlock), never awaited by the actor
//! ```
//!
//! The protocol is the pure state machine `MemberCore` (events in, effects out, time
//! given), tested on an in-memory network of members and lock tables; the actor is a thin shell.
//!
//! # Public surface
//!
//! At the root: [`start`] and [`start_with`] with [`GroupOptions`] and [`ElectionMode`], the
//! [`Member`] handle they return (with [`MemberInfo`], [`LeaderChanges`],
//! [`DEFAULT_CALL_TIMEOUT`]) and the names of a group's locks ([`election_lock`],
//! [`sync_lock`]); the [`Callbacks`] a member runs, their [`Ctx`] and what they return
//! ([`Elected`], [`Handled`], [`CallReturn`], [`Caller`], [`CallId`], [`Payload`]); [`Role`],
//! [`Term`] and [`MemberId`]; the errors ([`Error`], [`CallError`]); and [`serde`], re-exported
//! so that a program can make its messages [`Payload`]s with no dependency of its own:
//!
//! ```
//! use locks_leader::serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, Debug, Serialize, Deserialize)]
//! #[serde(crate = "locks_leader::serde")]
//! struct Put {
//!     key: String,
//!     value: u64,
//! }
//!
//! fn is_payload<P: locks_leader::Payload>() {}
//! is_payload::<Put>();
//! ```
//!
//! `serde` is the one third-party crate in this crate's signatures, deliberately: what a
//! group's members send each other is encoded with it.
//!
//! The pure member state machine, for shells, simulations and tools of one's own:
//! [`state_machine`] (`MemberCore`, its `State` and `MemberEffect`s, the messages between
//! members, `Peer`, and the `LeaderProof`), which the workspace's simulations drive.
//! Everything else is private to the crate.
//!
//! # Majority and islands
//!
//! **Majority mode** (the default, [`GroupOptions::majority`]) is for a service that uses the
//! leader as its single writer: at no instant do two members both believe they lead, and an
//! island without a majority has no leader at all.
//!
//! - *The group's nodes*, which a majority is counted over: the nodes given with
//!   [`GroupOptions::nodes`], and the home node of every member, candidate or worker, the
//!   member ever learnt of (listed in a view of the election lock, or the sender of a message;
//!   a worker's lock server holds the election lock like any other), and every node
//!   another member names in a message (every envelope carries its sender's set). A node
//!   that goes down or is cut off stays in the set: the set never shrinks, so an island cannot
//!   count a majority of "the nodes up now". Two majorities of one set share a node, and the
//!   election lock on that node has one holder at a time.
//! - *Who leads*: a candidate that holds the election lock on every node it considers up (as in
//!   islands mode) **and** on a majority of the group's nodes, has the sync lock, and has polled
//!   every member known on those nodes for the largest term it accepted. It answers as
//!   leader ([`Member::is_leader`], leader calls, casts) only once a majority of the group's
//!   nodes (its own included) accepted its term; until then calls wait. A node accepts it when
//!   a member there does, or, where the candidate knows no member, when the node's lock server
//!   has raised its versions to the term (no member there can accept it; every later grant
//!   there, and so every later term through that node, is above it: module `core::majority`).
//!   So the election lock decides, as etcd's election does (a campaign leads as soon as its
//!   key is the oldest under the prefix, polling nobody): a lone candidate of a group
//!   configured on nodes `a`, `b`, `c` leads once it holds the lock on two of them, whether or
//!   not members run there, and a member started there later follows it. And two candidates
//!   and a worker on three nodes fail over when the leader's node goes: the other candidate
//!   holds the lock on its node and the worker's.
//! - *Stepping down*: a leader that no longer holds the lock on a majority of the group's nodes
//!   among those it considers up (a node went down or was cut off, a surrender) steps down at
//!   once: `LeaderChanged(None)`, the [`Callbacks::stepped_down`] callback, `Uncertain` to every
//!   member, forwarded calls it held refused with `NotLeader`. Before every input that could
//!   make it answer as leader, the member also checks its *leases*: the claim holds only while
//!   the node's leases on a majority of the group's nodes where it holds the lock are valid
//!   (the actor calls `MemberCore::check_leases`; [`Member::is_leader`] checks the
//!   `LeaderProof` at the call).
//! - *Why before the other side can elect*: a node's lease on a peer runs from the send time of
//!   the last acknowledged ping, so it expires on the leader's node no later than the peer
//!   declares the leader's node down; the peer then keeps the old leader's locks held by nobody
//!   for a lock-delay longer than the lease before it grants them to anyone. So the election
//!   lock of a cut-off leader reaches another candidate only after the old leader's leases on
//!   that node have expired, and from that instant the old leader refuses to answer as leader.
//!   The margin (lock-delay − lease) must cover the time the old leader's node takes to handle
//!   the node-down event; a node whose thread stalls longer than that can overlap, as with any
//!   lease (see `locks_server::lease` for the node layer's side of the argument).
//! - *A leader that stays put*: a node that comes up while a member leads (a new node, a
//!   restarted one, one whose members resume after a pause) is watched but not asked for the
//!   election lock, so nothing that joins can make the leader wait for it or lose the lock in
//!   a deadlock resolution: leadership moves only when the leader loses its majority, stops,
//!   or its node goes down. What a service sees: on a *join* or a *rejoin* the new members
//!   get `AmLeader` from the current leader (`elected` runs for them on the leader, with the
//!   same term) and follow it; on a *resume* the paused member's own leases have lapsed, so
//!   it steps down (`stepped_down`) before it answers as leader, and follows whoever leads
//!   now. The cost: the leader holds the lock only on nodes that were up when it took the
//!   lead, so after rejoins it may hold a bare majority, and a join that grows the group or
//!   the loss of one more of its nodes then makes it step down and the election run over
//!   every node up (module `core::tenure` has the argument).
//! - *Refusals*: a member that sees fewer than a majority of the group's nodes answers leader
//!   calls with [`CallError::NoMajority`] at once, and fails the ones it held.
//! - *Limits*: with no nodes configured, a member started alone counts a majority of the nodes
//!   it has seen; the set is safe when every member is configured with the same nodes, or when
//!   nodes join one at a time while the group is connected (each new set's majorities then meet
//!   the old set's). Two islands that grew the set with different new nodes while apart can
//!   each count a majority. Configure the nodes for a service that cannot live with that.
//!
//! **Islands mode** ([`GroupOptions::islands`]) is the Erlang original's behaviour: each island
//! of a netsplit elects its own leader, and after the heal one leader remains and its
//! `elected` sees the other island's candidates among `new_candidates()`, to merge their state
//! (as the replicated dictionary of the examples does). It stays available on every side of a
//! partition, and it can lose a write it confirmed: a leader cut off from the others keeps
//! leading and confirming writes, the other island's leader confirms its own, and at the heal
//! the state of whichever leader remains wins where they conflict (in a dictionary, a key
//! written on both sides keeps one value; a confirmed write to it is lost).
//!
//! # Terms as fencing versions
//!
//! Every leadership has a [`Term`] `(epoch, leader)`; hand it to whatever the leader writes to,
//! and have that resource refuse a term below the largest it has seen: a deposed leader that
//! still writes is then refused. For that a new leader's term must exceed every term a leader
//! before it wrote with, even after the node with the highest lock versions is gone and clocks
//! stepped back. In majority mode:
//!
//! 1. A leader writes (answers a leader call) only once a majority `Q` of the group's nodes
//!    accepted its term `T` (a member there accepted it, or, on a node where it knew no member,
//!    the lock server raised its versions above `T`'s epoch while the leader held the lock
//!    there), and only while it holds the election lock on a majority `M1`; a member's
//!    accepted term only grows.
//! 2. The next leader starts its poll only once it holds the election lock on a majority `M`
//!    (and on every node it considers up). `M` shares a node with `M1`, where the lock was
//!    granted to it only after the old leader lost it, so after the old leader's last write.
//!    It polls every member known on `M` (every live candidate is queued for the lock on
//!    the first node, the smallest node up, which the new leader holds, and it waits for views of
//!    the nodes it holds newer than its grants, so it knows them; a worker watches the lock on
//!    its own node, where the new leader holds it if the node is in `M`, and says `Hello` to
//!    every candidate it sees in a view), and its epoch exceeds every term they answer with
//!    (every message carries the largest term its sender accepted).
//! 3. `Q` and `M` share a node; a member there accepted `T` before the old leader's first
//!    write, and answers the poll after its last: with a term at least `T`. Or that node's
//!    lock server raised its versions above `T`'s epoch while the old leader held the lock
//!    there, so before the new leader's grant there, whose version is then above `T`'s epoch
//!    (after a restart of that node too, with a data directory: the ceiling on disk moved
//!    before the answer); a new term is at least the largest of its grant versions
//!    (`next_term`). So the new term
//!    exceeds `T`, whatever the clocks and lock versions say.
//!
//! Step 3 needs the next leader to know the workers of `M` when it polls: a worker that
//! accepted `T` is known to a candidate from its `Hello`, sent when it first sees the candidate
//! in a view, so a candidate that queued on the worker's node after the worker accepted `T`,
//! and whose poll ends before that `Hello` arrives, may miss it (its epoch still exceeds its
//! grant's version there, above the old leader's). Candidates on a majority of the nodes close
//! that gap. It also needs the member that accepted `T` to live on. When members restart, what they
//! accepted lives on in their nodes' **data directories** (`NodeConfig::data_dir`): a member
//! writes the largest term it accepted (crash-safely: temporary file, fsync, rename, fsync) and
//! raises its node's lock versions above that term's epoch (the node's version ceiling on disk
//! moves with them) *before* it carries out anything of the step that accepted it, so before its
//! `Accepted` and, for the leader itself, before its first answer; a member that cannot write
//! it stops. Then, with `n` a node of `Q ∩ M`:
//!
//! 4. If a member on `n` answers the new leader's poll, it is the one that accepted `T`, or
//!    a later one started on `n`, which started from the recorded term (it counts as accepted):
//!    either way it answers with a term at least `T`, and step 3 holds.
//! 5. Otherwise `n` restarted, or its member stopped, after accepting `T`. When `n`
//!    restarted, every version it hands out is above every version it handed out before and
//!    above the raised floor, so above `T`'s epoch; the new leader's grant on `n` comes from
//!    the new incarnation (a restart empties the table), and a new term is at least the
//!    largest of its grant versions (`next_term`): above `T`, whatever the clocks say.
//!
//! So a group whose members all restart (killed, with clocks behind) elects a leader with a
//! term above every term a leader before it wrote with, as long as every node has a data
//! directory. Left uncovered: a node that lives on while its member stops, and nodes without
//! a data directory (their terms, like their versions, then derive from the clock). In
//! islands mode terms grow the same way within a connected group, and an island's leader has
//! a term above every term its members accepted; across islands two leaders can hold terms
//! at the same time, and after a heal the remaining leader takes a term above both.
//!
//! ```
//! use locks_leader::{
//!     CallReturn, Callbacks, Caller, Ctx, Elected, GroupOptions, Handled, MemberId, Role,
//!     start_with,
//! };
//! use locks_server::{Node, NodeConfig};
//!
//! /// A counter that only the leader increments, fenced by its term.
//! #[derive(Default)]
//! struct Counter(u64);
//!
//! impl Callbacks for Counter {
//!     type Call = ();
//!     type Reply = (u64, u64); // (value, epoch of the term that wrote it)
//!     type Cast = ();
//!     type Broadcast = u64;
//!     type Info = ();
//!
//!     fn elected(&mut self, _new: Option<&MemberId>, _ctx: &mut Ctx<'_, Self>) -> Elected<u64> {
//!         Elected::Broadcast(self.0)
//!     }
//!     fn surrendered(&mut self, v: u64, _ctx: &mut Ctx<'_, Self>) -> Handled<u64> {
//!         self.0 = v;
//!         Handled::Ok
//!     }
//!     fn from_leader(&mut self, v: u64, _ctx: &mut Ctx<'_, Self>) -> Handled<u64> {
//!         self.0 = v;
//!         Handled::Ok
//!     }
//!     fn handle_leader_call(
//!         &mut self,
//!         _req: (),
//!         _from: Caller,
//!         ctx: &mut Ctx<'_, Self>,
//!     ) -> CallReturn<(u64, u64), u64> {
//!         // The term to hand to whatever this write goes to.
//!         let epoch = ctx.term().map_or(0, |t| t.epoch);
//!         self.0 += 1;
//!         CallReturn::ReplyBroadcast((self.0, epoch), self.0)
//!     }
//!     fn handle_call(&mut self, _: (), _: Caller, _: &mut Ctx<'_, Self>) -> CallReturn<(u64, u64), u64> {
//!         CallReturn::Reply((self.0, 0))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let node = Node::start(NodeConfig::new("doc")).await.unwrap();
//! // Majority mode over the nodes the group runs on: here one.
//! let options = GroupOptions::majority().nodes([node.id().clone()]);
//! let member = start_with(&node, "counter", Counter::default(), Role::Candidate, options)
//!     .await
//!     .unwrap();
//! let term = tokio::time::timeout(std::time::Duration::from_secs(20), member.wait_for_leader())
//!     .await
//!     .unwrap()
//!     .unwrap();
//! assert_eq!(&term.leader, member.id());
//! assert!(member.is_leader());
//! assert_eq!(member.leader_call(()).await, Ok((1, term.epoch)));
//! node.shutdown().await;
//! # }
//! ```
//!
//! # Contracts
//!
//! - In a connected group of nodes (every node connected to every other) that stays unchanged,
//!   exactly one candidate ends up leading, holding the election lock on every node (in
//!   majority mode: on every node that was up when it took the lead), and every member
//!   follows it; its term is at least every term a member there has accepted.
//! - Majority mode: at most one member at a time answers as leader (under the lease
//!   assumptions above); an island with a majority of the group's nodes elects one leader, the
//!   others none. Islands mode: each island of a netsplit elects its own leader; after a heal
//!   one leader remains, and its `elected` sees the other island's candidates among
//!   `new_candidates()`.
//! - A leader call is handled at most once. It fails with `LeaderDied` if the leader it was
//!   forwarded to stopped leading before answering (it may or may not have been handled), with
//!   `Timeout` at its deadline; one that reached a member that no longer leads is sent again.
//! - A leader's broadcast reaches a follower before the leader's reply to a call that follower
//!   forwarded (one channel per pair of members).
//! - Majority mode: a call answered with [`CallReturn::ReplyBroadcast`] is answered once
//!   members on a majority of the group's nodes applied the broadcast, so what its caller was
//!   told is held by a majority and survives the crash of any one node, the leader's included.
//!
//! # Limits
//!
//! - In a cluster whose connections are not transitive (a–b and b–c connected, a–c not), members
//!   that cannot reach the leader stay without one until the mesh is complete.
//! - A worker is known to candidates only through its `Hello`, so a leader's `workers()` lists
//!   the workers that found it.
//! - `elected` cannot hand leadership to another candidate (Erlang's `{surrender, ...}`, broken
//!   there): the lock decides who leads.

#![forbid(unsafe_code)]
// Every type a public item mentions is nameable from the root or from `state_machine`.
#![warn(unnameable_types)]

mod actor;
mod callbacks;
mod core;
mod error;
mod handle;
mod info;
mod lease;
mod options;
mod remembered;
pub mod state_machine;
mod term;

pub use callbacks::{CallId, CallReturn, Callbacks, Caller, Ctx, Elected, Handled, Payload};
pub use error::{CallError, Error};
pub use handle::{
    DEFAULT_CALL_TIMEOUT, LeaderChanges, Member, election_lock, start, start_with, sync_lock,
};
pub use info::MemberInfo;
pub use locks_core::MemberId;
pub use options::{ElectionMode, GroupOptions};
/// The serialization framework [`Payload`]s are made with, re-exported so that a program needs
/// no dependency of its own (derive with `#[serde(crate = "locks_leader::serde")]`).
pub use serde;
pub use term::{Role, Term};
