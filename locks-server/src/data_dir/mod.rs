//! The node's data directory: what a node keeps on local disk so that what it hands out
//! never goes backwards across a restart, whatever the clock says.
//!
//! It holds small records, each written crash-safely (`file.rs`: write a temporary file,
//! fsync, rename, fsync the directory) *before* anything that depends on it is handed out, and
//! checked when read (a corrupt or foreign file is an error that names it, never a reset):
//!
//! - `node`: the node's name, the largest incarnation it started with, and the **version
//!   ceiling**: no shard of the node's table has handed out, or will hand out before the
//!   record is rewritten, a version above it. A start takes the incarnation
//!   `max(clock, last + 1)` and the version base `max(incarnation × 1024, ceiling)`, and
//!   writes its own record (ceiling = base + [`RESERVE`]) before it serves. While it runs,
//!   `VersionReserve::ensure` moves the ceiling up by another [`RESERVE`] when a shard's
//!   version passes the middle of the range: one write per 2³¹ versions of the busiest shard,
//!   nothing per grant.
//! - records of other crates of the workspace (the leader members' largest accepted terms,
//!   `locks-leader`), read and written through [`DataDir::read_record`] and
//!   [`DataDir::write_record`].
//!
//! Why this is enough: every version handed out by an incarnation is at most the ceiling on
//! disk while it is handed out (the ceiling is written first, and a single input moves a
//! shard's version by far less than half a range), and the next incarnation starts at or above
//! that ceiling. Incarnations (agent ids, member ids) grow likewise, by one record per start.
//!
//! Without a data directory a node takes its start time as its incarnation and version base,
//! as before: a restart with the clock behind then hands out lower versions and agent ids.
//!
//! Two processes must not share a data directory (nothing locks it): give each node its own.

mod file;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tracing::{error, info};

/// How far ahead of the versions handed out the ceiling on disk is moved: 2³².
pub const RESERVE: u64 = 1 << 32;

const NODE_MAGIC: &[u8; 8] = b"LOCKS-ND";
const NODE_FILE: &str = "node";

/// Why the data directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    /// Reading, writing or syncing a file of the data directory failed.
    #[error("data directory: {path}: {error}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A record is damaged (cut short, or its checksum does not match): refused rather than
    /// taken as empty, since that could hand out versions or terms again.
    #[error(
        "data directory: {path} is corrupt ({reason}); restore it or, knowing that versions and terms may then repeat, remove it"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A file that is not a record of this kind (another program's file, another format, or
    /// another node's data directory).
    #[error("data directory: {path} is not ours: {reason}")]
    Foreign {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
}

impl DataDirError {
    fn io(path: &Path, error: std::io::Error) -> DataDirError {
        DataDirError::Io {
            path: path.to_owned(),
            error,
        }
    }
}

/// A node's data directory, opened (see the module documentation).
#[derive(Clone, Debug)]
pub struct DataDir {
    path: PathBuf,
    node: String,
}

/// What one start of a node takes from its data directory.
#[derive(Debug)]
pub(crate) struct Claim {
    /// The incarnation: above every earlier one's.
    pub(crate) incarnation: u64,
    /// Every shard's versions start above it: at or above every version handed out before.
    pub(crate) version_base: u64,
    /// Keeps the ceiling on disk ahead of the versions.
    pub(crate) reserve: VersionReserve,
}

/// The `node` record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct NodeRecord {
    incarnation: u64,
    ceiling: u64,
}

impl DataDir {
    /// Opens (creating it if needed) `path` as the data directory of node `node`.
    pub(crate) fn open(path: &Path, node: &str) -> Result<DataDir, DataDirError> {
        std::fs::create_dir_all(path).map_err(|e| DataDirError::io(path, e))?;
        Ok(DataDir {
            path: path.to_owned(),
            node: node.to_owned(),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read_node(&self) -> Result<Option<NodeRecord>, DataDirError> {
        let path = self.path.join(NODE_FILE);
        let Some(payload) = file::read(&path, NODE_MAGIC)? else {
            return Ok(None);
        };
        let mut f = file::Fields::new(&payload);
        let parsed = (|| {
            let name = f.str()?.to_owned();
            let record = NodeRecord {
                incarnation: f.u64()?,
                ceiling: f.u64()?,
            };
            f.end()?;
            Ok::<_, String>((name, record))
        })();
        let (name, record) = parsed.map_err(|reason| DataDirError::Corrupt {
            path: path.clone(),
            reason,
        })?;
        if name != self.node {
            return Err(DataDirError::Foreign {
                path,
                reason: format!("it belongs to node {name:?}, this is node {:?}", self.node),
            });
        }
        Ok(Some(record))
    }

    fn write_node(&self, record: NodeRecord) -> Result<(), DataDirError> {
        let mut payload = Vec::with_capacity(32);
        file::put_str(&mut payload, &self.node);
        payload.extend_from_slice(&record.incarnation.to_le_bytes());
        payload.extend_from_slice(&record.ceiling.to_le_bytes());
        file::write(&self.path.join(NODE_FILE), NODE_MAGIC, &payload)
    }

    /// Starts an incarnation: reads the last one's record, takes an incarnation and a version
    /// base above it (`clock` is the start time in microseconds), and writes the new record
    /// before returning.
    pub(crate) fn claim(self, clock: u64) -> Result<Claim, DataDirError> {
        let last = self.read_node()?;
        let (incarnation, version_base) = next_incarnation(last, clock);
        let ceiling = version_base.saturating_add(RESERVE);
        let record = NodeRecord {
            incarnation,
            ceiling,
        };
        self.write_node(record)?;
        info!(node = %self.node, dir = %self.path.display(), incarnation, version_base, clock_behind = last.is_some_and(|l| l.incarnation >= clock), "data directory claimed");
        Ok(Claim {
            incarnation,
            version_base,
            reserve: VersionReserve {
                low_water: AtomicU64::new(ceiling.saturating_sub(RESERVE / 2)),
                kept: Some(Mutex::new(Kept { dir: self, record })),
            },
        })
    }

    /// Reads the record `name` of kind `magic` (an 8-byte tag the caller picks): `None` if
    /// there is none. For the other crates of the workspace; `name` is a plain file name.
    pub fn read_record(
        &self,
        name: &str,
        magic: &[u8; 8],
    ) -> Result<Option<Vec<u8>>, DataDirError> {
        file::read(&self.path.join(name), magic)
    }

    /// Writes the record `name` of kind `magic` crash-safely: once this returned, a later
    /// start reads it (or a later write's).
    pub fn write_record(
        &self,
        name: &str,
        magic: &[u8; 8],
        payload: &[u8],
    ) -> Result<(), DataDirError> {
        file::write(&self.path.join(name), magic, payload)
    }
}

/// The incarnation and version base of a start at clock time `clock` after `last`.
fn next_incarnation(last: Option<NodeRecord>, clock: u64) -> (u64, u64) {
    let incarnation = match last {
        // Below the ghosts' reserved incarnation (u64::MAX).
        Some(l) => clock.max(l.incarnation.saturating_add(1)).min(u64::MAX - 1),
        None => clock,
    };
    let base = incarnation
        .saturating_mul(1024)
        .max(last.map_or(0, |l| l.ceiling));
    (incarnation, base)
}

/// Keeps the version ceiling on disk ahead of every shard's version (see the module
/// documentation). Without a data directory it does nothing.
#[derive(Debug)]
pub(crate) struct VersionReserve {
    /// A shard whose version reaches this moves the ceiling up first.
    low_water: AtomicU64,
    kept: Option<Mutex<Kept>>,
}

#[derive(Debug)]
struct Kept {
    dir: DataDir,
    record: NodeRecord,
}

impl VersionReserve {
    /// No data directory: versions are not kept.
    pub(crate) fn none() -> VersionReserve {
        VersionReserve {
            low_water: AtomicU64::new(u64::MAX),
            kept: None,
        }
    }

    /// Called with a shard's version before the shard hands out more: moves the ceiling on
    /// disk up when the version has passed the middle of the reserved range. A load and a
    /// compare, but once per [`RESERVE`] / 2 versions.
    #[inline]
    pub(crate) fn ensure(&self, version: u64) {
        if version >= self.low_water.load(Ordering::Relaxed) {
            self.extend(version);
        }
    }

    #[cold]
    fn extend(&self, version: u64) {
        let Some(kept) = &self.kept else {
            return;
        };
        let mut kept = kept.lock();
        if version < self.low_water.load(Ordering::Relaxed) {
            return;
        }
        let record = NodeRecord {
            ceiling: kept.record.ceiling.max(version).saturating_add(RESERVE),
            ..kept.record
        };
        match kept.dir.write_node(record) {
            Ok(()) => {
                kept.record = record;
                self.low_water
                    .store(record.ceiling - RESERVE / 2, Ordering::Relaxed);
            }
            Err(err) => {
                // Tried again after another 1/64 of the range; the versions up to the ceiling
                // already on disk stay safe, those beyond would not be after a restart.
                error!(%err, version, ceiling = kept.record.ceiling, "cannot move the version ceiling up");
                self.low_water
                    .store(version.saturating_add(RESERVE / 64), Ordering::Relaxed);
            }
        }
    }

    /// The ceiling on disk (`u64::MAX` without a data directory).
    #[cfg(test)]
    fn ceiling(&self) -> u64 {
        self.kept
            .as_ref()
            .map_or(u64::MAX, |k| k.lock().record.ceiling)
    }
}

#[cfg(test)]
pub(crate) mod test_dir {
    /// A fresh directory under the system's temporary directory, removed on drop.
    pub(crate) struct TestDir(pub(crate) std::path::PathBuf);

    impl TestDir {
        pub(crate) fn new(tag: &str) -> TestDir {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path =
                std::env::temp_dir().join(format!("locks-data-{tag}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).expect("a temporary directory");
            TestDir(path)
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_dir::TestDir;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_restart_with_the_clock_behind_starts_above_every_earlier_version() {
        let d = TestDir::new("claim");
        let first = DataDir::open(&d.0, "a")
            .unwrap()
            .claim(4_000_000_000)
            .unwrap();
        // The first incarnation hands out versions up to far past its first reserve.
        let top = first.version_base + 3 * RESERVE;
        for v in (first.version_base..=top).step_by((RESERVE / 4) as usize) {
            first.reserve.ensure(v);
        }
        assert!(first.reserve.ceiling() > top);
        drop(first);
        // An hour earlier by the clock.
        let second = DataDir::open(&d.0, "a")
            .unwrap()
            .claim(4_000_000_000 - 3_600_000_000)
            .unwrap();
        assert!(second.version_base > top);
        assert!(second.incarnation > 4_000_000_000);
    }

    #[test]
    fn another_nodes_directory_is_refused() {
        let d = TestDir::new("foreign");
        drop(DataDir::open(&d.0, "a").unwrap().claim(5).unwrap());
        let err = DataDir::open(&d.0, "b").unwrap().claim(5).unwrap_err();
        assert!(matches!(err, DataDirError::Foreign { .. }), "{err}");
        assert!(err.to_string().contains("\"a\""), "{err}");
    }

    #[test]
    fn a_corrupt_record_is_refused_not_reset() {
        let d = TestDir::new("corrupt");
        drop(DataDir::open(&d.0, "a").unwrap().claim(5).unwrap());
        let path = d.0.join(NODE_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let err = DataDir::open(&d.0, "a").unwrap().claim(5).unwrap_err();
        assert!(matches!(err, DataDirError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn without_a_data_directory_nothing_is_kept() {
        let r = VersionReserve::none();
        r.ensure(u64::MAX);
        assert_eq!(r.ceiling(), u64::MAX);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Whatever the clocks of a row of starts and however many versions each handed out,
        /// each start's incarnation and versions are above every earlier one's.
        #[test]
        fn incarnations_and_versions_only_grow(
            starts in proptest::collection::vec((0u64..1 << 50, 0u64..4 * RESERVE), 1..6),
        ) {
            let d = TestDir::new("prop");
            let mut top_version = 0;
            let mut top_incarnation = 0;
            for (clock, used) in starts {
                let claim = DataDir::open(&d.0, "n").unwrap().claim(clock).unwrap();
                prop_assert!(claim.incarnation > top_incarnation);
                prop_assert!(claim.version_base >= top_version);
                // Versions are handed out from base + 1 on, each after `ensure`.
                let mut v = claim.version_base;
                while v < claim.version_base + used {
                    claim.reserve.ensure(v);
                    v = (v + RESERVE / 3).min(claim.version_base + used);
                    prop_assert!(v <= claim.reserve.ceiling());
                }
                top_version = v;
                top_incarnation = claim.incarnation;
            }
        }
    }
}
