//! The cluster's wait-for graph, built from the lock tables of a [`ClusterView`], and its two
//! renderings: text (one line per edge) and Graphviz DOT.
//!
//! Vertices are agents (transactions). An edge `waiter → blocker` labelled `lock@node` says
//! that on `node`'s table, `waiter` (converting or waiting on `lock`) waits for `blocker`, by
//! the queue rules the agents' own deadlock detection uses ([`locks_core::waits::view_edges`]:
//! incompatible holders, incompatible entries ahead, holders of what an entry ahead needs).
//! Edges from several nodes meet at the agents, so a deadlock across nodes shows as a cycle;
//! the edges on a cycle (both ends in one strongly connected component) are marked.
//!
//! Invariants: everything here is a pure function of the view; edges are sorted (waiter,
//! blocker, node, lock) and each appears once, so two equal views render byte for byte the
//! same; DOT ids and labels are always quoted and escaped, whatever the lock keys contain.
//!
//! **Bounded.** A queue of `n` waiters alone implies up to `n²/2` edges (each waits for every
//! incompatible entry ahead), so the graph takes at most [`MAX_EDGES`] edges, locks in the
//! view's order: a queue whose edges would pass the bound is read only up to the last waiter
//! that fits (the edges of a waiter depend only on the holders and the entries ahead of it, so
//! those are exactly its edges), and its node is listed in [`WaitForGraph::truncated`]. The
//! work is linear in the view and in the edges taken.

use super::ClusterView;
use locks_core::escape::Escaped;
use locks_core::proto::LockView;
use locks_core::waits::view_edges;
use locks_core::{AgentId, Key, LockId, ModeTable, NodeId};
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

/// The most edges a graph takes (see the module documentation).
pub const MAX_EDGES: usize = 10_000;

/// One edge of the wait-for graph: on `node`, `waiter` waits for `blocker` on `lock`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WaitEdge {
    /// The waiting agent (converting or waiting on the lock).
    pub waiter: AgentId,
    /// The agent it waits for (a holder, or an entry served before it).
    pub blocker: AgentId,
    /// The node of the lock's table.
    pub node: NodeId,
    /// The lock.
    pub lock: LockId,
    /// Whether the edge lies on a cycle of the graph (a deadlock not resolved yet, when the
    /// tables were read).
    pub in_cycle: bool,
}

/// The wait-for graph of a [`ClusterView`] (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct WaitForGraph {
    /// The edges, sorted, each once.
    pub edges: Vec<WaitEdge>,
    /// The nodes that did not answer: their waits are not in the graph.
    pub missing: Vec<NodeId>,
    /// The nodes that listed only part of their table, or whose waits were more than the
    /// graph takes ([`MAX_EDGES`]): some of their waits may be missing.
    pub truncated: Vec<NodeId>,
}

/// Builds the wait-for graph of `view`, reading every queue with the compatibility of `modes`.
pub fn wait_for_graph(view: &ClusterView, modes: &ModeTable) -> WaitForGraph {
    wait_for_graph_within(view, modes, MAX_EDGES)
}

/// [`wait_for_graph`] taking at most `max_edges` edges.
pub(super) fn wait_for_graph_within(
    view: &ClusterView,
    modes: &ModeTable,
    max_edges: usize,
) -> WaitForGraph {
    let mut edges: BTreeSet<(AgentId, AgentId, NodeId, LockId)> = BTreeSet::new();
    let mut left = max_edges;
    let mut cut: BTreeSet<&NodeId> = view.truncated().into_iter().collect();
    for (node, table) in &view.nodes {
        for lock in &table.locks {
            let Some(queue) = within(&lock.view, left) else {
                cut.insert(node);
                continue;
            };
            if matches!(queue, Cow::Owned(_)) {
                cut.insert(node);
            }
            let found = view_edges(modes, &queue);
            left = left.saturating_sub(found.len());
            for (waiter, blocker) in found {
                edges.insert((
                    waiter.clone(),
                    blocker.clone(),
                    node.clone(),
                    lock.lock.clone(),
                ));
            }
        }
    }
    let cyclic = cyclic_components(edges.iter().map(|(w, b, _, _)| (w, b)));
    let edges = edges
        .into_iter()
        .map(|(waiter, blocker, node, lock)| {
            let in_cycle = matches!(
                (cyclic.get(&waiter), cyclic.get(&blocker)),
                (Some(a), Some(b)) if a == b
            );
            WaitEdge {
                waiter,
                blocker,
                node,
                lock,
                in_cycle,
            }
        })
        .collect();
    WaitForGraph {
        edges,
        missing: view.missing.clone(),
        truncated: cut.into_iter().cloned().collect(),
    }
}

/// `view` with only as many of its pending entries (conversions, then waiters: the order they
/// are served in) as can imply at most `left` edges: a waiter has at most one edge per other
/// entry, so `k` pending entries imply at most `k × (holders + k)`. Borrowed when whole;
/// `None` when it has pending entries and not even one fits.
fn within(view: &LockView, left: usize) -> Option<Cow<'_, LockView>> {
    let (held, pending) = (
        view.granted.len(),
        view.converting.len() + view.waiting.len(),
    );
    let bound = |k: usize| k.saturating_mul(held.saturating_add(k));
    if bound(pending) <= left {
        return Some(Cow::Borrowed(view));
    }
    // The largest k that fits (the bound grows with k); k < pending here.
    let (mut lo, mut hi) = (0, pending);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if bound(mid) <= left {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    if lo == 0 {
        return None;
    }
    let converting = view.converting.len().min(lo);
    Some(Cow::Owned(LockView {
        version: view.version,
        group: view.group,
        granted: view.granted.clone(),
        converting: view.converting[..converting].to_vec(),
        waiting: view.waiting[..lo - converting].to_vec(),
    }))
}

/// The component number of every agent that lies on a cycle (a strongly connected component
/// of two or more agents; agents never wait for themselves). Kosaraju's algorithm with
/// explicit stacks, so a long chain of waiters cannot overflow the thread's stack.
fn cyclic_components<'a>(
    edges: impl Iterator<Item = (&'a AgentId, &'a AgentId)>,
) -> HashMap<AgentId, usize> {
    let mut index: HashMap<&AgentId, usize> = HashMap::new();
    let mut names: Vec<&AgentId> = Vec::new();
    let mut forward: Vec<Vec<usize>> = Vec::new();
    let mut backward: Vec<Vec<usize>> = Vec::new();
    let mut number = |a: &'a AgentId, names: &mut Vec<&'a AgentId>| -> usize {
        *index.entry(a).or_insert_with(|| {
            names.push(a);
            names.len() - 1
        })
    };
    for (w, b) in edges {
        let (w, b) = (number(w, &mut names), number(b, &mut names));
        let n = names.len();
        forward.resize_with(n, Vec::new);
        backward.resize_with(n, Vec::new);
        forward[w].push(b);
        backward[b].push(w);
    }
    let n = names.len();
    // First pass: the order in which the depth-first searches finish.
    let mut seen = vec![false; n];
    let mut finished = Vec::with_capacity(n);
    for start in 0..n {
        if seen[start] {
            continue;
        }
        seen[start] = true;
        let mut stack = vec![(start, 0usize)];
        while let Some((v, next)) = stack.pop() {
            if let Some(&w) = forward[v].get(next) {
                stack.push((v, next + 1));
                if !seen[w] {
                    seen[w] = true;
                    stack.push((w, 0));
                }
            } else {
                finished.push(v);
            }
        }
    }
    // Second pass, on the reversed graph, latest finished first: each search is a component.
    let mut component = vec![usize::MAX; n];
    let mut sizes = Vec::new();
    for &start in finished.iter().rev() {
        if component[start] != usize::MAX {
            continue;
        }
        let c = sizes.len();
        let mut size = 0;
        component[start] = c;
        let mut stack = vec![start];
        while let Some(v) = stack.pop() {
            size += 1;
            for &w in &backward[v] {
                if component[w] == usize::MAX {
                    component[w] = c;
                    stack.push(w);
                }
            }
        }
        sizes.push(size);
    }
    (0..n)
        .filter(|&v| sizes[component[v]] > 1)
        .map(|v| (names[v].clone(), component[v]))
        .collect()
}

/// A lock id as the node binary writes it: its keys joined by `/`, each as [`slash_key`]
/// writes it, so that a path is always one token of one line.
pub fn slash(lock: &LockId) -> String {
    let mut out = String::new();
    for (i, key) in lock.keys().iter().enumerate() {
        if i > 0 {
            out.push('/');
        }
        slash_key(key, &mut out);
    }
    out
}

/// Writes one key of a slash path: an integer as its digits, bytes as `0x` and their hex, and
/// a string with each byte of its UTF-8 that is `%`, `/`, `@`, `,` or not a visible ASCII
/// character (space, control characters, anything beyond ASCII) as `%` and two upper-case hex
/// digits. [`key_from_slash`] reads it back.
pub fn slash_key(key: &Key, out: &mut String) {
    match key {
        Key::Str(s) => {
            for b in s.bytes() {
                if b.is_ascii_graphic() && !matches!(b, b'%' | b'/' | b'@' | b',') {
                    out.push(char::from(b));
                } else {
                    let _ = write!(out, "%{b:02X}");
                }
            }
        }
        key => {
            let _ = write!(out, "{key}");
        }
    }
}

/// The string key one segment of a slash path names: each `%` and two hex digits is that byte
/// (see [`slash_key`]), and the bytes must be UTF-8.
pub fn key_from_slash(segment: &str) -> Result<Key, String> {
    let bad = || format!("bad %-escape in the key {}", Escaped::bounded(segment, 64));
    let mut bytes = Vec::with_capacity(segment.len());
    let mut rest = segment.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = tail.get(..2).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            bytes.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes)
        .map(Key::from)
        .map_err(|_| format!("the key {} is not UTF-8", Escaped::bounded(segment, 64)))
}

/// `s` as a quoted DOT id: backslashes and quotes escaped, line breaks written `\n`.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl WaitForGraph {
    /// One line per edge, in the graph's order:
    /// `edge <waiter> <blocker> <lock>@<node>`, followed by ` cycle` when the edge lies on a
    /// cycle. (Lock ids as [`slash`] writes them.)
    pub fn text_lines(&self) -> Vec<String> {
        self.edges
            .iter()
            .map(|e| {
                format!(
                    "edge {} {} {}@{}{}",
                    e.waiter,
                    e.blocker,
                    slash(&e.lock),
                    e.node,
                    if e.in_cycle { " cycle" } else { "" }
                )
            })
            .collect()
    }

    /// The graph in Graphviz DOT (`dot -Tsvg graph.dot > graph.svg`): one statement per line,
    /// one edge line per edge (`"waiter" -> "blocker" [label="lock@node"]`, red on a cycle),
    /// and the missing and truncated nodes as comments.
    pub fn to_dot(&self) -> String {
        let mut out = String::from("digraph waits {\n  rankdir=LR;\n  node [shape=box];\n");
        for (what, nodes) in [("missing", &self.missing), ("truncated", &self.truncated)] {
            if !nodes.is_empty() {
                let names: Vec<&str> = nodes.iter().map(NodeId::as_str).collect();
                // Node names have no whitespace or control characters: safe in a comment.
                let _ = writeln!(out, "  // {what}: {}", names.join(","));
            }
        }
        for e in &self.edges {
            let label = quoted(&format!("{}@{}", slash(&e.lock), e.node));
            let _ = writeln!(
                out,
                "  {} -> {} [label={label}{}];",
                quoted(&e.waiter.to_string()),
                quoted(&e.blocker.to_string()),
                if e.in_cycle { ", color=red" } else { "" }
            );
        }
        out.push_str("}\n");
        out
    }
}
