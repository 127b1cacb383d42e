//! Majority mode: a leader that stays put. A node that comes up (one joining, one rejoining
//! after a crash, one whose members resume after a pause) never deposes a leader that holds
//! its majority; leadership moves only when the leader loses its majority, stops, or its node
//! goes down. Islands mode keeps the original's merge on heal: there the leader extends its
//! request at once, and the deadlock resolution picks one leader for the merged island.
//!
//! **The rule.** While a member is in the `Leader` state in majority mode, a node that comes
//! up is watched (so its members are found, announced to, and follow) but its agent is not
//! told: the election request is not extended to that node, which stays *deferred*. When the
//! member leaves the `Leader` state (it steps down), every deferred node is handed to the
//! agent as if it had just come up, and the request covers it again.
//!
//! **Why it is needed.** Extending the request makes the leader wait on the new node, where a
//! candidate of that node may already hold the lock (a restarted node's candidate takes its
//! own node's lock first; a resumed member still holds it) while it waits for the leader's
//! locks elsewhere: a cycle, which the agents' deadlock resolution breaks by making one of
//! them surrender. If the leader is the one, it loses a node of its majority and steps down,
//! and the newcomer, with stale state, may take over. A request pending on the new node also
//! leaves the leader without all its locks during the new node's start-delay.
//!
//! **Why it is safe** (never two leaders at once in majority mode): leading still needs the
//! lock on a majority of the group's nodes and leases proving it (`majority`); deferring only
//! leaves out nodes beyond that majority. A deferred node's lock may meanwhile be held by
//! another candidate, but that candidate holds at most the nodes outside the leader's
//! majority, which are no majority, so it cannot lead; and followers check an announcement
//! only against the nodes named in the leader's grants. The leader's own grants never grow
//! while it leads, so its term's grants stay what followers accepted.
//!
//! **What it costs.** A leader holds the lock only on the nodes that were up when it took the
//! lead (less those that went down since). A leader that later loses enough of them steps down
//! although it might have held a deferred node's lock; the election then runs over every node
//! up, deferred ones included. Leadership moves then, as it would have on the failure anyway
//! with fewer nodes up.

use super::MemberCore;
use super::State;
use crate::callbacks::Callbacks;
use locks_agent::Req;
use locks_core::{Mode, NodeId};
use tracing::debug;

impl<C: Callbacks> MemberCore<C> {
    /// Whether a node coming up now is kept from the agent (see the module documentation).
    pub(super) fn defers_nodes(&self) -> bool {
        self.s.majority_mode() && matches!(self.s.state, State::Leader { .. })
    }

    /// Tells the agent that `node` is up and extends the election request to it.
    pub(super) fn extend_request(&mut self, node: &NodeId) {
        let Some(agent) = &mut self.s.agent else {
            return;
        };
        let mut effects = agent.node_up(node);
        match agent.request(
            self.s.lock.clone(),
            Mode::WRITE,
            std::slice::from_ref(node),
            Req::AllAlive,
        ) {
            Ok(more) => effects.extend(more),
            Err(e) => {
                debug!(member = %self.s.me, %node, %e, "cannot extend the election request")
            }
        }
        self.agent_effects(effects);
    }

    /// A member that no longer leads hands the nodes it deferred to its agent.
    pub(super) fn undefer(&mut self) {
        if self.defers_nodes() {
            return;
        }
        for node in std::mem::take(&mut self.s.deferred) {
            debug!(member = %self.s.me, %node, "extending the election request to a deferred node");
            self.extend_request(&node);
        }
    }
}
