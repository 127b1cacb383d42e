//! Fencing: a resource that refuses a stale lock holder.
//!
//! Three in-process nodes on 127.0.0.1 (ephemeral ports). A register is guarded by a
//! [`Fence`]: every write carries the fencing versions of the writer's grant. Transaction `t1` on
//! node `a` takes an exclusive `Majority` lock on `a`, `b`, `c` and writes. Then `a` is cut off
//! from `b` and `c` while `t1` is paused in the middle of a write: `a`'s locks on `b` and `c`
//! are released after the lock delay, and `t2` on node `b` is granted the lock by the majority
//! `b`, `c` and writes. `t1`'s node tells it the lock is lost, but a paused process hears that
//! too late: when `t1` resumes and finishes its write with its old tokens, the fence refuses
//! it. On the node that granted both (a majority's), `t2`'s version is the larger.
//!
//! ```sh
//! cargo run -p examples --example fencing
//! ```

use examples::sees;
use locks_agent::{Options, Req, Transaction, begin_transaction};
use locks_core::fence::Fence;
use locks_core::{LockId, Mode, NodeId, lock_id};
use locks_server::{Node, NodeConfig};
use std::net::SocketAddr;
use std::time::Duration;

/// A register whose writes are fenced.
struct Register {
    fence: Fence,
    value: Option<String>,
}

impl Register {
    fn write(&mut self, lock: &LockId, tokens: &[(NodeId, u64)], value: &str) {
        let shown: Vec<String> = tokens.iter().map(|(n, v)| format!("{n}@{v}")).collect();
        match self.fence.admit(lock, tokens) {
            Ok(()) => {
                self.value = Some(value.to_owned());
                println!("  write {value:?} with {}: accepted", shown.join(","));
            }
            Err(e) => println!("  write {value:?} with {}: refused ({e})", shown.join(",")),
        }
    }
}

async fn node(name: &str) -> Node {
    let config = NodeConfig::new(name)
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .cookie("fencing-example")
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(100));
    Node::start(config).await.expect("node starts")
}

/// Takes `lock` exclusively on a majority of `nodes` in a new transaction on `on`; returns the
/// transaction and the grant's fencing versions.
async fn take(on: &Node, lock: &LockId, nodes: &[NodeId]) -> (Transaction, Vec<(NodeId, u64)>) {
    let t = begin_transaction(on, Options::default())
        .await
        .expect("transaction begins");
    let locked = tokio::time::timeout(
        Duration::from_secs(10),
        t.lock_on(lock.clone(), Mode::X, nodes, Req::Majority),
    )
    .await
    .expect("the grant comes in time")
    .expect("lock granted");
    // The grant's fencing versions: each granting node with the lock's version there.
    let tokens = locked.granted.nodes.into_vec();
    (t, tokens)
}

#[tokio::main]
async fn main() {
    let (a, b, c) = (node("a").await, node("b").await, node("c").await);
    b.connect(a.local_addr().unwrap()).await.unwrap();
    c.connect(a.local_addr().unwrap()).await.unwrap();
    c.connect(b.local_addr().unwrap()).await.unwrap();
    let all: Vec<NodeId> = ["a", "b", "c"].map(|n| NodeId::new(n).unwrap()).to_vec();
    for n in [&a, &b, &c] {
        n.wait_for_nodes(&all, Duration::from_secs(10))
            .await
            .expect("the cluster connects");
    }
    let lock = lock_id!["register"];
    let mut register = Register {
        fence: Fence::new(),
        value: None,
    };

    println!("t1 on a takes the register on a majority of a, b, c");
    let (t1, t1_tokens) = take(&a, &lock, &all).await;
    register.write(&lock, &t1_tokens, "from t1");

    println!("a is cut off from b and c while t1, paused mid-write, has not heard of its loss");
    a.disconnect("b").await.unwrap();
    a.disconnect("c").await.unwrap();
    sees(&b, &["b", "c"]).await;
    sees(&c, &["b", "c"]).await;

    println!("t2 on b takes the register on the majority b, c");
    let (t2, t2_tokens) = take(&b, &lock, &all).await;
    register.write(&lock, &t2_tokens, "from t2");

    println!("t1 wakes up and writes with its old tokens");
    register.write(&lock, &t1_tokens, "late from t1");
    println!("register holds {:?}", register.value);

    let _ = t2.end().await;
    let _ = t1.end().await;
    for n in [&a, &b, &c] {
        n.shutdown().await;
    }
}
