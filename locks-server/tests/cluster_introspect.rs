//! Cluster introspection between real nodes over TCP on 127.0.0.1 (ephemeral ports): every
//! connected node's table in one view, truncation, a peer that does not answer in time listed
//! as missing, and the bounds a peer cannot push past (answers per peer, stray answers; the
//! locks and bytes of one answer are a unit test of the crate, `src/introspect/answer_tests.rs`,
//! since filling a table of the test's own takes its entry point for any agent id). Every wait
//! is bounded by `BOUND`; no test asserts a duration.

mod common;

use common::net::{Captured, id, init_tracing, loopback, within};
use locks_core::proto::{Envelope, IntrospectRequest, Message, TableReport};
use locks_core::{LockId, Mode, ModeTable, lock_id};
use locks_server::embed::{FastLock, LocalTable, NodeInternals, Presence, Router, Touched};
use locks_server::introspect::ANSWER_BURST;
use locks_server::state_machine::LockTable;
use locks_server::{ClusterQuery, Node, NodeConfig};
use locks_testing::cluster::connected;
use locks_testing::wait::poll;
use std::sync::Arc;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(20);
const COOKIE: &str = "introspect-test-cookie";

/// A cluster node that grants at once (no start-delay) and whose peers are not declared down
/// while a test holds one node's thread (a heartbeat timeout far beyond any wait here).
fn config(name: &str) -> NodeConfig {
    NodeConfig::new(name)
        .listen(loopback())
        .cookie(COOKIE)
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .heartbeat(Duration::from_secs(1), Duration::from_secs(120))
        .start_delay(Duration::ZERO)
}

/// Three nodes, every pair connected.
async fn three() -> [Node; 3] {
    let nodes = connected(["n1", "n2", "n3"].map(config), BOUND).await;
    nodes.try_into().unwrap_or_else(|_| panic!("three nodes"))
}

/// A transaction of `node` (without an actor: the fast path needs none for grants at once).
fn agent(node: &Node) -> Presence {
    node.begin_agent()
}

fn grant(node: &Node, agent: &Presence, lock: &LockId, mode: Mode) {
    let got = node
        .local_table()
        .fast_lock(agent, lock, mode, &Touched::default());
    assert!(matches!(got, FastLock::Granted { .. }), "{got:?}");
}

fn query(timeout: Duration, max_locks_per_node: usize) -> ClusterQuery {
    ClusterQuery {
        timeout,
        max_locks_per_node,
    }
}

#[tokio::test]
async fn one_view_holds_every_connected_table_truncated_to_the_bound() {
    init_tracing();
    let [n1, n2, n3] = three().await;
    let t1 = agent(&n1);
    for i in 0..30 {
        grant(&n1, &t1, &lock_id!["k", i], Mode::S);
    }
    let t2 = agent(&n2);
    grant(&n2, &t2, &lock_id!["y"], Mode::X);

    let view = within(BOUND, "view", n3.cluster_view(query(BOUND, 5)))
        .await
        .unwrap();
    let names: Vec<&str> = view.nodes.keys().map(|n| n.as_str()).collect();
    assert_eq!(names, ["n1", "n2", "n3"]);
    assert!(view.missing.is_empty());
    let t = &view.nodes[&id("n1")];
    // 30 locks and their parent ["k"]; the first five by id.
    assert_eq!((t.total_locks, t.locks.len()), (31, 5));
    assert_eq!(t.locks[0].lock, lock_id!["k"]);
    assert_eq!(view.truncated(), [&id("n1")]);
    let t = &view.nodes[&id("n2")];
    assert_eq!((t.total_locks, t.locks.len()), (1, 1));
    assert!(t.locks[0].view.holds(t2.id()));
    assert!(view.nodes[&id("n3")].locks.is_empty());

    let whole = within(BOUND, "view", n3.cluster_view(query(BOUND, 1000)))
        .await
        .unwrap();
    assert!(whole.truncated().is_empty());
    assert_eq!(whole.nodes[&id("n1")].locks.len(), 31);
    // Nothing is kept once the view is returned.
    assert_eq!(n3.router().introspections_waiting(), 0);
}

#[tokio::test]
async fn a_peer_that_does_not_answer_in_time_is_listed_missing() {
    init_tracing();
    let [n1, n2, n3] = three().await;
    // Hold n2's thread: its links read nothing until released (the heartbeat timeout is far
    // longer than this test, so nobody declares it down meanwhile).
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (blocked_tx, blocked) = futures::channel::oneshot::channel::<()>();
    let hold = n2.spawn(async move {
        let _ = blocked_tx.send(());
        // Blocks the node's thread on purpose; ends when `release` sends or is dropped.
        let _ = held.recv();
    });
    within(BOUND, "n2 held", blocked).await.unwrap();

    let view = within(
        BOUND,
        "view",
        n3.cluster_view(query(Duration::from_millis(300), 100)),
    )
    .await
    .unwrap();
    assert_eq!(view.missing, [id("n2")]);
    let names: Vec<&str> = view.nodes.keys().map(|n| n.as_str()).collect();
    assert_eq!(names, ["n1", "n3"]);
    assert_eq!(n3.router().introspections_waiting(), 0);

    drop(release);
    within(BOUND, "n2 released", hold).await.unwrap();
    // n2 then answers the old question too: that late answer is dropped, and n2 answers the
    // next one.
    let n3b = n3.clone();
    poll(
        BOUND,
        "n2 answers again",
        Duration::from_millis(10),
        move || {
            let n3 = n3b.clone();
            async move {
                let view = n3
                    .cluster_view(query(Duration::from_secs(2), 100))
                    .await
                    .unwrap();
                if view.missing.is_empty() && view.nodes.len() == 3 {
                    Ok(())
                } else {
                    Err(view.missing)
                }
            }
        },
    )
    .await;
    assert_eq!(n3.router().introspections_waiting(), 0);
    drop(n1);
}

/// A router for node "a" with its table and a recording link to "b": what "a" answers "b".
fn answering_router(max_frame: usize) -> (Arc<Router>, Arc<LocalTable>, Arc<Captured>) {
    let router = Arc::new(Router::new(id("a")));
    let table = Arc::new(LocalTable::new(
        router.clone(),
        || LockTable::new(id("a"), ModeTable::default(), 0),
        false,
    ));
    router.set_table(Arc::downgrade(&table), max_frame);
    let link = Arc::new(Captured::default());
    router.add_remote(id("b"), link.clone());
    (router, table, link)
}

fn ask(router: &Router, id_: u64, max_locks: u32, max_bytes: u32) {
    let request = IntrospectRequest {
        id: id_,
        max_locks,
        max_bytes,
    };
    router
        .deliver_from(&id("b"), Envelope::new(Message::Introspect(request)))
        .unwrap();
}

fn answers(link: &Captured) -> Vec<TableReport> {
    link.0
        .lock()
        .unwrap()
        .iter()
        .map(|e| match &e.message {
            Message::TableReport(r) => r.clone(),
            other => panic!("not an answer: {other:?}"),
        })
        .collect()
}

#[test]
fn a_flood_of_questions_gets_a_burst_of_answers() {
    let (router, _table, link) = answering_router(4 << 20);
    for i in 0..1000 {
        ask(&router, i, 10, 4 << 20);
    }
    let got = answers(&link);
    assert_eq!(got.len(), ANSWER_BURST as usize);
    let ids: Vec<u64> = got.iter().map(|r| r.id).collect();
    assert_eq!(ids, (0..u64::from(ANSWER_BURST)).collect::<Vec<_>>());
}

#[test]
fn answers_nobody_asked_for_are_dropped() {
    let (router, _table, link) = answering_router(4 << 20);
    let stray = TableReport {
        id: 42,
        node: id("b"),
        version: 1,
        total_locks: 0,
        locks: vec![],
    };
    assert_eq!(
        router.deliver_from(&id("b"), Envelope::new(Message::TableReport(stray.clone()))),
        Ok(())
    );
    // Without a sender (the trusting path) both kinds are dropped too.
    assert_eq!(
        router.deliver_incoming(Envelope::new(Message::TableReport(stray))),
        Ok(())
    );
    assert!(link.0.lock().unwrap().is_empty());
    assert_eq!(router.introspections_waiting(), 0);
}
