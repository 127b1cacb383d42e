//! One small record kept crash-safely in a file of the data directory.
//!
//! Layout: an 8-byte magic naming the kind of record, a format number (`u32`, little-endian),
//! the payload's length (`u32`), the payload, then the first 8 bytes of the SHA-256 of
//! everything before. A record is written to a temporary file in the same directory, which is
//! fsync'd, renamed over the record and the directory fsync'd: a reader (a later start) sees
//! the old record or the new one, never a mix, and once [`write`] returned the new one survives
//! a crash or a power loss. A stray temporary file (a process killed while writing) is never
//! read; the next write of a process with the same id overwrites it.
//!
//! Reading checks everything: a file too short, with another magic (not a record of this
//! kind, or not ours), another format number or a checksum that does not match is an error that
//! says so, never taken as "no record".

use super::DataDirError;
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::Path;

/// The format number of every record written by this version.
const FORMAT: u32 = 1;
/// Records are small; anything larger is not one of ours.
const MAX_PAYLOAD: usize = 64 * 1024;
const HEADER: usize = 16;
const CHECKSUM: usize = 8;

fn checksum(bytes: &[u8]) -> [u8; CHECKSUM] {
    let digest = Sha256::digest(bytes);
    let mut out = [0; CHECKSUM];
    out.copy_from_slice(&digest[..CHECKSUM]);
    out
}

/// The record's bytes on disk.
fn encode(magic: &[u8; 8], payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER + payload.len() + CHECKSUM);
    bytes.extend_from_slice(magic);
    bytes.extend_from_slice(&FORMAT.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(payload);
    let sum = checksum(&bytes);
    bytes.extend_from_slice(&sum);
    bytes
}

/// The payload of a record of kind `magic`, checked.
fn decode<'a>(path: &Path, magic: &[u8; 8], bytes: &'a [u8]) -> Result<&'a [u8], DataDirError> {
    let corrupt = |reason: String| DataDirError::Corrupt {
        path: path.to_owned(),
        reason,
    };
    if bytes.len() < HEADER + CHECKSUM || &bytes[..8] != magic {
        return Err(DataDirError::Foreign {
            path: path.to_owned(),
            reason: format!(
                "not a {} record of this program",
                String::from_utf8_lossy(magic)
            ),
        });
    }
    let format = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or_default());
    if format != FORMAT {
        return Err(DataDirError::Foreign {
            path: path.to_owned(),
            reason: format!("record format {format}, this program reads format {FORMAT}"),
        });
    }
    let len = u32::from_le_bytes(bytes[12..16].try_into().unwrap_or_default()) as usize;
    if len > MAX_PAYLOAD || bytes.len() != HEADER + len + CHECKSUM {
        return Err(corrupt(format!(
            "{} bytes, the header says {}",
            bytes.len(),
            HEADER + len + CHECKSUM
        )));
    }
    let (body, sum) = bytes.split_at(HEADER + len);
    if checksum(body) != sum {
        return Err(corrupt("checksum mismatch".into()));
    }
    Ok(&body[HEADER..])
}

/// Reads the record of kind `magic` at `path`: `None` if there is no file.
pub(crate) fn read(path: &Path, magic: &[u8; 8]) -> Result<Option<Vec<u8>>, DataDirError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(DataDirError::io(path, error)),
    };
    decode(path, magic, &bytes).map(|payload| Some(payload.to_vec()))
}

/// Writes the record of kind `magic` at `path` crash-safely (see the module documentation).
pub(crate) fn write(path: &Path, magic: &[u8; 8], payload: &[u8]) -> Result<(), DataDirError> {
    if payload.len() > MAX_PAYLOAD {
        return Err(DataDirError::Corrupt {
            path: path.to_owned(),
            reason: format!("a record of {} bytes is too large", payload.len()),
        });
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    // One temporary file per process: two processes wrongly given one directory still never
    // rename each other's half-written file.
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let bytes = encode(magic, payload);
    let io = |p: &Path| {
        let p = p.to_owned();
        move |error| DataDirError::Io { path: p, error }
    };
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(io(&tmp))?;
    file.write_all(&bytes).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    drop(file);
    fs::rename(&tmp, path).map_err(io(path))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(())
}

/// Little-endian fields of a payload, read in order; every read says what was missing.
pub(crate) struct Fields<'a> {
    bytes: &'a [u8],
}

impl<'a> Fields<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Fields<'a> {
        Fields { bytes }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err(format!("payload ends {} bytes early", n - self.bytes.len()));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }

    pub(crate) fn str(&mut self) -> Result<&'a str, String> {
        let len = u16::from_le_bytes(self.take(2)?.try_into().unwrap_or_default());
        std::str::from_utf8(self.take(len.into())?).map_err(|_| "a name is not UTF-8".to_owned())
    }

    /// Every byte was read.
    pub(crate) fn end(&self) -> Result<(), String> {
        match self.bytes.len() {
            0 => Ok(()),
            n => Err(format!("{n} bytes after the payload's fields")),
        }
    }
}

/// Appends a string field (at most 65535 bytes: names are far shorter).
pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(u16::MAX.into())];
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data_dir::test_dir::TestDir;

    const MAGIC: &[u8; 8] = b"LOCKS-TS";

    fn dir() -> TestDir {
        TestDir::new("file")
    }

    #[test]
    fn a_record_reads_back_and_a_missing_one_is_none() {
        let d = dir();
        let path = d.0.join("r");
        assert_eq!(read(&path, MAGIC).unwrap(), None);
        write(&path, MAGIC, b"hello").unwrap();
        assert_eq!(read(&path, MAGIC).unwrap().as_deref(), Some(&b"hello"[..]));
        write(&path, MAGIC, b"again").unwrap();
        assert_eq!(read(&path, MAGIC).unwrap().as_deref(), Some(&b"again"[..]));
    }

    #[test]
    fn every_flipped_byte_or_truncation_is_an_error_never_a_record() {
        let d = dir();
        let path = d.0.join("r");
        write(&path, MAGIC, b"payload").unwrap();
        let good = fs::read(&path).unwrap();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            fs::write(&path, &bad).unwrap();
            assert!(read(&path, MAGIC).is_err(), "byte {i} flipped");
        }
        for n in 0..good.len() {
            fs::write(&path, &good[..n]).unwrap();
            assert!(read(&path, MAGIC).is_err(), "{n} bytes");
        }
    }

    #[test]
    fn another_kind_of_record_or_a_foreign_file_is_foreign() {
        let d = dir();
        let path = d.0.join("r");
        write(&path, b"LOCKS-XX", b"x").unwrap();
        assert!(matches!(
            read(&path, MAGIC),
            Err(DataDirError::Foreign { .. })
        ));
        fs::write(&path, "name = \"a\"\nsomething else entirely\n").unwrap();
        assert!(matches!(
            read(&path, MAGIC),
            Err(DataDirError::Foreign { .. })
        ));
    }

    #[test]
    fn a_stray_temporary_file_is_ignored_and_replaced() {
        let d = dir();
        let path = d.0.join("r");
        write(&path, MAGIC, b"old").unwrap();
        let own = d.0.join(format!(".r.{}.tmp", std::process::id()));
        fs::write(&own, b"half a rec").unwrap();
        assert_eq!(read(&path, MAGIC).unwrap().as_deref(), Some(&b"old"[..]));
        write(&path, MAGIC, b"new").unwrap();
        assert_eq!(read(&path, MAGIC).unwrap().as_deref(), Some(&b"new"[..]));
        assert!(!own.exists());
    }

    #[test]
    fn fields_read_back_in_order_and_say_what_is_missing() {
        let mut out = Vec::new();
        put_str(&mut out, "node");
        out.extend_from_slice(&7u64.to_le_bytes());
        let mut f = Fields::new(&out);
        assert_eq!(f.str().unwrap(), "node");
        assert_eq!(f.u64().unwrap(), 7);
        f.end().unwrap();
        let mut f = Fields::new(&out[..out.len() - 1]);
        f.str().unwrap();
        assert!(f.u64().is_err());
    }
}
