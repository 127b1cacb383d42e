//! The node processes of one scenario, as one thing: start, restart, signal, kill, send
//! commands, and read their lines in arrival order (lines of an earlier start of a restarted
//! node are dropped). Every line read is logged to `lines.log` in the scenario's log directory
//! as `<node stamp> <node> g<generation> <line>`.

use crate::clock::{Ns, now};
use crate::history::{NodeLine, parse_line};
use crate::net::Net;
use crate::procs::{Line, NodeProc, NodeSpec, name};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::Duration;

/// The running nodes of a scenario.
pub struct Cluster<'a> {
    /// The namespaces they run in.
    pub net: &'a Net,
    /// How they are started.
    pub spec: NodeSpec,
    procs: Vec<Option<NodeProc>>,
    generations: Vec<u32>,
    /// The peers each node reported up (from its `up`/`down` lines).
    pub up: Vec<BTreeSet<String>>,
    tx: Sender<Line>,
    rx: Receiver<Line>,
    log: Option<BufWriter<File>>,
    /// Lines that could not be read, in words.
    pub problems: Vec<String>,
}

impl<'a> Cluster<'a> {
    /// Starts every node of `spec` in `net`.
    pub fn start(net: &'a Net, spec: NodeSpec) -> Result<Cluster<'a>, String> {
        std::fs::create_dir_all(&spec.log_dir)
            .map_err(|e| format!("cannot create {}: {e}", spec.log_dir.display()))?;
        let log = File::create(spec.log_dir.join("lines.log"))
            .map(BufWriter::new)
            .ok();
        let (tx, rx) = channel();
        let n = spec.count;
        let mut c = Cluster {
            net,
            procs: Vec::new(),
            generations: vec![0; n],
            up: vec![BTreeSet::new(); n],
            tx,
            rx,
            log,
            problems: Vec::new(),
            spec,
        };
        for i in 0..n {
            let p = NodeProc::start(&c.spec, &c.net.nodes[i], i, 0, false, c.tx.clone())?;
            c.procs.push(Some(p));
        }
        Ok(c)
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// Whether the cluster has no nodes.
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// Whether every node sees every other.
    pub fn formed(&self) -> bool {
        self.up.iter().all(|u| u.len() + 1 == self.len())
    }

    /// The next line of a current node process, waiting until `deadline` at most.
    pub fn next_line(&mut self, deadline: Ns) -> Option<(usize, Ns, NodeLine)> {
        loop {
            let wait = deadline.saturating_sub(now());
            let line = match self.rx.recv_timeout(Duration::from_nanos(wait)) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            };
            if let Some(log) = &mut self.log {
                let _ = writeln!(
                    log,
                    "{} {} g{} {}",
                    line.t,
                    name(line.node),
                    line.generation,
                    line.text
                );
            }
            if line.generation != self.generations[line.node] {
                continue;
            }
            match parse_line(&line.text) {
                Ok(parsed) => {
                    match &parsed {
                        NodeLine::Up(peer) => {
                            self.up[line.node].insert(peer.clone());
                        }
                        NodeLine::Down(peer) => {
                            self.up[line.node].remove(peer);
                        }
                        _ => {}
                    }
                    return Some((line.node, line.t, parsed));
                }
                Err(e) => self.problems.push(format!(
                    "{}: unreadable line {:?}: {e}",
                    name(line.node),
                    line.text
                )),
            }
        }
    }

    /// Sends a command to node `i` (nothing if it is not running).
    pub fn send(&mut self, i: usize, command: &str) {
        if let Some(p) = &mut self.procs[i] {
            p.send(command);
        }
    }

    /// Sends `signal` to node `i`'s process.
    pub fn signal(&self, i: usize, signal: i32) -> Result<(), String> {
        self.procs[i]
            .as_ref()
            .ok_or_else(|| format!("node {} is not running", name(i)))?
            .signal(signal)
    }

    /// Kills node `i`'s process (SIGKILL) and reaps it.
    pub fn kill(&mut self, i: usize) {
        self.procs[i] = None;
        self.up[i].clear();
    }

    /// Starts node `i` again (a new generation: lines of the old process are dropped).
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        self.restart_with(i, false)
    }

    /// Starts node `i` again, with its wall clock an hour behind when `behind`.
    pub fn restart_with(&mut self, i: usize, behind: bool) -> Result<(), String> {
        self.generations[i] += 1;
        let p = NodeProc::start(
            &self.spec,
            &self.net.nodes[i],
            i,
            self.generations[i],
            behind,
            self.tx.clone(),
        )?;
        self.procs[i] = Some(p);
        Ok(())
    }

    /// Kills every node process and flushes the line log.
    pub fn stop(&mut self) {
        for p in &mut self.procs {
            *p = None;
        }
        if let Some(log) = &mut self.log {
            let _ = log.flush();
        }
    }
}
