//! Clusters of in-process nodes for the tests that need several: started one after the other,
//! each connected to every earlier one, returned once every node sees all the others. Every
//! step is bounded (see [`crate::wait`]).

use crate::wait::{poll, within};
use locks_server::{Node, NodeConfig};
use std::time::Duration;

/// Starts a node from each of `configs` (which must listen, on loopback in tests), connects
/// every pair, and waits until each node sees all of them; every step within `bound`.
pub async fn connected(
    configs: impl IntoIterator<Item = NodeConfig>,
    bound: Duration,
) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    for config in configs {
        let node = within(bound, "a node starts", Node::start(config))
            .await
            .expect("the node starts");
        for earlier in &nodes {
            let addr = earlier.local_addr().expect("the earlier node listens");
            within(bound, "a node connects", node.connect(addr))
                .await
                .expect("the nodes connect");
        }
        nodes.push(node);
    }
    let size = nodes.len();
    for node in &nodes {
        let node = node.clone();
        poll(
            bound,
            "every node sees all the others",
            Duration::from_millis(5),
            move || {
                let node = node.clone();
                async move {
                    let seen = node.nodes().len();
                    if seen == size { Ok(()) } else { Err(seen) }
                }
            },
        )
        .await;
    }
    nodes
}
