//! No request stalls a node: reads of a large table through the API (`Table`, `Graph`), a
//! peer's question about it and a snapshot keep the node's thread free enough that its
//! heartbeats are answered, so a peer watching it with a short heartbeat timeout never
//! declares it down and no lock held through it is lost.
//!
//! Node `a` holds a table of [`LOCKS`] locks (16 transactions, as 16 sessions would); node `b`
//! watches it with a one-second heartbeat timeout (its lease on `a`: three quarters of that).
//! Reading the first 10 000 of those locks at once takes the node's thread for longer than
//! that in a debug build; taken a slice at a time, it does not. Every wait is bounded by
//! `BOUND`; nothing asserts a duration.

use futures::FutureExt;
use locks_agent::{Options, Req, Transaction, begin_transaction};
use locks_core::{Mode, lock_id};
use locks_grpc::client::{Client, ClientOptions};
use locks_grpc::{GrpcConfig, pb, serve};
use locks_server::{ClusterQuery, NodeConfig, NodeEvent};
use locks_testing::wait::within;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(60);

/// Locks of `a`'s table: as large as a debug build fills in a few seconds.
const LOCKS: usize = 256 * 1024;

/// The transactions holding them.
const HOLDERS: usize = 16;

fn config(name: &str) -> NodeConfig {
    NodeConfig::new(name)
        .listen("127.0.0.1:0".parse().unwrap())
        .cookie("no-stall")
        .heartbeat(Duration::from_millis(100), Duration::from_secs(1))
        .start_delay(Duration::ZERO)
}

/// Every event the subscription has ready; none may be a node going down.
fn no_down(events: &mut locks_server::NodeEvents, who: &str) {
    while let Some(event) = events.try_recv() {
        assert!(
            matches!(event, NodeEvent::Up(_)),
            "{who} saw {event:?}: a busy node was declared down"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_a_large_table_do_not_make_its_node_look_down() {
    let nodes = locks_testing::cluster::connected([config("a"), config("b")], BOUND).await;
    let (a, b) = (nodes[0].clone(), nodes[1].clone());
    let mut b_sees = b.subscribe_nodes();
    let mut a_sees = a.subscribe_nodes();
    let server = serve(&a, GrpcConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();

    // Locks held through `a`: one of its transactions holds a lock on `b`, one of `b`'s on `a`.
    let on_b = begin_transaction(&a, Options::default()).await.unwrap();
    let nodes_b = [b.id().clone()];
    within(
        BOUND,
        "a lock on b",
        on_b.lock_on(lock_id!["held", "on b"], Mode::X, &nodes_b, Req::All),
    )
    .await
    .unwrap();
    let on_a = begin_transaction(&b, Options::default()).await.unwrap();
    let nodes_a = [a.id().clone()];
    within(
        BOUND,
        "a lock on a",
        on_a.lock_on(lock_id!["held", "on a"], Mode::X, &nodes_a, Req::All),
    )
    .await
    .unwrap();
    // Asked now (the first poll sends the question), answered only if a lock is lost.
    let mut lost = [&on_b, &on_a].map(|t| Box::pin(Transaction::lost(t)));
    for lost in &mut lost {
        assert!(lost.as_mut().now_or_never().is_none());
    }

    let holders = within(BOUND, "a's table filled", async {
        let mut holders = Vec::new();
        for h in 0..HOLDERS {
            let txn = begin_transaction(&a, Options::default()).await.unwrap();
            let root = format!("s{h:02}");
            for k in 0..(LOCKS / HOLDERS) as i64 {
                txn.lock_nowait(lock_id![root.as_str(), k], Mode::X)
                    .await
                    .unwrap();
            }
            holders.push(txn);
        }
        holders
    })
    .await;
    // One more waits behind the first holder: an edge of the graph.
    let waiter = begin_transaction(&a, Options::default()).await.unwrap();
    waiter
        .lock_nowait(lock_id!["s00", 0], Mode::X)
        .await
        .unwrap();

    let mut client = within(
        BOUND,
        "client",
        Client::connect(&server.local_addr().to_string(), ClientOptions::default()),
    )
    .await
    .unwrap();
    let request = pb::TableRequest {
        max_locks_per_node: 10_000,
        timeout_ms: 10_000,
    };
    let table = within(BOUND, "Table", client.table(request)).await.unwrap();
    no_down(&mut b_sees, "b");
    assert!(table.missing.is_empty(), "{:?}", table.missing);
    let of_a = table.nodes.iter().find(|n| n.node == "a").unwrap();
    assert_eq!(of_a.locks.len(), 10_000);
    // Each holder's locks and its root, the waiter's entry on a lock that exists already, and
    // the lock `b`'s transaction holds with its root.
    assert_eq!(of_a.total_locks as usize, LOCKS + HOLDERS + 2);

    let graph = within(
        BOUND,
        "Graph",
        client.graph(pb::GraphRequest { timeout_ms: 10_000 }),
    )
    .await
    .unwrap();
    let waiter_id = waiter.id().to_string();
    assert!(
        graph
            .edges
            .iter()
            .any(|e| e.waiter == waiter_id && e.node == "a"),
        "{:?}",
        graph.edges
    );

    // `b` asks `a` for its table: `a` answers a peer from the same large table.
    let query = ClusterQuery {
        timeout: Duration::from_secs(10),
        max_locks_per_node: 10_000,
    };
    let view = within(BOUND, "b's view", b.cluster_view(query))
        .await
        .unwrap();
    assert!(view.missing.is_empty(), "{:?}", view.missing);
    assert_eq!(view.nodes[a.id()].locks.len(), 10_000);
    let snapshot = within(BOUND, "snapshot", a.snapshot()).await.unwrap();
    no_down(&mut b_sees, "b");
    assert_eq!(snapshot.locks.len(), LOCKS + HOLDERS + 2);

    // Nobody was declared down, and the locks held through `a` are still held: each
    // transaction's status is read by its agent after whatever it was told before.
    for txn in [&on_b, &on_a] {
        let status = within(BOUND, "status", txn.status()).await.unwrap();
        assert!(status.have_all_locks(), "{status:?}");
    }
    for lost in &mut lost {
        assert!(
            lost.as_mut().now_or_never().is_none(),
            "a lock held through a was lost"
        );
    }
    no_down(&mut b_sees, "b");
    no_down(&mut a_sees, "a");
    assert_eq!(b.nodes(), [a.id().clone(), b.id().clone()]);

    drop(lost);
    for txn in holders.into_iter().chain([waiter, on_b, on_a]) {
        within(BOUND, "end", txn.end()).await.unwrap();
    }
    drop(client);
    server.stop().await;
    b.shutdown().await;
    a.shutdown().await;
}
