//! The peer frame codec: round trips, the stable prefix of `Hello` and `Refuse`, versions, and
//! random, truncated and corrupted input (never a panic). This is the property-test stand-in
//! for a fuzz target over frame and handshake decoding.

use bytes::BytesMut;
use locks_core::codec::{self, CodecError};
use locks_core::proto::{Envelope, Message, PROTOCOL_VERSION, ServerRequest};
use locks_core::{AgentId, LockId, Mode, NodeId};
use locks_server::transport::net::frame::{
    FrameError, HANDSHAKE_MAX_FRAME, Hello, MAC_LEN, Proof, decode_frame, encode_frame,
    encode_payload, length_codec,
};
use locks_server::transport::net::{
    Cookie, Handshake, HandshakeOutcome, PeerFrame, RefusalCode, Role,
};
use proptest::prelude::*;
use std::time::{Duration, Instant};
use tokio_util::codec::{Decoder, Encoder};

const MAX: usize = 1 << 16;

fn envelope(serial: u64) -> Envelope {
    Envelope::new(Message::Server(ServerRequest::Lock {
        agent: AgentId::new(NodeId::new("n1").unwrap(), 1, serial),
        lock: LockId::from(["db", "t"]),
        mode: Mode::X,
    }))
}

fn hello(version: u16) -> PeerFrame {
    PeerFrame::Hello(Hello {
        version,
        node: NodeId::new("n1").unwrap(),
        nonce: [7; 32],
    })
}

fn every_kind() -> Vec<PeerFrame> {
    vec![
        hello(PROTOCOL_VERSION),
        PeerFrame::Refuse(RefusalCode::WrongVersion { supported: 1 }),
        PeerFrame::Refuse(RefusalCode::WrongCookie),
        PeerFrame::Proof(Proof { mac: [9; MAC_LEN] }),
        PeerFrame::Ping { seq: 1 },
        PeerFrame::Pong { seq: u64::MAX },
        PeerFrame::Payload(envelope(3)),
    ]
}

#[test]
fn every_frame_kind_round_trips() {
    for frame in every_kind() {
        let bytes = encode_frame(&frame, MAX).unwrap();
        assert_eq!(decode_frame(&bytes, MAX).unwrap(), frame);
        for len in 0..bytes.len() {
            assert!(
                decode_frame(&bytes[..len], MAX).is_err(),
                "{frame:?} cut at {len}"
            );
        }
    }
}

#[test]
fn encode_payload_is_encode_frame_of_a_payload() {
    let env = envelope(5);
    assert_eq!(
        encode_payload(&env, MAX).unwrap(),
        encode_frame(&PeerFrame::Payload(env), MAX).unwrap()
    );
}

#[test]
fn hello_and_refuse_keep_their_wire_prefix() {
    let bytes = encode_frame(&hello(PROTOCOL_VERSION), MAX).unwrap();
    assert_eq!(bytes[..2], [0, PROTOCOL_VERSION as u8]);
    let bytes = encode_frame(&PeerFrame::Refuse(RefusalCode::WrongCookie), MAX).unwrap();
    assert_eq!(bytes[0], 1);
    // A Hello with a 255-byte name fits the handshake frame limit.
    let big = PeerFrame::Hello(Hello {
        version: u16::MAX,
        node: NodeId::new("x".repeat(255)).unwrap(),
        nonce: [0xff; 32],
    });
    assert!(encode_frame(&big, HANDSHAKE_MAX_FRAME).is_ok());
}

#[test]
fn another_protocol_version_is_reported_as_such() {
    // A Hello of a later version that parses.
    let bytes = encode_frame(&hello(PROTOCOL_VERSION + 1), MAX).unwrap();
    assert_eq!(
        decode_frame(&bytes, MAX).unwrap(),
        hello(PROTOCOL_VERSION + 1),
        "the handshake, not the decoder, refuses a parsable Hello"
    );
    // A Hello of a later version whose body this version cannot parse; small and large
    // version numbers (one- and three-byte varints).
    for version in [PROTOCOL_VERSION + 1, 1000] {
        let bytes = codec::encode(&(0u8, version, "a different layout", [0u8; 3]), MAX).unwrap();
        assert!(
            matches!(decode_frame(&bytes, MAX), Err(FrameError::Version { got }) if got == version),
            "{version}"
        );
    }
    // A payload whose envelope has another version.
    let mut env = envelope(1);
    env.version = PROTOCOL_VERSION + 1;
    let bytes = encode_frame(&PeerFrame::Payload(env), MAX).unwrap();
    assert!(matches!(
        decode_frame(&bytes, MAX),
        Err(FrameError::Version { .. })
    ));
}

#[test]
fn oversize_and_trailing_bytes_are_refused() {
    let bytes = encode_frame(&PeerFrame::Payload(envelope(1)), MAX).unwrap();
    assert!(matches!(
        decode_frame(&bytes, 8),
        Err(FrameError::Codec(CodecError::TooLarge { limit: 8, .. }))
    ));
    assert!(encode_frame(&PeerFrame::Payload(envelope(1)), 8).is_err());
    let mut padded = bytes.to_vec();
    padded.push(0);
    assert!(matches!(
        decode_frame(&padded, MAX),
        Err(FrameError::Codec(CodecError::TrailingBytes {
            extra: 1,
            ..
        }))
    ));
}

#[test]
fn the_length_codec_refuses_a_claimed_length_above_its_limit() {
    let mut codec = length_codec(HANDSHAKE_MAX_FRAME);
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&u32::MAX.to_be_bytes());
    buf.extend_from_slice(b"xyz");
    let err = codec.decode(&mut buf).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    // A frame within the limit passes through with its 4-byte big-endian prefix.
    let mut codec = length_codec(HANDSHAKE_MAX_FRAME);
    let mut out = BytesMut::new();
    codec
        .encode(bytes::Bytes::from_static(b"abc"), &mut out)
        .unwrap();
    assert_eq!(&out[..], &[0, 0, 0, 3, b'a', b'b', b'c']);
    assert_eq!(&codec.decode(&mut out).unwrap().unwrap()[..], b"abc");
}

fn arb_frame() -> impl Strategy<Value = PeerFrame> {
    prop_oneof![
        (any::<u16>(), "[a-z]{1,20}", any::<[u8; 32]>()).prop_map(|(version, name, nonce)| {
            PeerFrame::Hello(Hello {
                version,
                node: NodeId::new(name).unwrap(),
                nonce,
            })
        }),
        any::<[u8; 32]>().prop_map(|mac| PeerFrame::Proof(Proof { mac })),
        any::<u16>()
            .prop_map(|supported| PeerFrame::Refuse(RefusalCode::WrongVersion { supported })),
        any::<u64>().prop_map(|seq| PeerFrame::Ping { seq }),
        any::<u64>().prop_map(|seq| PeerFrame::Pong { seq }),
        (any::<u64>()).prop_map(|s| PeerFrame::Payload(envelope(s))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn frames_round_trip(frame in arb_frame()) {
        let bytes = encode_frame(&frame, MAX).unwrap();
        // Hellos of other versions decode too, when they parse: the handshake refuses them.
        prop_assert_eq!(decode_frame(&bytes, MAX).unwrap(), frame);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        if let Ok(frame) = decode_frame(&bytes, HANDSHAKE_MAX_FRAME) {
            // Accepted by chance: it must survive a re-encode.
            let again = encode_frame(&frame, MAX).unwrap();
            prop_assert_eq!(decode_frame(&again, MAX).unwrap(), frame);
        }
    }

    #[test]
    fn truncated_and_corrupted_frames_never_panic(
        frame in arb_frame(),
        cut in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
    ) {
        let bytes = encode_frame(&frame, MAX).unwrap();
        let len = cut.index(bytes.len());
        prop_assert!(decode_frame(&bytes[..len], MAX).is_err());
        let mut corrupted = bytes.to_vec();
        for (at, b) in flips {
            let i = at.index(corrupted.len());
            corrupted[i] = b;
        }
        let _ = decode_frame(&corrupted, MAX);
    }

    /// The whole receiving pipeline of a handshake over random bytes, optionally after a
    /// valid Hello: length codec, frame decoder, handshake machine. Frames come out only
    /// within the limit, nothing panics, and a peer without the cookie is never established.
    #[test]
    fn the_handshake_pipeline_never_panics_on_random_input(
        valid_hello_first in any::<bool>(),
        bytes in proptest::collection::vec(any::<u8>(), 0..96),
    ) {
        let mut buf = BytesMut::new();
        let mut codec = length_codec(HANDSHAKE_MAX_FRAME);
        if valid_hello_first {
            let hello = encode_frame(&hello(PROTOCOL_VERSION), MAX).unwrap();
            codec.encode(hello, &mut buf).unwrap();
        }
        buf.extend_from_slice(&bytes);
        let t0 = Instant::now();
        let (mut hs, _) = Handshake::new(
            Role::Acceptor,
            NodeId::new("me").unwrap(),
            Cookie::from("secret"),
            [0; 32],
            t0 + Duration::from_secs(5),
        );
        loop {
            let step = match codec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    prop_assert!(frame.len() <= HANDSHAKE_MAX_FRAME);
                    match decode_frame(&frame, HANDSHAKE_MAX_FRAME) {
                        Ok(frame) => hs.on_frame(frame, |_: &NodeId| false),
                        Err(e) => hs.on_malformed(e),
                    }
                }
                Ok(None) => break,
                Err(e) => hs.on_bad_framing(e),
            };
            let established = matches!(step.outcome, Some(HandshakeOutcome::Established { .. }));
            prop_assert!(!established, "established without the cookie");
            if hs.is_done() {
                break;
            }
        }
    }
}
