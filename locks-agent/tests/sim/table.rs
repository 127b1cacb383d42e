//! The real lock table as a simulated server, with an audit of the surrenders it applies.

use super::ServerFn;
use locks_core::proto::{AgentMessage, Note, ServerRequest};
use locks_core::{AgentId, LockId, ModeTable, NodeId};

/// A picture of a simulated server's table, now.
pub type Inspect = Box<dyn Fn() -> locks_server::TableSnapshot>;

/// What the servers saw of the surrenders they applied.
#[derive(Clone, Debug, Default)]
pub struct Audit {
    /// Surrenders applied while the victim was on a cycle of the real wait-for graph.
    pub real: u64,
    /// Surrenders applied while it was not (decided on outdated knowledge).
    pub needless: u64,
}

impl Audit {
    /// Counts a surrender of `lock` that caused `out`, if it was applied (its notices carry
    /// `Note::Surrendered`; a refused one is answered with `Note::NotSurrendered`).
    pub fn record(&mut self, out: &[(AgentId, AgentMessage)], lock: &LockId, on_cycle: bool) {
        let applied = out.iter().any(|(_, m)| {
            matches!(m, AgentMessage::Notice(n)
                if n.lock == *lock && matches!(n.note, Some(Note::Surrendered { .. })))
        });
        match (applied, on_cycle) {
            (false, _) => {}
            (true, true) => self.real += 1,
            (true, false) => self.needless += 1,
        }
    }
}

/// The real lock table of `node` as a simulated server. Every applied surrender is audited
/// against the table's own wait-for graph.
pub fn table_server(node: &NodeId, modes: &ModeTable, version_base: u64) -> ServerFn {
    table_server_audited(node, modes, version_base).0
}

/// [`table_server`] with its [`Audit`].
pub fn table_server_audited(
    node: &NodeId,
    modes: &ModeTable,
    version_base: u64,
) -> (ServerFn, std::rc::Rc<std::cell::RefCell<Audit>>) {
    let (server, audit, _) = table_server_inspected(node, modes, version_base);
    (server, audit)
}

/// [`table_server_audited`], and a way to look at the table between requests (for
/// [`super::Sim::inspect_table`]).
pub fn table_server_inspected(
    node: &NodeId,
    modes: &ModeTable,
    version_base: u64,
) -> (ServerFn, std::rc::Rc<std::cell::RefCell<Audit>>, Inspect) {
    use locks_agent::internal::WaitForGraph;
    let audit = std::rc::Rc::new(std::cell::RefCell::new(Audit::default()));
    let audit2 = audit.clone();
    let shared = std::rc::Rc::new(std::cell::RefCell::new(locks_server::LockTable::new(
        node.clone(),
        modes.clone(),
        version_base,
    )));
    let inspected = shared.clone();
    let inspect: Inspect = Box::new(move || inspected.borrow().snapshot());
    let node = node.clone();
    let modes = modes.clone();
    let server = Box::new(move |req: ServerRequest| {
        let surrender = match &req {
            ServerRequest::Surrender { agent, lock, .. } => Some((agent.clone(), lock.clone())),
            _ => None,
        };
        let mut table = shared.borrow_mut();
        let on_cycle = surrender.as_ref().map(|(agent, _)| {
            let snap = table.snapshot();
            let views: Vec<_> = snap
                .locks
                .iter()
                .map(|l| (l.lock.clone(), l.view()))
                .collect();
            let g = WaitForGraph::build(&modes, views.iter().map(|(l, v)| (l, &node, v)));
            g.cycles().iter().any(|c| c.agents.contains(agent))
        });
        let out = table.handle(req);
        if let Some((_, lock)) = surrender {
            audit2
                .borrow_mut()
                .record(&out, &lock, on_cycle == Some(true));
        }
        out
    });
    (server, audit, inspect)
}
