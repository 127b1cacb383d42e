//! The options of a transaction and the requirement of a multi-node request.
//!
//! [`Options`] are given when a transaction begins (Erlang's `begin_transaction/2` options,
//! `reference/erlang-locks.md` 4.2). [`Req`] says how many of the nodes a request names must
//! grant it before it counts as held (4.4); the counting rules live here so that the status
//! computation and the "can this still be served" check use one definition.

/// How a transaction behaves when things go wrong.
///
/// ```
/// use locks_agent::Options;
/// let opts = Options { abort_on_deadlock: true, ..Options::default() };
/// assert!(!opts.await_nodes);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// When this agent is the victim of a deadlock and the lock it would surrender belongs to a
    /// request the client was already told it holds, abort the transaction instead of
    /// surrendering the lock behind the client's back (Erlang's `abort_on_deadlock`, 5.8).
    /// Locks not yet reported to the client are surrendered silently either way.
    pub abort_on_deadlock: bool,
    /// When a node goes down, wait for it to come back and ask again, instead of reporting the
    /// requests that can no longer be met as [`crate::TransactionStatus::CannotServe`]
    /// (Erlang's `await_nodes`, 5.9).
    pub await_nodes: bool,
}

/// How many of the nodes named in a request must grant it (`reference/erlang-locks.md` 4.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Req {
    /// Every listed node.
    #[default]
    All,
    /// At least one listed node.
    Any,
    /// More than half of the listed nodes; nodes that are down still count in the denominator.
    Majority,
    /// Every listed node that is not down (trivially met when all of them are down).
    AllAlive,
}

impl Req {
    /// Whether a request on `listed` nodes, of which `had` grant it and `down` are down, is held.
    /// `had` counts only nodes that are up.
    pub fn is_met(self, listed: usize, had: usize, down: usize) -> bool {
        match self {
            Req::All => had >= listed,
            Req::Any => had >= 1,
            Req::Majority => had > listed / 2,
            Req::AllAlive => had >= listed.saturating_sub(down),
        }
    }

    /// Whether a request on `listed` nodes can still be met when `lost` of them can never grant
    /// it (down without `await_nodes`, or refused by their server). For [`Req::AllAlive`] the
    /// caller counts as lost only nodes that are up and refused it: down nodes are excused.
    pub fn can_be_met(self, listed: usize, lost: usize) -> bool {
        let left = listed.saturating_sub(lost);
        match self {
            Req::All | Req::AllAlive => lost == 0,
            Req::Any => left >= 1,
            Req::Majority => left > listed / 2,
        }
    }

    /// The requirement a request has after the same lock was asked for again with `other`: the
    /// stronger of the two, or `None` when neither implies the other (`Majority` against
    /// `AllAlive`: with nodes down either can be the harder one).
    pub fn stronger(self, other: Req) -> Option<Req> {
        match (self, other) {
            (a, b) if a == b => Some(a),
            (Req::All, _) | (_, Req::All) => Some(Req::All),
            (Req::Any, b) => Some(b),
            (a, Req::Any) => Some(a),
            _ => None,
        }
    }
}

impl std::fmt::Display for Req {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Req::All => "all",
            Req::Any => "any",
            Req::Majority => "majority",
            Req::AllAlive => "all_alive",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_counts_down_nodes_in_the_denominator() {
        // 3 listed, 1 down, 2 had: 2 > 3/2.
        assert!(Req::Majority.is_met(3, 2, 1));
        // 4 listed, 2 down, 2 had: 2 is not > 4/2.
        assert!(!Req::Majority.is_met(4, 2, 2));
        assert!(Req::Majority.can_be_met(3, 1));
        assert!(!Req::Majority.can_be_met(3, 2));
        assert!(!Req::Majority.can_be_met(4, 2));
    }

    #[test]
    fn all_alive_excuses_down_nodes() {
        assert!(Req::AllAlive.is_met(3, 2, 1));
        assert!(!Req::AllAlive.is_met(3, 1, 1));
        assert!(
            Req::AllAlive.is_met(2, 0, 2),
            "all down: trivially held (4.4)"
        );
    }

    #[test]
    fn any_and_all() {
        assert!(Req::Any.is_met(3, 1, 2));
        assert!(!Req::Any.is_met(3, 0, 0));
        assert!(Req::Any.can_be_met(3, 2));
        assert!(!Req::Any.can_be_met(3, 3));
        assert!(Req::All.is_met(2, 2, 0));
        assert!(!Req::All.is_met(2, 1, 0));
        assert!(!Req::All.can_be_met(2, 1));
    }

    #[test]
    fn stronger_requirement() {
        assert_eq!(Req::Any.stronger(Req::Majority), Some(Req::Majority));
        assert_eq!(Req::AllAlive.stronger(Req::All), Some(Req::All));
        assert_eq!(Req::Majority.stronger(Req::Majority), Some(Req::Majority));
        assert_eq!(Req::Majority.stronger(Req::AllAlive), None);
    }
}
