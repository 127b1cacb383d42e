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
