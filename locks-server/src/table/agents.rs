//! Interning of agent ids: inside the table an agent is a `u32`, so entries and queues stay small.
//!
//! The id is stored once, in the agent's slot; the index from id to slot is a hash table of
//! bare slot numbers hashed by their slot's id (as `super::locks` indexes lock records), so
//! interning and forgetting an agent clone and drop its id once each: every transaction of the
//! fast path is interned and forgotten, and each clone or drop of an id is an atomic operation on
//! its node name's reference count.
//!
//! Invariants: `index` holds `a` exactly when `slots[a]` holds an agent, under the hash of its
//! id, which the slot keeps (so that forgetting an agent hashes nothing); an interned agent has
//! at least one entry or one watch (it is released as soon as it has neither); `locks` holds
//! exactly the lock slots where the agent has an entry, each once, `watches` exactly the slots
//! it watches.

use ahash::RandomState;
use hashbrown::HashTable;
use locks_core::AgentId;
use smallvec::SmallVec;
use std::collections::HashSet;

/// What the table knows about one agent.
#[derive(Clone, Debug)]
pub(super) struct AgentSlot {
    /// The agent's id.
    pub id: AgentId,
    /// Lock slots where the agent has an entry (direct or intention).
    pub locks: SlotSet,
    /// Lock slots the agent watches.
    pub watches: SmallVec<[u32; 2]>,
    /// The index's hash of `id` (kept: removing and regrowing the index need it, and an agent
    /// is removed once per transaction).
    hash: u64,
}

/// How many lock slots an agent keeps inline before its set becomes a hash set.
const FEW: usize = 8;

/// The lock slots of one agent. Most agents have a handful of entries (a lock and its
/// ancestors), and a hash set per agent cost an allocation and a fresh random seed (ahash's
/// seeds come from one global counter, an atomic every thread of the fast path touched) for
/// every transaction; so a short list inline, and a hash set once the agent has more than
/// `FEW` entries (an agent with a million locks must still drop one in O(1)).
#[derive(Clone, Debug)]
pub(super) enum SlotSet {
    /// Up to `FEW` slots, no duplicates, in no particular order.
    Few(SmallVec<[u32; 4]>),
    /// More.
    Many(HashSet<u32, RandomState>),
}

impl Default for SlotSet {
    fn default() -> Self {
        SlotSet::Few(SmallVec::new())
    }
}

impl SlotSet {
    /// Adds `s` (nothing if present).
    pub fn insert(&mut self, s: u32) {
        match self {
            SlotSet::Few(few) if few.contains(&s) => {}
            SlotSet::Few(few) if few.len() < FEW => few.push(s),
            SlotSet::Few(few) => {
                // Slot numbers are the table's own, not chosen by peers: fixed seeds are safe,
                // and spare the global counter behind `RandomState::new`.
                let mut many = HashSet::with_capacity_and_hasher(
                    FEW * 2,
                    RandomState::with_seeds(0x5eed, 0x51a7, 0xa9e7, 0x10c5),
                );
                many.extend(few.iter().copied());
                many.insert(s);
                *self = SlotSet::Many(many);
            }
            SlotSet::Many(many) => {
                many.insert(s);
            }
        }
    }

    /// Removes `s` (nothing if absent).
    pub fn remove(&mut self, s: u32) {
        match self {
            SlotSet::Few(few) => {
                if let Some(i) = few.iter().position(|&t| t == s) {
                    few.swap_remove(i);
                }
            }
            SlotSet::Many(many) => {
                many.remove(&s);
            }
        }
    }

    /// Appends the slots to `out`, in no particular order.
    pub fn copy_into<const N: usize>(&self, out: &mut SmallVec<[u32; N]>) {
        match self {
            SlotSet::Few(few) => out.extend_from_slice(few),
            SlotSet::Many(many) => out.extend(many.iter().copied()),
        }
    }

    /// The slots, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &u32> {
        let (few, many) = match self {
            SlotSet::Few(few) => (Some(few.iter()), None),
            SlotSet::Many(many) => (None, Some(many.iter())),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }

    /// How many slots.
    pub fn len(&self) -> usize {
        match self {
            SlotSet::Few(few) => few.len(),
            SlotSet::Many(many) => many.len(),
        }
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        match self {
            SlotSet::Few(few) => few.is_empty(),
            SlotSet::Many(many) => many.is_empty(),
        }
    }
}

/// The id in slot `a`, if there is one.
fn id_at(slots: &[Option<AgentSlot>], a: u32) -> Option<&AgentId> {
    slots.get(a as usize)?.as_ref().map(|s| &s.id)
}

/// The agents known to the table.
#[derive(Clone, Debug, Default)]
pub(super) struct Agents {
    /// Randomly seeded: agent ids come from the network.
    hasher: RandomState,
    index: HashTable<u32>,
    slots: Vec<Option<AgentSlot>>,
    free: Vec<u32>,
}

impl Agents {
    /// The interned number of `id`, interning it if new; `None` only if 2^32 agents are known.
    pub fn intern(&mut self, id: &AgentId) -> Option<u32> {
        let hash = self.hasher.hash_one(id);
        if let Some(&a) = self.find(id, hash) {
            return Some(a);
        }
        let slot = AgentSlot {
            id: id.clone(),
            locks: SlotSet::default(),
            watches: SmallVec::new(),
            hash,
        };
        let a = match self.free.pop() {
            Some(a) => {
                self.slots[a as usize] = Some(slot);
                a
            }
            None => {
                let a = u32::try_from(self.slots.len()).ok()?;
                self.slots.push(Some(slot));
                a
            }
        };
        self.insert_index(a, hash);
        Some(a)
    }

    /// The index's entry of `id`, whose hash is `hash`.
    fn find(&self, id: &AgentId, hash: u64) -> Option<&u32> {
        let slots = &self.slots;
        self.index
            .find(hash, |&a| id_at(slots, a).is_some_and(|known| known == id))
    }

    /// Indexes slot `a` (which holds an agent) under `hash`, its id's hash.
    fn insert_index(&mut self, a: u32, hash: u64) {
        let slots = &self.slots;
        self.index.insert_unique(hash, a, |&t| {
            // Every slot in the index holds an agent (invariant); an empty one hashes as
            // nothing rather than panicking.
            slots
                .get(t as usize)
                .and_then(Option::as_ref)
                .map_or(0, |s| s.hash)
        });
    }

    /// Removes slot `a` from the index; `hash` is the hash it was indexed under.
    fn remove_index(&mut self, a: u32, hash: u64) {
        if let Ok(entry) = self.index.find_entry(hash, |&t| t == a) {
            entry.remove();
        }
    }

    /// The interned number of `id`, if known.
    pub fn lookup(&self, id: &AgentId) -> Option<u32> {
        self.find(id, self.hasher.hash_one(id)).copied()
    }

    /// The slot of interned agent `a`.
    pub fn get(&self, a: u32) -> Option<&AgentSlot> {
        self.slots.get(a as usize).and_then(Option::as_ref)
    }

    /// The slot of interned agent `a`, mutably.
    pub fn get_mut(&mut self, a: u32) -> Option<&mut AgentSlot> {
        self.slots.get_mut(a as usize).and_then(Option::as_mut)
    }

    /// The id of interned agent `a`.
    pub fn id(&self, a: u32) -> Option<&AgentId> {
        self.get(a).map(|s| &s.id)
    }

    /// Forgets `a` if it has no entry and no watch left.
    pub fn release_if_idle(&mut self, a: u32) {
        if self
            .get(a)
            .is_some_and(|s| s.locks.is_empty() && s.watches.is_empty())
        {
            self.remove(a);
        }
    }

    /// Forgets `a`.
    pub fn remove(&mut self, a: u32) {
        if let Some(slot) = self.slots.get_mut(a as usize).and_then(Option::take) {
            self.remove_index(a, slot.hash);
            self.free.push(a);
        }
    }

    /// Gives interned agent `a` a new id (keeping its entries and watches). `new` must not be
    /// known yet.
    pub fn rename(&mut self, a: u32, new: AgentId) {
        let hash = self.hasher.hash_one(&new);
        let Some(old) = self
            .slots
            .get_mut(a as usize)
            .and_then(Option::as_mut)
            .map(|slot| {
                slot.id = new;
                std::mem::replace(&mut slot.hash, hash)
            })
        else {
            return;
        };
        self.remove_index(a, old);
        self.insert_index(a, hash);
    }

    /// The ids of the agents known, in no particular order.
    pub fn ids(&self) -> impl Iterator<Item = &AgentId> {
        self.slots.iter().flatten().map(|s| &s.id)
    }

    /// How many agents are known.
    pub fn len(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks_core::NodeId;

    fn agent(node: &str, serial: u64) -> AgentId {
        AgentId::new(NodeId::new(node).unwrap(), 1, serial)
    }

    /// Every agent interned and not removed is found under its id, at its slot, and nothing
    /// else is; `len` and `ids` agree.
    fn check(agents: &Agents, live: &[(AgentId, u32)]) {
        assert_eq!(agents.len(), live.len());
        let mut ids: Vec<&AgentId> = agents.ids().collect();
        ids.sort();
        let mut expected: Vec<&AgentId> = live.iter().map(|(id, _)| id).collect();
        expected.sort();
        assert_eq!(ids, expected);
        for (id, a) in live {
            assert_eq!(agents.lookup(id), Some(*a), "{id}");
            assert_eq!(agents.id(*a), Some(id));
        }
    }

    #[test]
    fn the_index_follows_interning_removal_reuse_and_renaming_through_growth() {
        let mut agents = Agents::default();
        // Enough to make the index grow several times (each growth rehashes by slot).
        let mut live: Vec<(AgentId, u32)> = (0..1_000)
            .map(|s| {
                let id = agent("n", s);
                let a = agents.intern(&id).unwrap();
                assert_eq!(agents.intern(&id), Some(a), "interned once");
                (id, a)
            })
            .collect();
        check(&agents, &live);
        // Ids apart only in their node hash alike: both are found.
        let twin = agent("m", 7);
        let t = agents.intern(&twin).unwrap();
        assert_ne!(Some(t), agents.lookup(&agent("n", 7)));
        live.push((twin, t));
        check(&agents, &live);
        // Every other one removed; their slots are reused by new agents.
        let removed: Vec<(AgentId, u32)> = live.iter().step_by(2).cloned().collect();
        for (_, a) in &removed {
            agents.remove(*a);
        }
        live.retain(|x| !removed.contains(x));
        for (id, _) in &removed {
            assert_eq!(agents.lookup(id), None, "{id} removed");
        }
        check(&agents, &live);
        let slots: Vec<u32> = removed.iter().map(|(_, a)| *a).collect();
        for s in 5_000..5_100 {
            let id = agent("n", s);
            let a = agents.intern(&id).unwrap();
            assert!(slots.contains(&a), "a free slot is reused");
            live.push((id, a));
        }
        check(&agents, &live);
        // Renamed (as a node down makes ghosts): found under the new id only, same slot.
        for i in (0..live.len()).step_by(3) {
            let (old, a) = live[i].clone();
            let new = agent("ghost", 10_000 + i as u64);
            agents.rename(a, new.clone());
            assert_eq!(agents.lookup(&old), None, "{old} renamed");
            live[i] = (new, a);
        }
        check(&agents, &live);
    }
}
