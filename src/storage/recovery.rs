//! Opening a log directory (SPEC 2.3): find the segments, trust what lies
//! below the recovery point, validate everything after it batch by batch,
//! cut the first invalid byte and everything after it, rebuild bad indexes
//! and the epoch cache, and say what was done in a [`RecoveryReport`].
//!
//! This module owns the decisions of recovery; the byte-level scan is
//! `Segment::recover_from`, the file formats belong to `segment`,
//! `offset_index` and `checkpoint`. A torn or corrupt tail is never an error:
//! only data below the recovery point that fails validation is
//! (`Error::Corrupt` naming file and position), because the log promised it
//! was durable. Two more refusals (SPEC 2.3): segments that do not tile the
//! offsets (a missing segment, one that starts off its name or ends short of
//! the next), and a tail that may hold committed data (below the
//! checkpointed high watermark, or anywhere when the checkpoint is gone)
//! with valid batches after the damage: that is damage in the middle of the
//! log, which a replica must not cut on its own. The exception is a node
//! that reports its unclean stop, and the replica as one that lost its data,
//! before it registers (`DamageAboveRecoveryPoint`): above the recovery
//! point it cuts, as Kafka does, since a power loss during a roll's
//! background flush leaves exactly that.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::checkpoint::{create_dir_durably, sync_dir, LogCheckpoint};
use super::config::LogConfig;
use super::disk::Disk;
use super::leader_epoch::{expected_epoch, LeaderEpochCache};
use super::offset_index::IndexProblem;
use super::segment::{self, Found, ScanEnd, Segment};
use crate::error::{Error, Result};
use crate::sync::Arc;
use crate::types::{LeaderEpoch, Offset};

/// A tail cut off by recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TruncatedTail {
    /// The data file that was cut.
    pub path: PathBuf,
    /// Byte position of the first invalid byte: the file now ends here.
    pub position: u64,
    /// Bytes removed from the file.
    pub bytes: u64,
    /// Whole batch frames (by their length fields) that were removed,
    /// including the invalid one when it was complete; a torn batch does not
    /// count.
    pub batches: u64,
    /// Why the batch at `position` was rejected.
    pub reason: String,
}

/// What opening a log found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Whether the log was closed cleanly before (its checkpoint said so).
    pub clean_shutdown: bool,
    /// Whether the log checkpoint was missing or unusable, so the high
    /// watermark is unknown: it restarts at the log start, and a leader or
    /// a fetch from the leader has to tell this replica what is committed.
    pub high_watermark_unknown: bool,
    /// The recovery point recovery started from: data below it was trusted,
    /// data from it on was validated.
    pub recovery_point: Offset,
    /// The log start offset after recovery.
    pub log_start_offset: Offset,
    /// The log end offset after recovery.
    pub log_end_offset: Offset,
    /// Bytes validated batch by batch (CRC and all).
    pub bytes_scanned: u64,
    /// Batches validated.
    pub batches_scanned: u64,
    /// Tails cut off, at most one per segment.
    pub truncations: Vec<TruncatedTail>,
    /// Segment files deleted (after a cut, or entirely below the log start).
    pub segments_deleted: Vec<PathBuf>,
    /// Index files rebuilt from their data file, with the reason.
    pub indexes_rebuilt: Vec<(PathBuf, String)>,
    /// Checkpoint files that could not be used, with the reason.
    pub checkpoint_problems: Vec<String>,
    /// Whether the leader epoch cache was rebuilt from the batches.
    pub epoch_cache_rebuilt: bool,
    /// The producer state snapshot loaded (its offset), if any (SPEC 4).
    pub producer_snapshot: Option<Offset>,
    /// Batch headers read after that snapshot to rebuild the producer state.
    pub producer_batches_scanned: u64,
    /// The first offset of records that may have been committed (below the
    /// checkpointed high watermark, or anywhere when it is unknown) which
    /// recovery removed although valid batches followed the damage: a
    /// sealed segment torn by a power loss while a later one reached the
    /// disk, above the recovery point. Only a node recovering after an
    /// unclean stop does so (its replicas then leave the ISR and ELR and
    /// fetch those records again, SPEC 2.3 and 3.5); [`Log::open`](crate::Log::open)
    /// refuses to open such a log instead.
    pub dropped_possibly_committed: Option<Offset>,
}

impl RecoveryReport {
    /// Total bytes cut off.
    pub fn bytes_truncated(&self) -> u64 {
        self.truncations.iter().map(|t| t.bytes).sum()
    }

    /// Whether recovery changed nothing and found nothing wrong.
    pub fn is_clean(&self) -> bool {
        self.truncations.is_empty()
            && self.segments_deleted.is_empty()
            && self.indexes_rebuilt.is_empty()
            && self.checkpoint_problems.is_empty()
            && !self.epoch_cache_rebuilt
    }
}

/// The epoch the cache must learn from a batch `h` above the recovery
/// point, whose cache `entries` come from a file that may lag the batches
/// there (see `recover`): `h`'s epoch, when the entries give its offset
/// another one and it is newer than every entry starting before it (the
/// first entry's, for a batch before it: a log start moved into its
/// batch), and at most `line_bound` when one is known; else `None` (the
/// entries agree, or the batch is damaged).
pub(super) fn epoch_to_learn(
    entries: &[super::leader_epoch::EpochEntry],
    h: &crate::record::BatchHeader,
    line_bound: Option<LeaderEpoch>,
) -> Option<LeaderEpoch> {
    let epoch = h.leader_epoch;
    if expected_epoch(entries, h.base_offset) == Some(epoch) {
        return None;
    }
    let before = entries.partition_point(|entry| entry.start_offset < h.base_offset);
    let prior = match before.checked_sub(1) {
        Some(last) => Some(entries[last].epoch),
        None => entries
            .first()
            .filter(|first| first.start_offset > h.base_offset)
            .map(|first| first.epoch),
    };
    let newer = prior.is_none_or(|prior| epoch > prior);
    let possible = line_bound.is_none_or(|line| epoch <= line);
    (newer && possible).then_some(epoch)
}

/// The state of a log directory after recovery.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub segments: BTreeMap<Offset, Segment>,
    pub log_start_offset: Offset,
    pub high_watermark: Offset,
    pub epochs: LeaderEpochCache,
    pub report: RecoveryReport,
    /// For a log that recovers empty at its start, the epoch its cache
    /// gave the start before the cut (the epoch of the batch that was
    /// there, or of a leader that appended nothing there): that epoch's
    /// leader's log held this log's records below the start
    /// ([`Log::note_start_line`](super::Log::note_start_line)). The cut
    /// removes the entry from the cache.
    pub start_epoch: Option<LeaderEpoch>,
}

fn list_segments(disk: &dyn Disk, dir: &Path) -> Result<Vec<Offset>> {
    let mut bases = Vec::new();
    let names = disk.list_dir(dir).map_err(|e| Error::io(dir, "list", e))?;
    for name in names {
        let Some(name) = name.to_str() else { continue };
        let entry_path = dir.join(name);
        if let Some(base) = segment::parse_log_file_name(name) {
            bases.push(base);
        } else if name.starts_with(super::SNAPSHOT_DOWNLOAD_PREFIX) {
            // A snapshot download a crash ended; never installed.
            segment::remove_if_exists(disk, &entry_path)?;
        } else if let Some(stem) = name.strip_suffix(segment::INDEX_SUFFIX) {
            // An index whose data file is gone (a crash during a deletion,
            // which removes the index first) is useless.
            let data = dir.join(format!("{stem}{}", segment::LOG_SUFFIX));
            if !disk.exists(&data) {
                segment::remove_if_exists(disk, &entry_path)?;
            }
        }
    }
    bases.sort();
    Ok(bases)
}

/// Logs and reports that `seg`'s offset index is rebuilt, for `reason`.
fn note_index_rebuilt(report: &mut RecoveryReport, seg: &Segment, reason: String) {
    tracing::warn!(path = %seg.index_path().display(), %reason, "rebuilding offset index");
    report
        .indexes_rebuilt
        .push((seg.index_path().to_path_buf(), reason));
}

/// Counts whole batch frames from `position` to `end` by their length
/// fields, for the report.
fn count_frames(segment: &Segment, mut position: u64, end: u64) -> Result<u64> {
    let mut frames = 0;
    while position < end {
        match segment.file().read_header(position)? {
            Ok(header) if position + header.size_bytes() as u64 <= end => {
                frames += 1;
                position += header.size_bytes() as u64;
            }
            _ => break,
        }
    }
    Ok(frames)
}

/// What recovery may do with damage above the recovery point that valid
/// batches follow, when the records it removes may have been committed
/// (SPEC 2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DamageAboveRecoveryPoint {
    /// Refuse to open the log (`Error::Corrupt`): nobody would tell the
    /// cluster that this replica lost records.
    Refuse,
    /// As `Refuse`, for a replica's log: a corrupt batch that valid batches
    /// follow is refused wherever the checkpointed high watermark was. The
    /// checkpoint lags the high watermark, and records that reached the
    /// disk may have been fetched by followers and committed since: cut,
    /// they would leave a replica that reports the shortened log as its
    /// own, and leads with it as the last ISR member, truncating them on
    /// the replicas that held them (simulator, seed 1000087: a bit flip at
    /// offset 182, checkpointed high watermark 176, committed up to 252).
    /// Gaps between segments stay bounded by the checkpoint: a crash in the
    /// middle of `truncate_to` leaves them above it on purpose.
    RefuseReplica,
    /// Cut the log at the damage and delete the segments after it, as
    /// Kafka's log recovery does, and say so in
    /// [`RecoveryReport::dropped_possibly_committed`] (what may have been
    /// committed as for `RefuseReplica`). Only for a node that
    /// reports its unclean stop before it registers: it reports such a
    /// replica as one that lost its data (an empty log end, as for a
    /// deleted directory), so it leaves the ISR and ELR even as their last
    /// member, is never elected while an eligible replica lives, and
    /// fetches the log again (SPEC 3.5).
    CutAfterReportedUncleanStop,
}

/// Opens and recovers the log in `dir` (creating it if needed), doing with
/// damage above the recovery point what `damage` says.
pub(crate) fn recover(
    disk: &Arc<dyn Disk>,
    dir: &Path,
    config: &LogConfig,
    now: Instant,
    damage: DamageAboveRecoveryPoint,
) -> Result<Recovered> {
    create_dir_durably(&**disk, dir)?;
    let mut report = RecoveryReport::default();

    let checkpoint = match LogCheckpoint::load(&**disk, dir) {
        Ok(checkpoint) => checkpoint,
        Err(e @ Error::InvalidCheckpoint { .. }) => {
            tracing::warn!(error = %e, "unusable log checkpoint: rescanning the whole log");
            report.checkpoint_problems.push(e.to_string());
            None
        }
        Err(e) => return Err(e),
    };
    report.clean_shutdown = checkpoint.is_some_and(|c| c.clean_shutdown);
    // No checkpoint (or a garbage one): nothing is known to be durable, so
    // everything is validated (Kafka does the same with a missing
    // recovery-point checkpoint).
    let recovery_point = checkpoint.map_or(Offset::ZERO, |c| c.recovery_point);
    report.recovery_point = recovery_point;

    let epoch_file = dir.join(LeaderEpochCache::FILE_NAME);
    let epoch_file_existed = disk.exists(&epoch_file);
    let (mut epochs, mut rebuild_epochs) = match LeaderEpochCache::open(disk, dir) {
        Ok(cache) => (cache, false),
        Err(e @ Error::InvalidCheckpoint { .. }) => {
            tracing::warn!(error = %e, "unusable leader epoch cache: rebuilding it from the batches");
            report.checkpoint_problems.push(e.to_string());
            (LeaderEpochCache::empty(disk, dir), true)
        }
        Err(e) => return Err(e),
    };

    // The cache file was there and valid: scanned batches are checked
    // against it.
    let epochs_trusted = epoch_file_existed && !rebuild_epochs;
    // Below this the file describes every batch (see `LeaderEpochCache`).
    let file_covers = epochs.file_covers();
    // Every epoch of a batch in the log is at most the line epoch stored
    // when it was written (a leader stores its epoch as its line before
    // it appends, a follower the leader's before it appends what it
    // fetched: `Log::note_line_epoch`): the bound on the epochs recovery
    // learns from batches above the recovery point. None without a usable
    // file (a log used without replication).
    let line_bound = super::log::stored_line_bound(&**disk, dir)?;
    let bases = list_segments(&**disk, dir)?;
    report.high_watermark_unknown = checkpoint.is_none() && !bases.is_empty();
    if !bases.is_empty() && checkpoint.is_none() && report.checkpoint_problems.is_empty() {
        let problem = format!(
            "{} is missing: the high watermark and recovery point are unknown, so the whole log \
             was validated and the high watermark restarts at the log start",
            LogCheckpoint::path(dir).display()
        );
        tracing::warn!(%problem, "log checkpoint missing");
        report.checkpoint_problems.push(problem);
    }
    let mut log_start_offset = checkpoint.map_or(Offset::ZERO, |c| c.log_start_offset);
    let checkpointed_start = log_start_offset;
    if let Some(&first) = bases.first() {
        // Retention checkpoints the new log start before it deletes files,
        // so a first segment after the checkpointed start is either a
        // crash inside `truncate_fully_and_start_at` (nothing durable was
        // promised past the start) or a lost segment.
        if let Some(c) = checkpoint {
            if first > c.log_start_offset && c.recovery_point > c.log_start_offset {
                return Err(Error::Corrupt {
                    path: segment::log_path(dir, first),
                    position: 0,
                    reason: format!(
                        "the log starts at offset {} and was durable up to {}, but its first \
                         segment starts at {first}: the segment holding offsets {}..{first} is missing",
                        c.log_start_offset,
                        c.recovery_point,
                        c.log_start_offset
                    ),
                });
            }
        }
        log_start_offset = log_start_offset.max(first);
    }
    // What may have been committed: below the checkpointed high watermark,
    // or anything when it is unknown. Recovery never removes such data on
    // its own when valid batches follow the damage (SPEC 2.3): that is not
    // a torn write but damage in the middle of the log.
    let committed_end = checkpoint.map(|c| c.high_watermark);
    let may_be_committed = |offset: Offset| match committed_end {
        Some(hw) => offset < hw,
        None => true,
    };

    let mut segments: BTreeMap<Offset, Segment> = BTreeMap::new();
    let mut deleting = false;
    let mut last_epoch: Option<LeaderEpoch> = None;
    // The base offset of the batch `last_epoch` is of, and whether the
    // cache file vouched for its epoch (it was checked against the file,
    // not learned from the batch).
    let mut last_visited: Option<(Offset, bool)> = None;
    let mut epochs_changed = false;
    for (i, &base) in bases.iter().enumerate() {
        let next_base = bases.get(i + 1).copied();
        if deleting || next_base.is_some_and(|next| next <= log_start_offset) {
            // Entirely below the log start (a crash during retention or
            // `truncate_fully_and_start_at`), or after a cut.
            if !deleting {
                tracing::info!(%base, "deleting segment below the log start offset");
            }
            let path = segment::log_path(dir, base);
            segment::remove_if_exists(&**disk, &segment::index_path(dir, base))?;
            segment::remove_if_exists(&**disk, &path)?;
            report.segments_deleted.push(path);
            continue;
        }
        let (mut seg, mut index_problem) =
            Segment::open(disk, dir, base, config.index_bytes_max, now)?;
        let expected = segments.values().next_back().map(Segment::next_offset);
        if let Some(expected) = expected {
            if base != expected {
                let reason = format!(
                    "segment starts at offset {base} but the log before it ends at {expected}"
                );
                // Legitimate gaps: a crash in the middle of `truncate_to`
                // cut an earlier segment but left later ones (at or after
                // the recovery point and the high watermark, both of which
                // it lowered first); a crash while recovery itself deleted
                // the segments after a cut tail, or a power loss right after
                // a roll (the later segments then hold no valid batch).
                // Anywhere else the gap is lost data: a missing segment, or
                // one that ends short, with valid batches after it.
                let mut lost = expected < recovery_point;
                if !lost && may_be_committed(expected) {
                    for &later in &bases[i..] {
                        if Segment::file_holds_valid_batch(&**disk, dir, later, expected)? {
                            lost = true;
                            break;
                        }
                    }
                    // Above the recovery point, after a reported unclean
                    // stop: a segment that ends short is a power loss
                    // before its roll's background flush finished.
                    if lost && damage == DamageAboveRecoveryPoint::CutAfterReportedUncleanStop {
                        tracing::warn!(path = %seg.log_path().display(), %reason, from = %expected,
                            "records that may have been committed were lost above the recovery point; deleting the segments after the gap (this replica reported its unclean stop and fetches them again)");
                        report.dropped_possibly_committed = Some(expected);
                        lost = false;
                    }
                }
                if lost {
                    return Err(Error::Corrupt {
                        path: seg.log_path().to_path_buf(),
                        position: 0,
                        reason: format!(
                            "{reason}: segments must tile the log; records from {expected} \
                             may have been committed (recovery point {recovery_point}, high \
                             watermark {}), so the log is not opened",
                            committed_end.map_or("unknown".to_string(), |hw| hw.to_string())
                        ),
                    });
                }
                tracing::warn!(path = %seg.log_path().display(), %reason, "deleting segment after a gap");
                let path = seg.log_path().to_path_buf();
                seg.delete()?;
                report.segments_deleted.push(path);
                deleting = true;
                continue;
            }
        }

        let wholly_trusted = next_base.is_some_and(|next| next <= recovery_point);
        if let (true, None, Some(next)) = (wholly_trusted, &index_problem, next_base) {
            // Trusted, so not scanned; but its ends are checked, a few
            // headers each (SPEC 2.3: segments tile the offsets). A failure
            // may be the index's: rebuild it and validate the segment whole.
            if seg.last_index_entry_matches()? {
                seg.check_tiles(next)?;
                seg.assume_end(next);
                segments.insert(base, seg);
                continue;
            }
            seg.discard_index(config.index_bytes_max)?;
            index_problem = Some(IndexProblem(
                "its last entry does not point at the batch it names".to_string(),
            ));
        }

        // Where validation starts: the batch at the recovery point (found by
        // walking trusted headers), or the segment start when the segment
        // lies after it or its index must be rebuilt anyway.
        let (trusted_until_position, offset_there) = if base >= recovery_point {
            (0, base)
        } else {
            // Its first batch is below the recovery point, so trusted, and
            // must start at the segment's name (SPEC 2.3).
            seg.check_first_batch()?;
            let floor = seg.index_floor(recovery_point);
            let found =
                match Segment::find_boundary(seg.file(), floor, seg.size_bytes(), recovery_point) {
                    // The index entry the walk started from does not match the
                    // data: rebuild the index and walk from the start.
                    Err(Error::Corrupt { reason, .. })
                        if index_problem.is_none() && floor.1 > 0 =>
                    {
                        seg.discard_index(config.index_bytes_max)?;
                        index_problem = Some(IndexProblem(format!(
                            "an entry does not match the data ({reason})"
                        )));
                        Segment::find_boundary(
                            seg.file(),
                            (base, 0),
                            seg.size_bytes(),
                            recovery_point,
                        )?
                    }
                    found => found?,
                };
            match found {
                Found::Batch { position, header } => (position, header.base_offset),
                Found::End {
                    position,
                    next_offset,
                } => {
                    let ends_at = next_offset;
                    let must_reach = next_base.map_or(recovery_point, |n| n.min(recovery_point));
                    if ends_at < must_reach {
                        return Err(Error::Corrupt {
                            path: seg.log_path().to_path_buf(),
                            position,
                            reason: format!(
                                "data ends at offset {ends_at}, below the recovery point {recovery_point}"
                            ),
                        });
                    }
                    (position, ends_at)
                }
            }
        };
        if index_problem.is_none() {
            if let Some((offset, position)) =
                seg.index_entry_contradicting(trusted_until_position, offset_there)
            {
                seg.discard_index(config.index_bytes_max)?;
                index_problem = Some(IndexProblem(format!(
                    "an entry names offset {offset} at position {position}, before the batch of \
                     offset {offset_there} at position {trusted_until_position}"
                )));
            }
        }
        if let Some(problem) = &index_problem {
            note_index_rebuilt(&mut report, &seg, problem.0.clone());
        }
        let (mut scan_from, mut start_offset) = if index_problem.is_some() {
            (0, base)
        } else {
            (trusted_until_position, offset_there)
        };
        let epoch_before_segment = last_epoch;
        let visited_before_segment = last_visited;
        let mut index_rebuilt = index_problem.is_some();
        if scan_from > 0 {
            // The epoch of the batch just before the scan, so the scan can
            // check that epochs never go backwards.
            if let Found::Batch { header, position } = Segment::find_batch_via_index(
                seg.file(),
                seg.index_floor(Offset(start_offset.0.saturating_sub(1))),
                seg.base_offset(),
                scan_from,
                Offset(start_offset.0.saturating_sub(1)),
            )? {
                // That batch is below the recovery point, where the scan
                // does not look: its epoch (which the CRC does not cover)
                // is checked against the cache here. Flipped upward and
                // taken on trust, it made the first batch above the
                // recovery point look like it went back in epochs, so
                // recovery cut every record after it, and the log end this
                // replica reported carried the flipped epoch, which won an
                // unclean recovery against a longer log (simulator, seed
                // 2101480: epoch 16389 at offset 1746 where the cache says
                // 5). SPEC 2.3: damage below the recovery point is an error
                // naming the file and position.
                if epochs_trusted && header.base_offset >= log_start_offset {
                    let expected = expected_epoch(epochs.entries(), header.base_offset);
                    if expected.is_some_and(|expected| expected != header.leader_epoch) {
                        return Err(Error::Corrupt {
                            path: seg.log_path().to_path_buf(),
                            position,
                            reason: format!(
                                "below the recovery point {recovery_point}: batch at offset {} \
                                 has leader epoch {}, but the epoch cache, written before every \
                                 batch, says {}",
                                header.base_offset,
                                header.leader_epoch,
                                expected.map_or("none".to_string(), |e| e.to_string())
                            ),
                        });
                    }
                }
                // With no cache file to check it against, the stored line
                // still bounds it (`line_bound`; simulator seed 60713802:
                // epoch 517 at offset 175 on line 7, the cache file
                // damaged too).
                if let Some(line) = line_bound.filter(|line| header.leader_epoch > *line) {
                    return Err(Error::Corrupt {
                        path: seg.log_path().to_path_buf(),
                        position,
                        reason: format!(
                            "below the recovery point {recovery_point}: batch at offset {} has \
                             leader epoch {}, above the line epoch {line} stored before any \
                             batch of a newer epoch is written",
                            header.base_offset, header.leader_epoch
                        ),
                    });
                }
                last_epoch = Some(header.leader_epoch);
                last_visited = Some((header.base_offset, epochs_trusted));
            }
            if seg.file().index_distrusted() {
                // The walk to that batch went around an index entry that
                // does not match the data (`find_batch_via_index`): rebuild
                // the index, scanning the segment whole, instead of leaving
                // every read of it to walk around the entry.
                note_index_rebuilt(
                    &mut report,
                    &seg,
                    "an entry does not match the data".to_string(),
                );
                seg.discard_index(config.index_bytes_max)?;
                index_rebuilt = true;
                (scan_from, start_offset) = (0, base);
                last_epoch = epoch_before_segment;
                last_visited = visited_before_segment;
            }
        }
        let size_before = seg.size_bytes();
        let mut scanned_batches = 0u64;
        // Where the scan stopped at epochs that go back while no cache
        // file vouched for the earlier one (none usable, or the earlier
        // epoch learned from its batch above what the file covers), so
        // that nothing says which of the two batches is damaged: the
        // earlier one's base offset if this scan visited it.
        let mut went_back_unchecked: Option<Option<Offset>> = None;
        let end = seg.recover_from(scan_from, start_offset, config.index_interval_bytes, |h| {
            // A batch whose epoch is above the stored line was not written
            // as it reads now (`line_bound`): the damage is this batch, so
            // a cut starts at it (simulator seed 60716535: epoch 0 flipped
            // to 2048 at offset 21 on line 2, with the cache file damaged
            // too, was kept as the log's last batch while the batch after
            // it was cut as the one going back).
            if let Some(line) = line_bound.filter(|line| h.leader_epoch > *line) {
                return Err(format!(
                    "batch at offset {} has leader epoch {}, above the line epoch {line} \
                     stored before any batch of a newer epoch is written",
                    h.base_offset, h.leader_epoch
                ));
            }
            if let Some(previous) = last_epoch {
                if h.leader_epoch < previous {
                    let vouched = last_visited.map_or(epochs_trusted, |(_, vouched)| vouched);
                    if !vouched {
                        went_back_unchecked = Some(
                            last_visited
                                .map(|(base, _)| base)
                                .filter(|base| *base >= start_offset),
                        );
                    }
                    return Err(format!(
                        "leader epoch {} goes back from {previous}",
                        h.leader_epoch
                    ));
                }
            }
            last_epoch = Some(h.leader_epoch);
            // The cache's file holds every entry starting below the
            // recovery point (the log writes it, durably, before it
            // publishes a flushed offset past a new epoch's first batch),
            // but not always those above it: appends change the cache in
            // memory only (issue 27, as Kafka since KAFKA-15046), so a
            // crash or power loss before the next fsync round leaves a
            // file without the newest epochs, or with an entry a
            // follower's append dropped in memory (a former leader's, past
            // its data). Above the recovery point the batches then say
            // what the cache must (above the offset the file says it
            // covers too: below that it describes every batch, and a batch
            // it contradicts is damaged): as Kafka's recovery assigns every
            // batch's epoch, the cache learns a batch's epoch there when
            // the file disagrees and the epoch is newer than that of every
            // entry starting before it (dropping the file's entries from
            // the batch on, which describe data no longer there). An epoch
            // that goes back, or that the file's older entries contradict,
            // is damage as before; one above the stored line epoch cannot
            // have been written (see `line_bound`).
            let mut vouched = epochs_trusted;
            if epochs_trusted && h.base_offset >= recovery_point.max(file_covers) {
                if let Some(epoch) = epoch_to_learn(epochs.entries(), h, line_bound) {
                    epochs.truncate_from_end_in_memory(h.base_offset);
                    epochs.assign_in_memory(epoch, h.base_offset);
                    epochs_changed = true;
                    vouched = false;
                }
            }
            // A leader records its epoch, and a follower the epochs it
            // receives, in the cache before writing the batches: a batch
            // whose epoch the loaded cache does not give for its offset was
            // not written as it reads now (an epoch flipped upward would
            // otherwise be adopted and served, and fence every later
            // append). Without a usable cache file it is rebuilt below.
            // Records below the log start are deleted, and the cache no
            // longer describes them: its first entry was moved up to the
            // log start (Kafka's `truncateFromStart`), so a batch wholly
            // below it is not checked, and one that straddles it is checked
            // at the log start. The recovery point may lie below the log
            // start (it moves only when data is flushed).
            let last_offset = Offset(h.base_offset.0 + u64::from(h.last_offset_delta));
            if epochs_trusted && last_offset < log_start_offset {
                // Epochs never decrease, so a batch below the start carries
                // at most the epoch the cache gives the log start: an epoch
                // flipped upward there (the CRC does not cover it) is still
                // caught. The cache's file may still hold entries below the
                // log start (a log start move trims it in memory only; this
                // open trims the file), so not its first entry's epoch.
                if let Some(ceiling) = expected_epoch(epochs.entries(), log_start_offset) {
                    if h.leader_epoch > ceiling {
                        return Err(format!(
                            "batch at offset {} below the log start {log_start_offset} has leader \
                             epoch {}, above the epoch {ceiling} the epoch cache gives the log start",
                            h.base_offset, h.leader_epoch
                        ));
                    }
                }
            }
            if epochs_trusted && last_offset >= log_start_offset {
                let expected =
                    expected_epoch(epochs.entries(), h.base_offset.max(log_start_offset));
                if expected != Some(h.leader_epoch) {
                    return Err(format!(
                        "batch at offset {} has leader epoch {}, but the epoch cache, written \
                         before every batch, says {}",
                        h.base_offset,
                        h.leader_epoch,
                        expected.map_or("none".to_string(), |e| e.to_string())
                    ));
                }
            }
            scanned_batches += 1;
            last_visited = Some((h.base_offset, vouched));
            Ok(())
        })?;
        report.batches_scanned += scanned_batches;
        report.bytes_scanned += seg.size_bytes() - scan_from;
        // Either batch may carry the damaged epoch (the CRC covers
        // neither): cut from the later one, the earlier one would be kept
        // and served if it is the damaged one (reviewer of the fix of seed
        // 60716535: an epoch flipped upward within the line, learned above
        // what the cache file covers). The scan goes again and stops at
        // the earlier one, so both go, and the cut is judged as any
        // other; an earlier one this scan did not visit (the batch before
        // it, below the recovery point, or a previous segment's last) is
        // not served either.
        let end = match (end, went_back_unchecked) {
            (ScanEnd::Invalid { reason, .. }, Some(Some(earlier))) => {
                let reason = format!(
                    "{reason} (at offset {}; no epoch cache file vouches for either batch, \
                     so the scan stops at the earlier one, {earlier})",
                    seg.next_offset()
                );
                seg.recover_from(scan_from, start_offset, config.index_interval_bytes, |h| {
                    if h.base_offset == earlier {
                        Err(reason.clone())
                    } else {
                        Ok(())
                    }
                })?
            }
            (ScanEnd::Invalid { position, reason }, Some(None)) => {
                return Err(Error::Corrupt {
                    path: seg.log_path().to_path_buf(),
                    position,
                    reason: format!(
                        "{reason}, and no epoch cache file says which of the two batches is \
                         damaged: the earlier one is below the recovery point or in the \
                         previous segment"
                    ),
                });
            }
            (end, _) => end,
        };
        if let ScanEnd::Invalid { position, reason } = end {
            if position < trusted_until_position {
                return Err(Error::Corrupt {
                    path: seg.log_path().to_path_buf(),
                    position,
                    reason: format!("below the recovery point {recovery_point}: {reason}"),
                });
            }
            let cut_at = seg.next_offset();
            // A replica's corrupt batch with valid batches after it may
            // hold committed records wherever its checkpoint was (see
            // `RefuseReplica`).
            if damage != DamageAboveRecoveryPoint::Refuse || may_be_committed(cut_at) {
                // Valid batches after the damage, in this segment or a later
                // one, mean the damage is in the middle of the log.
                let mut follows = Segment::valid_batch_within(
                    seg.file(),
                    position + 1,
                    size_before,
                    cut_at.next(),
                )?;
                for &later in &bases[i + 1..] {
                    if follows {
                        break;
                    }
                    follows = Segment::file_holds_valid_batch(&**disk, dir, later, cut_at.next())?;
                }
                if follows && damage == DamageAboveRecoveryPoint::CutAfterReportedUncleanStop {
                    tracing::warn!(path = %seg.log_path().display(), position, from = %cut_at, %reason,
                        "records that may have been committed were lost above the recovery point, with valid batches after them; cutting the log there (this replica reported its unclean stop and fetches them again)");
                    report.dropped_possibly_committed = Some(cut_at);
                } else if follows {
                    return Err(Error::Corrupt {
                        path: seg.log_path().to_path_buf(),
                        position,
                        reason: format!(
                            "{reason}; valid batches follow, and records from offset {cut_at} \
                             may have been committed (high watermark {}): recovery does not \
                             remove them on its own. Restore the checkpoint, or delete this \
                             log's directory so the replica fetches it again from the leader",
                            committed_end.map_or("unknown".to_string(), |hw| hw.to_string())
                        ),
                    });
                }
            }
            let batches = count_frames(&seg, position, size_before)?;
            let tail = TruncatedTail {
                path: seg.log_path().to_path_buf(),
                position,
                bytes: size_before - position,
                batches,
                reason,
            };
            tracing::warn!(path = %tail.path.display(), position, bytes = tail.bytes, reason = %tail.reason, "truncating invalid log tail");
            let next = seg.next_offset();
            let epoch = seg.last_epoch();
            seg.truncate_to_position(position, next, epoch)?;
            seg.sync_data()?;
            report.truncations.push(tail);
            deleting = true;
        } else if wholly_trusted {
            // An index rebuilt below the recovery point: the data must reach
            // the next segment exactly.
            if seg.next_offset() != next_base.unwrap_or(base) {
                return Err(Error::Corrupt {
                    path: seg.log_path().to_path_buf(),
                    position: seg.size_bytes(),
                    reason: format!(
                        "segment ends at offset {} but the next one starts at {}",
                        seg.next_offset(),
                        next_base.unwrap_or(base)
                    ),
                });
            }
        } else {
            seg.sync_data()?;
        }
        // The index as validated (entries rebuilt, or zeroed past a cut
        // tail) is durable before the open's checkpoint moves the recovery
        // point past this segment: otherwise a power loss could bring back
        // entries that name batches the cut removed, under data appended
        // later, in a segment recovery then trusts (see `Log::truncate_to`).
        if index_rebuilt {
            // Rebuilt with room for every entry: trimmed to them, as a roll
            // seals a segment (the active one gets its room back below).
            seg.seal()?;
        }
        seg.sync_index()?;
        segments.insert(base, seg);
    }

    // A log whose every segment was removed, or whose end is below its start
    // (a crash inside `truncate_fully_and_start_at`), restarts empty at its
    // start.
    let log_end = segments
        .values()
        .next_back()
        .map_or(log_start_offset, Segment::next_offset);
    if log_end < log_start_offset || segments.is_empty() {
        for (_, seg) in std::mem::take(&mut segments) {
            report.segments_deleted.push(seg.log_path().to_path_buf());
            seg.delete()?;
        }
        let fresh = Segment::create(disk, dir, log_start_offset, config.index_bytes_max, now)?;
        segments.insert(log_start_offset, fresh);
        rebuild_epochs = false;
        epochs = LeaderEpochCache::empty(disk, dir);
        epochs_changed = true;
    }
    // The last segment is the active one: learn its end and give its index
    // room to grow.
    if let Some((_, active)) = segments.iter_mut().next_back() {
        active.unseal(config.index_bytes_max)?;
    }
    let log_end = segments
        .values()
        .next_back()
        .map_or(log_start_offset, Segment::next_offset);

    if rebuild_epochs || (!epoch_file_existed && log_end > log_start_offset) {
        if !epoch_file_existed {
            report
                .checkpoint_problems
                .push(format!("{} is missing", epoch_file.display()));
        }
        epochs = LeaderEpochCache::empty(disk, dir);
        let mut previous: Option<LeaderEpoch> = None;
        for seg in segments.values() {
            // The cache is rebuilt from fields the CRC does not cover, so
            // they are checked first: offsets continue from the segment's
            // base, and epochs never go back (one of two batches whose
            // epochs do carries a damaged one, and with no cache to say
            // which, the log cannot be served).
            let mut problem = None;
            let mut position = 0u64;
            let mut next_offset = seg.base_offset();
            seg.for_each_header(0, |h| {
                if problem.is_some() {
                    return;
                }
                if h.base_offset != next_offset {
                    problem = Some((
                        position,
                        format!("batch starts at offset {}, expected {next_offset}", h.base_offset),
                    ));
                } else if previous.is_some_and(|p| h.leader_epoch < p) {
                    problem = Some((
                        position,
                        format!(
                            "batch at offset {} has leader epoch {}, older than the batch before it",
                            h.base_offset, h.leader_epoch
                        ),
                    ));
                } else if let Some(line) = line_bound.filter(|line| h.leader_epoch > *line) {
                    // Below the recovery point, where the scan did not
                    // look (`line_bound`).
                    problem = Some((
                        position,
                        format!(
                            "batch at offset {} has leader epoch {}, above the line epoch {line} \
                             stored before any batch of a newer epoch is written",
                            h.base_offset, h.leader_epoch
                        ),
                    ));
                }
                previous = Some(h.leader_epoch);
                position += h.size_bytes() as u64;
                next_offset = h.next_offset();
                epochs.assign_in_memory(h.leader_epoch, h.base_offset);
            })?;
            if let Some((position, reason)) = problem {
                return Err(Error::Corrupt {
                    path: seg.log_path().to_path_buf(),
                    position,
                    reason: format!("{reason} (while rebuilding the leader epoch cache)"),
                });
            }
        }
        report.epoch_cache_rebuilt = true;
        epochs_changed = true;
    }
    // An empty log whose first segment raised its start: a crash inside
    // `truncate_fully_and_start_at` after the new segment was made. The
    // cache is still the old log's and says nothing of the records below
    // the new start; moved up to it, it would name an epoch whose leader
    // never held them (review of c7e156c). The restart would have emptied
    // it.
    if log_end == log_start_offset && log_start_offset != checkpointed_start {
        epochs = LeaderEpochCache::empty(disk, dir);
        epochs_changed = true;
    }
    let start_epoch = (log_end == log_start_offset)
        .then(|| expected_epoch(epochs.entries(), log_start_offset))
        .flatten();
    epochs_changed |= epochs.truncate_from_end_in_memory(log_end);
    epochs_changed |= epochs.truncate_from_start_in_memory(log_start_offset);
    // A new log gets its (empty) file at once: appends change the cache
    // in memory only, and a file that is missing while batches exist makes
    // the next recovery rebuild the cache and report it missing. The file
    // covers the log as recovered: never more (batches appended from the
    // log end on may be of new epochs), and all of it (validated now).
    if epochs_changed || !epoch_file_existed || epochs.file_covers() != log_end {
        epochs.persist(log_end)?;
    }
    sync_dir(&**disk, dir)?;

    let high_watermark = checkpoint
        .map_or(Offset::ZERO, |c| c.high_watermark)
        .clamp(log_start_offset, log_end);
    report.log_start_offset = log_start_offset;
    report.log_end_offset = log_end;
    if report.is_clean() {
        tracing::info!(dir = %dir.display(), clean_shutdown = report.clean_shutdown, %log_end, "log opened");
    } else {
        tracing::warn!(dir = %dir.display(), ?report, "log recovered");
    }
    Ok(Recovered {
        segments,
        log_start_offset,
        high_watermark,
        epochs,
        report,
        start_epoch,
    })
}
