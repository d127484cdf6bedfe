//! A read-only look at one log directory, as Kafka's `kafka-dump-log` is to
//! Kafka: its checkpoints, epoch cache, producer snapshots, segments and
//! batches, every CRC and offset checked, and what recovery (SPEC 2.3)
//! would do when the log is next opened.
//!
//! Nothing here writes, truncates, locks or creates a file: every file is
//! opened for reading only or read whole, through the storage `Disk`, and
//! `Log::open` is not used (it cuts torn tails and rebuilds indexes). A
//! segment is read up to the length it had when the inspector looked at
//! it, so one that a live node is appending to is read as of that moment.
//!
//! The file formats are decoded with the storage layer's own code
//! (`LogCheckpoint::load`, `LeaderEpochCache::open`, the producer snapshot
//! decoder, the offset index's sanity check, `parse_header` and
//! `RecordBatch::from_bytes`); the prediction of what recovery would do
//! follows the rules of `recovery::recover`.

use std::fmt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::checkpoint::LogCheckpoint;
use super::disk::{Disk, DiskFile, OpenMode, StdDisk};
use super::leader_epoch::{expected_epoch, EpochEntry, LeaderEpochCache};
use super::offset_index::{check_entries, INDEX_ENTRY_BYTES};
use super::producer_state::{list_snapshots, ProducerStateManager};
use super::segment::{index_path, parse_log_file_name};
use crate::error::{Error, Result};
use crate::record::{parse_header, HeaderError, RecordBatch, BATCH_HEADER_BYTES};
use crate::sync::Arc;
use crate::types::{LeaderEpoch, Offset, ProducerEpoch, ProducerId, Sequence};

/// What the log-state checkpoint (`log-state.checkpoint`) holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckpointState {
    /// The file is missing.
    Missing,
    /// The file could not be decoded (the reason names the file).
    Invalid(String),
    /// The decoded checkpoint.
    Valid {
        /// Data below this offset was fsynced and is trusted by recovery.
        recovery_point: Offset,
        /// The high watermark last checkpointed.
        high_watermark: Offset,
        /// The log start offset.
        log_start_offset: Offset,
        /// Whether the log was closed cleanly.
        clean_shutdown: bool,
    },
}

/// What the leader epoch cache file (`leader-epoch.checkpoint`) holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EpochCacheState {
    /// The file is missing.
    Missing,
    /// The file could not be decoded (the reason names the file).
    Invalid(String),
    /// Its entries, `(epoch, start offset)`, oldest first.
    Valid(Vec<(LeaderEpoch, Offset)>),
}

/// One producer in a producer state snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotProducer {
    /// The producer id.
    pub producer_id: ProducerId,
    /// Its epoch.
    pub producer_epoch: ProducerEpoch,
    /// `(first sequence, last sequence, first offset, last offset)` of each
    /// batch remembered for deduplication, oldest first.
    pub batches: Vec<(Sequence, Sequence, Offset, Offset)>,
}

/// One producer state snapshot file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotReport {
    /// The file.
    pub path: PathBuf,
    /// The offset it is a snapshot as of.
    pub offset: Offset,
    /// Its producers sorted by id, or why it could not be decoded.
    pub producers: std::result::Result<Vec<SnapshotProducer>, String>,
}

/// One valid batch of a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchReport {
    /// Byte position in the data file.
    pub position: u64,
    /// First offset.
    pub base_offset: Offset,
    /// Last offset.
    pub last_offset: Offset,
    /// Leader epoch.
    pub leader_epoch: LeaderEpoch,
    /// Records in the batch.
    pub record_count: u32,
    /// Size in bytes, header included.
    pub size_bytes: u64,
    /// The stored CRC (it matched: invalid batches end the walk and are
    /// reported as [`Damage`]).
    pub crc: u32,
    /// Producer id (-1 for a non-idempotent batch).
    pub producer_id: ProducerId,
    /// Producer epoch.
    pub producer_epoch: ProducerEpoch,
    /// Sequence of the first record.
    pub base_sequence: Sequence,
}

/// The offset index file of one segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexState {
    /// Its entries in use passed the sanity check.
    Valid {
        /// Entries in use.
        entries: usize,
    },
    /// Missing or failing the sanity check: recovery rebuilds it.
    Problem(String),
}

/// One segment: its data file as walked batch by batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentReport {
    /// The data file.
    pub path: PathBuf,
    /// The base offset (from the file name).
    pub base_offset: Offset,
    /// Length of the data file when it was read.
    pub file_bytes: u64,
    /// Bytes of whole valid batches from the start of the file.
    pub valid_bytes: u64,
    /// Offset after the last valid batch (the base offset when none).
    pub next_offset: Offset,
    /// The valid batches, in file order.
    pub batches: Vec<BatchReport>,
    /// The index file.
    pub index: IndexState,
}

impl SegmentReport {
    /// Records in the valid batches.
    pub fn record_count(&self) -> u64 {
        self.batches.iter().map(|b| u64::from(b.record_count)).sum()
    }
}

/// Damage found in the data: the first invalid byte of a segment, or a
/// segment that does not continue the one before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The data file.
    pub path: PathBuf,
    /// Byte position of the first invalid byte.
    pub position: u64,
    /// The offset a valid batch at `position` would start at.
    pub offset: Offset,
    /// What check failed.
    pub reason: String,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DAMAGE {}:{} (offset {}): {}",
            self.path.display(),
            self.position,
            self.offset,
            self.reason
        )
    }
}

/// What opening the log (recovery, SPEC 2.3) would do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoveryAction {
    /// Validate every batch from the start: the checkpoint is missing or
    /// unusable, so the high watermark restarts at the log start.
    RescanWholeLog {
        /// Why.
        reason: String,
    },
    /// Rebuild the leader epoch cache from the batches.
    RebuildEpochCache {
        /// Why.
        reason: String,
    },
    /// Rebuild a segment's offset index from its data file.
    RebuildIndex {
        /// The index file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Cut a data file at `position` (a torn or corrupt tail that cannot
    /// hold committed data).
    TruncateTail {
        /// The data file.
        path: PathBuf,
        /// The file would end here.
        position: u64,
        /// Bytes removed.
        bytes: u64,
        /// Why the batch at `position` is invalid.
        reason: String,
    },
    /// Delete a segment after a cut or a gap.
    DeleteSegment {
        /// The data file.
        path: PathBuf,
    },
    /// Refuse to open the log (`Error::Corrupt`), or, for damage below the
    /// recovery point inside data recovery trusts without re-reading,
    /// refuse to serve it: never cut on its own.
    Refuse {
        /// The data file.
        path: PathBuf,
        /// Byte position of the damage.
        position: u64,
        /// Why.
        reason: String,
    },
}

impl fmt::Display for RecoveryAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoveryAction::RescanWholeLog { reason } => {
                write!(f, "validate the whole log from its start: {reason}")
            }
            RecoveryAction::RebuildEpochCache { reason } => {
                write!(
                    f,
                    "rebuild the leader epoch cache from the batches: {reason}"
                )
            }
            RecoveryAction::RebuildIndex { path, reason } => {
                write!(f, "rebuild index {}: {reason}", path.display())
            }
            RecoveryAction::TruncateTail {
                path,
                position,
                bytes,
                reason,
            } => write!(
                f,
                "truncate torn tail at byte {position} of file {} ({bytes} bytes): {reason}",
                path.display()
            ),
            RecoveryAction::DeleteSegment { path } => {
                write!(f, "delete segment {}", path.display())
            }
            RecoveryAction::Refuse {
                path,
                position,
                reason,
            } => write!(
                f,
                "refuse to open: {reason} at {}:{position}",
                path.display()
            ),
        }
    }
}

/// Everything [`inspect_dir`] learned about one log directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The directory.
    pub dir: PathBuf,
    /// The log-state checkpoint (high watermark, recovery point).
    pub checkpoint: CheckpointState,
    /// The leader epoch cache.
    pub epoch_cache: EpochCacheState,
    /// Producer state snapshots, oldest first.
    pub producer_snapshots: Vec<SnapshotReport>,
    /// Segments by base offset.
    pub segments: Vec<SegmentReport>,
    /// Damage found in the data.
    pub damage: Vec<Damage>,
    /// What recovery would do, in order (empty for a healthy log).
    pub recovery: Vec<RecoveryAction>,
    /// Whether [`Display`](fmt::Display) lists every batch (the default
    /// lists segments only).
    pub verbose: bool,
}

impl Report {
    /// Whether nothing is damaged and recovery would change nothing.
    pub fn is_healthy(&self) -> bool {
        self.damage.is_empty() && self.recovery.is_empty()
    }

    /// Valid batches over all segments.
    pub fn batch_count(&self) -> u64 {
        self.segments.iter().map(|s| s.batches.len() as u64).sum()
    }

    /// Records in the valid batches over all segments.
    pub fn record_count(&self) -> u64 {
        self.segments.iter().map(SegmentReport::record_count).sum()
    }

    /// Offset after the last valid batch (`None` without segments).
    pub fn log_end_offset(&self) -> Option<Offset> {
        self.segments.last().map(|s| s.next_offset)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "log directory {}", self.dir.display())?;
        match &self.checkpoint {
            CheckpointState::Missing => writeln!(f, "log-state checkpoint: missing")?,
            CheckpointState::Invalid(reason) => {
                writeln!(f, "log-state checkpoint: INVALID: {reason}")?
            }
            CheckpointState::Valid {
                recovery_point,
                high_watermark,
                log_start_offset,
                clean_shutdown,
            } => writeln!(
                f,
                "log-state checkpoint: recovery point {recovery_point}, high watermark \
                 {high_watermark}, log start {log_start_offset}, clean shutdown {clean_shutdown}"
            )?,
        }
        match &self.epoch_cache {
            EpochCacheState::Missing => writeln!(f, "leader epoch cache: missing")?,
            EpochCacheState::Invalid(reason) => {
                writeln!(f, "leader epoch cache: INVALID: {reason}")?
            }
            EpochCacheState::Valid(entries) => {
                let list: Vec<String> = entries
                    .iter()
                    .map(|(epoch, start)| format!("{epoch}@{start}"))
                    .collect();
                writeln!(f, "leader epoch cache: [{}]", list.join(", "))?
            }
        }
        if self.producer_snapshots.is_empty() {
            writeln!(f, "producer snapshots: none")?;
        }
        for snapshot in &self.producer_snapshots {
            match &snapshot.producers {
                Ok(producers) => {
                    writeln!(
                        f,
                        "producer snapshot {} as of offset {}: {} producers",
                        snapshot.path.display(),
                        snapshot.offset,
                        producers.len()
                    )?;
                    for p in producers {
                        let batches: Vec<String> = p
                            .batches
                            .iter()
                            .map(|(fs, ls, fo, lo)| format!("seq {fs}..{ls} at {fo}..{lo}"))
                            .collect();
                        writeln!(
                            f,
                            "  {} epoch {}: {}",
                            p.producer_id,
                            p.producer_epoch,
                            batches.join(", ")
                        )?;
                    }
                }
                Err(reason) => writeln!(
                    f,
                    "producer snapshot {}: INVALID: {reason}",
                    snapshot.path.display()
                )?,
            }
        }
        for segment in &self.segments {
            let index = match &segment.index {
                IndexState::Valid { entries } => format!("index ok ({entries} entries)"),
                IndexState::Problem(reason) => format!("index BAD: {reason}"),
            };
            writeln!(
                f,
                "segment {}: offsets {}..{}, {} batches, {} records, {} of {} bytes valid, {index}",
                segment.path.display(),
                segment.base_offset,
                segment.next_offset,
                segment.batches.len(),
                segment.record_count(),
                segment.valid_bytes,
                segment.file_bytes
            )?;
            if self.verbose {
                for b in &segment.batches {
                    let producer = if b.producer_id == ProducerId::NONE {
                        "no producer id".to_string()
                    } else {
                        format!(
                            "{} epoch {} sequence {}",
                            b.producer_id, b.producer_epoch, b.base_sequence
                        )
                    };
                    writeln!(
                        f,
                        "  batch at byte {}: offsets {}..={}, epoch {}, {} records, {} bytes, \
                         crc {:#010x} ok, {producer}",
                        b.position,
                        b.base_offset,
                        b.last_offset,
                        b.leader_epoch,
                        b.record_count,
                        b.size_bytes,
                        b.crc
                    )?;
                }
            }
        }
        writeln!(
            f,
            "total: {} segments, {} batches, {} records, log end offset {}",
            self.segments.len(),
            self.batch_count(),
            self.record_count(),
            self.log_end_offset()
                .map_or("none".to_string(), |o| o.to_string())
        )?;
        for damage in &self.damage {
            writeln!(f, "{damage}")?;
        }
        if self.recovery.is_empty() {
            writeln!(f, "recovery would: nothing (healthy)")?;
        }
        for action in &self.recovery {
            writeln!(f, "recovery would: {action}")?;
        }
        Ok(())
    }
}

/// How the walk of one data file ended.
struct Walked {
    segment: SegmentReport,
    /// The first invalid byte and why, if any.
    invalid: Option<(u64, String)>,
}

/// Reads up to `len` bytes at `position` (fewer at the end of the file).
fn read_at(file: &dyn DiskFile, path: &Path, position: u64, len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let done = file
        .read_at(position, &mut buf)
        .map_err(|e| Error::io(path, "read", e))?;
    buf.truncate(done);
    Ok(buf)
}

/// How a walk checks epochs: below the log start as recovery does, and
/// where it lets the batches overrule the epoch cache's file, as recovery
/// does (`recovery::epoch_to_learn`).
#[derive(Clone, Copy, Debug)]
struct Learn {
    /// The log start offset.
    log_start: Offset,
    /// From this offset on: the higher of the recovery point and the
    /// offset the file covers.
    from: Offset,
    /// The stored line epoch, if any: no epoch above it is learnt.
    line_bound: Option<LeaderEpoch>,
}

/// Walks the data file of the segment at `base` batch by batch, checking
/// what recovery checks: header, length, CRC, offsets contiguous from
/// `start`, epochs never going back from `last_epoch` and, when `epochs`
/// is given, each batch's epoch the one the cache gives for its offset
/// (for a batch wholly below `log_start`, at most the one it gives the log
/// start, as recovery checks it: the cache no longer describes deleted
/// records). `None` when the file is gone (deleted since the directory was
/// listed).
fn walk_segment(
    disk: &Arc<dyn Disk>,
    dir: &Path,
    base: Offset,
    start: Offset,
    last_epoch: &mut Option<LeaderEpoch>,
    epochs: &mut Option<Vec<EpochEntry>>,
    learn: Learn,
) -> Result<Option<Walked>> {
    let log_start = learn.log_start;
    let path = super::segment::log_path(dir, base);
    let file = match disk.open(&path, OpenMode::Read) {
        Ok(file) => file,
        // Deleted since the directory was listed (retention on a live node).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, "open", e)),
    };
    // The length as of now: a live node may append while we read, and what
    // it appends later is not part of this report.
    let file_bytes = file
        .length_bytes()
        .map_err(|e| Error::io(&path, "stat", e))?;
    let mut batches = Vec::new();
    let mut at = 0u64;
    let mut next = start;
    let mut invalid = None;
    while at < file_bytes {
        let head = read_at(
            &*file,
            &path,
            at,
            (file_bytes - at).min(BATCH_HEADER_BYTES as u64) as usize,
        )?;
        let size = match parse_header(&head) {
            Ok(header) => header.size_bytes(),
            Err(HeaderError::Incomplete { needed: Some(size) }) => size,
            Err(HeaderError::Incomplete { needed: None }) => {
                invalid = Some((
                    at,
                    format!(
                        "torn batch: needs {BATCH_HEADER_BYTES} bytes, {} remain in the file",
                        file_bytes - at
                    ),
                ));
                break;
            }
            Err(HeaderError::Invalid(reason)) => {
                invalid = Some((at, reason));
                break;
            }
        };
        if at + size as u64 > file_bytes {
            invalid = Some((
                at,
                format!(
                    "torn batch: needs {size} bytes, {} remain in the file",
                    file_bytes - at
                ),
            ));
            break;
        }
        let bytes = read_at(&*file, &path, at, size)?;
        if bytes.len() < size {
            invalid = Some((at, "file ended while reading it".to_string()));
            break;
        }
        let batch = match RecordBatch::from_bytes(Bytes::from(bytes)) {
            Ok(batch) => batch,
            Err(e) => {
                invalid = Some((at, e.to_string()));
                break;
            }
        };
        let h = *batch.header();
        // The epoch the cache gives for this batch's offset, when the cache
        // file is trusted and disagrees (recovery checks the same).
        let last_offset = Offset(h.base_offset.0 + u64::from(h.last_offset_delta));
        let disagrees = |entries: &Option<Vec<EpochEntry>>| {
            entries.as_deref().and_then(|e| {
                if last_offset < log_start {
                    expected_epoch(e, log_start)
                        .filter(|ceiling| h.leader_epoch > *ceiling)
                        .map(Some)
                } else {
                    Some(expected_epoch(e, h.base_offset.max(log_start)))
                        .filter(|expected| *expected != Some(h.leader_epoch))
                }
            })
        };
        let mut cache_disagrees = disagrees(epochs);
        if cache_disagrees.is_some() {
            // On a live node the cache's file may be written after it was
            // read here: read it again before calling the batch damaged.
            if let Ok(fresh) = LeaderEpochCache::open(disk, dir) {
                *epochs = Some(fresh.entries().to_vec());
                cache_disagrees = disagrees(epochs);
            }
        }
        if cache_disagrees.is_some() && h.base_offset >= learn.from {
            // The file may lag the batches there (issue 27): recovery
            // learns their epoch from them, as here (`recovery`).
            if let Some(entries) = epochs.as_mut() {
                if let Some(epoch) = super::recovery::epoch_to_learn(entries, &h, learn.line_bound)
                {
                    entries.retain(|entry| entry.start_offset < h.base_offset);
                    entries.push(EpochEntry {
                        epoch,
                        start_offset: h.base_offset,
                    });
                    cache_disagrees = disagrees(epochs);
                }
            }
        }
        let problem = if h.base_offset != next {
            Some(format!(
                "batch starts at offset {}, expected {next}",
                h.base_offset
            ))
        } else if let Some(previous) = last_epoch.filter(|previous| h.leader_epoch < *previous) {
            Some(format!(
                "leader epoch {} goes back from {previous}",
                h.leader_epoch
            ))
        } else {
            cache_disagrees.map(|expected| {
                format!(
                    "batch at offset {} has leader epoch {}, but the epoch cache says {}",
                    h.base_offset,
                    h.leader_epoch,
                    expected.map_or("none".to_string(), |e| e.to_string())
                )
            })
        };
        if let Some(reason) = problem {
            invalid = Some((at, reason));
            break;
        }
        *last_epoch = Some(h.leader_epoch);
        batches.push(BatchReport {
            position: at,
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
            leader_epoch: h.leader_epoch,
            record_count: h.record_count,
            size_bytes: size as u64,
            crc: h.crc,
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
        });
        at += size as u64;
        next = h.next_offset();
    }
    // Checked against the file's length, as recovery opens it.
    let index = check_index(&**disk, &index_path(dir, base), base, file_bytes)?;
    Ok(Some(Walked {
        segment: SegmentReport {
            path,
            base_offset: base,
            file_bytes,
            valid_bytes: at,
            next_offset: next,
            batches,
            index,
        },
        invalid,
    }))
}

/// Checks an index file read-only, with the index's own sanity check.
fn check_index(disk: &dyn Disk, path: &Path, base: Offset, data_bytes: u64) -> Result<IndexState> {
    let bytes = match disk.read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(IndexState::Problem("index file is missing".into()))
        }
        Err(e) => return Err(Error::io(path, "read", e)),
    };
    if bytes.len() % INDEX_ENTRY_BYTES != 0 {
        return Ok(IndexState::Problem(format!(
            "index size {} is not a multiple of {INDEX_ENTRY_BYTES}",
            bytes.len()
        )));
    }
    Ok(match check_entries(&bytes, base, data_bytes) {
        Ok(entries) => IndexState::Valid { entries },
        Err(problem) => IndexState::Problem(problem.0),
    })
}

/// Whether a whole batch with a valid CRC and a base offset at or after
/// `after` starts at any byte of `path` from `from` on (the bytes before it
/// may be garbage): valid data after damage means the damage is in the
/// middle of the log, not a torn write.
fn valid_batch_in(disk: &dyn Disk, path: &Path, from: u64, after: Offset) -> Result<bool> {
    let bytes = disk.read(path).map_err(|e| Error::io(path, "read", e))?;
    let bytes = Bytes::from(bytes);
    let mut at = from as usize;
    while at + BATCH_HEADER_BYTES <= bytes.len() {
        if let Ok(header) = parse_header(&bytes[at..]) {
            if header.base_offset >= after
                && RecordBatch::from_bytes(bytes.slice(at..at + header.size_bytes())).is_ok()
            {
                return Ok(true);
            }
        }
        at += 1;
    }
    Ok(false)
}

/// Inspects the log directory `dir` without changing anything in it:
/// decodes its checkpoints, epoch cache and producer snapshots, walks every
/// segment batch by batch verifying each CRC and the continuity of offsets
/// and epochs, checks each offset index, and predicts what recovery would
/// do when the log is next opened.
///
/// Damage is reported in the [`Report`], not as an error; `Err` is for a
/// directory that cannot be listed or a file that cannot be read.
///
/// ```no_run
/// // A node keeps log N in `DATA_DIR/log-N`.
/// let report = isrlog::inspect::inspect_dir(std::path::Path::new("/var/lib/app/log-0"))?;
/// if !report.is_healthy() {
///     // Names each damaged file and byte position, and what recovery
///     // would do about it.
///     eprintln!("{report}");
/// }
/// # Ok::<(), isrlog::Error>(())
/// ```
pub fn inspect_dir(dir: &Path) -> Result<Report> {
    inspect_dir_on(&StdDisk::shared(), dir)
}

/// [`inspect_dir`] on `disk`.
pub(crate) fn inspect_dir_on(disk: &Arc<dyn Disk>, dir: &Path) -> Result<Report> {
    let mut report = Report {
        dir: dir.to_path_buf(),
        checkpoint: CheckpointState::Missing,
        epoch_cache: EpochCacheState::Missing,
        producer_snapshots: Vec::new(),
        segments: Vec::new(),
        damage: Vec::new(),
        recovery: Vec::new(),
        verbose: false,
    };
    let mut bases = Vec::new();
    let names = disk.list_dir(dir).map_err(|e| Error::io(dir, "list", e))?;
    for name in names {
        if let Some(base) = name.to_str().and_then(parse_log_file_name) {
            bases.push(base);
        }
    }
    bases.sort();

    let checkpoint = match LogCheckpoint::load(&**disk, dir) {
        Ok(Some(c)) => {
            report.checkpoint = CheckpointState::Valid {
                recovery_point: c.recovery_point,
                high_watermark: c.high_watermark,
                log_start_offset: c.log_start_offset,
                clean_shutdown: c.clean_shutdown,
            };
            Some(c)
        }
        Ok(None) => {
            if !bases.is_empty() {
                report.recovery.push(RecoveryAction::RescanWholeLog {
                    reason: format!(
                        "{} is missing, so the high watermark and recovery point are unknown \
                         and the high watermark restarts at the log start",
                        LogCheckpoint::path(dir).display()
                    ),
                });
            }
            None
        }
        Err(e @ Error::InvalidCheckpoint { .. }) => {
            report.checkpoint = CheckpointState::Invalid(e.to_string());
            report.recovery.push(RecoveryAction::RescanWholeLog {
                reason: e.to_string(),
            });
            None
        }
        Err(e) => return Err(e),
    };
    let epoch_file_exists = disk.exists(&dir.join(LeaderEpochCache::FILE_NAME));
    let epochs = match LeaderEpochCache::open(disk, dir) {
        Ok(cache) if epoch_file_exists => {
            report.epoch_cache = EpochCacheState::Valid(
                cache
                    .entries()
                    .iter()
                    .map(|e| (e.epoch, e.start_offset))
                    .collect(),
            );
            Some(cache)
        }
        Ok(_) => None,
        Err(e @ Error::InvalidCheckpoint { .. }) => {
            report.epoch_cache = EpochCacheState::Invalid(e.to_string());
            report.recovery.push(RecoveryAction::RebuildEpochCache {
                reason: e.to_string(),
            });
            None
        }
        Err(e) => return Err(e),
    };

    for offset in list_snapshots(&**disk, dir)? {
        let path = super::producer_state::snapshot_path(dir, offset);
        let producers = match ProducerStateManager::read_snapshot(&**disk, dir, offset) {
            Ok(state) => Ok(state
                .producers_by_id()
                .into_iter()
                .map(
                    |(producer_id, producer_epoch, _, batches)| SnapshotProducer {
                        producer_id,
                        producer_epoch,
                        batches: batches
                            .iter()
                            .map(|b| {
                                (
                                    b.first_sequence,
                                    b.last_sequence,
                                    b.first_offset,
                                    b.last_offset,
                                )
                            })
                            .collect(),
                    },
                )
                .collect()),
            Err(e) => Err(e.to_string()),
        };
        report.producer_snapshots.push(SnapshotReport {
            path,
            offset,
            producers,
        });
    }

    let recovery_point = checkpoint.map_or(Offset::ZERO, |c| c.recovery_point);
    if let (Some(c), Some(&first)) = (checkpoint, bases.first()) {
        // As recovery: retention checkpoints the new log start before it
        // deletes files, so a first segment after a durable log start is a
        // lost segment.
        if first > c.log_start_offset && c.recovery_point > c.log_start_offset {
            report.recovery.push(RecoveryAction::Refuse {
                path: super::segment::log_path(dir, first),
                position: 0,
                reason: format!(
                    "the log starts at offset {} and was durable up to {}, but its first \
                     segment starts at {first}: the segment holding offsets {}..{first} is \
                     missing",
                    c.log_start_offset, c.recovery_point, c.log_start_offset
                ),
            });
            report.damage.push(Damage {
                path: super::segment::log_path(dir, first),
                position: 0,
                offset: c.log_start_offset,
                reason: format!("segments before offset {first} are missing"),
            });
        }
    }
    let committed_end = checkpoint.map(|c| c.high_watermark);
    let may_be_committed = |offset: Offset| committed_end.is_none_or(|hw| offset < hw);
    let hw_text = committed_end.map_or("unknown".to_string(), |hw| hw.to_string());
    let mut entries = epochs.as_ref().map(|c| c.entries().to_vec());
    let log_start = checkpoint.map_or(Offset::ZERO, |c| c.log_start_offset);
    let learn = Learn {
        log_start,
        from: recovery_point.max(epochs.as_ref().map_or(Offset::ZERO, |c| c.file_covers())),
        line_bound: super::log::stored_line_bound(&**disk, dir)?,
    };
    // Once recovery cuts a tail or meets a gap it deletes every later
    // segment; once it refuses, it does nothing more.
    let mut cut = false;
    let mut refused = report
        .recovery
        .iter()
        .any(|a| matches!(a, RecoveryAction::Refuse { .. }));
    let mut last_epoch = None;
    let mut previous_complete = true;
    for (i, &base) in bases.iter().enumerate() {
        if !cut && !refused && bases.get(i + 1).is_some_and(|next| *next <= log_start) {
            // Entirely below the log start: a crash during retention.
            report.recovery.push(RecoveryAction::DeleteSegment {
                path: super::segment::log_path(dir, base),
            });
            continue;
        }
        // Where the previous segment ends, when its walk reached its end (a
        // walk stopped by damage says nothing about where the data ends).
        let expected = report
            .segments
            .last()
            .filter(|_| previous_complete)
            .map(|s: &SegmentReport| s.next_offset);
        // A segment that does not continue the one before it still gets
        // walked for the report, from its own name.
        let Some(walked) =
            walk_segment(disk, dir, base, base, &mut last_epoch, &mut entries, learn)?
        else {
            continue;
        };
        let segment = walked.segment;
        previous_complete = walked.invalid.is_none();
        if let Some(expected) = expected.filter(|e| *e != base) {
            let reason =
                format!("segment starts at offset {base} but the log before it ends at {expected}");
            report.damage.push(Damage {
                path: segment.path.clone(),
                position: 0,
                offset: expected,
                reason: reason.clone(),
            });
            if !cut && !refused {
                let mut lost = expected < recovery_point;
                if !lost && may_be_committed(expected) {
                    for &later in &bases[i..] {
                        if valid_batch_in(
                            &**disk,
                            &super::segment::log_path(dir, later),
                            0,
                            expected,
                        )? {
                            lost = true;
                            break;
                        }
                    }
                }
                if lost {
                    refused = true;
                    report.recovery.push(RecoveryAction::Refuse {
                        path: segment.path.clone(),
                        position: 0,
                        reason: format!(
                            "{reason}; records from {expected} may have been committed \
                             (recovery point {recovery_point}, high watermark {hw_text})"
                        ),
                    });
                } else {
                    cut = true;
                }
            }
        }
        if cut && !refused {
            report.recovery.push(RecoveryAction::DeleteSegment {
                path: segment.path.clone(),
            });
            report.segments.push(segment);
            continue;
        }
        if let IndexState::Problem(reason) = &segment.index {
            if !refused {
                report.recovery.push(RecoveryAction::RebuildIndex {
                    path: index_path(dir, base),
                    reason: reason.clone(),
                });
            }
        }
        if let Some((position, reason)) = walked.invalid {
            let offset = segment.next_offset;
            report.damage.push(Damage {
                path: segment.path.clone(),
                position,
                offset,
                reason: reason.clone(),
            });
            if !refused {
                if offset < recovery_point {
                    refused = true;
                    report.recovery.push(RecoveryAction::Refuse {
                        path: segment.path.clone(),
                        position,
                        reason: format!(
                            "corrupt batch below the recovery point {recovery_point} ({reason}): \
                             data promised durable is never cut; Log::open trusts it without \
                             re-reading and may open, but reading it fails with a Corrupt \
                             error, so restore this replica from another"
                        ),
                    });
                } else {
                    let mut follows = may_be_committed(offset)
                        && valid_batch_in(&**disk, &segment.path, position + 1, offset.next())?;
                    if may_be_committed(offset) {
                        for &later in &bases[i + 1..] {
                            if follows {
                                break;
                            }
                            follows = valid_batch_in(
                                &**disk,
                                &super::segment::log_path(dir, later),
                                0,
                                offset.next(),
                            )?;
                        }
                    }
                    if follows {
                        refused = true;
                        report.recovery.push(RecoveryAction::Refuse {
                            path: segment.path.clone(),
                            position,
                            reason: format!(
                                "{reason}; valid batches follow, and records from offset \
                                 {offset} may have been committed (high watermark {hw_text})"
                            ),
                        });
                    } else {
                        cut = true;
                        report.recovery.push(RecoveryAction::TruncateTail {
                            path: segment.path.clone(),
                            position,
                            bytes: segment.file_bytes - position,
                            reason,
                        });
                    }
                }
            }
        }
        report.segments.push(segment);
    }
    let log_end = report.log_end_offset();
    if !refused
        && epochs.is_none()
        && !epoch_file_exists
        && log_end.is_some_and(|end| end > base_of(&report))
    {
        report.recovery.push(RecoveryAction::RebuildEpochCache {
            reason: format!(
                "{} is missing",
                dir.join(LeaderEpochCache::FILE_NAME).display()
            ),
        });
    }
    Ok(report)
}

/// The base offset of the first segment (zero without segments).
fn base_of(report: &Report) -> Offset {
    report
        .segments
        .first()
        .map_or(Offset::ZERO, |s| s.base_offset)
}
