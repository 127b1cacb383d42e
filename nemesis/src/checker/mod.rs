//! The checker: a pure function from a recorded history ([`crate::history`]) to a verdict.
//!
//! It asserts, for the one lock of an experiment:
//! 1. **No overlap**: no two intervals of believed exclusive ownership by different
//!    transactions intersect. A belief starts at `granted` (the node's stamp; not after the
//!    driver ended the transaction, news that crossed the `end`) and ends at
//!    `lost` (the node's stamp), when the driver sent `end`, or when the client's process was
//!    stopped or killed (from then on it can only act through its fenced late write).
//! 2. **Fencing**: every write, in time order, by a transaction that believes it holds the lock
//!    and that no later-granted transaction has overtaken (written before it) is accepted;
//!    every write that such a later-granted transaction overtook is refused.
//! 3. **Availability**: after a fault that takes the holder away, another client is granted
//!    the lock within the bound (heartbeat timeout + lock delay + slack).
//! 4. **Service after heal**: every client is granted the lock after the last heal.
//! 5. **Tokens grow across restarts**: every token a restarted node hands out (in a grant
//!    reported [`RESTART_SETTLE`] after its restart, so no grant of its earlier process still
//!    on its way) is above every token it handed out before the restart, whatever its clock.
//!
//! and measures the time from a fault to its holder being told (`lost`), and how long the lock
//! stays unavailable after a fault removed its holder. [`leader`] checks leader experiments.

pub mod leader;

use crate::clock::{Ns, ms};
use crate::history::{Event, What};
use std::collections::{HashMap, HashSet};

/// The limits the checker holds a history to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// How many clients (one per node) must be served after the last heal.
    pub clients: usize,
    /// The longest a lock may stay unavailable after a fault removed its holder: heartbeat
    /// timeout + lock delay + slack.
    pub unavailable: Ns,
}

/// One interval of believed ownership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Belief {
    /// The transaction.
    pub txn: String,
    /// Its client.
    pub client: usize,
    /// From (`granted`).
    pub start: Ns,
    /// To (`lost`, `end` sent, or the process halted); `None`: still believed at the end.
    pub end: Option<Ns>,
}

impl Belief {
    fn contains(&self, t: Ns) -> bool {
        self.start <= t && self.end.is_none_or(|e| t < e)
    }

    fn overlaps(&self, other: &Belief) -> bool {
        self.start < other.end.unwrap_or(Ns::MAX) && other.start < self.end.unwrap_or(Ns::MAX)
    }
}

/// What the checker found in one history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Faults injected.
    pub faults: usize,
    /// Pairs of beliefs that overlap: (earlier txn, later txn, overlap in ns).
    pub overlaps: Vec<(String, String, Ns)>,
    /// For each fault with a holder: the time until the holder was told it lost the lock
    /// (`None`: never told).
    pub told: Vec<Option<Ns>>,
    /// For each fault that removed a holder: the time until another client was granted the
    /// lock (`None`: never).
    pub unavailable: Vec<Option<Ns>>,
    /// Writes accepted / refused.
    pub writes: (usize, usize),
    /// Every broken assertion, in words.
    pub violations: Vec<String>,
}

impl Verdict {
    /// Whether every assertion held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The beliefs of a history sorted by time.
pub fn beliefs(events: &[Event]) -> Vec<Belief> {
    let mut done = Vec::new();
    let mut open: HashMap<String, Belief> = HashMap::new();
    // Transactions the driver ended, or that lost the lock (the clients end a transaction at
    // its first loss): news of a grant that crossed the `end` or the loss, or a re-grant the
    // client ignores, opens no belief.
    let mut ended: HashSet<&str> = HashSet::new();
    for e in events {
        match &e.what {
            What::EndSent { txn } => {
                ended.insert(txn);
                if let Some(mut b) = open.remove(txn) {
                    b.end = Some(e.t);
                    done.push(b);
                }
            }
            What::Granted { client, txn, .. } if !ended.contains(txn.as_str()) => {
                open.entry(txn.clone()).or_insert_with(|| Belief {
                    txn: txn.clone(),
                    client: *client,
                    start: e.t,
                    end: None,
                });
            }
            What::Lost { txn, .. } => {
                ended.insert(txn);
                if let Some(mut b) = open.remove(txn) {
                    b.end = Some(e.t);
                    done.push(b);
                }
            }
            What::Halted { client } => {
                let of_client: Vec<String> = open
                    .values()
                    .filter(|b| b.client == *client)
                    .map(|b| b.txn.clone())
                    .collect();
                for txn in of_client {
                    if let Some(mut b) = open.remove(&txn) {
                        b.end = Some(e.t);
                        done.push(b);
                    }
                }
            }
            _ => {}
        }
    }
    done.extend(open.into_values());
    done.sort_by(|a, b| (a.start, &a.txn).cmp(&(b.start, &b.txn)));
    done
}

/// Checks a history (in any order; it is sorted by time first) against `bounds`.
pub fn check(history: &[Event], bounds: Bounds) -> Verdict {
    let mut events = history.to_vec();
    events.sort_by_key(|e| e.t);
    let beliefs = beliefs(&events);
    let mut v = Verdict::default();
    overlaps(&beliefs, &mut v);
    writes(&events, &beliefs, &mut v);
    faults(&events, bounds, &mut v);
    served(&events, bounds, &mut v);
    restarts(&events, &mut v);
    v
}

/// How long after a node's restart a grant reported elsewhere may still carry a token of its
/// earlier process (one sent just before the kill): the new process grants nothing for its
/// start-delay anyway.
pub const RESTART_SETTLE: Ns = 200 * crate::clock::MS;

fn restarts(events: &[Event], v: &mut Verdict) {
    let tokens_of = |node: &str, from: Ns, to: Ns| {
        events
            .iter()
            .filter(move |e| e.t >= from && e.t < to)
            .filter_map(|e| match &e.what {
                What::Granted { tokens, .. } => Some(tokens),
                _ => None,
            })
            .flatten()
            .filter(move |(n, _)| n.as_str() == node)
            .map(|(_, version)| *version)
            .collect::<Vec<u64>>()
    };
    for e in events {
        let What::Restarted { node } = &e.what else {
            continue;
        };
        let name = crate::procs::name(*node);
        let Some(&top) = tokens_of(&name, 0, e.t).iter().max() else {
            continue;
        };
        if let Some(low) = tokens_of(&name, e.t + RESTART_SETTLE, Ns::MAX)
            .into_iter()
            .filter(|&t| t <= top)
            .min()
        {
            v.violations.push(format!(
                "{name} restarted and granted at version {low}, not above the {top} it granted                  before"
            ));
        }
    }
}

fn overlaps(beliefs: &[Belief], v: &mut Verdict) {
    for (i, a) in beliefs.iter().enumerate() {
        for b in &beliefs[i + 1..] {
            if a.txn != b.txn && a.overlaps(b) {
                let from = a.start.max(b.start);
                let to = a.end.unwrap_or(Ns::MAX).min(b.end.unwrap_or(Ns::MAX));
                let span = to.saturating_sub(from);
                v.violations.push(format!(
                    "overlap: {} (client {}) and {} (client {}) both believed they held the lock \
                     for {} ms",
                    a.txn,
                    a.client,
                    b.txn,
                    b.client,
                    if to == Ns::MAX {
                        "ever after".to_owned()
                    } else {
                        ms(span)
                    }
                ));
                v.overlaps.push((a.txn.clone(), b.txn.clone(), span));
            }
        }
    }
}

fn writes(events: &[Event], beliefs: &[Belief], v: &mut Verdict) {
    // The latest grant of each transaction so far, and the accepted writes so far (with the
    // grant they were made under).
    let mut granted: HashMap<&str, Ns> = HashMap::new();
    let mut accepted: Vec<(&str, Ns)> = Vec::new();
    for e in events {
        match &e.what {
            What::Granted { txn, .. } => {
                granted.insert(txn, e.t);
            }
            What::Write {
                txn, accepted: ok, ..
            } => {
                if *ok {
                    v.writes.0 += 1;
                } else {
                    v.writes.1 += 1;
                }
                let Some(&grant) = granted.get(txn.as_str()) else {
                    v.violations
                        .push(format!("write by {txn} at {} with no grant before it", e.t));
                    continue;
                };
                let overtaken = accepted.iter().any(|(u, g)| *u != txn && *g > grant);
                let believing = beliefs.iter().any(|b| &b.txn == txn && b.contains(e.t));
                if overtaken && *ok {
                    v.violations.push(format!(
                        "stale write accepted: {txn} wrote after a later holder had written"
                    ));
                }
                if believing && !overtaken && !ok {
                    v.violations.push(format!(
                        "write refused: {txn} held the lock and nobody newer had written"
                    ));
                }
                if *ok {
                    accepted.push((txn, grant));
                }
            }
            _ => {}
        }
    }
}

fn faults(events: &[Event], bounds: Bounds, v: &mut Verdict) {
    for (i, e) in events.iter().enumerate() {
        let What::Fault {
            kind,
            node,
            holder,
            removes_holder,
        } = &e.what
        else {
            continue;
        };
        v.faults += 1;
        let Some(holder) = holder else { continue };
        let later = &events[i + 1..];
        let told = later.iter().find_map(|l| match &l.what {
            What::Lost { txn, .. } if txn == holder => Some(l.t - e.t),
            _ => None,
        });
        v.told.push(told);
        if !removes_holder {
            continue;
        }
        let moved = later.iter().find_map(|l| match &l.what {
            What::Granted { client, .. } if client != node => Some(l.t - e.t),
            _ => None,
        });
        v.unavailable.push(moved);
        match moved {
            None => v.violations.push(format!(
                "{kind} of node {node} (holder {holder}): the lock never moved to another client"
            )),
            Some(d) if d > bounds.unavailable => v.violations.push(format!(
                "{kind} of node {node} (holder {holder}): the lock was unavailable {} ms, more \
                 than the bound of {} ms",
                ms(d),
                ms(bounds.unavailable)
            )),
            Some(_) => {}
        }
    }
}

fn served(events: &[Event], bounds: Bounds, v: &mut Verdict) {
    let healed = events
        .iter()
        .rev()
        .find(|e| e.what == What::Healed)
        .map_or(0, |e| e.t);
    for c in 0..bounds.clients {
        let served = events.iter().any(|e| {
            e.t >= healed && matches!(&e.what, What::Granted { client, .. } if *client == c)
        });
        if !served {
            v.violations.push(format!(
                "client {c} was not granted the lock after the last heal"
            ));
        }
    }
}

#[cfg(test)]
mod tests;
