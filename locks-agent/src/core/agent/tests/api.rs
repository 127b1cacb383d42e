//! Core tests of the calls of the Erlang original's API beyond locking: changing the options,
//! watching locks and surrendering a lock to a waiter.

use super::*;

#[test]
fn switching_await_nodes_off_with_a_node_down_makes_the_transaction_unservable() {
    let opts = Options {
        await_nodes: true,
        ..Options::default()
    };
    let (n2, l) = (node("n2"), lock_id!["l"]);
    let mut c = core(1, opts.clone());
    c.request(l.clone(), X, &[n1(), n2.clone()], Req::All)
        .unwrap();
    hold(&mut c, &l, X, 2);
    c.node_down(&n2);
    c.settle();
    assert_eq!(c.status(), TransactionStatus::Waiting, "it waits for n2");
    let cannot = TransactionStatus::CannotServe {
        locks: vec![l.clone()],
        nodes: vec![n2.clone()],
    };
    let fx = c.set_options(Options::default());
    assert_eq!(fx, vec![Effect::StatusChanged(cannot)]);
    assert_eq!(c.options(), &Options::default());
    // Switched back on, it waits again.
    let fx = c.set_options(opts);
    assert_eq!(fx, vec![Effect::StatusChanged(TransactionStatus::Waiting)]);
}

#[test]
fn switching_options_with_nothing_at_stake_changes_no_status() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.request(l.clone(), X, &[n1()], Req::All).unwrap();
    hold(&mut c, &l, X, 2);
    let fx = c.set_options(Options {
        abort_on_deadlock: true,
        await_nodes: true,
    });
    assert!(fx.is_empty(), "{fx:?}");
    assert!(c.status().have_all_locks());
    assert!(c.options().abort_on_deadlock);
}
