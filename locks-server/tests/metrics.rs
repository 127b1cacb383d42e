//! What a node records through the `metrics` facade: a refused handshake is counted once, with
//! its reason, on the node that refused it; the peers-up gauge follows a connection. Each test
//! registers its nodes' handles with a recorder of its own (`locks_testing::recorded`); every
//! wait is bounded.

mod common;

use common::net::loopback;
use locks_server::metrics::{HANDSHAKES_REFUSED, PEERS_UP};
use locks_server::{Node, NodeConfig};
use locks_testing::recorded::Recorded;
use locks_testing::wait::{runtime, until, within};
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(20);

/// Starts a node with `config` on `rt`, its handles registered with `recorded`.
fn start(rt: &tokio::runtime::Runtime, recorded: &Recorded, config: NodeConfig) -> Node {
    recorded.scope(|| {
        rt.block_on(within(BOUND, "start", Node::start(config)))
            .unwrap()
    })
}

#[test]
fn a_refused_handshake_is_counted_with_its_reason_on_the_refusing_node() {
    let rt = runtime();
    let mut recorded = Recorded::new();
    let a = start(
        &rt,
        &recorded,
        NodeConfig::new("m-a").listen(loopback()).cookie("secret"),
    );
    let x = start(&rt, &recorded, NodeConfig::new("m-x").cookie("wrong"));
    let at = a.local_addr().expect("a listens");
    rt.block_on(async {
        let refused = within(BOUND, "wrong cookie", x.connect(at)).await;
        assert!(refused.is_err(), "{refused:?}");
        let mut refusals = a.handshake_refusals();
        within(
            BOUND,
            "a counts it",
            refusals.wait_for(|r| r.wrong_cookie == 1),
        )
        .await
        .unwrap();
    });
    let wrong_cookie = [("node", "m-a"), ("reason", "wrong_cookie")];
    rt.block_on(until(BOUND, "the metric follows", POLL, || {
        let seen = recorded.counter(HANDSHAKES_REFUSED, &wrong_cookie);
        async move { seen == 1 }
    }));
    for reason in locks_server::metrics::REFUSAL_REASONS {
        let expected = u64::from(reason == "wrong_cookie");
        let labels = [("node", "m-a"), ("reason", reason)];
        assert_eq!(
            recorded.counter(HANDSHAKES_REFUSED, &labels),
            expected,
            "{reason}"
        );
    }
    assert!(recorded.description(HANDSHAKES_REFUSED).is_some());
    rt.block_on(async {
        x.shutdown().await;
        a.shutdown().await;
    });
}

#[test]
fn peers_up_follows_a_connection() {
    let rt = runtime();
    let mut recorded = Recorded::new();
    let config = |name| NodeConfig::new(name).listen(loopback()).cookie("secret");
    let a = start(&rt, &recorded, config("p-a"));
    let b = start(&rt, &recorded, config("p-b"));
    let at = a.local_addr().expect("a listens");
    rt.block_on(within(BOUND, "connect", b.connect(at)))
        .unwrap();
    rt.block_on(until(BOUND, "a samples one peer", POLL, || {
        let up = recorded.gauge(PEERS_UP, &[("node", "p-a")]);
        async move { up == 1.0 }
    }));
    rt.block_on(async {
        b.shutdown().await;
        a.shutdown().await;
    });
}
