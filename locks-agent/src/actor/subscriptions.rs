//! The agent actor's watch subscriptions: which client stream gets the views of which watched
//! lock.
//!
//! The core watches `(lock, node)` copies once each and passes on every new view
//! ([`AgentEffect::Watched`](crate::core::AgentEffect::Watched)); here each view goes to every
//! subscription on that lock that lists the node. A subscription is one
//! [`crate::LockWatch`] stream. When the last subscription listing a copy goes (its stream was
//! dropped, or `unwatch` named the copy), the core stops watching the copy, so the server stops
//! sending its views.
//!
//! Invariant: the copies the core watches are exactly those some subscription lists.

use super::Agent;
use crate::core::WatchItem;
use crate::error::Error;
use actix::prelude::*;
use futures::channel::mpsc;
use locks_core::proto::LockView;
use locks_core::{LockId, NodeId};
use std::sync::Arc;

/// One client stream: the lock, the nodes it watches there, and where its views go.
struct Subscription {
    id: u64,
    lock: LockId,
    nodes: Vec<NodeId>,
    tx: mpsc::UnboundedSender<WatchItem>,
}

/// Every watch stream of the transaction.
#[derive(Default)]
pub(crate) struct Subscriptions {
    subs: Vec<Subscription>,
    next: u64,
}

impl Subscriptions {
    /// Sends a new view of `lock` on `node` to every stream watching it.
    pub(super) fn deliver(&mut self, node: &NodeId, lock: &LockId, view: &Arc<LockView>) {
        for sub in &self.subs {
            if &sub.lock == lock && sub.nodes.contains(node) {
                // A stream dropped meanwhile is removed by its `DropWatch`.
                let _ = sub
                    .tx
                    .unbounded_send((node.clone(), lock.clone(), view.clone()));
            }
        }
    }

    /// The nodes of `lock` that no subscription lists any more, among `nodes`.
    fn uncovered(&self, lock: &LockId, nodes: &[NodeId]) -> Vec<NodeId> {
        nodes
            .iter()
            .filter(|n| {
                !self
                    .subs
                    .iter()
                    .any(|s| &s.lock == lock && s.nodes.contains(n))
            })
            .cloned()
            .collect()
    }
}

/// Start a watch stream on `lock` at `nodes`; answers with the stream's id.
#[derive(Message)]
#[rtype(result = "Result<u64, Error>")]
pub(crate) struct Watch {
    pub lock: LockId,
    pub nodes: Vec<NodeId>,
    pub tx: mpsc::UnboundedSender<WatchItem>,
}

impl Handler<Watch> for Agent {
    type Result = Result<u64, Error>;

    fn handle(&mut self, msg: Watch, ctx: &mut Self::Context) -> Self::Result {
        let mut nodes = msg.nodes;
        nodes.sort();
        nodes.dedup();
        let effects = self
            .core
            .watch(msg.lock.clone(), &nodes)
            .map_err(Error::Request)?;
        // The copies watched already have a view: the new stream starts from it, as a first
        // watch starts from the server's answer.
        for node in &nodes {
            if let Some(view) = self.core.watched_view(&msg.lock, node) {
                let _ = msg
                    .tx
                    .unbounded_send((node.clone(), msg.lock.clone(), view.clone()));
            }
        }
        let subs = &mut self.subscriptions;
        let id = subs.next;
        subs.next += 1;
        subs.subs.push(Subscription {
            id,
            lock: msg.lock,
            nodes,
            tx: msg.tx,
        });
        self.execute(effects, ctx);
        Ok(id)
    }
}

/// Stop watching `lock` on `nodes`, for every stream of the transaction.
#[derive(Message)]
#[rtype(result = "Result<(), Error>")]
pub(crate) struct Unwatch {
    pub lock: LockId,
    pub nodes: Vec<NodeId>,
}

impl Handler<Unwatch> for Agent {
    type Result = Result<(), Error>;

    fn handle(&mut self, msg: Unwatch, ctx: &mut Self::Context) -> Self::Result {
        let effects = self
            .core
            .unwatch(&msg.lock, &msg.nodes)
            .map_err(Error::Request)?;
        for sub in &mut self.subscriptions.subs {
            if sub.lock == msg.lock {
                sub.nodes.retain(|n| !msg.nodes.contains(n));
            }
        }
        // A stream with nothing left to watch ends (its sender is dropped here).
        self.subscriptions.subs.retain(|s| !s.nodes.is_empty());
        self.execute(effects, ctx);
        Ok(())
    }
}

/// A watch stream was dropped.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct DropWatch(pub u64);

impl Handler<DropWatch> for Agent {
    type Result = ();

    fn handle(&mut self, msg: DropWatch, ctx: &mut Self::Context) {
        let subs = &mut self.subscriptions.subs;
        let Some(i) = subs.iter().position(|s| s.id == msg.0) else {
            return;
        };
        let sub = subs.swap_remove(i);
        let gone = self.subscriptions.uncovered(&sub.lock, &sub.nodes);
        if gone.is_empty() {
            return;
        }
        if let Ok(effects) = self.core.unwatch(&sub.lock, &gone) {
            self.execute(effects, ctx);
        }
    }
}
