//! Who waits for whom in one lock queue: the wait-for rules of a [`LockView`], shared by the
//! agents' deadlock analysis (which builds a graph from many views) and the lock server (which
//! checks, when an agent surrenders, that the waits of the cycle on its own locks still hold).
//!
//! In a view, a pending entry `X` (converting or waiting, requested mode `m`) waits
//! for — has an edge to — every agent `Y ≠ X` such that:
//! - `Y` holds the lock in a mode incompatible with `m`; or
//! - `Y` is pending ahead of `X` (converters before waiters, FIFO) in a mode incompatible with
//!   `m`: once granted, it will hold what `X` cannot share; or
//! - `Y` holds the lock in a mode incompatible with what some entry `Z ≠ Y` ahead of `X`
//!   requests: `X` is served only after `Z`, and `Z` only after `Y` lets go.
//!
//! A compatible entry ahead is not waited for by itself: it is granted together with `X` as
//! soon as its own blockers leave (two readers queued behind a writer do not wait for each
//! other). An agent never waits for itself: a holder waiting for its own upgrade is not a
//! deadlock.

use crate::proto::LockView;
use crate::{AgentId, Mode, ModeTable};
use smallvec::SmallVec;
use std::collections::{HashMap, HashSet};

/// Hash maps over agent ids of a view. ahash rather than SipHash: the ids are the table's and
/// the agents', and SipHash over an agent id (a node name and two integers) was the largest
/// single cost of a waiter on a hot lock.
type AgentMap<'v, V> = HashMap<&'v AgentId, V, ahash::RandomState>;
type AgentSet<'v> = HashSet<&'v AgentId, ahash::RandomState>;

/// Up to this many entries a [`ViewIndex`] answers by scanning the view: for a short queue
/// (the usual hot lock) building three hash tables costs more than every question asked.
const SCAN_AT_MOST: usize = 16;

/// The pending entries of `view` in the order they are served: converters (with the mode they
/// ask for) before waiters, each FIFO.
pub fn pending_of(view: &LockView) -> impl Iterator<Item = (&AgentId, Mode)> {
    view.converting
        .iter()
        .map(|c| (&c.agent, c.requested))
        .chain(view.waiting.iter().map(|w| (&w.agent, w.mode)))
}

/// Who asks for one mode among some pending entries.
#[derive(Clone, Copy)]
enum Asked<'v> {
    Nobody,
    One(&'v AgentId),
    Several,
}

/// The agents `agent` waits for in one view (the blockers of its edges in [`view_edges`]),
/// sorted, each once; empty when it does not convert or wait there.
///
/// Linear in the view, plus sorting the answer: a holder blocks `agent` through an entry ahead
/// exactly when some mode asked for ahead, by an entry other than the holder itself, is
/// incompatible with what it holds, and which modes are asked for ahead (and by whom, when by
/// one entry only) is a table of [`Mode::COUNT`] slots.
pub fn blockers_of<'v>(modes: &ModeTable, view: &'v LockView, agent: &AgentId) -> Vec<&'v AgentId> {
    let mut out = Vec::new();
    push_blockers(modes, view, agent, true, &mut out);
    out
}

/// The holders among [`blockers_of`] that do not convert or wait in `view` themselves, sorted,
/// each once. Linear in the view: a forwarding agent that can tell every pending blocker has
/// the view already asks only about these, without building and sorting the whole list.
pub fn holders_blocking<'v>(
    modes: &ModeTable,
    view: &'v LockView,
    agent: &AgentId,
) -> Vec<&'v AgentId> {
    let mut out = Vec::new();
    push_blockers(modes, view, agent, false, &mut out);
    if view.converting.len() + view.waiting.len() <= SCAN_AT_MOST {
        out.retain(|h| !pending_of(view).any(|(x, _)| x == *h));
    } else {
        let pending: AgentSet = pending_of(view).map(|(x, _)| x).collect();
        out.retain(|h| !pending.contains(h));
    }
    out
}

/// Pushes the agents `agent` waits for in `view` onto `out` (the pending ones ahead of it only
/// with `ahead`), then sorts and dedups it.
fn push_blockers<'v>(
    modes: &ModeTable,
    view: &'v LockView,
    agent: &AgentId,
    ahead: bool,
    out: &mut Vec<&'v AgentId>,
) {
    let Some((place, mode)) = pending_of(view)
        .enumerate()
        .find(|(_, (x, _))| *x == agent)
        .map(|(i, (_, m))| (i, m))
    else {
        return;
    };
    let mut asked = [Asked::Nobody; Mode::COUNT];
    for (y, my) in pending_of(view).take(place) {
        if ahead && y != agent && !modes.compatible(mode, my) {
            out.push(y);
        }
        let slot = &mut asked[my.index()];
        *slot = match *slot {
            Asked::Nobody => Asked::One(y),
            _ => Asked::Several,
        };
    }
    for h in view.granted.iter().filter(|h| h.agent != *agent) {
        let blocks_ahead = Mode::ALL.iter().any(|&mz| {
            let by_other = match asked[mz.index()] {
                Asked::Nobody => false,
                Asked::One(z) => *z != h.agent,
                Asked::Several => true,
            };
            by_other && !modes.compatible(mz, h.mode)
        });
        if blocks_ahead || !modes.compatible(mode, h.mode) {
            out.push(&h.agent);
        }
    }
    out.sort_unstable();
    out.dedup();
}

/// The first agent converting or waiting in `view` that waits for `holder`, a holder that does
/// not convert: the first pending entry whose mode is incompatible with the mode `holder`
/// holds. Every pending entry from there on waits for `holder` ([`view_edges`]), none before it
/// does. `None` when `holder` holds nothing there, converts, or blocks nobody. (For many
/// holders of one view, [`ViewIndex::first_blocked_by`] answers each without a pass.)
pub fn first_blocked_by<'v>(
    modes: &ModeTable,
    view: &'v LockView,
    holder: &AgentId,
) -> Option<&'v AgentId> {
    if view.converting.iter().any(|c| c.agent == *holder) {
        return None;
    }
    let held = view.granted.iter().find(|h| h.agent == *holder)?.mode;
    pending_of(view)
        .find(|(_, m)| !modes.compatible(*m, held))
        .map(|(a, _)| a)
}

/// Questions about one view asked for many agents (a forwarding agent asks them for every agent
/// it waits for): built in one pass over the view, after which each answer is a hash look-up,
/// so asking for all of a hot lock's holders costs what the view holds, not its square. A short
/// view (at most `SCAN_AT_MOST` entries) is scanned instead: the same answers, without building
/// hash tables.
#[derive(Debug)]
pub struct ViewIndex<'v> {
    view: &'v LockView,
    /// `None` for a short view.
    hashed: Option<Hashed<'v>>,
    /// Per held mode, the first pending entry whose mode is incompatible with it.
    first_blocked: [Option<&'v AgentId>; Mode::COUNT],
}

#[derive(Debug)]
struct Hashed<'v> {
    pending: AgentSet<'v>,
    converting: AgentSet<'v>,
    /// The mode each holder holds (its first entry, as [`first_blocked_by`] reads it).
    held: AgentMap<'v, Mode>,
}

impl<'v> ViewIndex<'v> {
    /// Indexes `view`.
    pub fn new(modes: &ModeTable, view: &'v LockView) -> ViewIndex<'v> {
        let mut first_blocked = [None; Mode::COUNT];
        for (x, m) in pending_of(view) {
            for mh in Mode::ALL {
                let slot = &mut first_blocked[mh.index()];
                if slot.is_none() && !modes.compatible(m, mh) {
                    *slot = Some(x);
                }
            }
        }
        let entries = view.granted.len() + view.converting.len() + view.waiting.len();
        let hashed = (entries > SCAN_AT_MOST).then(|| {
            let mut held =
                AgentMap::with_capacity_and_hasher(view.granted.len(), ahash::RandomState::new());
            for h in &view.granted {
                held.entry(&h.agent).or_insert(h.mode);
            }
            Hashed {
                pending: pending_of(view).map(|(x, _)| x).collect(),
                converting: view.converting.iter().map(|c| &c.agent).collect(),
                held,
            }
        });
        ViewIndex {
            view,
            hashed,
            first_blocked,
        }
    }

    /// Whether `agent` converts or waits in the view.
    pub fn is_pending(&self, agent: &AgentId) -> bool {
        match &self.hashed {
            Some(h) => h.pending.contains(agent),
            None => pending_of(self.view).any(|(x, _)| x == agent),
        }
    }

    /// [`first_blocked_by`] of the indexed view.
    pub fn first_blocked_by(&self, holder: &AgentId) -> Option<&'v AgentId> {
        let held = match &self.hashed {
            Some(h) => {
                if h.converting.contains(holder) {
                    return None;
                }
                *h.held.get(holder)?
            }
            None => {
                if self.view.converting.iter().any(|c| c.agent == *holder) {
                    return None;
                }
                self.view.granted.iter().find(|h| h.agent == *holder)?.mode
            }
        };
        self.first_blocked[held.index()]
    }
}

/// Whether some agent waits for `agent` in one view (an edge of [`view_edges`] ends at it).
/// Linear in the view: an edge to a holder comes from a pending entry incompatible with what it
/// holds (one blocked through an entry ahead has such an entry ahead of it), and an edge to a
/// pending entry from an entry behind it incompatible with what it asks for.
pub fn is_waited_for(modes: &ModeTable, view: &LockView, agent: &AgentId) -> bool {
    let held = view
        .granted
        .iter()
        .find(|h| h.agent == *agent)
        .map(|h| h.mode);
    let mut asked = None;
    for (x, m) in pending_of(view) {
        if x == agent {
            asked = Some(m);
            continue;
        }
        if held.is_some_and(|h| !modes.compatible(m, h))
            || asked.is_some_and(|a| !modes.compatible(m, a))
        {
            return true;
        }
    }
    false
}

/// The wait-for edges `(waiter, blocker)` one view implies (module documentation), each once
/// (for a view that keeps [`LockView`]'s invariant of one pending entry per agent), grouped by
/// waiter in queue order, in an order fixed by the view.
///
/// Linear in the view and the edges: holders and entries ahead are grouped by mode, so a waiter
/// looks only at the groups that block it, and every agent of the view gets a number, so that
/// "already a blocker of this waiter" and "already blocking an entry ahead" are array look-ups.
/// A waiter's blockers come from three groups of distinct agents (holders incompatible with it,
/// entries ahead incompatible with it, holders blocking an entry ahead), so it makes at most
/// three pushes per edge it gets.
///
/// A short view (at most `SCAN_AT_MOST` entries, the usual queue) numbers its agents by
/// scanning the few numbered so far and keeps its groups inline: the same edges without a hash
/// table or a dozen small allocations, which cost a deadlock analysis more than the edges.
pub fn view_edges<'v>(modes: &ModeTable, view: &'v LockView) -> Vec<(&'v AgentId, &'v AgentId)> {
    let entries = view.granted.len() + view.converting.len() + view.waiting.len();
    let mut numbers = Numbers::new(entries);
    for a in view
        .granted
        .iter()
        .map(|e| &e.agent)
        .chain(pending_of(view).map(|(a, _)| a))
    {
        numbers.add(a);
    }
    let n = numbers.len();
    let mut holding: [Group<'v>; Mode::COUNT] = Default::default();
    for h in &view.granted {
        holding[h.mode.index()].push((numbers.of(&h.agent), &h.agent));
    }
    let mut ahead: [Group<'v>; Mode::COUNT] = Default::default();
    // Holders that block some entry ahead of the current one, and whether every holder of a
    // mode does (then its group need not be looked at again).
    let mut blocking_ahead: Group<'v> = Group::new();
    let mut is_blocking_ahead: SmallVec<[bool; SCAN_AT_MOST]> = smallvec::smallvec![false; n];
    let mut group_blocking_ahead = [false; Mode::COUNT];
    // The waiter each agent was last made a blocker of.
    let mut blocker_of: SmallVec<[usize; SCAN_AT_MOST]> = smallvec::smallvec![usize::MAX; n];
    let mut out = Vec::new();
    for (x, m) in pending_of(view) {
        let xn = numbers.of(x);
        let mut push = |(yn, y): (usize, &'v AgentId)| {
            if yn != xn && blocker_of[yn] != xn {
                blocker_of[yn] = xn;
                out.push((x, y));
            }
        };
        for mode in Mode::ALL {
            if !modes.compatible(m, mode) {
                holding[mode.index()].iter().copied().for_each(&mut push);
                ahead[mode.index()].iter().copied().for_each(&mut push);
            }
        }
        blocking_ahead.iter().copied().for_each(&mut push);
        for mode in Mode::ALL {
            let i = mode.index();
            if group_blocking_ahead[i] || modes.compatible(m, mode) {
                continue;
            }
            // A holder does not block itself: a group holding `x` is looked at again later.
            let mut all = true;
            for &(hn, h) in &holding[i] {
                if hn == xn {
                    all = false;
                } else if !is_blocking_ahead[hn] {
                    is_blocking_ahead[hn] = true;
                    blocking_ahead.push((hn, h));
                }
            }
            group_blocking_ahead[i] = all;
        }
        ahead[m.index()].push((xn, x));
    }
    out
}

/// Numbered agents of one view, inline in a short one.
type Group<'v> = SmallVec<[(usize, &'v AgentId); 2]>;

/// The numbers [`view_edges`] gives the agents of a view, in the order first seen: found by a
/// scan of those numbered so far in a short view, by a hash table in a long one.
enum Numbers<'v> {
    Scan(SmallVec<[&'v AgentId; SCAN_AT_MOST]>),
    Hashed(AgentMap<'v, usize>),
}

impl<'v> Numbers<'v> {
    /// Room for a view of `entries` entries.
    fn new(entries: usize) -> Numbers<'v> {
        if entries <= SCAN_AT_MOST {
            Numbers::Scan(SmallVec::new())
        } else {
            Numbers::Hashed(AgentMap::with_capacity_and_hasher(
                entries,
                ahash::RandomState::new(),
            ))
        }
    }

    /// Numbers `a`, unless it has a number already.
    fn add(&mut self, a: &'v AgentId) {
        match self {
            Numbers::Scan(seen) => {
                if !seen.contains(&a) {
                    seen.push(a);
                }
            }
            Numbers::Hashed(map) => {
                let next = map.len();
                map.entry(a).or_insert(next);
            }
        }
    }

    /// How many agents are numbered.
    fn len(&self) -> usize {
        match self {
            Numbers::Scan(seen) => seen.len(),
            Numbers::Hashed(map) => map.len(),
        }
    }

    /// The number of `a`, which was added.
    fn of(&self, a: &AgentId) -> usize {
        let found = match self {
            Numbers::Scan(seen) => seen.iter().position(|x| *x == a),
            Numbers::Hashed(map) => map.get(a).copied(),
        };
        found.unwrap_or_else(|| unreachable!("every agent of the view is numbered"))
    }
}
