//! The end of a transaction of many locks on the node's own thread (a gRPC session served
//! there ends) is not one long operation of the thread: a part of its locks is released at
//! once, the rest over the next turns of the thread, a part at a time; every lock is released
//! in the end, and the transactions waiting for them are granted.

use locks_agent::{Options, begin_transaction};
use locks_core::{LockId, Mode};
use locks_server::embed::NodeInternals;
use locks_server::{Node, NodeConfig};
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(30);

/// Locks under one root key: all in one shard of the node's table.
const LOCKS: usize = 3_000;

fn id(k: usize) -> LockId {
    LockId::new(vec!["big".to_owned(), format!("{k:06}")]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_end_on_the_nodes_thread_is_paced_and_releases_everything() {
    let node = Node::start(NodeConfig::new("big")).await.unwrap();
    let on = node.clone();
    let (held_at_end, waiter_granted, held_later) = node
        .spawn(async move {
            let big = begin_transaction(&on, Options::default()).await.unwrap();
            for k in 0..LOCKS {
                big.lock(id(k), Mode::X).await.unwrap();
            }
            let waiter = begin_transaction(&on, Options::default()).await.unwrap();
            let wanted = [0, LOCKS / 2, LOCKS - 1];
            for k in wanted {
                waiter.lock_nowait(id(k), Mode::X).await.unwrap();
            }
            let (agent, table) = (big.id().clone(), on.local_table().clone());
            // The end as a dropped handle: nothing awaited, so nothing else on this thread runs
            // before the count below.
            drop(big);
            let held = |k: &usize| table.holds(&agent, &id(*k)).is_some();
            let held_at_end = (0..LOCKS).filter(held).count();
            // The waiter is granted every lock it asked for.
            let granted = tokio::time::timeout(BOUND, waiter.await_all_locks()).await;
            let waiter_granted = matches!(granted, Ok(Ok(_)))
                && wanted
                    .iter()
                    .all(|k| table.holds(waiter.id(), &id(*k)).is_some());
            // And the ended transaction is left with nothing.
            let left = tokio::time::timeout(BOUND, async {
                loop {
                    let left = (0..LOCKS).filter(held).count();
                    if left == 0 {
                        return left;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .unwrap_or_else(|_| (0..LOCKS).filter(held).count());
            (held_at_end, waiter_granted, left)
        })
        .await
        .unwrap();
    // A part was released at once, not the whole: the rest waits for the thread's next turns.
    assert!(
        held_at_end > 0 && held_at_end < LOCKS,
        "held right after the end: {held_at_end} of {LOCKS}"
    );
    assert!(waiter_granted, "the waiter was not granted its locks");
    assert_eq!(held_later, 0, "locks of the ended transaction left");
    node.shutdown().await;
}
