//! The leader epoch cache of one replica (SPEC 1 "epoch cache", 3.5, 3.6):
//! the sorted list of `(epoch, start_offset)` pairs, where `start_offset` is
//! the first offset written in that epoch, persisted in
//! `leader-epoch.checkpoint` in the log directory.
//!
//! It answers `end_offset_for_epoch`, the question that lets a follower find
//! where its log and the leader's diverge (KIP-101/KIP-279) instead of
//! truncating to its high watermark. This module owns the list and its file;
//! the log keeps it in step with appends, truncation and retention.

use std::path::{Path, PathBuf};

use super::checkpoint;
use super::disk::Disk;
use crate::error::{Error, Result};
use crate::sync::{Arc, Mutex, MutexGuard};
use crate::types::{EpochEndOffset, LeaderEpoch, Offset};

/// One entry: `epoch` started at `start_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EpochEntry {
    /// The leader epoch.
    pub epoch: LeaderEpoch,
    /// The first offset written in that epoch.
    pub start_offset: Offset,
}

/// The epoch cache of one replica.
///
/// Invariant: entries are strictly increasing in both epoch and start offset.
///
/// The file may lag the entries in memory: appends change them in memory
/// only, and the log writes the file (durably) at its next fsync round,
/// before that round's flushed offset is published (issue 27, as Kafka
/// since KAFKA-15046). So the file holds every entry starting below the
/// recovery point; above it, and above the offset the file says it covers
/// ([`file_covers`](Self::file_covers)), recovery learns the epochs from
/// the batches (see `recovery`).
pub(crate) struct LeaderEpochCache {
    disk: Arc<dyn Disk>,
    path: PathBuf,
    entries: Vec<EpochEntry>,
    /// Changes made to `entries` (and writes of the file) since the cache
    /// was loaded.
    version: u64,
    /// The file's two locks, shared with [`EpochFileWrite`]s in flight.
    file: Arc<FileLocks>,
}

/// The locks of a cache's file. `written` is never held across I/O: the
/// log reads it under its state lock (no fsync runs under that lock, see
/// `storage`). `io` is held across every write of the file (temp file,
/// its fsync, the rename, the directory's fsync), so writes never overlap
/// and `written` always tells what the file on disk holds; a write checks
/// it under `io` before writing, so an older version never replaces a
/// newer one. Lock order: the log's state lock, then `io`, then `written`
/// (a write in flight takes no state lock).
#[derive(Debug, Default)]
struct FileLocks {
    written: Mutex<Written>,
    io: Mutex<()>,
}

/// What a cache's file holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Written {
    /// The cache's version it was written from.
    version: u64,
    /// The log end it was written at: every batch below it that the log
    /// held then has the epoch its entries give (a truncation below it
    /// writes the file again, [`LeaderEpochCache::truncate_from_end`]).
    /// 0 for a file that does not say (written before it did).
    covers: Offset,
    /// Truncations from the end so far: a write taken before one covers
    /// no more than the file did after it (see [`EpochFileWrite::write`]).
    cuts: u64,
}

impl std::fmt::Debug for LeaderEpochCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderEpochCache")
            .field("path", &self.path)
            .field("entries", &self.entries)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// A write of the epoch cache's file, taken under the log's state lock by
/// [`LeaderEpochCache::pending_write`] and done without it
/// ([`write`](Self::write)).
pub(crate) struct EpochFileWrite {
    disk: Arc<dyn Disk>,
    path: PathBuf,
    pairs: Vec<(u64, u64)>,
    to: Written,
    file: Arc<FileLocks>,
}

impl EpochFileWrite {
    /// Writes the file atomically and durably, unless it holds as much
    /// already (a newer version, or this one covering as far). Call it
    /// without the log's state lock: it waits for any write of the file
    /// in flight (the file's I/O lock). `allowed` runs first, under that
    /// lock, which [`wait_for_writes`](LeaderEpochCache::wait_for_writes)
    /// waits for: its error (the log was halted) is returned and nothing
    /// is written.
    pub(crate) fn write(self, allowed: impl FnOnce() -> Result<()>) -> Result<()> {
        let _io = self.file.io.lock();
        allowed()?;
        // What the file holds cannot change while `io` is held: `written`
        // changes only under it.
        let on_disk = *self.file.written.lock();
        let mut covers = self.to.covers;
        if on_disk.cuts != self.to.cuts {
            // The log was truncated since this write was taken, maybe
            // below the end it would cover (without changing an entry, so
            // the version is the same): no more than the file covers now,
            // which each truncation lowered to its end.
            covers = covers.min(on_disk.covers);
        }
        if on_disk.version > self.to.version
            || (on_disk.version == self.to.version && on_disk.covers >= covers)
        {
            return Ok(());
        }
        store(&*self.disk, &self.path, &self.pairs, covers)?;
        let mut written = self.file.written.lock();
        debug_assert!(
            written.version <= self.to.version,
            "an older file replaced a newer one"
        );
        // `cuts` changes only under `io` too: kept.
        written.version = self.to.version;
        written.covers = covers;
        Ok(())
    }
}

/// Writes the file: the entries, then the offset it covers.
fn store(disk: &dyn Disk, path: &Path, pairs: &[(u64, u64)], covers: Offset) -> Result<()> {
    checkpoint::store_pairs_and_rest(
        disk,
        path,
        LeaderEpochCache::KIND,
        pairs,
        &[format!("covers {covers}")],
    )
}

impl LeaderEpochCache {
    /// Name of the file inside the log directory.
    pub(crate) const FILE_NAME: &'static str = "leader-epoch.checkpoint";
    const KIND: &'static str = "leader-epoch";

    /// Loads the cache of the log in `dir` (empty when there is no file).
    /// A damaged file is `Error::InvalidCheckpoint` naming it; the caller may
    /// rebuild the cache from the batches instead.
    pub(crate) fn open(disk: &Arc<dyn Disk>, dir: &Path) -> Result<LeaderEpochCache> {
        let path = dir.join(Self::FILE_NAME);
        let (pairs, rest) =
            checkpoint::load_pairs_and_rest(&**disk, &path, Self::KIND)?.unwrap_or_default();
        let covers = match rest.as_slice() {
            [] => Offset::ZERO,
            [line] => line
                .strip_prefix("covers ")
                .and_then(|value| value.parse().ok())
                .map(Offset)
                .ok_or_else(|| Error::InvalidCheckpoint {
                    path: path.clone(),
                    reason: format!("line {line:?} is not \"covers\" and an offset"),
                })?,
            _ => {
                return Err(Error::InvalidCheckpoint {
                    path: path.clone(),
                    reason: format!("{} lines after the entries, expected 1", rest.len()),
                })
            }
        };
        let mut entries = Vec::with_capacity(pairs.len());
        for (epoch, start) in pairs {
            let epoch = u32::try_from(epoch).map_err(|_| Error::InvalidCheckpoint {
                path: path.clone(),
                reason: format!("epoch {epoch} does not fit in 32 bits"),
            })?;
            let entry = EpochEntry {
                epoch: LeaderEpoch(epoch),
                start_offset: Offset(start),
            };
            if let Some(last) = entries.last() {
                let last: &EpochEntry = last;
                if entry.epoch <= last.epoch || entry.start_offset <= last.start_offset {
                    return Err(Error::InvalidCheckpoint {
                        path,
                        reason: format!(
                            "entry {}@{} does not follow {}@{}",
                            entry.epoch, entry.start_offset, last.epoch, last.start_offset
                        ),
                    });
                }
            }
            entries.push(entry);
        }
        let cache = LeaderEpochCache {
            disk: Arc::clone(disk),
            path,
            entries,
            version: 0,
            file: Arc::new(FileLocks {
                written: Mutex::new(Written {
                    version: 0,
                    covers,
                    cuts: 0,
                }),
                io: Mutex::new(()),
            }),
        };
        debug_assert!(cache.check_invariants());
        Ok(cache)
    }

    /// An empty cache for the log in `dir`, for a rebuild from the batches.
    /// Touches no file until [`persist`](Self::persist).
    pub(crate) fn empty(disk: &Arc<dyn Disk>, dir: &Path) -> LeaderEpochCache {
        LeaderEpochCache {
            disk: Arc::clone(disk),
            path: dir.join(Self::FILE_NAME),
            entries: Vec::new(),
            version: 0,
            file: Arc::default(),
        }
    }

    /// Records that `epoch` starts at `start_offset`, without writing the
    /// file; returns whether anything changed.
    ///
    /// An epoch not newer than the latest is ignored (every batch of an
    /// epoch after its first calls this). As in Kafka's
    /// `LeaderEpochFileCache.assign`, entries whose start offset is at or
    /// after the new start are removed first: they describe records that a
    /// truncation is about to (or did) remove, and keeping them would break
    /// the ordering invariant.
    pub(crate) fn assign_in_memory(&mut self, epoch: LeaderEpoch, start_offset: Offset) -> bool {
        if let Some(latest) = self.entries.last() {
            if epoch <= latest.epoch {
                return false;
            }
        }
        self.entries.retain(|e| e.start_offset < start_offset);
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        self.version += 1;
        debug_assert!(self.check_invariants());
        true
    }

    fn pairs(&self) -> Vec<(u64, u64)> {
        self.entries
            .iter()
            .map(|e| (u64::from(e.epoch.0), e.start_offset.0))
            .collect()
    }

    /// Writes the cache to its checkpoint file atomically and durably, as
    /// covering the log up to `log_end` (the log's end now), after any
    /// [`EpochFileWrite`] in flight (synchronously: recovery, and a
    /// truncation through [`truncate_from_end`](Self::truncate_from_end)).
    pub(crate) fn persist(&mut self, log_end: Offset) -> Result<()> {
        let file = Arc::clone(&self.file);
        let io = file.io.lock();
        self.persist_io_held(&io, log_end)
    }

    /// [`persist`](Self::persist) holding the file's I/O lock (`_io`).
    fn persist_io_held(&mut self, _io: &MutexGuard<'_, ()>, log_end: Offset) -> Result<()> {
        // A new version: a write taken before this one never replaces it.
        self.version += 1;
        store(&*self.disk, &self.path, &self.pairs(), log_end)?;
        let mut written = self.file.written.lock();
        debug_assert!(written.version < self.version);
        written.version = self.version;
        written.covers = log_end;
        Ok(())
    }

    /// The write that brings the file up to the entries in memory, as
    /// covering the log up to `log_end` (the log's end now), `None` when
    /// it holds them already. Cheap (a copy of the entries, and a lock
    /// never held across I/O): the caller takes it under the log's state
    /// lock and writes it without. A write of the same entries still in
    /// flight does not count as holding them: this one waits for it, then
    /// finds the file written (or writes it, if that one failed).
    pub(crate) fn pending_write(&self, log_end: Offset) -> Option<EpochFileWrite> {
        let written = *self.file.written.lock();
        debug_assert!(written.version <= self.version);
        (written.version < self.version).then(|| self.write_to(written, log_end))
    }

    /// [`pending_write`](Self::pending_write), also when only the offset
    /// the file covers is behind `log_end`: recovery checks the batches
    /// below it against the file, and learns nothing from them.
    pub(crate) fn pending_cover(&self, log_end: Offset) -> Option<EpochFileWrite> {
        let written = *self.file.written.lock();
        debug_assert!(written.version <= self.version);
        (written.version < self.version || written.covers < log_end)
            .then(|| self.write_to(written, log_end))
    }

    /// A write of the entries in memory, as covering `log_end`; `written`
    /// is what the file held when it was taken.
    fn write_to(&self, written: Written, log_end: Offset) -> EpochFileWrite {
        EpochFileWrite {
            disk: Arc::clone(&self.disk),
            path: self.path.clone(),
            pairs: self.pairs(),
            to: Written {
                version: self.version,
                covers: log_end,
                cuts: written.cuts,
            },
            file: Arc::clone(&self.file),
        }
    }

    /// The offset the file covers (when loaded: 0 if it did not say):
    /// every batch below it was written in the epoch the entries give it.
    pub(crate) fn file_covers(&self) -> Offset {
        self.file.written.lock().covers
    }

    /// Returns once no [`EpochFileWrite`] of this cache is writing.
    pub(crate) fn wait_for_writes(&self) {
        drop(self.file.io.lock());
    }

    /// The newest epoch known, if any.
    pub(crate) fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.entries.last().map(|e| e.epoch)
    }

    /// The entries, oldest first.
    pub(crate) fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The entries that say which epoch the batches starting in
    /// `from..until` were written in: the one covering `from` and every later
    /// one starting before `until` (a reader copies these before it lets the
    /// log's lock go, to check what it reads against them).
    pub(crate) fn entries_covering(&self, from: Offset, until: Offset) -> &[EpochEntry] {
        let first = self
            .entries
            .partition_point(|e| e.start_offset <= from)
            .saturating_sub(1);
        // At least the covering entry, even for a range before every entry
        // (its batches carry the first entry's epoch: see `expected_epoch`).
        let end = self
            .entries
            .partition_point(|e| e.start_offset < until)
            .max(first + 1)
            .min(self.entries.len());
        self.entries.get(first..end).unwrap_or(&[])
    }

    /// SPEC 3.6: where does `epoch` end on this replica?
    ///
    /// - `epoch` is the latest known: `(epoch, log_end_offset)`;
    /// - `epoch` is newer than every known epoch: `None` ("undefined");
    /// - `epoch` is older than the first known epoch: `(epoch, start offset of
    ///   the first epoch)`;
    /// - otherwise `(largest known epoch <= epoch, start offset of the next
    ///   higher epoch)`.
    ///
    /// An empty cache answers `None` for every epoch.
    pub(crate) fn end_offset_for_epoch(
        &self,
        epoch: LeaderEpoch,
        log_end_offset: Offset,
    ) -> Option<EpochEndOffset> {
        let latest = self.entries.last()?;
        if epoch == latest.epoch {
            return Some(EpochEndOffset {
                epoch,
                end_offset: log_end_offset,
            });
        }
        // Index of the first entry with an epoch above the one asked about.
        let higher = self.entries.partition_point(|e| e.epoch <= epoch);
        let next = self.entries.get(higher)?;
        let floor_epoch = match higher.checked_sub(1) {
            Some(i) => self.entries[i].epoch,
            None => epoch,
        };
        Some(EpochEndOffset {
            epoch: floor_epoch,
            end_offset: next.start_offset,
        })
    }

    /// Removes every entry whose start offset is at or after `end_offset`
    /// (the log was truncated to `end_offset`) and persists, when that
    /// changed an entry, `cut_in_memory` says an earlier
    /// [`truncate_from_end_in_memory`](Self::truncate_from_end_in_memory)
    /// to the same offset did, or the file covers more than `end_offset`
    /// (the batches written there next may be of other epochs). A caller
    /// that cut in memory first holds the log's state lock from that cut
    /// to this call, so no [`EpochFileWrite`] is taken in between: one
    /// taken before still lands under `cuts`, counted below.
    ///
    /// Waits for any [`EpochFileWrite`] in flight (its content is older),
    /// so that this write lands after it: the caller holds the log's state
    /// lock, which such a write never takes.
    pub(crate) fn truncate_from_end(
        &mut self,
        end_offset: Offset,
        cut_in_memory: bool,
    ) -> Result<()> {
        let file = Arc::clone(&self.file);
        let io = file.io.lock();
        // Counted first, so that a write taken before this truncation,
        // still to come, covers no more than the file does after it.
        let covers = {
            let mut written = file.written.lock();
            written.cuts += 1;
            written.covers
        };
        let changed = self.truncate_from_end_in_memory(end_offset);
        if changed || cut_in_memory || covers > end_offset {
            self.persist_io_held(&io, end_offset)?;
        }
        Ok(())
    }

    /// [`truncate_from_end`](Self::truncate_from_end) without writing the
    /// file; returns whether anything changed.
    pub(crate) fn truncate_from_end_in_memory(&mut self, end_offset: Offset) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < end_offset);
        let changed = self.entries.len() != before;
        if changed {
            self.version += 1;
        }
        changed
    }

    /// The log now starts at `start_offset` (retention): entries wholly
    /// before it are removed, and the one covering it starts there, in
    /// memory only: the file keeps the older entries until the next
    /// [`persist`](Self::persist) (they cover more than the log holds, which
    /// recovery trims at open). Returns whether anything changed.
    pub(crate) fn truncate_from_start_in_memory(&mut self, start_offset: Offset) -> bool {
        let covering = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        if covering == 0 {
            return false;
        }
        let keep_from = covering - 1;
        if keep_from == 0 && self.entries[0].start_offset == start_offset {
            return false;
        }
        self.entries.drain(..keep_from);
        self.entries[0].start_offset = start_offset;
        self.version += 1;
        debug_assert!(self.check_invariants());
        true
    }

    /// Invariant: entries strictly increase in epoch and in start offset.
    pub(crate) fn check_invariants(&self) -> bool {
        self.entries
            .windows(2)
            .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset < w[1].start_offset)
    }
}

/// The epoch a batch starting at `base_offset` must carry according to
/// `entries` (a slice of the cache, oldest first): that of the last entry
/// starting at or before it. A batch before the first entry (the log start
/// moved into it, which only whole segments do, so this is the first batch
/// of the log) carries the first entry's epoch. `None` when there is no entry
/// to check against.
pub(crate) fn expected_epoch(entries: &[EpochEntry], base_offset: Offset) -> Option<LeaderEpoch> {
    let after = entries.partition_point(|e| e.start_offset <= base_offset);
    entries.get(after.saturating_sub(1)).map(|e| e.epoch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::disk::StdDisk;

    fn cache(dir: &Path, entries: &[(u32, u64)]) -> LeaderEpochCache {
        let mut c = LeaderEpochCache::empty(&StdDisk::shared(), dir);
        for &(e, s) in entries {
            assert!(c.assign_in_memory(LeaderEpoch(e), Offset(s)));
        }
        c
    }

    fn answer(epoch: u32, end: u64) -> Option<EpochEndOffset> {
        Some(EpochEndOffset {
            epoch: LeaderEpoch(epoch),
            end_offset: Offset(end),
        })
    }

    #[test]
    fn the_entries_covering_a_range_and_the_epoch_a_batch_must_carry() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path(), &[(0, 10), (2, 13), (4, 17)]);
        let epochs =
            |entries: &[EpochEntry]| -> Vec<u32> { entries.iter().map(|e| e.epoch.0).collect() };
        // (from, until) -> epochs of the entries covering batches there.
        let table: [((u64, u64), Vec<u32>); 6] = [
            ((10, 13), vec![0]),
            ((12, 14), vec![0, 2]),
            ((13, 20), vec![2, 4]),
            ((5, 11), vec![0]),
            ((18, 30), vec![4]),
            ((0, 5), vec![0]),
        ];
        for ((from, until), want) in table {
            let got = epochs(c.entries_covering(Offset(from), Offset(until)));
            assert_eq!(got, want, "entries covering {from}..{until}");
        }
        let entries = c.entries();
        // A batch before the first entry (the log start moved into it)
        // carries the first entry's epoch.
        for (base, want) in [(3, 0), (10, 0), (12, 0), (13, 2), (16, 2), (17, 4), (99, 4)] {
            assert_eq!(
                expected_epoch(entries, Offset(base)),
                Some(LeaderEpoch(want)),
                "batch at {base}"
            );
        }
        assert_eq!(expected_epoch(&[], Offset(0)), None);
        assert_eq!(
            epochs(
                LeaderEpochCache::empty(&StdDisk::shared(), dir.path())
                    .entries_covering(Offset(0), Offset(9))
            ),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn end_offset_for_epoch_follows_the_spec_example() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path(), &[(0, 10), (2, 13), (4, 17)]);
        let leo = Offset(20);
        let table = [
            (0, answer(0, 13)),
            (1, answer(0, 13)),
            (2, answer(2, 17)),
            (3, answer(2, 17)),
            (4, answer(4, 20)),
            (5, None),
        ];
        for (epoch, expected) in table {
            assert_eq!(
                c.end_offset_for_epoch(LeaderEpoch(epoch), leo),
                expected,
                "epoch {epoch}"
            );
        }
    }

    #[test]
    fn epoch_older_than_the_first_answers_with_the_first_start() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path(), &[(3, 10), (5, 20)]);
        assert_eq!(
            c.end_offset_for_epoch(LeaderEpoch(1), Offset(30)),
            answer(1, 10)
        );
    }

    #[test]
    fn empty_cache_knows_no_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let c = LeaderEpochCache::empty(&StdDisk::shared(), dir.path());
        assert_eq!(c.end_offset_for_epoch(LeaderEpoch(0), Offset(0)), None);
        assert_eq!(c.latest_epoch(), None);
    }

    #[test]
    fn assign_ignores_old_epochs_and_drops_entries_at_or_after_a_new_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cache(dir.path(), &[(0, 0), (2, 13)]);
        assert!(!c.assign_in_memory(LeaderEpoch(2), Offset(15)));
        assert!(!c.assign_in_memory(LeaderEpoch(1), Offset(15)));
        assert!(c.assign_in_memory(LeaderEpoch(3), Offset(13)));
        assert_eq!(
            c.entries(),
            &[
                EpochEntry {
                    epoch: LeaderEpoch(0),
                    start_offset: Offset(0)
                },
                EpochEntry {
                    epoch: LeaderEpoch(3),
                    start_offset: Offset(13)
                }
            ]
        );
    }

    #[test]
    fn truncation_from_either_end_and_persistence() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cache(dir.path(), &[(0, 10), (2, 13), (4, 17)]);
        c.persist(Offset(20)).unwrap();
        c.truncate_from_end(Offset(17), false).unwrap();
        assert_eq!(c.latest_epoch(), Some(LeaderEpoch(2)));
        assert!(c.truncate_from_start_in_memory(Offset(14)));
        c.persist(Offset(17)).unwrap();
        assert_eq!(
            c.entries(),
            &[EpochEntry {
                epoch: LeaderEpoch(2),
                start_offset: Offset(14)
            }]
        );
        let reopened = LeaderEpochCache::open(&StdDisk::shared(), dir.path()).unwrap();
        assert_eq!(reopened.entries(), c.entries());
        assert_eq!(reopened.file_covers(), Offset(17));
    }

    /// Issue 27: the log takes a write of the file under its state lock
    /// and does it without; a truncation may come in between. The write
    /// then never brings back what the truncation removed, nor claims to
    /// cover offsets past the truncation's end (batches of other epochs
    /// may be written there).
    #[test]
    fn a_write_taken_before_a_truncation_never_undoes_it() {
        let dir = tempfile::tempdir().unwrap();
        let stored = || LeaderEpochCache::open(&StdDisk::shared(), dir.path()).unwrap();
        let no_halt = || Ok(());
        let mut c = cache(dir.path(), &[(0, 0)]);
        c.persist(Offset(100)).unwrap();
        assert!(c.pending_write(Offset(100)).is_none());
        assert!(c.assign_in_memory(LeaderEpoch(5), Offset(110)));
        // The truncation keeps every entry: the write goes ahead, covering
        // no more than the file did after the truncation.
        let write = c.pending_write(Offset(150)).unwrap();
        c.truncate_from_end(Offset(120), false).unwrap();
        write.write(no_halt).unwrap();
        assert_eq!(stored().entries(), c.entries());
        assert_eq!(stored().file_covers(), Offset(100));
        // The truncation removes the entry: the older write is dropped.
        assert!(c.assign_in_memory(LeaderEpoch(6), Offset(130)));
        let write = c.pending_cover(Offset(150)).unwrap();
        c.truncate_from_end(Offset(125), false).unwrap();
        assert_eq!(stored().file_covers(), Offset(125));
        write.write(no_halt).unwrap();
        assert_eq!(stored().entries(), c.entries());
        assert_eq!(stored().latest_epoch(), Some(LeaderEpoch(5)));
        assert_eq!(stored().file_covers(), Offset(125));
        // A write taken after it covers its log end.
        c.pending_cover(Offset(140))
            .unwrap()
            .write(no_halt)
            .unwrap();
        assert_eq!(stored().file_covers(), Offset(140));
        // A halted log writes nothing.
        assert!(c.assign_in_memory(LeaderEpoch(7), Offset(140)));
        let halted = c.pending_write(Offset(141)).unwrap().write(|| {
            Err(Error::InvalidBatch {
                reason: "halted".into(),
            })
        });
        assert!(halted.is_err());
        assert_eq!(stored().latest_epoch(), Some(LeaderEpoch(5)));
    }

    #[test]
    fn an_unordered_file_is_an_invalid_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LeaderEpochCache::FILE_NAME);
        checkpoint::store_pairs(&StdDisk, &path, "leader-epoch", &[(2, 13), (1, 20)]).unwrap();
        assert!(matches!(
            LeaderEpochCache::open(&StdDisk::shared(), dir.path()),
            Err(Error::InvalidCheckpoint { .. })
        ));
    }
}
