//! Interning of agent ids: inside the table an agent is a `u32`, so entries and queues stay small.
//!
//! Invariants: an interned agent has at least one entry or one watch (it is released as soon as
//! it has neither); `locks` holds exactly the lock slots where the agent has an entry, each once,
//! `watches` exactly the slots it watches.

use ahash::RandomState;
use locks_core::AgentId;
use smallvec::SmallVec;
use std::collections::{HashMap, HashSet};

/// What the table knows about one agent.
#[derive(Clone, Debug)]
pub(super) struct AgentSlot {
    /// The agent's id.
    pub id: AgentId,
    /// Lock slots where the agent has an entry (direct or intention).
    pub locks: SlotSet,
    /// Lock slots the agent watches.
    pub watches: SmallVec<[u32; 2]>,
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

    /// The slots, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &u32> {
        let (few, many) = match self {
            SlotSet::Few(few) => (Some(few.iter()), None),
            SlotSet::Many(many) => (None, Some(many.iter())),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        match self {
            SlotSet::Few(few) => few.is_empty(),
            SlotSet::Many(many) => many.is_empty(),
        }
    }
}

/// The agents known to the table.
#[derive(Clone, Debug, Default)]
pub(super) struct Agents {
    by_id: HashMap<AgentId, u32, RandomState>,
    slots: Vec<Option<AgentSlot>>,
    free: Vec<u32>,
}

impl Agents {
    /// The interned number of `id`, interning it if new; `None` only if 2^32 agents are known.
    pub fn intern(&mut self, id: &AgentId) -> Option<u32> {
        if let Some(&a) = self.by_id.get(id) {
            return Some(a);
        }
        let slot = AgentSlot {
            id: id.clone(),
            locks: SlotSet::default(),
            watches: SmallVec::new(),
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
        self.by_id.insert(id.clone(), a);
        Some(a)
    }

    /// The interned number of `id`, if known.
    pub fn lookup(&self, id: &AgentId) -> Option<u32> {
        self.by_id.get(id).copied()
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
            self.by_id.remove(&slot.id);
            self.free.push(a);
        }
    }

    /// Gives interned agent `a` a new id (keeping its entries and watches). `new` must not be
    /// known yet.
    pub fn rename(&mut self, a: u32, new: AgentId) {
        if let Some(slot) = self.slots.get_mut(a as usize).and_then(Option::as_mut) {
            self.by_id.remove(&slot.id);
            slot.id = new.clone();
            self.by_id.insert(new, a);
        }
    }

    /// The ids of the agents known, in no particular order.
    pub fn ids(&self) -> impl Iterator<Item = &AgentId> {
        self.by_id.keys()
    }

    /// How many agents are known.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }
}
