//! What happens to the nodes and their links: islands (at once or link by link), a node's
//! crash, and its return with a member or without one.

use super::{End, Sim};
use locks_core::{MemberId, NodeId};
use locks_leader::Role;

impl Sim {
    /// Splits the cluster into the given islands (every node in exactly one), cutting every link
    /// between islands and making each island a full mesh.
    pub fn islands(&mut self, islands: &[Vec<NodeId>]) {
        let island_of = |n: &NodeId| islands.iter().position(|i| i.contains(n));
        let nodes = self.nodes();
        for a in &nodes {
            for b in &nodes {
                if a < b {
                    if island_of(a) == island_of(b) && island_of(a).is_some() {
                        self.connect(a, b);
                    } else {
                        self.disconnect(a, b);
                    }
                }
            }
        }
    }

    /// Like [`Sim::islands`], but one link at a time, in random order, with up to `between`
    /// random steps after each change: the cluster passes through the partial meshes a real
    /// rewiring does (a node already cut off from one peer and not yet from another).
    pub fn islands_gradually(&mut self, islands: &[Vec<NodeId>], between: usize) {
        let island_of = |n: &NodeId| islands.iter().position(|i| i.contains(n));
        let nodes = self.nodes();
        let mut changes = Vec::new();
        for a in &nodes {
            for b in &nodes {
                if a < b {
                    let same = island_of(a) == island_of(b) && island_of(a).is_some();
                    if same != self.connected(a, b) {
                        changes.push((a.clone(), b.clone(), same));
                    }
                }
            }
        }
        self.world.rng.shuffle(&mut changes);
        for (a, b, up) in changes {
            if up {
                self.connect(&a, &b);
            } else {
                self.disconnect(&a, &b);
            }
            let k = self.world.rng.below(between + 1);
            for _ in 0..k {
                if !self.step() {
                    break;
                }
            }
        }
    }

    /// Node `n` crashes: every connection to it is cut, what is in flight to, from and inside
    /// it is lost, its members vanish without a word (their state with them), and its table
    /// is gone. It stays down, connected to nobody, until [`Sim::restart`] or [`Sim::revive`].
    pub fn crash(&mut self, n: &NodeId) {
        for other in self.nodes() {
            self.disconnect(n, &other);
        }
        let lost = |from: &End, to: &End| from.node() == n || to.node() == n;
        self.world.net.drop_channels(lost);
        self.rounds.dropped(lost);
        for m in self.members_on(n) {
            self.members.remove(&m);
            self.world.unsettled.remove(&m);
        }
        // A restart hands out versions above every one before it, as a node with a data
        // directory does (above the versions a leader raised it to, too).
        let base = ((self.world.tables.nodes().count() as u64 + 1 + self.next_serial) << 40)
            .max(self.top_base + (1 << 40));
        self.top_base = base;
        self.world.tables.start(n.clone(), &self.modes, base);
        self.note(format!("[{}] {n} crashed", self.steps));
    }

    /// Node `n` comes back after [`Sim::crash`]: connected to every node, with a fresh
    /// member of role `role` (an empty dictionary). Returns the member.
    pub fn restart(&mut self, n: &NodeId, role: Role) -> MemberId {
        for other in self.nodes() {
            self.connect(n, &other);
        }
        self.add_member(n, role)
    }

    /// Node `n` comes back after [`Sim::crash`], connected to `peers` (an island, so that
    /// links stay transitive), with no member.
    pub fn revive(&mut self, n: &NodeId, peers: &[NodeId]) {
        for other in peers {
            self.connect(n, other);
        }
    }
}
