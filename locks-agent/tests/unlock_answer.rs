//! The answer to `unlock` of a lock held on other nodes goes to the caller before the agent's
//! `Unlock` messages to those nodes are handed to their links: a caller on the node's thread
//! (a gRPC session, say) answers its client before the node writes to the other nodes. The
//! messages follow at the agent's next turn.

use locks_agent::{Options, Req, begin_transaction};
use locks_core::proto::EntryState;
use locks_core::{Mode, lock_id};
use locks_server::NodeConfig;
use locks_testing::wait::within;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "current_thread")]
async fn an_unlock_is_answered_before_its_messages_to_the_other_nodes_go_out() {
    let loopback = "127.0.0.1:0".parse().unwrap();
    let configs = ["ua", "ub"].map(|n| {
        NodeConfig::new(n)
            .listen(loopback)
            .cookie("secret")
            .start_delay(Duration::ZERO)
    });
    let nodes = locks_testing::cluster::connected(configs, BOUND).await;
    let (a, b) = (nodes[0].clone(), nodes[1].clone());
    let lock = lock_id!["u", 1];
    let ids = [a.id().clone(), b.id().clone()];
    let (frozen_tx, frozen_rx) = std::sync::mpsc::channel();
    let (thaw_tx, thaw_rx) = std::sync::mpsc::channel::<()>();
    let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
    let on_a = a.clone();
    let l = lock.clone();
    let done = a.spawn(async move {
        let txn = begin_transaction(&on_a, Options::default()).await.unwrap();
        txn.lock_on(l.clone(), Mode::WRITE, &ids, Req::All)
            .await
            .unwrap();
        txn.unlock(l).await.unwrap();
        // Blocks the node's thread at the answer: nothing else runs on it until the test has
        // looked at b's table.
        frozen_tx.send(txn.id().clone()).unwrap();
        thaw_rx.recv().unwrap();
        end_rx.await.unwrap();
        txn.end().await.unwrap();
    });
    let agent = frozen_rx
        .recv_timeout(BOUND)
        .expect("the unlock is answered");
    // What a's thread wrote to b before the answer reaches b's table within this time; the
    // entry stays, as nothing was.
    for _ in 0..20 {
        let table = b.snapshot().await.unwrap();
        assert_ne!(
            table.state(&agent, &lock),
            EntryState::Absent,
            "the Unlock reached b before the unlock was answered"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    thaw_tx.send(()).unwrap();
    within(BOUND, "b releases the lock", async {
        while b.snapshot().await.unwrap().state(&agent, &lock) != EntryState::Absent {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    end_tx.send(()).unwrap();
    within(BOUND, "the transaction ends", done).await.unwrap();
}
