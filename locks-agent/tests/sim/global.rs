//! The real lock tables of several nodes as simulated servers that share one audit: every
//! applied surrender is checked against the wait-for graph of *all* the tables at that moment,
//! so a surrender that breaks a cycle through several nodes counts as real.

use super::ServerFn;
use super::table::Audit;
use locks_agent::internal::WaitForGraph;
use locks_core::proto::ServerRequest;
use locks_core::{ModeTable, NodeId};
use locks_server::LockTable;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// One server per node of `nodes` (node `i` counts versions from `(i + 1) * 1_000_000`), and
/// their shared audit.
pub fn table_servers_audited(
    nodes: &[NodeId],
    modes: &ModeTable,
) -> (Vec<(NodeId, ServerFn)>, Rc<RefCell<Audit>>) {
    let audit = Rc::new(RefCell::new(Audit::default()));
    let tables: Rc<RefCell<BTreeMap<NodeId, LockTable>>> = Rc::new(RefCell::new(
        nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let base = (i as u64 + 1) * 1_000_000;
                (
                    node.clone(),
                    LockTable::new(node.clone(), modes.clone(), base),
                )
            })
            .collect(),
    ));
    let servers = nodes
        .iter()
        .map(|node| {
            let name = node.clone();
            let (node, modes, tables, audit) =
                (node.clone(), modes.clone(), tables.clone(), audit.clone());
            let server: ServerFn = Box::new(move |req: ServerRequest| {
                let surrender = match &req {
                    ServerRequest::Surrender { agent, lock, .. } => {
                        Some((agent.clone(), lock.clone()))
                    }
                    _ => None,
                };
                let on_cycle = surrender
                    .as_ref()
                    .map(|(agent, _)| on_a_cycle(&tables.borrow(), &modes, agent));
                let out = tables
                    .borrow_mut()
                    .get_mut(&node)
                    .expect("a table per node")
                    .handle(req);
                if let Some((_, lock)) = surrender {
                    audit
                        .borrow_mut()
                        .record(&out, &lock, on_cycle == Some(true));
                }
                out
            });
            (name, server)
        })
        .collect();
    (servers, audit)
}

/// Whether `agent` lies on a cycle of the wait-for graph of every table together.
fn on_a_cycle(
    tables: &BTreeMap<NodeId, LockTable>,
    modes: &ModeTable,
    agent: &locks_core::AgentId,
) -> bool {
    let mut views = Vec::new();
    for (node, table) in tables {
        for l in table.snapshot().locks {
            views.push((l.lock.clone(), node.clone(), l.view()));
        }
    }
    let g = WaitForGraph::build(modes, views.iter().map(|(l, n, v)| (l, n, v)));
    g.cycles().iter().any(|c| c.agents.contains(agent))
}
