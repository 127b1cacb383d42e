//! Lock ids: hierarchical names of lockable resources.
//!
//! A [`LockId`] is a non-empty path of [`Key`]s (`["db", "table", 42]`). Paths form a tree by
//! prefix: `["db"]` is the parent of `["db", "table"]`. Locking a path also takes the intention
//! mode on every ancestor (see the `locks-server` crate).
//!
//! Invariants: a `LockId` is never empty; it is immutable and cheap to clone (one reference
//! count); its order is lexicographic by key, so an ancestor sorts right before its descendants.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// One element of a lock path.
///
/// Keys of different kinds never compare equal: `Int(1)` and `Str("1")` are different keys.
/// The order is all integers (by value, from `i64::MIN` to `u64::MAX`), then all strings, then
/// all byte strings.
///
/// Every integer type converts: `lock_id!["db", "rows", id]` works for an `id` of any of `i8`
/// to `i64`, `u8` to `u64`, `isize` and `usize` (and `i128`/`u128` by `TryFrom`, within that
/// range). An integer has one form whatever its type: a value that fits an `i64` is
/// [`Key::Int`], a larger `u64` is [`Key::UInt`], so `5u64` and `5i32` name the same key.
// The equality is the derived one, written out only to compare short strings in place: the
// derived hash stays consistent with it.
#[allow(clippy::derived_hash_with_manual_eq)]
#[derive(Clone, Eq, Hash, Serialize, Deserialize)]
pub enum Key {
    /// An integer key, such as a row number.
    Int(i64),
    /// A string key, such as a table name.
    Str(#[serde(deserialize_with = "crate::wire_ids::arc_str")] Arc<str>),
    /// An opaque byte-string key.
    Bytes(Arc<[u8]>),
    /// An unsigned integer key above `i64::MAX` (smaller ones are [`Key::Int`]); it sorts after
    /// every `Int`. (A `UInt` that does fit an `i64`, which only a hand-made key or a peer can
    /// produce, is a key of its own, after the `Int`s: the order stays total.)
    UInt(u64),
}

/// The order of the documentation. Two strings (or byte strings) that share their allocation
/// compare equal without reading them: lock ids are compared a great deal in the agents' and
/// servers' ordered maps, and the keys of ids built from one prefix (a table name kept as an
/// atom) or handed along from a request to its notices usually share it.
impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        match (self, other) {
            (Key::Int(a), Key::Int(b)) => a.cmp(b),
            (Key::UInt(a), Key::UInt(b)) => a.cmp(b),
            (Key::Str(a), Key::Str(b)) => {
                shared_first(a, b, |a, b| cmp_bytes(a.as_bytes(), b.as_bytes()))
            }
            (Key::Bytes(a), Key::Bytes(b)) => shared_first(a, b, cmp_bytes),
            (a, b) => a.rank().cmp(&b.rank()),
        }
    }
}

/// `cmp(a, b)`, unless `a` and `b` share their allocation: then equal without reading them.
/// The order of the shared values of keys, lock ids and node ids (`crate::ident`).
pub(crate) fn shared_first<T: ?Sized>(
    a: &Arc<T>,
    b: &Arc<T>,
    cmp: impl FnOnce(&T, &T) -> std::cmp::Ordering,
) -> std::cmp::Ordering {
    if Arc::ptr_eq(a, b) {
        std::cmp::Ordering::Equal
    } else {
        cmp(a, b)
    }
}

/// The order of byte strings, as `<[u8]>::cmp`. A short key (a table or column name) or node
/// name is compared in place: the library's comparison calls `memcmp`, whose call cost more
/// than the few bytes, and a lock id's keys and a copy's node are compared in every look-up of
/// the agents' ordered maps.
pub(crate) fn cmp_bytes(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    const SHORT: usize = 16;
    if a.len().min(b.len()) > SHORT {
        return a.cmp(b);
    }
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

/// The same kind and the same value (as the derived equality, with short strings compared in
/// place as [`Ord`] compares them).
impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        match (self, other) {
            (Key::Int(a), Key::Int(b)) => a == b,
            (Key::UInt(a), Key::UInt(b)) => a == b,
            (Key::Str(a), Key::Str(b)) => {
                shared_first(a, b, |a, b| cmp_bytes(a.as_bytes(), b.as_bytes())).is_eq()
            }
            (Key::Bytes(a), Key::Bytes(b)) => shared_first(a, b, cmp_bytes).is_eq(),
            _ => false,
        }
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Key {
    /// The kind's place in the order.
    fn rank(&self) -> u8 {
        match self {
            Key::Int(_) => 0,
            Key::UInt(_) => 1,
            Key::Str(_) => 2,
            Key::Bytes(_) => 3,
        }
    }

    /// How many bytes the key's payload takes (8 for an integer).
    pub fn payload_len(&self) -> usize {
        match self {
            Key::Int(_) | Key::UInt(_) => 8,
            Key::Str(s) => s.len(),
            Key::Bytes(b) => b.len(),
        }
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Int(i) => write!(f, "{i}"),
            Key::UInt(i) => write!(f, "{i}"),
            Key::Str(s) => write!(f, "{s:?}"),
            Key::Bytes(b) => write!(f, "b{:?}", BytesDisplay(b)),
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Int(i) => write!(f, "{i}"),
            Key::UInt(i) => write!(f, "{i}"),
            // Escaped: a key comes from whoever asked for the lock, and is shown in logs.
            Key::Str(s) => write!(f, "{}", crate::escape::Escaped::new(s)),
            Key::Bytes(b) => write!(f, "0x{}", BytesDisplay(b)),
        }
    }
}

struct BytesDisplay<'a>(&'a [u8]);

impl fmt::Display for BytesDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for BytesDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Self {
        Key::Str(Arc::from(s))
    }
}

impl From<String> for Key {
    fn from(s: String) -> Self {
        Key::Str(Arc::from(s))
    }
}

impl From<&String> for Key {
    fn from(s: &String) -> Self {
        Key::Str(Arc::from(s.as_str()))
    }
}

impl From<Arc<str>> for Key {
    fn from(s: Arc<str>) -> Self {
        Key::Str(s)
    }
}

impl From<&[u8]> for Key {
    fn from(b: &[u8]) -> Self {
        Key::Bytes(Arc::from(b))
    }
}

impl<const N: usize> From<&[u8; N]> for Key {
    /// A byte-string key from a byte literal (`b"raw"`).
    fn from(b: &[u8; N]) -> Self {
        Key::Bytes(Arc::from(b.as_slice()))
    }
}

impl From<Vec<u8>> for Key {
    fn from(b: Vec<u8>) -> Self {
        Key::Bytes(Arc::from(b))
    }
}

macro_rules! key_from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Key {
            fn from(i: $t) -> Self {
                Key::Int(i64::from(i))
            }
        }
    )*};
}
key_from_int!(i8, i16, i32, i64, u8, u16, u32);

impl From<u64> for Key {
    fn from(i: u64) -> Self {
        i64::try_from(i).map_or(Key::UInt(i), Key::Int)
    }
}

impl From<usize> for Key {
    fn from(i: usize) -> Self {
        // usize is at most 64 bits on every target Rust supports here.
        Key::from(i as u64)
    }
}

impl From<isize> for Key {
    fn from(i: isize) -> Self {
        Key::Int(i as i64)
    }
}

impl TryFrom<i128> for Key {
    type Error = std::num::TryFromIntError;

    fn try_from(i: i128) -> Result<Self, Self::Error> {
        match i64::try_from(i) {
            Ok(i) => Ok(Key::Int(i)),
            Err(_) => u64::try_from(i).map(Key::from),
        }
    }
}

impl TryFrom<u128> for Key {
    type Error = std::num::TryFromIntError;

    fn try_from(i: u128) -> Result<Self, Self::Error> {
        u64::try_from(i).map(Key::from)
    }
}

/// Why a lock id could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockIdError {
    /// The path has no keys.
    #[error("a lock id needs at least one key")]
    Empty,
}

/// The name of a lockable resource: a non-empty path of keys.
///
/// ```
/// use locks_core::{lock_id, LockId};
/// let row = lock_id!["db", "accounts", 42];
/// assert_eq!(row.parent(), Some(LockId::from(["db", "accounts"])));
/// assert!(LockId::from(["db"]).is_ancestor_of(&row));
/// ```
///
/// Encoded as the sequence of its keys (`wire_ids.rs`).
#[derive(Clone, Eq)]
pub struct LockId(Arc<[Key]>);

/// The hash of the keys (as [`PartialEq`] compares them).
impl std::hash::Hash for LockId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

/// Lock ids compare by their keys; an id and its clones, which share the keys, compare equal
/// without reading them (a request's id is handed along to its notices and map entries).
impl PartialEq for LockId {
    fn eq(&self, other: &LockId) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

/// The order of their keys (lexicographic: an ancestor sorts just before its descendants).
impl Ord for LockId {
    fn cmp(&self, other: &LockId) -> std::cmp::Ordering {
        shared_first(&self.0, &other.0, Ord::cmp)
    }
}

impl PartialOrd for LockId {
    fn partial_cmp(&self, other: &LockId) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl LockId {
    /// Builds a lock id from its keys; an empty path is an error.
    pub fn new<K: Into<Key>>(keys: impl IntoIterator<Item = K>) -> Result<LockId, LockIdError> {
        let keys: Arc<[Key]> = keys.into_iter().map(Into::into).collect();
        if keys.is_empty() {
            Err(LockIdError::Empty)
        } else {
            Ok(LockId(keys))
        }
    }

    /// The keys of the path, root first. Never empty.
    pub fn keys(&self) -> &[Key] {
        &self.0
    }

    /// How many keys the path has (at least 1).
    pub fn depth(&self) -> usize {
        self.0.len()
    }

    /// The last key of the path.
    pub fn last(&self) -> &Key {
        // The path is never empty, so the last element exists; `Key::Int(0)` is unreachable.
        static FALLBACK: Key = Key::Int(0);
        self.0.last().unwrap_or(&FALLBACK)
    }

    /// The path without its last key, or `None` for a root (one-key) id.
    pub fn parent(&self) -> Option<LockId> {
        (self.0.len() > 1).then(|| LockId(Arc::from(&self.0[..self.0.len() - 1])))
    }

    /// This path extended by `key`.
    pub fn child(&self, key: impl Into<Key>) -> LockId {
        let mut keys = Vec::with_capacity(self.0.len() + 1);
        keys.extend(self.0.iter().cloned());
        keys.push(key.into());
        LockId(Arc::from(keys))
    }

    /// The proper ancestors of this path, root first (`[a]`, `[a, b]` for `[a, b, c]`).
    pub fn ancestors(&self) -> impl DoubleEndedIterator<Item = LockId> + ExactSizeIterator + '_ {
        (1..self.0.len()).map(|n| LockId(Arc::from(&self.0[..n])))
    }

    /// Whether `self` is a proper prefix of `other`.
    pub fn is_ancestor_of(&self, other: &LockId) -> bool {
        self.0.len() < other.0.len() && other.0.starts_with(&self.0)
    }

    /// Whether `self` is a proper extension of `other`.
    pub fn is_descendant_of(&self, other: &LockId) -> bool {
        other.is_ancestor_of(self)
    }

    /// Whether one of the two paths is a prefix of the other (or they are equal): a lock on one
    /// constrains a lock on the other.
    pub fn is_related_to(&self, other: &LockId) -> bool {
        self.0.starts_with(&other.0) || other.0.starts_with(&self.0)
    }

    /// The first `depth` keys of the path, or `None` when `depth` is 0 or larger than the path.
    pub fn prefix(&self, depth: usize) -> Option<LockId> {
        (depth > 0 && depth <= self.0.len()).then(|| LockId(Arc::from(&self.0[..depth])))
    }

    /// Builds a lock id from keys, rejecting an empty iterator. Same as [`LockId::new`].
    pub fn try_from_iter<K: Into<Key>>(
        keys: impl IntoIterator<Item = K>,
    ) -> Result<LockId, LockIdError> {
        LockId::new(keys)
    }

    /// Builds a lock id from an array of keys whose length is checked when compiling (an empty
    /// array does not compile), so it cannot fail: what [`lock_id!`](crate::lock_id) expands to.
    ///
    /// ```
    /// use locks_core::{Key, LockId};
    ///
    /// let id = LockId::from_keys([Key::from("db"), Key::from("row")]);
    /// assert_eq!(id.depth(), 2);
    /// ```
    pub fn from_keys<const N: usize>(keys: [Key; N]) -> LockId {
        const { assert!(N > 0, "a lock id needs at least one key") };
        LockId(Arc::from(keys))
    }
}

impl TryFrom<Vec<Key>> for LockId {
    type Error = LockIdError;

    fn try_from(keys: Vec<Key>) -> Result<Self, Self::Error> {
        LockId::new(keys)
    }
}

impl From<LockId> for Vec<Key> {
    fn from(id: LockId) -> Self {
        id.0.to_vec()
    }
}

impl<const N: usize> From<[&str; N]> for LockId {
    /// A path of string keys. An empty array does not compile.
    fn from(keys: [&str; N]) -> Self {
        LockId::from_keys(keys.map(Key::from))
    }
}

impl<const N: usize> From<[Key; N]> for LockId {
    /// A path of keys. An empty array does not compile.
    fn from(keys: [Key; N]) -> Self {
        LockId::from_keys(keys)
    }
}

impl From<Key> for LockId {
    fn from(key: Key) -> Self {
        LockId(Arc::from([key]))
    }
}

impl<K: Into<Key>> FromIterator<K> for LockId {
    /// Collects keys into a lock id.
    ///
    /// # Panics
    /// If the iterator is empty: a lock id cannot be empty. Use [`LockId::new`] (or
    /// `TryFrom<Vec<Key>>`) for paths that come from input.
    fn from_iter<I: IntoIterator<Item = K>>(iter: I) -> Self {
        match LockId::new(iter) {
            Ok(id) => id,
            Err(e) => panic!("{e}"),
        }
    }
}

impl fmt::Debug for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

impl fmt::Display for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, k) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}")?;
        }
        f.write_str("]")
    }
}

/// Builds a [`LockId`] from one or more keys of any type that converts into a [`Key`].
///
/// ```
/// let id = locks_core::lock_id!["bank", "account", 7];
/// assert_eq!(id.depth(), 3);
/// ```
#[macro_export]
macro_rules! lock_id {
    ($($key:expr),+ $(,)?) => {
        $crate::LockId::from_keys([$($crate::Key::from($key)),+])
    };
}
