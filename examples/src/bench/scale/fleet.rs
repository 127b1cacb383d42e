//! A fleet of `node` processes on 127.0.0.1 for `bench scale`: started in a full mesh (each
//! dials every earlier one), driven through their stdin, their stdout lines stamped as they
//! arrive, their CPU time and resident memory read from `/proc`, stopped by closing stdin
//! (killed by their handle if they do not stop), one killed with SIGKILL on purpose; each
//! serves its metrics on a port of its own, for the messages its links sent.

use crate::bench::cluster::stop_child;
use crate::bench::rig::{COOKIE, err};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

/// One line a node printed: which node, when it arrived, the line.
pub type Line = (usize, Instant, String);

struct Proc {
    name: String,
    /// Where it serves its metrics (`None` until it said).
    metrics: Option<SocketAddr>,
    child: Child,
    stdin: Option<ChildStdin>,
}

/// The node processes and the lines they print.
pub struct Fleet {
    procs: Vec<Proc>,
    lines: Receiver<Line>,
    /// When the first process was started and when every node saw every other.
    pub meshed_in: Duration,
}

impl Fleet {
    /// Starts `n` nodes named `{prefix}{i}`, each dialing every earlier one, and waits (at most
    /// `limit`) until every node has seen every other up.
    pub fn start(prefix: &str, n: usize, limit: Duration) -> Result<Fleet, String> {
        let exe = std::env::current_exe().map_err(err)?.with_file_name("node");
        if !exe.exists() {
            return Err(format!(
                "{} not found: cargo build --release -p examples --bin node",
                exe.display()
            ));
        }
        let (tx, lines) = channel();
        let mut fleet = Fleet {
            procs: Vec::new(),
            lines,
            meshed_in: Duration::ZERO,
        };
        let start = Instant::now();
        let deadline = start + limit;
        let mut addrs: Vec<SocketAddr> = Vec::new();
        let mut ups: Vec<BTreeSet<String>> = vec![BTreeSet::new(); n];
        let mut metrics: Vec<Option<SocketAddr>> = vec![None; n];
        for i in 0..n {
            let name = format!("{prefix}{i}");
            fleet.spawn(&exe, &name, &addrs, tx.clone())?;
            let addr = fleet.wait_for(deadline, |(who, _, line)| {
                if let Some(a) = line.strip_prefix("metrics ") {
                    metrics[*who] = a.trim().parse().ok();
                }
                if let Some(rest) = line.strip_prefix("up ") {
                    ups[*who].insert(rest.trim().to_owned());
                }
                (*who == i)
                    .then(|| line.strip_prefix("listening "))
                    .flatten()
                    .map(|a| a.trim().parse::<SocketAddr>().map_err(err))
            })??;
            addrs.push(addr);
        }
        fleet.wait_for(deadline, |(who, _, line)| {
            if let Some(rest) = line.strip_prefix("up ") {
                ups[*who].insert(rest.trim().to_owned());
            }
            ups.iter().all(|u| u.len() + 1 >= n).then_some(())
        })?;
        fleet.meshed_in = start.elapsed();
        for (p, m) in fleet.procs.iter_mut().zip(metrics) {
            p.metrics = m;
        }
        Ok(fleet)
    }

    fn spawn(
        &mut self,
        exe: &std::path::Path,
        name: &str,
        peers: &[SocketAddr],
        tx: Sender<Line>,
    ) -> Result<(), String> {
        let mut cmd = Command::new(exe);
        // No data directory: the scale nodes are throwaway, and a default one under $HOME would
        // be shared by every run's nodes of the same name.
        cmd.args(["--name", name, "--listen", "127.0.0.1:0", "--exit-on-eof"])
            .args(["--metrics", "127.0.0.1:0"])
            .args(["--cookie", COOKIE, "--no-data-dir"]);
        for p in peers {
            cmd.args(["--peer", &p.to_string()]);
        }
        // `SCALE_LOGS=DIR` keeps each node's log in `DIR/<name>.log` (at `RUST_LOG`, `info`
        // when unset), for a run that failed; by default the nodes log errors to nowhere.
        let stderr = match std::env::var_os("SCALE_LOGS") {
            Some(dir) => {
                let file =
                    std::fs::File::create(std::path::Path::new(&dir).join(format!("{name}.log")))
                        .map_err(|e| format!("cannot create the log of {name}: {e}"))?;
                cmd.env(
                    "RUST_LOG",
                    std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
                );
                Stdio::from(file)
            }
            None => {
                cmd.env("RUST_LOG", "error");
                Stdio::null()
            }
        };
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let stdin = child.stdin.take();
        let who = self.procs.len();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((who, Instant::now(), line)).is_err() {
                    return;
                }
            }
        });
        self.procs.push(Proc {
            name: name.to_owned(),
            metrics: None,
            child,
            stdin,
        });
        Ok(())
    }

    /// How many nodes were started.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// The name of node `i`.
    pub fn name(&self, i: usize) -> &str {
        &self.procs[i].name
    }

    /// Every node's name, comma-separated (a `node` command's node list).
    pub fn all_names(&self) -> String {
        let names: Vec<&str> = self.procs.iter().map(|p| p.name.as_str()).collect();
        names.join(",")
    }

    /// The envelopes every node's links have sent so far (`locks_link_messages_total` with
    /// `direction="sent"`, summed over nodes and peers; heartbeats are not envelopes).
    pub fn messages_sent(&self, deadline: Instant) -> Result<u64, String> {
        let mut total = 0.0;
        for p in &self.procs {
            let addr = p
                .metrics
                .ok_or_else(|| format!("{} did not say where it serves metrics", p.name))?;
            let left = deadline.saturating_duration_since(Instant::now());
            let mut stream = TcpStream::connect_timeout(&addr, left).map_err(err)?;
            stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .map_err(err)?;
            write!(
                stream,
                "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
            )
            .map_err(err)?;
            let mut response = String::new();
            stream.read_to_string(&mut response).map_err(err)?;
            total += response
                .lines()
                .filter(|l| {
                    l.starts_with("locks_link_messages_total{") && l.contains("direction=\"sent\"")
                })
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum::<f64>();
        }
        Ok(total as u64)
    }

    /// Sends one command line to node `i`.
    pub fn send(&mut self, i: usize, line: &str) -> Result<(), String> {
        let stdin = self.procs[i].stdin.as_mut().ok_or("node stopped")?;
        writeln!(stdin, "{line}").map_err(err)?;
        stdin.flush().map_err(err)
    }

    /// Reads lines until `f` returns a value, or fails at `deadline`.
    pub fn wait_for<T>(
        &self,
        deadline: Instant,
        mut f: impl FnMut(&Line) -> Option<T>,
    ) -> Result<T, String> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .map_err(|_| "no answer in time".to_string())?;
            if let Some(v) = f(&line) {
                return Ok(v);
            }
        }
    }

    /// Kills node `i` with SIGKILL (by its handle).
    pub fn kill(&mut self, i: usize) {
        let p = &mut self.procs[i];
        p.stdin = None;
        let _ = p.child.kill();
        let _ = p.child.wait();
    }

    /// CPU seconds (user and system) and resident bytes of node `i`, from `/proc`.
    pub fn usage(&self, i: usize) -> Option<(f64, u64)> {
        let pid = self.procs[i].child.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The fields after the command name (which may hold spaces) start at its ')'.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let rss_kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        // Clock ticks are 1/100 s on Linux.
        Some((ticks as f64 / 100.0, rss_kb * 1024))
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // Closing stdin stops a node started with --exit-on-eof; all at once, then wait.
        for p in &mut self.procs {
            p.stdin = None;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for p in &mut self.procs {
            stop_child(&mut p.child, deadline);
        }
    }
}
