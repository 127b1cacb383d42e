//! What the errors of a lock call say about the nodes it needed: a node this node was never
//! connected to is unknown (a misspelt name), one it was connected to is down.

mod common;

use common::{bounded, config, wait_connected};
use locks_agent::{Error, Options, Req, begin_transaction};
use locks_core::{Mode, NodeId, lock_id};
use locks_server::Node;

fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

#[tokio::test]
async fn a_node_never_heard_of_is_reported_unknown_not_down() {
    let a = bounded(Node::start(config("da"))).await.unwrap();
    let b = bounded(Node::start(config("db"))).await.unwrap();
    bounded(a.connect(b.local_addr().unwrap())).await.unwrap();
    wait_connected(&a, &["da", "db"]).await;
    bounded(b.shutdown()).await;
    wait_connected(&a, &["da"]).await;
    let txn = begin_transaction(&a, Options::default()).await.unwrap();
    let l = lock_id!["s7"];
    let err = bounded(txn.lock_on(l.clone(), Mode::X, &[n("db"), n("zz")], Req::All))
        .await
        .unwrap_err();
    let shown = err.to_string();
    assert!(!shown.contains('"'), "{shown}");
    assert!(
        shown.contains("zz is unknown to this node"),
        "the misspelt node is unknown: {shown}"
    );
    assert!(
        !shown.contains("db is unknown"),
        "db was connected: {shown}"
    );
    match err {
        Error::CannotServe { nodes, unknown, .. } => {
            assert_eq!(unknown, vec![n("zz")]);
            assert!(!nodes.contains(&n("zz")), "{nodes:?}");
        }
        Error::Request(e) => panic!("refused up front, not as unknown: {e}"),
        other => panic!("{other}"),
    }
    bounded(a.shutdown()).await;
}
