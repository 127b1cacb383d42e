//! Watching locks without queueing on them (the Erlang original's `watch/2`, `unwatch/2`).
//!
//! The core keeps, for each watched `(lock, node)`, the newest view the lock server sent, and
//! passes a view on ([`AgentEffect::Watched`]) only when it is newer than the last one passed on:
//! views of one copy reach the client in version order, each once, though the server answers
//! every `Watch` (a repeated one, or the one sent again when a node comes back) with its
//! current view.
//!
//! Invariants:
//! - a `Watch` is sent for every watched copy whose node is not known to be down, once when the
//!   watch begins and again whenever the node comes up (its server forgot the watch if it saw
//!   this agent's node go down); an `Unwatch` when the watch ends;
//! - views of copies not watched (late ones, after `unwatch`) are dropped;
//! - watching changes nothing of the transaction's requests, knowledge or status.

use super::{AgentCore, AgentEffect};
use crate::core::error::RequestError;
use locks_core::proto::{LockView, ServerRequest};
use locks_core::{LockId, NodeId};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The watched copies, each with the newest view passed on (none before the first).
#[derive(Clone, Debug, Default)]
pub(super) struct Watches(BTreeMap<(LockId, NodeId), Option<Arc<LockView>>>);

impl AgentCore {
    /// Starts watching `lock` on `nodes` (the ones not watched yet): `Watch` goes to each of them
    /// that is not known to be down, and each server answers with the lock's queue now and
    /// after every change, passed on as [`AgentEffect::Watched`].
    pub fn watch(
        &mut self,
        lock: LockId,
        nodes: &[NodeId],
    ) -> Result<Vec<AgentEffect>, RequestError> {
        self.check_running()?;
        if nodes.is_empty() {
            return Err(RequestError::NoNodes { lock });
        }
        let mut out = Vec::new();
        for node in nodes {
            let key = (lock.clone(), node.clone());
            if self.watches.0.contains_key(&key) {
                continue;
            }
            self.watches.0.insert(key, None);
            if !self.down.contains(node) {
                let msg = ServerRequest::Watch {
                    watcher: self.id.clone(),
                    lock: lock.clone(),
                };
                self.send(&mut out, node.clone(), msg);
            }
        }
        Ok(out)
    }

    /// Stops watching `lock` on `nodes`: `Unwatch` goes to each watched one that is not known to
    /// be down; views of it that arrive later are dropped. Nodes not watched are ignored.
    pub fn unwatch(
        &mut self,
        lock: &LockId,
        nodes: &[NodeId],
    ) -> Result<Vec<AgentEffect>, RequestError> {
        self.check_running()?;
        let mut out = Vec::new();
        for node in nodes {
            if self
                .watches
                .0
                .remove(&(lock.clone(), node.clone()))
                .is_some()
                && !self.down.contains(node)
            {
                let msg = ServerRequest::Unwatch {
                    watcher: self.id.clone(),
                    lock: lock.clone(),
                };
                self.send(&mut out, node.clone(), msg);
            }
        }
        Ok(out)
    }

    /// Whether `lock` is watched on `node`.
    pub fn is_watching(&self, lock: &LockId, node: &NodeId) -> bool {
        self.watches.0.contains_key(&(lock.clone(), node.clone()))
    }

    /// The newest view of a watched lock on `node` passed on so far, if any.
    pub fn watched_view(&self, lock: &LockId, node: &NodeId) -> Option<&Arc<LockView>> {
        self.watches
            .0
            .get(&(lock.clone(), node.clone()))
            .and_then(Option::as_ref)
    }

    /// A view of a watched lock from its server: kept and passed on if it is newer than the
    /// last one passed on.
    pub(super) fn on_watched(
        &mut self,
        node: NodeId,
        lock: LockId,
        view: Arc<LockView>,
        out: &mut Vec<AgentEffect>,
    ) {
        if self.down.contains(&node) {
            return;
        }
        let Some(last) = self.watches.0.get_mut(&(lock.clone(), node.clone())) else {
            return;
        };
        if last.as_ref().is_some_and(|l| l.version >= view.version) {
            return;
        }
        *last = Some(view.clone());
        out.push(AgentEffect::Watched { node, lock, view });
    }

    /// The server of `node` is up: every lock watched there is watched again (a server that saw
    /// this agent's node go down dropped its watches; one that did not answers with its
    /// current view, which is dropped unless it is newer).
    pub(super) fn rewatch(&mut self, node: &NodeId, out: &mut Vec<AgentEffect>) {
        let locks: Vec<LockId> = self
            .watches
            .0
            .keys()
            .filter(|(_, n)| n == node)
            .map(|(l, _)| l.clone())
            .collect();
        for lock in locks {
            let msg = ServerRequest::Watch {
                watcher: self.id.clone(),
                lock,
            };
            self.send(out, node.clone(), msg);
        }
    }
}
