//! Why a lock a client was told it holds is no longer held: [`LossCause`], the one list of
//! loss causes. The agent reports each loss with one; the node's metrics have a `cause`
//! series per entry of [`LossCause::ALL`], named by [`LossCause::name`]; the gRPC API carries
//! it as the `locks.v1` enum value of the same name. A new cause is a variant here, an entry of
//! [`LossCause::ALL`] and its name: nothing else lists them.

use std::fmt;

/// Why a lock the client was told it holds is no longer held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LossCause {
    /// A node the grant depends on went down (its connection ended).
    NodeDown,
    /// The lease of this node on a node the grant depends on ran out (see
    /// `locks_server::lease`): that node may be running and give the lock away once its
    /// lock-delay has passed.
    LeaseExpired,
    /// The lock (or an ancestor) was surrendered to resolve a deadlock.
    Surrendered,
    /// The transaction aborted (`abort_on_deadlock`).
    Aborted,
    /// The lock server no longer grants it for another reason (it refused a conversion, or
    /// its table lost the entry).
    Revoked,
}

impl LossCause {
    /// Every cause, in the order of their `cause` series.
    pub const ALL: [LossCause; LossCause::COUNT] = [
        LossCause::NodeDown,
        LossCause::LeaseExpired,
        LossCause::Surrendered,
        LossCause::Aborted,
        LossCause::Revoked,
    ];

    /// How many causes there are.
    pub const COUNT: usize = 5;

    /// The cause's name: `node-down`, `lease-expired`, `surrendered`, `aborted` or `revoked`
    /// (also the `cause` label of the `locks_lost_total` metric).
    pub const fn name(self) -> &'static str {
        match self {
            LossCause::NodeDown => "node-down",
            LossCause::LeaseExpired => "lease-expired",
            LossCause::Surrendered => "surrendered",
            LossCause::Aborted => "aborted",
            LossCause::Revoked => "revoked",
        }
    }

    /// The cause's place in [`LossCause::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for LossCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::LossCause;

    /// A new cause fails to build here (the match has no catch-all) until it has its place,
    /// and then fails until [`LossCause::ALL`] lists it there.
    #[test]
    fn every_cause_is_listed_once_at_its_index_with_a_name_of_its_own() {
        let place = |cause: LossCause| match cause {
            LossCause::NodeDown => 0,
            LossCause::LeaseExpired => 1,
            LossCause::Surrendered => 2,
            LossCause::Aborted => 3,
            LossCause::Revoked => 4,
        };
        for (i, cause) in LossCause::ALL.into_iter().enumerate() {
            assert_eq!(place(cause), i, "{cause:?}");
            assert_eq!(cause.index(), i, "{cause:?}");
            let same = LossCause::ALL.iter().filter(|c| c.name() == cause.name());
            assert_eq!(same.count(), 1, "{cause:?}");
        }
    }
}
