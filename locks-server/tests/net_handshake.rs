//! The handshake state machine on its own: two machines wired back to back, every refusal,
//! replayed and reflected proofs, and random input from a peer that does not know the cookie.

use locks_core::NodeId;
use locks_core::proto::{Envelope, Message, PROTOCOL_VERSION, ServerRequest};
use locks_core::{AgentId, codec::CodecError};
use locks_server::transport::net::frame::{FrameError, Hello, MAC_LEN, Nonce, Proof};
use locks_server::transport::net::handshake::Step;
use locks_server::transport::net::{
    Cookie, Handshake, HandshakeOutcome, Malformed, NameVerdict, PeerFrame, Refusal, RefusalCode,
    Role, TlsFailure,
};
use proptest::prelude::*;
use std::time::{Duration, Instant};

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

const TIMEOUT: Duration = Duration::from_secs(5);

fn start(role: Role, name: &str, cookie: &str, nonce: u8, t0: Instant) -> (Handshake, Step) {
    Handshake::new(
        role,
        node(name),
        Cookie::from(cookie),
        [nonce; 32],
        t0 + TIMEOUT,
    )
}

/// A Hello of this protocol version from `name`, with nonce `[nonce; 32]`.
fn hello(name: &str, nonce: u8) -> PeerFrame {
    PeerFrame::Hello(Hello {
        version: PROTOCOL_VERSION,
        node: node(name),
        nonce: [nonce; 32],
    })
}

fn never_in_use(_: &NodeId) -> bool {
    false
}

fn established(peer: &str) -> Option<HandshakeOutcome> {
    Some(HandshakeOutcome::Established { peer: node(peer) })
}

fn refused(r: Refusal) -> Option<HandshakeOutcome> {
    Some(HandshakeOutcome::Refused(r))
}

/// Delivers every frame of `step` to `to`, returning `to`'s combined step.
fn deliver(step: &Step, to: &mut Handshake) -> Step {
    let mut out = Step::default();
    for frame in &step.send {
        let s = to.on_frame(frame.clone(), never_in_use);
        out.send.extend(s.send);
        if s.outcome.is_some() {
            assert!(out.outcome.is_none(), "two outcomes");
            out.outcome = s.outcome;
        }
    }
    out
}

fn kinds(step: &Step) -> Vec<&'static str> {
    step.send.iter().map(PeerFrame::kind).collect()
}

#[test]
fn two_nodes_with_the_same_cookie_establish() {
    let t0 = Instant::now();
    let (mut i, s1) = start(Role::Initiator, "i", "secret", 1, t0);
    let (mut a, s0) = start(Role::Acceptor, "a", "secret", 2, t0);
    assert_eq!(s0, Step::default(), "the acceptor waits for the initiator");
    assert_eq!(kinds(&s1), ["Hello"]);
    let s2 = deliver(&s1, &mut a);
    assert_eq!((kinds(&s2), s2.outcome.clone()), (vec!["Hello"], None));
    let s3 = deliver(&s2, &mut i);
    assert_eq!((kinds(&s3), s3.outcome.clone()), (vec!["Proof"], None));
    let s4 = deliver(&s3, &mut a);
    assert_eq!(kinds(&s4), ["Proof"]);
    assert_eq!(s4.outcome, established("i"));
    let s5 = deliver(&s4, &mut i);
    assert!(s5.send.is_empty());
    assert_eq!(s5.outcome, established("a"));
    assert!(i.is_done() && a.is_done());
    // The outcome is reported once; later input is ignored.
    assert_eq!(deliver(&s4, &mut i), Step::default());
    assert_eq!(i.on_tick(t0 + 2 * TIMEOUT), Step::default());
    assert_eq!(a.on_closed(), Step::default());
}

/// Runs the exchange to its end; returns (initiator's outcome, acceptor's outcome).
fn run(
    i: (Handshake, Step),
    a: (Handshake, Step),
) -> (Option<HandshakeOutcome>, Option<HandshakeOutcome>) {
    let (mut i, mut to_a) = i;
    let (mut a, _) = a;
    let (mut oi, mut oa) = (None, None);
    for _ in 0..4 {
        let to_i = deliver(&to_a, &mut a);
        oa = oa.or(to_i.outcome.clone());
        to_a = deliver(&to_i, &mut i);
        oi = oi.or(to_a.outcome.clone());
    }
    (oi, oa)
}

#[test]
fn wrong_cookie_is_refused_on_both_sides() {
    let t0 = Instant::now();
    let (oi, oa) = run(
        start(Role::Initiator, "i", "guess", 1, t0),
        start(Role::Acceptor, "a", "secret", 2, t0),
    );
    assert_eq!(oa, refused(Refusal::WrongCookie));
    assert_eq!(oi, refused(Refusal::ByPeer(RefusalCode::WrongCookie)));
    // The acceptor with the wrong cookie refuses the same way: it checks first.
    let (oi, oa) = run(
        start(Role::Initiator, "i", "secret", 1, t0),
        start(Role::Acceptor, "a", "guess", 2, t0),
    );
    assert_eq!(oa, refused(Refusal::WrongCookie));
    assert_eq!(oi, refused(Refusal::ByPeer(RefusalCode::WrongCookie)));
}

#[test]
fn an_acceptor_without_the_cookie_is_refused_by_the_initiator() {
    let t0 = Instant::now();
    let (mut i, _) = start(Role::Initiator, "i", "secret", 1, t0);
    let hello = hello("a", 2);
    assert_eq!(kinds(&i.on_frame(hello, never_in_use)), ["Proof"]);
    let forged = PeerFrame::Proof(Proof { mac: [0; MAC_LEN] });
    let step = i.on_frame(forged, never_in_use);
    assert_eq!(step.send, [PeerFrame::Refuse(RefusalCode::WrongCookie)]);
    assert_eq!(step.outcome, refused(Refusal::WrongCookie));
}

#[test]
fn a_proof_reflected_back_to_its_author_is_refused() {
    let t0 = Instant::now();
    let (mut i, _) = start(Role::Initiator, "i", "secret", 1, t0);
    let hello = hello("a", 2);
    let own_proof = i.on_frame(hello, never_in_use).send.remove(0);
    let step = i.on_frame(own_proof, never_in_use);
    assert_eq!(step.outcome, refused(Refusal::WrongCookie));
}

#[test]
fn a_proof_replayed_in_another_handshake_is_refused() {
    let t0 = Instant::now();
    // Record the initiator's proof of a first, honest handshake.
    let (mut a1, _) = start(Role::Acceptor, "a", "secret", 2, t0);
    let (mut i1, hello_i) = start(Role::Initiator, "i", "secret", 1, t0);
    let hello_a = deliver(&hello_i, &mut a1);
    let proof_i = deliver(&hello_a, &mut i1);
    // Replay its Hello and proof to a new acceptor, which picks a fresh nonce.
    let (mut a2, _) = start(Role::Acceptor, "a", "secret", 3, t0);
    deliver(&hello_i, &mut a2);
    let step = deliver(&proof_i, &mut a2);
    assert_eq!(step.outcome, refused(Refusal::WrongCookie));
}

#[test]
fn wrong_protocol_version_is_refused() {
    let t0 = Instant::now();
    let (mut a, _) = start(Role::Acceptor, "a", "secret", 2, t0);
    let hello = PeerFrame::Hello(Hello {
        version: PROTOCOL_VERSION + 1,
        node: node("i"),
        nonce: [1; 32],
    });
    let step = a.on_frame(hello, never_in_use);
    assert_eq!(
        step.send,
        [PeerFrame::Refuse(RefusalCode::WrongVersion {
            supported: PROTOCOL_VERSION
        })]
    );
    assert_eq!(
        step.outcome,
        refused(Refusal::WrongVersion {
            ours: PROTOCOL_VERSION,
            theirs: PROTOCOL_VERSION + 1
        })
    );
    // A Hello of another version that does not even parse: the decoder says which version.
    let (mut a, _) = start(Role::Acceptor, "a", "secret", 2, t0);
    let step = a.on_malformed(FrameError::Version { got: 7 });
    assert_eq!(
        step.outcome,
        refused(Refusal::WrongVersion {
            ours: PROTOCOL_VERSION,
            theirs: 7
        })
    );
    // The initiator told "wrong version" by the acceptor.
    let (mut i, _) = start(Role::Initiator, "i", "secret", 1, t0);
    let step = i.on_frame(
        PeerFrame::Refuse(RefusalCode::WrongVersion { supported: 9 }),
        never_in_use,
    );
    assert!(step.send.is_empty());
    assert_eq!(
        step.outcome,
        refused(Refusal::ByPeer(RefusalCode::WrongVersion { supported: 9 }))
    );
}

#[test]
fn duplicate_node_names_are_refused() {
    let t0 = Instant::now();
    let (mut a, _) = start(Role::Acceptor, "a", "secret", 2, t0);
    let (mut b, hello_b) = start(Role::Initiator, "b", "secret", 1, t0);
    let mut asked = Vec::new();
    // The acceptor asks about the name only once the initiator proved the cookie.
    let step = a.on_frame(hello_b.send[0].clone(), |n: &NodeId| {
        asked.push(n.clone());
        true
    });
    assert!(asked.is_empty(), "asked before the proof: {asked:?}");
    assert_eq!(kinds(&step), ["Hello"]);
    let proof = deliver(&step, &mut b);
    assert_eq!(kinds(&proof), ["Proof"]);
    let step = a.on_frame(proof.send[0].clone(), |n: &NodeId| {
        asked.push(n.clone());
        true
    });
    assert_eq!(asked, [node("b")]);
    assert_eq!(step.send, [PeerFrame::Refuse(RefusalCode::DuplicateName)]);
    assert_eq!(step.outcome, refused(Refusal::DuplicateName(node("b"))));
    // A peer with this node's own name: the acceptor says who it is before refusing, so that
    // a dialer learns whom it reached.
    let (mut a, _) = start(Role::Acceptor, "a", "secret", 2, t0);
    let step = a.on_frame(hello("a", 1), never_in_use);
    assert!(
        matches!(&step.send[..], [PeerFrame::Hello(h), PeerFrame::Refuse(RefusalCode::DuplicateName)] if h.node == node("a"))
    );
    assert_eq!(step.outcome, refused(Refusal::DuplicateName(node("a"))));
    // The initiator checks the acceptor's name on its Hello.
    let (mut i, _) = start(Role::Initiator, "i", "secret", 1, t0);
    let step = i.on_frame(hello("b", 1), |_: &NodeId| true);
    assert_eq!(step.outcome, refused(Refusal::DuplicateName(node("b"))));
}

#[test]
fn a_name_the_peers_certificate_does_not_carry_is_refused_and_the_peer_told() {
    let t0 = Instant::now();
    let not_certified = |_: &NodeId| NameVerdict::NotCertified;
    let refusal = |name: &str| {
        refused(Refusal::Tls(TlsFailure::NameNotCertified {
            name: node(name),
        }))
    };
    // The acceptor checks the initiator's name once it has proved the cookie, and refuses
    // before it proves anything itself.
    let (mut a, _) = start(Role::Acceptor, "a", "secret", 2, t0);
    let (mut b, hello_b) = start(Role::Initiator, "b", "secret", 1, t0);
    let step = a.on_frame(hello_b.send[0].clone(), not_certified);
    assert_eq!(kinds(&step), ["Hello"]);
    let proof = deliver(&step, &mut b);
    let step = a.on_frame(proof.send[0].clone(), not_certified);
    assert_eq!(
        step.send,
        [PeerFrame::Refuse(RefusalCode::NameNotCertified)]
    );
    assert_eq!(step.outcome, refusal("b"));
    let told = deliver(&step, &mut b);
    assert_eq!(
        told.outcome,
        refused(Refusal::ByPeer(RefusalCode::NameNotCertified))
    );
    // The initiator checks the acceptor's name on its Hello, and sends no proof.
    let (mut i, _) = start(Role::Initiator, "i", "secret", 1, t0);
    let step = i.on_frame(hello("a", 2), not_certified);
    assert_eq!(
        step.send,
        [PeerFrame::Refuse(RefusalCode::NameNotCertified)]
    );
    assert_eq!(step.outcome, refusal("a"));
    // A certified name that is in use is still a duplicate.
    let (mut i, _) = start(Role::Initiator, "i", "secret", 1, t0);
    let step = i.on_frame(hello("a", 2), |_: &NodeId| NameVerdict::InUse);
    assert_eq!(step.outcome, refused(Refusal::DuplicateName(node("a"))));
}

#[test]
fn an_acceptor_never_asks_about_a_name_without_a_valid_proof() {
    let t0 = Instant::now();
    let (mut a, _) = start(Role::Acceptor, "a", "secret", 2, t0);
    let (mut b, hello_b) = start(Role::Initiator, "b", "wrong", 1, t0);
    let step = a.on_frame(hello_b.send[0].clone(), |_: &NodeId| -> bool {
        panic!("asked on Hello")
    });
    let proof = deliver(&step, &mut b);
    let step = a.on_frame(proof.send[0].clone(), |_: &NodeId| -> bool {
        panic!("asked on a wrong proof")
    });
    assert_eq!(step.outcome, refused(Refusal::WrongCookie));
}

#[test]
fn frames_out_of_place_are_malformed() {
    let t0 = Instant::now();
    let payload = PeerFrame::Payload(Envelope::new(Message::Server(ServerRequest::RemoveAgent {
        agent: AgentId::new(node("i"), 0, 0),
    })));
    for frame in [
        payload,
        PeerFrame::Ping { seq: 1 },
        PeerFrame::Pong { seq: 1 },
        PeerFrame::Proof(Proof { mac: [0; MAC_LEN] }),
    ] {
        let (mut a, _) = start(Role::Acceptor, "a", "secret", 2, t0);
        let kind = frame.kind();
        let step = a.on_frame(frame, never_in_use);
        assert_eq!(
            step.send,
            [PeerFrame::Refuse(RefusalCode::Malformed)],
            "{kind}"
        );
        assert!(
            matches!(&step.outcome, Some(HandshakeOutcome::Refused(Refusal::Malformed(m))) if m.to_string().contains(kind)),
            "{kind}: {:?}",
            step.outcome
        );
    }
    // A second Hello where a Proof is expected.
    let (mut a, _) = start(Role::Acceptor, "a", "secret", 2, t0);
    let hello = hello("i", 1);
    a.on_frame(hello.clone(), never_in_use);
    let step = a.on_frame(hello, never_in_use);
    assert!(matches!(
        step.outcome,
        Some(HandshakeOutcome::Refused(Refusal::Malformed(_)))
    ));
    // Undecodable bytes.
    let (mut a, _) = start(Role::Acceptor, "a", "secret", 2, t0);
    let err = FrameError::Codec(CodecError::TrailingBytes { used: 1, extra: 1 });
    let step = a.on_malformed(err);
    assert_eq!(step.send, [PeerFrame::Refuse(RefusalCode::Malformed)]);
    // Framing refused by the length codec.
    let (mut a, _) = start(Role::Acceptor, "a", "secret", 2, t0);
    let too_big = || std::io::Error::new(std::io::ErrorKind::InvalidData, "frame size too big");
    let step = a.on_bad_framing(too_big());
    assert_eq!(
        step.outcome,
        refused(Refusal::Malformed(Malformed::Framing(too_big().into())))
    );
}

#[test]
fn an_echoed_nonce_is_refused() {
    let t0 = Instant::now();
    let (mut a, _) = start(Role::Acceptor, "a", "secret", 2, t0);
    let hello = hello("i", 2);
    let step = a.on_frame(hello, never_in_use);
    assert!(matches!(
        step.outcome,
        Some(HandshakeOutcome::Refused(Refusal::Malformed(_)))
    ));
}

#[test]
fn handshake_times_out_at_its_deadline() {
    let t0 = Instant::now();
    let (mut a, _) = start(Role::Acceptor, "a", "secret", 2, t0);
    assert_eq!(a.deadline(), t0 + TIMEOUT);
    assert_eq!(
        a.on_tick(t0 + TIMEOUT - Duration::from_millis(1)),
        Step::default()
    );
    let step = a.on_tick(t0 + TIMEOUT);
    assert_eq!(step.send, [PeerFrame::Refuse(RefusalCode::Timeout)]);
    assert_eq!(step.outcome, refused(Refusal::Timeout));
}

#[test]
fn closed_and_io_errors_end_without_a_refuse_frame() {
    let t0 = Instant::now();
    let (mut a, _) = start(Role::Acceptor, "a", "secret", 2, t0);
    assert_eq!(
        a.on_closed(),
        Step {
            send: vec![],
            outcome: refused(Refusal::Closed)
        }
    );
    let (mut i, _) = start(Role::Initiator, "i", "secret", 1, t0);
    assert_eq!(
        i.on_io_error(std::io::Error::other("reset")),
        Step {
            send: vec![],
            outcome: refused(Refusal::Io(std::io::Error::other("reset").into()))
        }
    );
}

#[test]
fn cookie_debug_is_redacted() {
    assert_eq!(
        format!("{:?}", Cookie::from("hunter2")),
        "Cookie(<redacted>)"
    );
}

fn arb_node() -> impl Strategy<Value = NodeId> {
    "[a-c]{1,2}".prop_map(|s| NodeId::new(s).unwrap())
}

fn arb_frame() -> impl Strategy<Value = PeerFrame> {
    let nonce = any::<[u8; 32]>();
    prop_oneof![
        (0u16..3, arb_node(), nonce).prop_map(|(version, node, nonce)| {
            PeerFrame::Hello(Hello {
                version,
                node,
                nonce,
            })
        }),
        any::<[u8; 32]>().prop_map(|mac| PeerFrame::Proof(Proof { mac })),
        Just(PeerFrame::Refuse(RefusalCode::Malformed)),
        any::<u64>().prop_map(|seq| PeerFrame::Ping { seq }),
    ]
}

#[derive(Clone, Debug)]
enum Input {
    Frame(PeerFrame),
    Tick(u64),
    Malformed,
    Closed,
}

fn arb_input() -> impl Strategy<Value = Input> {
    prop_oneof![
        6 => arb_frame().prop_map(Input::Frame),
        1 => (0u64..10_000).prop_map(Input::Tick),
        1 => Just(Input::Malformed),
        1 => Just(Input::Closed),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A peer that does not know the cookie, sending anything in any order, never gets a
    /// connection established; the machine never panics and reports at most one outcome,
    /// and every local refusal tells the peer why.
    #[test]
    fn a_peer_without_the_cookie_never_establishes(
        initiator in any::<bool>(),
        nonce in any::<Nonce>(),
        inputs in proptest::collection::vec(arb_input(), 0..12),
    ) {
        let t0 = Instant::now();
        let role = if initiator { Role::Initiator } else { Role::Acceptor };
        let (mut hs, _) = Handshake::new(role, node("me"), Cookie::from("secret"), nonce, t0 + TIMEOUT);
        let mut outcomes = 0;
        for input in inputs {
            let step = match input {
                Input::Frame(f) => hs.on_frame(f, |n: &NodeId| n.as_str() == "c"),
                Input::Tick(ms) => hs.on_tick(t0 + Duration::from_millis(ms)),
                Input::Malformed => hs.on_malformed(FrameError::Version { got: 0 }),
                Input::Closed => hs.on_closed(),
            };
            if let Some(outcome) = &step.outcome {
                outcomes += 1;
                prop_assert!(matches!(outcome, HandshakeOutcome::Refused(_)), "{outcome:?}");
                if let HandshakeOutcome::Refused(r) = outcome {
                    let told: Vec<_> = r.code().map(PeerFrame::Refuse).into_iter().collect();
                    // An acceptor refusing a duplicate name says who it is first.
                    let sent = match (&step.send[..], r) {
                        ([PeerFrame::Hello(h), rest @ ..], Refusal::DuplicateName(_))
                            if role == Role::Acceptor && h.node == node("me") => rest,
                        (all, _) => all,
                    };
                    prop_assert_eq!(sent, &told[..]);
                }
            }
            prop_assert_eq!(hs.is_done(), outcomes == 1);
        }
        prop_assert!(outcomes <= 1);
    }
}
