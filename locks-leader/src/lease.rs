//! The one place that asks the node layer whether a lease on a peer still holds.
//!
//! A majority-mode leader answers only while its leases on a majority of the group's nodes
//! are valid (see [`crate::core::LeaderProof`]). The node layer's link leases
//! (`locks_server::lease`) say how long a node's claim on a peer holds: until the send time of
//! the last acknowledged ping plus the lease; a node that declares a peer down keeps that
//! peer's agents' locks held by nobody for a lock-delay longer than the lease, so the election
//! lock of a cut-off leader is granted to nobody else before that leader's own lease has
//! expired. An expiry seen here is final for that link.

use crate::core::LeaderProof;
use locks_core::NodeId;
use locks_server::embed::Port;
use std::sync::{Arc, RwLock};

/// What a leader's claim rests on, shared by the member's actor (which writes it after every
/// input) and its handles (which check it against the leases when asked).
pub(crate) type SharedProof = Arc<RwLock<Option<LeaderProof>>>;

/// Whether this node's lease on `node` is valid now (true for the node itself; false when not
/// connected).
pub(crate) fn lease_valid(router: &Port, node: &NodeId) -> bool {
    router.lease_valid(node)
}
