//! Which accepted connections may run their handshake: a bound on the handshakes whose peer has
//! not proved the cookie yet, that stalled connections cannot use to lock real peers out.
//!
//! An accepted connection is *unproven* from its acceptance until the peer's proof is verified
//! (the acceptor's name check, see [`crate::net::handshake`]). At most `capacity` handshakes
//! are unproven at once. When one more connection arrives, the **oldest unproven handshake is
//! evicted** (its connection closed) to make room, instead of the newcomer being turned away:
//! - a real peer needs one round trip to prove the cookie, so it is evicted only if `capacity`
//!   newer connections arrive within that round trip;
//! - a stalled or hostile connection holds its place only until `capacity` newer connections
//!   arrive, never for the whole handshake timeout, so filling the table does not lock anyone
//!   out (a flood of connections can only make real peers retry, not wait out a timeout);
//! - a proven handshake leaves the bound and is never evicted: it knows the cookie, and ends
//!   at once (registered or refused).
//!
//! Per-address limits would not help against a flood from one host that also runs a real node,
//! and a shorter deadline for the first bytes would not help against a peer that sends a
//! `Hello` and then stalls; eviction covers both.
//!
//! [`PendingHandshakes`] is the pure bookkeeping; [`Admission`] is the shell that the accept
//! loops share with their handshake tasks (a [`Ticket`] per connection, whose eviction is a
//! cancellation the task waits on).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio_util::sync::CancellationToken;

/// Names one admitted connection (increasing with its age).
pub type PendingId = u64;

/// The result of [`PendingHandshakes::admit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The new handshake.
    pub id: PendingId,
    /// The oldest unproven handshake, evicted to make room: the caller closes its connection.
    pub evicted: Option<PendingId>,
}

/// The unproven handshakes of one listener, oldest first (see the module documentation).
#[derive(Clone, Debug)]
pub struct PendingHandshakes {
    capacity: usize,
    next: PendingId,
    unproven: BTreeSet<PendingId>,
}

impl PendingHandshakes {
    /// At most `capacity` unproven handshakes (at least one).
    pub fn new(capacity: usize) -> PendingHandshakes {
        PendingHandshakes {
            capacity: capacity.max(1),
            next: 0,
            unproven: BTreeSet::new(),
        }
    }

    /// A connection was accepted: it is admitted, evicting the oldest unproven handshake if
    /// the bound is reached.
    pub fn admit(&mut self) -> Admitted {
        let evicted = if self.unproven.len() >= self.capacity {
            self.unproven.pop_first()
        } else {
            None
        };
        let id = self.next;
        self.next += 1;
        self.unproven.insert(id);
        Admitted { id, evicted }
    }

    /// Handshake `id`'s peer proved the cookie: it can no longer be evicted. Returns whether it
    /// was unproven (`false` once evicted or ended).
    pub fn proven(&mut self, id: PendingId) -> bool {
        self.unproven.remove(&id)
    }

    /// Handshake `id` ended (in any way).
    pub fn ended(&mut self, id: PendingId) {
        self.unproven.remove(&id);
    }

    /// How many handshakes are unproven.
    pub fn unproven(&self) -> usize {
        self.unproven.len()
    }
}

#[derive(Debug)]
struct Shared {
    pending: PendingHandshakes,
    tokens: HashMap<PendingId, CancellationToken>,
}

/// The shell around [`PendingHandshakes`] that an accept loop shares with its handshake tasks.
#[derive(Clone, Debug)]
pub struct Admission {
    shared: Arc<Mutex<Shared>>,
}

impl Admission {
    /// At most `capacity` unproven handshakes at once.
    pub fn new(capacity: usize) -> Admission {
        Admission {
            shared: Arc::new(Mutex::new(Shared {
                pending: PendingHandshakes::new(capacity),
                tokens: HashMap::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a new connection; the oldest unproven one is evicted (its ticket's
    /// [`Ticket::evicted`] resolves) if the bound is reached. Returns the new connection's
    /// ticket and whether one was evicted.
    pub fn admit(&self) -> (Ticket, bool) {
        let token = CancellationToken::new();
        let mut shared = self.lock();
        let admitted = shared.pending.admit();
        let evicted = admitted
            .evicted
            .and_then(|old| shared.tokens.remove(&old))
            .map(|old| old.cancel())
            .is_some();
        shared.tokens.insert(admitted.id, token.clone());
        drop(shared);
        let ticket = Ticket {
            id: admitted.id,
            token,
            admission: self.clone(),
        };
        (ticket, evicted)
    }

    /// How many handshakes are unproven.
    pub fn unproven(&self) -> usize {
        self.lock().pending.unproven()
    }
}

/// One admitted connection's place. Dropping it ends the handshake's place.
#[derive(Debug)]
pub struct Ticket {
    id: PendingId,
    token: CancellationToken,
    admission: Admission,
}

impl Ticket {
    /// The peer proved the cookie: the handshake can no longer be evicted.
    pub fn proven(&self) {
        let mut shared = self.admission.lock();
        if shared.pending.proven(self.id) {
            shared.tokens.remove(&self.id);
        }
    }

    /// Resolves when the handshake is evicted to make room for a newer one.
    pub async fn evicted(&self) {
        self.token.cancelled().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut shared = self.admission.lock();
        shared.pending.ended(self.id);
        shared.tokens.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_unproven_handshake_makes_room() {
        let mut p = PendingHandshakes::new(2);
        let a = p.admit();
        let b = p.admit();
        assert_eq!((a.evicted, b.evicted), (None, None));
        let c = p.admit();
        assert_eq!(c.evicted, Some(a.id));
        assert_eq!(p.unproven(), 2);
        // A proven handshake leaves the bound and is never evicted.
        assert!(p.proven(b.id));
        let d = p.admit();
        assert_eq!(d.evicted, None);
        let e = p.admit();
        assert_eq!(e.evicted, Some(c.id));
        assert!(
            !p.proven(c.id),
            "an evicted handshake cannot prove itself any more"
        );
        p.ended(d.id);
        p.ended(e.id);
        assert_eq!(p.unproven(), 0);
        assert_eq!(p.admit().evicted, None);
    }

    #[test]
    fn a_capacity_of_zero_still_admits_one() {
        let mut p = PendingHandshakes::new(0);
        let a = p.admit();
        assert_eq!(a.evicted, None);
        assert_eq!(p.admit().evicted, Some(a.id));
    }

    #[tokio::test]
    async fn an_evicted_ticket_is_told_and_a_proven_one_is_not() {
        let admission = Admission::new(1);
        let (first, evicted) = admission.admit();
        assert!(!evicted);
        let (second, evicted) = admission.admit();
        assert!(evicted);
        first.evicted().await;
        second.proven();
        let (third, evicted) = admission.admit();
        assert!(!evicted, "a proven handshake is not evicted");
        drop(third);
        assert_eq!(admission.unproven(), 0);
    }
}
