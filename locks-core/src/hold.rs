//! When an agent holds a lock of the hierarchy: the rule, decided here and nowhere else.
//!
//! An agent holds its lock on `[a, b]` when its own entry there holds, *and* its entry on every
//! proper ancestor (`[a]`) holds the intention mode the lock needs there
//! ([`ModeTable::intention`](crate::ModeTable::intention)): the intention entries on ancestors
//! are what keep a read of `[a]` and a write of `[a, b]` apart. The lock table applies the rule
//! to its granted entries (`LockTable::holds` in `locks-server`); an agent applies it to its
//! copies of the entries, as the notices told them (`held_on` in `locks-agent`). Each says
//! what "its entry holds" means for its own records; the hierarchy is walked here.

use crate::Key;

/// Whether a lock whose path is `keys` is held: `own` says whether the entry on the lock
/// itself holds, and `ancestor_holds` is asked, root first, about each proper ancestor's
/// entry (by its keys, a prefix of `keys`), until one does not hold.
///
/// ```
/// use locks_core::{held_in_hierarchy, lock_id};
///
/// let lock = lock_id!["db", "table", "row"];
/// // Granted on the row and on "db", but not on "db/table": not held.
/// let granted = |keys: &[locks_core::Key]| keys.len() != 2;
/// assert!(!held_in_hierarchy(lock.keys(), true, granted));
/// assert!(held_in_hierarchy(lock.keys(), true, |_: &[locks_core::Key]| true));
/// ```
pub fn held_in_hierarchy(
    keys: &[Key],
    own: bool,
    mut ancestor_holds: impl FnMut(&[Key]) -> bool,
) -> bool {
    own && (1..keys.len()).all(|depth| ancestor_holds(&keys[..depth]))
}
