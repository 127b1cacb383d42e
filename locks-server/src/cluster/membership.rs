//! Which connection a node keeps to each peer: a pure state machine.
//!
//! Every handshake, dialed or accepted, is announced with [`Membership::begin`]; the
//! handshake's name check ([`Membership::check`], the transport's `name_in_use`) reserves the
//! peer's name for it; its end is reported with [`Membership::established`] (which registers
//! the connection as the peer's link, or rejects it) or [`Membership::failed`]. A registered
//! link leaves with [`Membership::link_down`]. [`Membership::disconnect`] keeps a peer apart
//! (every handshake with it is refused, in both roles) until [`Membership::reconnect`].
//!
//! The transport asks the name check only once the peer is trusted: the initiator on the
//! acceptor's `Hello` (it dialed that address itself, and its proof goes out right after), the
//! acceptor on the initiator's *verified* proof (see [`crate::net::handshake`]). A connection
//! that does not know the cookie never reserves a name, so it cannot make a real node's
//! handshake fail. (The one reservation made before the peer proved anything is the
//! initiator's, since the acceptor proves second: an address this node dials that answers with
//! another node's name holds that name for at most one handshake timeout per dial, and the
//! dialer's backoff leaves room for the real node in between.)
//!
//! Invariants:
//! - at most one registered link per peer; a registered link is never replaced, only removed
//!   by `link_down` (so the messages of one direction always travel on one connection, in
//!   order, and every change of link is a node down followed by a node up);
//! - a name check refuses this node's own name, a peer kept apart, a peer with a registered
//!   link, and a second handshake with a peer that already has one, with one exception that
//!   makes simultaneous dials converge on a single connection (below);
//! - only handshakes whose peer proved the cookie (or that this node dialed) hold a name.
//!
//! **Simultaneous dials.** When two nodes dial each other at the same time, each sees two
//! handshakes with the other. In each handshake the initiator checks the name first (then sends
//! its proof at once), the acceptor second (then sends its proof and registers at once):
//! - an acceptor's reservation is *firm*: its proof is on the way, so the peer may register the
//!   connection at any moment; any other handshake with that peer is refused;
//! - an initiator's reservation is firm on the node with the smaller name, and *soft* on the
//!   node with the larger name: there, an acceptor check of the peer's dial dooms it (it is
//!   rejected if it ever completes) and takes the reservation.
//!
//! Following the messages shows that the doomed handshake is always refused by the peer at its
//! own check, so both nodes keep the same connection (the unit tests walk every order). Three or
//! more handshakes at once with the same peer can end with one side registering a link that the
//! other rejects; the first side then sees that link go down, which is an ordinary node down,
//! so nothing is lost or kept that should not be.

use crate::net::Role;
use locks_core::NodeId;
use std::collections::{BTreeMap, BTreeSet};

/// Names one handshake of this node.
pub type HandshakeId = u64;

/// Names one registered link of this node (never reused).
pub type LinkId = u64;

/// Why a name check refused a peer (the transport reports it to the peer as a duplicate name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameRefusal {
    /// The peer claims this node's own name.
    #[error("it claims this node's own name")]
    OwnName,
    /// The peer is kept apart by [`Node::disconnect`](crate::Node::disconnect).
    #[error("it is kept apart")]
    Apart,
    /// The peer already has a registered link.
    #[error("it is already connected")]
    Connected,
    /// Another handshake with the peer is in progress and wins.
    #[error("another handshake with it is in progress")]
    Handshaking,
    /// The handshake is not known (it already ended).
    #[error("the handshake was given up")]
    Unknown,
}

/// Why an established connection was not registered (it must be closed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkRejection {
    /// A handshake with the same peer that wins the tie took its place, or the peer was kept
    /// apart meanwhile.
    #[error("another connection with the peer was preferred, or it was kept apart")]
    Superseded,
    /// The peer is kept apart.
    #[error("the peer is kept apart")]
    Apart,
    /// The peer already has a registered link.
    #[error("the peer is already connected")]
    Connected,
    /// The handshake is not known.
    #[error("the handshake was given up")]
    Unknown,
}

/// A registered link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registered {
    /// The link's id.
    pub link: LinkId,
    /// This node's role in the link's handshake.
    pub role: Role,
}

#[derive(Clone, Debug)]
struct Pending {
    role: Role,
    /// Set by the name check.
    peer: Option<NodeId>,
    doomed: bool,
}

/// The registry of one node's handshakes and links. See the module documentation.
#[derive(Clone, Debug)]
pub struct Membership {
    me: NodeId,
    next_id: u64,
    handshakes: BTreeMap<HandshakeId, Pending>,
    links: BTreeMap<NodeId, Registered>,
    apart: BTreeSet<NodeId>,
}

impl Membership {
    /// The registry of node `me`, with no handshakes or links.
    pub fn new(me: NodeId) -> Membership {
        Membership {
            me,
            next_id: 1,
            handshakes: BTreeMap::new(),
            links: BTreeMap::new(),
            apart: BTreeSet::new(),
        }
    }

    fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// A handshake in `role` starts.
    pub fn begin(&mut self, role: Role) -> HandshakeId {
        let id = self.fresh_id();
        self.handshakes.insert(
            id,
            Pending {
                role,
                peer: None,
                doomed: false,
            },
        );
        id
    }

    /// Handshake `hs` learnt that its peer is `peer`: may it go on? On `Ok` the name is
    /// reserved for it.
    pub fn check(&mut self, hs: HandshakeId, peer: &NodeId) -> Result<(), NameRefusal> {
        let role = match self.handshakes.get(&hs) {
            Some(p) if !p.doomed => p.role,
            _ => return Err(NameRefusal::Unknown),
        };
        if peer == &self.me {
            return Err(NameRefusal::OwnName);
        }
        if self.apart.contains(peer) {
            return Err(NameRefusal::Apart);
        }
        if self.links.contains_key(peer) {
            return Err(NameRefusal::Connected);
        }
        let rivals: Vec<(HandshakeId, Role)> = self
            .handshakes
            .iter()
            .filter(|(id, p)| **id != hs && !p.doomed && p.peer.as_ref() == Some(peer))
            .map(|(id, p)| (*id, p.role))
            .collect();
        for (_, rival_role) in &rivals {
            // A rival past its check wins, unless it is soft: our own dial, when we have the
            // larger name, loses to the peer's proven dial (this acceptor check).
            let we_win =
                *rival_role == Role::Initiator && role == Role::Acceptor && self.me > *peer;
            if !we_win {
                return Err(NameRefusal::Handshaking);
            }
        }
        for (rival, _) in rivals {
            if let Some(p) = self.handshakes.get_mut(&rival) {
                p.doomed = true;
            }
        }
        if let Some(p) = self.handshakes.get_mut(&hs) {
            p.peer = Some(peer.clone());
        }
        Ok(())
    }

    /// Handshake `hs` succeeded with `peer`: registers it as the peer's link, or says why not
    /// (the caller then closes the connection).
    pub fn established(
        &mut self,
        hs: HandshakeId,
        peer: &NodeId,
    ) -> Result<Registered, LinkRejection> {
        let pending = self.handshakes.remove(&hs).ok_or(LinkRejection::Unknown)?;
        if pending.doomed {
            return Err(LinkRejection::Superseded);
        }
        if self.apart.contains(peer) {
            return Err(LinkRejection::Apart);
        }
        if self.links.contains_key(peer) {
            return Err(LinkRejection::Connected);
        }
        let registered = Registered {
            link: self.fresh_id(),
            role: pending.role,
        };
        self.links.insert(peer.clone(), registered);
        Ok(registered)
    }

    /// Handshake `hs` failed; its reservation is released.
    pub fn failed(&mut self, hs: HandshakeId) {
        self.handshakes.remove(&hs);
    }

    /// Link `link` of `peer` went down. Returns whether it was the peer's registered link (then
    /// the peer is down).
    pub fn link_down(&mut self, peer: &NodeId, link: LinkId) -> bool {
        match self.links.get(peer) {
            Some(r) if r.link == link => {
                self.links.remove(peer);
                true
            }
            _ => false,
        }
    }

    /// Keeps `peer` apart until [`Membership::reconnect`]: every handshake with it is refused
    /// (those in progress are doomed). Returns its registered link, which the caller closes.
    pub fn disconnect(&mut self, peer: &NodeId) -> Option<LinkId> {
        self.apart.insert(peer.clone());
        for p in self.handshakes.values_mut() {
            if p.peer.as_ref() == Some(peer) {
                p.doomed = true;
            }
        }
        self.links.get(peer).map(|r| r.link)
    }

    /// Lets `peer` connect again. Returns whether it was kept apart.
    pub fn reconnect(&mut self, peer: &NodeId) -> bool {
        self.apart.remove(peer)
    }

    /// Whether `peer` is kept apart.
    pub fn is_apart(&self, peer: &NodeId) -> bool {
        self.apart.contains(peer)
    }

    /// The registered link of `peer`.
    pub fn link(&self, peer: &NodeId) -> Option<Registered> {
        self.links.get(peer).copied()
    }

    /// The peers with a registered link, sorted, with their links.
    pub fn links(&self) -> impl Iterator<Item = (&NodeId, &Registered)> {
        self.links.iter()
    }

    /// Whether a handshake with `peer` is in progress past its name check.
    pub fn is_handshaking(&self, peer: &NodeId) -> bool {
        self.handshakes
            .values()
            .any(|p| !p.doomed && p.peer.as_ref() == Some(peer))
    }

    /// Whether an accepted handshake has not reached its name check yet (its peer has not
    /// proved the cookie, so this node does not know for sure who it is).
    pub fn has_unchecked_acceptor(&self) -> bool {
        self.handshakes
            .values()
            .any(|p| p.role == Role::Acceptor && p.peer.is_none() && !p.doomed)
    }

    /// How many handshakes are in progress.
    #[cfg(test)]
    pub fn handshakes(&self) -> usize {
        self.handshakes.len()
    }
}

#[cfg(test)]
mod tests;
