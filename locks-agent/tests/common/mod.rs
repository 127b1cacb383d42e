//! The test client harness, after the Erlang original's `locks_tests`: numbered clients, each with
//! its own transaction, whose calls run in tasks of their own so that a call can stay pending
//! while the script goes on; "kill" drops the client (and with it its transaction, whose agent
//! then releases everything).
//!
//! Blocking is checked by events, not time: [`Harness::wait_blocked`] waits until the lock
//! server shows the agent waiting or converting on the lock, after which the call cannot have
//! completed unless something else changes. Every wait is bounded by [`BOUND`]
//! (`locks_testing::wait`), so a broken build fails instead of hanging.

#![allow(dead_code)]

use locks_agent::{LockResult, Options, Transaction, begin_transaction};
use locks_core::proto::EntryState;
use locks_core::{AgentId, LockId, Mode};
use locks_server::{Node, NodeConfig};
use locks_testing::wait::{poll, within};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The longest any single step may take before the test fails.
pub const BOUND: Duration = Duration::from_secs(20);

/// A node and its numbered clients.
pub struct Harness {
    pub node: Node,
}

impl Harness {
    /// A fresh single node.
    pub async fn new(name: &str) -> Harness {
        let node = Node::start(NodeConfig::new(name))
            .await
            .expect("node starts");
        Harness { node }
    }

    /// A client with default options.
    pub async fn client(&self) -> Client {
        self.client_with(Options::default()).await
    }

    /// A client with the given options. Clients created later have larger agent ids.
    pub async fn client_with(&self, options: Options) -> Client {
        let txn = begin_transaction(&self.node, options)
            .await
            .expect("transaction starts");
        Client {
            txn: Some(Arc::new(txn)),
            tasks: Vec::new(),
        }
    }

    /// Waits until the lock server shows `agent` waiting or converting on `lock`.
    pub async fn wait_blocked(&self, agent: &AgentId, lock: &LockId) {
        self.wait_for(
            |snap| snap.state(agent, lock).is_waiting(),
            &format!("{agent} blocked on {lock}"),
        )
        .await;
    }

    /// Waits until the lock server shows `agent` holding `lock`.
    pub async fn wait_granted(&self, agent: &AgentId, lock: &LockId) {
        self.wait_for(
            |snap| matches!(snap.state(agent, lock), EntryState::Granted(_)),
            &format!("{agent} granted {lock}"),
        )
        .await;
    }

    /// Waits until the lock server has no entry of `agent` left.
    pub async fn wait_released(&self, agent: &AgentId) {
        self.wait_for(
            |snap| snap.locks.iter().all(|l| l.entry(agent).is_none()),
            &format!("{agent} released"),
        )
        .await;
    }

    /// Waits until no lock of the node has an entry: every transaction ended has released
    /// (the release happens on the node's thread after `end` returns).
    pub async fn wait_all_released(&self) {
        self.wait_for(|snap| snap.locks.is_empty(), "nothing left held")
            .await;
    }

    async fn wait_for(&self, done: impl Fn(&locks_server::TableSnapshot) -> bool, what: &str) {
        let (node, done) = (&self.node, &done);
        poll(BOUND, what, Duration::from_millis(2), move || async move {
            let snap = node.snapshot().await.expect("snapshot");
            if done(&snap) { Ok(()) } else { Err(snap) }
        })
        .await
    }
}

/// One test client: a transaction and the calls it has in flight.
pub struct Client {
    txn: Option<Arc<Transaction>>,
    tasks: Vec<tokio::task::AbortHandle>,
}

/// A call that may still be running.
pub struct Pending<T>(JoinHandle<T>);

impl<T> Pending<T> {
    /// Whether the call has completed.
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }

    /// The call's result, waiting at most [`BOUND`].
    pub async fn result(self) -> T {
        match within(BOUND, "the call", self.0).await {
            Ok(value) => value,
            Err(e) => panic!("the call's task failed: {e}"),
        }
    }
}

impl Client {
    /// The transaction (for calls awaited in place).
    pub fn txn(&self) -> &Transaction {
        self.txn.as_deref().expect("client alive")
    }

    /// The agent's id.
    pub fn id(&self) -> AgentId {
        self.txn().id().clone()
    }

    /// `lock` awaited in place (within [`BOUND`], failing the test on an error): the locks
    /// that were in a deadlock on the way, as [`Transaction::lock`] returns them.
    pub async fn lock(&self, lock: LockId, mode: Mode) -> Vec<LockId> {
        bounded(self.txn().lock(lock, mode))
            .await
            .unwrap()
            .deadlock_locks()
    }

    /// `lock_nowait` awaited in place (within [`BOUND`], failing the test on an error).
    pub async fn lock_nowait(&self, lock: LockId, mode: Mode) {
        bounded(self.txn().lock_nowait(lock, mode)).await.unwrap()
    }

    /// `await_all_locks` awaited in place (within [`BOUND`], failing the test on an error).
    pub async fn await_all_locks(&self) -> LockResult {
        bounded(self.txn().await_all_locks()).await.unwrap()
    }

    /// Starts a call in a task of its own; it may stay pending.
    pub fn call<T, F, Fut>(&mut self, f: F) -> Pending<T>
    where
        F: FnOnce(Arc<Transaction>) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let txn = self.txn.clone().expect("client alive");
        let handle = tokio::spawn(f(txn));
        self.tasks.push(handle.abort_handle());
        Pending(handle)
    }

    /// Kills the client: its pending calls are cancelled and its transaction dropped, which
    /// ends the agent and releases its locks.
    pub fn kill(mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        self.txn = None;
    }
}

/// Runs `f` with a bound, failing the test if it takes longer.
pub async fn bounded<T>(f: impl Future<Output = T>) -> T {
    within(BOUND, "step", f).await
}

/// The cookie of the test clusters.
pub const COOKIE: &str = "agent-tests";

/// A cluster node's configuration: 127.0.0.1, an ephemeral port, a quick reconnect.
pub fn config(name: &str) -> NodeConfig {
    NodeConfig::new(name)
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .cookie(COOKIE)
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
}

/// Waits until `node` sees every node of `names` connected.
pub async fn wait_connected(node: &Node, names: &[&str]) {
    let mut events = node.subscribe_nodes();
    bounded(async {
        while !names
            .iter()
            .all(|name| node.nodes().iter().any(|n| n.as_str() == *name))
        {
            events.recv().await.expect("node running");
        }
    })
    .await;
}

/// Nodes with the given names, every pair connected.
pub async fn cluster(names: &[&str]) -> Vec<Harness> {
    cluster_with(names, config).await
}

/// Nodes with the given names, each started with `config(name)`, every pair connected.
pub async fn cluster_with(names: &[&str], config: impl Fn(&str) -> NodeConfig) -> Vec<Harness> {
    let mut nodes: Vec<Node> = Vec::new();
    for name in names {
        let node = bounded(Node::start(config(name))).await.unwrap();
        for earlier in &nodes {
            bounded(node.connect(earlier.local_addr().unwrap()))
                .await
                .unwrap();
        }
        nodes.push(node);
    }
    for node in &nodes {
        wait_connected(node, names).await;
    }
    nodes.into_iter().map(|node| Harness { node }).collect()
}

/// Whether `err` says that `node` cannot serve (a request's node is down or unknown).
pub fn names_node(err: &locks_agent::Error, node: &str) -> bool {
    use locks_agent::{Error, RequestError};
    match err {
        Error::CannotServe { nodes, unknown, .. } => {
            nodes.iter().chain(unknown).any(|n| n.as_str() == node)
        }
        Error::Request(RequestError::NodesDown { nodes, .. }) => {
            nodes.iter().any(|n| n.as_str() == node)
        }
        _ => false,
    }
}

/// The Erlang suite's 9.3 item 20 (without `await_nodes`) on a connected cluster of nodes
/// `a`, `b` and `c` (in that order), whatever carries its links: a client of `a` locks `A` on
/// all three, then `c` shuts down. The client is told its request on `c` cannot be served (its
/// status, then `await_all_locks`, each naming `c`), a new request naming `c` fails at once
/// naming it, and `a` and `b` still serve each other.
pub async fn a_node_dies_under_a_lock(mut hs: Vec<Harness>) {
    use locks_agent::{Error, Req, TransactionStatus};
    use locks_core::{NodeId, lock_id};
    let n = |name: &str| NodeId::new(name).unwrap();
    let all = [n("a"), n("b"), n("c")];
    let c1 = hs[0].client().await;
    bounded(c1.txn().lock_on(lock_id!["A"], Mode::WRITE, &all, Req::All))
        .await
        .unwrap();
    let c = hs.pop().expect("three nodes");
    bounded(c.node.shutdown()).await;
    // The agent hears that c is down: its request on A can no longer be met.
    let status = poll(BOUND, "c down", Duration::from_millis(5), || async {
        match c1.txn().status().await.unwrap() {
            TransactionStatus::HaveAllLocks { .. } => Err("still has all locks"),
            other => Ok(other),
        }
    })
    .await;
    assert_eq!(
        status,
        TransactionStatus::CannotServe {
            locks: vec![lock_id!["A"]],
            nodes: vec![n("c")]
        }
    );
    let err = bounded(c1.txn().await_all_locks()).await.unwrap_err();
    assert!(
        matches!(&err, Error::CannotServe { nodes, .. } if nodes == &[n("c")]),
        "{err}"
    );
    // A new request naming c fails at once, naming it.
    let err = bounded(c1.txn().lock_on(lock_id!["B"], Mode::WRITE, &all, Req::All))
        .await
        .unwrap_err();
    assert!(names_node(&err, "c"), "the error names node c: {err:?}");
    // The other two still serve each other.
    let c2 = hs[1].client().await;
    bounded(
        c2.txn()
            .lock_on(lock_id!["C"], Mode::WRITE, &[n("a"), n("b")], Req::All),
    )
    .await
    .unwrap();
}

/// Two nodes "a" and "b", connected.
pub async fn two_nodes() -> (Harness, Harness) {
    let mut hs = cluster(&["a", "b"]).await;
    let b = hs.pop().expect("two nodes");
    let a = hs.pop().expect("two nodes");
    (a, b)
}

/// Shuts `gone` down and waits until `survivor` has seen it go.
pub async fn shut_down(gone: Harness, survivor: &Harness) {
    let name = gone.node.id().clone();
    let mut events = survivor.node.subscribe_nodes();
    bounded(gone.node.shutdown()).await;
    bounded(async {
        while events.recv().await != Some(locks_server::NodeEvent::Down(name.clone())) {}
    })
    .await;
}
