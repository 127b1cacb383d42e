//! The checker of leader experiments: gdict replicas (one per node) electing a leader while
//! faults hit the leader.
//!
//! It asserts:
//! 1. **One leader**: no two nodes believe they lead at the same time. A node believes it leads
//!    from the line naming itself leader until a line naming another leader or none, or until
//!    its process is stopped or killed. A stopped process says nothing; once continued, it
//!    believes what it says next (the driver asks it at once, `leader <d>`), so a replica that
//!    still claims to lead after a pause is caught.
//! 2. **No confirmed write lost**: every write the driver saw confirmed (`stored`) is read back
//!    with its value from every replica at the end.
//! 3. **Agreement after heal**: at the end every replica follows the same leader.
//! 4. **Terms grow across restarts**: after every process was killed and started again, every
//!    leader's epoch is above every epoch a leader had before (the replicas keep their data in
//!    memory, so the writes confirmed before such a restart are not asked for after it).
//!
//! and measures the time from a fault against the leader to another node believing it leads.

use crate::clock::{Ns, ms};
use crate::history::{LeaderEvent, LeaderWhat};
use std::collections::{BTreeMap, HashMap};

/// What the checker found in one leader history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderVerdict {
    /// Faults injected.
    pub faults: usize,
    /// Pairs of nodes that believed they led at once: (node, node, overlap in ns).
    pub overlaps: Vec<(usize, usize, Ns)>,
    /// Writes confirmed.
    pub confirmed: usize,
    /// Confirmed writes missing from some replica at the end.
    pub lost: usize,
    /// For each fault: the time until another node believed it led (`None`: never).
    pub failover: Vec<Option<Ns>>,
    /// Every broken assertion, in words.
    pub violations: Vec<String>,
}

impl LeaderVerdict {
    /// Whether every assertion held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The intervals in which each node believed it led: (node, from, to or `None`).
pub fn leads(events: &[LeaderEvent]) -> Vec<(usize, Ns, Option<Ns>)> {
    let mut open: BTreeMap<usize, Ns> = BTreeMap::new();
    let mut done = Vec::new();
    for e in events {
        match &e.what {
            LeaderWhat::Follows { node, leader } if *leader == Some(*node) => {
                open.entry(*node).or_insert(e.t);
            }
            LeaderWhat::Follows { node, .. } | LeaderWhat::Halted { node } => {
                if let Some(from) = open.remove(node) {
                    done.push((*node, from, Some(e.t)));
                }
            }
            _ => {}
        }
    }
    done.extend(open.into_iter().map(|(n, from)| (n, from, None)));
    done.sort_by_key(|&(n, from, _)| (from, n));
    done
}

/// Checks a leader history of `nodes` replicas (in any order; it is sorted by time first).
pub fn check_leader(history: &[LeaderEvent], nodes: usize) -> LeaderVerdict {
    let mut events = history.to_vec();
    events.sort_by_key(|e| e.t);
    let mut v = LeaderVerdict::default();
    let intervals = leads(&events);
    for (i, &(a, a_from, a_to)) in intervals.iter().enumerate() {
        for &(b, b_from, b_to) in &intervals[i + 1..] {
            let (a_end, b_end) = (a_to.unwrap_or(Ns::MAX), b_to.unwrap_or(Ns::MAX));
            if a != b && a_from < b_end && b_from < a_end {
                let span = a_end.min(b_end).saturating_sub(a_from.max(b_from));
                v.violations.push(format!(
                    "two leaders: n{} and n{} both believed they led for {} ms",
                    a + 1,
                    b + 1,
                    if a_end.min(b_end) == Ns::MAX {
                        "ever after".to_owned()
                    } else {
                        ms(span)
                    }
                ));
                v.overlaps.push((a, b, span));
            }
        }
    }
    let mut confirmed: BTreeMap<&str, i64> = BTreeMap::new();
    let mut read: HashMap<(usize, &str), Option<i64>> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        match &e.what {
            LeaderWhat::Confirmed { key, value } => {
                confirmed.insert(key, *value);
            }
            LeaderWhat::RestartedAll => confirmed.clear(),
            LeaderWhat::Read { node, key, value } => {
                read.insert((*node, key), *value);
            }
            LeaderWhat::Fault { node, .. } => {
                v.faults += 1;
                let other = events[i + 1..].iter().find_map(|l| match &l.what {
                    LeaderWhat::Follows {
                        node: n,
                        leader: Some(x),
                    } if n == x && x != node => Some(l.t - e.t),
                    _ => None,
                });
                v.failover.push(other);
            }
            _ => {}
        }
    }
    v.confirmed = confirmed.len();
    for (key, value) in &confirmed {
        let missing: Vec<String> = (0..nodes)
            .filter(|n| read.get(&(*n, *key)).copied().flatten() != Some(*value))
            .map(|n| format!("n{}", n + 1))
            .collect();
        if !missing.is_empty() {
            v.lost += 1;
            v.violations.push(format!(
                "confirmed write {key}={value} missing on {}",
                missing.join(",")
            ));
        }
    }
    terms_grow(&events, &mut v);
    let mut last: BTreeMap<usize, Option<usize>> = BTreeMap::new();
    for e in &events {
        if let LeaderWhat::Follows { node, leader } = &e.what {
            last.insert(*node, *leader);
        }
    }
    let finals: Vec<Option<usize>> = (0..nodes)
        .map(|n| last.get(&n).copied().flatten())
        .collect();
    if finals.iter().any(|l| l.is_none() || *l != finals[0]) {
        v.violations.push(format!(
            "the replicas do not follow one leader at the end: {finals:?}"
        ));
    }
    v
}

/// Assertion 4: every epoch a leader announces after a whole restart is above every epoch
/// announced before it.
fn terms_grow(events: &[LeaderEvent], v: &mut LeaderVerdict) {
    let mut before: Option<u64> = None;
    let mut floor: Option<u64> = None;
    for e in events {
        match &e.what {
            LeaderWhat::RestartedAll => floor = before.max(floor),
            LeaderWhat::Leads { node, epoch } => {
                if let Some(f) = floor.filter(|f| epoch <= f) {
                    v.violations.push(format!(
                        "n{} leads with epoch {epoch} after a restart of every node, not above {f}",
                        node + 1
                    ));
                }
                before = before.max(Some(*epoch));
            }
            _ => {}
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::MS;

    fn at(t: u64, what: LeaderWhat) -> LeaderEvent {
        LeaderEvent { t: t * MS, what }
    }

    fn follows(t: u64, node: usize, leader: usize) -> LeaderEvent {
        at(
            t,
            LeaderWhat::Follows {
                node,
                leader: Some(leader),
            },
        )
    }

    fn none(t: u64, node: usize) -> LeaderEvent {
        at(t, LeaderWhat::Follows { node, leader: None })
    }

    fn read(t: u64, node: usize, key: &str, value: Option<i64>) -> LeaderEvent {
        at(
            t,
            LeaderWhat::Read {
                node,
                key: key.into(),
                value,
            },
        )
    }

    /// n1 leads; it is cut off, steps down at 900, n2 leads from 1200; k1 confirmed before,
    /// k2 during; all read back.
    fn good() -> Vec<LeaderEvent> {
        let mut h = vec![
            follows(0, 0, 0),
            follows(1, 1, 0),
            follows(1, 2, 0),
            at(
                10,
                LeaderWhat::Confirmed {
                    key: "k1".into(),
                    value: 1,
                },
            ),
            at(
                100,
                LeaderWhat::Fault {
                    kind: "isolate".into(),
                    node: 0,
                },
            ),
            none(900, 0),
            none(950, 1),
            none(950, 2),
            follows(1200, 1, 1),
            follows(1201, 2, 1),
            at(
                1300,
                LeaderWhat::Confirmed {
                    key: "k2".into(),
                    value: 2,
                },
            ),
            at(2000, LeaderWhat::Healed),
            follows(2100, 0, 1),
        ];
        for n in 0..3 {
            h.push(read(3000, n, "k1", Some(1)));
            h.push(read(3000, n, "k2", Some(2)));
        }
        h
    }

    /// Takes n1's step-down out of a history: from then on it goes on saying it leads.
    fn forget_the_step_down(h: &mut Vec<LeaderEvent>) {
        h.retain(|e| {
            e.what
                != LeaderWhat::Follows {
                    node: 0,
                    leader: None,
                }
        });
    }

    #[test]
    fn a_clean_failover_passes() {
        let v = check_leader(&good(), 3);
        assert_eq!(v.violations, Vec::<String>::new());
        assert_eq!(v.failover, vec![Some(1100 * MS)]);
        assert_eq!((v.confirmed, v.lost), (2, 0));
    }

    #[test]
    fn an_old_leader_that_never_steps_down_is_a_second_leader() {
        let mut h = good();
        forget_the_step_down(&mut h);
        h.push(follows(2050, 0, 0));
        let v = check_leader(&h, 3);
        assert_eq!(v.overlaps, vec![(0, 1, 900 * MS)]);
        assert!(
            v.violations[0].starts_with("two leaders: n1 and n2"),
            "{v:?}"
        );
    }

    #[test]
    fn a_halted_leader_believes_nothing() {
        let mut h = good();
        forget_the_step_down(&mut h);
        h.push(at(150, LeaderWhat::Halted { node: 0 }));
        assert!(check_leader(&h, 3).passed());
    }

    #[test]
    fn a_resumed_leader_believes_what_it_says_next() {
        let paused = |answer: Option<usize>| {
            let mut h = good();
            forget_the_step_down(&mut h);
            h.push(at(150, LeaderWhat::Halted { node: 0 }));
            h.push(at(1500, LeaderWhat::Resumed { node: 0 }));
            h.push(at(
                1510,
                LeaderWhat::Follows {
                    node: 0,
                    leader: answer,
                },
            ));
            h.push(none(1600, 0));
            check_leader(&h, 3)
        };
        assert!(paused(None).passed());
        assert_eq!(paused(Some(0)).overlaps, vec![(1, 0, 90 * MS)]);
    }

    #[test]
    fn a_confirmed_write_missing_anywhere_is_lost() {
        let mut h = good();
        h.push(read(3001, 2, "k2", None));
        let v = check_leader(&h, 3);
        assert_eq!(v.lost, 1);
        assert_eq!(
            v.violations,
            vec!["confirmed write k2=2 missing on n3".to_owned()]
        );
    }

    #[test]
    fn replicas_that_end_apart_are_a_violation() {
        let mut h = good();
        h.push(none(2200, 2));
        let v = check_leader(&h, 3);
        assert_eq!(v.violations.len(), 1);
        assert!(v.violations[0].contains("one leader at the end"), "{v:?}");
    }

    #[test]
    fn a_term_not_above_every_earlier_one_after_a_whole_restart_is_a_violation() {
        let leads = |t, node, epoch| at(t, LeaderWhat::Leads { node, epoch });
        let run = |after: u64| {
            let h = vec![
                follows(10, 0, 0),
                follows(10, 1, 0),
                follows(10, 2, 0),
                leads(10, 0, 50),
                at(20, LeaderWhat::RestartedAll),
                leads(30, 1, after),
                follows(30, 0, 1),
                follows(30, 1, 1),
                follows(30, 2, 1),
            ];
            check_leader(&h, 3)
        };
        assert!(run(51).violations.is_empty(), "{:?}", run(51));
        let v = run(50);
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert!(
            v.violations[0].contains("epoch 50 after a restart"),
            "{v:?}"
        );
    }
}
