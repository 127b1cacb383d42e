//! Counting a run's messages and rounds: how many messages were sent, and the length of the
//! longest chain of messages each sent in answer to the one before (a Lamport clock: a message
//! is one round later than what its sender had received when it sent it).
//!
//! The simulation tells a [`Rounds`] of every send, delivery, settle and lost channel, beside
//! its [`Net`](super::Net) (which stays free of counters: the model checker compares networks).
//! Invariant: each channel's queue of rounds mirrors the messages in flight on it, as long as
//! the simulation reports every send, delivery and drop.

use std::collections::{BTreeMap, VecDeque};

/// Messages sent and the rounds of a run (module documentation).
#[derive(Clone, Debug)]
pub struct Rounds<E> {
    in_flight: BTreeMap<(E, E), VecDeque<u64>>,
    clock: BTreeMap<E, u64>,
    current: u64,
    /// Messages sent.
    pub messages: u64,
    /// The longest chain of messages, each sent after the one before arrived.
    pub rounds: u64,
}

impl<E: Ord + Clone> Default for Rounds<E> {
    fn default() -> Self {
        Rounds {
            in_flight: BTreeMap::new(),
            clock: BTreeMap::new(),
            current: 0,
            messages: 0,
            rounds: 0,
        }
    }
}

impl<E: Ord + Clone> Rounds<E> {
    /// A message was sent from `from` to `to` by whoever acts now.
    pub fn sent(&mut self, from: &E, to: &E) {
        self.messages += 1;
        let round = self.current + 1;
        self.in_flight
            .entry((from.clone(), to.clone()))
            .or_default()
            .push_back(round);
    }

    /// The head of the channel from `from` to `to` was delivered: its receiver acts now.
    pub fn delivered(&mut self, from: &E, to: &E) {
        let key = (from.clone(), to.clone());
        let round = self
            .in_flight
            .get_mut(&key)
            .and_then(|q| q.pop_front())
            .unwrap_or(0);
        if self.in_flight.get(&key).is_some_and(|q| q.is_empty()) {
            self.in_flight.remove(&key);
        }
        let clock = self.clock.entry(to.clone()).or_default();
        *clock = (*clock).max(round);
        self.current = *clock;
        self.rounds = self.rounds.max(round);
    }

    /// `e` acts now on what it has received (a settle, a timer, a client's call).
    pub fn acting(&mut self, e: &E) {
        self.current = self.clock.get(e).copied().unwrap_or(0);
    }

    /// The channels `lost` says lost what was in flight.
    pub fn dropped(&mut self, mut lost: impl FnMut(&E, &E) -> bool) {
        self.in_flight.retain(|(from, to), _| !lost(from, to));
    }

    /// Starts counting afresh (what is in flight keeps its place in the channels).
    pub fn reset(&mut self) {
        self.messages = 0;
        self.rounds = 0;
        self.current = 0;
        self.clock.clear();
        for q in self.in_flight.values_mut() {
            q.iter_mut().for_each(|r| *r = 0);
        }
    }
}

/// Runs `run(seed, n)` (a run's messages and rounds) for each size over `seeds` seeds and
/// keeps the largest counts of each size, printing a line per size headed `what`.
pub fn largest_over_seeds(
    what: &str,
    sizes: &[usize],
    seeds: u64,
    run: impl Fn(u64, usize) -> (u64, u64),
) -> Vec<(usize, u64, u64)> {
    sizes
        .iter()
        .map(|&n| {
            let (m, r) = (0..seeds)
                .map(|seed| run(seed, n))
                .fold((0, 0), |(m, r), (m2, r2)| (m.max(m2), r.max(r2)));
            println!("{what}, {n:2} nodes: {m:7} messages, {r:5} rounds");
            (n, m, r)
        })
        .collect()
}

/// Panics unless the messages and rounds of every size (`(n, messages, rounds)`, smallest
/// first) are within quadratic growth from the first size's, with a factor 2 of slack for the
/// constant terms a small cluster hides.
pub fn assert_at_most_quadratic(rows: &[(usize, u64, u64)]) {
    let Some(&(n0, m0, r0)) = rows.first() else {
        return;
    };
    for &(n, m, r) in &rows[1..] {
        let bound = |base: u64| 2 * base * (n * n) as u64 / (n0 * n0) as u64;
        assert!(
            m <= bound(m0),
            "{n} nodes: {m} messages, above quadratic growth from {m0}"
        );
        assert!(
            r <= bound(r0),
            "{n} nodes: {r} rounds, above quadratic growth from {r0}"
        );
    }
}

/// Panics if any size took more than a quarter more messages or rounds than `most` says for
/// it (the slack lets a change elsewhere move the counts a little; a change of the protocol's
/// growth moves them far).
pub fn assert_at_most(rows: &[(usize, u64, u64)], most: &[(usize, u64, u64)]) {
    for (&(n, m, r), &(n0, m0, r0)) in rows.iter().zip(most) {
        assert_eq!(n, n0, "the sizes measured and their bounds differ");
        let (bm, br) = (m0 + m0 / 4, r0 + r0 / 4);
        assert!(
            m <= bm && r <= br,
            "{n} nodes: {m} messages and {r} rounds, above {bm} and {br}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_counts_its_rounds_and_parallel_sends_do_not() {
        let mut r = Rounds::<u8>::default();
        r.acting(&0);
        r.sent(&0, &1);
        r.sent(&0, &2);
        r.delivered(&0, &1);
        r.sent(&1, &2);
        r.delivered(&0, &2);
        r.delivered(&1, &2);
        r.sent(&2, &0);
        r.delivered(&2, &0);
        assert_eq!((r.messages, r.rounds), (4, 3));
    }
}
