//! The grants a client is told of and the losses it hears about: `lock` returns the grant with
//! its fencing version, `events()` pushes grants and losses, `lost()` resolves when a claimed
//! lock is gone (node down, lease expired, surrendered, aborted), and a lock granted again is a
//! new grant with a new version. Every wait is bounded.

mod common;

use common::{BOUND, Harness, bounded, config, wait_connected};
use locks_agent::{
    LockState, LossCause, Options, Req, TransactionEvent, TransactionEvents, begin_transaction,
};
use locks_core::{LockId, Mode, NodeId, lock_id};
use locks_server::Node;
use locks_server::embed::NodeInternals;
use locks_testing::wait::poll;
use std::time::Duration;

fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

/// The next grant or loss of `lock` on the stream (status changes are skipped).
async fn next_about(events: &mut TransactionEvents, lock: &LockId) -> TransactionEvent {
    bounded(async {
        loop {
            match events.recv().await.expect("the transaction runs") {
                TransactionEvent::Granted(g) if &g.lock == lock => {
                    return TransactionEvent::Granted(g);
                }
                TransactionEvent::Lost(l) if &l.lock == lock => return TransactionEvent::Lost(l),
                _ => {}
            }
        }
    })
    .await
}

#[tokio::test]
async fn lock_returns_the_grant_and_the_stream_repeats_it() {
    let h = Harness::new("g").await;
    let txn = begin_transaction(&h.node, Options::default())
        .await
        .unwrap();
    let mut events = txn.events();
    let locked = bounded(txn.lock(lock_id!["a", "b"], Mode::WRITE))
        .await
        .unwrap();
    assert_eq!(locked.granted.lock, lock_id!["a", "b"]);
    assert_eq!(locked.granted.mode, Mode::WRITE);
    let v = locked.version_on(h.node.id()).expect("granted here");
    assert!(v > 0);
    assert_eq!(
        next_about(&mut events, &lock_id!["a", "b"]).await,
        TransactionEvent::Granted(locked.granted.clone())
    );
    assert_eq!(
        bounded(txn.lock_state(lock_id!["a", "b"])).await.unwrap(),
        LockState::Held(locked.granted)
    );
    assert_eq!(
        bounded(txn.lock_state(lock_id!["other"])).await.unwrap(),
        LockState::NotRequested
    );
}

/// A deadlock's victim that was told it holds the lock it surrenders hears that it lost it,
/// then gets it back later as a new grant with a larger version.
#[tokio::test]
async fn a_surrendered_claimed_lock_is_reported_lost_then_granted_again() {
    let h = Harness::new("s").await;
    let first = begin_transaction(&h.node, Options::default())
        .await
        .unwrap();
    let second = begin_transaction(&h.node, Options::default())
        .await
        .unwrap();
    let (x, y) = (lock_id!["x"], lock_id!["y"]);
    bounded(first.lock(x.clone(), Mode::WRITE)).await.unwrap();
    let held_y = bounded(second.lock(y.clone(), Mode::WRITE)).await.unwrap();
    let mut events = second.events();
    // first waits for y, second for x: the larger agent (second) surrenders y.
    let first_y = first.lock(y.clone(), Mode::WRITE);
    let second_x = second.lock(x.clone(), Mode::WRITE);
    let lost = bounded(second.lost()).await.unwrap();
    assert_eq!(lost.lock, y);
    assert_eq!(lost.cause, LossCause::Surrendered);
    assert_eq!(lost.nodes, vec![h.node.id().clone()]);
    assert_eq!(
        next_about(&mut events, &y).await,
        TransactionEvent::Lost(lost.clone())
    );
    assert_eq!(
        bounded(second.lock_state(y.clone())).await.unwrap(),
        LockState::Lost(lost)
    );
    bounded(first_y).await.unwrap();
    first.end().await.unwrap();
    bounded(second_x).await.unwrap();
    let TransactionEvent::Granted(again) = next_about(&mut events, &y).await else {
        panic!("y granted again");
    };
    let node = h.node.id();
    assert!(
        again.nodes.iter().find(|(n, _)| n == node).unwrap().1 > held_y.version_on(node).unwrap()
    );
    assert!(matches!(
        bounded(second.lock_state(y)).await.unwrap(),
        LockState::Held(_)
    ));
}

#[tokio::test]
async fn an_abort_reports_every_claimed_lock_lost() {
    let h = Harness::new("ab").await;
    let first = begin_transaction(&h.node, Options::default())
        .await
        .unwrap();
    let aborting = Options {
        abort_on_deadlock: true,
        ..Options::default()
    };
    let second = begin_transaction(&h.node, aborting).await.unwrap();
    let (x, y) = (lock_id!["x"], lock_id!["y"]);
    bounded(first.lock(x.clone(), Mode::WRITE)).await.unwrap();
    bounded(second.lock(y.clone(), Mode::WRITE)).await.unwrap();
    let mut events = second.events();
    let _first_y = first.lock(y.clone(), Mode::WRITE);
    let second_x = second.lock(x.clone(), Mode::WRITE);
    assert!(bounded(second_x).await.is_err(), "second aborts");
    let TransactionEvent::Lost(lost) = next_about(&mut events, &y).await else {
        panic!("y lost");
    };
    assert_eq!(lost.cause, LossCause::Aborted);
}

/// A lock held on another node is lost when that node goes down, and the holder hears it
/// before the other node gives the lock to anybody: the lock-delay keeps it with nobody.
/// (The delay here is long, so that the order cannot depend on how fast the machine is.)
#[tokio::test]
async fn a_remote_holder_hears_of_the_loss_before_the_lock_is_given_away() {
    let delay = Duration::from_secs(8);
    let a = bounded(Node::start(
        config("a").lock_delay(delay).start_delay(Duration::ZERO),
    ))
    .await
    .unwrap();
    let b = bounded(Node::start(
        config("b").lock_delay(delay).start_delay(Duration::ZERO),
    ))
    .await
    .unwrap();
    bounded(a.connect(b.local_addr().unwrap())).await.unwrap();
    wait_connected(&a, &["a", "b"]).await;
    wait_connected(&b, &["a", "b"]).await;
    let l = lock_id!["shared"];
    let waiting_nodes = Options {
        await_nodes: true,
        ..Options::default()
    };
    let holder = begin_transaction(&a, waiting_nodes).await.unwrap();
    let mut events = holder.events();
    let first = bounded(holder.lock_on(l.clone(), Mode::WRITE, &[n("b")], Req::All))
        .await
        .unwrap();
    let first_v = first.version_on(&n("b")).unwrap();
    assert_eq!(
        next_about(&mut events, &l).await,
        TransactionEvent::Granted(first.granted.clone())
    );
    let other = begin_transaction(&b, Options::default()).await.unwrap();
    let other_lock = tokio::spawn(other.lock(l.clone(), Mode::WRITE));

    bounded(b.disconnect("a")).await.unwrap();
    let lost = bounded(holder.lost()).await.unwrap();
    assert_eq!(lost.lock, l);
    assert_eq!(lost.nodes, vec![n("b")]);
    assert_eq!(lost.cause, LossCause::NodeDown);
    assert_eq!(
        next_about(&mut events, &l).await,
        TransactionEvent::Lost(lost)
    );
    assert!(
        !other_lock.is_finished(),
        "the lock went to the other transaction before its holder was told"
    );
    // b keeps the lock with a ghost of the holder's agent until the delay has passed.
    let snap = bounded(b.snapshot()).await.unwrap();
    let entries = &snap.lock(&l).expect("the lock is still there").entries;
    assert!(
        entries
            .iter()
            .any(|e| e.agent.is_ghost() && e.state.held().is_some())
    );
    assert!(entries.iter().all(|e| e.agent != *holder.id()));

    let granted = bounded(other_lock).await.unwrap().unwrap();
    assert!(granted.version_on(&n("b")).unwrap() > first_v);
    // Back together: the holder asks again (await_nodes) and gets it once the other is done,
    // as a new grant with a larger version.
    bounded(b.reconnect("a")).await.unwrap();
    other.end().await.unwrap();
    let TransactionEvent::Granted(regrant) = next_about(&mut events, &l).await else {
        panic!("granted again");
    };
    assert!(regrant.nodes[0].1 > granted.version_on(&n("b")).unwrap());
}

/// `status()` consults the lease before it answers: a lease seen expired makes the lock lost
/// at once, whatever the link's own timer has noticed yet. The fault is a real one: the
/// holder's node is paused (its thread held, as a stopped process's would be) past its lease
/// on the lock's node, and the status call is made during the pause. When the node runs again
/// its agent answers the call before any news of the link, which could not be acted on during
/// the pause and comes into the agent's mailbox behind the call: only the lease can tell it.
#[tokio::test]
async fn status_consults_the_lease_first() {
    let a = bounded(Node::start(config("la").start_delay(Duration::ZERO)))
        .await
        .unwrap();
    let b = bounded(Node::start(config("lb").start_delay(Duration::ZERO)))
        .await
        .unwrap();
    bounded(a.connect(b.local_addr().unwrap())).await.unwrap();
    wait_connected(&a, &["la", "lb"]).await;
    let holder = begin_transaction(&a, Options::default()).await.unwrap();
    let l = lock_id!["leased"];
    bounded(holder.lock_on(l.clone(), Mode::WRITE, &[n("lb")], Req::All))
        .await
        .unwrap();
    assert!(bounded(holder.status()).await.unwrap().have_all_locks());
    // Pause a: hold its thread until `release` sends or is dropped.
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (paused_tx, paused) = futures::channel::oneshot::channel::<()>();
    let pause = a.spawn(async move {
        let _ = paused_tx.send(());
        // Blocks the node's thread on purpose.
        let _ = held.recv();
    });
    bounded(paused).await.unwrap();
    // The lease is read from this thread, by the clock: wait until it has run out.
    let port = a.router().clone();
    poll(
        BOUND,
        "a's lease on lb runs out",
        Duration::from_millis(10),
        || {
            let valid = port.lease_valid(&n("lb"));
            async move { if valid { Err("valid") } else { Ok(()) } }
        },
    )
    .await;
    // The call reaches the agent's mailbox during the pause (one poll sends it; the agent,
    // on the held thread, cannot answer yet).
    let mut status = Box::pin(holder.status());
    assert!(futures::poll!(&mut status).is_pending());
    drop(release);
    bounded(pause).await.unwrap();
    assert!(!bounded(status).await.unwrap().have_all_locks());
    let lost = bounded(holder.lost()).await.unwrap();
    assert_eq!(lost.cause, LossCause::LeaseExpired);
    assert!(matches!(
        bounded(holder.lock_state(l)).await.unwrap(),
        LockState::Lost(_)
    ));
}

/// A node that shuts down cleanly tells its peers to release its agents' locks before it
/// closes its connections: they are given to others at once, not after the lock-delay of a
/// crash (here ten minutes, so only the clean release can grant it within the bound).
#[tokio::test]
async fn a_clean_shutdown_releases_at_once() {
    clean_shutdown("c", false).await;
}

/// The same while the peer keeps sending to the node that leaves, round after round. A socket
/// closed with the peer's frames unread resets the connection; the peer's next write would
/// fail, and a link ending on that failure would leave the releases unread in its socket (the
/// peer would wait out the lock-delay). So the leaving node closes its side and reads what
/// still comes until the peer closes too, and a link whose write fails reads on to the end.
#[tokio::test]
async fn a_clean_shutdown_releases_at_once_while_the_peer_is_sending() {
    for round in 0..12 {
        clean_shutdown(&format!("s{round}"), true).await;
    }
}

/// The same when the shutdown is called from a task on the leaving node's own thread (it used
/// to stop at once there, like a crash, and the peer waited out the lock-delay).
#[tokio::test]
async fn a_clean_shutdown_from_the_nodes_own_thread_releases_at_once() {
    clean_shutdown_with("o", false, true).await;
}

async fn clean_shutdown(tag: &str, busy: bool) {
    clean_shutdown_with(tag, busy, false).await;
}

/// `a`'s transaction holds a lock on `b`, `b`'s transaction waits for it, `a` shuts down, and
/// `b`'s must get the lock within the bound (its lock-delay is ten minutes). With `busy`, a
/// client on `b` keeps queueing requests on `a`'s table meanwhile, so that frames for `a` are
/// on their way when it closes. With `own_thread`, `a.shutdown()` runs as a task of `a`'s
/// thread.
async fn clean_shutdown_with(tag: &str, busy: bool, own_thread: bool) {
    let long = Duration::from_secs(600);
    let (an, bn) = (format!("{tag}a"), format!("{tag}b"));
    let a = bounded(Node::start(config(&an).start_delay(Duration::ZERO)))
        .await
        .unwrap();
    let b = bounded(Node::start(
        config(&bn).lock_delay(long).start_delay(Duration::ZERO),
    ))
    .await
    .unwrap();
    bounded(a.connect(b.local_addr().unwrap())).await.unwrap();
    wait_connected(&a, &[&an, &bn]).await;
    wait_connected(&b, &[&an, &bn]).await;
    let l = lock_id!["handed-over"];
    let holder = begin_transaction(&a, Options::default()).await.unwrap();
    bounded(holder.lock_on(l.clone(), Mode::WRITE, &[n(&bn)], Req::All))
        .await
        .unwrap();
    let other = begin_transaction(&b, Options::default()).await.unwrap();
    let waiting = other.lock(l.clone(), Mode::WRITE);
    let (under_way, started) = tokio::sync::oneshot::channel();
    let sender = busy.then(|| {
        let (b, on_a) = (b.clone(), [n(&an)]);
        let mut under_way = Some(under_way);
        tokio::spawn(async move {
            // Ends when a is gone: the requests fail (or the transaction is refused).
            for i in 0u64.. {
                let Ok(txn) = begin_transaction(&b, Options::default()).await else {
                    return;
                };
                for k in 0..32 {
                    let id = lock_id!["busy", i, k];
                    if txn
                        .lock_nowait_on(id, Mode::READ, &on_a, Req::All)
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                if txn.await_all_locks().await.is_err() {
                    return;
                }
                if let Some(tx) = under_way.take() {
                    let _ = tx.send(());
                }
                let _ = txn.end().await;
            }
        })
    });
    if busy {
        // The sender is under way: a round of its locks was granted on a.
        bounded(started).await.unwrap();
    }
    if own_thread {
        let leaving = a.clone();
        // The spawned task's answer may be lost with the node's thread; the waiter below is
        // what shows the release.
        let _ = bounded(a.spawn(async move { leaving.shutdown().await })).await;
    } else {
        bounded(a.shutdown()).await;
    }
    bounded(waiting).await.unwrap();
    if own_thread {
        // From the test's thread, `shutdown` also waits for the node's thread to end, which
        // the check below needs.
        bounded(a.shutdown()).await;
    }
    // The holder's handle says the transaction is over.
    assert!(holder.status().await.is_err());
    if let Some(sender) = sender {
        bounded(sender).await.unwrap();
    }
    bounded(b.shutdown()).await;
}

/// A transaction whose lock was granted on the fast path (no agent yet) and that later waits is
/// a full participant: when it is the victim of a deadlock, the lock it surrenders is one the
/// client was told it holds, and the loss is reported.
#[tokio::test]
async fn a_fast_path_grant_surrendered_in_a_deadlock_is_reported_lost() {
    let h = Harness::new("fastlost").await;
    let (l1, l2) = (lock_id!["fast", 1], lock_id!["fast", 2]);
    let a = begin_transaction(&h.node, Options::default())
        .await
        .unwrap();
    let b = begin_transaction(&h.node, Options::default())
        .await
        .unwrap();
    assert!(a.id() < b.id(), "b is the larger, the victim");
    bounded(a.lock(l1.clone(), Mode::WRITE)).await.unwrap();
    let held = bounded(b.lock(l2.clone(), Mode::WRITE)).await.unwrap();
    let a_waits = a.lock(l2.clone(), Mode::WRITE);
    let b_waits = b.lock(l1.clone(), Mode::WRITE);
    let lost = bounded(b.lost()).await.unwrap();
    assert_eq!(
        (lost.lock.clone(), lost.cause),
        (l2.clone(), LossCause::Surrendered)
    );
    assert_eq!(lost.mode, held.granted.mode);
    // a gets l2 and ends; b gets both back.
    let got = bounded(a_waits).await.unwrap();
    let locks = |d: &[locks_agent::Deadlock]| d.iter().map(|d| d.lock.clone()).collect::<Vec<_>>();
    assert_eq!(locks(&got.deadlocks), vec![l2.clone()]);
    a.end().await.unwrap();
    let back = bounded(b_waits).await.unwrap();
    assert_eq!(locks(&back.deadlocks), vec![l2]);
}
