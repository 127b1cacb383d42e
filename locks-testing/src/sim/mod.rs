//! The deterministic simulation harness: simulated nodes with their real lock tables, actors
//! (agent cores, leader members: the simulation's own) and the messages between them, every
//! step chosen by a seeded generator so that a run is a function of its seed.
//!
//! [`World`] owns what every simulation has: the generator, the network ([`Net`]: one FIFO
//! channel per (sender, receiver) pair, as over an actix mailbox or a TCP connection), the lock
//! tables ([`Tables`], the only caller of the table's request handling), the actors that have
//! input to settle, and the trace of the last deliveries. A simulation names its endpoints
//! (type `E`, whose order is the order in which channels are offered to the generator), its
//! messages (`M`) and its actors (`A`), and says what a delivery does; [`World::next`] picks
//! the step.
//!
//! Invariant: nothing here draws from the generator except [`World::next`] (and the
//! simulation through [`World::rng`]), so the same seed and the same calls give the same run.

mod net;
mod rounds;
mod tables;
mod trace;

pub use locks_server::state_machine::Peers;
pub use net::Net;
pub use rounds::{Rounds, assert_at_most, assert_at_most_quadratic, largest_over_seeds};
pub use tables::{AllConnected, NodeTable, Route, SIM_SHARDS, Tables};
pub use trace::Trace;

use crate::seeded::Rng;
use std::collections::BTreeSet;

/// The step [`World::next`] picked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step<E, M, A> {
    /// Deliver `msg`, the head of the channel from `from` to `to` (already taken off it).
    Deliver {
        /// The sender.
        from: E,
        /// The receiver.
        to: E,
        /// The message.
        msg: M,
    },
    /// Settle this actor after a burst of input (it was taken off the unsettled set).
    Settle(A),
    /// The simulation's own choice number `i` (below the `extra` it offered).
    Extra(usize),
}

/// What every simulation has (module documentation).
#[derive(Clone, Debug)]
pub struct World<E, M, A> {
    /// The generator of the run.
    pub rng: Rng,
    /// The messages in flight.
    pub net: Net<E, M>,
    /// The lock tables of the simulated nodes.
    pub tables: Tables,
    /// The actors with input not settled yet.
    pub unsettled: BTreeSet<A>,
    /// The last deliveries, for failure reports.
    pub trace: Trace,
}

impl<E: Ord + Clone, M, A: Ord + Clone> World<E, M, A> {
    /// An empty world run by `seed`, keeping the last `trace` lines (none: 0).
    pub fn new(seed: u64, trace: usize) -> Self {
        World {
            rng: Rng::new(seed),
            net: Net::new(),
            tables: Tables::new(),
            unsettled: BTreeSet::new(),
            trace: Trace::new(trace),
        }
    }

    /// The generator.
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// Sends `msg` on the channel from `from` to `to`.
    pub fn send(&mut self, from: E, to: E, msg: M) {
        self.net.send(from, to, msg);
    }

    /// Whether anything is in flight or waiting to settle.
    pub fn busy(&self) -> bool {
        !self.unsettled.is_empty() || self.net.busy()
    }

    /// Picks the next step at random among: the head of every channel with something in
    /// flight (in channel order), every unsettled actor (in order), then `extra` choices of
    /// the simulation's own. `None` (and nothing drawn) when there is no choice at all.
    pub fn next(&mut self, extra: usize) -> Option<Step<E, M, A>> {
        let live = self.net.live();
        let unsettled = self.unsettled.len();
        let n = live.len() + unsettled + extra;
        if n == 0 {
            return None;
        }
        let pick = self.rng.below(n);
        if pick < live.len() {
            let (from, to) = live.into_iter().nth(pick).expect("a live channel");
            let msg = self.net.pop(&from, &to).expect("a live channel has a head");
            Some(Step::Deliver { from, to, msg })
        } else if pick < live.len() + unsettled {
            let a = self
                .unsettled
                .iter()
                .nth(pick - live.len())
                .cloned()
                .expect("an unsettled actor");
            self.unsettled.remove(&a);
            Some(Step::Settle(a))
        } else {
            Some(Step::Extra(pick - live.len() - unsettled))
        }
    }
}
