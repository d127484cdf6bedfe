//! [`Log`]: one replica's log — append (as leader or follower), read,
//! roll, truncate, flush, close — over the segments of one directory.
//!
//! This module owns the log's in-memory state and the order of file
//! operations that keeps it crash safe. Opening is `recovery`'s job,
//! deleting old data `retention`'s, the fsync hand-off `flush`'s. It knows
//! nothing of replication: the high watermark is kept here only to be
//! checkpointed.
//!
//! Concurrency: one `RwLock` guards the state. Appends, rolls and
//! truncations take it for writing, only for as long as the write syscall;
//! reads take it for reading just long enough to find the file and position,
//! then read without it. Fsyncs never run under it (see `flush`). Nor
//! does anything taken under it wait for one: the epoch cache's file is
//! written without it, and the lock its writes hold across their fsyncs
//! is not the one read under it (`leader_epoch`'s `FileLocks`; only a
//! truncation, which writes the file under it, waits for a write in
//! flight, to land after it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use bytes::Bytes;

use super::checkpoint::{self, sync_dir, write_atomically, LogCheckpoint};
use super::config::LogConfig;
use super::disk::{Disk, StdDisk};
use super::flush::{FlushPolicy, GroupCommit, SyncOutcome};
use super::leader_epoch::{expected_epoch, EpochEntry, LeaderEpochCache};
use super::offset_index::IndexSyncHandle;
use super::producer_state::{self, LeaderCheck, ProducerStateManager};
use super::recovery::{self, DamageAboveRecoveryPoint, RecoveryReport};
use super::segment::{Found, Segment, SegmentFile};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::record::{
    compute_crc, parse_header, set_base_offset, set_leader_epoch, BatchHeader, BatchIter,
    HeaderError, RecordBatch, BATCH_HEADER_BYTES,
};
use crate::sync::{Arc, AtomicU64, Mutex, MutexGuard, Ordering, RwLock};
use crate::types::{EpochEndOffset, LeaderEpoch, Offset, ProducerEpoch, ProducerId, Sequence};

/// Where an append landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first appended record.
    pub base_offset: Offset,
    /// Offset of the last appended record.
    pub last_offset: Offset,
    /// The log end offset after the append.
    pub log_end_offset: Offset,
    /// The leader epoch the (last) batch was written in: for a duplicate,
    /// the epoch of the original.
    pub leader_epoch: LeaderEpoch,
    /// Whether the batch was an idempotent producer's duplicate (SPEC 4):
    /// nothing was appended and the offsets are the original batch's.
    pub duplicate: bool,
}

/// Whole batches read from a log, without copying them again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadResult {
    /// The batches, back to back, exactly as stored. The first one may start
    /// before the offset asked for (it is the batch containing it, as in
    /// Kafka): skip records below it when that matters.
    pub records: Bytes,
    /// The log start offset when the read was made.
    pub log_start_offset: Offset,
    /// The log end offset when the read was made.
    pub log_end_offset: Offset,
}

impl ReadResult {
    /// Iterates over the batches (each validated again, CRC included).
    pub fn batches(&self) -> BatchIter {
        BatchIter::new(self.records.clone())
    }

    /// Whether no batch was returned.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The offset after the last batch returned (where a sequential reader
    /// continues), `None` when empty. Reads headers only.
    pub fn next_offset(&self) -> Option<Offset> {
        let mut at = 0;
        let mut next = None;
        while let Ok(header) = parse_header(&self.records[at..]) {
            next = Some(header.next_offset());
            at += header.size_bytes();
        }
        next
    }
}

/// Counters an application can export; monotonic except `segments`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Successful appends (calls, not batches).
    pub appends: u64,
    /// Batches appended.
    pub batches_appended: u64,
    /// Bytes appended.
    pub bytes_appended: u64,
    /// `fdatasync` calls on segment data files.
    pub fsyncs: u64,
    /// Segments rolled.
    pub rolls: u64,
    /// Segments in the log now.
    pub segments: u64,
    /// Reads served.
    pub reads: u64,
    /// Bytes returned by reads.
    pub bytes_read: u64,
}

/// How often a read that failed a check is tried again because a
/// truncation ran under it (each retry needs another truncation in between).
const READ_ATTEMPTS_MAX: u32 = 8;

/// The longest a group-commit fsync waits for appends still writing.
const GROUP_COMMIT_GATHER_MAX: std::time::Duration = std::time::Duration::from_micros(100);

/// Counts an append as writing until dropped.
struct WriteInFlight<'a>(&'a AtomicU64);

impl<'a> WriteInFlight<'a> {
    fn start(counter: &'a AtomicU64) -> WriteInFlight<'a> {
        counter.fetch_add(1, Ordering::AcqRel);
        WriteInFlight(counter)
    }
}

impl Drop for WriteInFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Debug, Default)]
struct Counters {
    /// Appends between their start and the end of their write. A thread
    /// about to fsync for the group lets these finish first (briefly), so
    /// one fsync covers them too.
    writes_in_flight: AtomicU64,
    appends: AtomicU64,
    batches_appended: AtomicU64,
    bytes_appended: AtomicU64,
    fsyncs: AtomicU64,
    rolls: AtomicU64,
    reads: AtomicU64,
    bytes_read: AtomicU64,
}

/// What a read found under the log's lock, to finish without it.
struct ReadPlan {
    file: Arc<SegmentFile>,
    /// Where the walk to the batch starts (index entry or segment base).
    start: (Offset, u64),
    /// The segment's base offset (its first batch starts there).
    segment_base: Offset,
    /// Valid bytes of the segment when the read began.
    end_bytes: u64,
    /// The epoch cache entries covering the segment from the read offset.
    epochs: Vec<EpochEntry>,
    /// `LogState::truncations` when the read began.
    truncations: u64,
    log_start_offset: Offset,
    log_end_offset: Offset,
    /// No batch reaching this offset is returned.
    limit: Offset,
}

/// The mutable state of a log.
///
/// Invariant: `segments` is non-empty and contiguous (each segment ends
/// where the next begins); the last one is the active segment;
/// `log_start_offset <= high_watermark <= log_end_offset`, and the log start
/// lies inside the first segment (or at the end of an empty log).
#[derive(Debug)]
pub(super) struct LogState {
    pub(super) segments: BTreeMap<Offset, Segment>,
    pub(super) log_start_offset: Offset,
    pub(super) high_watermark: Offset,
    pub(super) epochs: LeaderEpochCache,
    /// Epoch of the last batch, `None` when the log holds no batch.
    pub(super) last_batch_epoch: Option<LeaderEpoch>,
    /// Data files of rolled segments that still need an fsync.
    pub(super) unsynced: Vec<Arc<SegmentFile>>,
    /// Index files of rolled segments that still need an fsync (the same
    /// fsync round as `unsynced` does them).
    pub(super) unsynced_indexes: Vec<IndexSyncHandle>,
    /// A segment file was created since the directory's last fsync: the
    /// next fsync round syncs the directory too, so that no fsynced record
    /// lives in a file whose name a power loss could take away.
    pub(super) dir_unsynced: bool,
    /// Producer state snapshots taken at rolls (offset, encoded bytes) and
    /// not yet written: the next `flush` writes them (issue 27). A
    /// truncation drops those above its cut, so none is ever written for
    /// batches the log no longer holds.
    pub(super) pending_snapshots: Vec<(Offset, Vec<u8>)>,
    /// Records appended since the last fsync (for `FlushPolicy::Every`).
    pub(super) unflushed_messages: u64,
    /// When the last fsync snapshot was taken.
    pub(super) last_flush_at: Instant,
    /// Idempotent producers' last batches (SPEC 4), covering every batch
    /// below the log end.
    pub(super) producers: ProducerStateManager,
    /// Truncations so far (`truncate_to`, `truncate_fully_and_start_at`): a
    /// reader that saw bytes change under it compares this to tell a
    /// concurrent truncation from corruption.
    pub(super) truncations: u64,
}

impl LogState {
    pub(super) fn active(&self) -> &Segment {
        match self.segments.values().next_back() {
            Some(segment) => segment,
            None => unreachable!("a log always has an active segment"),
        }
    }

    pub(super) fn active_mut(&mut self) -> &mut Segment {
        match self.segments.values_mut().next_back() {
            Some(segment) => segment,
            None => unreachable!("a log always has an active segment"),
        }
    }

    pub(super) fn log_end_offset(&self) -> Offset {
        self.active().next_offset()
    }

    /// The segment holding `offset`, which must be below the log end.
    fn segment_for(&self, offset: Offset) -> Option<&Segment> {
        self.segments
            .range(..=offset)
            .next_back()
            .map(|(_, s)| s)
            .filter(|s| s.next_offset() > offset)
            .or_else(|| {
                // `offset` is the end of one segment and the start of the next.
                self.segments
                    .range(offset..)
                    .map(|(_, s)| s)
                    .find(|s| s.next_offset() > offset)
            })
    }

    pub(super) fn check_invariants(&self) -> bool {
        let contiguous = self
            .segments
            .values()
            .zip(self.segments.values().skip(1))
            .all(|(a, b)| a.next_offset() == b.base_offset());
        !self.segments.is_empty()
            && contiguous
            && self.log_start_offset <= self.high_watermark
            && self.high_watermark <= self.log_end_offset()
            && self.epochs.check_invariants()
            && self.producers.check_invariants()
    }
}

/// One replica's log on disk. Every method takes `&self`: appends, reads
/// and flushes may come from many threads at once.
#[derive(Debug)]
pub struct Log {
    /// The file system the log's files live on ([`StdDisk`] unless a test
    /// gives another).
    pub(super) disk: Arc<dyn Disk>,
    pub(super) dir: PathBuf,
    pub(super) config: LogConfig,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) state: RwLock<LogState>,
    pub(super) commit: GroupCommit,
    /// Serialises checkpoint writes (they share a temporary file name), and
    /// an operation that must write its checkpoint before it changes the
    /// state holds it throughout.
    ///
    /// Lock order: `checkpoint_lock` before `state`, never the other way
    /// (a truncation holding the state lock while a periodic checkpoint
    /// held this one and waited for the state deadlocked both).
    pub(super) checkpoint_lock: Mutex<()>,
    counters: Counters,
    report: RecoveryReport,
    /// Where the flush after a roll goes, when the owner gave one (a node
    /// does); without, the appending thread flushes (issue 27).
    pub(super) roll_flusher: std::sync::OnceLock<RollFlusher>,
    /// Deferred log start moves. Lock order: `checkpoint_lock`, then
    /// `state`, then this.
    pub(super) start_moves: Mutex<StartMoves>,
    /// The newest leader epoch whose leader's log this log is known to be
    /// a prefix of ([`line_epoch`](Log::line_epoch)), as stored in
    /// [`LINE_EPOCH_FILE`]; held while it is written, taken while no other
    /// lock of the log is held.
    line_epoch: Mutex<LineEpoch>,
}

/// A log's line epoch as stored ([`Log::line_epoch`]).
#[derive(Debug, Default)]
struct LineEpoch {
    /// The newest one stored; `None` if none was (a new log, or one
    /// written before line epochs existed).
    stored: Option<LeaderEpoch>,
    /// Why the stored file could not be used, until a newer line replaces
    /// it: the line is then not known ([`Log::end_report`]).
    unusable: Option<String>,
    /// The start line as stored in [`START_LINE_FILE`]
    /// ([`Log::note_start_line`]): an epoch, and the log start it was
    /// noted at. It says nothing once the start moved.
    start: Option<(LeaderEpoch, Offset)>,
}

/// `stored`, the line epoch a log stored, raised to the epochs its records
/// and epoch cache show: a log is on the line of every epoch it holds a
/// batch of or led ([`Log::line_epoch`]).
fn line_with_records(stored: Option<LeaderEpoch>, state: &LogState) -> Option<LeaderEpoch> {
    stored
        .max(state.epochs.latest_epoch())
        .max(state.last_batch_epoch)
}

/// For a log that holds no batch, the epoch its cache gives its start
/// (an entry a deletion moved there, or a leader's that appended nothing
/// there): that epoch's leader's log held its records below the start.
fn start_epoch_of_empty_log(state: &LogState) -> Option<LeaderEpoch> {
    if state.last_batch_epoch.is_some() {
        return None;
    }
    // The entry that covers the start, if one does: entries past it
    // describe no data. A follower's write that failed leaves the epochs
    // it learned ahead of the batches in memory (the log is poisoned then,
    // and recovery drops them at the next open): simulator seed 60349931,
    // where the assertion that no entry starts past an empty log's start
    // failed on such a log.
    epoch_covering(state, state.log_start_offset)
}

/// The epoch of the cache's entry covering offset `at`: the last entry
/// starting at or below it, if any.
fn epoch_covering(state: &LogState, at: Offset) -> Option<LeaderEpoch> {
    let entries = state.epochs.entries();
    let covering = entries.partition_point(|entry| entry.start_offset <= at);
    covering.checked_sub(1).map(|index| entries[index].epoch)
}

/// The start line a log reports ([`EndReport::start_line`]): the one
/// noted at its current start (`start`, as [`Log::note_start_line`]
/// stored it), or else, for a log that holds no batch, its cache's.
fn start_line_of(start: Option<(LeaderEpoch, Offset)>, state: &LogState) -> Option<LeaderEpoch> {
    start
        .filter(|(_, at)| *at == state.log_start_offset)
        .map(|(epoch, _)| epoch)
        .or_else(|| start_epoch_of_empty_log(state))
}

/// Where a log ends and what unclean recovery compares of it, read at one
/// instant ([`Log::end_report`]; SPEC 3.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EndReport {
    /// The epoch of the last batch; `None` if the log holds none.
    pub(crate) last_batch_epoch: Option<LeaderEpoch>,
    /// The log start offset.
    pub(crate) log_start_offset: Offset,
    /// The log end offset.
    pub(crate) log_end_offset: Offset,
    /// The high watermark as this log knows it: every record below it
    /// was committed.
    pub(crate) high_watermark: Offset,
    /// [`Log::line_epoch`].
    pub(crate) line_epoch: Option<LeaderEpoch>,
    /// The newest epoch cache entries, oldest first.
    pub(crate) epochs: Vec<(LeaderEpoch, Offset)>,
    /// The epoch whose leader's log holds this log's records below its
    /// start ([`Log::note_start_line`]); `None` when not known.
    pub(crate) start_line: Option<LeaderEpoch>,
}

/// The file that keeps a log's line epoch ([`Log::line_epoch`]) across
/// restarts.
pub(crate) const LINE_EPOCH_FILE: &str = "line-epoch.checkpoint";
pub(super) const LINE_EPOCH_KIND: &str = "line-epoch";

/// The file that keeps where a log's start came from
/// ([`Log::note_start_line`]).
pub(crate) const START_LINE_FILE: &str = "start-line.checkpoint";
const START_LINE_KIND: &str = "start-line";

/// The one `(epoch, value)` entry of the file `name` in `dir`: `Ok(None)`
/// if there is no file, [`Error::InvalidCheckpoint`] naming the file and
/// what is wrong with it if it cannot be used, and the I/O error if it
/// could not be read. Callers take only the first for a damaged file: a
/// read that failed says nothing about the file, and the open that needs
/// it fails so that it can be retried (as recovery does with the other
/// checkpoints), rather than leaving the line not known for the life of
/// the process.
pub(super) fn load_epoch_entry(
    disk: &dyn Disk,
    dir: &Path,
    name: &str,
    kind: &str,
) -> Result<Option<(LeaderEpoch, u64)>> {
    let path = dir.join(name);
    let Some(pairs) = checkpoint::load_pairs(disk, &path, kind)? else {
        return Ok(None);
    };
    let invalid = |reason: String| Error::InvalidCheckpoint {
        path: path.clone(),
        reason,
    };
    match pairs.as_slice() {
        [(epoch, value)] => u32::try_from(*epoch)
            .map(|epoch| Some((LeaderEpoch(epoch), *value)))
            .map_err(|_| invalid(format!("epoch {epoch} does not fit in 32 bits"))),
        _ => Err(invalid(format!(
            "{} entries where one belongs",
            pairs.len()
        ))),
    }
}

/// The start line stored in `dir` with the log start it was noted at;
/// none if there is no file, or it cannot be used (with a warning): the
/// start line is then not known, which unclean recovery reads as it did
/// before start lines existed.
fn load_start_line(disk: &dyn Disk, dir: &Path) -> Result<Option<(LeaderEpoch, Offset)>> {
    match load_epoch_entry(disk, dir, START_LINE_FILE, START_LINE_KIND) {
        Ok(entry) => Ok(entry.map(|(epoch, start)| (epoch, Offset(start)))),
        Err(problem @ Error::InvalidCheckpoint { .. }) => {
            tracing::warn!(reason = %problem, "unusable start line file: where this log's start came from is not known; should the log need unclean recovery with this replica's log empty at its start, a longer log of an older line is not taken over it");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The line epoch stored in `dir`, as recovery and inspection bound the
/// epochs of batches by it: none if there is no file or it cannot be used
/// (quietly: [`load_line_epoch`] is where an unusable file is reported);
/// a read that failed fails the caller.
pub(crate) fn stored_line_bound(disk: &dyn Disk, dir: &Path) -> Result<Option<LeaderEpoch>> {
    match load_epoch_entry(disk, dir, LINE_EPOCH_FILE, LINE_EPOCH_KIND) {
        Ok(entry) => Ok(entry.map(|(epoch, _)| epoch)),
        Err(Error::InvalidCheckpoint { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The line epoch stored in `dir`; none if there is no file. A file that
/// cannot be used leaves the line not known (with a warning): too low, it
/// would let a deposed leader's uncommitted tail beat this log in unclean
/// recovery; too high, this log beat one holding what was committed. A
/// read that failed fails the open.
fn load_line_epoch(disk: &dyn Disk, dir: &Path) -> Result<LineEpoch> {
    match load_epoch_entry(disk, dir, LINE_EPOCH_FILE, LINE_EPOCH_KIND) {
        Ok(entry) => Ok(LineEpoch {
            stored: entry.map(|(epoch, _)| epoch),
            unusable: None,
            start: None,
        }),
        Err(unusable @ Error::InvalidCheckpoint { .. }) => {
            tracing::error!(reason = %unusable, "unusable line epoch file: this replica's line is not known, so its log end is reported as not known; should the log need unclean recovery, it waits for this replica as for one that cannot open (a leadership or a fetch answer in a later epoch stores a new line, but recovery has no leader to give either). An operator may delete the file, and the node reports the line its records show at its next start (which may let another replica's uncommitted records win), or let the unclean switch decide");
            Ok(LineEpoch {
                stored: None,
                unusable: Some(unusable.to_string()),
                start: None,
            })
        }
        Err(e) => Err(e),
    }
}

/// Queues work a log hands off its caller's thread (the flush a roll
/// needs, the file work of a follower's log start move) on a thread of the
/// owner's; returns `false` when it cannot (the thread is gone), and the
/// caller then does the work itself.
pub(crate) struct RollFlusher(pub(crate) Box<dyn Fn(BackgroundWork) -> bool + Send + Sync>);

/// What a [`RollFlusher`] is asked to run for a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BackgroundWork {
    /// [`Log::flush`], after a roll.
    FlushRoll,
    /// [`Log::finish_log_start_moves`], after
    /// [`Log::raise_log_start_offset_deferred`].
    FinishLogStartMoves,
}

/// A follower's log start moves whose file work is still to do
/// ([`Log::raise_log_start_offset_deferred`]).
///
/// Invariant: every doomed segment lies wholly below the log start and
/// below the log's first segment (it ends at or before both). Its records
/// are unreadable and no live segment covers its offsets, so deleting its
/// files loses nothing the log serves, and a truncation or restart never
/// has to bring one back: the log start only falls by a restart, which
/// deletes the doomed files first.
#[derive(Debug, Default)]
pub(super) struct StartMoves {
    /// Segments taken out of the log whose files are still on disk.
    pub(super) doomed: Vec<Segment>,
    /// The log start moved since the last checkpoint written for a move.
    pub(super) unpersisted: bool,
}

impl StartMoves {
    /// Whether a move waits for its file work.
    pub(super) fn pending(&self) -> bool {
        self.unpersisted || !self.doomed.is_empty()
    }

    /// Checks the invariant against the log's state.
    pub(super) fn check_invariants(&self, state: &LogState) -> bool {
        let first = state
            .segments
            .keys()
            .next()
            .copied()
            .unwrap_or(state.log_start_offset);
        self.doomed.iter().all(|segment| {
            segment.next_offset() <= state.log_start_offset && segment.next_offset() <= first
        })
    }
}

impl std::fmt::Debug for RollFlusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RollFlusher")
    }
}

impl Log {
    /// Opens (creating if needed) the log in `dir`, recovering it after an
    /// unclean stop (SPEC 2.3). A torn or corrupt tail after the recovery
    /// point is cut and reported in [`recovery_report`](Self::recovery_report);
    /// corruption below it is `Error::Corrupt`.
    ///
    /// Damage above the recovery point that valid batches follow, where
    /// the records it would remove may have been committed, is
    /// `Error::Corrupt` here. A node that reported its unclean stop to the
    /// coordinator cuts such damage instead (its replicas fetch again; see
    /// [`RecoveryReport::dropped_possibly_committed`]).
    pub fn open(dir: impl AsRef<Path>, config: LogConfig, clock: Arc<dyn Clock>) -> Result<Log> {
        Self::open_on(StdDisk::shared(), dir, config, clock)
    }

    /// Test harness only: [`open`](Self::open) on the given [`Disk`] (a
    /// simulated one) instead of the real file system.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn open_on_disk(
        disk: Arc<dyn Disk>,
        dir: impl AsRef<Path>,
        config: LogConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Log> {
        Self::open_on(disk, dir, config, clock)
    }

    /// [`open`](Self::open) on `disk`.
    pub(crate) fn open_on(
        disk: Arc<dyn Disk>,
        dir: impl AsRef<Path>,
        config: LogConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Log> {
        Self::open_recovering(disk, dir, config, clock, DamageAboveRecoveryPoint::Refuse)
    }

    /// Opens the log as [`open`](Self::open) does, doing with damage above
    /// the recovery point that valid batches follow what `damage` says: a
    /// node opens its replicas with `RefuseReplica`, or, once the
    /// coordinator holds its report of an unclean stop for that log (so a
    /// cut cannot outlive a start that failed before its report),
    /// `CutAfterReportedUncleanStop`; the cut shows in
    /// [`RecoveryReport::dropped_possibly_committed`].
    pub(crate) fn open_recovering(
        disk: Arc<dyn Disk>,
        dir: impl AsRef<Path>,
        config: LogConfig,
        clock: Arc<dyn Clock>,
        damage: DamageAboveRecoveryPoint,
    ) -> Result<Log> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let now = clock.now();
        let recovered = recovery::recover(&disk, &dir, &config, now, damage)?;
        let start_epoch = recovered.start_epoch;
        let log_end = recovered
            .segments
            .values()
            .next_back()
            .map_or(recovered.log_start_offset, Segment::next_offset);
        let mut state = LogState {
            segments: recovered.segments,
            log_start_offset: recovered.log_start_offset,
            high_watermark: recovered.high_watermark,
            epochs: recovered.epochs,
            last_batch_epoch: None,
            unsynced: Vec::new(),
            unsynced_indexes: Vec::new(),
            dir_unsynced: false,
            pending_snapshots: Vec::new(),
            unflushed_messages: 0,
            last_flush_at: now,
            producers: ProducerStateManager::empty(),
            truncations: 0,
        };
        state.last_batch_epoch = epoch_of_last_batch_below(&state, log_end)?;
        let mut report = recovered.report;
        let rebuilt =
            rebuild_producer_state(&*disk, &dir, &mut state, &config, clock.wall_clock_ms())?;
        let mut line_epoch = load_line_epoch(&*disk, &dir)?;
        line_epoch.start = load_start_line(&*disk, &dir)?;
        report.producer_snapshot = rebuilt.snapshot;
        report.producer_batches_scanned = rebuilt.batches_scanned;
        report.checkpoint_problems.extend(rebuilt.problems);
        debug_assert!(state.check_invariants());
        let log = Log {
            disk,
            dir,
            config,
            clock,
            state: RwLock::new(state),
            // Recovery synced every segment it scanned: the whole log is
            // durable now.
            commit: GroupCommit::new(log_end),
            checkpoint_lock: Mutex::new(()),
            counters: Counters::default(),
            report,
            roll_flusher: std::sync::OnceLock::new(),
            start_moves: Mutex::new(StartMoves::default()),
            line_epoch: Mutex::new(line_epoch),
        };
        // From here on a crash is not a clean shutdown.
        log.store_checkpoint(false)?;
        // A log empty at its start keeps where its start came from, which
        // the cut that emptied it took out of the epoch cache (simulator
        // seed 60267254). One noted for this start already says it.
        if let Some(epoch) = start_epoch {
            let noted = log.line_epoch.lock().start;
            if noted.is_none_or(|(_, at)| at != log.log_start_offset()) {
                log.note_start_line(epoch)?;
            }
        }
        Ok(log)
    }

    /// The file system the log lives on.
    pub(crate) fn disk(&self) -> &Arc<dyn Disk> {
        &self.disk
    }

    /// What opening the log found and did.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration the log was opened with.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Appends `batch` as the leader: its records get the next offsets and
    /// the batch is stamped with `epoch` (both outside the CRC, so the batch
    /// is not re-encoded). A new epoch is recorded in the epoch cache first.
    /// Under `FlushPolicy::Always` returns only once the batch is fsynced.
    ///
    /// `epoch` older than the latest in the epoch cache is
    /// `Error::FencedLeaderEpoch`.
    pub fn append_as_leader(&self, batch: &RecordBatch, epoch: LeaderEpoch) -> Result<AppendInfo> {
        self.check_not_poisoned()?;
        let writing = WriteInFlight::start(&self.counters.writes_in_flight);
        let bytes = batch.as_bytes();
        self.check_batch_size(bytes.len())?;
        let mut stamped = [0u8; BATCH_HEADER_BYTES];
        stamped.copy_from_slice(&bytes[..BATCH_HEADER_BYTES]);
        let (info, rolled) = {
            let mut state = self.state.write();
            // Again under the lock: a halt (or another thread's failed
            // write) may have poisoned the log while this call waited.
            self.check_not_poisoned()?;
            if let Some(latest) = state.epochs.latest_epoch() {
                if epoch < latest {
                    return Err(Error::FencedLeaderEpoch {
                        request: epoch,
                        current: latest,
                    });
                }
            }
            // Deduplication is decided under the lock that assigns offsets,
            // so a retry racing its original cannot be appended twice.
            if let LeaderCheck::Duplicate(original) =
                state.producers.check_leader_append(batch.header(), epoch)?
            {
                tracing::debug!(dir = %self.dir.display(), producer = %batch.header().producer_id, sequence = %batch.header().base_sequence, offset = %original.first_offset, "duplicate batch: returning the original offsets");
                return Ok(AppendInfo {
                    base_offset: original.first_offset,
                    last_offset: original.last_offset,
                    log_end_offset: state.log_end_offset(),
                    leader_epoch: original.leader_epoch,
                    duplicate: true,
                });
            }
            let base_offset = state.log_end_offset();
            set_base_offset(&mut stamped, base_offset);
            set_leader_epoch(&mut stamped, epoch);
            let header = BatchHeader {
                base_offset,
                leader_epoch: epoch,
                ..*batch.header()
            };
            let rolled = self.maybe_roll(&mut state, header.last_offset(), bytes.len() as u64)?;
            if state.epochs.latest_epoch() != Some(epoch) {
                // In memory only: the file is written, durably, by the next
                // fsync round, before it publishes a flushed offset past
                // this batch (`sync_once`), so no fsync runs here under the
                // state lock (issue 27; Kafka since KAFKA-15046). A crash
                // before then finds the batch above the recovery point,
                // where recovery learns its epoch from it (`recovery`).
                state.epochs.assign_in_memory(epoch, base_offset);
            }
            let interval = self.config.index_interval_bytes;
            let appended = state.active_mut().append(
                &[&stamped, &bytes[BATCH_HEADER_BYTES..]],
                [(0, header)],
                interval,
            );
            self.poison_on_error(appended)?;
            state.producers.record(&header);
            state.last_batch_epoch = Some(epoch);
            state.unflushed_messages += u64::from(header.record_count);
            self.count_append(1, bytes.len() as u64);
            debug_assert!(state.check_invariants());
            let info = AppendInfo {
                base_offset,
                last_offset: header.last_offset(),
                log_end_offset: header.next_offset(),
                leader_epoch: epoch,
                duplicate: false,
            };
            (info, rolled)
        };
        drop(writing);
        self.after_append(info.log_end_offset, rolled)?;
        Ok(info)
    }

    /// Appends batches received from the leader, keeping their offsets and
    /// epochs: each batch's CRC is checked (once), the first must start at
    /// the log end offset (`Error::NonContiguousAppend`) and each must follow
    /// the previous one with epochs that never go back
    /// (`Error::InvalidBatch`). The epoch cache learns each new epoch.
    pub fn append_as_follower(&self, batches: &Bytes) -> Result<AppendInfo> {
        self.check_not_poisoned()?;
        let writing = WriteInFlight::start(&self.counters.writes_in_flight);
        let parsed = self.validate_follower_batches(batches)?;
        let (Some(&(_, first)), Some(&(_, last))) = (parsed.first(), parsed.last()) else {
            return Err(Error::InvalidBatch {
                reason: "no batch to append".into(),
            });
        };
        let (info, rolled) = {
            let mut state = self.state.write();
            self.check_not_poisoned()?;
            let log_end = state.log_end_offset();
            if first.base_offset != log_end {
                return Err(Error::NonContiguousAppend {
                    expected: log_end,
                    got: first.base_offset,
                });
            }
            if let Some(previous) = state.last_batch_epoch {
                if first.leader_epoch < previous {
                    return Err(Error::InvalidBatch {
                        reason: format!(
                            "batch at offset {} has leader epoch {}, older than the log's last batch ({previous})",
                            first.base_offset, first.leader_epoch
                        ),
                    });
                }
            }
            // Entries at or after the log end describe no data (an epoch a
            // former leader assigned before writing anything): they give way
            // to what the leader sends.
            // In memory only, as the epochs below: see `append_as_leader`.
            // The file may keep such an entry until the next fsync round;
            // it starts at or above the recovery point, where recovery
            // lets the batches overrule the file.
            state.epochs.truncate_from_end_in_memory(log_end);
            // The epoch cache learns the batches' epochs before they are
            // written, as a leader's does, in memory: reads check batches
            // against it, and the next fsync round writes it before the
            // recovery point passes them.
            for (_, header) in &parsed {
                state
                    .epochs
                    .assign_in_memory(header.leader_epoch, header.base_offset);
            }
            let mut rolled = false;
            let mut group_start = parsed[0].0;
            let mut group: Vec<(u64, BatchHeader)> = Vec::with_capacity(parsed.len());
            for &(position, header) in &parsed {
                let size = header.size_bytes() as u64;
                let pending = (position - group_start) as u64;
                if self.should_roll(state.active(), pending, header.last_offset(), size) {
                    self.write_group(&mut state, batches, group_start, position, &mut group)?;
                    self.roll_segment(&mut state)?;
                    rolled = true;
                    group_start = position;
                }
                group.push(((position - group_start) as u64, header));
                // Recorded before the next roll, whose snapshot must cover
                // every batch below it.
                state.producers.record(&header);
            }
            self.write_group(&mut state, batches, group_start, batches.len(), &mut group)?;
            state.last_batch_epoch = Some(last.leader_epoch);
            let records: u64 = parsed.iter().map(|(_, h)| u64::from(h.record_count)).sum();
            state.unflushed_messages += records;
            self.count_append(parsed.len() as u64, batches.len() as u64);
            debug_assert!(state.check_invariants());
            let info = AppendInfo {
                base_offset: first.base_offset,
                last_offset: last.last_offset(),
                log_end_offset: last.next_offset(),
                leader_epoch: last.leader_epoch,
                duplicate: false,
            };
            (info, rolled)
        };
        drop(writing);
        self.after_append(info.log_end_offset, rolled)?;
        Ok(info)
    }

    /// Checks every batch of a follower append before anything is written.
    fn validate_follower_batches(&self, batches: &Bytes) -> Result<Vec<(usize, BatchHeader)>> {
        let mut parsed: Vec<(usize, BatchHeader)> = Vec::new();
        let mut position = 0;
        while position < batches.len() {
            let header = match parse_header(&batches[position..]) {
                Ok(header) => header,
                Err(HeaderError::Incomplete { .. }) => {
                    return Err(Error::InvalidBatch {
                        reason: format!("incomplete batch at byte {position}"),
                    })
                }
                Err(HeaderError::Invalid(reason)) => {
                    return Err(Error::InvalidBatch {
                        reason: format!("batch at byte {position}: {reason}"),
                    })
                }
            };
            let size = header.size_bytes();
            self.check_batch_size(size)?;
            // The CRC check, once; the batch is written exactly as received.
            RecordBatch::from_parsed(header, batches.slice(position..position + size))?;
            if let Some((_, previous)) = parsed.last() {
                if header.base_offset != previous.next_offset() {
                    return Err(Error::NonContiguousAppend {
                        expected: previous.next_offset(),
                        got: header.base_offset,
                    });
                }
                if header.leader_epoch < previous.leader_epoch {
                    return Err(Error::InvalidBatch {
                        reason: format!(
                            "leader epoch goes back from {} to {} at offset {}",
                            previous.leader_epoch, header.leader_epoch, header.base_offset
                        ),
                    });
                }
            }
            parsed.push((position, header));
            position += size;
        }
        Ok(parsed)
    }

    /// Writes `batches[from..to]` (described by `group`) to the active
    /// segment in one write.
    fn write_group(
        &self,
        state: &mut LogState,
        batches: &Bytes,
        from: usize,
        to: usize,
        group: &mut Vec<(u64, BatchHeader)>,
    ) -> Result<()> {
        if from == to {
            return Ok(());
        }
        let interval = self.config.index_interval_bytes;
        let written = state
            .active_mut()
            .append(&[&batches[from..to]], group.drain(..), interval);
        self.poison_on_error(written)
    }

    pub(crate) fn check_batch_size(&self, bytes: usize) -> Result<()> {
        if bytes > self.config.batch_bytes_max {
            return Err(Error::InvalidBatch {
                reason: format!(
                    "batch of {bytes} bytes exceeds batch_bytes_max {}",
                    self.config.batch_bytes_max
                ),
            });
        }
        Ok(())
    }

    fn count_append(&self, batches: u64, bytes: u64) {
        self.counters.appends.fetch_add(1, Ordering::Relaxed);
        self.counters
            .batches_appended
            .fetch_add(batches, Ordering::Relaxed);
        self.counters
            .bytes_appended
            .fetch_add(bytes, Ordering::Relaxed);
    }

    /// A failed write leaves the file in an unknown state: poison the log.
    pub(super) fn poison_on_error<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            self.commit.poison(e.to_string());
        }
        result
    }

    /// Whether the active segment must roll before taking a batch of
    /// `batch_bytes` ending at `last_offset`, with `pending_bytes` about to
    /// be written to it first.
    fn should_roll(
        &self,
        active: &Segment,
        pending_bytes: u64,
        last_offset: Offset,
        batch_bytes: u64,
    ) -> bool {
        let size = active.size_bytes() + pending_bytes;
        if size == 0 {
            return false;
        }
        size + batch_bytes > self.config.segment_bytes_max
            || self
                .clock
                .now()
                .saturating_duration_since(active.created_at())
                >= self.config.segment_age_max
            || active.index_is_full()
            || !active.can_address(last_offset, pending_bytes + batch_bytes)
    }

    fn maybe_roll(
        &self,
        state: &mut LogState,
        last_offset: Offset,
        batch_bytes: u64,
    ) -> Result<bool> {
        if self.should_roll(state.active(), 0, last_offset, batch_bytes) {
            self.roll_segment(state)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Starts a new active segment at the log end. The old one's index is
    /// trimmed and its data file queued for the next fsync, which must come
    /// before any fsync of the new segment may count (see `sync_once`).
    fn roll_segment(&self, state: &mut LogState) -> Result<()> {
        let base = state.log_end_offset();
        // As Kafka does at roll: a snapshot of the producer state as of the
        // new segment's base, so a restart only rescans from there. Taken
        // here, written by the next `flush` (the roll's, in the background
        // with a roll flusher): no fsync runs on the appending thread
        // (issue 27 measured 170 ms for this one, 220 ms for the index's
        // msync and 300 ms for the directory's fsync while the disk wrote
        // the previous segment back). Recovery never needs a snapshot: a
        // missing one only means scanning further back.
        let now_ms = self.clock.wall_clock_ms();
        state
            .producers
            .remove_expired(now_ms, self.config.producer_id_expiration);
        let snapshot = state.producers.encode_snapshot(base);
        state.pending_snapshots.push((base, snapshot));
        let rolled = (|| {
            let old = state.active_mut();
            let index = old.seal_for_roll()?;
            let file = old.file().clone();
            let segment = Segment::create(
                &self.disk,
                &self.dir,
                base,
                self.config.index_bytes_max,
                self.clock.now(),
            )?;
            Ok((file, index, segment))
        })();
        let (file, index, segment) = self.poison_on_error(rolled)?;
        state.unsynced.push(file);
        state.unsynced_indexes.push(index);
        state.dir_unsynced = true;
        state.segments.insert(base, segment);
        self.counters.rolls.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(dir = %self.dir.display(), %base, "rolled segment");
        Ok(())
    }

    /// Applies the flush policy after an append that ended at `log_end`.
    fn after_append(&self, log_end: Offset, rolled: bool) -> Result<()> {
        let must_sync = match self.config.flush_policy {
            FlushPolicy::Always => true,
            FlushPolicy::Never => false,
            FlushPolicy::Every { messages, interval } => {
                let state = self.state.read();
                state.unflushed_messages >= messages
                    || self
                        .clock
                        .now()
                        .saturating_duration_since(state.last_flush_at)
                        >= interval
            }
        };
        if must_sync {
            self.sync_to(log_end)?;
        }
        if rolled {
            // As Kafka does after a roll: make the finished segment durable
            // and move the recovery point past it, so a crash only has the
            // new segment to scan. Kafka schedules that flush on a
            // background thread (`UnifiedLog.roll`'s "flush-log" task); so
            // does a log with a roll flusher: fsyncing a whole segment here
            // held this appender (and a leader's pipeline behind it) for
            // seconds per GiB (issue 27). The recovery point still moves
            // only once the fsync is done: `flush` publishes it afterwards.
            if !self.hand_off(BackgroundWork::FlushRoll) {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Queues `work` on the roll flusher; `false` without one, or when it
    /// cannot take it.
    pub(super) fn hand_off(&self, work: BackgroundWork) -> bool {
        self.roll_flusher.get().is_some_and(|queue| (queue.0)(work))
    }

    /// Sends the flush each roll needs, and the file work of a follower's
    /// log start moves, to `flusher` instead of doing them on the calling
    /// thread. Set once; a second call is ignored.
    pub(crate) fn set_roll_flusher(&self, flusher: RollFlusher) {
        if self.roll_flusher.set(flusher).is_err() {
            tracing::debug!(dir = %self.dir.display(), "roll flusher already set");
        }
    }

    /// Returns once everything below `offset` is fsynced (group commit).
    pub(super) fn sync_to(&self, offset: Offset) -> Result<()> {
        self.commit
            .wait_flushed(offset, &self.dir, || self.sync_once())
    }

    /// One fsync round: snapshot what needs syncing under the lock, sync it
    /// without the lock.
    fn sync_once(&self) -> Result<SyncOutcome> {
        // Group commit: appends already writing are about to need an fsync
        // too; give them a moment (bounded, far below an fsync) to land so
        // this one covers them. Under `Always` this is what lets N
        // appenders share one fsync instead of queueing for N.
        if matches!(self.config.flush_policy, FlushPolicy::Always) {
            let until = std::time::Instant::now() + GROUP_COMMIT_GATHER_MAX;
            while self.counters.writes_in_flight.load(Ordering::Acquire) > 0
                && std::time::Instant::now() < until
            {
                std::thread::yield_now();
            }
        }
        let (files, indexes, dir, epoch_file, covered, generation) = {
            let mut state = self.state.write();
            let mut files = std::mem::take(&mut state.unsynced);
            files.push(state.active().file().clone());
            let indexes = std::mem::take(&mut state.unsynced_indexes);
            let dir = std::mem::replace(&mut state.dir_unsynced, false);
            state.unflushed_messages = 0;
            state.last_flush_at = self.clock.now();
            (
                files,
                indexes,
                dir,
                // Every entry starting below `covered` is in memory by now
                // (assigned before its batch was written).
                state.epochs.pending_write(state.log_end_offset()),
                state.log_end_offset(),
                self.commit.generation(),
            )
        };
        for file in &files {
            file.sync_data()?;
            self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        }
        for index in &indexes {
            index.sync_data()?;
        }
        if dir {
            sync_dir(&*self.disk, &self.dir)?;
        }
        // The epoch cache's file, before the flushed offset (and with it
        // any checkpoint's recovery point) may pass the batches of its new
        // epochs: recovery trusts it below the recovery point.
        if let Some(epoch_file) = epoch_file {
            epoch_file.write(|| self.check_not_poisoned())?;
        }
        Ok(SyncOutcome {
            covered,
            generation,
        })
    }

    /// Writes the log checkpoint with the flushed offset as recovery point.
    pub(super) fn store_checkpoint(&self, clean_shutdown: bool) -> Result<()> {
        let serial = self.checkpoint_lock.lock();
        self.store_checkpoint_serialized(&serial, clean_shutdown)
            .map(|_| ())
    }

    /// [`store_checkpoint`](Self::store_checkpoint) for a caller that holds
    /// the checkpoint lock (and not the state lock: see `checkpoint_lock`).
    /// Returns the log start the checkpoint names and the base of the
    /// log's first segment then.
    pub(super) fn store_checkpoint_serialized(
        &self,
        serial: &MutexGuard<'_, ()>,
        clean_shutdown: bool,
    ) -> Result<(Offset, Offset)> {
        // A halt (a simulated crash) that came while the caller waited for
        // `checkpoint_lock` ends what this process may write.
        self.check_not_poisoned()?;
        // G4: a deferred log start move already moved the segment map; the
        // snapshot covering its first segment goes before the checkpoint
        // that names the start (see `write_covering_snapshot`). The start,
        // its first segment and the high watermark are read at one
        // instant: a follower's log start move takes no `checkpoint_lock`
        // (`raise_log_start_offset_deferred`), so one may come at any time
        // from here on; its own work checkpoints it.
        let (first, log_start_offset, high_watermark, epoch_file) = {
            let state = self.state.read();
            (
                state
                    .segments
                    .keys()
                    .next()
                    .copied()
                    .unwrap_or(state.log_start_offset),
                state.log_start_offset,
                state.high_watermark,
                state.epochs.pending_cover(state.log_end_offset()),
            )
        };
        self.write_covering_snapshot(serial, first)?;
        // Not needed for the recovery point (every fsync round writes the
        // epoch cache before it publishes a flushed offset); but the file
        // then covers the log end (a flush's, a roll's, a close's), and
        // recovery checks every batch below that against it.
        if let Some(epoch_file) = epoch_file {
            let written = epoch_file.write(|| self.check_not_poisoned());
            self.poison_on_error(written)?;
        }
        let checkpoint = LogCheckpoint {
            recovery_point: self.commit.flushed_offset(),
            high_watermark,
            log_start_offset,
            clean_shutdown,
        };
        // A failed checkpoint write is a failed fsync like any other: the
        // log stops (STYLE, Errors).
        self.poison_on_error(checkpoint.store(&*self.disk, &self.dir))?;
        Ok((log_start_offset, first))
    }

    /// Writes a checkpoint whose recovery point is at most `at_most`, before
    /// an operation removes data the current recovery point vouches for.
    /// The caller holds the checkpoint lock, taken before the state lock.
    pub(super) fn store_checkpoint_below(
        &self,
        _serial: &MutexGuard<'_, ()>,
        state: &LogState,
        at_most: Offset,
        log_start_offset: Offset,
    ) -> Result<()> {
        let checkpoint = LogCheckpoint {
            recovery_point: self.commit.flushed_offset().min(at_most),
            high_watermark: state.high_watermark.min(at_most).max(log_start_offset),
            log_start_offset,
            clean_shutdown: false,
        };
        self.poison_on_error(checkpoint.store(&*self.disk, &self.dir))
    }

    /// Reads whole batches from the one containing `from`, up to `bytes_max`
    /// bytes but always at least one whole batch when `from` is below the
    /// log end. `from == log end` gives an empty result; `from` below the log
    /// start or above the log end is `Error::OffsetOutOfRange`. A read
    /// returns batches of one segment at most (a later read continues).
    ///
    /// Every batch returned passed its CRC, starts where the one before it
    /// ended (the first at the offset the index led to) and carries the
    /// leader epoch the epoch cache gives for its base offset (SPEC 2.3);
    /// a batch that fails any of these is `Error::Corrupt` naming the data
    /// file and its byte position, and no byte of it is returned.
    pub fn read(&self, from: Offset, bytes_max: usize) -> Result<ReadResult> {
        self.read_inner(from, bytes_max, None, false, None)
    }

    /// Like [`read`](Self::read), but never returns a batch containing an
    /// offset at or above `limit` (the high watermark, for committed reads).
    pub fn read_up_to(&self, from: Offset, bytes_max: usize, limit: Offset) -> Result<ReadResult> {
        self.read_inner(from, bytes_max, Some(limit), false, None)
    }

    /// A committed read for a replica: like [`read_up_to`](Self::read_up_to)
    /// with the caller's view of the high watermark as `limit`, but never
    /// past the high watermark this log holds when the read starts. The
    /// caller read its view before this call; a truncation since then may
    /// have lowered it, and the log's own high watermark moves with its
    /// truncations. (The bytes are read after the log's lock is let go: a
    /// truncation *below* the high watermark in that instant — possible
    /// only after an unclean election or a power loss — is not covered.)
    #[cfg(test)]
    pub(crate) fn read_committed(
        &self,
        from: Offset,
        bytes_max: usize,
        limit: Offset,
    ) -> Result<ReadResult> {
        self.read_inner(from, bytes_max, Some(limit), true, None)
    }

    /// Like [`read_committed`](Self::read_committed) (`limit` given) or
    /// [`read`](Self::read) (`None`), but returns the batches themselves:
    /// the ones the read checked (SPEC 2.3), so that a caller who wants
    /// them decoded does not parse and CRC-check the bytes a second time.
    pub(crate) fn read_batches(
        &self,
        from: Offset,
        bytes_max: usize,
        limit: Option<Offset>,
    ) -> Result<Vec<RecordBatch>> {
        let mut batches = Vec::new();
        self.read_inner(from, bytes_max, limit, limit.is_some(), Some(&mut batches))?;
        Ok(batches)
    }

    /// `batches`, when given, receives each batch returned, as checked.
    fn read_inner(
        &self,
        from: Offset,
        bytes_max: usize,
        limit: Option<Offset>,
        within_high_watermark: bool,
        mut batches: Option<&mut Vec<RecordBatch>>,
    ) -> Result<ReadResult> {
        // A truncation (and new appends in its place) between finding the
        // bytes and reading them can make them fail the checks below through
        // no fault of the disk: such a read is tried again, and only a
        // mismatch with no truncation in between is corruption.
        let mut attempts = 0;
        loop {
            if let Some(batches) = batches.as_deref_mut() {
                // A read tried again hands out only its own batches, also
                // when the retry's plan ends it empty at once (the log now
                // ends at `from`, or the high watermark dropped to it):
                // the failed attempt's batches may be gone from the log
                // (review of 7c34d31, helper-91).
                batches.clear();
            }
            self.check_not_poisoned()?;
            let plan = {
                let state = self.state.read();
                let (log_start_offset, log_end_offset) =
                    (state.log_start_offset, state.log_end_offset());
                let limit = match limit {
                    Some(limit) if within_high_watermark => Some(limit.min(state.high_watermark)),
                    limit => limit,
                };
                if from < log_start_offset || from > log_end_offset {
                    return Err(Error::OffsetOutOfRange {
                        requested: from,
                        log_start: log_start_offset,
                        log_end: log_end_offset,
                    });
                }
                let empty = ReadResult {
                    records: Bytes::new(),
                    log_start_offset,
                    log_end_offset,
                };
                if from == log_end_offset || limit.is_some_and(|l| from >= l) {
                    return Ok(empty);
                }
                let Some(segment) = state.segment_for(from) else {
                    return Ok(empty);
                };
                ReadPlan {
                    file: segment.file().clone(),
                    start: segment.index_floor(from),
                    segment_base: segment.base_offset(),
                    end_bytes: segment.size_bytes(),
                    epochs: state
                        .epochs
                        .entries_covering(from, segment.next_offset())
                        .to_vec(),
                    truncations: state.truncations,
                    log_start_offset,
                    log_end_offset,
                    limit: limit.unwrap_or(log_end_offset).min(log_end_offset),
                }
            };
            match self.read_planned(from, bytes_max, &plan, batches.as_deref_mut()) {
                Err(e @ Error::Corrupt { .. }) => {
                    attempts += 1;
                    if self.state.read().truncations == plan.truncations
                        || attempts >= READ_ATTEMPTS_MAX
                    {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// The part of a read done without the log's lock: find the batch, read
    /// the bytes, and check each batch handed out (SPEC 2.3). The CRC check
    /// is a pair assertion with the one on append; the offset and epoch
    /// checks catch what the CRC does not cover (a flipped base offset or
    /// leader epoch), which would otherwise serve records under wrong
    /// offsets.
    fn read_planned(
        &self,
        from: Offset,
        bytes_max: usize,
        plan: &ReadPlan,
        mut batches: Option<&mut Vec<RecordBatch>>,
    ) -> Result<ReadResult> {
        let file = &plan.file;
        let mut result = ReadResult {
            records: Bytes::new(),
            log_start_offset: plan.log_start_offset,
            log_end_offset: plan.log_end_offset,
        };
        let found = Segment::find_batch_via_index(
            file,
            plan.start,
            plan.segment_base,
            plan.end_bytes,
            from,
        )?;
        let Found::Batch { position, header } = found else {
            return Ok(result);
        };
        if header.last_offset() >= plan.limit {
            return Ok(result);
        }
        let want = (plan.end_bytes - position).min(bytes_max.max(header.size_bytes()) as u64);
        let buf = file.read_bytes(position, want as usize)?;
        let mut used = 0;
        // Invariant: each batch handed out starts where the previous ended.
        let mut next_offset = header.base_offset;
        while used < buf.len() {
            let corrupt = |reason: String| Error::Corrupt {
                path: file.path().to_path_buf(),
                position: position + used as u64,
                reason,
            };
            match parse_header(&buf[used..]) {
                Ok(h) if h.last_offset() < plan.limit => {
                    if h.base_offset != next_offset {
                        return Err(corrupt(format!(
                            "batch starts at offset {}, but the batch before it ends at {next_offset}",
                            h.base_offset
                        )));
                    }
                    if let Some(epoch) = expected_epoch(&plan.epochs, h.base_offset) {
                        if h.leader_epoch != epoch {
                            return Err(corrupt(format!(
                                "batch at offset {} has leader epoch {}, but the epoch cache says {epoch}",
                                h.base_offset, h.leader_epoch
                            )));
                        }
                    }
                    let size = h.size_bytes();
                    let batch = RecordBatch::from_parsed(h, buf.slice(used..used + size))
                        .map_err(|e| corrupt(e.to_string()))?;
                    if let Some(batches) = batches.as_deref_mut() {
                        batches.push(batch);
                    }
                    used += size;
                    next_offset = h.next_offset();
                }
                Ok(_) | Err(HeaderError::Incomplete { .. }) => break,
                Err(HeaderError::Invalid(reason)) => return Err(corrupt(reason)),
            }
        }
        result.records = buf.slice(..used);
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_read
            .fetch_add(used as u64, Ordering::Relaxed);
        Ok(result)
    }

    /// Removes every record at or after `offset` (SPEC 2.7). Like Kafka, a
    /// batch containing `offset` goes whole, so the log may end below
    /// `offset` if it is not a batch boundary. Crash safe: the checkpoint's
    /// recovery point is lowered first, then the file is cut (and synced),
    /// its index entries dropped, later segments deleted newest first, and
    /// the epoch cache fixed last; recovery after a crash at any step finds
    /// a prefix holding everything below `offset`.
    pub fn truncate_to(&self, offset: Offset) -> Result<()> {
        self.check_not_poisoned()?;
        let serial = self.checkpoint_lock.lock();
        // A deferred log start move finishes first (its checkpoint, with
        // the snapshot covering its first segment before it): the
        // truncation's checkpoint below names the moved start, and the
        // producer state it rebuilds reads that snapshot (G4). One may
        // come between the two (it takes no `checkpoint_lock`): finished
        // again, until none waits under the state lock.
        let mut state = loop {
            self.finish_log_start_moves_locked(&serial)?;
            let state = self.state.write();
            if !self.start_moves.lock().pending() {
                break state;
            }
        };
        self.check_not_poisoned()?;
        if offset >= state.log_end_offset() {
            return Ok(());
        }
        if offset < state.log_start_offset {
            // The leader's log ends below this log's start (an unclean
            // election of a shorter log after retention moved the start):
            // nothing of this log is kept. With the locks already held:
            // `checkpoint_lock` is not reentrant.
            self.restart_at_locked(&serial, &mut state, offset)?;
            drop(state);
            return self.store_checkpoint_serialized(&serial, false).map(|_| ());
        }
        let Some(segment) = state.segment_for(offset) else {
            return Ok(());
        };
        let base = segment.base_offset();
        let found = segment.find_indexed(offset)?;
        let (position, new_end) = match found {
            Found::Batch { position, header } => (position, header.base_offset.min(offset)),
            Found::End { position, .. } => (position, segment.next_offset()),
        };
        let new_end = new_end.max(base);
        let log_start = state.log_start_offset;
        if new_end < log_start {
            // The batch holding `offset` straddles the log start (an exact
            // start, from DeleteRecords or a snapshot, lies inside it) and
            // goes whole: nothing at or after the start is left, and the
            // log would end below its start (found on the simulated disk,
            // issue 28). It restarts empty at its start, which never moves
            // back: the records below it count as deleted already.
            self.restart_at_locked(&serial, &mut state, log_start)?;
            drop(state);
            return self.store_checkpoint_serialized(&serial, false).map(|_| ());
        }
        state.truncations += 1;
        self.store_checkpoint_below(&serial, &state, new_end, log_start)?;
        self.commit.truncated_to(new_end);
        let cut = (|| {
            // Snapshots of the suffix go before the suffix itself: a crash
            // in between rebuilds from an older snapshot and the batches.
            state.pending_snapshots.retain(|(o, _)| *o <= new_end);
            if producer_state::delete_snapshots(&*self.disk, &self.dir, |o| o > new_end)? {
                sync_dir(&*self.disk, &self.dir)?;
            }
            let last_epoch = epoch_of_last_batch_below(&state, new_end)?;
            if let Some(segment) = state.segments.get_mut(&base) {
                segment.truncate_to_position(position, new_end, last_epoch)?;
            }
            // The later segments leave the log in memory with the cut, and
            // the high watermark, the last batch's epoch and the epoch
            // cache come down to it: should a sync or a removal fail, the
            // poisoned log ends at the cut, with no gap between its
            // segments, its high watermark not above its end (review of
            // 9f6c5d5), and what it reports to unclean recovery naming
            // only batches it holds (review of cc5c76a: a cut at an epoch's
            // first batch kept that epoch as the last batch's, a batch of
            // it at the end claimed). Their files go below, newest first,
            // after the cut is synced; the cache's file last.
            let later = state.segments.split_off(&base.next());
            state.high_watermark = state.high_watermark.min(new_end);
            state.last_batch_epoch = last_epoch;
            let epochs_cut = state.epochs.truncate_from_end_in_memory(new_end);
            if let Some(segment) = state.segments.get_mut(&base) {
                segment.sync_data()?;
                // The zeroed index entries reach the disk before other
                // batches may take the place of those they named. Left to
                // a later sync, a power loss could bring them back under
                // data they do not describe, trusted below the recovery
                // point: since a roll no longer syncs the old segment's
                // index (issue 27), a segment flushed to its end whose roll
                // then left the next segment's name on disk came back
                // wholly trusted with them, and a truncation into it then
                // failed as `Corrupt` (the review of 8256f67). With this,
                // every index on disk holds correct entries or none.
                segment.sync_index()?;
            }
            for (_, segment) in later.into_iter().rev() {
                segment.delete()?;
            }
            sync_dir(&*self.disk, &self.dir)?;
            state.active_mut().unseal(self.config.index_bytes_max)?;
            state.epochs.truncate_from_end(new_end, epochs_cut)?;
            // SPEC 2.7: the producer state built from the removed batches
            // goes with them (Kafka's `truncateAndReload`).
            let now_ms = self.clock.wall_clock_ms();
            rebuild_producer_state(&*self.disk, &self.dir, &mut state, &self.config, now_ms)?;
            Ok(())
        })();
        self.poison_on_error(cut)?;
        // Rolled segments below the cut that still wait for their fsync
        // (a roll's flush runs in the background) keep waiting: clearing
        // them let the next flush move the recovery point past data never
        // fsynced, and after a power loss recovery refused the log as a
        // gap below the recovery point (the power-loss fault test, seeds 1,
        // 161 and 164). The segments the cut deleted go.
        let live: Vec<Arc<SegmentFile>> = state
            .segments
            .values()
            .map(|segment| Arc::clone(segment.file()))
            .collect();
        state
            .unsynced
            .retain(|file| live.iter().any(|segment| Arc::ptr_eq(segment, file)));
        state.high_watermark = state.high_watermark.min(new_end);
        debug_assert!(state.check_invariants());
        debug_assert!(self.start_moves.lock().check_invariants(&state));
        tracing::info!(dir = %self.dir.display(), %offset, %new_end, "truncated log");
        Ok(())
    }

    /// Discards the whole log and restarts it, empty, at `offset` (a
    /// follower whose log ends below the leader's log start, or whose
    /// leader's log ends below this log's start). Crash safe: a crash at
    /// any step reopens as a prefix of the old log from its start, or as an
    /// empty log, at `offset` or at the old start (a follower whose log then
    /// ends above its leader's is told `OffsetOutOfRange` and truncates to
    /// the leader's end).
    pub fn truncate_fully_and_start_at(&self, offset: Offset) -> Result<()> {
        self.check_not_poisoned()?;
        let serial = self.checkpoint_lock.lock();
        // A deferred log start move finishes first, as in `truncate_to`:
        // the restart's first checkpoint names the moved start, and the
        // move's covering producer snapshot must be on disk before any
        // checkpoint does (G4: a crash before the restart deletes the
        // snapshots would otherwise reopen the log, its segments below the
        // moved start gone, on an older snapshot that misses their
        // producers; review of 384bcd1, simulator seed 60512796's class).
        // Again until none waits under the state lock, as in
        // `truncate_to`.
        let mut state = loop {
            self.finish_log_start_moves_locked(&serial)?;
            let state = self.state.write();
            if !self.start_moves.lock().pending() {
                break state;
            }
        };
        self.check_not_poisoned()?;
        self.restart_at_locked(&serial, &mut state, offset)?;
        drop(state);
        self.store_checkpoint_serialized(&serial, false).map(|_| ())
    }

    /// [`truncate_fully_and_start_at`](Self::truncate_fully_and_start_at)
    /// up to its last checkpoint, which the caller writes once it has
    /// released the state lock. The caller holds both locks.
    fn restart_at_locked(
        &self,
        serial: &MutexGuard<'_, ()>,
        state: &mut LogState,
        offset: Offset,
    ) -> Result<()> {
        // A crash from here on rescans whatever is left: the recovery
        // point goes to the lower of the old start and the new offset, the
        // checkpointed start stays the old one. The old segments, deleted
        // newest first, leave a prefix of the old log from its start, with
        // its producer snapshots (deleted after the segments); once they
        // are gone, the log reopens empty: at the old start, with the
        // newest snapshot at or below it that the deletions left (a
        // producer state that may miss batches between that snapshot and
        // an exact start, but never one the prefix holds), until the new
        // segment exists; then at `offset`, which is not below the
        // recovery point (a segment above it would refuse to open).
        let first = state.log_start_offset;
        let low = first.min(offset);
        state.truncations += 1;
        self.store_checkpoint_below(serial, state, low, first)?;
        self.commit.truncated_to(low);
        let restarted = (|| {
            // Segments a deferred log start move took out go too, before a
            // new segment may cover their offsets.
            let doomed = std::mem::take(&mut self.start_moves.lock().doomed);
            for segment in doomed {
                segment.delete()?;
            }
            state.pending_snapshots.clear();
            state.producers = ProducerStateManager::empty();
            // Newest first, the order the crash safety above needs. The
            // segments stay in the map until the new one exists: a step
            // that fails poisons the log, which must still have an active
            // segment to answer what its end is. Removed from the map as
            // their files went, an `EIO` on a removal or on the new
            // segment's creation left none, and the follower's next look
            // at its log end panicked (simulator seed 30 with `EIO` on any
            // operation).
            for segment in state.segments.values().rev() {
                segment.delete_files()?;
            }
            // The producer snapshots go last: a failure among the segments
            // leaves a prefix of the old log with the snapshots at or below
            // its end, which its reopening reads (deleting those above
            // it). Deleted first, they left the prefix knowing no producer
            // whose batches the log start had already deleted (review of
            // 384bcd1).
            producer_state::delete_snapshots(&*self.disk, &self.dir, |_| true)?;
            let segment = Segment::create(
                &self.disk,
                &self.dir,
                offset,
                self.config.index_bytes_max,
                self.clock.now(),
            )?;
            // The log in memory becomes the empty one at `offset` in one
            // step: should what follows fail, the poisoned log still has
            // its start at or below its high watermark and that at or
            // below its end (review of 9f6c5d5: a restart below the old
            // start or high watermark whose directory sync failed kept
            // them, and the next report of its end failed its assertion).
            state.segments.clear();
            state.segments.insert(offset, segment);
            state.unsynced.clear();
            state.log_start_offset = offset;
            state.high_watermark = offset;
            state.last_batch_epoch = None;
            // The cache's file goes last, after the directory sync; in
            // memory it empties with the swap (review of cc5c76a: a
            // failed sync left the empty log naming the old log's epochs
            // to unclean recovery).
            let epochs_cut = state.epochs.truncate_from_end_in_memory(Offset::ZERO);
            sync_dir(&*self.disk, &self.dir)?;
            state.epochs.truncate_from_end(Offset::ZERO, epochs_cut)?;
            Ok(())
        })();
        self.poison_on_error(restarted)?;
        self.commit.restarted_at(offset);
        debug_assert!(state.check_invariants());
        debug_assert!(self.start_moves.lock().check_invariants(state));
        tracing::info!(dir = %self.dir.display(), %offset, "log emptied and restarted");
        Ok(())
    }

    /// The first offset the log holds.
    pub fn log_start_offset(&self) -> Offset {
        self.state.read().log_start_offset
    }

    /// The offset the next record will get.
    pub fn log_end_offset(&self) -> Offset {
        self.state.read().log_end_offset()
    }

    /// Epoch of the last batch in the log, `None` when it holds none.
    pub fn last_batch_epoch(&self) -> Option<LeaderEpoch> {
        self.state.read().last_batch_epoch
    }

    /// The newest leader epoch whose leader's log this log is known to be
    /// a prefix of (its "line"): the epoch this replica last led, or the
    /// last epoch in which its fetch passed the leader's divergence check
    /// (`note_line_epoch`, at elections and fetch answers), and never below the
    /// epochs of its records. A log's last batch alone does not say it: a
    /// leader may commit older epochs' records and append none of its
    /// own, and its followers' logs then end in an older epoch than a
    /// deposed leader's uncommitted appends of an epoch in between. Unclean
    /// recovery compares replicas by it (SPEC 3.5,
    /// [`LogState::longest_line`](crate::LogState::longest_line);
    /// simulator seeds 60208586, 60219295 and 60238744). `None`: the log holds no record and never
    /// followed or led.
    ///
    /// With an unusable stored file, this is the line the records show;
    /// the report to unclean recovery (`end_report`) says "not known" instead.
    pub fn line_epoch(&self) -> Option<LeaderEpoch> {
        let stored = self.line_epoch.lock().stored;
        line_with_records(stored, &self.state.read())
    }

    /// Where this log ends, with its line epoch and newest `epochs_max`
    /// epoch cache entries, read at one instant: what its replica reports
    /// to unclean recovery (SPEC 3.5). `Err` names the unusable line epoch
    /// file: the line, and so the report, is then not known.
    pub(crate) fn end_report(&self, epochs_max: usize) -> std::result::Result<EndReport, String> {
        let line = self.line_epoch.lock();
        if let Some(unusable) = &line.unusable {
            return Err(unusable.clone());
        }
        let state = self.state.read();
        // The cache may still hold entries past the log end, which a
        // recovery cut or a truncation left for a later trim (simulator
        // seed 510: epoch 5 at 538 in a log ending at 524). They describe
        // nothing the log holds: reported, they would stretch the last
        // held epoch's range past the end (`LogEnd::extends`), and a
        // ZooKeeper document holding them cannot be read back.
        let log_end = state.log_end_offset();
        let entries = state.epochs.entries();
        let held = entries.partition_point(|entry| entry.start_offset <= log_end);
        let epochs = entries[held.saturating_sub(epochs_max)..held]
            .iter()
            .map(|entry| (entry.epoch, entry.start_offset))
            .collect();
        let report = EndReport {
            last_batch_epoch: state.last_batch_epoch,
            log_start_offset: state.log_start_offset,
            log_end_offset: state.log_end_offset(),
            high_watermark: state.high_watermark,
            line_epoch: line_with_records(line.stored, &state),
            epochs,
            start_line: start_line_of(line.start, &state),
        };
        // What unclean recovery and the ZooKeeper document rely on
        // (`LogEnd::extends`, `decode_log`).
        debug_assert!(
            report.log_start_offset <= report.high_watermark
                && report.high_watermark <= report.log_end_offset
                && report.last_batch_epoch <= report.line_epoch
                && report
                    .epochs
                    .windows(2)
                    .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1)
                && report
                    .epochs
                    .iter()
                    .all(|(epoch, start)| Some(*epoch) <= report.line_epoch
                        && *start <= report.log_end_offset),
            "{report:?}"
        );
        Ok(report)
    }

    /// Notes that this log is now a prefix of the log of `epoch`'s leader
    /// (this replica leads `epoch`, or its fetch in `epoch` passed the
    /// divergence check), storing it durably if it is newer than the one
    /// stored: once per epoch at most.
    ///
    /// A follower stores it on the first answer of an epoch that it can
    /// apply (no error, no divergence), and its fetches carry what is
    /// stored ([`FetchLog::line_epoch`](crate::transport::FetchLog)). The
    /// leader counts a fetch towards its high watermark, and towards the
    /// ISR, only once it carries the leader's epoch
    /// (`LeaderState::on_fetch_of_line`). Before that, a follower that
    /// crashed before such an answer (a lost answer, one carrying a read
    /// error) could hold records committed in the epoch while its stored
    /// line was older, and recovery, comparing it as a log of its older
    /// line, lost them when the leader's copy was lost too and another
    /// replica had parted on a line in between (simulator seed 70100050).
    /// Counting a follower's fetches only from its second of the epoch
    /// would not have closed this window (a fetch sent again after a lost
    /// answer is a second one).
    pub(crate) fn note_line_epoch(&self, epoch: LeaderEpoch) -> Result<()> {
        let mut line_epoch = self.line_epoch.lock();
        if line_epoch.unusable.is_none() && line_epoch.stored.is_some_and(|stored| stored >= epoch)
        {
            return Ok(());
        }
        self.store_epoch_entry(LINE_EPOCH_FILE, LINE_EPOCH_KIND, epoch, 0)?;
        // An epoch this replica leads or follows in is newer than every
        // line it was on before: it replaces an unusable file's too.
        *line_epoch = LineEpoch {
            stored: Some(epoch),
            unusable: None,
            start: line_epoch.start,
        };
        Ok(())
    }

    /// Notes that this log's records below its start, as it is now, are
    /// those of the log of `epoch`'s leader at some point of `epoch`: the
    /// leader whose snapshot it installed, or at whose start (or end) it
    /// restarted, named `epoch` for them ([`Log::epoch_below`]), or,
    /// naming none, led in `epoch`; or the first batch it fetched at its start is of
    /// `epoch` (a leader that held that batch held the same records below
    /// it). Stored durably, with the start it holds for: a later move of
    /// the start voids it.
    ///
    /// Unclean recovery needs it for a log that holds no batch (SPEC 3.5,
    /// [`LogEnd::extends`](crate::LogEnd::extends)): a longer log on
    /// `epoch`'s line, or holding a batch of `epoch` at or past the offset
    /// below the start, holds the same records below it (a leader never
    /// replaces its own records in its epoch), so taking it loses nothing this
    /// log holds (simulator seed 60267254:
    /// node 0 installed node 1's snapshot at 1467 in epoch 12, led epoch
    /// 13, and lost its one batch to a flipped bit; node 1, which had led
    /// epoch 12 and held the acknowledged record at 1467, was passed over
    /// for it).
    pub(crate) fn note_start_line(&self, epoch: LeaderEpoch) -> Result<()> {
        let mut line_epoch = self.line_epoch.lock();
        let start = self.state.read().log_start_offset;
        if line_epoch.start == Some((epoch, start)) {
            return Ok(());
        }
        self.store_epoch_entry(START_LINE_FILE, START_LINE_KIND, epoch, start.0)?;
        line_epoch.start = Some((epoch, start));
        Ok(())
    }

    /// An epoch whose leader's log held this log's records below `offset`
    /// (a snapshot's end, SPEC 3.9), for a follower that restarts there
    /// to note as its start line: its cache's entry covering `offset - 1`,
    /// the epoch of that record. At the log start, where that record is
    /// gone, its start line, or else the epoch of the batch at the start
    /// (that leader wrote it on top of the same records). `None` when the
    /// log does not know one: `offset` is 0, below the start or past the
    /// end, or no entry covers it.
    pub(crate) fn epoch_below(&self, offset: Offset) -> Option<LeaderEpoch> {
        let line_epoch = self.line_epoch.lock();
        let state = self.state.read();
        let end = state.log_end_offset();
        if offset == Offset::ZERO || offset < state.log_start_offset || offset > end {
            return None;
        }
        if offset == state.log_start_offset {
            return start_line_of(line_epoch.start, &state).or_else(|| {
                (offset < end)
                    .then(|| epoch_covering(&state, offset))
                    .flatten()
            });
        }
        epoch_covering(&state, Offset(offset.0 - 1))
    }

    /// The start line this log reports now ([`EndReport::start_line`]).
    pub(crate) fn start_line(&self) -> Option<LeaderEpoch> {
        let line_epoch = self.line_epoch.lock();
        start_line_of(line_epoch.start, &self.state.read())
    }

    /// Writes `(epoch, value)` as the one entry of the file `name` (read
    /// back by `load_epoch_entry`), durably; a failed write poisons the
    /// log. The caller holds `line_epoch`.
    fn store_epoch_entry(
        &self,
        name: &str,
        kind: &str,
        epoch: LeaderEpoch,
        value: u64,
    ) -> Result<()> {
        self.check_not_poisoned()?;
        let stored = checkpoint::store_pairs(
            &*self.disk,
            &self.dir.join(name),
            kind,
            &[(u64::from(epoch.0), value)],
        );
        self.poison_on_error(stored)
    }

    /// The newest epoch in the epoch cache.
    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.state.read().epochs.latest_epoch()
    }

    /// The oldest epoch in the epoch cache: once records were deleted, the
    /// oldest of which this log still holds records (its cache starts at
    /// the log start).
    pub fn earliest_epoch(&self) -> Option<LeaderEpoch> {
        self.state
            .read()
            .epochs
            .entries()
            .first()
            .map(|entry| entry.epoch)
    }

    /// SPEC 3.6: where `epoch` ends on this replica, `None` when `epoch` is
    /// newer than every epoch known (or none is).
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<EpochEndOffset> {
        let state = self.state.read();
        state
            .epochs
            .end_offset_for_epoch(epoch, state.log_end_offset())
    }

    /// Records that `epoch` starts at `start_offset` (a new leader records
    /// `(new epoch, own log end)` before writing). Ignored when `epoch` is
    /// not newer than the latest known. A start below the log end is
    /// `Error::NonContiguousAppend`: it would re-label records already
    /// written, which every read checks against the cache.
    pub fn assign_epoch(&self, epoch: LeaderEpoch, start_offset: Offset) -> Result<()> {
        self.check_not_poisoned()?;
        let mut state = self.state.write();
        self.check_not_poisoned()?;
        let log_end = state.log_end_offset();
        let newer = match state.epochs.latest_epoch() {
            Some(latest) => epoch > latest,
            None => true,
        };
        if newer && start_offset < log_end {
            return Err(Error::NonContiguousAppend {
                expected: log_end,
                got: start_offset,
            });
        }
        // Written durably before this returns, as before, but without the
        // state lock (no fsync runs under it): recovery trims an entry at
        // the log end off the cache, yet a log a crash cut back to its
        // start keeps its epoch as the epoch at its start
        // (`Recovered::start_epoch`).
        state.epochs.assign_in_memory(epoch, start_offset);
        let epoch_file = state.epochs.pending_write(log_end);
        drop(state);
        match epoch_file {
            Some(epoch_file) => {
                let written = epoch_file.write(|| self.check_not_poisoned());
                self.poison_on_error(written)
            }
            None => Ok(()),
        }
    }

    /// Test harness only: simulates this process crashing. Poisons the log
    /// (every later call fails), waits for writes in flight, refuses every
    /// later write, cut or fsync of its segment files, and returns each data
    /// file with the length its last successful fsync covered: what a power
    /// loss would leave of it (0 for a file never synced since this process
    /// created it). Other files are written atomically and durably already.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn halt_for_crash(&self) -> Vec<(PathBuf, u64)> {
        self.commit
            .poison("the process was halted (simulated crash)".to_string());
        // A log start move writes its checkpoint and deletes files holding
        // only `checkpoint_lock`: wait for it, so that no file of this
        // "dead" process changes after the halt (a restart may reopen the
        // directory at once).
        let _serial = self.checkpoint_lock.lock();
        let state = self.state.write();
        // An fsync round writes the epoch cache's file without the state
        // lock: wait for it too (it checks the poison flag first).
        state.epochs.wait_for_writes();
        // The files of a deferred log start move not yet deleted are on
        // disk too, with what their last sync left.
        let moves = self.start_moves.lock();
        state
            .segments
            .values()
            .chain(moves.doomed.iter())
            .map(|segment| (segment.log_path().to_path_buf(), segment.file().halt()))
            .collect()
    }

    /// Test harness only: after [`halt_for_crash`](Self::halt_for_crash),
    /// simulates a power loss for the offset indexes (the data files are
    /// the caller's, cut to the lengths the halt returned): each index file
    /// goes back to what its last sync left on disk, its writes since then
    /// lost. (The kernel may have written some of them back; losing them
    /// all is one outcome a power loss can have.)
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn lose_unsynced_index_writes(&self) -> std::io::Result<()> {
        let state = self.state.read();
        let moves = self.start_moves.lock();
        for segment in state.segments.values().chain(moves.doomed.iter()) {
            let image = segment.index_durable_image();
            let file = self
                .disk
                .open(segment.index_path(), super::disk::OpenMode::ReadWrite)?;
            file.set_len(0)?;
            file.write_all_at(0, &image.prefix)?;
            file.set_len(image.len)?;
        }
        Ok(())
    }

    /// The epoch cache: `(epoch, start offset)` pairs, oldest first.
    pub fn epoch_entries(&self) -> Vec<(LeaderEpoch, Offset)> {
        self.state
            .read()
            .epochs
            .entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    /// Fsyncs everything appended so far and checkpoints the recovery point
    /// and high watermark.
    pub fn flush(&self) -> Result<()> {
        self.check_not_poisoned()?;
        self.write_pending_snapshots()?;
        let log_end = self.log_end_offset();
        self.sync_to(log_end)?;
        self.store_checkpoint(false)
    }

    /// Writes the producer state snapshots rolls took (each atomically).
    /// Holds `checkpoint_lock` throughout, as a truncation does: one cannot
    /// run between taking a snapshot off the list and writing it.
    ///
    /// The poison flag is checked again once the lock is held: a halt (a
    /// simulated crash) or a failed fsync may have poisoned the log while
    /// this waited, and a poisoned log writes nothing more (a halt takes
    /// the lock after poisoning, so nothing is written after it returns).
    fn write_pending_snapshots(&self) -> Result<()> {
        let _serial = self.checkpoint_lock.lock();
        self.check_not_poisoned()?;
        let pending = std::mem::take(&mut self.state.write().pending_snapshots);
        for (offset, bytes) in pending {
            let written = write_atomically(
                &*self.disk,
                &producer_state::snapshot_path(&self.dir, offset),
                &bytes,
            );
            self.poison_on_error(written)?;
        }
        Ok(())
    }

    /// Every offset below this is fsynced.
    pub fn flushed_offset(&self) -> Offset {
        self.commit.flushed_offset()
    }

    /// The recovery point: the offset a crash now would start validating
    /// from (equal to [`flushed_offset`](Self::flushed_offset); it reaches
    /// the checkpoint file on flush, roll and close).
    pub fn recovery_point(&self) -> Offset {
        self.commit.flushed_offset()
    }

    /// Like [`set_high_watermark`](Self::set_high_watermark), but never
    /// lowers it: concurrent publishers (a leader's fetch threads) may
    /// arrive out of order.
    pub(crate) fn raise_high_watermark(&self, high_watermark: Offset) {
        let mut state = self.state.write();
        let raised = high_watermark
            .min(state.log_end_offset())
            .max(state.log_start_offset);
        if raised > state.high_watermark {
            state.high_watermark = raised;
        }
    }

    /// Records the high watermark, to be checkpointed with the next flush
    /// (and the limit of committed reads through a replica); the
    /// replication layer owns its meaning. Clamped to the log's bounds; it
    /// may lower it.
    ///
    /// Lowering it takes `checkpoint_lock` first: a log start move checks
    /// the high watermark and then writes its checkpoint without the state
    /// lock, holding `checkpoint_lock` (`raise_log_start_offset`), and the
    /// high watermark must not fall below that log start in between (G3).
    pub fn set_high_watermark(&self, high_watermark: Offset) {
        {
            let mut state = self.state.write();
            let clamped = high_watermark
                .min(state.log_end_offset())
                .max(state.log_start_offset);
            if clamped >= state.high_watermark {
                state.high_watermark = clamped;
                return;
            }
        }
        let _serial = self.checkpoint_lock.lock();
        let mut state = self.state.write();
        state.high_watermark = high_watermark
            .min(state.log_end_offset())
            .max(state.log_start_offset);
    }

    /// The last high watermark recorded (or recovered from the checkpoint).
    pub fn high_watermark(&self) -> Offset {
        self.state.read().high_watermark
    }

    /// The producer epoch and last sequence this log holds for an
    /// idempotent producer, `None` when it knows none (SPEC 4).
    pub fn producer_last_sequence(
        &self,
        producer: ProducerId,
    ) -> Option<(ProducerEpoch, Sequence)> {
        self.state.read().producers.last_sequence(producer)
    }

    /// Number of idempotent producers whose state this log keeps.
    pub fn producer_count(&self) -> usize {
        self.state.read().producers.len()
    }

    /// Forgets producers idle for `LogConfig::producer_id_expiration` by the
    /// log's clock (also done at every segment roll and clean close).
    /// Returns how many were forgotten.
    pub fn remove_expired_producers(&self) -> usize {
        let now_ms = self.clock.wall_clock_ms();
        self.state
            .write()
            .producers
            .remove_expired(now_ms, self.config.producer_id_expiration)
    }

    /// Expires idle producers, then writes the producer snapshot as of
    /// `offset` (the log end).
    fn snapshot_producers(&self, state: &mut LogState, offset: Offset) -> Result<()> {
        let now_ms = self.clock.wall_clock_ms();
        state
            .producers
            .remove_expired(now_ms, self.config.producer_id_expiration);
        state
            .producers
            .write_snapshot(&*self.disk, &self.dir, offset)
    }

    /// Whether an earlier write or fsync failed: the log then refuses all
    /// work (`Error::Poisoned`) until it is reopened.
    pub fn is_poisoned(&self) -> bool {
        self.commit.is_poisoned()
    }

    /// `Error::Poisoned`, naming the log and the failure, if an earlier
    /// write or fsync failed.
    pub(crate) fn check_not_poisoned(&self) -> Result<()> {
        self.commit.check_not_poisoned(&self.dir)
    }

    /// Poisons the log: every later call fails with `Error::Poisoned`
    /// until it is reopened. For a caller whose write failed in a way that
    /// left the log's users out of step with it (the leader's append
    /// pipeline, which had already handed out the offsets of the batch).
    pub(crate) fn poison(&self, reason: &str) {
        self.commit.poison(reason.to_string());
    }

    /// Ends this log object's work for good, before its directory is
    /// deleted: every later call fails with `Error::Poisoned`, and a write
    /// already holding one of the log's locks (an append, a checkpoint, a
    /// log start move, a line note) has ended when this returns. Without
    /// it, work still holding the object (a rolled segment's flush queued
    /// in the background) writes its checkpoint, by path, into the
    /// directory a later replica of the same log re-created, and that
    /// replica's next recovery trusts a recovery point it never reached
    /// (simulator seed 60279870: a torn batch below it, refused as
    /// corrupt).
    pub(crate) fn retire(&self, reason: &str) {
        self.commit
            .retire(format!("retired (no I/O failed): {reason}"));
        drop(self.line_epoch.lock());
        drop(self.checkpoint_lock.lock());
        self.state.write().epochs.wait_for_writes();
        drop(self.start_moves.lock());
    }

    /// Test harness only: poisons the log as a failed fsync would.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn poison_for_test(&self, reason: &str) {
        self.commit.poison(reason.to_string());
    }

    /// Counters for monitoring.
    pub fn stats(&self) -> LogStats {
        let c = &self.counters;
        LogStats {
            appends: c.appends.load(Ordering::Relaxed),
            batches_appended: c.batches_appended.load(Ordering::Relaxed),
            bytes_appended: c.bytes_appended.load(Ordering::Relaxed),
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
            rolls: c.rolls.load(Ordering::Relaxed),
            segments: self.state.read().segments.len() as u64,
            reads: c.reads.load(Ordering::Relaxed),
            bytes_read: c.bytes_read.load(Ordering::Relaxed),
        }
    }

    /// Closes the log cleanly: fsyncs everything, trims the active index and
    /// writes the checkpoint with `clean_shutdown = true`, so the next open
    /// scans nothing. Dropping a `Log` without closing it is a crash, as far
    /// as the next open is concerned.
    pub fn close(self) -> Result<()> {
        self.close_in_place()
    }

    /// [`close`](Self::close) for a log shared behind an `Arc`: the caller
    /// guarantees nothing appends to it afterwards (a node closes its logs
    /// only after stopping every thread that could).
    pub(crate) fn close_in_place(&self) -> Result<()> {
        self.finish_log_start_moves()?;
        self.flush()?;
        {
            let mut state = self.state.write();
            // A retire may have come since the flush (it waits for this
            // lock, so none comes from here on).
            self.check_not_poisoned()?;
            let log_end = state.log_end_offset();
            let snapshot = self.snapshot_producers(&mut state, log_end);
            self.poison_on_error(snapshot)?;
            let sealed = state.active_mut().seal();
            self.poison_on_error(sealed)?;
        }
        self.store_checkpoint(true)
    }
}

/// What rebuilding the producer state used and found.
#[derive(Debug, Default)]
pub(super) struct ProducerRebuild {
    /// The snapshot loaded, if any.
    pub(super) snapshot: Option<Offset>,
    /// Batch headers read after it.
    pub(super) batches_scanned: u64,
    /// Snapshots that could not be used, with the reason.
    pub(super) problems: Vec<String>,
}

/// Rebuilds `state.producers` for the log as it is now: the newest readable
/// snapshot at or below the log end, then every batch after it (Kafka's
/// `rebuildProducerState`). Snapshots above the log end describe batches the
/// log no longer holds and are deleted; so is a damaged snapshot, which is
/// reported, never a reason to refuse to open: the batches rebuild it.
pub(super) fn rebuild_producer_state(
    disk: &dyn Disk,
    dir: &Path,
    state: &mut LogState,
    config: &LogConfig,
    now_ms: i64,
) -> Result<ProducerRebuild> {
    let log_end = state.log_end_offset();
    let mut rebuild = ProducerRebuild::default();
    let mut deleted = producer_state::delete_snapshots(disk, dir, |o| o > log_end)?;
    let mut producers = ProducerStateManager::empty();
    for offset in producer_state::list_snapshots(disk, dir)?.into_iter().rev() {
        match ProducerStateManager::read_snapshot(disk, dir, offset) {
            Ok(loaded) => {
                producers = loaded;
                rebuild.snapshot = Some(offset);
                break;
            }
            Err(e @ Error::InvalidCheckpoint { .. }) => {
                tracing::warn!(error = %e, "unusable producer state snapshot: rebuilding from the batches");
                rebuild.problems.push(e.to_string());
                deleted |= producer_state::delete_snapshots(disk, dir, |o| o == offset)?;
            }
            Err(e) => return Err(e),
        }
    }
    if deleted {
        sync_dir(disk, dir)?;
    }
    // From the snapshot, or from the first batch the log still holds, even
    // below the log start: an exact log start (DeleteRecords, a snapshot's
    // offset) leaves batches of the first segment below it, and the
    // producers' sequences they carry are no less true for being deleted.
    // Starting at the log start instead forgot them, and a new leader
    // answered a producer whose last batches lay there with
    // `OutOfOrderSequence` (the fault test with deletion, seed 7: "expected
    // 27, got 29"). Kafka starts at the log start and evicts producers
    // whose batches are all below it; keeping them is what lets the
    // producer go on.
    let first_held = state
        .segments
        .keys()
        .next()
        .copied()
        .unwrap_or(state.log_start_offset);
    let from = rebuild.snapshot.unwrap_or(first_held).max(first_held);
    // The producer state as of each segment base the walk passes: the
    // snapshot the roll that made the segment took, lost when the process
    // stopped before the roll's flush wrote it. It goes to the pending
    // snapshots, as a roll's does, so the next flush, or a log start move
    // that leaves the segment first (`write_covering_snapshot`, before its
    // checkpoint), writes it. Without it, a move past the batches after
    // the newest snapshot deleted them and kept that older snapshot, and
    // the next rebuild read it and the batches from the first segment on,
    // forgetting those in between: node 1 (simulator, seed 60512796)
    // reopened with a snapshot at 911 and its first segment at 975, and
    // as leader refused the retry of a batch it had written at 965
    // with "expected 136, got 139"; the producer released that sequence,
    // and its next record, sent with it, was answered as a duplicate of
    // the record at 965 by the next leader (G1).
    let mut covering = Vec::new();
    for segment in state.segments.values() {
        if segment.next_offset() <= from {
            continue;
        }
        if segment.base_offset() > from {
            let base = segment.base_offset();
            covering.push((base, producers.encode_snapshot(base)));
        }
        let (position, first_offset) = if segment.base_offset() >= from {
            (0, segment.base_offset())
        } else {
            match segment.find_indexed(from)? {
                Found::Batch { position, header } => (position, header.base_offset),
                Found::End { .. } => continue,
            }
        };
        // A base offset is not covered by the CRC, so each batch must
        // start where the one before it ended (as the epoch cache's rebuild
        // checks). A flipped base offset taken as data gave a replica a
        // producer state that stopped at the flipped batch, and as leader
        // it refused the producer's next batches (simulator, seed 740121:
        // "expected 11, got 112").
        //
        // And each batch that names a producer is read whole and its CRC
        // checked: this walk may cover data below the recovery point, which
        // recovery does not scan. Reading headers only took a flipped base
        // sequence (245 read as 65781) into the producer state; as leader
        // the replica refused the producer's batch that it held with
        // `OutOfOrderSequence`, the producer released that batch's sequence
        // as the refusal proved, and its next record, sent with the same
        // sequence, was answered as a duplicate at the first batch's
        // offset: an acknowledgement of a record no log held (simulator,
        // seed 60105060, G1). A batch is checked unless its producer id
        // is exactly `ProducerId::NONE` (-1, all bits set): testing
        // `is_some` (id >= 0) instead let a flip of a real id's bit 63 turn
        // the batch into one the state skips, unchecked (review of
        // d95fdb1). Only a plain batch is not read: it feeds nothing here,
        // so damage in it stays what it is elsewhere below the recovery
        // point, `Corrupt` when read. What the walk reads is the data after
        // the newest producer snapshot (written at every roll's flush and
        // at a clean close): usually the active segment, the whole log if
        // no snapshot survived. (Kafka's rebuild reads the batches without
        // checking their CRCs.)
        let corrupt = |position: u64, reason: String| Error::Corrupt {
            path: segment.log_path().to_path_buf(),
            position,
            reason: format!("{reason} (rebuilding the producer state)"),
        };
        let mut problem = None;
        let mut at = position;
        let mut next_offset = first_offset;
        segment.for_each_header(position, |header| {
            if problem.is_some() {
                return;
            }
            if header.base_offset != next_offset {
                problem = Some(corrupt(
                    at,
                    format!(
                        "batch starts at offset {}, expected {next_offset}",
                        header.base_offset
                    ),
                ));
                return;
            }
            if header.producer_id != ProducerId::NONE {
                let crc = segment
                    .file()
                    .read_bytes(at, header.size_bytes())
                    .map(|bytes| compute_crc(&bytes));
                match crc {
                    Ok(computed) if computed == header.crc => {}
                    Ok(computed) => {
                        problem = Some(corrupt(
                            at,
                            format!(
                                "invalid record batch: CRC mismatch: stored {:#010x}, computed {computed:#010x}",
                                header.crc
                            ),
                        ));
                        return;
                    }
                    Err(e) => {
                        problem = Some(e);
                        return;
                    }
                }
            }
            at += header.size_bytes() as u64;
            next_offset = header.next_offset();
            producers.record(header);
            rebuild.batches_scanned += 1;
        })?;
        if let Some(e) = problem {
            return Err(e);
        }
    }
    for (base, bytes) in covering {
        if !state
            .pending_snapshots
            .iter()
            .any(|(offset, _)| *offset == base)
        {
            state.pending_snapshots.push((base, bytes));
        }
    }
    producers.remove_expired(now_ms, config.producer_id_expiration);
    state.producers = producers;
    Ok(rebuild)
}

/// The epoch of the batch holding offset `end - 1`, if the log has one.
pub(super) fn epoch_of_last_batch_below(
    state: &LogState,
    end: Offset,
) -> Result<Option<LeaderEpoch>> {
    let Some(last) = end.0.checked_sub(1).map(Offset) else {
        return Ok(None);
    };
    if last < state.log_start_offset {
        return Ok(None);
    }
    let Some((_, segment)) = state.segments.range(..=last).next_back() else {
        return Ok(None);
    };
    let found = segment.find_indexed(last)?;
    Ok(match found {
        Found::Batch { header, .. } => Some(header.leader_epoch),
        Found::End { .. } => None,
    })
}

// `Log` is shared between threads by reference.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Log>();
};

#[cfg(test)]
mod line_epoch_tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::record::RecordBatchBuilder;

    fn open(dir: &Path) -> Log {
        Log::open(dir, LogConfig::default(), Arc::new(SystemClock)).unwrap()
    }

    /// The line epoch survives a reopen, never goes back, and is never
    /// below the epochs the log holds; an unusable file leaves the report
    /// not known, naming the file, until a newer line is stored.
    #[test]
    fn the_line_epoch_is_kept_across_reopens_and_never_goes_back() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path());
        assert_eq!(log.line_epoch(), None);
        log.assign_epoch(LeaderEpoch(2), Offset::ZERO).unwrap();
        let mut batch = RecordBatchBuilder::new(0);
        batch.push(b"a");
        log.append_as_leader(&batch.build().unwrap(), LeaderEpoch(2))
            .unwrap();
        assert_eq!(log.line_epoch(), Some(LeaderEpoch(2)));
        // A leader of epoch 6 that appends nothing: its last batch stays
        // in epoch 2, its line is epoch 6's.
        log.note_line_epoch(LeaderEpoch(6)).unwrap();
        log.note_line_epoch(LeaderEpoch(4)).unwrap();
        assert_eq!(log.last_batch_epoch(), Some(LeaderEpoch(2)));
        assert_eq!(log.line_epoch(), Some(LeaderEpoch(6)));
        drop(log);
        let log = open(dir.path());
        assert_eq!(log.line_epoch(), Some(LeaderEpoch(6)));
        let report = log.end_report(64).unwrap();
        assert_eq!(
            (
                report.last_batch_epoch,
                report.log_end_offset,
                report.line_epoch
            ),
            (Some(LeaderEpoch(2)), Offset(1), Some(LeaderEpoch(6)))
        );
        assert_eq!(report.epochs, vec![(LeaderEpoch(2), Offset::ZERO)]);
        assert!(log.end_report(0).unwrap().epochs.is_empty());
        drop(log);
        std::fs::write(dir.path().join(LINE_EPOCH_FILE), b"garbage").unwrap();
        let log = open(dir.path());
        let error = log.end_report(64).unwrap_err();
        assert!(error.contains(LINE_EPOCH_FILE), "{error}");
        log.note_line_epoch(LeaderEpoch(3)).unwrap();
        assert_eq!(log.end_report(64).unwrap().line_epoch, Some(LeaderEpoch(3)));
    }

    /// A read that fails while a log opens fails the open, whichever read
    /// it is, and leaves nothing behind: the next open finds the line
    /// epoch and start line that were stored. Before, a failed read of the
    /// line epoch file was taken for a damaged file, and the line stayed
    /// not known for the life of the process (unclean recovery would have
    /// waited for this replica as for one that cannot open).
    #[test]
    fn a_failed_read_fails_the_open_and_the_next_open_finds_the_line() {
        use crate::storage::disk::{DiskOperation, EioPlan, SimDisk};
        let disk = SimDisk::new(3);
        let dir = Path::new("/data/log-1");
        let open = || {
            Log::open_on_disk(
                disk.shared(),
                dir,
                LogConfig::default(),
                Arc::new(SystemClock),
            )
        };
        let log = open().unwrap();
        log.truncate_fully_and_start_at(Offset(10)).unwrap();
        log.note_start_line(LeaderEpoch(1)).unwrap();
        log.assign_epoch(LeaderEpoch(2), Offset(10)).unwrap();
        let mut batch = RecordBatchBuilder::new(0);
        batch.push(b"a");
        log.append_as_leader(&batch.build().unwrap(), LeaderEpoch(2))
            .unwrap();
        log.note_line_epoch(LeaderEpoch(6)).unwrap();
        log.flush().unwrap();
        drop(log);
        let mut failed_opens = 0;
        for nth in 1.. {
            disk.fail_with_eio(EioPlan::Nth(nth), &[DiskOperation::Read]);
            let failures = disk.stats().eio_failures;
            let opened = open();
            let hit = disk.stats().eio_failures > failures;
            disk.fail_with_eio(EioPlan::Never, &[]);
            match opened {
                Err(Error::Io { .. }) => failed_opens += 1,
                Err(other) => panic!("read {nth} failed, and the open with {other}"),
                // A read whose failure the open may pass over (an index
                // it rebuilds) must not have taken the line with it.
                Ok(log) => {
                    let report = log.end_report(64).unwrap_or_else(|e| {
                        panic!("read {nth} failed, and the line is not known: {e}")
                    });
                    assert_eq!(report.line_epoch, Some(LeaderEpoch(6)), "read {nth}");
                    assert_eq!(report.start_line, Some(LeaderEpoch(1)), "read {nth}");
                }
            }
            let log = open().unwrap();
            let report = log.end_report(64).unwrap();
            assert_eq!(
                (report.line_epoch, report.start_line, report.log_end_offset),
                (Some(LeaderEpoch(6)), Some(LeaderEpoch(1)), Offset(11)),
                "after read {nth} failed"
            );
            drop(log);
            if !hit {
                break;
            }
        }
        assert!(failed_opens >= 2, "only {failed_opens} failed opens");
    }

    /// The start line survives a reopen and holds only for the start it
    /// was noted at; an unusable file leaves it not known, and the report
    /// stands.
    #[test]
    fn the_start_line_holds_for_the_start_it_was_noted_at() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path());
        assert_eq!(log.end_report(64).unwrap().start_line, None);
        log.truncate_fully_and_start_at(Offset(40)).unwrap();
        log.note_start_line(LeaderEpoch(12)).unwrap();
        let report = log.end_report(64).unwrap();
        assert_eq!(
            (
                report.log_start_offset,
                report.log_end_offset,
                report.start_line
            ),
            (Offset(40), Offset(40), Some(LeaderEpoch(12)))
        );
        // A snapshot at the start is named by the start line.
        assert_eq!(log.epoch_below(Offset(40)), Some(LeaderEpoch(12)));
        assert_eq!(log.epoch_below(Offset(39)), None, "below the start");
        assert_eq!(log.epoch_below(Offset(41)), None, "past the end");
        drop(log);
        let log = open(dir.path());
        assert_eq!(
            log.end_report(64).unwrap().start_line,
            Some(LeaderEpoch(12))
        );
        // Restarted elsewhere without a note: not known.
        log.truncate_fully_and_start_at(Offset(50)).unwrap();
        assert_eq!(log.end_report(64).unwrap().start_line, None);
        drop(log);
        std::fs::write(dir.path().join(START_LINE_FILE), b"garbage").unwrap();
        let log = open(dir.path());
        assert_eq!(log.end_report(64).unwrap().start_line, None);
        log.note_start_line(LeaderEpoch(14)).unwrap();
        assert_eq!(
            log.end_report(64).unwrap().start_line,
            Some(LeaderEpoch(14))
        );
    }

    /// The epoch a leader names below an offset (`Log::epoch_below`): the
    /// epoch of the record below it; at the log start, once the records
    /// below are deleted, the epoch of the batch there (whose leader wrote
    /// it on top of them); nothing at 0 or past the end.
    #[test]
    fn the_epoch_below_an_offset_is_the_epoch_of_the_record_below_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path());
        for epoch in [1, 1, 1, 1, 1, 3, 3, 3, 3, 3] {
            let mut batch = RecordBatchBuilder::new(0);
            batch.push(b"a");
            log.append_as_leader(&batch.build().unwrap(), LeaderEpoch(epoch))
                .unwrap();
        }
        let below = |offset: u64| log.epoch_below(Offset(offset));
        assert_eq!(below(0), None);
        assert_eq!(below(5), Some(LeaderEpoch(1)), "record 4 is epoch 1's");
        assert_eq!(below(6), Some(LeaderEpoch(3)));
        assert_eq!(below(10), Some(LeaderEpoch(3)), "the log end");
        assert_eq!(below(11), None, "past the end");
        log.raise_high_watermark(Offset(10));
        log.set_log_start_offset(Offset(5)).unwrap();
        assert_eq!(below(4), None, "below the start");
        assert_eq!(below(5), Some(LeaderEpoch(3)), "the batch at the start");
        log.note_start_line(LeaderEpoch(1)).unwrap();
        assert_eq!(below(5), Some(LeaderEpoch(1)), "the start line noted");
    }

    /// A retired log refuses every later call, and writes nothing more
    /// into its directory, where a new log of the same name may live.
    #[test]
    fn a_retired_log_writes_nothing_more() {
        let dir = tempfile::tempdir().unwrap();
        let old = open(dir.path());
        let mut batch = RecordBatchBuilder::new(0);
        batch.push(b"a");
        let batch = batch.build().unwrap();
        old.append_as_leader(&batch, LeaderEpoch(0)).unwrap();
        old.retire("removed");
        std::fs::remove_dir_all(dir.path()).unwrap();
        let new = open(dir.path());
        let before = std::fs::read(dir.path().join(LogCheckpoint::FILE_NAME)).unwrap();
        assert!(matches!(old.flush(), Err(Error::Poisoned { .. })));
        assert!(matches!(
            old.append_as_leader(&batch, LeaderEpoch(0)),
            Err(Error::Poisoned { .. })
        ));
        assert!(old.note_line_epoch(LeaderEpoch(3)).is_err());
        assert!(old.note_start_line(LeaderEpoch(3)).is_err());
        assert!(old.close_in_place().is_err());
        let after = std::fs::read(dir.path().join(LogCheckpoint::FILE_NAME)).unwrap();
        assert_eq!(before, after);
        assert!(!dir.path().join(LINE_EPOCH_FILE).exists());
        assert!(!dir.path().join(START_LINE_FILE).exists());
        assert_eq!(new.log_end_offset(), Offset::ZERO);
    }

    /// A crash inside a restart at a higher offset, after the new segment
    /// was made and before the cache was emptied: the old log's cache
    /// says nothing of the records below the new start, so no start line
    /// comes from it (review of c7e156c).
    #[test]
    fn a_restart_cut_short_names_no_start_line_from_the_old_cache() {
        let dir = tempfile::tempdir().unwrap();
        {
            let log = open(dir.path());
            log.assign_epoch(LeaderEpoch(3), Offset::ZERO).unwrap();
            let mut batch = RecordBatchBuilder::new(0);
            batch.push(b"a");
            log.append_as_leader(&batch.build().unwrap(), LeaderEpoch(3))
                .unwrap();
            // Dropped without a close or a flush: the recovery point
            // stays at the start, as the restart's first checkpoint
            // leaves it.
        }
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            if name.starts_with("00000000000000000000.") {
                std::fs::remove_file(&path).unwrap();
            }
        }
        std::fs::write(dir.path().join("00000000000000001000.log"), b"").unwrap();
        let log = open(dir.path());
        let report = log.end_report(64).unwrap();
        assert_eq!(
            (
                report.log_start_offset,
                report.log_end_offset,
                report.start_line
            ),
            (Offset(1000), Offset(1000), None)
        );
        assert!(report.epochs.is_empty(), "{report:?}");
    }

    /// A recovery cut that empties the log at its start keeps the epoch
    /// its cache gave the start (the cut batch's), across later opens.
    #[test]
    fn a_cut_that_empties_the_log_keeps_the_epoch_at_its_start() {
        let dir = tempfile::tempdir().unwrap();
        {
            let log = open(dir.path());
            log.truncate_fully_and_start_at(Offset(40)).unwrap();
            log.assign_epoch(LeaderEpoch(7), Offset(40)).unwrap();
            let mut batch = RecordBatchBuilder::new(0);
            batch.push(b"a");
            log.append_as_leader(&batch.build().unwrap(), LeaderEpoch(7))
                .unwrap();
            assert_eq!(log.end_report(64).unwrap().start_line, None);
            // Dropped without a close: a crash.
        }
        let segment = dir.path().join("00000000000000000040.log");
        let bytes = std::fs::read(&segment).unwrap();
        std::fs::write(&segment, &bytes[..bytes.len() / 2]).unwrap();
        for _ in 0..2 {
            let log = open(dir.path());
            let report = log.end_report(64).unwrap();
            assert_eq!(
                (
                    report.last_batch_epoch,
                    report.log_end_offset,
                    report.start_line
                ),
                (None, Offset(40), Some(LeaderEpoch(7)))
            );
        }
    }
}
