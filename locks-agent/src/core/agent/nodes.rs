//! What the agent makes of its nodes going down and coming back: a server it cannot reach
//! ([`AgentCore::unreachable`]), a node declared down or whose lease expired
//! ([`AgentCore::node_down_because`]), a lease found not valid before the agent answers
//! ([`AgentCore::check_leases`]), and a node up again ([`AgentCore::node_up`]).
//!
//! Whether a claim on a node still stands given this node's lease there, and what a lock lost
//! with a node down reports, are decided with the rest of the lease rule in
//! `locks_server::lease` (`claim_lost`, `loss_cause`): before every answer the shell asks the
//! router about this node's lease on every remote node the agent's claims rely on, and a node
//! whose claims no longer stand counts as down at once, with the cause `claim_lost` gives.
//!
//! Invariants:
//! - a node counts as down from the first of these inputs until `node_up`, and each is handled
//!   once (a second `node_down` for a node already down changes nothing);
//! - everything learnt from a down node is forgotten, and so is what was forwarded to agents
//!   living there: it is forwarded again once the node is back;
//! - the cause of the first `node_down` is the cause every lock lost with it reports.

use super::{AgentCore, AgentEffect, Phase};
use crate::core::status::LossCause;
use locks_core::proto::ServerRequest;
use locks_core::{LockId, Mode, NodeId};
use locks_server::embed::DownCause;
use locks_server::lease::{self, Lease};

impl AgentCore {
    /// Checks this node's lease on every remote node the agent's claims rely on (`local`: the
    /// agent's own node, which needs none; `lease`: the router's answer for a node), and
    /// treats each node whose claims there no longer stand (`lease::claim_lost`) as down.
    pub fn check_leases(
        &mut self,
        local: &NodeId,
        lease: impl Fn(&NodeId) -> Lease,
    ) -> Vec<AgentEffect> {
        let mut out = Vec::new();
        // Asked before every answer: a transaction on its own node only answers at once.
        if !self.relies_on_remote(local) {
            return out;
        }
        for node in self.claimed_remote_nodes(local) {
            if let Some(cause) = lease::claim_lost(lease(&node)) {
                out.extend(self.node_down_because(&node, cause));
            }
        }
        out
    }

    /// A request to the server of `node` could not be sent (the actor's executor says so): the
    /// node counts as down until [`AgentCore::node_up`].
    pub fn unreachable(&mut self, node: &NodeId) -> Vec<AgentEffect> {
        self.node_down(node)
    }

    /// The server of `node` went down: everything learnt from it is forgotten, requests are not
    /// held there any more, and (without `await_nodes`) requests that can no longer be met make
    /// the status `CannotServe`.
    pub fn node_down(&mut self, node: &NodeId) -> Vec<AgentEffect> {
        self.node_down_because(node, lease::loss_cause(DownCause::Disconnected))
    }

    /// [`AgentCore::node_down`], saying why (what a lost lock reports:
    /// [`LossCause::NodeDown`] or [`LossCause::LeaseExpired`]).
    pub fn node_down_because(&mut self, node: &NodeId, cause: LossCause) -> Vec<AgentEffect> {
        let mut out = Vec::new();
        if self.phase != Phase::Running || !self.down.insert(node.clone()) {
            return out;
        }
        self.down_causes.insert(node.clone(), cause);
        self.knowledge.forget_node(node);
        self.knowledge.clear_excuses();
        self.probes.news();
        self.fail_surrenders(node, &mut out);
        // Views of that node's locks are gone, and so is whatever was forwarded to agents
        // living there that had not arrived: forward it again once the node is back.
        self.knowledge.forget_sent_to(node);
        self.rejected.retain(|(_, n), _| n != node);
        // No answer to what was sent there is coming (`gate.rs`).
        self.trying.retain(|(_, n)| n != node);
        self.dirty = true;
        self.mark_all();
        self.refresh_status(&mut out);
        out
    }

    /// The server of `node` is up (again, or for the first time): every request naming it is
    /// sent to it again (but for the copies a retreat left, asked again on its return:
    /// `gate.rs`). Views forwarded to agents living there before may never have arrived
    /// (there was no connection: an agent can learn of an agent on a node it is not connected
    /// to from a third node's queue), so the next settle analyses and forwards to them again.
    pub fn node_up(&mut self, node: &NodeId) -> Vec<AgentEffect> {
        let mut out = Vec::new();
        if self.phase != Phase::Running {
            return out;
        }
        self.knowledge.forget_sent_to(node);
        self.knowledge.clear_excuses();
        self.probes.news();
        self.dirty = true;
        self.rewatch(node, &mut out);
        if !self.down.remove(node) {
            return out;
        }
        self.down_causes.remove(node);
        let again: Vec<(LockId, Mode)> = self
            .requests
            .values()
            .filter(|r| r.nodes.contains(node) && !self.left_copy(&r.lock, node))
            .map(|r| (r.lock.clone(), r.mode))
            .collect();
        for (lock, mode) in again {
            let msg = ServerRequest::Lock {
                agent: self.id.clone(),
                lock,
                mode,
            };
            self.send(&mut out, node.clone(), msg);
        }
        self.mark_all();
        self.refresh_status(&mut out);
        out
    }
}
