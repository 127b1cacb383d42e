//! The handshake between two nodes, as a pure state machine.
//!
//! ```text
//!   initiator                                   acceptor
//!   new(): send Hello_i ─────────────────────▶  on Hello_i: check version, name
//!                                               send Hello_a
//!   on Hello_a: check version, name  ◀───────
//!   send Proof_i ────────────────────────────▶  on Proof_i: verify
//!                                               send Proof_a, Established
//!   on Proof_a: verify, Established  ◀───────
//! ```
//!
//! `Proof_x = HMAC-SHA256(cookie, CONTEXT || version || name_x || name_y || nonce_y || nonce_x)`
//! where `x` proves to `y`, names are length-prefixed, and `nonce_y` is the challenge `y` sent.
//! The prover's own nonce and the order of the names bind the proof to its direction, so a
//! proof cannot be reflected back to its author or replayed in another handshake. Proofs are
//! checked in constant time (`hmac`'s `verify_slice`). The initiator proves first, so the
//! acceptor never computes a proof for a peer that has not proved anything (as in Erlang's
//! distribution handshake).
//!
//! Once established, [`Handshake::session`] holds the key that tags every later frame of the
//! connection ([`crate::net::session`]), binding them to this handshake.
//!
//! The machine does no I/O and reads no clock: it takes frames, decode failures, the closing
//! of the connection and ticks with `now`, and returns a [`Step`]: the frames to send, then
//! possibly the outcome. The outcome comes exactly once; after it every input is ignored. A
//! local refusal's step carries a [`PeerFrame::Refuse`] telling the peer why; the caller sends
//! it and closes the connection. An acceptor that refuses its own name sends its own `Hello`
//! first, so that the initiator learns whom it reached.
//!
//! **Names are checked after the proof.** The caller's name check (`name_in_use`, which may
//! reserve the name in the node's registry) is asked by the initiator on the acceptor's
//! `Hello` (the acceptor is a peer this node chose to dial), and by the acceptor only on the
//! initiator's *valid* proof. A connection that does not know the cookie therefore never
//! reaches the registry: it cannot hold a node's name and make that node's real handshake
//! fail. Under TLS the same check also says whether the peer's certificate carries the name
//! it claims ([`NameVerdict::NotCertified`], decided by the caller from the TLS session, see
//! [`crate::net::tls`]): a node with a valid certificate of the cluster cannot take another
//! node's name.

use crate::net::Cookie;
use crate::net::failure::{IoFailure, Malformed, TlsFailure};
use crate::net::frame::{FrameError, Hello, MAC_LEN, Nonce, PeerFrame, Proof, RefusalCode};
pub use crate::net::role::Role;
use crate::net::session::SessionKey;
use hmac::{Hmac, KeyInit, Mac};
use locks_core::NodeId;
use locks_core::proto::PROTOCOL_VERSION;
use sha2::Sha256;
use std::io;
use std::time::Instant;

type HmacSha256 = Hmac<Sha256>;

/// Domain separation for the proofs: no other use of the cookie yields the same MAC input.
const CONTEXT: &[u8] = b"locks/node-handshake/v1";

/// Why a handshake failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The peer's proof does not match this node's cookie.
    #[error("the peer's proof does not match the cluster cookie")]
    WrongCookie,
    /// The peer speaks another protocol version.
    #[error("the peer speaks protocol version {theirs}; this node speaks {ours}")]
    WrongVersion {
        /// This node's version.
        ours: u16,
        /// The peer's version.
        theirs: u16,
    },
    /// The peer's name is already connected (or connecting, or kept apart), or is this node's
    /// own name.
    #[error("node {0} is already connected, connecting or kept apart (or is this node's own name)")]
    DuplicateName(NodeId),
    /// A frame could not be decoded or came out of order.
    #[error("malformed handshake: {0}")]
    Malformed(Malformed),
    /// The handshake did not finish before its deadline.
    #[error("the handshake did not finish in time")]
    Timeout,
    /// The peer closed the connection before the handshake finished.
    #[error("the peer closed the connection during the handshake")]
    Closed,
    /// The connection failed during the handshake.
    #[error("i/o error during the handshake: {0}")]
    Io(IoFailure),
    /// The system had no randomness for this node's nonce.
    #[error("no randomness for the handshake nonce: {0}")]
    NoRandomness(getrandom::Error),
    /// The peer refused this node, and said why.
    #[error("the peer refused the connection: {0}")]
    ByPeer(RefusalCode),
    /// The peer had not proved the cookie when newer connections needed its place (see
    /// [`crate::net::admission`]); decided by the accept loop, not by the machine.
    #[error("the handshake was evicted to make room for newer connections")]
    Evicted,
    /// The TLS session under the handshake failed (see [`crate::net::tls`]); decided by the
    /// TLS layer, not by the machine.
    #[error("TLS: {0}")]
    Tls(TlsFailure),
}

/// What the caller's name check says about the peer's name (see [`Handshake::on_frame`]).
/// A plain `bool` converts to it: `true` is [`NameVerdict::InUse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameVerdict {
    /// The name may connect.
    Free,
    /// Already connected, connecting or kept apart: refused as [`Refusal::DuplicateName`].
    InUse,
    /// The peer's TLS certificate does not carry the name: refused as
    /// [`TlsFailure::NameNotCertified`].
    NotCertified,
}

impl From<bool> for NameVerdict {
    fn from(in_use: bool) -> NameVerdict {
        if in_use {
            NameVerdict::InUse
        } else {
            NameVerdict::Free
        }
    }
}

impl Refusal {
    /// What to tell the peer about a refusal decided here (`None` when the peer decided it, or
    /// the connection is already gone).
    pub fn code(&self) -> Option<RefusalCode> {
        match self {
            Refusal::WrongCookie => Some(RefusalCode::WrongCookie),
            Refusal::WrongVersion { ours, .. } => {
                Some(RefusalCode::WrongVersion { supported: *ours })
            }
            Refusal::DuplicateName(_) => Some(RefusalCode::DuplicateName),
            Refusal::Malformed(_) => Some(RefusalCode::Malformed),
            Refusal::Timeout => Some(RefusalCode::Timeout),
            Refusal::Tls(TlsFailure::NameNotCertified { .. }) => {
                Some(RefusalCode::NameNotCertified)
            }
            Refusal::Closed
            | Refusal::Io(_)
            | Refusal::NoRandomness(_)
            | Refusal::ByPeer(_)
            | Refusal::Evicted
            | Refusal::Tls(_) => None,
        }
    }
}

/// How a handshake ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeOutcome {
    /// Both sides proved they know the cookie; the peer is `peer`.
    Established {
        /// The peer's node name.
        peer: NodeId,
    },
    /// The connection must be closed.
    Refused(Refusal),
}

/// What the caller does after one input: send `send`, in order; then, if `outcome` is set,
/// the handshake is over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Frames to send to the peer, in order.
    pub send: Vec<PeerFrame>,
    /// The outcome, on the step that decides it.
    pub outcome: Option<HandshakeOutcome>,
}

#[derive(Clone, Debug)]
enum State {
    /// Waiting for the peer's `Hello` (the initiator has sent its own).
    AwaitHello,
    /// Both `Hello`s exchanged; waiting for the peer's proof (the initiator has sent its own).
    AwaitProof { peer: NodeId, peer_nonce: Nonce },
    /// The outcome was reported.
    Done,
}

/// One side of one handshake. See the module documentation for the exchange.
#[derive(Clone, Debug)]
pub struct Handshake {
    role: Role,
    node: NodeId,
    cookie: Cookie,
    nonce: Nonce,
    deadline: Instant,
    state: State,
    /// The session's key, once established (`crate::net::session`).
    session: Option<SessionKey>,
}

impl Handshake {
    /// Starts a handshake as `role` for node `node`, with a fresh random `nonce` and the time
    /// by which it must be done. The returned step holds the initiator's `Hello`; the
    /// acceptor's is empty (it waits for the initiator).
    pub fn new(
        role: Role,
        node: NodeId,
        cookie: Cookie,
        nonce: Nonce,
        deadline: Instant,
    ) -> (Handshake, Step) {
        let hs = Handshake {
            role,
            node,
            cookie,
            nonce,
            deadline,
            state: State::AwaitHello,
            session: None,
        };
        let step = match role {
            Role::Initiator => Step {
                send: vec![hs.hello()],
                outcome: None,
            },
            Role::Acceptor => Step::default(),
        };
        (hs, step)
    }

    /// This side's role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// When the handshake times out: the caller ticks at this instant at the latest.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The key every frame after the handshake is tagged with (`crate::net::session`): set
    /// once the handshake is established, `None` before and after a refusal.
    pub fn session(&self) -> Option<&SessionKey> {
        self.session.as_ref()
    }

    /// Whether the outcome has been reported.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// A frame arrived. `name_in_use` says whether a node name is already connected to this
    /// node (the caller's registry, which may reserve the name for this handshake) or, under
    /// TLS, is not carried by the peer's certificate ([`NameVerdict`]; a `bool` is "in use");
    /// it is asked at most once, about the peer's name, and only once the peer has proved the
    /// cookie or is about to be sent this node's proof: by the initiator on the acceptor's
    /// `Hello`, by the acceptor on the initiator's valid proof. So a peer that does not know the
    /// cookie never reaches the registry and cannot hold a name.
    pub fn on_frame<V: Into<NameVerdict>>(
        &mut self,
        frame: PeerFrame,
        name_in_use: impl FnOnce(&NodeId) -> V,
    ) -> Step {
        let name_in_use = |name: &NodeId| name_in_use(name).into();
        let state = std::mem::replace(&mut self.state, State::Done);
        match (state, frame) {
            (State::Done, _) => Step::default(),
            (_, PeerFrame::Refuse(code)) => self.finish(Vec::new(), Refusal::ByPeer(code)),
            (State::AwaitHello, PeerFrame::Hello(hello)) => self.on_hello(hello, name_in_use),
            (State::AwaitProof { peer, peer_nonce }, PeerFrame::Proof(proof)) => {
                self.on_proof(peer, peer_nonce, proof, name_in_use)
            }
            (state, frame) => {
                let waiting = match state {
                    State::AwaitHello => "Hello",
                    _ => "Proof",
                };
                self.refuse(Refusal::Malformed(Malformed::Unexpected {
                    got: frame.kind(),
                    waiting,
                }))
            }
        }
    }

    /// A frame could not be decoded.
    pub fn on_malformed(&mut self, error: FrameError) -> Step {
        if self.is_done() {
            return Step::default();
        }
        match error {
            FrameError::Version { got } => self.refuse(Refusal::WrongVersion {
                ours: PROTOCOL_VERSION,
                theirs: got,
            }),
            codec @ FrameError::Codec(_) => self.refuse(Refusal::Malformed(codec.into())),
        }
    }

    /// The framing layer refused the bytes (for example a length prefix above the limit).
    pub fn on_bad_framing(&mut self, error: io::Error) -> Step {
        if self.is_done() {
            return Step::default();
        }
        self.refuse(Refusal::Malformed(Malformed::Framing(error.into())))
    }

    /// The peer closed the connection.
    pub fn on_closed(&mut self) -> Step {
        if self.is_done() {
            return Step::default();
        }
        self.finish(Vec::new(), Refusal::Closed)
    }

    /// The connection failed.
    pub fn on_io_error(&mut self, error: io::Error) -> Step {
        if self.is_done() {
            return Step::default();
        }
        self.finish(Vec::new(), Refusal::Io(error.into()))
    }

    /// Time passed; at or after the deadline the handshake is refused with
    /// [`Refusal::Timeout`].
    pub fn on_tick(&mut self, now: Instant) -> Step {
        if self.is_done() || now < self.deadline {
            return Step::default();
        }
        self.refuse(Refusal::Timeout)
    }

    fn hello(&self) -> PeerFrame {
        PeerFrame::Hello(Hello {
            version: PROTOCOL_VERSION,
            node: self.node.clone(),
            nonce: self.nonce,
        })
    }

    fn on_hello(&mut self, hello: Hello, name_in_use: impl FnOnce(&NodeId) -> NameVerdict) -> Step {
        if hello.version != PROTOCOL_VERSION {
            return self.refuse(Refusal::WrongVersion {
                ours: PROTOCOL_VERSION,
                theirs: hello.version,
            });
        }
        // The acceptor leaves the registry alone until the initiator has proved the cookie:
        // otherwise anyone could hold a node's name (see `on_proof`).
        let verdict = if hello.node == self.node {
            NameVerdict::InUse
        } else if self.role == Role::Initiator {
            name_in_use(&hello.node)
        } else {
            NameVerdict::Free
        };
        if verdict == NameVerdict::NotCertified {
            return self.refuse(Refusal::Tls(TlsFailure::NameNotCertified {
                name: hello.node,
            }));
        }
        if verdict == NameVerdict::InUse {
            let mut step = self.refuse(Refusal::DuplicateName(hello.node));
            if self.role == Role::Acceptor {
                // Say who we are before refusing: a dialer learns which node answers at the
                // address it dials, and stops dialing while that node is connected.
                step.send.insert(0, self.hello());
            }
            return step;
        }
        if hello.nonce == self.nonce {
            // Our own challenge coming back: a reflection, or a broken random source.
            return self.refuse(Refusal::Malformed(Malformed::EchoedNonce));
        }
        let send = match self.role {
            // The initiator proves first.
            Role::Initiator => match self.proof_for(&hello.node, &hello.nonce) {
                Some(proof) => vec![PeerFrame::Proof(proof)],
                None => return self.refuse(Refusal::WrongCookie),
            },
            Role::Acceptor => vec![self.hello()],
        };
        self.state = State::AwaitProof {
            peer: hello.node,
            peer_nonce: hello.nonce,
        };
        Step {
            send,
            outcome: None,
        }
    }

    fn on_proof(
        &mut self,
        peer: NodeId,
        peer_nonce: Nonce,
        proof: Proof,
        name_in_use: impl FnOnce(&NodeId) -> NameVerdict,
    ) -> Step {
        let valid = self
            .mac(&peer, &self.node, &self.nonce, &peer_nonce)
            .is_some_and(|mac| mac.verify_slice(&proof.mac).is_ok());
        if !valid {
            return self.refuse(Refusal::WrongCookie);
        }
        // The acceptor's name check, now that the peer has proved the cookie (it has already
        // sent its own `Hello`, so the initiator knows whom it reached).
        if self.role == Role::Acceptor {
            match name_in_use(&peer) {
                NameVerdict::Free => {}
                NameVerdict::InUse => return self.refuse(Refusal::DuplicateName(peer)),
                NameVerdict::NotCertified => {
                    return self.refuse(Refusal::Tls(TlsFailure::NameNotCertified { name: peer }));
                }
            }
        }
        let send = match self.role {
            Role::Initiator => Vec::new(),
            // The initiator has proved itself; now the acceptor answers its challenge.
            Role::Acceptor => match self.proof_for(&peer, &peer_nonce) {
                Some(proof) => vec![PeerFrame::Proof(proof)],
                None => return self.refuse(Refusal::WrongCookie),
            },
        };
        let (me, them) = ((&self.node, &self.nonce), (&peer, &peer_nonce));
        let (initiator, acceptor) = match self.role {
            Role::Initiator => (me, them),
            Role::Acceptor => (them, me),
        };
        self.session = Some(SessionKey::derive(&self.cookie, initiator, acceptor));
        self.state = State::Done;
        Step {
            send,
            outcome: Some(HandshakeOutcome::Established { peer }),
        }
    }

    /// This node's proof to `peer`, answering `peer`'s challenge `peer_nonce`.
    fn proof_for(&self, peer: &NodeId, peer_nonce: &Nonce) -> Option<Proof> {
        let tag = self
            .mac(&self.node, peer, peer_nonce, &self.nonce)?
            .finalize()
            .into_bytes();
        let mut mac = [0u8; MAC_LEN];
        mac.copy_from_slice(&tag);
        Some(Proof { mac })
    }

    /// The MAC state over `prover` proving to `verifier`, before finalisation. `None` only if
    /// HMAC refused the key, which it never does (it takes keys of any length).
    fn mac(
        &self,
        prover: &NodeId,
        verifier: &NodeId,
        verifier_nonce: &Nonce,
        prover_nonce: &Nonce,
    ) -> Option<HmacSha256> {
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(self.cookie.secret()).ok()?;
        mac.update(CONTEXT);
        mac.update(&PROTOCOL_VERSION.to_be_bytes());
        for name in [prover, verifier] {
            let name = name.as_str().as_bytes();
            // Names are at most 255 bytes (NodeId's invariant), so the length fits.
            mac.update(&(name.len() as u32).to_be_bytes());
            mac.update(name);
        }
        mac.update(verifier_nonce);
        mac.update(prover_nonce);
        Some(mac)
    }

    /// Refuses for a reason decided here: tell the peer, then finish.
    fn refuse(&mut self, refusal: Refusal) -> Step {
        let send = refusal.code().map(PeerFrame::Refuse).into_iter().collect();
        self.finish(send, refusal)
    }

    fn finish(&mut self, send: Vec<PeerFrame>, refusal: Refusal) -> Step {
        self.state = State::Done;
        Step {
            send,
            outcome: Some(HandshakeOutcome::Refused(refusal)),
        }
    }
}
