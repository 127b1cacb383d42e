//! The private network of one run: a bridge namespace holding a Linux bridge, and one namespace
//! per node joined to it by a veth pair, with addresses from 10.213.0.0/24 that exist only
//! inside these namespaces. Also the faults that act on links and routes.
//!
//! Names carry the driver's pid (`nemesis-<pid>-br`, `nemesis-<pid>-n1`, ...) so parallel runs
//! do not collide; [`Net`]'s `Drop` deletes them, and [`remove_stale`] deletes those of runs
//! whose driver is gone (killed before its `Drop` could run), with the processes inside them.

use std::process::{Command, Stdio};

/// The prefix of every namespace a run creates.
pub const PREFIX: &str = "nemesis-";

/// The port every node listens on (inside its own namespace).
pub const PORT: u16 = 7100;

/// Runs `ip` with `args`; an error says which command failed and what `ip` printed.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip_output(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ip {}: {e}", args.join(" ")))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The address of node `i` (0-based) inside the private network.
pub fn addr(i: usize) -> String {
    format!("10.213.0.{}", i + 1)
}

/// The namespaces of one run. Dropping it kills any process still inside them
/// ([`kill_inside`]) and deletes them.
#[derive(Debug)]
pub struct Net {
    /// The bridge namespace.
    pub bridge: String,
    /// One namespace per node.
    pub nodes: Vec<String>,
}

impl Net {
    /// Creates the namespaces, the bridge and the links of `n` nodes for the run of `pid`.
    /// On failure, whatever was created is deleted again.
    pub fn create(pid: u32, n: usize) -> Result<Net, String> {
        let bridge = format!("{PREFIX}{pid}-br");
        ip(&["netns", "add", &bridge])?;
        // From here on, a failure drops `net`, which deletes what exists.
        let mut net = Net {
            bridge,
            nodes: Vec::new(),
        };
        let br = net.bridge.clone();
        ip(&["-n", &br, "link", "set", "lo", "up"])?;
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &br, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let ns = format!("{PREFIX}{pid}-n{}", i + 1);
            ip(&["netns", "add", &ns])?;
            net.nodes.push(ns.clone());
            let veth = veth(i);
            ip(&[
                "-n", &br, "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ])?;
            ip(&["-n", &br, "link", "set", &veth, "master", "br0"])?;
            ip(&["-n", &br, "link", "set", &veth, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", addr(i)),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        }
        Ok(net)
    }

    /// Cuts node `i` off the bridge: no packets either way.
    pub fn isolate(&self, i: usize) -> Result<(), String> {
        ip(&["-n", &self.bridge, "link", "set", &veth(i), "nomaster"])
    }

    /// Puts node `i` back on the bridge.
    pub fn rejoin(&self, i: usize) -> Result<(), String> {
        ip(&["-n", &self.bridge, "link", "set", &veth(i), "master", "br0"])
    }

    /// One-way partition: node `i`'s packets to every other node are dropped (blackhole routes
    /// in its namespace) while it still receives theirs.
    pub fn mute(&self, i: usize) -> Result<(), String> {
        for j in (0..self.nodes.len()).filter(|&j| j != i) {
            ip(&[
                "-n",
                &self.nodes[i],
                "route",
                "add",
                "blackhole",
                &format!("{}/32", addr(j)),
            ])?;
        }
        Ok(())
    }

    /// Removes the blackhole routes of [`Net::mute`] (those present).
    pub fn unmute(&self, i: usize) -> Result<(), String> {
        for j in (0..self.nodes.len()).filter(|&j| j != i) {
            // Absent routes are fine: heal is idempotent.
            let _ = ip(&[
                "-n",
                &self.nodes[i],
                "route",
                "del",
                "blackhole",
                &format!("{}/32", addr(j)),
            ]);
        }
        Ok(())
    }

    /// Heals every link and route fault.
    pub fn heal_all(&self) -> Result<(), String> {
        for i in 0..self.nodes.len() {
            self.rejoin(i)?;
            self.unmute(i)?;
        }
        Ok(())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.nodes.iter().chain([&self.bridge]) {
            kill_inside(ns);
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("nemesis: cleanup: {e}");
            }
        }
    }
}

/// The name of node `i`'s veth end in the bridge namespace.
fn veth(i: usize) -> String {
    format!("v{}", i + 1)
}

/// SIGKILLs the processes inside namespace `ns` (by the pids `ip netns pids` lists).
pub fn kill_inside(ns: &str) {
    let Ok(pids) = ip_output(&["netns", "pids", ns]) else {
        return;
    };
    for pid in pids
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        // SAFETY: kill() with a pid listed in a namespace this program created; it touches no
        // memory.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// The pid in a namespace name of ours (`nemesis-<pid>-...`).
pub fn owner_pid(ns: &str) -> Option<u32> {
    ns.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()
}

/// Deletes the namespaces (and kills the processes in them) of earlier runs whose driver is no
/// longer alive. Returns the names deleted.
pub fn remove_stale() -> Vec<String> {
    let Ok(list) = ip_output(&["netns", "list"]) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for ns in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = owner_pid(ns) else { continue };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        kill_inside(ns);
        if ip(&["netns", "del", ns]).is_ok() {
            removed.push(ns.to_owned());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses() {
        assert_eq!(owner_pid("nemesis-4242-n1"), Some(4242));
        assert_eq!(owner_pid("nemesis-4242-br"), Some(4242));
        assert_eq!(owner_pid("other-4242-br"), None);
        assert_eq!(owner_pid("nemesis-x-br"), None);
        assert_eq!(addr(0), "10.213.0.1");
        assert_eq!(veth(2), "v3");
    }
}
