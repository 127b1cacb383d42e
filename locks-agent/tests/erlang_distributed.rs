//! The distributed scenarios of the Erlang test suite (tests 15-20) and cross-node deadlocks, on in-process nodes connected over TCP on 127.0.0.1
//! (ephemeral ports). Blocking is checked on the lock servers' tables, never with timing; every
//! wait is bounded.

mod common;

use common::{BOUND, COOKIE, Harness, bounded, cluster, names_node};
use locks_agent::{Error, Options, Req, RequestError, begin_transaction};
use locks_core::proto::EntryState;
use locks_core::{LockId, Mode, NodeId, lock_id};
use locks_server::NodeEvent;
use locks_server::{Node, NodeConfig};
use std::time::Duration;

fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn l(name: &str) -> LockId {
    lock_id![name]
}

#[tokio::test]
async fn erlang_d_simple_lock_all() {
    let hs = cluster(&["a", "b", "c"]).await;
    let c1 = hs[0].client().await;
    let nodes = [n("a"), n("b"), n("c")];
    let deadlocks = bounded(c1.txn().lock_on(l("A"), Mode::WRITE, &nodes, Req::All))
        .await
        .unwrap();
    assert!(deadlocks.deadlocks.is_empty());
    // Held on every node, each server shows it, and the result carries each node's fencing
    // version: the version at which that server granted it.
    let result = c1.await_all_locks().await;
    assert_eq!(result.locks.len(), 1);
    let granted = &result.locks[0];
    assert_eq!((&granted.lock, granted.mode), (&l("A"), Mode::WRITE));
    let listed: Vec<&NodeId> = granted.nodes.iter().map(|(node, _)| node).collect();
    assert_eq!(listed, [&n("a"), &n("b"), &n("c")]);
    for (h, (node, version)) in hs.iter().zip(&granted.nodes) {
        h.wait_granted(&c1.id(), &l("A")).await;
        let snap = h.node.snapshot().await.unwrap();
        let entry = snap.lock(&l("A")).unwrap().entry(&c1.id()).unwrap();
        assert_eq!(entry.version, *version, "the fencing version of {node}");
    }
}

#[tokio::test]
async fn erlang_d_simple_lock_majority() {
    let hs = cluster(&["a", "b", "c"]).await;
    let c1 = hs[0].client().await;
    // "nonexistent" never connects: 2 of 3 listed nodes grant it, which is a majority.
    let nodes = [n("nonexistent"), n("b"), n("c")];
    let deadlocks = bounded(c1.txn().lock_on(l("A"), Mode::WRITE, &nodes, Req::Majority))
        .await
        .unwrap();
    assert!(deadlocks.deadlocks.is_empty());
    hs[1].wait_granted(&c1.id(), &l("A")).await;
    hs[2].wait_granted(&c1.id(), &l("A")).await;
}

#[tokio::test]
async fn erlang_d_simple_lock_any() {
    let hs = cluster(&["a", "b"]).await;
    let c1 = hs[0].client().await;
    let nodes = [n("nonexistent"), n("b")];
    let deadlocks = bounded(c1.txn().lock_on(l("A"), Mode::WRITE, &nodes, Req::Any))
        .await
        .unwrap();
    assert!(deadlocks.deadlocks.is_empty());
    hs[1].wait_granted(&c1.id(), &l("A")).await;
}

#[tokio::test]
async fn erlang_d_simple_read_lock() {
    let hs = cluster(&["a", "b", "c"]).await;
    // Client 1 runs on b, client 2 on c; both read-lock A on b and c.
    let c1 = hs[1].client().await;
    let c2 = hs[2].client().await;
    let nodes = [n("b"), n("c")];
    let r1 = bounded(c1.txn().lock_on(l("A"), Mode::READ, &nodes, Req::All)).await;
    let r2 = bounded(c2.txn().lock_on(l("A"), Mode::READ, &nodes, Req::All)).await;
    assert!(r1.unwrap().deadlocks.is_empty());
    assert!(r2.unwrap().deadlocks.is_empty());
    // Shared: both hold it on both nodes at once.
    for h in &hs[1..] {
        let snap = h.node.snapshot().await.unwrap();
        assert_eq!(snap.state(&c1.id(), &l("A")), EntryState::Granted(Mode::S));
        assert_eq!(snap.state(&c2.id(), &l("A")), EntryState::Granted(Mode::S));
    }
}

/// 9.3 item 19, with expectations that make sense: two clients on two nodes want the same two
/// locks on all three nodes, in opposite orders. The deadlock spans the multi-node locks; the
/// larger agent surrenders its copies of the lock that closes the cycle, the other completes,
/// and once it ends the surrendered lock is granted again. Both report the deadlock.
#[tokio::test]
async fn erlang_d_lock_surrender() {
    let hs = cluster(&["a", "b", "c"]).await;
    let all = [n("a"), n("b"), n("c")];
    let mut c1 = hs[0].client().await;
    let mut c2 = hs[1].client().await;
    let (x, y) = (l("X"), l("Y"));
    assert!(
        bounded(c1.txn().lock_on(x.clone(), Mode::WRITE, &all, Req::All))
            .await
            .unwrap()
            .deadlocks
            .is_empty()
    );
    assert!(
        bounded(c2.txn().lock_on(y.clone(), Mode::WRITE, &all, Req::All))
            .await
            .unwrap()
            .deadlocks
            .is_empty()
    );
    let (ya, xa) = (y.clone(), x.clone());
    let p1 = c1.call(move |t| async move {
        let nodes = [n("a"), n("b"), n("c")];
        t.lock_on(ya, Mode::WRITE, &nodes, Req::All)
            .await
            .map(|l| l.deadlock_locks())
    });
    let p2 = c2.call(move |t| async move {
        let nodes = [n("a"), n("b"), n("c")];
        t.lock_on(xa, Mode::WRITE, &nodes, Req::All)
            .await
            .map(|l| l.deadlock_locks())
    });
    // Agent 2 (the larger id) surrenders Y; agent 1 gets everything.
    let r1 = p1.result().await.unwrap();
    assert_eq!(r1, std::slice::from_ref(&y), "client 1 saw Y surrendered");
    for h in &hs {
        h.wait_granted(&c1.id(), &y).await;
    }
    c1.kill();
    let r2 = p2.result().await.unwrap();
    assert_eq!(
        r2,
        std::slice::from_ref(&y),
        "client 2 reports the lock it surrendered"
    );
    for h in &hs {
        h.wait_granted(&c2.id(), &x).await;
        h.wait_granted(&c2.id(), &y).await;
    }
}

/// 9.3 item 20 without `await_nodes`: a node that serves a client's lock dies. The client is
/// told its requests on that node cannot be served (an error naming the node), and a new
/// request naming the dead node fails at once.
#[tokio::test]
async fn erlang_d_lock_node_dies() {
    common::a_node_dies_under_a_lock(cluster(&["a", "b", "c"]).await).await;
}

/// 9.3 item 20 with `await_nodes`: the client waits for the dead node and is granted once a
/// node of that name is back; the new incarnation's fencing versions are larger.
#[tokio::test]
async fn erlang_d_lock_node_dies_await_nodes() {
    let mut hs = cluster(&["a", "b", "c"]).await;
    let all = [n("a"), n("b"), n("c")];
    let c_addr = hs[2].node.local_addr().unwrap();
    let txn = begin_transaction(
        &hs[0].node,
        Options {
            await_nodes: true,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    bounded(txn.lock_on(l("A"), Mode::WRITE, &all, Req::All))
        .await
        .unwrap();
    let before = bounded(txn.await_all_locks()).await.unwrap();
    let old_on_c = version_on(&before, &l("A"), "c");
    let c = hs.pop().unwrap();
    let mut events = hs[0].node.subscribe_nodes();
    bounded(c.node.shutdown()).await;
    bounded(async { while events.recv().await != Some(NodeEvent::Down(n("c"))) {} }).await;
    // B on all three nodes waits for c instead of failing.
    let txn = std::sync::Arc::new(txn);
    let t = txn.clone();
    let pending = tokio::spawn(async move {
        let all = [n("a"), n("b"), n("c")];
        t.lock_on(l("B"), Mode::WRITE, &all, Req::All)
            .await
            .map(|l| l.deadlock_locks())
    });
    hs[0].wait_granted(txn.id(), &l("B")).await;
    hs[1].wait_granted(txn.id(), &l("B")).await;
    assert!(!pending.is_finished(), "it waits for c");
    // c comes back (a new incarnation on the same address; a dials it again).
    let c2 = bounded(Node::start(
        NodeConfig::new("c").listen(c_addr).cookie(COOKIE),
    ))
    .await
    .unwrap();
    bounded(hs[0].node.connect(c_addr)).await.unwrap();
    bounded(hs[1].node.connect(c_addr)).await.unwrap();
    let result = tokio::time::timeout(BOUND, pending)
        .await
        .expect("granted once c is back")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
    let h = Harness { node: c2 };
    h.wait_granted(txn.id(), &l("A")).await;
    h.wait_granted(txn.id(), &l("B")).await;
    // The new incarnation of c granted A again, at a larger fencing version.
    let after = bounded(txn.await_all_locks()).await.unwrap();
    assert!(version_on(&after, &l("A"), "c") > old_on_c);
}

/// The fencing version `node` granted `lock` at, in a lock result.
fn version_on(result: &locks_agent::LockResult, lock: &LockId, node: &str) -> u64 {
    result
        .locks
        .iter()
        .find(|g| &g.lock == lock)
        .and_then(|g| g.nodes.iter().find(|(n, _)| n.as_str() == node))
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("{lock} is not held on {node}: {result:?}"))
}

/// Whether a failed request names `node` as one it cannot be served by.

#[tokio::test]
async fn a_request_to_a_node_known_to_be_down_fails_at_once() {
    let hs = cluster(&["a", "b"]).await;
    let c1 = hs[0].client().await;
    let listed = [n("a"), n("gone")];
    let err = bounded(c1.txn().lock_on(l("A"), Mode::WRITE, &listed, Req::All))
        .await
        .unwrap_err();
    assert!(names_node(&err, "gone"), "names the node: {err:?}");
    assert!(
        matches!(&err, locks_agent::Error::CannotServe { unknown, .. } if unknown == &[n("gone")]),
        "a node never connected is unknown, not down: {err}"
    );
    // Now the agent knows "gone" is down: a second request fails before anything is sent.
    let err = bounded(
        c1.txn()
            .lock_on(l("B"), Mode::WRITE, &[n("gone")], Req::Any),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, Error::Request(RequestError::NodesDown { nodes, .. }) if nodes == &[n("gone")]),
        "{err:?}"
    );
    // A requirement that the live nodes can still meet goes on (in another transaction: the
    // first one cannot serve its request on A, so it will never have all its locks).
    let c2 = hs[0].client().await;
    let majority = [n("a"), n("b"), n("gone")];
    let ok = bounded(
        c2.txn()
            .lock_on(l("C"), Mode::WRITE, &majority, Req::Majority),
    )
    .await;
    assert!(ok.is_ok(), "{ok:?}");
}

/// Two agents on two nodes, each holding a lock on its own node and wanting the other's: the
/// cycle runs through both nodes and is found by the agents forwarding what they know to each
/// other across the connection.
#[tokio::test]
async fn cross_node_deadlock_of_two_agents_resolves() {
    let hs = cluster(&["a", "b"]).await;
    let mut c1 = hs[0].client().await;
    let mut c2 = hs[1].client().await;
    let (la, lb) = (l("on-a"), l("on-b"));
    bounded(
        c1.txn()
            .lock_on(la.clone(), Mode::WRITE, &[n("a")], Req::All),
    )
    .await
    .unwrap();
    bounded(
        c2.txn()
            .lock_on(lb.clone(), Mode::WRITE, &[n("b")], Req::All),
    )
    .await
    .unwrap();
    let lb2 = lb.clone();
    let p1 = c1.call(move |t| async move {
        t.lock_on(lb2, Mode::WRITE, &[n("b")], Req::All)
            .await
            .map(|l| l.deadlock_locks())
    });
    hs[1].wait_blocked(&c1.id(), &lb).await;
    let la2 = la.clone();
    let p2 = c2.call(move |t| async move {
        t.lock_on(la2, Mode::WRITE, &[n("a")], Req::All)
            .await
            .map(|l| l.deadlock_locks())
    });
    let r1 = p1.result().await.unwrap();
    assert!(!r1.is_empty(), "client 1 got both after the deadlock");
    c1.kill();
    let r2 = p2.result().await.unwrap();
    // Agent 2 (on b, the larger id) surrendered its lock on b; both report it.
    assert_eq!(r1, std::slice::from_ref(&lb));
    assert_eq!(r2, [lb]);
}

/// Three agents on three nodes, each holding the lock of its own node and wanting the next
/// node's: a cycle through all three nodes.
#[tokio::test]
async fn cross_node_deadlock_of_three_agents_on_three_nodes_resolves() {
    let hs = cluster(&["a", "b", "c"]).await;
    let names = ["a", "b", "c"];
    let mut clients = Vec::new();
    for (i, h) in hs.iter().enumerate() {
        let c = h.client().await;
        bounded(
            c.txn()
                .lock_on(l(names[i]), Mode::WRITE, &[n(names[i])], Req::All),
        )
        .await
        .unwrap();
        clients.push(c);
    }
    let mut pending = Vec::new();
    for (i, c) in clients.iter_mut().enumerate() {
        let next = names[(i + 1) % 3];
        pending.push(c.call(move |t| async move {
            t.lock_on(l(next), Mode::WRITE, &[n(next)], Req::All)
                .await
                .map(|l| l.deadlock_locks())
        }));
    }
    // Whoever completes first is not the victim; kill clients as they complete until all have.
    let mut results = Vec::new();
    let mut clients: Vec<Option<common::Client>> = clients.into_iter().map(Some).collect();
    let mut pending: Vec<Option<common::Pending<_>>> = pending.into_iter().map(Some).collect();
    for _ in 0..3 {
        let done = bounded(async {
            loop {
                if let Some(i) = pending
                    .iter()
                    .position(|p| p.as_ref().is_some_and(|p| p.is_finished()))
                {
                    return i;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
        let result = pending[done].take().unwrap().result().await;
        results.push(result.expect("granted"));
        clients[done].take().unwrap().kill();
    }
    assert!(
        results.iter().any(|r| !r.is_empty()),
        "the deadlock was reported: {results:?}"
    );
}

/// Refused handshakes (wrong cookie, a second node claiming a connected name) next to a running
/// cluster: the locks held across it stay held, and the cluster keeps granting.
#[tokio::test]
async fn refused_handshakes_lose_nothing_the_cluster_holds() {
    let hs = cluster(&["a", "b"]).await;
    let both = [n("a"), n("b")];
    let c1 = hs[0].client().await;
    bounded(c1.txn().lock_on(l("held"), Mode::WRITE, &both, Req::All))
        .await
        .unwrap();
    let b_addr = hs[1].node.local_addr().unwrap();
    let intruder = bounded(Node::start(NodeConfig::new("x").cookie("not-the-cookie")))
        .await
        .unwrap();
    assert!(bounded(intruder.connect(b_addr)).await.is_err());
    let twin = bounded(Node::start(NodeConfig::new("a").cookie(COOKIE)))
        .await
        .unwrap();
    assert!(bounded(twin.connect(b_addr)).await.is_err());

    assert!(c1.txn().status().await.unwrap().have_all_locks());
    for h in &hs {
        h.wait_granted(&c1.id(), &l("held")).await;
    }
    let mut c2 = hs[1].client().await;
    let p2 = c2.call(|t| async move {
        let both = [n("a"), n("b")];
        t.lock_on(l("held"), Mode::WRITE, &both, Req::All)
            .await
            .map(|l| l.deadlock_locks())
    });
    // Queued on the first node (its gate: it leaves its place on the other until it holds
    // that one).
    hs[0].wait_blocked(&c2.id(), &l("held")).await;
    c1.kill();
    assert!(p2.result().await.is_ok());
}
