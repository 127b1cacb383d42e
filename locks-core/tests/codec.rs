//! The wire codec: every message kind round-trips; random, truncated, padded, oversized and
//! wrong-version input is refused with an error and never panics.

mod common;

use locks_core::codec::{
    self, CodecError, DEFAULT_MAX_FRAME, HARD_MAX_FRAME, decode_envelope, decode_envelope_limited,
    encode_envelope,
};
use locks_core::proto::{
    AgentMessage, EntryState, Envelope, IntrospectRequest, LockNotice, LockReport, LockView,
    Message, PROTOCOL_VERSION, QueueEntry, Rejection, ServerRequest, TableReport, Wait,
};
use locks_core::{AgentId, LockId, Mode, NodeId, lock_id};
use proptest::prelude::*;
use std::sync::Arc;

fn agent(serial: u64) -> AgentId {
    AgentId::new(NodeId::new("n1").unwrap(), 1, serial)
}

fn one_of_each_kind() -> Vec<Envelope> {
    let lock = lock_id!["db", 1];
    let node = NodeId::new("n2").unwrap();
    let view = Arc::new(LockView {
        version: 9,
        group: Some(Mode::S),
        granted: vec![QueueEntry {
            agent: agent(1),
            mode: Mode::S,
        }],
        converting: vec![],
        waiting: vec![QueueEntry {
            agent: agent(2),
            mode: Mode::X,
        }],
    });
    let reported = LockView::clone(&view);
    let server = [
        ServerRequest::Lock {
            agent: agent(1),
            lock: lock.clone(),
            mode: Mode::X,
        },
        ServerRequest::Convert {
            agent: agent(1),
            lock: lock.clone(),
            mode: Mode::IS,
        },
        ServerRequest::Unlock {
            agent: agent(1),
            lock: lock.clone(),
        },
        ServerRequest::Surrender {
            agent: agent(1),
            lock: lock.clone(),
            version: 3,
            waits: vec![Wait {
                waiter: agent(2),
                blocker: agent(1),
                lock: lock.clone(),
            }],
        },
        ServerRequest::RemoveAgent { agent: agent(1) },
        ServerRequest::Watch {
            watcher: agent(1),
            lock: lock.clone(),
        },
        ServerRequest::Unwatch {
            watcher: agent(1),
            lock: lock.clone(),
        },
        ServerRequest::RaiseVersions {
            agent: agent(1),
            lock: lock.clone(),
            floor: 1 << 50,
        },
    ];
    let to_agent = [
        AgentMessage::Notice(LockNotice {
            node: node.clone(),
            lock: lock.clone(),
            version: 9,
            state: EntryState::Waiting(Mode::X),
            queue: Some(view.clone()),
            note: None,
        }),
        AgentMessage::Watched {
            node: node.clone(),
            lock: lock.clone(),
            view: view.clone(),
        },
        AgentMessage::Forward {
            from: agent(3),
            node: node.clone(),
            lock: lock.clone(),
            view,
        },
        AgentMessage::Surrendered {
            by: agent(3),
            node: node.clone(),
            lock: lock.clone(),
            version: 9,
        },
        AgentMessage::Rejected {
            node: node.clone(),
            lock: lock.clone(),
            reason: Rejection::NotWeaker {
                held: Mode::S,
                requested: Mode::X,
            },
        },
        AgentMessage::Raised {
            node,
            lock,
            floor: 1 << 50,
        },
    ];
    let introspection = [
        Message::Introspect(IntrospectRequest {
            id: 7,
            max_locks: 100,
            max_bytes: 1 << 20,
        }),
        Message::TableReport(TableReport {
            id: 7,
            node: NodeId::new("n3").unwrap(),
            version: 1042,
            total_locks: 2,
            locks: vec![LockReport {
                lock: lock_id!["db", 1],
                view: reported,
            }],
        }),
    ];
    server
        .into_iter()
        .map(Message::Server)
        .chain(
            to_agent
                .into_iter()
                .map(|msg| Message::Agent { to: agent(2), msg }),
        )
        .chain(introspection)
        .map(Envelope::new)
        .collect()
}

#[test]
fn every_message_kind_round_trips() {
    let all = one_of_each_kind();
    assert_eq!(all.len(), 16);
    for envelope in all {
        let bytes = encode_envelope(&envelope).unwrap();
        assert_eq!(decode_envelope(&bytes).unwrap(), envelope);
    }
}

#[test]
fn a_table_report_round_trips_and_says_whether_it_was_truncated() {
    let envelopes = one_of_each_kind();
    let Some(Message::TableReport(report)) = envelopes.last().map(|e| &e.message) else {
        panic!("the last kind is a table report");
    };
    assert!(report.truncated(), "one lock listed of two");
    let whole = TableReport {
        total_locks: 1,
        ..report.clone()
    };
    assert!(!whole.truncated());
    let bytes = encode_envelope(&Envelope::new(Message::TableReport(whole.clone()))).unwrap();
    assert_eq!(
        decode_envelope(&bytes).unwrap().message,
        Message::TableReport(whole)
    );
}

#[test]
fn every_truncation_of_every_kind_is_an_error() {
    for envelope in one_of_each_kind() {
        let bytes = encode_envelope(&envelope).unwrap();
        for len in 0..bytes.len() {
            assert!(
                decode_envelope(&bytes[..len]).is_err(),
                "{len} of {} bytes of {envelope:?}",
                bytes.len()
            );
        }
    }
}

#[test]
fn trailing_bytes_are_refused() {
    let envelope = &one_of_each_kind()[0];
    let mut bytes = encode_envelope(envelope).unwrap();
    let used = bytes.len();
    bytes.push(0);
    match decode_envelope(&bytes) {
        Err(CodecError::TrailingBytes { used: u, extra: 1 }) => assert_eq!(u, used),
        other => panic!("expected TrailingBytes, got {other:?}"),
    }
}

#[test]
fn wrong_protocol_version_is_refused() {
    let mut envelope = one_of_each_kind().remove(0);
    envelope.version = PROTOCOL_VERSION + 1;
    let bytes = codec::encode(&envelope, DEFAULT_MAX_FRAME).unwrap();
    assert!(matches!(
        decode_envelope(&bytes),
        Err(CodecError::Version { got }) if got == PROTOCOL_VERSION + 1
    ));
    // A future version whose body does not parse as this version's message is still reported
    // as a version mismatch, not as a malformed frame.
    let future = codec::encode(&(PROTOCOL_VERSION + 1, [0xffu8; 5]), 64).unwrap();
    assert!(matches!(
        decode_envelope(&future),
        Err(CodecError::Version { .. })
    ));
}

#[test]
fn oversize_is_refused_both_ways() {
    let big = Envelope::new(Message::Server(ServerRequest::Lock {
        agent: agent(1),
        lock: LockId::new(["k"; 200]).unwrap(),
        mode: Mode::S,
    }));
    let bytes = encode_envelope(&big).unwrap();
    assert!(bytes.len() > 400);
    assert!(matches!(
        codec::encode(&big, 100),
        Err(CodecError::TooLarge { limit: 100, .. })
    ));
    assert!(matches!(
        decode_envelope_limited(&bytes, 100),
        Err(CodecError::TooLarge { limit: 100, len }) if len == bytes.len()
    ));
    assert_eq!(decode_envelope_limited(&bytes, bytes.len()).unwrap(), big);
    // No limit can exceed the hard one.
    let huge = vec![0u8; HARD_MAX_FRAME + 1];
    assert!(matches!(
        codec::decode::<Envelope>(&huge, usize::MAX),
        Err(CodecError::TooLarge {
            limit: HARD_MAX_FRAME,
            ..
        })
    ));
}

/// bincode's varint for a `u64` above `u32::MAX`: the marker 253 and eight little-endian bytes.
fn varint_u64(v: u64) -> Vec<u8> {
    let mut out = vec![253];
    out.extend_from_slice(&v.to_le_bytes());
    out
}

#[test]
fn a_claimed_huge_length_errors_without_allocating_it() {
    let claim = varint_u64(1 << 40);
    // A bare vector of 2^40 integers.
    assert!(codec::decode::<Vec<u64>>(&claim, DEFAULT_MAX_FRAME).is_err());
    // A lock id of 2^40 keys inside an otherwise valid Unlock request.
    let mut bytes = vec![
        PROTOCOL_VERSION as u8, // envelope version
        0,                      // Message::Server
        2,                      // ServerRequest::Unlock
        1,                      // agent node name: 1 byte
        b'n',
        0, // incarnation
        0, // serial
    ];
    bytes.extend_from_slice(&claim);
    assert!(decode_envelope(&bytes).is_err());
    // A node name of 2^40 bytes.
    let mut bytes = vec![PROTOCOL_VERSION as u8, 0, 4];
    bytes.extend_from_slice(&claim);
    assert!(decode_envelope(&bytes).is_err());
    // Sanity: the prefix above is the real layout of an Unlock request.
    let real = encode_envelope(&Envelope::new(Message::Server(ServerRequest::Unlock {
        agent: AgentId::new(NodeId::new("n").unwrap(), 0, 0),
        lock: lock_id!["a"],
    })))
    .unwrap();
    assert_eq!(real[..7], [PROTOCOL_VERSION as u8, 0, 2, 1, b'n', 0, 0]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn envelopes_round_trip(envelope in common::envelope()) {
        let bytes = encode_envelope(&envelope).unwrap();
        prop_assert_eq!(decode_envelope(&bytes).unwrap(), envelope);
    }

    #[test]
    fn truncated_envelopes_are_errors(envelope in common::envelope(), cut in any::<prop::sample::Index>()) {
        let bytes = encode_envelope(&envelope).unwrap();
        let len = cut.index(bytes.len());
        prop_assert!(decode_envelope(&bytes[..len]).is_err());
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        // Random bytes may by chance be a valid envelope; then it must re-encode to an
        // envelope that decodes to the same value.
        if let Ok(envelope) = decode_envelope(&bytes) {
            let again = encode_envelope(&envelope).unwrap();
            prop_assert_eq!(decode_envelope(&again).unwrap(), envelope);
        }
    }

    #[test]
    fn corrupted_envelopes_never_panic(
        envelope in common::envelope(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode_envelope(&envelope).unwrap();
        for (at, byte) in flips {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let _ = decode_envelope(&bytes);
    }
}

/// The decoder's claim limit grows with the buffer; a valid value whose every byte claims the
/// most memory (a one-byte `u128` claims 16) must still decode at every step boundary: a
/// buffer of exactly a step's length, and one byte more. (Steps above 256 KiB follow the same
/// rule; they are left out to keep debug runs short.)
#[test]
fn dense_small_integers_decode_at_every_limit_step() {
    // bincode's varint length prefix: 3 bytes below 2^16, 5 above.
    let prefix = |n: usize| if n < 1 << 16 { 3 } else { 5 };
    for step in [1usize << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10] {
        let exact = step - prefix(step - 5);
        for len in [exact, exact + 1] {
            let value = vec![0u128; len];
            let bytes = codec::encode(&value, usize::MAX).unwrap();
            assert_eq!(bytes.len(), len + prefix(len));
            let back: Vec<u128> = codec::decode(&bytes, usize::MAX).unwrap();
            assert_eq!(back.len(), len);
            let value = vec![1u64; len];
            let bytes = codec::encode(&value, usize::MAX).unwrap();
            assert_eq!(
                codec::decode::<Vec<u64>>(&bytes, usize::MAX).unwrap(),
                value
            );
        }
        let exact_bytes = codec::encode(&vec![0u128; exact], usize::MAX).unwrap();
        assert_eq!(exact_bytes.len(), step);
    }
}
