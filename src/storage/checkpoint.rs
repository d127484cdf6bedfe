//! Checkpoint files: small text files holding offsets that must survive a
//! restart (recovery point, high watermark, log start offset, the leader
//! epoch cache).
//!
//! Every checkpoint is replaced atomically (SPEC 2.4): the new contents go to
//! a temporary file in the same directory, which is fsynced, renamed over the
//! old file, and then the directory is fsynced so the rename itself is
//! durable. A reader therefore sees either the old file or the new one, never
//! a mix. Each file ends with a CRC-32 line over everything before it, so a
//! file damaged some other way (a bad disk, a hand edit) is detected and
//! reported with its path instead of being half-believed.
//!
//! This module owns the file format and the atomic replace; what the offsets
//! mean belongs to the log and the replication layer.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::disk::{Disk, OpenMode};
use crate::error::{Error, Result};
use crate::types::Offset;

/// Writes `contents` to `path` atomically and durably.
pub(crate) fn write_atomically(disk: &dyn Disk, path: &Path, contents: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    {
        let file = disk
            .open(&tmp, OpenMode::CreateTruncate)
            .map_err(|e| Error::io(&tmp, "create", e))?;
        file.write_all_at(0, contents)
            .map_err(|e| Error::io(&tmp, "write", e))?;
        file.sync_all().map_err(|e| Error::io(&tmp, "fsync", e))?;
    }
    disk.rename(&tmp, path)
        .map_err(|e| Error::io(path, "rename over", e))?;
    sync_dir(disk, dir)
}

/// Fsyncs a directory so that creations, renames and deletions in it are
/// durable.
pub(crate) fn sync_dir(disk: &dyn Disk, dir: &Path) -> Result<()> {
    disk.sync_dir(dir)
        .map_err(|e| Error::io(dir, "fsync directory", e))
}

/// Creates `dir` and its missing parents, then fsyncs the parent of each
/// directory it created, top down, so that the new directories survive a
/// power loss: fsyncing a file, or the directory itself, does not make the
/// directory's own name durable (Kafka flushes the parent of a new log
/// directory for the same reason). Without it a power loss after a new
/// log's first flush could take the whole log directory, flushed records
/// and all.
pub(crate) fn create_dir_durably(disk: &dyn Disk, dir: &Path) -> Result<()> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && !disk.exists(a))
        .collect();
    disk.create_dir_all(dir)
        .map_err(|e| Error::io(dir, "create directory", e))?;
    for created in missing.iter().rev() {
        let parent = match created.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        sync_dir(disk, parent)?;
    }
    Ok(())
}

/// Reads a whole file, or `None` when it does not exist.
pub(crate) fn read_if_exists(disk: &dyn Disk, path: &Path) -> Result<Option<Vec<u8>>> {
    match disk.read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, "read", e)),
    }
}

/// Formats a checkpoint body: a header line, the given lines, a CRC line.
fn encode(kind: &str, lines: &[String]) -> Vec<u8> {
    let mut body = format!("isrlog {kind} v1\n");
    for line in lines {
        body.push_str(line);
        body.push('\n');
    }
    let crc = crc32fast::hash(body.as_bytes());
    body.push_str(&format!("crc32 {crc:08x}\n"));
    body.into_bytes()
}

/// Checks the header and CRC of a checkpoint and returns its body lines.
fn decode<'a>(path: &Path, kind: &str, bytes: &'a [u8]) -> Result<Vec<&'a str>> {
    let invalid = |reason: String| Error::InvalidCheckpoint {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| invalid(format!("not UTF-8 text: {e}")))?;
    if !text.ends_with('\n') {
        return Err(invalid("truncated: no final newline".into()));
    }
    let body_end = text[..text.len() - 1]
        .rfind('\n')
        .map(|i| i + 1)
        .ok_or_else(|| invalid("too short: no CRC line".into()))?;
    let (body, crc_line) = text.split_at(body_end);
    let stored = crc_line
        .trim_end()
        .strip_prefix("crc32 ")
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or_else(|| {
            invalid(format!(
                "last line {:?} is not a CRC line",
                crc_line.trim_end()
            ))
        })?;
    let computed = crc32fast::hash(body.as_bytes());
    if stored != computed {
        return Err(invalid(format!(
            "CRC mismatch: stored {stored:08x}, computed {computed:08x}"
        )));
    }
    let mut lines = body.lines();
    let expected_header = format!("isrlog {kind} v1");
    match lines.next() {
        Some(header) if header == expected_header => {}
        other => {
            return Err(invalid(format!(
                "header {other:?}, expected {expected_header:?}"
            )))
        }
    }
    Ok(lines.collect())
}

fn parse_field<'a>(path: &Path, line: Option<&'a str>, name: &str) -> Result<&'a str> {
    line.and_then(|l| l.strip_prefix(name))
        .and_then(|rest| rest.strip_prefix(' '))
        .ok_or_else(|| Error::InvalidCheckpoint {
            path: path.to_path_buf(),
            reason: format!("missing field {name:?}"),
        })
}

fn parse_u64(path: &Path, field: &str, value: &str) -> Result<u64> {
    value.parse().map_err(|_| Error::InvalidCheckpoint {
        path: path.to_path_buf(),
        reason: format!("field {field:?} has non-numeric value {value:?}"),
    })
}

/// The offsets of one log that must survive a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogCheckpoint {
    /// Every byte below this offset was flushed; recovery scans from here.
    pub recovery_point: Offset,
    /// The last high watermark the replication layer asked us to keep.
    pub high_watermark: Offset,
    /// The first offset the log still holds.
    pub log_start_offset: Offset,
    /// Whether the log was closed cleanly (nothing after the recovery point).
    pub clean_shutdown: bool,
}

impl LogCheckpoint {
    /// Name of the file inside the log directory.
    pub(crate) const FILE_NAME: &'static str = "log-state.checkpoint";
    const KIND: &'static str = "log-state";

    /// Path of the checkpoint of the log in `dir`.
    pub(crate) fn path(dir: &Path) -> PathBuf {
        dir.join(Self::FILE_NAME)
    }

    /// Reads the checkpoint: `Ok(None)` when there is none yet,
    /// `Err(InvalidCheckpoint)` naming the file when it is damaged.
    pub(crate) fn load(disk: &dyn Disk, dir: &Path) -> Result<Option<LogCheckpoint>> {
        let path = Self::path(dir);
        let Some(bytes) = read_if_exists(disk, &path)? else {
            return Ok(None);
        };
        let lines = decode(&path, Self::KIND, &bytes)?;
        let mut it = lines.iter();
        let recovery_point = parse_u64(
            &path,
            "recovery_point",
            parse_field(&path, it.next().copied(), "recovery_point")?,
        )?;
        let high_watermark = parse_u64(
            &path,
            "high_watermark",
            parse_field(&path, it.next().copied(), "high_watermark")?,
        )?;
        let log_start_offset = parse_u64(
            &path,
            "log_start_offset",
            parse_field(&path, it.next().copied(), "log_start_offset")?,
        )?;
        let clean = parse_field(&path, it.next().copied(), "clean_shutdown")?;
        let clean_shutdown = match clean {
            "true" => true,
            "false" => false,
            other => {
                return Err(Error::InvalidCheckpoint {
                    path,
                    reason: format!("field \"clean_shutdown\" has value {other:?}"),
                })
            }
        };
        if it.next().is_some() {
            return Err(Error::InvalidCheckpoint {
                path,
                reason: "unexpected lines after the last field".into(),
            });
        }
        Ok(Some(LogCheckpoint {
            recovery_point: Offset(recovery_point),
            high_watermark: Offset(high_watermark),
            log_start_offset: Offset(log_start_offset),
            clean_shutdown,
        }))
    }

    /// Replaces the checkpoint atomically.
    pub(crate) fn store(&self, disk: &dyn Disk, dir: &Path) -> Result<()> {
        let contents = encode(
            Self::KIND,
            &[
                format!("recovery_point {}", self.recovery_point),
                format!("high_watermark {}", self.high_watermark),
                format!("log_start_offset {}", self.log_start_offset),
                format!("clean_shutdown {}", self.clean_shutdown),
            ],
        );
        write_atomically(disk, &Self::path(dir), &contents)
    }
}

/// Reads a list of `(u64, u64)` pairs written by [`store_pairs`].
pub(crate) fn load_pairs(
    disk: &dyn Disk,
    path: &Path,
    kind: &str,
) -> Result<Option<Vec<(u64, u64)>>> {
    let Some((pairs, rest)) = load_pairs_and_rest(disk, path, kind)? else {
        return Ok(None);
    };
    if !rest.is_empty() {
        return Err(Error::InvalidCheckpoint {
            path: path.to_path_buf(),
            reason: format!(
                "header says {} entries, file has {}",
                pairs.len(),
                pairs.len() + rest.len()
            ),
        });
    }
    Ok(Some(pairs))
}

/// A list of `(u64, u64)` pairs and the lines after them.
pub(crate) type PairsAndRest = (Vec<(u64, u64)>, Vec<String>);

/// Reads a list of `(u64, u64)` pairs written by [`store_pairs_and_rest`]
/// and the lines after them.
pub(crate) fn load_pairs_and_rest(
    disk: &dyn Disk,
    path: &Path,
    kind: &str,
) -> Result<Option<PairsAndRest>> {
    let Some(bytes) = read_if_exists(disk, path)? else {
        return Ok(None);
    };
    let lines = decode(path, kind, &bytes)?;
    let mut it = lines.iter();
    let count = parse_u64(
        path,
        "entries",
        parse_field(path, it.next().copied(), "entries")?,
    )?;
    let mut pairs = Vec::new();
    let rest: Vec<String> = it
        .clone()
        .skip(usize::try_from(count).unwrap_or(usize::MAX))
        .map(|line| line.to_string())
        .collect();
    for (i, line) in it
        .take(usize::try_from(count).unwrap_or(usize::MAX))
        .enumerate()
    {
        let mut parts = line.split(' ');
        let (Some(a), Some(b), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Error::InvalidCheckpoint {
                path: path.to_path_buf(),
                reason: format!("entry {i} {line:?} is not two numbers"),
            });
        };
        pairs.push((parse_u64(path, "entry", a)?, parse_u64(path, "entry", b)?));
    }
    if pairs.len() as u64 != count {
        return Err(Error::InvalidCheckpoint {
            path: path.to_path_buf(),
            reason: format!("header says {count} entries, file has {}", pairs.len()),
        });
    }
    Ok(Some((pairs, rest)))
}

/// Atomically replaces `path` with a list of `(u64, u64)` pairs.
pub(crate) fn store_pairs(
    disk: &dyn Disk,
    path: &Path,
    kind: &str,
    pairs: &[(u64, u64)],
) -> Result<()> {
    store_pairs_and_rest(disk, path, kind, pairs, &[])
}

/// Atomically replaces `path` with a list of `(u64, u64)` pairs and then
/// the lines `rest`.
pub(crate) fn store_pairs_and_rest(
    disk: &dyn Disk,
    path: &Path,
    kind: &str,
    pairs: &[(u64, u64)],
    rest: &[String],
) -> Result<()> {
    let mut lines = Vec::with_capacity(pairs.len() + 1 + rest.len());
    lines.push(format!("entries {}", pairs.len()));
    lines.extend(pairs.iter().map(|(a, b)| format!("{a} {b}")));
    lines.extend(rest.iter().cloned());
    write_atomically(disk, path, &encode(kind, &lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::disk::StdDisk;
    use std::fs;

    fn sample() -> LogCheckpoint {
        LogCheckpoint {
            recovery_point: Offset(42),
            high_watermark: Offset(40),
            log_start_offset: Offset(7),
            clean_shutdown: true,
        }
    }

    #[test]
    fn created_directories_survive_a_power_loss() {
        let disk = crate::storage::disk::SimDisk::new(1);
        let dir = Path::new("/a/b/c");
        create_dir_durably(&disk, dir).unwrap();
        write_atomically(&disk, &dir.join("f"), b"x").unwrap();
        disk.lose_power();
        assert_eq!(disk.contents(&dir.join("f")).unwrap(), b"x");
        // An existing directory costs no sync.
        let syncs = disk.stats().syncs;
        create_dir_durably(&disk, dir).unwrap();
        assert_eq!(disk.stats().syncs, syncs);
    }

    #[test]
    fn log_checkpoint_round_trips_and_absent_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(LogCheckpoint::load(&StdDisk, dir.path()).unwrap(), None);
        sample().store(&StdDisk, dir.path()).unwrap();
        assert_eq!(
            LogCheckpoint::load(&StdDisk, dir.path()).unwrap(),
            Some(sample())
        );
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn every_damaged_checkpoint_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        sample().store(&StdDisk, dir.path()).unwrap();
        let path = LogCheckpoint::path(dir.path());
        let good = fs::read(&path).unwrap();
        // Every truncation and every single-byte change is detected.
        let mut damaged: Vec<Vec<u8>> = (0..good.len()).map(|n| good[..n].to_vec()).collect();
        for i in 0..good.len() {
            let mut bytes = good.clone();
            bytes[i] ^= 0x01;
            damaged.push(bytes);
        }
        damaged.push(vec![0xff, 0xfe, 0x00]);
        for bytes in damaged {
            fs::write(&path, &bytes).unwrap();
            match LogCheckpoint::load(&StdDisk, dir.path()) {
                Err(Error::InvalidCheckpoint { path: p, .. }) => assert_eq!(p, path),
                other => panic!("{bytes:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn pairs_round_trip_and_count_mismatch_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pairs.checkpoint");
        assert_eq!(load_pairs(&StdDisk, &path, "pairs").unwrap(), None);
        store_pairs(&StdDisk, &path, "pairs", &[(0, 10), (2, 13)]).unwrap();
        assert_eq!(
            load_pairs(&StdDisk, &path, "pairs").unwrap(),
            Some(vec![(0, 10), (2, 13)])
        );
        store_pairs(&StdDisk, &path, "pairs", &[]).unwrap();
        assert_eq!(load_pairs(&StdDisk, &path, "pairs").unwrap(), Some(vec![]));
        // A valid file of another kind is rejected by its header.
        match load_pairs(&StdDisk, &path, "other") {
            Err(Error::InvalidCheckpoint { path: p, reason }) => {
                assert_eq!(p, path);
                assert!(reason.contains("expected \"isrlog other v1\""), "{reason}");
            }
            other => panic!("a pairs file loaded as another kind: {other:?}"),
        }
    }
}
