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
use std::time::Duration;

/// A running node for one workload.
pub struct Rig {
    node: Node,
    limit: Duration,
}

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
            .block_on(Node::start(NodeConfig::new(name)))
            .map_err(|e| format!("node start: {e}"))?;
        Ok(Rig { node, limit })
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
        let node = self.node;
        ctx.rt.block_on(async move {
            // A node whose thread is stuck could keep the harness waiting: bound it too.
            let _ = tokio::time::timeout(Duration::from_secs(10), node.shutdown()).await;
        });
    }
}

/// Whether the lock path works: one probe transaction, run once per harness run.
pub fn lock_path(ctx: &mut Ctx) -> Result<(), String> {
    if ctx.lock_path.is_none() {
        ctx.lock_path = Some(probe(ctx));
    }
    ctx.lock_path.clone().unwrap_or(Ok(()))
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
