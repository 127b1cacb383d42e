//! Readable renderings of calls, requests, messages and views for the traces: agents by their
//! configuration names, lock views as `granted[..] conv[..] wait[..]`.

use super::world::{Model, Op};
use locks_agent::TransactionStatus;
use locks_core::proto::{AgentMessage, ServerRequest};
use std::fmt::Write as _;

pub fn show_status(s: &TransactionStatus) -> &'static str {
    match s {
        TransactionStatus::NoLocks => "no locks",
        TransactionStatus::Waiting => "waiting",
        TransactionStatus::HaveAllLocks { .. } => "have all locks",
        TransactionStatus::CannotServe { .. } => "cannot serve",
    }
}

fn show_nodes(m: &Model, nodes: &[usize]) -> String {
    let names: Vec<String> = nodes.iter().map(|&n| m.node_ids[n].to_string()).collect();
    names.join(",")
}

pub fn show_op(m: &Model, op: &Op) -> String {
    match op {
        Op::Lock {
            lock,
            mode,
            nodes,
            req,
            wait,
        } => {
            let call = if *wait { "lock" } else { "lock_nowait" };
            if nodes.len() == 1 {
                format!("{call} {lock} {mode} on {}", show_nodes(m, nodes))
            } else {
                format!("{call} {lock} {mode} on {} {req:?}", show_nodes(m, nodes))
            }
        }
        Op::Unlock(lock) => format!("unlock {lock}"),
        Op::Convert(lock, mode) => format!("convert {lock} to {mode}"),
        Op::End => "end".into(),
        Op::Drop => "drop the lock call".into(),
    }
}

pub fn show_request(m: &Model, r: &ServerRequest) -> String {
    match r {
        ServerRequest::Lock { agent, lock, mode } => {
            format!("Lock {} {lock} {mode}", m.name(agent))
        }
        ServerRequest::Convert { agent, lock, mode } => {
            format!("Convert {} {lock} {mode}", m.name(agent))
        }
        ServerRequest::Unlock { agent, lock } => format!("Unlock {} {lock}", m.name(agent)),
        ServerRequest::Surrender {
            agent,
            lock,
            version,
            waits,
        } => format!(
            "Surrender {} {lock} v{version} waits[{}]",
            m.name(agent),
            waits
                .iter()
                .map(|w| format!("{}->{} {}", m.name(&w.waiter), m.name(&w.blocker), w.lock))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        ServerRequest::RemoveAgent { agent } => format!("RemoveAgent {}", m.name(agent)),
        other => format!("{other:?}"),
    }
}

pub fn show_view(m: &Model, v: &locks_core::proto::LockView) -> String {
    let mut s = format!("v{} granted[", v.version);
    for (i, e) in v.granted.iter().enumerate() {
        let sep = if i > 0 { " " } else { "" };
        let _ = write!(s, "{sep}{}:{}", m.name(&e.agent), e.mode);
    }
    s.push(']');
    if !v.converting.is_empty() {
        s.push_str(" conv[");
        for (i, c) in v.converting.iter().enumerate() {
            let sep = if i > 0 { " " } else { "" };
            let _ = write!(s, "{sep}{}:{}->{}", m.name(&c.agent), c.held, c.requested);
        }
        s.push(']');
    }
    if !v.waiting.is_empty() {
        s.push_str(" wait[");
        for (i, e) in v.waiting.iter().enumerate() {
            let sep = if i > 0 { " " } else { "" };
            let _ = write!(s, "{sep}{}:{}", m.name(&e.agent), e.mode);
        }
        s.push(']');
    }
    s
}

pub fn show_msg(m: &Model, msg: &AgentMessage) -> String {
    match msg {
        AgentMessage::Notice(n) => {
            let mut s = format!("Notice {}@{} v{} {:?}", n.lock, n.node, n.version, n.state);
            if let Some(q) = &n.queue {
                let _ = write!(s, " ({})", show_view(m, q));
            }
            if let Some(note) = &n.note {
                let _ = write!(s, " [{note:?}]");
            }
            s
        }
        AgentMessage::Forward {
            from,
            node,
            lock,
            view,
        } => format!(
            "Forward from {} {lock}@{node} ({})",
            m.name(from),
            show_view(m, view)
        ),
        AgentMessage::Surrendered { by, node, lock, .. } => {
            format!("Surrendered by {} {lock}@{node}", m.name(by))
        }
        AgentMessage::Rejected { node, lock, reason } => {
            format!("Rejected {lock}@{node}: {reason}")
        }
        AgentMessage::Probe(p) => {
            let edges: Vec<String> = p
                .edges
                .iter()
                .map(|e| {
                    format!(
                        "{}->{} {}@{} v{}",
                        m.name(&e.waiter),
                        m.name(&e.blocker),
                        e.lock,
                        e.node,
                        e.version
                    )
                })
                .collect();
            let kind = if p.refuted { "refuted " } else { "" };
            format!("Probe {kind}at {} [{}]", p.next, edges.join(", "))
        }
        AgentMessage::Watched { .. } => "Watched".into(),
        AgentMessage::Raised { node, lock, floor } => format!("Raised {lock}@{node} to {floor}"),
    }
}
