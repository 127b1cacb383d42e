//! One agent's entry on one lock: what it asked for directly, the intention modes its direct locks
//! on descendants need, what it holds and what it waits for.
//!
//! Invariants (kept by [`super::record::LockRecord`]):
//! - `need()` is `Some` for every stored entry (an entry that needs nothing is removed);
//! - `held == Some(h)` and `want == None`: granted, and `h == need()` once the lock has settled;
//! - `held == Some(h)` and `want == Some(w)`: converting (in the conversion queue), `w` is
//!   `group(need, h)` and `h` does not cover `need`;
//! - `held == None` and `want == Some(w)`: waiting (in the wait queue), `w == need()`;
//! - `version` is the table version at which the agent became a holder (conversions up or down
//!   keep it, so holders list in the order they joined), or at which the entry started waiting;
//! - at most one of `one_intent` and `intents` is set: the intention modes the agent's direct
//!   locks on descendants need are counted in `intents`, except while a single such lock is
//!   all there is (`one_intent`: the usual transaction's ancestors, which then need no box).

use locks_core::proto::EntryState;
use locks_core::{Mode, ModeTable};

/// How many of an agent's direct locks on descendants of a lock need each intention mode there.
///
/// Boxed inside [`Entry`] because most entries (leaf locks) have none: a single-level write lock
/// pays one null pointer for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct IntentCounts([u32; Mode::COUNT]);

impl IntentCounts {
    /// The distinct intention modes with a non-zero count, folded onto `start` in matrix order.
    fn fold_onto(&self, modes: &ModeTable, start: Option<Mode>) -> Option<Mode> {
        let mut acc = start;
        for m in Mode::ALL {
            if self.0[m.index()] > 0 {
                acc = Some(acc.map_or(m, |g| modes.group(m, g)));
            }
        }
        acc
    }

    /// Like [`Self::fold_onto`], keeping only the intention modes `within` covers.
    fn fold_covered_onto(&self, modes: &ModeTable, start: Mode, within: Mode) -> Mode {
        let mut acc = start;
        for m in Mode::ALL {
            if self.0[m.index()] > 0 && modes.covers(within, m) {
                acc = modes.group(m, acc);
            }
        }
        acc
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(|&c| c == 0)
    }
}

/// One agent's entry on one lock. 24 bytes, so that a lock with one holder keeps it inline.
#[derive(Clone, Debug)]
pub(super) struct Entry {
    /// Table version at which the agent became a holder (or began waiting).
    pub version: u64,
    /// Intention modes needed by this agent's direct locks on descendants, when there are two
    /// or more of them (see `one_intent`).
    intents: Option<Box<IntentCounts>>,
    /// The agent (interned).
    pub agent: u32,
    /// The agent's direct lock on this id (granted or not): the group of the modes it asked for.
    pub direct: Option<Mode>,
    /// The mode granted, if any.
    pub held: Option<Mode>,
    /// The mode waited for (converting when `held` is `Some`, waiting otherwise).
    pub want: Option<Mode>,
    /// The intention mode of the agent's one direct lock on a descendant, when that is its only
    /// one (`intents` is then `None`). Fits the entry's last spare byte.
    one_intent: Option<Mode>,
}

impl Entry {
    /// A fresh entry that needs nothing yet.
    pub fn new(agent: u32, version: u64) -> Entry {
        Entry {
            version,
            intents: None,
            agent,
            direct: None,
            held: None,
            want: None,
            one_intent: None,
        }
    }

    /// The mode this entry needs: the group of its direct mode and of every intention mode its
    /// descendants need (direct first, then intentions in matrix order, so the result does not
    /// depend on history).
    pub fn need(&self, modes: &ModeTable) -> Option<Mode> {
        match (&self.intents, self.one_intent) {
            (Some(counts), _) => counts.fold_onto(modes, self.direct),
            (None, Some(m)) => Some(self.direct.map_or(m, |d| modes.group(m, d))),
            (None, None) => self.direct,
        }
    }

    /// What of `held` this entry still asks for once its direct mode is `direct`: the group of
    /// `direct` and of the intention modes it counts that `held` covers. (It may not be covered
    /// by `held` itself: `direct` may be a mode the entry has not been granted.)
    pub fn still_asked(&self, modes: &ModeTable, direct: Mode, held: Mode) -> Mode {
        match (&self.intents, self.one_intent) {
            (Some(counts), _) => counts.fold_covered_onto(modes, direct, held),
            (None, Some(m)) if modes.covers(held, m) => modes.group(m, direct),
            (None, _) => direct,
        }
    }

    /// One more direct lock on a descendant needs intention mode `mode` here.
    pub fn add_intent(&mut self, mode: Mode) {
        if self.intents.is_none() {
            match self.one_intent {
                None => {
                    self.one_intent = Some(mode);
                    return;
                }
                // A second one: both are counted from now on.
                Some(one) => {
                    let mut counts = Box::<IntentCounts>::default();
                    counts.0[one.index()] = 1;
                    self.intents = Some(counts);
                    self.one_intent = None;
                }
            }
        }
        if let Some(counts) = &mut self.intents {
            counts.0[mode.index()] = counts.0[mode.index()].saturating_add(1);
        }
    }

    /// One direct lock on a descendant that needed `mode` here is gone.
    pub fn remove_intent(&mut self, mode: Mode) {
        if self.one_intent == Some(mode) {
            self.one_intent = None;
            return;
        }
        debug_assert!(self.one_intent.is_none(), "intention count underflow");
        if let Some(counts) = &mut self.intents {
            let c = &mut counts.0[mode.index()];
            debug_assert!(*c > 0, "intention count underflow");
            *c = c.saturating_sub(1);
            if counts.is_empty() {
                self.intents = None;
            }
        }
    }

    /// The entry as agents see it.
    pub fn state(&self) -> EntryState {
        match (self.held, self.want) {
            (Some(h), None) => EntryState::Granted(h),
            (Some(held), Some(requested)) => EntryState::Converting { held, requested },
            (None, Some(w)) => EntryState::Waiting(w),
            (None, None) => EntryState::Absent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_intents(e: &Entry) -> bool {
        e.intents.is_some() || e.one_intent.is_some()
    }

    /// The need and what is still asked of every held mode, from plain counts.
    fn reference(
        modes: &ModeTable,
        direct: Option<Mode>,
        counts: &[u32; Mode::COUNT],
    ) -> (Option<Mode>, Vec<Mode>) {
        let ic = IntentCounts(*counts);
        let need = ic.fold_onto(modes, direct);
        let asked = Mode::ALL
            .into_iter()
            .map(|h| ic.fold_covered_onto(modes, direct.unwrap_or(Mode::IS), h))
            .collect();
        (need, asked)
    }

    proptest::proptest! {
        /// Counting a single intention inline answers exactly as counting every one in a box,
        /// through any sequence of descendants' locks coming and going.
        #[test]
        fn the_inline_intention_counts_as_the_box_does(
            direct in proptest::option::of(0..Mode::COUNT),
            ops in proptest::collection::vec((proptest::bool::ANY, 0..Mode::COUNT), 0..40),
        ) {
            let modes = ModeTable::standard();
            let mut e = Entry::new(0, 0);
            e.direct = direct.map(|i| Mode::ALL[i]);
            let mut counts = [0u32; Mode::COUNT];
            for (add, i) in ops {
                let m = Mode::ALL[i];
                if add {
                    e.add_intent(m);
                    counts[i] += 1;
                } else if counts[i] > 0 {
                    e.remove_intent(m);
                    counts[i] -= 1;
                } else {
                    continue;
                }
                let (need, asked) = reference(&modes, e.direct, &counts);
                proptest::prop_assert_eq!(e.need(&modes), need);
                let got: Vec<Mode> = Mode::ALL
                    .into_iter()
                    .map(|h| e.still_asked(&modes, e.direct.unwrap_or(Mode::IS), h))
                    .collect();
                proptest::prop_assert_eq!(got, asked);
                proptest::prop_assert_eq!(has_intents(&e), counts.iter().any(|&c| c > 0));
                proptest::prop_assert!(e.one_intent.is_none() || e.intents.is_none());
            }
        }
    }

    #[test]
    fn entry_stays_small() {
        assert_eq!(std::mem::size_of::<Entry>(), 24);
    }

    #[test]
    fn need_groups_direct_and_intentions() {
        let modes = ModeTable::standard();
        let mut e = Entry::new(0, 0);
        assert_eq!(e.need(&modes), None);
        e.add_intent(Mode::IS);
        assert_eq!(e.need(&modes), Some(Mode::IS));
        e.add_intent(Mode::IX);
        e.add_intent(Mode::IX);
        assert_eq!(e.need(&modes), Some(Mode::IX));
        e.direct = Some(Mode::S);
        assert_eq!(e.need(&modes), Some(Mode::SIX));
        e.remove_intent(Mode::IX);
        assert_eq!(e.need(&modes), Some(Mode::SIX));
        e.remove_intent(Mode::IX);
        assert_eq!(e.need(&modes), Some(Mode::S));
        e.remove_intent(Mode::IS);
        assert!(!has_intents(&e));
        e.direct = None;
        assert_eq!(e.need(&modes), None);
    }
}
