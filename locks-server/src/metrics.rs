//! What a node records through the [`metrics`] facade: the names, their help texts and the
//! handles the node records with.
//!
//! The libraries only record; the application picks the exporter by installing a recorder
//! (`metrics::set_global_recorder`, or an exporter's `install`). **Install it before starting
//! nodes**: every handle a node records with is registered once, when the node starts (its
//! router is made) or a link to a peer opens, and stays bound to the recorder that was
//! installed then. A node started before any recorder records nothing, ever (its handles are
//! no-ops, which cost next to nothing). `docs/metrics.md` lists every metric with its type,
//! labels and meaning.
//!
//! # Why handles, and what is sampled
//!
//! The uncontended local transaction (begin, lock, end on the caller's thread) takes a microsecond
//! or two, so it pays only what an atomic add costs: the two transaction counters, through
//! [`Counter`] handles registered once per node (the `counter!` macro would look its key up on
//! every call). Nothing records per grant on that path: the gauges of locks held, granted and
//! waiting per mode, and the gauge of peers up, are sampled from the node's own state once per
//! [`SAMPLE_INTERVAL`] by a task on the node's thread (`sample_metrics` in `node.rs`), which
//! counts the table's records a slice at a time (`table/census.rs`: a short hold of the table's
//! mutex per slice). The wait-time histogram records only the `lock` calls that went through
//! the transaction's agent (waited, or asked other nodes): a fast-path grant does not wait.
//!
//! # Labels
//!
//! Every metric carries `node` (the node's name: a process runs few nodes). Per-mode gauges
//! add `mode` (six values), link metrics `peer` (the peer node's name: peers are few, and at
//! most [`MAX_PEER_SERIES`] names get a series of their own, the rest `other`), the
//! others a fixed set of values (`cause`, `reason`, `kind`, `direction`). Nothing is ever
//! labelled by a lock id or an agent id.

use crate::node_core::peer_check::PeerFault;
use crate::table::Census;
use locks_core::proto::Quota;
use locks_core::{LossCause, Mode, NodeId};
use metrics::{
    Counter, Gauge, Histogram, Unit, counter, describe_counter, describe_gauge, describe_histogram,
    gauge, histogram,
};
use std::time::Duration;

/// How often a node samples its gauges (locks per mode, peers up).
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Transactions begun (counter).
pub const TRANSACTIONS_BEGUN: &str = "locks_transactions_begun_total";
/// Transactions ended, by `end` or by dropping the handle (counter).
pub const TRANSACTIONS_ENDED: &str = "locks_transactions_ended_total";
/// Lock ids with at least one holder, by the group mode of their holders (gauge).
pub const HELD: &str = "locks_held";
/// Granted entries (one per holder and lock, intention modes on ancestors included), by mode
/// (gauge).
pub const GRANTED: &str = "locks_granted";
/// Entries waiting or converting, by the mode they wait for (gauge).
pub const WAITING: &str = "locks_waiting";
/// Seconds from a `lock` call to its grant, for calls that went through the agent (histogram).
pub const WAIT_SECONDS: &str = "locks_wait_seconds";
/// Deadlocks detected: cycles a victim saw and sent a probe round (counter).
pub const DEADLOCKS_DETECTED: &str = "locks_deadlocks_detected_total";
/// Deadlocks resolved: confirmed cycles whose victim surrendered or aborted (counter).
pub const DEADLOCKS_RESOLVED: &str = "locks_deadlocks_resolved_total";
/// Surrenders sent, by `kind`: `deadlock` (a victim's) or `voluntary` (`surrender_nowait`)
/// (counter).
pub const SURRENDERS: &str = "locks_surrenders_total";
/// Deadlock surrenders the lock server ignored: a wait of the cycle had ended, or (for a cycle
/// through another node) the lock had changed since the victim's view; nothing moved (the
/// victim's client was told of the loss when it decided, and is told the lock is held again)
/// (counter).
pub const SURRENDERS_IGNORED: &str = "locks_surrenders_ignored_total";
/// Transactions aborted as deadlock victims (`abort_on_deadlock`) (counter).
pub const ABORTS: &str = "locks_aborts_total";
/// Claimed locks lost, by `cause` (counter).
pub const LOST: &str = "locks_lost_total";
/// Peers connected now (gauge).
pub const PEERS_UP: &str = "locks_peers_up";
/// Failed handshakes, by `reason` (counter).
pub const HANDSHAKES_REFUSED: &str = "locks_handshakes_refused_total";
/// Heartbeat round trips on a link, by `peer` (histogram).
pub const LINK_RTT_SECONDS: &str = "locks_link_rtt_seconds";
/// Envelopes sent or received on a link, by `peer` and `direction` (counter).
pub const LINK_MESSAGES: &str = "locks_link_messages_total";
/// Frame bytes sent or received on a link (envelopes and heartbeats, without the length
/// prefix), by `peer` and `direction` (counter).
pub const LINK_BYTES: &str = "locks_link_bytes_total";

/// Messages from peers refused because the peer may not send them, by `reason` (a
/// [`PeerFault`] name) (counter).
pub const PEER_MESSAGES_REFUSED: &str = "locks_peer_messages_refused_total";

/// `Lock` requests of peers' agents refused because they would pass a per-peer quota, by
/// `quota` (`locks`, `queued` or `bytes`: see [`PeerQuotas`](crate::PeerQuotas)) (counter).
pub const PEER_REQUESTS_REFUSED: &str = "locks_peer_requests_refused_total";

/// The causes of [`LOST`]: the names of [`LossCause::ALL`], in its order.
pub const LOST_CAUSES: [&str; LossCause::COUNT] = {
    let mut names = [""; LossCause::COUNT];
    let mut i = 0;
    while i < LossCause::COUNT {
        names[i] = LossCause::ALL[i].name();
        i += 1;
    }
    names
};

/// The reasons of [`HANDSHAKES_REFUSED`]: the fields of
/// [`HandshakeRefusals`](crate::HandshakeRefusals).
pub const REFUSAL_REASONS: [&str; 13] = [
    "wrong_cookie",
    "wrong_version",
    "duplicate_name",
    "malformed",
    "timeout",
    "closed",
    "by_peer",
    "evicted",
    "tls_not_tls",
    "tls_untrusted",
    "tls_expired",
    "tls_node_name",
    "tls_other",
];

/// The quotas of [`PEER_REQUESTS_REFUSED`], in label order.
const QUOTAS: [Quota; 3] = [Quota::Locks, Quota::Queued, Quota::Bytes];

/// Gives every metric of this module its help text and unit, on the recorder installed now.
/// Nodes call it when they start; an application may call it earlier (describing twice is
/// harmless).
pub fn describe() {
    describe_counter!(TRANSACTIONS_BEGUN, "Transactions begun.");
    describe_counter!(
        TRANSACTIONS_ENDED,
        "Transactions ended, by end() or by dropping the handle."
    );
    describe_gauge!(
        HELD,
        "Lock ids with at least one holder on this node, by the group mode of their holders (sampled)."
    );
    describe_gauge!(
        GRANTED,
        "Granted entries on this node (one per holder and lock, intention modes on ancestors included), by mode (sampled)."
    );
    describe_gauge!(
        WAITING,
        "Entries waiting or converting on this node, by the mode they wait for (sampled)."
    );
    describe_histogram!(
        WAIT_SECONDS,
        Unit::Seconds,
        "Time from a lock call to its grant, for calls that went through the transaction's agent (not the fast path)."
    );
    describe_counter!(
        DEADLOCKS_DETECTED,
        "Deadlocks detected: cycles a victim saw and sent a probe round."
    );
    describe_counter!(
        DEADLOCKS_RESOLVED,
        "Deadlocks resolved: confirmed cycles whose victim surrendered a lock or aborted."
    );
    describe_counter!(
        SURRENDERS,
        "Surrenders sent, by kind: deadlock (a victim's) or voluntary (surrender_nowait)."
    );
    describe_counter!(
        SURRENDERS_IGNORED,
        "Deadlock surrenders the lock server ignored because the cycle was already broken (or, for a cycle through another node, the lock had changed)."
    );
    describe_counter!(
        ABORTS,
        "Transactions aborted as deadlock victims (abort_on_deadlock)."
    );
    describe_counter!(
        LOST,
        "Locks the client was told it holds and then lost, by cause."
    );
    describe_gauge!(PEERS_UP, "Peers connected to this node (sampled).");
    describe_counter!(HANDSHAKES_REFUSED, "Failed handshakes, by reason.");
    describe_counter!(
        PEER_MESSAGES_REFUSED,
        "Messages from peers refused because the peer may not send them (it spoke for another node, or carried an impossible version), by reason."
    );
    describe_counter!(
        PEER_REQUESTS_REFUSED,
        "Lock requests of peers' agents refused because they would pass a per-peer quota, by quota."
    );
    describe_histogram!(
        LINK_RTT_SECONDS,
        Unit::Seconds,
        "Heartbeat round trip on the link to a peer."
    );
    describe_counter!(
        LINK_MESSAGES,
        "Envelopes sent or received on the link to a peer."
    );
    describe_counter!(
        LINK_BYTES,
        Unit::Bytes,
        "Frame bytes sent or received on the link to a peer (envelopes and heartbeats)."
    );
}

/// The handles a node records with, registered once when its router is made (see the module
/// documentation). Reached through the router (`Router::metrics`).
#[derive(Debug)]
pub struct NodeMetrics {
    /// [`TRANSACTIONS_BEGUN`].
    pub transactions_begun: Counter,
    /// [`TRANSACTIONS_ENDED`].
    pub transactions_ended: Counter,
    /// [`WAIT_SECONDS`].
    pub wait_seconds: Histogram,
    /// [`DEADLOCKS_DETECTED`].
    pub deadlocks_detected: Counter,
    /// [`DEADLOCKS_RESOLVED`].
    pub deadlocks_resolved: Counter,
    /// [`SURRENDERS`] of kind `deadlock`.
    pub surrenders_deadlock: Counter,
    /// [`SURRENDERS`] of kind `voluntary`.
    pub surrenders_voluntary: Counter,
    /// [`SURRENDERS_IGNORED`].
    pub surrenders_ignored: Counter,
    /// [`ABORTS`].
    pub aborts: Counter,
    lost: [Counter; LOST_CAUSES.len()],
    refused: [Counter; REFUSAL_REASONS.len()],
    peer_refused: [Counter; PeerFault::ALL.len()],
    quota_refused: [Counter; 3],
    peers_up: Gauge,
    held: [Gauge; Mode::COUNT],
    granted: [Gauge; Mode::COUNT],
    waiting: [Gauge; Mode::COUNT],
}

impl NodeMetrics {
    /// Registers the handles of node `node` with the recorder installed now, and describes the
    /// metrics to it (again at every node start: the recorder may be new).
    pub fn register(node: &NodeId) -> NodeMetrics {
        describe();
        let n = node.as_str().to_owned();
        let per_mode = |name: &'static str| {
            Mode::ALL.map(|m| gauge!(name, "node" => n.clone(), "mode" => m.name().to_owned()))
        };
        NodeMetrics {
            transactions_begun: counter!(TRANSACTIONS_BEGUN, "node" => n.clone()),
            transactions_ended: counter!(TRANSACTIONS_ENDED, "node" => n.clone()),
            wait_seconds: histogram!(WAIT_SECONDS, "node" => n.clone()),
            deadlocks_detected: counter!(DEADLOCKS_DETECTED, "node" => n.clone()),
            deadlocks_resolved: counter!(DEADLOCKS_RESOLVED, "node" => n.clone()),
            surrenders_deadlock: counter!(SURRENDERS, "node" => n.clone(), "kind" => "deadlock"),
            surrenders_voluntary: counter!(SURRENDERS, "node" => n.clone(), "kind" => "voluntary"),
            surrenders_ignored: counter!(SURRENDERS_IGNORED, "node" => n.clone()),
            aborts: counter!(ABORTS, "node" => n.clone()),
            lost: LOST_CAUSES.map(|c| counter!(LOST, "node" => n.clone(), "cause" => c)),
            refused: REFUSAL_REASONS
                .map(|r| counter!(HANDSHAKES_REFUSED, "node" => n.clone(), "reason" => r)),
            peer_refused: PeerFault::ALL.map(
                |f| counter!(PEER_MESSAGES_REFUSED, "node" => n.clone(), "reason" => f.name()),
            ),
            quota_refused: QUOTAS
                .map(|q| counter!(PEER_REQUESTS_REFUSED, "node" => n.clone(), "quota" => q.name())),
            peers_up: gauge!(PEERS_UP, "node" => n.clone()),
            held: per_mode(HELD),
            granted: per_mode(GRANTED),
            waiting: per_mode(WAITING),
        }
    }

    /// Counts a lost lock in the series of its cause.
    pub fn lost(&self, cause: LossCause) {
        self.lost[cause.index()].increment(1);
    }

    /// Counts a failed handshake; `reason` is one of [`REFUSAL_REASONS`] (anything else counts
    /// as `closed`).
    pub fn refused(&self, reason: &str) {
        let i = REFUSAL_REASONS
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(5);
        self.refused[i].increment(1);
    }

    /// Counts a message from a peer refused for `fault`.
    pub fn peer_refused(&self, fault: PeerFault) {
        self.peer_refused[fault.index()].increment(1);
    }

    /// Counts a peer's request refused for `quota`.
    pub fn quota_refused(&self, quota: Quota) {
        let i = QUOTAS.iter().position(|q| *q == quota).unwrap_or(0);
        self.quota_refused[i].increment(1);
    }

    /// Sets the sampled gauges from a count of the table and the number of peers up.
    pub(crate) fn set_sampled(&self, census: &Census, peers_up: usize) {
        for m in Mode::ALL {
            let i = m.index();
            self.held[i].set(census.held[i] as f64);
            self.granted[i].set(census.granted[i] as f64);
            self.waiting[i].set(census.waiting[i] as f64);
        }
        self.peers_up.set(peers_up as f64);
    }
}

/// How many peer names one process labels link metrics with; the links of any further peer
/// count under `peer="other"`. A peer that reconnects reuses its series, so this bounds what a
/// stream of new names (each with the cookie) can add to the exposition.
pub const MAX_PEER_SERIES: usize = 256;

/// The peer names link metrics are labelled with so far, with the node they are seen from.
static PEER_SERIES: std::sync::Mutex<Option<std::collections::HashSet<(String, String)>>> =
    std::sync::Mutex::new(None);

/// The `peer` label of `peer`'s link from `node`: its name, or `other` once
/// [`MAX_PEER_SERIES`] names have a series.
fn peer_label(node: &str, peer: &str) -> String {
    let mut seen = PEER_SERIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let seen = seen.get_or_insert_with(Default::default);
    let key = (node.to_owned(), peer.to_owned());
    if seen.contains(&key) || seen.len() < MAX_PEER_SERIES {
        seen.insert(key);
        peer.to_owned()
    } else {
        "other".to_owned()
    }
}

/// The handles of one link, registered when it opens (labelled by the peer's name).
#[derive(Debug)]
pub(crate) struct LinkMetrics {
    pub sent_messages: Counter,
    pub sent_bytes: Counter,
    pub received_messages: Counter,
    pub received_bytes: Counter,
    pub rtt: Histogram,
}

impl LinkMetrics {
    /// The handles of the link from `node` to `peer`.
    pub fn register(node: &NodeId, peer: &NodeId) -> LinkMetrics {
        let (n, p) = (
            node.as_str().to_owned(),
            peer_label(node.as_str(), peer.as_str()),
        );
        let dir = |name: &'static str, direction: &'static str| counter!(name, "node" => n.clone(), "peer" => p.clone(), "direction" => direction);
        LinkMetrics {
            sent_messages: dir(LINK_MESSAGES, "sent"),
            sent_bytes: dir(LINK_BYTES, "sent"),
            received_messages: dir(LINK_MESSAGES, "received"),
            received_bytes: dir(LINK_BYTES, "received"),
            rtt: histogram!(LINK_RTT_SECONDS, "node" => n.clone(), "peer" => p.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_names_beyond_the_bound_share_one_series() {
        let labels: Vec<String> = (0..MAX_PEER_SERIES + 50)
            .map(|i| peer_label("bound-test", &format!("p{i}")))
            .collect();
        let own = labels.iter().filter(|l| *l != "other").count();
        assert!(own <= MAX_PEER_SERIES);
        assert!(labels.iter().rev().take(50).all(|l| l == "other"));
        // A name that has its series keeps it.
        if labels[0] == "p0" {
            assert_eq!(peer_label("bound-test", "p0"), "p0");
        }
    }
}
