//! The options of a transaction and the requirement of a multi-node request.
//!
//! [`Options`] are given when a transaction begins (the Erlang original's
//! `begin_transaction/2` options) and can be changed while it runs
//! (`Transaction::set_options`, the original's `change_flag/3`). [`Req`] says how many of the
//! nodes a request names must grant it before it counts as held; its counting rules
//! (`Req::is_met`, `Req::can_be_met`, `Req::stronger`) are decided with the rest of "has all
//! its locks" in `core/agent/have_all.rs`.

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
    /// surrendering the lock behind the client's back (Erlang's `abort_on_deadlock`).
    /// Locks not yet reported to the client are surrendered silently either way.
    pub abort_on_deadlock: bool,
    /// When a node goes down, wait for it to come back and ask again, instead of reporting the
    /// requests that can no longer be met as [`crate::TransactionStatus::CannotServe`]
    /// (Erlang's `await_nodes`).
    pub await_nodes: bool,
}

/// How many of the nodes named in a request must grant it.
///
/// ```
/// use locks_agent::Req;
/// // Three nodes listed, one of them down, two granting: a majority of the live ones.
/// assert!(Req::MajorityAlive.is_met(3, 2, 1));
/// // Four listed, two down, one granting: not more than half of the two live ones.
/// assert!(!Req::MajorityAlive.is_met(4, 1, 2));
/// assert_eq!(Req::MajorityAlive.to_string(), "majority_alive");
/// ```
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
    /// More than half of the listed nodes that are not down. Down nodes are excused, as for
    /// [`Req::AllAlive`]: a node going down never makes the request unservable. With every
    /// listed node down there is no live majority, so the request waits for one to come back.
    MajorityAlive,
}

impl std::fmt::Display for Req {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Req::All => "all",
            Req::Any => "any",
            Req::Majority => "majority",
            Req::AllAlive => "all_alive",
            Req::MajorityAlive => "majority_alive",
        })
    }
}

/// A requirement name that is none of [`Req`]'s.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown requirement {0} (expected all, any, majority, all_alive or majority_alive)")]
pub struct UnknownReq(pub String);

impl std::str::FromStr for Req {
    type Err = UnknownReq;

    /// Parses the name [`Req`]'s `Display` gives (the Erlang original's atoms).
    ///
    /// ```
    /// use locks_agent::Req;
    /// assert_eq!("majority_alive".parse(), Ok(Req::MajorityAlive));
    /// assert!("most".parse::<Req>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Req, UnknownReq> {
        [
            Req::All,
            Req::Any,
            Req::Majority,
            Req::AllAlive,
            Req::MajorityAlive,
        ]
        .into_iter()
        .find(|r| r.to_string() == s)
        .ok_or_else(|| UnknownReq(s.to_owned()))
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
        assert!(Req::AllAlive.is_met(2, 0, 2), "all down: trivially held");
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

    #[test]
    fn majority_alive_counts_only_live_nodes() {
        // 3 listed, 1 down: 2 live, 2 had > 1; 1 had is not > 1.
        assert!(Req::MajorityAlive.is_met(3, 2, 1));
        assert!(!Req::MajorityAlive.is_met(3, 1, 1));
        // 4 listed, 2 down: 2 live, 2 had > 1 (plain Majority needs 3).
        assert!(Req::MajorityAlive.is_met(4, 2, 2));
        assert!(!Req::Majority.is_met(4, 2, 2));
        // 5 listed, 2 down: 3 live, 2 had > 1.
        assert!(Req::MajorityAlive.is_met(5, 2, 2));
        // Every node down: no live majority, it waits.
        assert!(!Req::MajorityAlive.is_met(2, 0, 2));
        assert!(Req::MajorityAlive.can_be_met(0, 0));
    }

    #[test]
    fn majority_alive_is_lost_only_by_refusals() {
        // Of 3 live nodes, 1 refused: 2 left > 1.
        assert!(Req::MajorityAlive.can_be_met(3, 1));
        assert!(!Req::MajorityAlive.can_be_met(3, 2));
        assert!(Req::MajorityAlive.excuses_down_nodes());
        assert!(Req::AllAlive.excuses_down_nodes());
        assert!(!Req::Majority.excuses_down_nodes());
    }

    #[test]
    fn every_requirement_parses_back_from_its_name() {
        for r in [
            Req::All,
            Req::Any,
            Req::Majority,
            Req::AllAlive,
            Req::MajorityAlive,
        ] {
            assert_eq!(r.to_string().parse(), Ok(r));
        }
        assert_eq!(
            "Majority".parse::<Req>(),
            Err(UnknownReq("Majority".into()))
        );
    }

    /// Every state of up to 5 listed nodes with one up at least: `(listed, had, down)` with
    /// `had + down <= listed` and `down < listed`.
    fn states() -> impl Iterator<Item = (usize, usize, usize)> {
        (1..=5).flat_map(|listed| {
            (0..listed)
                .flat_map(move |down| (0..=listed - down).map(move |had| (listed, had, down)))
        })
    }

    #[test]
    fn stronger_is_implication_checked_on_every_small_state() {
        let all = [
            Req::All,
            Req::Any,
            Req::Majority,
            Req::AllAlive,
            Req::MajorityAlive,
        ];
        let implies =
            |a: Req, b: Req| states().all(|(l, h, d)| !a.is_met(l, h, d) || b.is_met(l, h, d));
        for a in all {
            for b in all {
                let expected = if implies(a, b) {
                    Some(a)
                } else if implies(b, a) {
                    Some(b)
                } else {
                    None
                };
                assert_eq!(a.stronger(b), expected, "{a} against {b}");
            }
        }
    }
}
