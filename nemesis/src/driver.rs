//! The driver of one scenario: the node processes of a fresh cluster, one [`Client`] per node,
//! the fenced register, the fault schedule, and the history it all goes into.
//!
//! It runs on one thread: node lines arrive on one channel (from the reader threads of
//! [`crate::procs`]), and between lines it ticks the clients. Every wait is bounded.
//!
//! Its logs, in the scenario's log directory: `lines.log`, every node line as it arrived
//! (`<node stamp> <node> g<generation> <line>`), and `history.log`, the recorded history sorted
//! by time (node stamps and the driver's own `CLOCK_MONOTONIC` stamps), next to each node's
//! stderr.

use crate::checker::{Bounds, Verdict, check};
use crate::client::{Action, Client};
use crate::clock::{MS, Ns, now};
use crate::cluster::Cluster;
use crate::history::{Event, NodeLine, What};
use crate::interrupt::interrupted;
use crate::net::Net;
use crate::procs::{NodeSpec, name};
use crate::scenario::{Fault, Profile};
use locks_core::fence::Fence;
use locks_core::{Key, LockId};
use std::fs::File;
use std::io::{BufWriter, Write};

/// The longest the driver waits for anything (a cluster to form, a holder, service after a
/// heal) before it reports the scenario as failed.
const WAIT: Ns = 20_000 * MS;

/// One scenario's run.
pub struct Driver<'a> {
    cluster: Cluster<'a>,
    clients: Vec<Client>,
    fence: Fence,
    lock: LockId,
    lock_command: String,
    history: Vec<Event>,
    /// Problems of the run itself (not of the history): a holder never appeared, ...
    pub problems: Vec<String>,
}

impl<'a> Driver<'a> {
    /// Starts the nodes of `spec` in `net` and waits until each sees all the others.
    pub fn start(net: &'a Net, spec: NodeSpec) -> Result<Driver<'a>, String> {
        let n = spec.count;
        let nodes: Vec<String> = (0..n).map(name).collect();
        let lock =
            LockId::new([Key::from("r"), Key::from("x")]).map_err(|e| format!("lock id: {e}"))?;
        let mut d = Driver {
            cluster: Cluster::start(net, spec)?,
            clients: (0..n).map(|i| Client::new(i, Ns::MAX)).collect(),
            fence: Fence::new(),
            lock,
            lock_command: format!("r/x X {} majority", nodes.join(",")),
            history: Vec::new(),
            problems: Vec::new(),
        };
        if !d.pump_until(WAIT, |d| d.cluster.formed()) {
            return Err(format!(
                "the cluster did not form within {} s (peers seen: {:?})",
                WAIT / 1_000 / MS,
                d.cluster.up
            ));
        }
        let t = now();
        for c in &mut d.clients {
            c.restarted(t);
        }
        Ok(d)
    }

    fn record(&mut self, t: Ns, what: What) {
        self.history.push(Event { t, what });
    }

    fn act(&mut self, node: usize, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Lock(txn) => {
                    let cmd = format!("lock {txn} {}", self.lock_command);
                    self.send(node, &cmd);
                }
                Action::Write(txn, tokens) => {
                    let accepted = self.fence.admit(&self.lock, &tokens).is_ok();
                    self.record(
                        now(),
                        What::Write {
                            txn,
                            tokens,
                            accepted,
                        },
                    );
                }
                Action::End(txn) => {
                    // Stamped before the write: no node can act on the `end` earlier, and a
                    // stamp taken after it could come after the next holder's grant.
                    self.record(now(), What::EndSent { txn: txn.clone() });
                    self.send(node, &format!("end {txn}"));
                }
            }
        }
    }

    fn send(&mut self, node: usize, command: &str) {
        self.cluster.send(node, command);
    }

    fn handle(&mut self, node: usize, t: Ns, parsed: NodeLine) {
        match &parsed {
            NodeLine::Granted { txn, tokens } => self.record(
                t,
                What::Granted {
                    client: node,
                    txn: txn.clone(),
                    tokens: tokens.clone(),
                },
            ),
            NodeLine::Lost { txn, cause } => self.record(
                t,
                What::Lost {
                    txn: txn.clone(),
                    cause: cause.clone(),
                },
            ),
            _ => {}
        }
        let actions = self.clients[node].on_line(now(), &parsed);
        self.act(node, actions);
    }

    fn tick(&mut self) {
        let t = now();
        for i in 0..self.clients.len() {
            let actions = self.clients[i].tick(t);
            self.act(i, actions);
        }
    }

    /// Runs until `pred` holds (true) or `limit` passes (false).
    fn pump_until(&mut self, limit: Ns, pred: impl Fn(&Driver) -> bool) -> bool {
        let end = now().saturating_add(limit);
        loop {
            self.tick();
            if pred(self) {
                return true;
            }
            if interrupted() {
                return false;
            }
            let t = now();
            if t >= end {
                return false;
            }
            let next = self
                .clients
                .iter()
                .filter_map(Client::deadline)
                .min()
                .unwrap_or(Ns::MAX)
                .min(end)
                .min(t + 50 * MS);
            if let Some((node, t, line)) = self.cluster.next_line(next) {
                self.handle(node, t, line);
            }
        }
    }

    /// Runs for `span`.
    fn pump_for(&mut self, span: Ns) {
        self.pump_until(span, |_| false);
    }

    fn holder(&self) -> Option<(usize, String)> {
        self.clients
            .iter()
            .find_map(|c| c.holder().map(|t| (c.node, t.to_owned())))
    }

    /// Injects one fault of `kind` (waiting for a holder first), keeps the workload running
    /// through it, and heals.
    pub fn inject(&mut self, kind: Fault, profile: &Profile) -> Result<(), String> {
        if interrupted() {
            return Err("interrupted".to_owned());
        }
        if !self.pump_until(WAIT, |d| d.holder().is_some()) {
            self.problems.push(format!(
                "{}: no client held the lock within 20 s",
                kind.name()
            ));
            return Ok(());
        }
        let Some((holder, txn)) = self.holder() else {
            return Ok(());
        };
        let n = self.clients.len();
        let target = match kind {
            Fault::IsolateOther => (holder + 1) % n,
            _ => holder,
        };
        // A fault is stamped before it is made: the times measured from it include the
        // making.
        let fault = |d: &mut Driver, holder: Option<String>| {
            d.record(
                now(),
                What::Fault {
                    kind: kind.name().to_owned(),
                    node: target,
                    holder,
                    removes_holder: kind.removes_holder(),
                },
            );
        };
        // The holder stays busy through the fault, so that its belief outlives the time the
        // others need to give its lock away: only being told ends it early.
        self.clients[holder].extend(now() + 3 * profile.heartbeat_timeout);
        let holder_txn = (target == holder).then(|| txn.clone());
        match kind {
            Fault::OneWay => {
                fault(self, holder_txn);
                self.cluster.net.mute(target)?;
                self.pump_for(profile.fault);
                self.cluster.net.unmute(target)?;
            }
            Fault::Isolate | Fault::IsolateOther => {
                fault(self, holder_txn);
                self.cluster.net.isolate(target)?;
                self.pump_for(profile.fault);
                self.cluster.net.rejoin(target)?;
            }
            Fault::Flap => {
                let (downs, each) = profile.flaps;
                for k in 0..downs {
                    let still = self.clients[target].holder().map(str::to_owned);
                    fault(self, if k == 0 { holder_txn.clone() } else { still });
                    self.cluster.net.isolate(target)?;
                    self.pump_for(each);
                    self.cluster.net.rejoin(target)?;
                    self.pump_for(each);
                }
            }
            Fault::Pause => {
                self.clients[target].frozen = true;
                // Stamped before the signal, for the same reason as `end`.
                self.record(now(), What::Halted { client: target });
                fault(self, holder_txn);
                self.cluster.signal(target, libc::SIGSTOP)?;
                self.pump_for(profile.fault);
                self.cluster.signal(target, libc::SIGCONT)?;
                let actions = self.clients[target].resume(now());
                self.act(target, actions);
            }
            Fault::Kill | Fault::ClockBack => {
                self.record(now(), What::Halted { client: target });
                fault(self, holder_txn);
                self.kill(target)?;
                self.pump_for(profile.fault);
                self.restart(target, kind == Fault::ClockBack)?;
            }
            Fault::RestartAll => {
                fault(self, holder_txn);
                for i in 0..n {
                    self.record(now(), What::Halted { client: i });
                    self.kill(i)?;
                }
                for i in 0..n {
                    self.restart(i, true)?;
                }
                // Killed again and again in its first milliseconds, when a start writes its
                // data directory (before anything else), then started once more: whichever
                // write a kill cut short, the next start reads a whole record.
                for delay in [0, 2, 4, 7, 11, 16] {
                    std::thread::sleep(std::time::Duration::from_millis(delay));
                    self.kill(0)?;
                    self.restart(0, true)?;
                }
            }
        }
        self.record(now(), What::Healed);
        self.pump_for(profile.recover);
        Ok(())
    }

    /// Kills node `i`'s process with SIGKILL.
    fn kill(&mut self, i: usize) -> Result<(), String> {
        self.cluster.signal(i, libc::SIGKILL)?;
        self.cluster.kill(i);
        self.clients[i].killed();
        Ok(())
    }

    /// Starts node `i` again (its wall clock an hour behind when `behind`).
    fn restart(&mut self, i: usize, behind: bool) -> Result<(), String> {
        self.cluster.restart_with(i, behind)?;
        self.record(now(), What::Restarted { node: i });
        self.clients[i].restarted(now());
        Ok(())
    }

    /// Waits (bounded) until every client was granted the lock after the last heal, lets the
    /// clients finish, stops the nodes and checks the history.
    pub fn finish(mut self, bounds: Bounds) -> (Verdict, Vec<String>) {
        let healed = self
            .history
            .iter()
            .rev()
            .find(|e| e.what == What::Healed)
            .map_or(0, |e| e.t);
        let n = self.clients.len();
        let served = |d: &Driver| {
            (0..n).all(|c| {
                d.history.iter().any(|e| {
                    e.t >= healed && matches!(&e.what, What::Granted { client, .. } if *client == c)
                })
            })
        };
        self.pump_until(WAIT, served);
        for c in &mut self.clients {
            c.stopping = true;
        }
        self.pump_until(WAIT, |d| d.clients.iter().all(|c| c.txn().is_none()));
        self.cluster.stop();
        self.write_history();
        let mut problems = self.problems;
        problems.append(&mut self.cluster.problems);
        (check(&self.history, bounds), problems)
    }

    fn write_history(&mut self) {
        let mut events = self.history.clone();
        events.sort_by_key(|e| e.t);
        let path = self.cluster.spec.log_dir.join("history.log");
        let Ok(file) = File::create(&path) else {
            self.problems
                .push(format!("cannot write {}", path.display()));
            return;
        };
        let mut out = BufWriter::new(file);
        for e in events {
            let _ = writeln!(out, "{} {:?}", e.t, e.what);
        }
    }
}
