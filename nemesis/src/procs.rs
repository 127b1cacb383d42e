//! The node processes: `ip netns exec <ns> node --mono ...`, their stdin for commands, and a
//! reader thread per process that forwards its stamped stdout lines to the driver.
//!
//! `ip netns exec` enters the namespace and execs the program, so the child's pid is the
//! node's: signals go straight to it. Every process is killed and reaped when its [`NodeProc`]
//! is dropped; `--exit-on-eof` makes a node exit by itself if the driver dies.

use crate::clock::Ns;
use crate::history::split_mono;
use crate::net::{PORT, addr};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Sender;

/// A stamped line of a node process.
#[derive(Debug, Clone)]
pub struct Line {
    /// The node's index.
    pub node: usize,
    /// Which start of that node printed it (0, then 1 after a restart, ...).
    pub generation: u32,
    /// The node's `CLOCK_MONOTONIC` stamp.
    pub t: Ns,
    /// The line after the stamp.
    pub text: String,
}

/// How to start the nodes.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// The `node` binary.
    pub binary: PathBuf,
    /// How many nodes.
    pub count: usize,
    /// The heartbeat timeout in milliseconds.
    pub heartbeat_timeout_ms: u64,
    /// The lock delay in milliseconds (also the start delay, by the node's default).
    pub lock_delay_ms: u64,
    /// The cluster cookie.
    pub cookie: String,
    /// Where each node's stderr goes (`<dir>/n<i>.log`, appended across restarts).
    pub log_dir: PathBuf,
    /// Each node's data directory is `<dir>/n<i>`, kept across its restarts.
    pub data_dir: PathBuf,
}

/// Where libfaketime is: `NEMESIS_LIBFAKETIME`, or where Debian's `faketime` package puts it.
pub fn libfaketime() -> Option<PathBuf> {
    let env = std::env::var_os("NEMESIS_LIBFAKETIME").map(PathBuf::from);
    let known = ["x86_64-linux-gnu", "aarch64-linux-gnu", ""].map(|arch| {
        Path::new("/usr/lib")
            .join(arch)
            .join("faketime/libfaketime.so.1")
    });
    env.into_iter().chain(known).find(|p| p.is_file())
}

/// The name of node `i` (0-based): `n1`, `n2`, ...
pub fn name(i: usize) -> String {
    format!("n{}", i + 1)
}

/// One running node process.
#[derive(Debug)]
pub struct NodeProc {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Its start number.
    pub generation: u32,
}

impl NodeProc {
    /// Starts node `i` in namespace `ns`; it dials every node before it (which dial it again
    /// after losing it), and its lines go to `lines`. With `behind`, its wall clock is an hour
    /// behind (libfaketime preloaded; `CLOCK_MONOTONIC`, which its `--mono` stamps, leases and
    /// heartbeats use, is left alone).
    pub fn start(
        spec: &NodeSpec,
        ns: &str,
        i: usize,
        generation: u32,
        behind: bool,
        lines: Sender<Line>,
    ) -> Result<NodeProc, String> {
        let log = log_file(&spec.log_dir, i)?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns])
            .arg(&spec.binary)
            .args(["--name", &name(i), "--cookie", &spec.cookie, "--mono"])
            .args(["--listen", &format!("{}:{PORT}", addr(i))])
            .args([
                "--heartbeat-timeout-ms",
                &spec.heartbeat_timeout_ms.to_string(),
                "--lock-delay-ms",
                &spec.lock_delay_ms.to_string(),
            ])
            .arg("--exit-on-eof")
            .arg("--data-dir")
            .arg(spec.data_dir.join(name(i)))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log);
        for j in 0..i {
            cmd.args(["--peer", &format!("{}:{PORT}", addr(j))]);
        }
        if behind {
            let lib = libfaketime().ok_or(
                "libfaketime not found (apt-get install faketime, or set NEMESIS_LIBFAKETIME)",
            )?;
            cmd.env("LD_PRELOAD", lib)
                .env("FAKETIME", "-1h")
                .env("DONT_FAKE_MONOTONIC", "1");
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", spec.binary.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        std::thread::spawn(move || {
            for text in BufReader::new(stdout).lines() {
                let Ok(text) = text else { break };
                let Some((t, rest)) = split_mono(&text) else {
                    continue;
                };
                let line = Line {
                    node: i,
                    generation,
                    t,
                    text: rest.to_owned(),
                };
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(NodeProc {
            child,
            stdin,
            generation,
        })
    }

    /// The node's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one command line. A node that is gone is not an error here: the driver learns it
    /// from the missing answers.
    pub fn send(&mut self, command: &str) {
        if let Some(stdin) = &mut self.stdin
            && (writeln!(stdin, "{command}").is_err() || stdin.flush().is_err())
        {
            self.stdin = None;
        }
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: i32) -> Result<(), String> {
        let pid = i32::try_from(self.pid()).map_err(|_| "pid out of range".to_owned())?;
        // SAFETY: kill() on the pid of a child this program started and has not reaped (it is
        // reaped only in `kill_and_reap`, which consumes the handle); it touches no memory.
        let rc = unsafe { libc::kill(pid, signal) };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!(
                "kill({pid}, {signal}): {}",
                std::io::Error::last_os_error()
            ))
        }
    }

    fn kill_and_reap(&mut self) {
        self.stdin = None;
        // A stopped process dies on SIGKILL too.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

fn log_file(dir: &Path, i: usize) -> Result<std::fs::File, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(format!("{}.log", name(i)));
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))
}
