//! The messages between members of a group (after Erlang's `locks_leader`, reworked).
//!
//! Every message travels in a [`PeerEnvelope`] that says the sender's role, the largest term
//! it has accepted and the group's nodes it knows of, so that members learn of each other, of
//! terms and of the group's nodes from any message.
//!
//! | message | sender → receiver | meaning |
//! | --- | --- | --- |
//! | `Hello` | a worker → a candidate it found in a view; a member → a holder of the lock it found in a view, or a member it learnt from a message other than `Hello`; a follower → a member without a leader; a member without a leader → the leader it is told of | "I exist, and follow this leader"; the receiver learns the sender (a worker is known to candidates only this way) and the leader named, if new to it, and, if it leads and the sender does not follow it, announces itself |
//! | `AmLeader` | leader → a member not synced | "follow me": the term, the fencing versions of the election lock per node, the callback's message. A member whose views of the lock contradict the versions keeps it aside and accepts it once they no longer do (a view from a node the leader has not yet seen go down) |
//! | `FromLeader` | leader → its synced members | a broadcast; with `ack`, the receiver answers `Applied` once `from_leader` has run |
//! | `Applied` | a follower → its leader | "I applied your broadcasts up to number `seq`" (majority mode: the leader answers a `ReplyBroadcast` call once members on a majority of the group's nodes applied its broadcast) |
//! | `Uncertain` | a member that lost its leader → candidates; a leader stepping down → every member | "I have no leader": the leader re-announces itself to the sender; a follower of the sender drops it |
//! | `Nack` | a member → a leader whose term is below the one it accepted | the leader takes a larger term and announces again |
//! | `LeaderCall`, `LeaderReply`, `LeaderCast` | follower ↔ leader | forwarded leader calls and casts; a non-leader answers a call with `NotLeader`, and the follower sends it again once it knows a leader |
//! | `Poll`, `Polled` | a candidate about to lead (majority mode) → every member on the nodes where it holds the lock; the answer back | "which is the largest term you accepted?", answered in the envelope: the new term exceeds them all |
//! | `Accepted` | a member → the leader whose `AmLeader` it accepted | in majority mode, a leader handles leader calls once a majority of the group's nodes accepted its term (a node where it knows no member accepts it through its lock server instead: `ServerRequest::RaiseVersions`, module `majority`) |
//! | `Goodbye` | a stopping member → every member it knows | forget me |

use crate::callbacks::{CallId, Callbacks};
use crate::error::CallError;
use crate::term::{Role, Term};
use locks_core::NodeId;
use serde::{Deserialize, Serialize};

/// A message between members, with what every message says about its sender.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerEnvelope<Ca, R, Cs, B> {
    /// The sender's role.
    pub role: Role,
    /// The largest term the sender has accepted (or taken, as leader).
    pub known: Option<Term>,
    /// The group's nodes as the sender knows them (majority mode; empty in islands mode): the
    /// receiver adds them to its own, so the set a majority is counted over spreads with
    /// every message.
    pub group: Vec<NodeId>,
    /// The message.
    pub msg: PeerMsg<Ca, R, Cs, B>,
}

/// The message proper (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerMsg<Ca, R, Cs, B> {
    /// I exist (sent to a member on discovering it), and this is the leader I follow.
    Hello {
        /// The term of the leader the sender believes in (its own if it leads).
        leader: Option<Term>,
    },
    /// I lead: follow me.
    AmLeader {
        /// The leadership.
        term: Term,
        /// The fencing version of the election lock on each node where the leader holds it.
        grants: Vec<(NodeId, u64)>,
        /// For `surrendered`.
        msg: B,
    },
    /// A broadcast of the leader.
    FromLeader {
        /// The leadership.
        term: Term,
        /// For `from_leader`.
        msg: B,
        /// The broadcast's number, when the leader waits to hear that it was applied
        /// (answered with `Applied`). The numbers grow along the leader's broadcasts, so an
        /// `Applied` also says that every earlier numbered broadcast was applied (one channel
        /// per pair of members, in order).
        ack: Option<u64>,
    },
    /// The answer to a `FromLeader` with `ack`: `from_leader` ran for it, and for every
    /// earlier broadcast of this leader.
    Applied {
        /// The leadership the broadcast came with.
        term: Term,
        /// The broadcast's number.
        seq: u64,
    },
    /// I have no leader (any more).
    Uncertain,
    /// Your term is below the one I accepted (carried in the envelope).
    Nack,
    /// A leader call forwarded by a follower.
    LeaderCall {
        /// The follower's number for the call.
        call: CallId,
        /// The request.
        req: Ca,
    },
    /// The answer to a forwarded leader call.
    LeaderReply {
        /// The follower's number for the call.
        call: CallId,
        /// The answer; `Err(NotLeader)` when the receiver was not leader (the call was not
        /// handled and may be sent again).
        result: Result<R, CallError>,
    },
    /// A leader cast forwarded by a follower.
    LeaderCast {
        /// The message.
        msg: Cs,
    },
    /// Which is the largest term you accepted? (A candidate about to lead in majority mode;
    /// the answer's envelope says.)
    Poll {
        /// The sync attempt asking.
        attempt: u64,
    },
    /// The answer to `Poll`: the envelope carries the largest term the sender accepted.
    Polled {
        /// The sync attempt that asked.
        attempt: u64,
    },
    /// I accepted your term (sent to a leader on accepting its `AmLeader`).
    Accepted {
        /// The term accepted.
        term: Term,
    },
    /// I am stopping.
    Goodbye,
}

/// The envelope of a group with callbacks `C`.
pub type Peer<C> = PeerEnvelope<
    <C as Callbacks>::Call,
    <C as Callbacks>::Reply,
    <C as Callbacks>::Cast,
    <C as Callbacks>::Broadcast,
>;

/// The message of a group with callbacks `C`.
pub type PeerMessage<C> = PeerMsg<
    <C as Callbacks>::Call,
    <C as Callbacks>::Reply,
    <C as Callbacks>::Cast,
    <C as Callbacks>::Broadcast,
>;

impl<Ca, R, Cs, B> PeerMsg<Ca, R, Cs, B> {
    /// A short name for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            PeerMsg::Hello { .. } => "hello",
            PeerMsg::AmLeader { .. } => "am_leader",
            PeerMsg::FromLeader { .. } => "from_leader",
            PeerMsg::Applied { .. } => "applied",
            PeerMsg::Uncertain => "uncertain",
            PeerMsg::Nack => "nack",
            PeerMsg::LeaderCall { .. } => "leader_call",
            PeerMsg::LeaderReply { .. } => "leader_reply",
            PeerMsg::LeaderCast { .. } => "leader_cast",
            PeerMsg::Poll { .. } => "poll",
            PeerMsg::Polled { .. } => "polled",
            PeerMsg::Accepted { .. } => "accepted",
            PeerMsg::Goodbye => "goodbye",
        }
    }
}
