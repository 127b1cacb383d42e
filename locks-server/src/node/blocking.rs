//! A node without an async runtime of the caller's: [`Node::start_blocking`] and
//! [`Node::shutdown_blocking`], and waiting for peers ([`Node::wait_for_nodes`], with its
//! blocking form).
//!
//! A node runs on a thread of its own, so starting and stopping it waits only for that thread:
//! the blocking forms park the calling thread in a small executor of their own (no tokio
//! runtime). They refuse to run on the node's own thread, which must do the work they wait
//! for, with [`Error::OnNodeThread`]. From any other thread they work, inside
//! `spawn_blocking` too; on a thread that runs async tasks they block those tasks meanwhile,
//! as any blocking call does, so use the async methods there. Bounded waits keep their timer
//! on the node's thread, which has one.

use super::Node;
use crate::config::NodeConfig;
use crate::error::Error;
use locks_core::NodeId;
use std::future::Future;
use std::time::Duration;

/// Runs `fut` on the calling thread, which must not be the node's (see the module docs).
fn block_on<T>(
    node: Option<&Node>,
    call: &'static str,
    fut: impl Future<Output = T>,
) -> Result<T, Error> {
    if node.is_some_and(Node::is_node_thread) {
        return Err(Error::OnNodeThread { call });
    }
    Ok(futures::executor::block_on(fut))
}

impl Node {
    /// [`Node::start`], blocking the calling thread until the node runs: for a program with no
    /// async runtime (a node has its own thread and runtime; nothing of the caller's is used).
    ///
    /// # Errors
    ///
    /// Those of [`Node::start`].
    ///
    /// ```
    /// use locks_server::{Node, NodeConfig};
    /// // A plain `fn main`: no tokio runtime anywhere in the caller.
    /// let node = Node::start_blocking(NodeConfig::new("plain")).unwrap();
    /// assert!(node.is_running());
    /// node.shutdown_blocking().unwrap();
    /// assert!(!node.is_running());
    /// ```
    pub fn start_blocking(config: NodeConfig) -> Result<Node, Error> {
        block_on(None, "Node::start_blocking", Node::start(config))?
    }

    /// [`Node::shutdown`], blocking the calling thread until the node has stopped (after a
    /// clean leave of the cluster).
    ///
    /// # Errors
    ///
    /// [`Error::OnNodeThread`] on the node's own thread (a task of [`Node::spawn`]), which
    /// must run the leave: use [`Node::shutdown`] there.
    pub fn shutdown_blocking(&self) -> Result<(), Error> {
        block_on(Some(self), "Node::shutdown_blocking", self.shutdown())
    }

    /// Waits until every node of `nodes` is connected (this node counts as connected to
    /// itself), at most `timeout`: what a program does after [`Node::start`] before it asks
    /// for locks on its peers. Returns at once when they all are.
    ///
    /// # Errors
    ///
    /// [`Error::NodesNotUp`], naming the nodes still missing, when `timeout` passes first (on
    /// a node without a cluster, at once, for any node but itself); [`Error::Stopped`] when
    /// the node stops meanwhile.
    ///
    /// ```
    /// # use locks_server::{Node, NodeConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let loopback = "127.0.0.1:0".parse().unwrap();
    /// let a = Node::start(NodeConfig::new("a").listen(loopback).cookie("secret")).await.unwrap();
    /// let b_config = NodeConfig::new("b").listen(loopback).cookie("secret");
    /// let b = Node::start(b_config.peer(a.local_addr().unwrap())).await.unwrap();
    /// let both = [a.id().clone(), b.id().clone()];
    /// a.wait_for_nodes(&both, std::time::Duration::from_secs(10)).await.unwrap();
    /// # }
    /// ```
    pub async fn wait_for_nodes(&self, nodes: &[NodeId], timeout: Duration) -> Result<(), Error> {
        let missing = |node: &Node, wanted: &[NodeId]| -> Vec<NodeId> {
            let up = node.nodes();
            wanted.iter().filter(|n| !up.contains(n)).cloned().collect()
        };
        if missing(self, nodes).is_empty() {
            return Ok(());
        }
        let (node, wanted) = (self.clone(), nodes.to_vec());
        let mut events = self.subscribe_nodes();
        let connected = async move {
            loop {
                let left = missing(&node, &wanted);
                if left.is_empty() {
                    return Ok(());
                }
                if events.recv().await.is_none() {
                    // A local-only node has no events; a stopped one has none left.
                    return Err(if node.is_running() {
                        Error::NodesNotUp { missing: left }
                    } else {
                        Error::Stopped
                    });
                }
            }
        };
        // On the node's thread, which has a timer (the caller's thread may have none).
        let (node, wanted) = (self.clone(), nodes.to_vec());
        let bounded = async move { tokio::time::timeout(timeout, connected).await };
        match self.spawn(bounded).await? {
            Ok(done) => done,
            Err(_) => Err(Error::NodesNotUp {
                missing: missing(&node, &wanted),
            }),
        }
    }

    /// [`Node::wait_for_nodes`], blocking the calling thread.
    ///
    /// # Errors
    ///
    /// Those of [`Node::wait_for_nodes`], and [`Error::OnNodeThread`] on the node's own thread.
    pub fn wait_for_nodes_blocking(
        &self,
        nodes: &[NodeId],
        timeout: Duration,
    ) -> Result<(), Error> {
        block_on(
            Some(self),
            "Node::wait_for_nodes_blocking",
            self.wait_for_nodes(nodes, timeout),
        )?
    }
}
