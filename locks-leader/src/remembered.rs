//! The largest term a group's members on this node accepted, kept in the node's data directory
//! (see `locks_server::data_dir`), so that terms never go backwards when every member restarts.
//!
//! A member starts from the term recorded for its group ([`MemberCore::recall`]: it counts as
//! accepted, so the member's polls and every message carry it, and a term it takes is above
//! it), and the actor records a larger accepted term *before* it carries out any effect of the
//! step that accepted it: before the `Accepted` that acknowledges it, and before a leader's
//! first answer. The argument is in the crate documentation ("Terms as fencing versions").
//!
//! The node's lock versions are raised to the term's epoch at the same time (kept in the data
//! directory's version ceiling): every later grant of the election lock on this node, also by
//! a later incarnation of the node, has a version above the term, and a term is at least its
//! leader's grant versions. That covers a node whose members do not run again.
//!
//! One record per group (`term-…`), holding the group's key and the term. Every member of a
//! node runs on the node's thread, so the read, compare and write of [`TermRecord::keep`] are
//! never interleaved with another member's: the record only grows. A damaged record, or one
//! of another group under the same name, is an error at start.
//!
//! [`MemberCore::recall`]: crate::core::MemberCore::recall

use crate::term::Term;
use locks_core::{Key, codec};
use locks_server::embed::{LocalTable, NodeInternals};
use locks_server::{DataDir, DataDirError, Node};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"LOCKS-TM";
const LIMIT: usize = 64 * 1024;

/// The term record of one group on one node.
#[derive(Debug)]
pub(crate) struct TermRecord {
    dir: DataDir,
    /// The node's table, whose versions are raised to every term recorded.
    table: Arc<LocalTable>,
    name: String,
    group: Key,
    /// The largest term known to be on disk.
    kept: Option<Term>,
}

/// The record's file name: the group's encoded key in hex, or a hash of it when long.
fn file_name(group: &Key) -> String {
    let bytes = codec::encode(group, LIMIT).unwrap_or_default();
    if bytes.len() <= 48 {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!("term-{hex}")
    } else {
        // FNV-1a: stable across runs and builds.
        let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("term-h{hash:016x}")
    }
}

impl TermRecord {
    /// The record of `group` in `node`'s data directory, read; `None` without a data directory.
    pub(crate) fn open(node: &Node, group: &Key) -> Result<Option<TermRecord>, DataDirError> {
        let Some(dir) = node.data_dir() else {
            return Ok(None);
        };
        let mut record = TermRecord {
            dir: dir.clone(),
            table: node.local_table().clone(),
            name: file_name(group),
            group: group.clone(),
            kept: None,
        };
        record.kept = record.read()?;
        Ok(Some(record))
    }

    fn read(&self) -> Result<Option<Term>, DataDirError> {
        let Some(payload) = self.dir.read_record(&self.name, MAGIC)? else {
            return Ok(None);
        };
        let path = self.dir.path().join(&self.name);
        let (group, term): (Key, Term) =
            codec::decode(&payload, LIMIT).map_err(|e| DataDirError::Corrupt {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        if group != self.group {
            return Err(DataDirError::Foreign {
                path,
                reason: format!("it is the term of group {group}, not {}", self.group),
            });
        }
        Ok(Some(term))
    }

    /// The largest term recorded.
    pub(crate) fn recalled(&self) -> Option<&Term> {
        self.kept.as_ref()
    }

    /// Records `term` if it is larger than the one on disk; returns once it is there.
    pub(crate) fn keep(&mut self, term: &Term) -> Result<(), DataDirError> {
        if self.kept.as_ref().is_some_and(|k| term <= k) {
            return Ok(());
        }
        // Another member of the group on this node may have recorded a larger one since.
        let on_disk = self.read()?;
        if on_disk.as_ref().is_some_and(|k| term <= k) {
            self.kept = on_disk;
            return Ok(());
        }
        let payload =
            codec::encode(&(&self.group, term), LIMIT).map_err(|e| DataDirError::Corrupt {
                path: self.dir.path().join(&self.name),
                reason: format!("cannot encode the term: {e}"),
            })?;
        self.dir.write_record(&self.name, MAGIC, &payload)?;
        self.table.raise_versions(term.epoch);
        self.kept = Some(term.clone());
        Ok(())
    }
}
