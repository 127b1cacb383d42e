//! The node's lock tables and the cluster's wait-for graph for clients (`Table`, `Graph`): the
//! view the node's `cluster-table` and `cluster-graph` commands read
//! ([`Node::cluster_view`]), in `locks.v1` messages. Bounded by the introspection's own caps
//! (locks per node, edges of the graph: `locks_server::introspect::graph::MAX_EDGES`) and by
//! [`MAX_TIMEOUT_MS`] for the wait on other nodes; the tables are read a slice at a time, so a
//! large one does not keep the node's thread (where these calls are served) from its other
//! work.

use crate::pb;
use crate::wire::keys;
use locks_core::NodeId;
use locks_server::{ClusterQuery, ClusterView, Node};
use std::time::Duration;
use tonic::Status;

/// The longest wait for other nodes' tables a client may ask for.
pub(crate) const MAX_TIMEOUT_MS: u32 = 10_000;

fn query(max_locks_per_node: u32, timeout_ms: u32) -> ClusterQuery {
    let mut query = ClusterQuery::default();
    if max_locks_per_node > 0 {
        // The introspection caps it further (`MAX_LOCKS_ANSWERED`).
        query.max_locks_per_node = max_locks_per_node as usize;
    }
    if timeout_ms > 0 {
        query.timeout = Duration::from_millis(timeout_ms.min(MAX_TIMEOUT_MS).into());
    }
    query
}

async fn view(node: &Node, query: ClusterQuery) -> Result<ClusterView, Status> {
    node.cluster_view(query)
        .await
        .map_err(|e| Status::unavailable(format!("cannot read the tables: {e}")))
}

fn names<'a>(nodes: impl IntoIterator<Item = &'a NodeId>) -> Vec<String> {
    nodes.into_iter().map(ToString::to_string).collect()
}

fn entries(entries: &[locks_core::proto::QueueEntry]) -> Vec<pb::QueueEntry> {
    entries
        .iter()
        .map(|e| pb::QueueEntry {
            agent: e.agent.to_string(),
            mode: e.mode.to_string(),
        })
        .collect()
}

/// The tables of this node and of the nodes it reaches.
pub(crate) async fn table(
    node: &Node,
    request: &pb::TableRequest,
) -> Result<pb::TableReply, Status> {
    let view = view(node, query(request.max_locks_per_node, request.timeout_ms)).await?;
    let nodes = view
        .nodes
        .iter()
        .map(|(name, table)| pb::NodeTable {
            node: name.to_string(),
            total_locks: table.total_locks,
            locks: table
                .locks
                .iter()
                .map(|l| pb::LockQueue {
                    id: keys(&l.lock),
                    version: l.view.version,
                    group: l.view.group.map(|m| m.to_string()).unwrap_or_default(),
                    granted: entries(&l.view.granted),
                    converting: l
                        .view
                        .converting
                        .iter()
                        .map(|c| pb::Conversion {
                            agent: c.agent.to_string(),
                            held: c.held.to_string(),
                            requested: c.requested.to_string(),
                        })
                        .collect(),
                    waiting: entries(&l.view.waiting),
                })
                .collect(),
        })
        .collect();
    Ok(pb::TableReply {
        nodes,
        missing: names(&view.missing),
    })
}

/// The cluster's wait-for graph.
pub(crate) async fn graph(
    node: &Node,
    request: &pb::GraphRequest,
) -> Result<pb::GraphReply, Status> {
    let view = view(node, query(0, request.timeout_ms)).await?;
    let graph = view.wait_for_graph(node.modes());
    Ok(pb::GraphReply {
        edges: graph
            .edges
            .iter()
            .map(|e| pb::WaitEdge {
                waiter: e.waiter.to_string(),
                blocker: e.blocker.to_string(),
                node: e.node.to_string(),
                id: keys(&e.lock),
                in_cycle: e.in_cycle,
            })
            .collect(),
        missing: names(&graph.missing),
        truncated: names(&graph.truncated),
        dot: graph.to_dot(),
    })
}
