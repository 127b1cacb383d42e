//! Proptest strategies for the vocabulary of `locks-core`, shared by the integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use locks_core::proto::{
    AgentMessage, Conversion, EntryState, Envelope, IntrospectRequest, LockNotice, LockReport,
    LockView, Message, Note, QueueEntry, Quota, Rejection, ServerRequest, TableReport, Wait,
};
use locks_core::{AgentId, Key, LockId, MemberId, Mode, NodeId};
use proptest::prelude::*;
use std::sync::Arc;

/// Keys of all three kinds, from a small alphabet so that paths share prefixes often.
pub fn key() -> impl Strategy<Value = Key> {
    prop_oneof![
        (-3i64..3).prop_map(Key::Int),
        any::<i64>().prop_map(Key::Int),
        any::<u64>().prop_map(Key::from),
        "[ab]{1,2}".prop_map(Key::from),
        "\\PC{0,6}".prop_map(Key::from),
        // Around the length up to which keys are compared in place: mostly equal up to there.
        "a{14,18}[ab]{0,3}".prop_map(Key::from),
        proptest::collection::vec(any::<u8>(), 0..4).prop_map(Key::from),
        proptest::collection::vec(0u8..2, 14..20).prop_map(Key::from),
    ]
}

/// Lock ids of depth 1 to 5.
pub fn lock_id() -> impl Strategy<Value = LockId> {
    proptest::collection::vec(key(), 1..=5).prop_map(|keys| LockId::new(keys).unwrap())
}

/// Valid node names.
pub fn node_id() -> impl Strategy<Value = NodeId> {
    "[a-z][a-z0-9_.@-]{0,10}".prop_map(|s| NodeId::new(s).unwrap())
}

/// Agent ids on a few nodes.
pub fn agent_id() -> impl Strategy<Value = AgentId> {
    (node_id(), any::<u64>(), any::<u64>()).prop_map(|(n, i, s)| AgentId::new(n, i, s))
}

/// Any of the six modes.
pub fn mode() -> impl Strategy<Value = Mode> {
    proptest::sample::select(Mode::ALL.to_vec())
}

fn queue_entry() -> impl Strategy<Value = QueueEntry> {
    (agent_id(), mode()).prop_map(|(agent, mode)| QueueEntry { agent, mode })
}

/// Lock views with up to three entries in each queue.
pub fn lock_view() -> impl Strategy<Value = LockView> {
    (
        any::<u64>(),
        proptest::option::of(mode()),
        proptest::collection::vec(queue_entry(), 0..3),
        proptest::collection::vec(
            (agent_id(), mode(), mode()).prop_map(|(agent, held, requested)| Conversion {
                agent,
                held,
                requested,
            }),
            0..3,
        ),
        proptest::collection::vec(queue_entry(), 0..3),
    )
        .prop_map(|(version, group, granted, converting, waiting)| LockView {
            version,
            group,
            granted,
            converting,
            waiting,
        })
}

/// Every kind of server request.
pub fn server_request() -> impl Strategy<Value = ServerRequest> {
    prop_oneof![
        (agent_id(), lock_id(), mode()).prop_map(|(agent, lock, mode)| ServerRequest::Lock {
            agent,
            lock,
            mode
        }),
        (agent_id(), lock_id(), mode()).prop_map(|(agent, lock, mode)| ServerRequest::Convert {
            agent,
            lock,
            mode
        }),
        (agent_id(), lock_id()).prop_map(|(agent, lock)| ServerRequest::Unlock { agent, lock }),
        (
            agent_id(),
            lock_id(),
            any::<u64>(),
            proptest::collection::vec((agent_id(), agent_id(), lock_id()), 0..3)
        )
            .prop_map(|(agent, lock, version, waits)| ServerRequest::Surrender {
                agent,
                lock,
                version,
                waits: waits
                    .into_iter()
                    .map(|(waiter, blocker, lock)| Wait {
                        waiter,
                        blocker,
                        lock
                    })
                    .collect(),
            }),
        agent_id().prop_map(|agent| ServerRequest::RemoveAgent { agent }),
        (agent_id(), lock_id()).prop_map(|(watcher, lock)| ServerRequest::Watch { watcher, lock }),
        (agent_id(), lock_id())
            .prop_map(|(watcher, lock)| ServerRequest::Unwatch { watcher, lock }),
        (agent_id(), lock_id(), agent_id())
            .prop_map(|(agent, lock, to)| ServerRequest::SurrenderTo { agent, lock, to }),
        (agent_id(), lock_id(), any::<u64>()).prop_map(|(agent, lock, floor)| {
            ServerRequest::RaiseVersions { agent, lock, floor }
        }),
    ]
}

fn entry_state() -> impl Strategy<Value = EntryState> {
    prop_oneof![
        mode().prop_map(EntryState::Granted),
        (mode(), mode()).prop_map(|(held, requested)| EntryState::Converting { held, requested }),
        mode().prop_map(EntryState::Waiting),
        Just(EntryState::Absent),
    ]
}

fn rejection() -> impl Strategy<Value = Rejection> {
    prop_oneof![
        mode().prop_map(Rejection::ModeNotInTable),
        Just(Rejection::NotHeld),
        (mode(), mode()).prop_map(|(held, requested)| Rejection::NotWeaker { held, requested }),
        "\\PC{0,12}".prop_map(Rejection::LockIdTooLarge),
        Just(Rejection::ShuttingDown),
        agent_id().prop_map(|to| Rejection::SurrenderNotHeld { to }),
        agent_id().prop_map(|to| Rejection::NotWaiting { to }),
        Just(Rejection::QueueTooLarge),
        (
            prop_oneof![Just(Quota::Locks), Just(Quota::Queued), Just(Quota::Bytes)],
            any::<u64>()
        )
            .prop_map(|(quota, limit)| Rejection::QuotaExceeded { quota, limit }),
    ]
}

/// Every kind of agent message.
pub fn agent_message() -> impl Strategy<Value = AgentMessage> {
    let notice = (
        node_id(),
        lock_id(),
        any::<u64>(),
        entry_state(),
        proptest::option::of(lock_view().prop_map(Arc::new)),
        proptest::option::of(prop_oneof![
            (agent_id(), any::<u64>())
                .prop_map(|(agent, version)| Note::Surrendered { agent, version }),
            (agent_id(), agent_id(), any::<u64>())
                .prop_map(|(agent, to, version)| Note::SurrenderedTo { agent, to, version }),
            Just(Note::Converted),
            Just(Note::Unlocked),
        ]),
    )
        .prop_map(|(node, lock, version, state, queue, note)| {
            AgentMessage::Notice(LockNotice {
                node,
                lock,
                version,
                state,
                queue,
                note: note.map(Box::new),
            })
        });
    prop_oneof![
        notice,
        (node_id(), lock_id(), lock_view()).prop_map(|(node, lock, view)| {
            AgentMessage::Watched {
                node,
                lock,
                view: Arc::new(view),
            }
        }),
        (agent_id(), node_id(), lock_id(), lock_view()).prop_map(|(from, node, lock, view)| {
            AgentMessage::Forward {
                from,
                node,
                lock,
                view: Arc::new(view),
            }
        }),
        (agent_id(), node_id(), lock_id(), any::<u64>()).prop_map(|(by, node, lock, version)| {
            AgentMessage::Surrendered {
                by,
                node,
                lock,
                version,
            }
        }),
        (node_id(), lock_id(), rejection())
            .prop_map(|(node, lock, reason)| { AgentMessage::Rejected { node, lock, reason } }),
        (node_id(), lock_id(), any::<u64>()).prop_map(|(node, lock, floor)| AgentMessage::Raised {
            node,
            lock,
            floor
        }),
    ]
}

/// Every kind of message, in an envelope of the current protocol version.
pub fn envelope() -> impl Strategy<Value = Envelope> {
    prop_oneof![
        server_request().prop_map(Message::Server),
        (agent_id(), agent_message()).prop_map(|(to, msg)| Message::Agent { to, msg }),
        (agent_id(), proptest::collection::vec(agent_message(), 0..4)).prop_map(|(to, msgs)| {
            Message::Notices {
                to,
                notices: msgs
                    .into_iter()
                    .filter_map(|m| match m {
                        AgentMessage::Notice(n) => Some(n),
                        _ => None,
                    })
                    .collect(),
            }
        }),
        (
            agent_id(),
            agent_id(),
            proptest::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(to, from, payload)| Message::Member {
                to: MemberId::of_agent(&to),
                from: MemberId::of_agent(&from),
                payload,
            }),
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(id, max_locks, max_bytes)| {
            Message::Introspect(IntrospectRequest {
                id,
                max_locks,
                max_bytes,
            })
        }),
        (
            any::<u64>(),
            node_id(),
            any::<u64>(),
            any::<u64>(),
            proptest::collection::vec((lock_id(), lock_view()), 0..3)
        )
            .prop_map(|(id, node, version, total_locks, locks)| {
                Message::TableReport(TableReport {
                    id,
                    node,
                    version,
                    total_locks,
                    locks: locks
                        .into_iter()
                        .map(|(lock, view)| LockReport { lock, view })
                        .collect(),
                })
            }),
    ]
    .prop_map(Envelope::new)
}
