//! What a node answers a peer's question, on a router and a table of the test's own (no
//! runtime: each answer is read and sent before the question's delivery returns): at most
//! [`MAX_LOCKS_ANSWERED`] locks, at most the bytes asked for, and nothing to an asker that
//! cannot read even an empty report. Filling the table needs its entry point for any agent
//! id, which no caller outside the crate has; the other bounds of answering (a burst of
//! answers, stray answers) are tested from outside, in `tests/cluster_introspect.rs`.

use super::*;
use crate::embed::{LocalTable, Router, Touched};
use crate::local::FastLock;
use crate::table::LockTable;
use locks_core::{AgentId, Mode, lock_id};

fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

/// A link to a peer that keeps what it is sent.
#[derive(Default)]
struct Captured(Mutex<Vec<Envelope>>);

impl RemoteLink for Captured {
    fn send(&self, envelope: Envelope) -> Result<(), RouteError> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(envelope);
        Ok(())
    }
}

/// A router for node "a" with its table and a recording link to "b": what "a" answers "b".
fn answering_router(max_frame: usize) -> (Arc<Router>, Arc<LocalTable>, Arc<Captured>) {
    let router = Arc::new(Router::new(n("a")));
    let table = Arc::new(LocalTable::new(
        router.clone(),
        || LockTable::new(n("a"), ModeTable::default(), 0),
        false,
    ));
    router.set_table(Arc::downgrade(&table), max_frame);
    let link = Arc::new(Captured::default());
    router.add_remote(n("b"), link.clone());
    (router, table, link)
}

/// "b" asks question `id` of "a".
fn ask(router: &Router, id: u64, max_locks: u32, max_bytes: u32) {
    let request = IntrospectRequest {
        id,
        max_locks,
        max_bytes,
    };
    router
        .deliver_from(&n("b"), Envelope::new(Message::Introspect(request)))
        .unwrap();
}

#[test]
fn an_answer_is_capped_in_locks_and_in_bytes_whatever_is_asked() {
    let (router, table, link) = answering_router(4 << 20);
    let t1 = AgentId::new(n("a"), 1, 1);
    let extra = 5;
    for i in 0..(MAX_LOCKS_ANSWERED as i64 + extra) {
        let got = table.fast_lock_as(&t1, &lock_id![i], Mode::S, &Touched::default());
        assert!(matches!(got, FastLock::Granted { .. }), "{got:?}");
    }
    ask(&router, 1, u32::MAX, u32::MAX);
    ask(&router, 2, u32::MAX, 4096);
    // An asker that cannot read even an empty report gets no answer (it lists "a" missing).
    ask(&router, 3, u32::MAX, 4);
    let sent = link.0.lock().unwrap_or_else(PoisonError::into_inner);
    let got: Vec<&TableReport> = sent
        .iter()
        .map(|e| match &e.message {
            Message::TableReport(r) => r,
            other => panic!("not an answer: {other:?}"),
        })
        .collect();
    assert_eq!(got.len(), 2);
    let total = MAX_LOCKS_ANSWERED as u64 + extra as u64;
    assert_eq!(
        (got[0].total_locks, got[0].locks.len()),
        (total, MAX_LOCKS_ANSWERED)
    );
    assert_eq!(got[1].total_locks, total);
    assert!(!got[1].locks.is_empty() && got[1].locks.len() < 1000);
    let size = codec::encode(&sent[1], usize::MAX).unwrap().len();
    assert!(size <= 4096, "{size} bytes");
}
