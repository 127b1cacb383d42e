//! Leases in the simulation, and the check made after every step in majority mode: at most
//! one member's leases prove that it leads, and every new leadership's term exceeds the
//! earlier ones.
//!
//! A lease of a member's node on another node holds while the two are connected and the member
//! has no node-down of that node still to handle: cutting a connection ends the lease at once
//! on both sides (harsher than the real node layer, where the side that declares the peer down
//! also waits a lock delay before it grants the peer's locks to anyone).

use super::{End, Msg, Sim};
use locks_core::{MemberId, NodeId};
use locks_leader::Term;
use std::collections::BTreeSet;

impl Sim {
    /// Whether the lease of `m`'s node on `n` holds: the nodes are connected and `m` has no
    /// node-down of `n` still to handle (a lease expires with the connection, and the member
    /// hears of it through the event).
    pub fn lease_ok(&self, m: &MemberId, n: &NodeId) -> bool {
        let here = m.node();
        if !self.connected(here, n) {
            return false;
        }
        let (from, to) = (End::Cluster(here.clone()), End::Member(m.clone()));
        !self
            .world
            .net
            .queue(&from, &to)
            .any(|msg| matches!(msg, Msg::NodeDown(x) if x == n))
    }

    /// The members whose leases prove, now, that they lead.
    pub fn proven_leaders(&self) -> Vec<(MemberId, Term)> {
        self.members
            .iter()
            .filter_map(|(m, sm)| {
                let proof = sm.core.leader_proof()?;
                proof
                    .holds(|n| self.lease_ok(m, n))
                    .then(|| (m.clone(), proof.term))
            })
            .collect()
    }

    /// The check after every step: at most one member proves it leads, and a leadership that
    /// starts has a term larger than every earlier one.
    pub(super) fn check_leaders_now(&mut self) {
        let proven = self.proven_leaders();
        assert!(
            proven.len() <= 1,
            "step {}: two leaders believe at once: {proven:?}\n{}",
            self.steps,
            self.describe()
        );
        if let Some((_, term)) = proven.into_iter().next()
            && self.proven_terms.last() != Some(&term)
        {
            assert!(
                self.proven_terms.iter().all(|t| t < &term),
                "step {}: term {term} does not exceed the earlier {:?}",
                self.steps,
                self.proven_terms
            );
            self.proven_terms.push(term);
        }
    }

    /// Lets member `m` check its leases before an input, as the actor does.
    pub(super) fn check_leases(&mut self, m: &MemberId) {
        let now = self.now;
        let ok: BTreeSet<NodeId> = self
            .world
            .tables
            .nodes()
            .filter(|n| self.lease_ok(m, n))
            .cloned()
            .collect();
        if let Some(sm) = self.members.get_mut(m) {
            let effects = sm.core.check_leases(|n| ok.contains(n), now);
            self.execute(m, effects);
        }
    }
}
