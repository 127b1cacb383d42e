//! The simulated network: one FIFO channel per (sender, receiver) pair.
//!
//! Invariant: no channel is kept empty, so that two networks with the same messages in flight
//! are equal and render alike (the model checker fingerprints them).

use std::collections::{BTreeMap, VecDeque};

/// The messages in flight, by channel.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Net<E, M> {
    channels: BTreeMap<(E, E), VecDeque<M>>,
}

impl<E: Ord + Clone, M> Default for Net<E, M> {
    fn default() -> Self {
        Net::new()
    }
}

impl<E: Ord + Clone, M> Net<E, M> {
    /// Nothing in flight.
    pub fn new() -> Self {
        Net {
            channels: BTreeMap::new(),
        }
    }

    /// Queues `msg` at the end of the channel from `from` to `to`.
    pub fn send(&mut self, from: E, to: E, msg: M) {
        self.channels.entry((from, to)).or_default().push_back(msg);
    }

    /// Takes the head of the channel from `from` to `to`.
    pub fn pop(&mut self, from: &E, to: &E) -> Option<M> {
        let key = (from.clone(), to.clone());
        let q = self.channels.get_mut(&key)?;
        let msg = q.pop_front();
        if q.is_empty() {
            self.channels.remove(&key);
        }
        msg
    }

    /// The channels with something in flight, in order.
    pub fn live(&self) -> Vec<(E, E)> {
        self.channels.keys().cloned().collect()
    }

    /// Whether anything is in flight.
    pub fn busy(&self) -> bool {
        !self.channels.is_empty()
    }

    /// Every channel with something in flight, and what, in order.
    pub fn channels(&self) -> impl Iterator<Item = (&E, &E, &VecDeque<M>)> {
        self.channels.iter().map(|((from, to), q)| (from, to, q))
    }

    /// What is in flight from `from` to `to`, oldest first.
    pub fn queue(&self, from: &E, to: &E) -> impl Iterator<Item = &M> {
        self.channels
            .get(&(from.clone(), to.clone()))
            .into_iter()
            .flatten()
    }

    /// Loses everything in flight on the channels `lost` says (a crash, a cut connection).
    pub fn drop_channels(&mut self, mut lost: impl FnMut(&E, &E) -> bool) {
        self.channels.retain(|(from, to), _| !lost(from, to));
    }
}
