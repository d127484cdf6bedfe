//! The thread that flushes rolled segments off the append path (issue 27).
//!
//! A roll makes the finished segment durable and moves the recovery point
//! past it. Done on the appending thread, that fsync of a whole segment
//! (seconds per GiB on this machine) held the appender, and on a leader
//! every append queued behind it. Kafka runs it as a task on a background
//! scheduler (`UnifiedLog.roll` schedules "flush-log"); a node runs it here,
//! on one thread shared by its logs, started at the first roll.
//!
//! Nothing about durability changes: a job calls `Log::flush`, which fsyncs
//! every file the roll queued and only then publishes the flushed offset and
//! writes the checkpoint, so the recovery point moves only once the data is
//! on disk. While a job waits, the recovery point is where it was before the
//! roll, and a crash then rescans a little more.

use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;

use crate::sync::Mutex;

/// A flush to run on the flushing thread.
pub(crate) type FlushJob = Box<dyn FnOnce() + Send>;

/// One thread that runs the flush jobs of every log of a node, in order.
#[derive(Debug)]
pub(crate) struct RollFlushThread {
    name: String,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// `None` before the first job and after `stop`.
    sender: Option<Sender<FlushJob>>,
    thread: Option<JoinHandle<()>>,
    stopped: bool,
    /// `Some` for a node without threads (a simulation): jobs wait here,
    /// in order, until [`RollFlushThread::run_held`] runs them.
    held: Option<Vec<FlushJob>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("running", &self.thread.is_some())
            .field("stopped", &self.stopped)
            .field("held", &self.held.as_ref().map(Vec::len))
            .finish_non_exhaustive()
    }
}

impl RollFlushThread {
    /// A flushing thread named `name`, started when the first job comes.
    pub(crate) fn new(name: String) -> RollFlushThread {
        RollFlushThread {
            name,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Queues `job`. `false` when it cannot run there (stopped, or the
    /// thread could not be started): the caller then runs the flush itself.
    pub(crate) fn submit(&self, job: FlushJob) -> bool {
        let mut inner = self.inner.lock();
        if inner.stopped {
            return false;
        }
        if let Some(held) = inner.held.as_mut() {
            held.push(job);
            return true;
        }
        if inner.sender.is_none() {
            let (sender, receiver) = mpsc::channel::<FlushJob>();
            crate::simulation::forbid_in_simulation("spawning the roll flusher thread");
            let spawned = std::thread::Builder::new()
                .name(self.name.clone())
                .spawn(move || {
                    // Ends once `stop` dropped the sender and every job
                    // queued before it ran.
                    for job in receiver {
                        job();
                    }
                });
            match spawned {
                Ok(thread) => {
                    inner.sender = Some(sender);
                    inner.thread = Some(thread);
                }
                Err(error) => {
                    tracing::warn!(thread = %self.name, %error, "cannot start the roll flush thread; rolls flush on the appending thread");
                    return false;
                }
            }
        }
        inner
            .sender
            .as_ref()
            .is_some_and(|sender| sender.send(job).is_ok())
    }

    /// Starts no thread: jobs are held until [`run_held`](Self::run_held)
    /// runs them on the caller's thread, for a node that a simulator steps
    /// (issue 28), which decides when background work happens. Called
    /// before the first job.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn hold_jobs(&self) {
        let mut inner = self.inner.lock();
        debug_assert!(inner.thread.is_none(), "jobs held after the thread started");
        inner.held.get_or_insert_with(Vec::new);
    }

    /// Runs the held jobs, in the order they came, on the calling thread;
    /// returns how many ran. Jobs they submit wait for the next call.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn run_held(&self) -> usize {
        let jobs = match self.inner.lock().held.as_mut() {
            Some(held) => std::mem::take(held),
            None => return 0,
        };
        let ran = jobs.len();
        // Run without the lock: a job may submit another.
        for job in jobs {
            job();
        }
        ran
    }

    /// Runs every job queued so far, then ends the thread; later jobs are
    /// refused (`submit` returns `false`). A node calls it before it closes
    /// its logs, so no flush writes a checkpoint after the close wrote its
    /// clean one.
    pub(crate) fn stop(&self) {
        let (thread, held) = {
            let mut inner = self.inner.lock();
            inner.stopped = true;
            inner.sender = None;
            (inner.thread.take(), inner.held.take())
        };
        // As the thread runs what was queued before the stop.
        for job in held.into_iter().flatten() {
            job();
        }
        if let Some(thread) = thread {
            if thread.join().is_err() {
                tracing::error!(thread = %self.name, "the roll flush thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use crate::clock::{Clock, SystemClock};
    use crate::record::{RecordBatch, RecordBatchBuilder};
    use crate::storage::disk::{DiskFile, LockGuard, MappedRegion, OpenMode};
    use crate::storage::DamageAboveRecoveryPoint;
    use crate::storage::{BackgroundWork, Disk, FlushPolicy, Log, LogConfig, RollFlusher, StdDisk};
    use crate::types::{LeaderEpoch, Offset};

    /// The work a log handed its roll flusher, in order.
    type GivenWork = Arc<std::sync::Mutex<Vec<BackgroundWork>>>;

    /// Segments of a few batches.
    fn small_segments() -> LogConfig {
        LogConfig {
            segment_bytes_max: 600,
            batch_bytes_max: 600,
            ..LogConfig::default()
        }
    }

    /// Opens the log in `dir` with a roll flusher that records the work it
    /// is given and never runs it (a background thread that never gets to
    /// it).
    fn open_with_idle_flusher(
        dir: &Path,
        config: &LogConfig,
        clock: Arc<dyn Clock>,
    ) -> (Log, GivenWork) {
        let log = Log::open(dir, config.clone(), clock).unwrap();
        let given = GivenWork::default();
        let record = Arc::clone(&given);
        log.set_roll_flusher(RollFlusher(Box::new(move |work| {
            record.lock().unwrap().push(work);
            true
        })));
        (log, given)
    }

    /// A log of 30 two-record batches in segments of a few batches, the
    /// first 16 batches in epoch 0 and the rest in epoch 1, committed to
    /// its end, whose roll flusher records the work it is given and never
    /// runs it.
    fn log_with_idle_flusher(dir: &Path, config: &LogConfig) -> (Log, GivenWork) {
        let (log, given) = open_with_idle_flusher(dir, config, Arc::new(SystemClock));
        append_batches(&log, "record", 16, LeaderEpoch(0));
        log.assign_epoch(LeaderEpoch(1), log.log_end_offset())
            .unwrap();
        append_batches(&log, "record", 14, LeaderEpoch(1));
        log.set_high_watermark(log.log_end_offset());
        (log, given)
    }

    /// A batch of two records whose values name `tag` and `i`.
    fn two_records(tag: &str, i: usize) -> RecordBatch {
        let mut builder = RecordBatchBuilder::new(0);
        builder.push(format!("{tag} {i:03}").as_bytes());
        builder.push(format!("{tag} {i:03}b").as_bytes());
        builder.build().unwrap()
    }

    /// Appends `count` two-record batches in `epoch`.
    fn append_batches(log: &Log, tag: &str, count: usize, epoch: LeaderEpoch) {
        for i in 0..count {
            log.append_as_leader(&two_records(tag, i), epoch).unwrap();
        }
    }

    /// Opens the log as a node does once its unclean stop is reported.
    fn open_cut_after_report(
        disk: Arc<dyn crate::storage::disk::Disk>,
        dir: impl AsRef<Path>,
        config: LogConfig,
        clock: Arc<dyn Clock>,
    ) -> crate::Result<Log> {
        Log::open_recovering(
            disk,
            dir,
            config,
            clock,
            DamageAboveRecoveryPoint::CutAfterReportedUncleanStop,
        )
    }

    /// Opens the log in `dir` again, which must succeed.
    fn reopen(dir: &Path, config: LogConfig) -> Log {
        Log::open(dir, config, Arc::new(SystemClock))
            .unwrap_or_else(|e| panic!("the log must reopen: {e}"))
    }

    /// A process crash: the log's process stops, its files stay as
    /// written.
    fn crash(log: Log) {
        drop(log.halt_for_crash());
    }

    /// A power loss: the log's process stops, every data file keeps only
    /// what an fsync covered, and every index file goes back to what its
    /// last sync left on disk.
    fn lose_power(log: Log) {
        for (path, durable) in log.halt_for_crash() {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(durable)
                .unwrap();
        }
        log.lose_unsynced_index_writes().unwrap();
    }

    /// The batches from the log start to the log end, as stored.
    fn stored_bytes(log: &Log) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut next = log.log_start_offset();
        while next < log.log_end_offset() {
            let read = log.read(next, 1 << 20).unwrap();
            next = read.next_offset().unwrap();
            bytes.extend_from_slice(&read.records);
        }
        bytes
    }

    fn segment_count(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "log")
            })
            .count()
    }

    fn snapshot_files(dir: &Path) -> Vec<u64> {
        let mut offsets: Vec<u64> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".snapshot").map(|o| o.parse().unwrap())
            })
            .collect();
        offsets.sort_unstable();
        offsets
    }

    /// A truncation while rolled segments still waited for their
    /// background flush dropped them from the files to fsync: the next
    /// flush moved the recovery point past their unsynced data, and after
    /// a power loss recovery refused the log ("segment ends at offset 115
    /// but the next one starts at 151": the power-loss fault test, seeds
    /// 1, 161, 164). Here the background flushes never run, a truncation
    /// lands in the last segment, a flush and a power loss follow, and
    /// the log must reopen with everything below the truncation.
    #[test]
    fn a_truncation_keeps_rolled_segments_waiting_for_their_flush() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let (log, _given) = open_with_idle_flusher(dir.path(), &config, Arc::new(SystemClock));
        append_batches(&log, "record", 30, LeaderEpoch(0));
        assert!(log.stats().rolls >= 3, "rolls: {}", log.stats().rolls);
        let end = log.log_end_offset();
        let cut = Offset(end.0 - 2);
        log.truncate_to(cut).unwrap();
        log.flush().unwrap();
        assert_eq!(log.recovery_point(), cut);
        lose_power(log);
        let log = reopen(dir.path(), config);
        assert_eq!(log.log_end_offset(), cut);
    }

    /// Issue 25: a follower's log start move leaves its checkpoint, the
    /// epoch cache trim and the file deletions to the background thread,
    /// and a crash before that work ran reopens the log with its older
    /// start and every record, even when a new epoch was written to the
    /// epoch file meanwhile (had the cache been trimmed with the move, its
    /// file would start above the checkpointed log start and recovery
    /// would refuse the batches in between).
    #[test]
    fn a_deferred_log_start_move_survives_a_crash_before_its_file_work() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let (log, given) = log_with_idle_flusher(dir.path(), &config);
        let (end, files) = (log.log_end_offset(), segment_count(dir.path()));
        // Inside epoch 1, past several whole segments.
        let start = Offset(40);
        log.raise_log_start_offset_deferred(start).unwrap();
        assert_eq!(log.log_start_offset(), start);
        assert!(
            log.read(Offset(0), 1 << 20).is_err(),
            "read below the log start"
        );
        assert!(given
            .lock()
            .unwrap()
            .contains(&BackgroundWork::FinishLogStartMoves));
        assert_eq!(
            segment_count(dir.path()),
            files,
            "files deleted before the checkpoint"
        );
        log.assign_epoch(LeaderEpoch(2), end).unwrap();
        crash(log);
        let log = reopen(dir.path(), config);
        assert_eq!(log.log_start_offset(), Offset(0));
        assert_eq!(log.log_end_offset(), end);
        assert!(log.read(Offset(0), 1 << 20).is_ok());
    }

    /// The background work of a deferred move checkpoints the log start,
    /// deletes the files wholly below it, and a crash after it reopens at
    /// the new start.
    #[test]
    fn a_deferred_log_start_move_is_checkpointed_and_its_files_deleted_by_its_work() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let (log, _given) = log_with_idle_flusher(dir.path(), &config);
        let (end, files) = (log.log_end_offset(), segment_count(dir.path()));
        let start = Offset(40);
        log.raise_log_start_offset_deferred(start).unwrap();
        log.finish_log_start_moves().unwrap();
        assert!(segment_count(dir.path()) < files, "no file deleted");
        assert_eq!(log.epoch_entries()[0], (LeaderEpoch(1), start));
        // Nothing left: a second call does nothing.
        log.finish_log_start_moves().unwrap();
        crash(log);
        let log = reopen(dir.path(), config);
        assert_eq!(log.log_start_offset(), start);
        assert_eq!(log.log_end_offset(), end);
    }

    /// Review of 085699d (fixed by 7a871fe): a deferred log start move
    /// above the flushed offset wrote a checkpoint whose recovery point was
    /// the log start, so it called bytes durable that no fsync had covered;
    /// after a power loss the log refused to open ("data ends at offset
    /// 60, below the recovery point 62"). The recovery point is the flushed
    /// offset. A power loss before the move's file work reopens with the
    /// older start and every flushed record; one after it reopens at the
    /// new start, with every flushed record below it (deleted by the move)
    /// and the unflushed ones above it lost: empty at the new start, where
    /// the follower fetches again.
    #[test]
    fn a_deferred_log_start_move_above_the_flushed_offset_survives_a_power_loss() {
        for finished in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let config = small_segments();
            let (log, _given) = log_with_idle_flusher(dir.path(), &config);
            log.flush().unwrap();
            let flushed = log.flushed_offset();
            let durable = stored_bytes(&log);
            append_batches(&log, "more", 10, LeaderEpoch(1));
            log.set_high_watermark(log.log_end_offset());
            let start = Offset(flushed.0 + 2);
            log.raise_log_start_offset_deferred(start).unwrap();
            if finished {
                log.finish_log_start_moves().unwrap();
            }
            lose_power(log);
            let log = reopen(dir.path(), config);
            if finished {
                assert_eq!(log.log_start_offset(), start);
                assert_eq!(log.log_end_offset(), start);
            } else {
                assert_eq!(log.log_start_offset(), Offset(0));
                assert_eq!(log.log_end_offset(), flushed);
                assert_eq!(stored_bytes(&log), durable);
            }
        }
    }

    /// G4: a log start move deleted the producer snapshots below the new
    /// first segment while the one its roll took for that segment's base
    /// still waited for the roll's flush. A crash then left no snapshot
    /// covering the deleted segments' batches: the reopened log forgot
    /// their producer, and a retry of its last batch was appended a second
    /// time. The move writes that snapshot before it deletes older ones;
    /// for the synchronous move as for a follower's deferred one.
    #[test]
    fn a_log_start_move_keeps_the_producers_of_the_segments_it_deletes() {
        use crate::clock::ManualClock;
        use crate::types::{ProducerEpoch, ProducerId, Sequence};
        const START_MS: i64 = 1_700_000_000_000;
        let producer = ProducerId(7);
        let idempotent = |sequence: i32| {
            let mut builder = RecordBatchBuilder::new(START_MS);
            builder.producer(producer, ProducerEpoch(0), Sequence(sequence));
            builder.push(format!("p {sequence:03}").as_bytes());
            builder.push(format!("p {sequence:03}b").as_bytes());
            builder.build().unwrap()
        };
        for deferred in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let config = small_segments();
            let clock = Arc::new(ManualClock::new(START_MS));
            let (log, _given) = open_with_idle_flusher(dir.path(), &config, clock.clone());
            for i in 0..10 {
                log.append_as_leader(&idempotent(2 * i), LeaderEpoch(0))
                    .unwrap();
            }
            // The snapshots of the rolls so far reach the disk; the later
            // rolls' wait.
            log.flush().unwrap();
            let producer_end = log.log_end_offset();
            append_batches(&log, "more", 20, LeaderEpoch(0));
            let end = log.log_end_offset();
            log.set_high_watermark(end);
            let start = Offset(end.0 - 4);
            if deferred {
                log.raise_log_start_offset_deferred(start).unwrap();
                log.finish_log_start_moves().unwrap();
            } else {
                log.set_log_start_offset(start).unwrap();
            }
            let first = log.state.read().segments.keys().next().copied().unwrap();
            assert!(
                first > producer_end,
                "the producer's batches are all in deleted segments"
            );
            crash(log);
            let log = Log::open(dir.path(), config, clock).unwrap();
            assert_eq!(
                log.producer_last_sequence(producer),
                Some((ProducerEpoch(0), Sequence(19))),
                "deferred: {deferred}: the reopened log forgot the producer"
            );
            let retry = log
                .append_as_leader(&idempotent(18), LeaderEpoch(0))
                .unwrap();
            assert!(retry.duplicate, "deferred: {deferred}: written twice");
            assert_eq!(log.log_end_offset(), end);
        }
    }

    /// Producer batches in segments a log start move deletes, with every
    /// roll's snapshot still waiting for its flush.
    fn producer_batches_then_more(
        log: &Log,
    ) -> (
        crate::types::ProducerId,
        impl Fn(i32) -> crate::record::RecordBatch,
        Offset,
    ) {
        use crate::types::{ProducerEpoch, ProducerId, Sequence};
        const START_MS: i64 = 1_700_000_000_000;
        let producer = ProducerId(7);
        let idempotent = move |sequence: i32| {
            let mut builder = RecordBatchBuilder::new(START_MS);
            builder.producer(producer, ProducerEpoch(0), Sequence(sequence));
            builder.push(format!("p {sequence:03}").as_bytes());
            builder.push(format!("p {sequence:03}b").as_bytes());
            builder.build().unwrap()
        };
        for i in 0..10 {
            log.append_as_leader(&idempotent(2 * i), LeaderEpoch(0))
                .unwrap();
        }
        append_batches(log, "more", 20, LeaderEpoch(0));
        let end = log.log_end_offset();
        log.set_high_watermark(end);
        (producer, idempotent, end)
    }

    /// Review of da0b297 (G4): both log start moves wrote the checkpoint
    /// naming the new start before the snapshot covering the new first
    /// segment, which was still waiting for its roll's flush; recovery
    /// deletes the segments below a checkpointed start by itself, so a
    /// crash in between reopened a log without any snapshot of the deleted
    /// segments' producers. Here the snapshot's write fails (a directory
    /// in the way of its temporary file, which poisons the log) and the
    /// process crashes: the reopened log must still know the producer.
    #[test]
    fn a_crash_before_the_covering_snapshot_is_written_keeps_the_producers() {
        use crate::clock::ManualClock;
        use crate::types::{ProducerEpoch, Sequence};
        for deferred in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let config = small_segments();
            let clock = Arc::new(ManualClock::new(1_700_000_000_000));
            let (log, _given) = open_with_idle_flusher(dir.path(), &config, clock.clone());
            let (producer, idempotent, end) = producer_batches_then_more(&log);
            let start = Offset(end.0 - 4);
            let first = super::super::retention::first_segment_after(&log.state.read(), start);
            assert!(log
                .state
                .read()
                .pending_snapshots
                .iter()
                .any(|(offset, _)| *offset == first));
            let in_the_way = dir.path().join(format!("{:020}.snapshot.tmp", first.0));
            std::fs::create_dir(&in_the_way).unwrap();
            let moved = if deferred {
                log.raise_log_start_offset_deferred(start).unwrap();
                log.finish_log_start_moves()
            } else {
                log.set_log_start_offset(start).map(|_| ())
            };
            assert!(
                moved.is_err(),
                "deferred: {deferred}: the snapshot write cannot succeed"
            );
            std::fs::remove_dir(&in_the_way).unwrap();
            crash(log);
            let log = Log::open(dir.path(), config, clock).unwrap();
            assert_eq!(
                log.producer_last_sequence(producer),
                Some((ProducerEpoch(0), Sequence(19))),
                "deferred: {deferred}: the reopened log forgot the producer"
            );
            let retry = log
                .append_as_leader(&idempotent(18), LeaderEpoch(0))
                .unwrap();
            assert!(retry.duplicate, "deferred: {deferred}: written twice");
        }
    }

    /// Simulator seed 60512796 (G1): a process that stopped before its
    /// rolls' flush lost their producer snapshots; the reopened log
    /// rebuilt its producers from an older snapshot and the batches after
    /// it, but wrote no snapshot for the segments it walked. A log start
    /// move into the last segment then deleted the batches after that
    /// older snapshot and kept it, and the next reopen read it and the
    /// batches of the last segment only: it forgot the producer's last
    /// batches. The rebuild now leaves a snapshot at each segment base it
    /// walks past to the next flush or start move, as a roll does.
    #[test]
    fn a_start_move_after_a_reopen_keeps_the_producers_of_the_walked_segments() {
        use crate::clock::ManualClock;
        use crate::types::{ProducerEpoch, Sequence};
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let (log, _given) = open_with_idle_flusher(dir.path(), &config, clock.clone());
        append_batches(&log, "before", 10, LeaderEpoch(0));
        log.flush().unwrap();
        let older = snapshot_files(dir.path());
        assert!(!older.is_empty(), "no roll before the producer's batches");
        let (producer, idempotent, end) = producer_batches_then_more(&log);
        assert!(
            log.state.read().pending_snapshots.len() >= 2,
            "the producer's batches span no roll"
        );
        // The process stops before the rolls' flush: their snapshots are
        // lost, the batches stay.
        crash(log);
        let log = Log::open(dir.path(), config.clone(), clock.clone()).unwrap();
        assert_eq!(snapshot_files(dir.path()), older);
        assert_eq!(
            log.producer_last_sequence(producer),
            Some((ProducerEpoch(0), Sequence(19)))
        );
        log.set_high_watermark(end);
        log.set_log_start_offset(Offset(end.0 - 1)).unwrap();
        assert!(
            snapshot_files(dir.path())
                .iter()
                .all(|&o| o > *older.last().unwrap()),
            "the move kept a snapshot older than the batches it deleted: {:?}",
            snapshot_files(dir.path())
        );
        crash(log);
        let log = Log::open(dir.path(), config, clock).unwrap();
        assert_eq!(
            log.producer_last_sequence(producer),
            Some((ProducerEpoch(0), Sequence(19))),
            "the reopened log forgot the producer"
        );
        let retry = log
            .append_as_leader(&idempotent(18), LeaderEpoch(0))
            .unwrap();
        assert!(retry.duplicate, "written twice");
    }

    /// Review of 075daca (G4): a truncation while a deferred move waited
    /// wrote a checkpoint naming the moved start without the snapshot
    /// covering the new first segment, and rebuilt the producers in memory
    /// from the snapshots on disk and the live segments only: the live log
    /// forgot the producer at once. It finishes the move first.
    #[test]
    fn a_truncation_while_a_deferred_move_waits_keeps_the_producers() {
        use crate::clock::ManualClock;
        use crate::types::{ProducerEpoch, Sequence};
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let (log, _given) = open_with_idle_flusher(dir.path(), &config, clock.clone());
        let (producer, idempotent, end) = producer_batches_then_more(&log);
        log.raise_log_start_offset_deferred(Offset(end.0 - 4))
            .unwrap();
        log.truncate_to(Offset(end.0 - 2)).unwrap();
        assert_eq!(
            log.producer_last_sequence(producer),
            Some((ProducerEpoch(0), Sequence(19))),
            "the live log forgot the producer"
        );
        crash(log);
        let log = Log::open(dir.path(), config, clock).unwrap();
        assert_eq!(
            log.producer_last_sequence(producer),
            Some((ProducerEpoch(0), Sequence(19))),
            "the reopened log forgot the producer"
        );
        let retry = log
            .append_as_leader(&idempotent(18), LeaderEpoch(0))
            .unwrap();
        assert!(retry.duplicate, "written twice");
    }

    /// The invariant of a deferred move's doomed segments: each lies wholly
    /// below the log start (and the first live segment), through the move
    /// and a truncation above the start; a doomed segment that still holds
    /// offsets from the log start on fails the check.
    #[test]
    fn doomed_segments_lie_wholly_below_the_log_start() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _given) = log_with_idle_flusher(dir.path(), &small_segments());
        log.raise_log_start_offset_deferred(Offset(40)).unwrap();
        assert!(!log.start_moves.lock().doomed.is_empty());
        assert!(log.start_moves.lock().check_invariants(&log.state.read()));
        log.truncate_to(Offset(50)).unwrap();
        assert!(log.start_moves.lock().check_invariants(&log.state.read()));
        let mut state = log.state.write();
        let first = *state.segments.keys().next().unwrap();
        let live = state.segments.remove(&first).unwrap();
        assert!(live.next_offset() > state.log_start_offset);
        let mut moves = log.start_moves.lock();
        moves.doomed.push(live);
        assert!(!moves.check_invariants(&state));
    }

    /// A follower told to restart below its log start while a deferred
    /// move's files are still on disk deletes them before the new segment
    /// may cover their offsets; the log reopens empty at the new offset.
    #[test]
    fn a_restart_below_a_deferred_log_start_deletes_its_files_first() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let (log, _given) = log_with_idle_flusher(dir.path(), &config);
        log.raise_log_start_offset_deferred(Offset(40)).unwrap();
        log.truncate_to(Offset(10)).unwrap();
        assert_eq!(log.log_start_offset(), Offset(10));
        assert_eq!(log.log_end_offset(), Offset(10));
        assert_eq!(segment_count(dir.path()), 1);
        crash(log);
        let log = reopen(dir.path(), config);
        assert_eq!(log.log_start_offset(), Offset(10));
        assert_eq!(log.log_end_offset(), Offset(10));
    }

    /// A truncation above the log start while a deferred log start move's
    /// file work waits finishes that work first (its checkpoint, the epoch
    /// cache's trim, the doomed files' deletion; review of 075daca: the
    /// producer state the truncation rebuilds needs the move's covering
    /// snapshot on disk): the truncation's checkpoint keeps the moved log
    /// start, the epoch cache (file and memory) starts at it, and a power
    /// loss reopens the truncated log from the moved start, its doomed
    /// files gone.
    #[test]
    fn a_truncation_while_a_deferred_log_start_move_waits_keeps_the_move() {
        use crate::storage::{LeaderEpochCache, LogCheckpoint};
        for cut in [50, 42] {
            let what = format!("cut at {cut}");
            let dir = tempfile::tempdir().unwrap();
            let config = small_segments();
            let (log, _given) = log_with_idle_flusher(dir.path(), &config);
            log.flush().unwrap();
            let files = segment_count(dir.path());
            let start = Offset(40);
            log.raise_log_start_offset_deferred(start).unwrap();
            assert!(!log.start_moves.lock().doomed.is_empty());
            let cut = Offset(cut);
            log.truncate_to(cut).unwrap();
            assert_eq!(log.log_start_offset(), start, "{what}");
            assert_eq!(log.log_end_offset(), cut, "{what}");
            assert_eq!(log.high_watermark(), cut, "{what}");
            assert!(log.start_moves.lock().doomed.is_empty(), "{what}");
            let live = log.state.read().segments.len();
            assert_eq!(segment_count(dir.path()), live, "{what}");
            assert!(live < files, "{what}: nothing was deleted");
            let checkpoint = LogCheckpoint::load(&crate::storage::StdDisk, dir.path())
                .unwrap()
                .unwrap();
            assert_eq!(checkpoint.log_start_offset, start, "{what}");
            assert!(checkpoint.recovery_point <= cut, "{what}");
            assert_eq!(log.epoch_entries(), vec![(LeaderEpoch(1), start)], "{what}");
            let file =
                LeaderEpochCache::open(&crate::storage::StdDisk::shared(), dir.path()).unwrap();
            assert!(
                file.entries()
                    .first()
                    .is_some_and(|e| e.start_offset <= start),
                "{what}: the epoch file starts above the checkpointed log start: {:?}",
                file.entries()
            );
            let expected = stored_bytes(&log);
            lose_power(log);
            let log = reopen(dir.path(), config);
            assert_eq!(log.log_start_offset(), start, "{what}");
            assert_eq!(log.log_end_offset(), cut, "{what}");
            assert_eq!(stored_bytes(&log), expected, "{what}");
            assert_eq!(log.epoch_entries(), vec![(LeaderEpoch(1), start)], "{what}");
            assert_eq!(segment_count(dir.path()), live, "{what}");
        }
    }

    /// Review of 8256f67: a roll no longer syncs the old segment's index
    /// before the next segment exists, and a truncation zeroed the entries
    /// it cut without syncing them either. Here a segment's index is made
    /// durable (a roll's flush), a truncation cuts the segment's last
    /// three batches, and batches of other sizes take their place (3
    /// records then 2 where there were 2 then 3): one stale entry on disk
    /// now points into the middle of a batch, and the last one still
    /// names the batch at its position. The log is flushed to the end of
    /// the segment, which rolls; a power loss follows before the roll's
    /// flush, with the new segment's name on disk (as another file's
    /// directory fsync can make it). Recovery trusted the old index whole,
    /// below the recovery point, and a truncation into the segment then
    /// failed as `Corrupt` ("batch starts at offset ..., the offset index
    /// gives this position"). A truncation now syncs the index it cut, so
    /// an index on disk holds correct entries or none.
    #[test]
    fn a_stale_index_left_by_a_truncation_and_a_roll_is_never_trusted_after_a_power_loss() {
        let value = |tag: &str, i: usize| format!("{tag} {i:06}");
        let batch = |tag: &str, records: usize| {
            let mut builder = RecordBatchBuilder::new(0);
            for i in 0..records {
                builder.push(value(tag, i).as_bytes());
            }
            builder.build().unwrap()
        };
        let (two, three) = (batch("old", 2).size_bytes(), batch("old", 3).size_bytes());
        // Two batches of 2 records, then the cut: 2, 3 and 2 records.
        let first_segment = (4 * two + three) as u64;
        let config = LogConfig {
            segment_bytes_max: first_segment,
            batch_bytes_max: first_segment as usize,
            // An entry for every batch but a segment's first.
            index_interval_bytes: 0,
            ..LogConfig::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let (log, _given) = open_with_idle_flusher(dir.path(), &config, Arc::new(SystemClock));
        let epoch = LeaderEpoch(0);
        for records in [2, 2, 2, 3, 2, 2] {
            log.append_as_leader(&batch("old", records), epoch).unwrap();
        }
        assert_eq!(log.stats().rolls, 1);
        log.flush().unwrap();
        // Cut the first segment's last three batches (offsets 4..11).
        let cut = Offset(4);
        log.truncate_to(cut).unwrap();
        for records in [3, 2, 2] {
            log.append_as_leader(&batch("new", records), epoch).unwrap();
        }
        let segment_end = log.log_end_offset();
        assert_eq!(segment_end, Offset(11));
        log.flush().unwrap();
        assert_eq!(log.recovery_point(), segment_end);
        log.append_as_leader(&batch("nxt", 2), epoch).unwrap();
        assert_eq!(log.stats().rolls, 2);
        let expected = stored_bytes(&log);
        lose_power(log);
        let log = reopen(dir.path(), config);
        assert_eq!(log.log_end_offset(), segment_end);
        assert_eq!(stored_bytes(&log), expected[..first_segment as usize]);
        // The cut batches started at 4, 6 and 9, the new ones at 4, 7 and
        // 9: a stale entry for offset 6 points into the middle of the new
        // 3-record batch, and the one for 9 still matches.
        log.truncate_to(Offset(7))
            .unwrap_or_else(|e| panic!("a truncation into the recovered segment: {e}"));
        assert_eq!(log.log_end_offset(), Offset(7));
    }

    /// Issue 27: a roll writes nothing durable on the appending thread. Its
    /// producer snapshot waits for the roll's flush; a truncation below it
    /// first drops it (written later, it would describe batches the log no
    /// longer holds); the flush writes the others.
    #[test]
    fn a_roll_leaves_its_producer_snapshot_to_the_flush_and_a_truncation_drops_it() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let (log, given) = log_with_idle_flusher(dir.path(), &config);
        assert!(log.stats().rolls >= 3, "rolls: {}", log.stats().rolls);
        assert!(
            snapshot_files(dir.path()).is_empty(),
            "a roll wrote a snapshot"
        );
        assert!(given.lock().unwrap().contains(&BackgroundWork::FlushRoll));
        let pending: Vec<u64> = log
            .state
            .read()
            .pending_snapshots
            .iter()
            .map(|(o, _)| o.0)
            .collect();
        let last = *pending.last().unwrap();
        log.truncate_to(Offset(last - 1)).unwrap();
        log.flush().unwrap();
        let written = snapshot_files(dir.path());
        assert_eq!(
            written,
            pending[..pending.len() - 1],
            "pending were {pending:?}"
        );
        assert!(log.state.read().pending_snapshots.is_empty());
    }

    /// A flush that waited for `checkpoint_lock` while the log was
    /// poisoned (a halt, a failed fsync) wrote the rolls' producer
    /// snapshots anyway: a "dead" process changed files after its crash.
    /// It checks the poison flag again under the lock. (When the flushing
    /// thread is slow to reach the lock, it fails its first check and the
    /// test passes without exercising the race; it never fails wrongly.)
    #[test]
    fn a_flush_waiting_for_the_checkpoint_lock_writes_no_snapshot_once_poisoned() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _given) = log_with_idle_flusher(dir.path(), &small_segments());
        assert!(!log.state.read().pending_snapshots.is_empty());
        let log = Arc::new(log);
        let serial = log.checkpoint_lock.lock();
        let flushing = Arc::clone(&log);
        let flush = std::thread::spawn(move || flushing.flush());
        std::thread::sleep(std::time::Duration::from_millis(100));
        log.poison_for_test("simulated failure while the flush waited");
        drop(serial);
        let flushed = flush.join().unwrap();
        assert!(
            matches!(flushed, Err(crate::Error::Poisoned { .. })),
            "{flushed:?}"
        );
        assert!(
            snapshot_files(dir.path()).is_empty(),
            "a poisoned log wrote a snapshot"
        );
    }

    /// A roll's directory fsync and index sync move to the flush that
    /// moves the recovery point past the segment: after that flush and a
    /// power loss, the log reopens whole.
    #[test]
    fn the_flush_after_a_roll_makes_the_new_segment_and_the_index_durable() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let (log, _given) = log_with_idle_flusher(dir.path(), &config);
        assert!(log.state.read().dir_unsynced);
        assert!(!log.state.read().unsynced_indexes.is_empty());
        log.flush().unwrap();
        assert!(!log.state.read().dir_unsynced);
        assert!(log.state.read().unsynced_indexes.is_empty());
        let end = log.log_end_offset();
        assert_eq!(log.recovery_point(), end);
        lose_power(log);
        let log = reopen(dir.path(), config);
        assert_eq!(log.log_end_offset(), end);
        assert!(log.recovery_report().indexes_rebuilt.is_empty());
    }

    #[test]
    fn stop_runs_every_queued_job_and_refuses_later_ones() {
        let flusher = RollFlushThread::new("test-roll-flush".into());
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..10 {
            let ran = Arc::clone(&ran);
            assert!(flusher.submit(Box::new(move || {
                std::thread::sleep(std::time::Duration::from_millis(1));
                ran.fetch_add(1, Ordering::SeqCst);
            })));
        }
        flusher.stop();
        assert_eq!(ran.load(Ordering::SeqCst), 10);
        let late = Arc::clone(&ran);
        assert!(!flusher.submit(Box::new(move || {
            late.fetch_add(1, Ordering::SeqCst);
        })));
        assert_eq!(ran.load(Ordering::SeqCst), 10);
    }

    /// A node without threads holds its jobs until they are run on the
    /// caller's thread, in order, and a stop runs what is still held.
    #[test]
    fn held_jobs_run_in_order_on_the_calling_thread_and_at_stop() {
        let flusher = RollFlushThread::new("test-roll-flush".into());
        flusher.hold_jobs();
        let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
        let submit = |n: usize| {
            let ran = Arc::clone(&ran);
            let caller = std::thread::current().id();
            assert!(flusher.submit(Box::new(move || {
                assert_eq!(std::thread::current().id(), caller);
                ran.lock().unwrap().push(n);
            })));
        };
        submit(1);
        submit(2);
        assert!(ran.lock().unwrap().is_empty(), "nothing runs before asked");
        assert!(flusher.inner.lock().thread.is_none(), "no thread started");
        assert_eq!(flusher.run_held(), 2);
        assert_eq!(flusher.run_held(), 0);
        submit(3);
        flusher.stop();
        assert_eq!(*ran.lock().unwrap(), [1, 2, 3]);
        assert!(!flusher.submit(Box::new(|| {})));
    }

    /// The data files of `dir`, by base offset.
    fn data_files(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        files.sort();
        files
    }

    /// SPEC 2.3: a leader epoch flipped upward in a batch just below the
    /// recovery point (the CRC does not cover it) is damage below the
    /// recovery point, named as such. Taken on trust, it made the first
    /// batch above the recovery point look like it went back in epochs:
    /// recovery cut the log there and reported the flipped epoch as the
    /// log end's, which won an unclean recovery against a longer log
    /// (simulator, seed 2101480).
    #[test]
    fn an_epoch_flipped_just_below_the_recovery_point_is_corruption_there() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let log = Log::open(dir.path(), config.clone(), Arc::new(SystemClock)).unwrap();
        append_batches(&log, "record", 6, LeaderEpoch(0));
        log.flush().unwrap();
        let recovery_point = log.log_end_offset();
        append_batches(&log, "later", 1, LeaderEpoch(0));
        crash(log);
        // The batch just below the recovery point: find its start by its
        // base offset, then overwrite its epoch (bytes 12..16: base offset,
        // length, epoch) with a large one, whatever the byte order.
        let below = recovery_point.0 - 2;
        let file = data_files(dir.path())
            .into_iter()
            .rev()
            .find(|path| {
                let base: u64 = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
                base <= below
            })
            .unwrap();
        let mut bytes = std::fs::read(&file).unwrap();
        let start = (0..bytes.len() - 16)
            .find(|&at| {
                bytes[at..at + 8] == below.to_be_bytes() || bytes[at..at + 8] == below.to_le_bytes()
            })
            .unwrap();
        bytes[start + 12..start + 16].copy_from_slice(&[0x10; 4]);
        std::fs::write(&file, &bytes).unwrap();

        match Log::open(dir.path(), config, Arc::new(SystemClock)) {
            Err(crate::Error::Corrupt { reason, .. }) => {
                assert!(reason.contains("below the recovery point"), "{reason}");
                assert!(reason.contains("epoch cache"), "{reason}");
            }
            Ok(log) => panic!(
                "opened: end {}, last epoch {:?}, report {:?}",
                log.log_end_offset(),
                log.last_batch_epoch(),
                log.recovery_report()
            ),
            Err(other) => panic!("{other}"),
        }
    }

    /// Writes `epoch` into the leader epoch field (bytes 12..16, which the
    /// CRC does not cover) of the batch at `base` in `dir`, as a bit flip
    /// there would, and damages the epoch cache's file, so that recovery
    /// has only the batches to go by.
    fn change_epoch_without_its_cache(dir: &Path, base: u64, epoch: u32) {
        change_epoch(dir, base, epoch);
        std::fs::write(
            dir.join(crate::storage::leader_epoch::LeaderEpochCache::FILE_NAME),
            b"damaged",
        )
        .unwrap();
    }

    /// Writes `epoch` into the leader epoch field of the batch at `base`
    /// in `dir`, as a bit flip there would.
    fn change_epoch(dir: &Path, base: u64, epoch: u32) {
        let file = data_files(dir)
            .into_iter()
            .rev()
            .find(|path| {
                let first: u64 = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
                first <= base
            })
            .unwrap();
        let mut bytes = std::fs::read(&file).unwrap();
        let mut at = 0;
        loop {
            let length = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
            if u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) == base {
                break;
            }
            at += 12 + length;
        }
        bytes[at + 12..at + 16].copy_from_slice(&epoch.to_le_bytes());
        std::fs::write(&file, &bytes).unwrap();
    }

    /// Writes 12 two-record batches in epoch 0 on line 2 to a log in `dir`,
    /// with nothing flushed (committed and checkpointed if `committed`),
    /// and crashes.
    fn crash_twelve_batches_on_line_2(dir: &Path, config: &LogConfig, committed: bool) {
        let (log, _given) = open_with_idle_flusher(dir, config, Arc::new(SystemClock));
        log.note_line_epoch(LeaderEpoch(2)).unwrap();
        append_batches(&log, "record", 12, LeaderEpoch(0));
        if committed {
            log.set_high_watermark(log.log_end_offset());
            log.store_checkpoint(false).unwrap();
        }
        crash(log);
    }

    /// A log of 12 two-record batches in epoch 0 on line 2, committed and
    /// checkpointed with nothing flushed, crashed; the epoch of its batch
    /// at 20 changed to `flipped` and its epoch cache file damaged; then
    /// opened as a replica whose unclean stop was reported. It must open
    /// cut at 20, with both the batch at 20 and the one after it gone.
    fn assert_cut_at_a_flipped_epoch(flipped: u32) {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        crash_twelve_batches_on_line_2(dir.path(), &config, true);
        change_epoch_without_its_cache(dir.path(), 20, flipped);

        let log =
            open_cut_after_report(StdDisk::shared(), dir.path(), config, Arc::new(SystemClock))
                .unwrap_or_else(|e| panic!("a reported replica's log opens, cut: {e}"));
        assert_eq!(log.log_end_offset(), Offset(20), "epoch {flipped}");
        assert_eq!(log.last_batch_epoch(), Some(LeaderEpoch(0)));
        assert!(log.high_watermark() <= Offset(20));
        assert_eq!(
            log.recovery_report().dropped_possibly_committed,
            Some(Offset(20))
        );
    }

    /// G5 with no epoch cache file to check against: a batch whose epoch
    /// is above the stored line epoch was not written so (a leader stores
    /// its epoch as its line, a follower its leader's, before appending),
    /// so recovery cuts from that batch, not from the valid one after it
    /// where the epochs seem to go back. Kept, the flipped batch was the
    /// log's last, below the high watermark, and the replica served it
    /// (simulator seed 60716535: epoch 0 flipped to 2048 at offset 21 on
    /// line 2).
    #[test]
    fn an_epoch_above_the_line_is_cut_from_its_batch_without_a_cache_file() {
        assert_cut_at_a_flipped_epoch(2048);
    }

    /// The same below the recovery point, where the scan does not look:
    /// the batch just below it, whose epoch is above the line, is damage
    /// there, named as such (simulator seed 60713802: epoch 5 flipped to
    /// 517 at offset 175, the recovery point 176, the line 7).
    #[test]
    fn an_epoch_above_the_line_below_the_recovery_point_is_corruption_there() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let log = Log::open(dir.path(), config.clone(), Arc::new(SystemClock)).unwrap();
        log.assign_epoch(LeaderEpoch(5), Offset(0)).unwrap();
        log.note_line_epoch(LeaderEpoch(5)).unwrap();
        append_batches(&log, "record", 8, LeaderEpoch(5));
        log.flush().unwrap();
        let recovery_point = log.log_end_offset();
        append_batches(&log, "later", 3, LeaderEpoch(5));
        crash(log);
        change_epoch_without_its_cache(dir.path(), recovery_point.0 - 2, 517);

        match open_cut_after_report(StdDisk::shared(), dir.path(), config, Arc::new(SystemClock)) {
            Err(crate::Error::Corrupt { reason, .. }) => {
                // Named by the check of the batch before the scan, or by
                // the cache's rebuild, which walks what the scan did not.
                assert!(reason.contains("above the line epoch 5"), "{reason}");
            }
            Ok(log) => panic!(
                "opened: end {}, last epoch {:?}",
                log.log_end_offset(),
                log.last_batch_epoch()
            ),
            Err(other) => panic!("{other}"),
        }
    }

    /// G5 and SPEC 2.3: with no epoch cache file, epochs that go back
    /// between two batches say one of them is damaged, not which: the cut
    /// starts at the earlier one (from the later one, it kept and served
    /// the earlier one when that was the damaged one, as in seed 60716535,
    /// but within the line, where its bound cannot tell).
    #[test]
    fn epochs_going_back_without_a_cache_file_are_cut_from_the_earlier_batch() {
        assert_cut_at_a_flipped_epoch(1);
    }

    /// The same with a usable cache file that lags the batches (appends
    /// change the cache in memory only): the earlier epoch, learned from
    /// its batch above what the file covers, is no more vouched for than
    /// with no file (helper-147's review).
    #[test]
    fn an_epoch_learned_above_the_cache_file_is_cut_when_the_next_goes_back() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        crash_twelve_batches_on_line_2(dir.path(), &config, false);
        change_epoch(dir.path(), 20, 1);

        let log = Log::open(dir.path(), config, Arc::new(SystemClock))
            .unwrap_or_else(|e| panic!("the log opens, cut: {e}"));
        assert_eq!(
            log.log_end_offset(),
            Offset(20),
            "cut from the earlier batch"
        );
        assert_eq!(log.last_batch_epoch(), Some(LeaderEpoch(0)));
    }

    /// SPEC 2.3 and G5 for a replica: a corrupt batch with valid batches
    /// after it, above the checkpointed high watermark, may still hold
    /// committed records (the checkpoint lags the high watermark). A plain
    /// log cuts it as before; a replica's log refuses to open until its
    /// unclean stop is reported, then cuts and says so in
    /// `dropped_possibly_committed` (simulator, seed 1000087: a bit flip at
    /// offset 182, checkpointed high watermark 176, committed up to 252,
    /// and the replica led with the cut log).
    #[test]
    fn a_replicas_corrupt_batch_above_the_checkpointed_high_watermark_may_be_committed() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let (log, _given) = log_with_idle_flusher(dir.path(), &config);
        log.set_high_watermark(Offset(0));
        log.store_checkpoint(false).unwrap();
        crash(log);
        let files = data_files(dir.path());
        assert!(files.len() >= 4, "segments: {}", files.len());
        // One changed byte in the middle of the second segment's first
        // batch (past its 61-byte header): its CRC no longer matches, and
        // valid batches follow.
        let damaged_file = &files[1];
        let mut bytes = std::fs::read(damaged_file).unwrap();
        bytes[70] ^= 0x10;
        std::fs::write(damaged_file, &bytes).unwrap();
        let copy = |name: &str| {
            let to = dir.path().parent().unwrap().join(format!(
                "{}-{name}",
                dir.path().file_name().unwrap().to_str().unwrap()
            ));
            std::fs::create_dir_all(&to).unwrap();
            for entry in std::fs::read_dir(dir.path()).unwrap() {
                let path = entry.unwrap().path();
                std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
            }
            to
        };
        let (plain, replica, reported) = (copy("plain"), copy("replica"), copy("reported"));
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);

        let log = Log::open(&plain, config.clone(), Arc::clone(&clock)).unwrap_or_else(|e| {
            panic!("a plain log cuts a corrupt batch above its checkpointed HW: {e}")
        });
        assert!(log.recovery_report().dropped_possibly_committed.is_none());
        let cut = log.log_end_offset();
        drop(log);

        match Log::open_recovering(
            crate::storage::StdDisk::shared(),
            &replica,
            config.clone(),
            Arc::clone(&clock),
            DamageAboveRecoveryPoint::RefuseReplica,
        ) {
            Err(crate::Error::Corrupt { reason, .. }) => {
                assert!(reason.contains("may have been committed"), "{reason}")
            }
            other => panic!("a replica's log must refuse: {other:?}"),
        }

        let log =
            open_cut_after_report(crate::storage::StdDisk::shared(), &reported, config, clock)
                .unwrap();
        assert_eq!(log.log_end_offset(), cut);
        assert_eq!(log.recovery_report().dropped_possibly_committed, Some(cut));
        for made in [plain, replica, reported] {
            std::fs::remove_dir_all(made).unwrap();
        }
    }

    /// SPEC 2.3 with 3.5: a power loss while rolls' background flushes
    /// waited can leave a sealed segment torn (or empty) while the later
    /// segments' pages reached the disk. With the checkpoint lost too,
    /// every record may have been committed, and valid batches follow the
    /// damage: `Log::open` refuses the log, and a node that reported its
    /// unclean stop (so its replica may have lost data and fetches again)
    /// cuts it at the damage, deletes the later segments and says from
    /// where in the report. Both a tear inside the last batch of the
    /// second segment and an emptied second segment (the tiling check).
    #[test]
    fn a_sealed_segment_torn_while_its_flush_waited_is_cut_after_a_reported_unclean_stop() {
        for emptied in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let config = small_segments();
            let (log, _given) = log_with_idle_flusher(dir.path(), &config);
            let files = data_files(dir.path());
            assert!(files.len() >= 4, "segments: {}", files.len());
            crash(log);
            std::fs::remove_file(dir.path().join("log-state.checkpoint")).unwrap();
            let torn = &files[1];
            let second_base: u64 = torn.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            let length = std::fs::metadata(torn).unwrap().len();
            let cut_to = if emptied { 0 } else { length - 1 };
            std::fs::OpenOptions::new()
                .write(true)
                .open(torn)
                .unwrap()
                .set_len(cut_to)
                .unwrap();
            let damaged = tempfile::tempdir().unwrap();
            for entry in std::fs::read_dir(dir.path()).unwrap() {
                let path = entry.unwrap().path();
                std::fs::copy(&path, damaged.path().join(path.file_name().unwrap())).unwrap();
            }

            match Log::open(damaged.path(), config.clone(), Arc::new(SystemClock)) {
                Err(crate::Error::Corrupt { reason, .. }) => {
                    assert!(reason.contains("may have been committed"), "{reason}")
                }
                other => panic!("emptied {emptied}: expected Corrupt, got {other:?}"),
            }

            let log = open_cut_after_report(
                crate::storage::StdDisk::shared(),
                dir.path(),
                config.clone(),
                Arc::new(SystemClock),
            )
            .unwrap_or_else(|e| panic!("emptied {emptied}: must open: {e}"));
            let end = log.log_end_offset();
            let report = log.recovery_report().clone();
            assert_eq!(report.dropped_possibly_committed, Some(end), "{report:?}");
            if emptied {
                assert_eq!(end, Offset(second_base));
            } else {
                assert!(end > Offset(second_base), "end {end}");
            }
            assert_eq!(data_files(dir.path()).len(), 2, "later segments deleted");
            // Every record below the cut reads back, in epoch 0.
            assert!(!stored_bytes(&log).is_empty());
            let mut read = 0u64;
            let mut next = Offset(0);
            while next < end {
                let batch = log.read(next, 1 << 20).unwrap();
                next = batch.next_offset().unwrap();
                read += 1;
            }
            assert!(read > 0 && next == end);
            assert_eq!(log.last_batch_epoch(), Some(LeaderEpoch(0)));
            // Appends go on from the cut, and the log reopens cleanly.
            log.append_as_leader(&two_records("after", 0), LeaderEpoch(2))
                .unwrap();
            log.close().unwrap();
            let log = reopen(dir.path(), config);
            assert_eq!(log.log_end_offset(), Offset(end.0 + 2));
        }
    }

    /// Review of 384bcd1 (helper-128): a restart (`truncate_fully_and_start_at`)
    /// deleted every producer snapshot before the segments, so a failure
    /// in between (`EIO` on a removal, then a crash) reopened a prefix of
    /// the old log without the snapshot of the producers whose batches
    /// the log start had already deleted: the reopened log forgot them. It
    /// now deletes the segments first, newest first, and the snapshots
    /// last: every prefix a failure leaves keeps the snapshots at or below
    /// its end. Each operation of the restart fails in turn (`EIO`, then a
    /// process crash), then each is where the power goes.
    #[test]
    fn a_restart_cut_short_leaves_a_prefix_that_knows_its_producers() {
        use crate::storage::crash_points::KINDS as EVERY_KIND;
        use crate::storage::disk::EioPlan;
        let mut prefixes = Vec::new();
        for nth in 1.. {
            let reopened = restart_cut_short(nth, |disk| {
                disk.fail_with_eio(EioPlan::Nth(nth), &EVERY_KIND);
            });
            if let Some((start, end)) = reopened.prefix {
                prefixes.push((start, end));
            }
            if reopened.restarted {
                break;
            }
        }
        assert!(
            !prefixes.is_empty(),
            "no failure left a shorter prefix of the old log: the test tests nothing"
        );
        for nth in 1.. {
            let reopened = restart_cut_short(nth, |disk| disk.lose_power_at_operation(nth));
            if reopened.restarted {
                break;
            }
        }
    }

    /// What a reopened log held after [`restart_cut_short`].
    struct Reopened {
        /// Whether the restart returned `Ok`.
        restarted: bool,
        /// The start and end of a non-empty log shorter than the old one.
        prefix: Option<(Offset, Offset)>,
    }

    /// A log whose producer's batches lie below its start (only snapshots
    /// know it), restarted at an offset past its end with `cut` set on
    /// its disk first; then the process crashes (or the power went) and
    /// the log reopens, which must succeed and find either the old log or
    /// a prefix of it knowing the producer, or an empty log at the old
    /// start or at the new offset.
    fn restart_cut_short(nth: u64, cut: impl Fn(&crate::storage::disk::SimDisk)) -> Reopened {
        use crate::clock::ManualClock;
        use crate::storage::disk::{EioPlan, SimDisk};
        use crate::types::{ProducerEpoch, Sequence};
        let config = small_segments();
        let dir = Path::new("/log");
        let disk = SimDisk::new(nth);
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let log = Log::open_on_disk(disk.shared(), dir, config.clone(), clock.clone()).unwrap();
        let (producer, _, end) = producer_batches_then_more(&log);
        let old_start = Offset(24);
        log.set_log_start_offset(old_start).unwrap();
        log.flush().unwrap();
        assert!(
            log.state.read().segments.len() >= 4,
            "too few segments for prefixes"
        );
        let knows = |log: &Log| {
            log.producer_last_sequence(producer) == Some((ProducerEpoch(0), Sequence(19)))
        };
        assert!(knows(&log));
        let new_start = Offset(end.0 + 100);
        cut(&disk);
        let restarted = log.truncate_fully_and_start_at(new_start).is_ok();
        disk.fail_with_eio(EioPlan::Never, &[]);
        let power_lost = disk.stats().power_losses > 0;
        disk.cancel_power_loss();
        disk.crash();
        drop(log);
        let case = format!("operation {nth} (power lost: {power_lost})");
        let reopened = Log::open_on_disk(disk.shared(), dir, config, clock)
            .unwrap_or_else(|e| panic!("{case}: the log does not reopen: {e}"));
        let (start, log_end) = (reopened.log_start_offset(), reopened.log_end_offset());
        if log_end == start {
            assert!(
                start == old_start || start == new_start,
                "{case}: the reopened log is empty at {start}"
            );
        } else {
            assert!(
                knows(&reopened),
                "{case}: the reopened log holds {start}..{log_end} and forgot the producer"
            );
            assert!(log_end <= end, "{case}: {start}..{log_end}");
        }
        if restarted {
            assert_eq!((start, log_end), (new_start, new_start), "{case}");
        }
        Reopened {
            restarted,
            prefix: (log_end > start && log_end < end).then_some((start, log_end)),
        }
    }

    /// The epoch cache's file as stored: `(epoch, start offset)` pairs.
    fn stored_epochs(dir: &Path) -> Vec<(u32, u64)> {
        let disk = crate::storage::StdDisk::shared();
        crate::storage::LeaderEpochCache::open(&disk, dir)
            .unwrap()
            .entries()
            .iter()
            .map(|e| (e.epoch.0, e.start_offset.0))
            .collect()
    }

    fn epochs_of(log: &Log) -> Vec<(u32, u64)> {
        log.epoch_entries()
            .into_iter()
            .map(|(epoch, start)| (epoch.0, start.0))
            .collect()
    }

    /// Issue 27: the first append of a new epoch changes the epoch cache
    /// in memory only (its file was written with fsync under the state
    /// lock, against the module's rule); the next fsync round writes it.
    /// A crash before that round (the batches reach the disk, the file
    /// does not: also what a power loss leaves once the kernel wrote the
    /// data back) reopens with the new epoch learnt from the batches
    /// above the recovery point, each read checked against it; a power
    /// loss that takes the batches too reopens without it.
    #[test]
    fn a_new_epoch_survives_a_crash_or_power_loss_before_any_flush() {
        for power_loss in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let config = small_segments();
            let (log, _given) = open_with_idle_flusher(dir.path(), &config, Arc::new(SystemClock));
            append_batches(&log, "old", 4, LeaderEpoch(0));
            log.flush().unwrap();
            let flushed = log.log_end_offset();
            append_batches(&log, "new", 6, LeaderEpoch(3));
            let end = log.log_end_offset();
            assert_eq!(epochs_of(&log), [(0, 0), (3, flushed.0)]);
            assert_eq!(
                stored_epochs(dir.path()),
                [(0, 0)],
                "written on the append path"
            );
            if power_loss {
                lose_power(log);
            } else {
                crash(log);
            }
            let log = reopen(dir.path(), config);
            assert!(
                log.recovery_report().truncations.is_empty(),
                "{:?}",
                log.recovery_report()
            );
            if power_loss {
                assert_eq!(log.log_end_offset(), flushed);
                assert_eq!(epochs_of(&log), [(0, 0)]);
                continue;
            }
            assert_eq!(log.log_end_offset(), end);
            assert_eq!(epochs_of(&log), [(0, 0), (3, flushed.0)]);
            assert_eq!(stored_epochs(dir.path()), [(0, 0), (3, flushed.0)]);
            assert_eq!(
                log.end_offset_for_epoch(LeaderEpoch(0))
                    .map(|e| e.end_offset),
                Some(flushed)
            );
            // The log goes on in the epoch.
            append_batches(&log, "after", 1, LeaderEpoch(3));
        }
    }

    /// The fsync round that publishes a flushed offset past a new epoch's
    /// first batch writes the epoch cache's file first: below the
    /// recovery point recovery trusts it (and checks batches against it).
    #[test]
    fn a_flush_writes_the_epoch_cache_before_the_recovery_point_passes_a_new_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let log = Log::open(dir.path(), config.clone(), Arc::new(SystemClock)).unwrap();
        append_batches(&log, "old", 2, LeaderEpoch(0));
        let first_new = log.log_end_offset();
        append_batches(&log, "new", 2, LeaderEpoch(1));
        assert_eq!(stored_epochs(dir.path()), Vec::<(u32, u64)>::new());
        log.flush().unwrap();
        assert_eq!(stored_epochs(dir.path()), [(0, 0), (1, first_new.0)]);
        lose_power(log);
        let log = reopen(dir.path(), config);
        assert_eq!(log.recovery_report().batches_scanned, 0);
        assert_eq!(epochs_of(&log), [(0, 0), (1, first_new.0)]);
    }

    /// A follower's append drops, in memory only, an entry past its log
    /// end (a former leader's epoch that wrote nothing) and learns the
    /// older epoch the leader's batches carry there. After a crash the
    /// file still names the dropped epoch at that offset: recovery takes
    /// the batches' word above the recovery point instead of refusing
    /// them as damage.
    #[test]
    fn a_former_leaders_entry_past_the_data_gives_way_to_the_batches_after_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let leader_dir = tempfile::tempdir().unwrap();
        let config = LogConfig::default();
        let leader = Log::open(leader_dir.path(), config.clone(), Arc::new(SystemClock)).unwrap();
        append_batches(&leader, "old", 3, LeaderEpoch(0));
        let split = leader.log_end_offset();
        append_batches(&leader, "new", 3, LeaderEpoch(5));
        let log = Log::open(dir.path(), config.clone(), Arc::new(SystemClock)).unwrap();
        log.append_as_follower(
            &leader
                .read_up_to(Offset(0), 1 << 20, split)
                .unwrap()
                .records,
        )
        .unwrap();
        assert_eq!(log.log_end_offset(), split);
        // This replica led epoch 7 and wrote nothing in it.
        log.assign_epoch(LeaderEpoch(7), split).unwrap();
        log.flush().unwrap();
        assert_eq!(stored_epochs(dir.path()), [(0, 0), (7, split.0)]);
        let mut next = split;
        while next < leader.log_end_offset() {
            let read = leader.read(next, 1 << 20).unwrap();
            next = read.next_offset().unwrap();
            log.append_as_follower(&read.records).unwrap();
        }
        assert_eq!(epochs_of(&log), [(0, 0), (5, split.0)]);
        assert_eq!(stored_epochs(dir.path()), [(0, 0), (7, split.0)]);
        crash(log);
        let log = reopen(dir.path(), config);
        assert_eq!(log.log_end_offset(), leader.log_end_offset());
        assert_eq!(epochs_of(&log), [(0, 0), (5, split.0)]);
        assert_eq!(stored_bytes(&log), stored_bytes(&leader));
    }

    /// What recovery learns from batches above the recovery point is
    /// bounded by the stored line epoch (every batch's epoch is at most
    /// the line stored before it was written): an epoch flipped upward
    /// past it, in a batch whose epoch the file does not know yet, is
    /// still damage, cut off.
    #[test]
    fn an_epoch_flipped_above_the_line_is_cut_after_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let log = Log::open(dir.path(), config.clone(), Arc::new(SystemClock)).unwrap();
        log.note_line_epoch(LeaderEpoch(0)).unwrap();
        append_batches(&log, "old", 2, LeaderEpoch(0));
        log.flush().unwrap();
        log.note_line_epoch(LeaderEpoch(2)).unwrap();
        append_batches(&log, "new", 1, LeaderEpoch(2));
        let last = log.log_end_offset().0 - 2;
        crash(log);
        let file = data_files(dir.path()).pop().unwrap();
        let mut bytes = std::fs::read(&file).unwrap();
        let start = (0..bytes.len() - 16)
            .rev()
            .find(|&at| {
                bytes[at..at + 8] == last.to_le_bytes() || bytes[at..at + 8] == last.to_be_bytes()
            })
            .unwrap();
        bytes[start + 12..start + 16].copy_from_slice(&[0x10; 4]);
        std::fs::write(&file, &bytes).unwrap();
        let log = reopen(dir.path(), config);
        assert_eq!(log.log_end_offset(), Offset(last));
        assert_eq!(log.recovery_report().truncations.len(), 1);
        assert_eq!(epochs_of(&log), [(0, 0)]);
    }

    /// Issue 27: a follower's log start move took `checkpoint_lock`,
    /// which the roll flusher holds across the fsyncs of a roll's producer
    /// snapshot and checkpoint, so the fetcher (and the leader's high
    /// watermark) waited behind them. It takes it no more: it moves while
    /// another thread holds the lock, and its work, run afterwards,
    /// checkpoints it and deletes the files.
    #[test]
    fn a_deferred_log_start_move_does_not_wait_for_the_checkpoint_lock() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let (log, given) = log_with_idle_flusher(dir.path(), &config);
        let (end, files) = (log.log_end_offset(), segment_count(dir.path()));
        let start = Offset(40);
        std::thread::scope(|scope| {
            let serial = log.checkpoint_lock.lock();
            let (done, moved) = std::sync::mpsc::channel();
            let log = &log;
            scope.spawn(move || {
                let result = log.raise_log_start_offset_deferred(start);
                done.send(result.is_ok()).unwrap();
            });
            let moved = moved.recv_timeout(std::time::Duration::from_secs(10));
            drop(serial);
            assert_eq!(moved, Ok(true), "the move waited for checkpoint_lock");
        });
        assert_eq!(log.log_start_offset(), start);
        assert!(given
            .lock()
            .unwrap()
            .contains(&BackgroundWork::FinishLogStartMoves));
        assert_eq!(segment_count(dir.path()), files);
        log.finish_log_start_moves().unwrap();
        assert!(segment_count(dir.path()) < files, "no file deleted");
        crash(log);
        let log = reopen(dir.path(), config);
        assert_eq!(log.log_start_offset(), start);
        assert_eq!(log.log_end_offset(), end);
    }

    /// A log start move that comes while a checkpoint is being written
    /// (it no longer waits for `checkpoint_lock`) is left to its own
    /// work: the checkpoint names the start it read with the first
    /// segment whose producer snapshot it wrote (G4), and the move's work
    /// checkpoints the new start. Here the move comes between a flush's
    /// checkpoint and its work: a crash in between reopens at the older
    /// start with every file, and one after at the new start.
    #[test]
    fn a_checkpoint_and_a_deferred_move_between_it_and_its_work_survive_a_crash() {
        for finished in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let config = small_segments();
            let (log, _given) = log_with_idle_flusher(dir.path(), &config);
            let end = log.log_end_offset();
            log.flush().unwrap();
            let serial = log.checkpoint_lock.lock();
            log.raise_log_start_offset_deferred(Offset(40)).unwrap();
            let (named, first) = log.store_checkpoint_serialized(&serial, false).unwrap();
            drop(serial);
            assert_eq!(named, Offset(40));
            assert!(first <= named);
            log.raise_log_start_offset_deferred(Offset(50)).unwrap();
            if finished {
                log.finish_log_start_moves().unwrap();
            }
            crash(log);
            let log = reopen(dir.path(), config.clone());
            assert_eq!(
                log.log_start_offset(),
                Offset(if finished { 50 } else { 40 })
            );
            assert_eq!(log.log_end_offset(), end);
            assert!(log.read(log.log_start_offset(), 1 << 20).is_ok());
        }
    }

    /// Holds every fsync of the epoch cache's temp file while closed.
    #[derive(Debug, Default)]
    struct EpochFsyncGate {
        /// Whether it is closed, and how many fsyncs it holds.
        state: std::sync::Mutex<(bool, usize)>,
        changed: std::sync::Condvar,
    }

    impl EpochFsyncGate {
        fn close(&self) {
            self.state.lock().unwrap().0 = true;
        }

        fn open(&self) {
            self.state.lock().unwrap().0 = false;
            self.changed.notify_all();
        }

        /// An fsync of the epoch cache's temp file: waits while closed.
        fn pass(&self) {
            let mut state = self.state.lock().unwrap();
            state.1 += 1;
            self.changed.notify_all();
            while state.0 {
                state = self.changed.wait(state).unwrap();
            }
            state.1 -= 1;
        }

        /// Waits (10 s at most) until it holds an fsync.
        fn wait_for_a_held_fsync(&self) {
            let state = self.state.lock().unwrap();
            let (state, _) = self
                .changed
                .wait_timeout_while(state, std::time::Duration::from_secs(10), |s| s.1 == 0)
                .unwrap();
            assert!(state.1 > 0, "no fsync of the epoch cache's temp file");
        }
    }

    /// The real disk, whose epoch cache temp files' fsyncs pass a gate.
    #[derive(Debug)]
    struct EpochGatedDisk(Arc<EpochFsyncGate>);

    impl Disk for EpochGatedDisk {
        fn open(&self, path: &Path, mode: OpenMode) -> std::io::Result<Box<dyn DiskFile>> {
            let file = StdDisk.open(path, mode)?;
            let name = format!("{}.tmp", crate::storage::LeaderEpochCache::FILE_NAME);
            if path.file_name() == Some(std::ffi::OsStr::new(&name)) {
                return Ok(Box::new(EpochGatedFile(file, Arc::clone(&self.0))));
            }
            Ok(file)
        }
        fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
            StdDisk.create_dir_all(path)
        }
        fn exists(&self, path: &Path) -> bool {
            StdDisk.exists(path)
        }
        fn list_dir(&self, path: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
            StdDisk.list_dir(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
            StdDisk.rename(from, to)
        }
        fn remove_file(&self, path: &Path) -> std::io::Result<()> {
            StdDisk.remove_file(path)
        }
        fn remove_dir_all(&self, path: &Path) -> std::io::Result<()> {
            StdDisk.remove_dir_all(path)
        }
        fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
            StdDisk.sync_dir(path)
        }
        fn try_lock(&self, path: &Path) -> std::io::Result<Option<Box<dyn LockGuard>>> {
            StdDisk.try_lock(path)
        }
    }

    /// An epoch cache temp file of [`EpochGatedDisk`].
    #[derive(Debug)]
    struct EpochGatedFile(Box<dyn DiskFile>, Arc<EpochFsyncGate>);

    impl DiskFile for EpochGatedFile {
        fn read_at(&self, position: u64, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read_at(position, buf)
        }
        fn read_vec_at(&self, position: u64, len: usize) -> std::io::Result<Vec<u8>> {
            self.0.read_vec_at(position, len)
        }
        fn append(&self, parts: &[&[u8]]) -> std::io::Result<()> {
            self.0.append(parts)
        }
        fn write_all_at(&self, position: u64, bytes: &[u8]) -> std::io::Result<()> {
            self.0.write_all_at(position, bytes)
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.0.set_len(len)
        }
        fn length_bytes(&self) -> std::io::Result<u64> {
            self.0.length_bytes()
        }
        fn sync_data(&self) -> std::io::Result<()> {
            self.1.pass();
            self.0.sync_data()
        }
        fn sync_all(&self) -> std::io::Result<()> {
            self.1.pass();
            self.0.sync_all()
        }
        fn try_clone(&self) -> std::io::Result<Box<dyn DiskFile>> {
            Ok(Box::new(EpochGatedFile(
                self.0.try_clone()?,
                Arc::clone(&self.1),
            )))
        }
        fn map(&self, len: u64) -> std::io::Result<Box<dyn MappedRegion>> {
            self.0.map(len)
        }
    }

    /// Issue 27, review of the epoch cache's deferred writes: while the
    /// epoch cache's file is being written (a new leader's, here held in
    /// its temp file's fsync), a flush that finds the cache changed takes
    /// its own write under the state lock and waits for the one in flight
    /// without it, so appends go on. Before, a write held the lock that
    /// the flush reads under the state lock across its fsyncs and rename:
    /// the flush waited there holding the state lock, and every append
    /// behind it (under `Never`; under `Always` each append's own round).
    /// What the writes leave survives a crash.
    #[test]
    fn an_append_does_not_wait_for_the_epoch_caches_fsync() {
        let dir = tempfile::tempdir().unwrap();
        let gate = Arc::new(EpochFsyncGate::default());
        let disk: Arc<dyn Disk> = Arc::new(EpochGatedDisk(Arc::clone(&gate)));
        let config = LogConfig::default();
        assert!(matches!(config.flush_policy, FlushPolicy::Never));
        let log =
            Log::open_on_disk(disk, dir.path(), config.clone(), Arc::new(SystemClock)).unwrap();
        append_batches(&log, "before", 3, LeaderEpoch(0));
        let new_epoch_at = log.log_end_offset();
        gate.close();
        std::thread::scope(|scope| {
            let log = &log;
            let assigning = scope.spawn(move || log.assign_epoch(LeaderEpoch(1), new_epoch_at));
            gate.wait_for_a_held_fsync();
            let flushing = scope.spawn(move || log.flush());
            // Time for the flush to reach the epoch cache under the state
            // lock (before the fix it stayed there).
            std::thread::sleep(std::time::Duration::from_millis(300));
            let (done, appended) = std::sync::mpsc::channel();
            scope.spawn(move || {
                let result = log.append_as_leader(&two_records("during", 0), LeaderEpoch(1));
                // The receiver is gone when the append came too late.
                let _ = done.send(result.is_ok());
            });
            let appended = appended.recv_timeout(std::time::Duration::from_secs(10));
            gate.open();
            assert_eq!(
                appended,
                Ok(true),
                "the append waited for the epoch cache's fsync"
            );
            assigning.join().unwrap().unwrap();
            flushing.join().unwrap().unwrap();
        });
        let end = log.log_end_offset();
        assert!(end > new_epoch_at);
        crash(log);
        let log = reopen(dir.path(), config);
        assert_eq!(log.log_end_offset(), end);
        let epochs = log.state.read().epochs.entries().to_vec();
        assert_eq!(
            epochs.last().map(|e| (e.epoch, e.start_offset)),
            Some((LeaderEpoch(1), new_epoch_at))
        );
    }

    /// Issue 27: a truncation's write of the epoch cache's file (under the
    /// state lock, synchronous) lands after a write of older entries in
    /// flight (a new leader's, held here in its temp file's fsync while
    /// batches of the new epoch are appended), never before it: the file
    /// ends without the epoch the truncation removed, covering the
    /// truncation's end.
    #[test]
    fn a_truncation_writes_the_epoch_cache_after_a_write_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let gate = Arc::new(EpochFsyncGate::default());
        let disk: Arc<dyn Disk> = Arc::new(EpochGatedDisk(Arc::clone(&gate)));
        let config = LogConfig::default();
        let log = Log::open_on_disk(disk, dir.path(), config, Arc::new(SystemClock)).unwrap();
        append_batches(&log, "before", 3, LeaderEpoch(0));
        let cut_at = log.log_end_offset();
        append_batches(&log, "more", 2, LeaderEpoch(0));
        let new_epoch_at = log.log_end_offset();
        gate.close();
        std::thread::scope(|scope| {
            let log = &log;
            let assigning = scope.spawn(move || log.assign_epoch(LeaderEpoch(1), new_epoch_at));
            gate.wait_for_a_held_fsync();
            append_batches(log, "new", 2, LeaderEpoch(1));
            let truncating = scope.spawn(move || log.truncate_to(cut_at));
            std::thread::sleep(std::time::Duration::from_millis(300));
            let waited = !truncating.is_finished();
            gate.open();
            assigning.join().unwrap().unwrap();
            truncating.join().unwrap().unwrap();
            assert!(
                waited,
                "the truncation did not wait for the write in flight"
            );
        });
        assert_eq!(log.log_end_offset(), cut_at);
        let stored =
            crate::storage::LeaderEpochCache::open(&StdDisk::shared(), dir.path()).unwrap();
        assert_eq!(stored.latest_epoch(), Some(LeaderEpoch(0)));
        assert_eq!(stored.file_covers(), cut_at);
        crash(log);
        let log = reopen(dir.path(), LogConfig::default());
        assert_eq!(log.log_end_offset(), cut_at);
        assert_eq!(log.latest_epoch(), Some(LeaderEpoch(0)));
    }
}
