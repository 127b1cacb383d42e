//! The driver of a leader scenario: a gdict replica (`locks-leader`) on every node, a writer
//! that stores a new key through a different node every 50 ms, faults against the node that
//! believes it leads, and at the end a read of every confirmed key on every replica. The
//! history goes to [`crate::checker::leader`].

use crate::checker::leader::{LeaderVerdict, check_leader};
use crate::clock::{MS, Ns, now};
use crate::cluster::Cluster;
use crate::history::{LeaderEvent, LeaderWhat, NodeLine};
use crate::interrupt::interrupted;
use crate::net::Net;
use crate::procs::NodeSpec;
use crate::scenario::{Fault, Profile};
use std::collections::{BTreeMap, HashMap};

const WAIT: Ns = 20_000 * MS;
const WRITE_EVERY: Ns = 50 * MS;
const DICT: &str = "d";

/// One leader scenario's run.
pub struct LeaderDriver<'a> {
    cluster: Cluster<'a>,
    /// What each node last said it follows (`None`: nothing yet).
    follows: Vec<Option<Option<usize>>>,
    joined: Vec<bool>,
    frozen: Vec<bool>,
    writing: bool,
    seq: i64,
    next_write: Ns,
    pending: HashMap<String, i64>,
    confirmed: BTreeMap<String, i64>,
    reads: HashMap<(usize, String), Option<i64>>,
    history: Vec<LeaderEvent>,
    /// Problems of the run itself.
    pub problems: Vec<String>,
}

/// The index of node `n<i>`.
fn index(name: &str) -> Option<usize> {
    name.strip_prefix('n')?
        .parse::<usize>()
        .ok()?
        .checked_sub(1)
}

impl<'a> LeaderDriver<'a> {
    /// Starts the nodes, a replica on each, and waits until they follow one leader.
    pub fn start(net: &'a Net, spec: NodeSpec) -> Result<LeaderDriver<'a>, String> {
        let n = spec.count;
        let mut d = LeaderDriver {
            cluster: Cluster::start(net, spec)?,
            follows: vec![None; n],
            joined: vec![false; n],
            frozen: vec![false; n],
            writing: false,
            seq: 0,
            next_write: 0,
            pending: HashMap::new(),
            confirmed: BTreeMap::new(),
            reads: HashMap::new(),
            history: Vec::new(),
            problems: Vec::new(),
        };
        if !d.pump_until(WAIT, |d| d.cluster.formed()) {
            return Err(format!("the cluster did not form: {:?}", d.cluster.up));
        }
        for i in 0..n {
            let cmd = d.gdict_command();
            d.cluster.send(i, &cmd);
        }
        if !d.pump_until(WAIT, |d| {
            d.joined.iter().all(|j| *j) && d.agreed().is_some()
        }) {
            return Err(format!("no agreed leader: {:?}", d.follows));
        }
        d.writing = true;
        Ok(d)
    }

    /// `gdict d n1,n2,...`: a replica in majority mode over all the nodes (so that a restarted
    /// node, alone at first, cannot count a majority of the nodes it has seen).
    fn gdict_command(&self) -> String {
        let nodes: Vec<String> = (0..self.follows.len()).map(crate::procs::name).collect();
        format!("gdict {DICT} {}", nodes.join(","))
    }

    /// The leader every replica follows, if they agree on one.
    fn agreed(&self) -> Option<usize> {
        let first = self.follows.first().copied().flatten().flatten()?;
        self.follows
            .iter()
            .all(|f| *f == Some(Some(first)))
            .then_some(first)
    }

    fn leader(&self) -> Option<usize> {
        (0..self.follows.len()).find(|&i| self.follows[i] == Some(Some(i)) && !self.frozen[i])
    }

    fn record(&mut self, t: Ns, what: LeaderWhat) {
        self.history.push(LeaderEvent { t, what });
    }

    fn handle(&mut self, node: usize, t: Ns, line: NodeLine) {
        match line {
            NodeLine::Joined => self.joined[node] = true,
            NodeLine::Leader { term, leading } => {
                if let Some((n, epoch)) = &term
                    && index(n) == Some(node)
                {
                    self.record(
                        t,
                        LeaderWhat::Leads {
                            node,
                            epoch: *epoch,
                        },
                    );
                }
                let mut leader = term.and_then(|(n, _)| index(&n));
                // Its own term, but it may not act on it now (its leases ran out): it does not
                // lead.
                if leader == Some(node) && leading == Some(false) {
                    leader = None;
                }
                self.follows[node] = Some(leader);
                self.record(t, LeaderWhat::Follows { node, leader });
            }
            NodeLine::Stored { key } => {
                if let Some(value) = self.pending.remove(&key) {
                    self.confirmed.insert(key.clone(), value);
                    self.record(t, LeaderWhat::Confirmed { key, value });
                }
            }
            NodeLine::Value { key, value } => {
                self.reads.insert((node, key), value);
            }
            _ => {}
        }
    }

    fn write(&mut self) {
        let t = now();
        if !self.writing || t < self.next_write {
            return;
        }
        self.next_write = t + WRITE_EVERY;
        self.seq += 1;
        let node = self.seq as usize % self.follows.len();
        if self.frozen[node] || !self.joined[node] {
            return;
        }
        let key = format!("k{}", self.seq);
        self.cluster
            .send(node, &format!("store {DICT} {key} {}", self.seq));
        self.pending.insert(key, self.seq);
    }

    fn pump_until(&mut self, limit: Ns, pred: impl Fn(&LeaderDriver) -> bool) -> bool {
        let end = now().saturating_add(limit);
        loop {
            self.write();
            if pred(self) {
                return true;
            }
            let t = now();
            if interrupted() || t >= end {
                return false;
            }
            let next = end.min(t + 20 * MS);
            if let Some((node, t, line)) = self.cluster.next_line(next) {
                self.handle(node, t, line);
            }
        }
    }

    fn pump_for(&mut self, span: Ns) {
        self.pump_until(span, |_| false);
    }

    /// Injects one fault of `kind` against the node that believes it leads, and heals.
    pub fn inject(&mut self, kind: Fault, profile: &Profile) -> Result<(), String> {
        if interrupted() {
            return Err("interrupted".to_owned());
        }
        if !self.pump_until(WAIT, |d| d.leader().is_some()) {
            self.problems
                .push(format!("{}: no replica led within 20 s", kind.name()));
            return Ok(());
        }
        let Some(target) = self.leader() else {
            return Ok(());
        };
        let fault = |d: &mut LeaderDriver| {
            let what = LeaderWhat::Fault {
                kind: format!("leader-{}", kind.name()),
                node: target,
            };
            d.record(now(), what);
        };
        let net = self.cluster.net;
        match kind {
            Fault::OneWay => {
                fault(self);
                net.mute(target)?;
                self.pump_for(profile.fault);
                net.unmute(target)?;
            }
            Fault::Pause => {
                self.frozen[target] = true;
                self.record(now(), LeaderWhat::Halted { node: target });
                fault(self);
                self.cluster.signal(target, libc::SIGSTOP)?;
                self.pump_for(profile.fault);
                self.cluster.signal(target, libc::SIGCONT)?;
                self.record(now(), LeaderWhat::Resumed { node: target });
                self.frozen[target] = false;
                // What does it believe, now that it runs again?
                self.cluster.send(target, &format!("leader {DICT}"));
            }
            Fault::Kill => {
                self.record(now(), LeaderWhat::Halted { node: target });
                fault(self);
                self.cluster.signal(target, libc::SIGKILL)?;
                self.cluster.kill(target);
                self.joined[target] = false;
                self.follows[target] = None;
                self.pump_for(profile.fault);
                self.cluster.restart(target)?;
                let cmd = self.gdict_command();
                self.cluster.send(target, &cmd);
            }
            // Two-way, and the rest: cut the leader off.
            Fault::RestartAll => {
                fault(self);
                let n = self.follows.len();
                for i in 0..n {
                    self.record(now(), LeaderWhat::Halted { node: i });
                    self.cluster.signal(i, libc::SIGKILL)?;
                    self.cluster.kill(i);
                    self.joined[i] = false;
                    self.follows[i] = None;
                }
                self.record(now(), LeaderWhat::RestartedAll);
                // The replicas keep their data in memory: what was confirmed is gone with them.
                self.confirmed.clear();
                self.pending.clear();
                for i in 0..n {
                    self.cluster.restart_with(i, true)?;
                }
                // Every process up again before a replica starts: each joins the whole group.
                self.pump_until(WAIT, |d| d.cluster.formed());
                for i in 0..n {
                    let cmd = self.gdict_command();
                    self.cluster.send(i, &cmd);
                }
            }
            _ => {
                fault(self);
                net.isolate(target)?;
                self.pump_for(profile.fault);
                net.rejoin(target)?;
            }
        }
        self.record(now(), LeaderWhat::Healed);
        self.pump_for(profile.recover);
        Ok(())
    }

    /// Waits (bounded) for one leader again, reads every confirmed key on every replica, stops
    /// the nodes and checks the history.
    pub fn finish(mut self) -> (LeaderVerdict, Vec<String>) {
        self.pump_until(WAIT, |d| d.agreed().is_some());
        self.writing = false;
        self.pump_until(5_000 * MS, |d| d.pending.is_empty());
        let n = self.follows.len();
        let end = now() + WAIT;
        loop {
            let missing: Vec<(usize, String)> = (0..n)
                .flat_map(|i| self.confirmed.iter().map(move |(k, v)| (i, k, *v)))
                .filter(|(i, k, v)| self.reads.get(&(*i, (*k).clone())) != Some(&Some(*v)))
                .map(|(i, k, _)| (i, k.clone()))
                .collect();
            if missing.is_empty() || now() >= end || interrupted() {
                break;
            }
            for (i, key) in missing {
                self.cluster.send(i, &format!("fetch {DICT} {key}"));
            }
            // The answers, and time for the replicas to merge before asking again.
            self.pump_for(500 * MS);
        }
        let t = now();
        let reads: Vec<((usize, String), Option<i64>)> = self.reads.drain().collect();
        for ((node, key), value) in reads {
            self.record(t, LeaderWhat::Read { node, key, value });
        }
        self.cluster.stop();
        let mut problems = self.problems;
        problems.append(&mut self.cluster.problems);
        (check_leader(&self.history, n), problems)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn node_names_index() {
        assert_eq!(super::index("n1"), Some(0));
        assert_eq!(super::index("n3"), Some(2));
        assert_eq!(super::index("n0"), None);
        assert_eq!(super::index("x1"), None);
    }
}
