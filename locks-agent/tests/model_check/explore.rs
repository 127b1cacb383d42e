//! Breadth-first exhaustive exploration of one configuration, with state hashing.
//!
//! Every state reachable from the initial world by any order of the enabled [`Action`]s is
//! visited once: a state's fingerprint is a 128-bit hash of a canonical rendering, so two paths
//! to the same state are explored once. States are kept only in the frontier; for each
//! state the explorer remembers its parent and the action that led to it, so the trace of a
//! violation is the shortest path to it (breadth first), replayed with readable lines.

use super::oracle;
use super::show::{show_op, show_status};
use super::world::{Action, Config, Model, World};
use locks_server::TableSnapshot;
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;

/// What the exploration of one configuration found.
#[derive(Debug, Default)]
pub struct Report {
    pub name: String,
    /// The configuration, readable.
    pub config: String,
    /// Distinct states visited.
    pub states: usize,
    /// Steps taken (edges of the state graph).
    pub transitions: u64,
    /// Distinct quiescent states.
    pub quiescent: usize,
    /// Surrenders and aborts decided.
    pub decisions: u64,
    /// Of those, decided while the real wait-for graph had no cycle through the agent.
    pub without_cycle: u64,
    /// The trace of the first of those.
    pub first_without_cycle: Option<String>,
    /// The first property violated, with its trace.
    pub violation: Option<String>,
    /// The state limit was reached: the exploration is incomplete.
    pub truncated: bool,
    /// When truncated: the trace of the last state visited (one of the longest runs).
    pub deepest: Option<String>,
}

/// A 128-bit fingerprint of a canonical rendering of the world: the tables' sorted snapshots
/// (not the tables' own `Debug`: interned numbers and slots depend on the path), the agents'
/// `Debug` output with their clients' positions, and the channels. The rendering is written
/// into `buf` (reused) and hashed a word at a time: a hand-written hash, because the
/// standard SipHash is compiled without optimisations in test builds and cost most of the
/// run.
fn fingerprint(w: &World, snaps: &[TableSnapshot], buf: &mut String) -> u128 {
    buf.clear();
    for s in snaps {
        let _ = write!(buf, "{s:?}");
    }
    for c in &w.clients {
        if c.stop.is_some() {
            let _ = write!(buf, "stopped {:?} {}", c.stop, c.pc);
        } else {
            let _ = write!(
                buf,
                "{:?} {} {} {} {}",
                c.core, c.pc, c.blocked, c.unsettled, c.decisions
            );
        }
    }
    let _ = write!(buf, "{:?}", w.chans);
    let bytes = buf.as_bytes();
    let (mut a, mut b) = (
        0x243F_6A88_85A3_08D3_u64,
        0x1319_8A2E_0370_7344_u64 ^ bytes.len() as u64,
    );
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let x = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        a = (a ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(31);
        b = (b.rotate_left(23) ^ x).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    }
    let mut last = [0u8; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    let x = u64::from_le_bytes(last);
    a = (a ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    b = (b ^ x ^ (a >> 29)).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    a ^= b >> 31;
    b ^= a >> 33;
    (u128::from(a) << 64) | u128::from(b)
}

/// Explores `config` exhaustively, stopping at the first violation or after `limit` states.
pub fn explore(config: Config, limit: usize) -> Report {
    let m = Model::new(config);
    let mut report = Report {
        name: m.config.name.clone(),
        config: describe_config(&m),
        ..Report::default()
    };
    let init = m.initial();
    let mut buf = String::new();
    // parents[i]: the state i came from and the action that led to it.
    let mut parents: Vec<(u32, Option<Action>)> = vec![(u32::MAX, None)];
    let mut visited: HashMap<u128, u32> = HashMap::new();
    visited.insert(fingerprint(&init, &oracle::truth(&init), &mut buf), 0);
    let mut queue: VecDeque<(u32, World)> = VecDeque::new();
    queue.push_back((0, init));
    while let Some((idx, w)) = queue.pop_front() {
        for action in w.enabled(&m) {
            let mut next = w.clone();
            let out = next.step(&m, action, false);
            report.transitions += 1;
            for (d, before) in out.decisions {
                report.decisions += 1;
                if !oracle::true_cycle_through(&m, &before, d.agent) {
                    report.without_cycle += 1;
                    if report.first_without_cycle.is_none() {
                        let msg = format!(
                            "{} decided to {} while the real wait-for graph has no cycle \
                             through it",
                            m.config.agents[d.agent].name, d.what
                        );
                        report.first_without_cycle =
                            Some(render(&m, &parents, idx, Some(action), &msg));
                    }
                }
            }
            let snaps = oracle::truth(&next);
            let fp = fingerprint(&next, &snaps, &mut buf);
            if visited.contains_key(&fp) {
                continue;
            }
            let new = parents.len() as u32;
            parents.push((idx, Some(action)));
            visited.insert(fp, new);
            let mut verdict = oracle::safety(&m, &next, &snaps);
            if verdict.is_ok() && next.quiescent() {
                report.quiescent += 1;
                verdict = oracle::quiescent(&m, &next, &snaps);
            }
            if let Err(msg) = verdict {
                report.violation = Some(render(&m, &parents, new, None, &msg));
                report.states = parents.len();
                return report;
            }
            if parents.len() >= limit {
                report.truncated = true;
                report.deepest = Some(render(&m, &parents, new, None, "the last state visited"));
                report.states = parents.len();
                return report;
            }
            queue.push_back((new, next));
        }
    }
    report.states = parents.len();
    report
}

/// The path to state `idx` (then `last`, if given), replayed from the initial world with
/// readable lines, and the final state.
fn render(
    m: &Model,
    parents: &[(u32, Option<Action>)],
    idx: u32,
    last: Option<Action>,
    msg: &str,
) -> String {
    let mut path: Vec<Action> = last.into_iter().collect();
    let mut i = idx;
    while let (p, Some(a)) = parents[i as usize] {
        path.push(a);
        i = p;
    }
    path.reverse();
    let mut w = m.initial();
    let mut s = format!("[{}] {msg}\n{}", m.config.name, describe_config(m));
    let _ = writeln!(s, "trace ({} steps):", path.len());
    for (k, a) in path.into_iter().enumerate() {
        let out = w.step(m, a, true);
        let _ = writeln!(s, "{:3}. {}", k + 1, out.line.unwrap_or_default());
    }
    s.push_str(&describe(m, &w));
    s
}

/// The agents of a configuration and their scripts.
pub fn describe_config(m: &Model) -> String {
    let mut s = String::from("configuration:\n");
    for (a, id) in m.config.agents.iter().zip(&m.agent_ids) {
        let ops: Vec<String> = a.script.iter().map(|op| show_op(m, op)).collect();
        let abort = if a.options.abort_on_deadlock {
            ", abort_on_deadlock"
        } else {
            ""
        };
        let _ = writeln!(s, "  {} ({id}{abort}): {}", a.name, ops.join("; "));
    }
    if m.config.calm {
        s.push_str("  calls only in quiescent states\n");
    }
    s
}

/// The tables and the agents of a world, briefly.
pub fn describe(m: &Model, w: &World) -> String {
    let mut s = String::from("state:\n");
    for snap in oracle::truth(w) {
        for l in &snap.locks {
            let entries: Vec<String> = l
                .entries
                .iter()
                .map(|e| {
                    let direct = e.direct.map_or(String::new(), |d| format!(" direct {d}"));
                    format!("{} {:?}{direct}", m.name(&e.agent), e.state)
                })
                .collect();
            let _ = writeln!(
                s,
                "  table {}@{}: {}",
                l.lock,
                snap.node,
                entries.join("; ")
            );
        }
    }
    for (i, c) in w.clients.iter().enumerate() {
        let name = &m.config.agents[i].name;
        if let Some(stop) = &c.stop {
            let _ = writeln!(s, "  {name}: stopped ({stop:?})");
            continue;
        }
        let reqs: Vec<String> = c
            .core
            .requests()
            .map(|r| {
                let nodes: Vec<String> = r.nodes.iter().map(|n| n.to_string()).collect();
                format!("{} {} on {} {:?}", r.lock, r.mode, nodes.join(","), r.req)
            })
            .collect();
        let _ = writeln!(
            s,
            "  {name}: {}, script at {}/{}{}, requests: {}",
            show_status(c.core.status_ref()),
            c.pc,
            m.config.agents[i].script.len(),
            if c.blocked { " (blocked in lock)" } else { "" },
            reqs.join("; ")
        );
    }
    s
}
