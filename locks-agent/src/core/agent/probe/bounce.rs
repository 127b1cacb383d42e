//! Probes that stop at this agent without being checked, sent back to their victim refuted so
//! that the victim probes again: those through a copy this agent left in a retreat, and those
//! it holds or receives once it is not running any more (ended, or aborted). A probe dropped
//! instead would leave its victim waiting for it for ever whenever the victim holds only a
//! forwarded view of the wait that ended: nobody replaces that view, so the victim sees the
//! same cycle at every analysis and never sends another probe round it.

use super::super::{AgentCore, AgentEffect};
use super::MAX_EDGES;
use locks_core::proto::{AgentMessage, Probe};

impl AgentCore {
    /// A probe whose edge `into` (into this agent) is on a copy this agent left: that wait
    /// ends with the unlock this agent sent there. When the waiter of that edge is the victim,
    /// the probe is dropped: the victim waits behind this agent there, so the server tells it
    /// of the removal, and that news makes it analyse and probe again. Otherwise the probe goes
    /// back to the victim with that edge refuted at the version its waiter confirmed, which
    /// showed this agent there: the victim need not be queued on the copy, nor be told of
    /// anything when the unlock is applied, and would wait for the probe for ever. The refuted
    /// version is older than the unlock's, so a newer view of the waiter's, which shows
    /// whether it still waits there for others, is not excused.
    pub(super) fn refute_left(&self, mut probe: Probe, into: usize, out: &mut Vec<AgentEffect>) {
        if probe.victim() == Some(&probe.edges[into].waiter) {
            return;
        }
        probe.next = into as u32;
        self.send_back(probe, out);
    }

    /// Sends back, refuted, every probe this agent holds (received, or parked for news): it is
    /// not running any more, so it waits for nobody (see [`AgentCore::bounce`]).
    pub(in crate::core::agent) fn bounce_held_probes(&mut self, out: &mut Vec<AgentEffect>) {
        let inbox = std::mem::take(&mut self.probes.inbox);
        let parked = std::mem::take(&mut self.probes.parked);
        for probe in inbox.into_iter().chain(parked) {
            self.bounce(probe, out);
        }
    }

    /// A probe that asks this agent to confirm its edge, now that it is not running any more
    /// (it ended, or aborted on a deadlock): sent back to its victim refuted, as the router
    /// sends back one that arrives once the agent is gone (`locks-server`'s
    /// `node_core/delivery.rs`). Dropped, it would leave the victim waiting for it for ever: the
    /// victim holds the lock of the edge into it, so it is never told that the gone agent's
    /// wait there ended, sees the same cycle at every analysis, and never probes it again.
    /// Malformed probes, and probes already refuted, are dropped as `run_probes` drops them.
    pub(in crate::core::agent) fn bounce(&self, probe: Probe, out: &mut Vec<AgentEffect>) {
        if !probe.is_cycle()
            || probe.edges.len() > MAX_EDGES
            || probe.edges[probe.next as usize].waiter != self.id
        {
            return;
        }
        self.send_back(probe, out);
    }

    /// Sends `probe` back to its victim refuted ([`Probe::refuted_back`]), unless it is
    /// refuted already, this agent is its victim, or the victim's node is down.
    fn send_back(&self, probe: Probe, out: &mut Vec<AgentEffect>) {
        let Some((victim, probe)) = probe.refuted_back() else {
            return;
        };
        if victim == self.id || self.down.contains(victim.node()) {
            return;
        }
        out.push(AgentEffect::ToAgent {
            to: victim,
            msg: AgentMessage::Probe(probe),
        });
    }
}
