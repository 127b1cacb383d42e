//! A node for one lock workload, and the bounded ways of running client code against it.
//!
//! Every lock workload starts a fresh local node and shuts it down afterwards, so no workload
//! sees another's queues. Client code runs either on the node's own thread ([`Rig::on_node`],
//! through `Node::spawn`) or as a task of the harness's multi-thread runtime
//! ([`Rig::on_runtime`]); either way the harness waits at most the round limit, so a lock that
//! is never granted fails the workload instead of hanging the run.

use super::Ctx;
use locks_agent::{Options, begin_transaction};
use locks_core::{Mode, lock_id};
use locks_server::{Node, NodeConfig};
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

/// The running node (or nodes, for a cluster) of one workload.
pub struct Rig {
    node: Node,
    others: Vec<Node>,
    limit: Duration,
}

/// The cookie of the harness's clusters (loopback only).
pub const COOKIE: &str = "locks-bench";

/// The error of a client future: anything printable.
pub type ClientResult<T> = Result<T, String>;

impl Rig {
    /// Starts a local node named `name`, after checking once per run that the lock path works.
    pub fn start(ctx: &mut Ctx, name: &str) -> Result<Rig, String> {
        lock_path(ctx)?;
        Rig::start_unchecked(ctx, name, ctx.cfg.round_limit)
    }

    fn start_unchecked(ctx: &Ctx, name: &str, limit: Duration) -> Result<Rig, String> {
        let node = ctx
            .rt
            .block_on(Node::start(with_data_dir(
                NodeConfig::new(name),
                ctx.cfg.data_dir.as_deref(),
            )))
            .map_err(|e| format!("node start: {e}"))?;
        Ok(Rig {
            node,
            others: Vec::new(),
            limit,
        })
    }

    /// Starts `names.len()` nodes listening on 127.0.0.1 (ephemeral ports), connects every
    /// pair, and each of them to every node at `peers` (other processes), and waits (at most
    /// 10 s) until each sees all the others. The first is the node clients run on.
    pub fn start_cluster(
        ctx: &mut Ctx,
        names: &[&str],
        peers: &[SocketAddr],
    ) -> Result<Rig, String> {
        Rig::start_cluster_tls(ctx, names, peers, false)
    }

    /// [`Rig::start_cluster`], with mutual TLS on every link when `tls` (certificates made
    /// for the run, in memory).
    pub fn start_cluster_tls(
        ctx: &mut Ctx,
        names: &[&str],
        peers: &[SocketAddr],
        tls: bool,
    ) -> Result<Rig, String> {
        lock_path(ctx)?;
        let limit = ctx.cfg.round_limit;
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let certs = tls
            .then(|| crate::node_cli::certs::TestCerts::new(&names))
            .transpose()?;
        let peers = peers.to_vec();
        let data_dir = ctx.cfg.data_dir.clone();
        let nodes = ctx.rt.block_on(async move {
            tokio::time::timeout(
                Duration::from_secs(10),
                connect_all(names, peers, certs, data_dir),
            )
            .await
            .map_err(|_| "the cluster did not connect within 10 s".to_string())?
        })?;
        let mut nodes = nodes.into_iter();
        let node = nodes.next().ok_or("no nodes")?;
        Ok(Rig {
            node,
            others: nodes.collect(),
            limit,
        })
    }

    /// The ids of every node the client's node is connected to, itself included (sorted).
    pub fn node_ids(&self) -> Vec<locks_core::NodeId> {
        self.node.nodes()
    }

    /// The node.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// Runs `client` on the node's own thread and waits for it, at most the round limit.
    pub fn on_node<T, F>(&self, ctx: &Ctx, client: F) -> ClientResult<T>
    where
        F: Future<Output = ClientResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        let spawned = self.node.spawn(client);
        let limit = self.limit;
        ctx.rt.block_on(async move {
            match tokio::time::timeout(limit, spawned).await {
                Err(_) => Err(stuck(limit)),
                Ok(Err(e)) => Err(format!("node: {e}")),
                Ok(Ok(result)) => result,
            }
        })
    }

    /// Runs `client` as a task of the harness's multi-thread runtime (not the node's thread),
    /// at most the round limit.
    pub fn on_runtime<T, F>(&self, ctx: &Ctx, client: F) -> ClientResult<T>
    where
        F: Future<Output = ClientResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        let task = ctx.rt.spawn(client);
        let limit = self.limit;
        ctx.rt.block_on(async move {
            match tokio::time::timeout(limit, task).await {
                Err(_) => Err(stuck(limit)),
                Ok(Err(e)) => Err(format!("client task: {e}")),
                Ok(Ok(result)) => result,
            }
        })
    }

    /// Shuts the node down (also ending any client still stuck on its thread).
    pub fn stop(self, ctx: &Ctx) {
        for node in std::iter::once(self.node).chain(self.others) {
            ctx.rt.block_on(async move {
                // A node whose thread is stuck could keep the harness waiting: bound it too.
                let _ = tokio::time::timeout(Duration::from_secs(10), node.shutdown()).await;
            });
        }
    }
}

/// Whether the lock path works: one probe transaction, run once per harness run.
pub fn lock_path(ctx: &mut Ctx) -> Result<(), String> {
    if ctx.lock_path.is_none() {
        ctx.lock_path = Some(probe(ctx));
    }
    ctx.lock_path.clone().unwrap_or(Ok(()))
}

/// `config` with its data directory under `dir`, if given.
fn with_data_dir(config: NodeConfig, dir: Option<&std::path::Path>) -> NodeConfig {
    match dir {
        Some(dir) => {
            let path = dir.join(config.name());
            config.data_dir(path)
        }
        None => config,
    }
}

async fn connect_all(
    names: Vec<String>,
    peers: Vec<SocketAddr>,
    certs: Option<crate::node_cli::certs::TestCerts>,
    data_dir: Option<std::path::PathBuf>,
) -> Result<Vec<Node>, String> {
    let mut nodes: Vec<Node> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mut config = NodeConfig::new(name.as_str())
            .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
            .cookie(COOKIE)
            // A fresh node, never run before: nothing of an earlier incarnation to wait out.
            .start_delay(std::time::Duration::ZERO);
        if let Some(certs) = &certs {
            config = config.tls(certs.tls(i)?);
        }
        config = with_data_dir(config, data_dir.as_deref());
        let node = Node::start(config)
            .await
            .map_err(|e| format!("node start: {e}"))?;
        let earlier = nodes.iter().map(|n| n.local_addr());
        for addr in earlier.chain(peers.iter().map(|p| Some(*p))) {
            let addr = addr.ok_or("a cluster node does not listen")?;
            node.connect(addr)
                .await
                .map_err(|e| format!("connect {name} to {addr}: {e}"))?;
        }
        nodes.push(node);
    }
    for node in &nodes {
        let mut events = node.subscribe_nodes();
        while node.nodes().len() < names.len() + peers.len() {
            if events.recv().await.is_none() {
                return Err(format!("{} stopped", node.name()));
            }
        }
    }
    Ok(nodes)
}

fn stuck(limit: Duration) -> String {
    format!(
        "no result within {} s (a lock was never granted?)",
        limit.as_secs()
    )
}

/// One transaction with one write lock, on a node of its own, within 3 seconds.
fn probe(ctx: &Ctx) -> Result<(), String> {
    let rig = Rig::start_unchecked(ctx, "probe", Duration::from_secs(3))?;
    let node = rig.node().clone();
    let result = rig.on_node(ctx, async move {
        let txn = begin_transaction(&node, Options::default())
            .await
            .map_err(|e| e.to_string())?;
        txn.lock(lock_id!["bench", "probe"], Mode::WRITE)
            .await
            .map_err(|e| e.to_string())?;
        txn.end().await.map_err(|e| e.to_string())
    });
    rig.stop(ctx);
    result.map_err(|e| format!("lock path not working, skipped: probe transaction: {e}"))
}

/// Turns any displayable error into the harness's error.
pub fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Runs `f` on the harness runtime within the round limit.
pub fn bounded<T>(
    ctx: &Ctx,
    f: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let limit = ctx.cfg.round_limit;
    ctx.rt.block_on(async move {
        tokio::time::timeout(limit, f)
            .await
            .map_err(|_| format!("not done within {} s", limit.as_secs()))?
    })
}
