//! Crash-point sweeps of the log's multi-step file operations (tests only).
//!
//! Each sweep builds a log on a [`SimDisk`], runs one multi-step operation
//! (a roll and its flush, a truncation, a log start move, a restart, the
//! checkpoint writes) with one fault planned, then reopens the log on the
//! same disk and checks what the reopened log must still hold. The faults,
//! each in its own run: `EIO` on the n-th operation of one kind (every kind
//! in turn, every n until the operation ends before it), then a process
//! crash; a power loss at the n-th operation (every n until the operation
//! ends before it), with torn writes (each file keeps a random prefix of
//! its unsynced writes). After each reopen:
//! - the log opens; after a power loss, where `Log::open` refuses torn
//!   records that may have been committed with valid batches after them
//!   (the refusal SPEC 2.3 and `DamageAboveRecoveryPoint` document), it
//!   opens as a node opens it after reporting its unclean stop;
//! - every batch a successful flush covered, and that the operation was
//!   not meant to remove, is read back byte for byte at its offset, and
//!   every batch read is one the test wrote at that offset (the one the
//!   operation left there, when it succeeded);
//! - offsets are dense from the log start to the log end;
//! - the producer state knows each producer's last batch among those the
//!   log holds or its start deleted, and no producer of none of them
//!   (unless the log holds no record);
//! - the epoch cache names only epochs of batches the log holds, its start
//!   line, or an epoch a leader assigned at the log end;
//! - the log takes an append, and a power loss after its flush keeps it.
//!
//! The model of what the log holds is the test's own ([`Model`]): every
//! batch appended, as stored, by offset.
//!
//! The first sweep of this kind is `a_restart_cut_short_leaves_a_prefix_that_knows_its_producers`
//! (roll_flush.rs), which found that a restart deleted the producer
//! snapshots before the segments.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::disk::{DiskOperation, EioPlan, SimDisk};
use super::{BackgroundWork, DamageAboveRecoveryPoint, FlushPolicy, Log, LogConfig, RollFlusher};
use crate::clock::ManualClock;
use crate::error::{Error, Result};
use crate::record::{parse_header, set_base_offset, set_leader_epoch, RecordBatchBuilder};
use crate::types::{LeaderEpoch, Offset, ProducerEpoch, ProducerId, Sequence};

const START_MS: i64 = 1_700_000_000_000;
const DIR: &str = "/log";

/// Two idempotent producers the sweeps write with.
const P1: ProducerId = ProducerId(7);
const P2: ProducerId = ProducerId(8);

/// The kinds of operation the `EIO` sweeps fail, each in turn.
pub(super) const KINDS: [DiskOperation; 7] = [
    DiskOperation::Open,
    DiskOperation::Read,
    DiskOperation::Write,
    DiskOperation::SetLength,
    DiskOperation::Sync,
    DiskOperation::SyncDirectory,
    DiskOperation::Directory,
];

/// No operation of a sweep takes this many disk operations: a sweep that
/// gets here never ends.
const OPERATIONS_MAX: u64 = 5_000;

/// Segments of a few batches, with small indexes holding a few entries
/// each (so truncations and recovery walk them).
fn small_segments(flush_policy: FlushPolicy) -> LogConfig {
    LogConfig {
        segment_bytes_max: 600,
        batch_bytes_max: 600,
        index_interval_bytes: 128,
        index_bytes_max: 1024,
        flush_policy,
        ..LogConfig::default()
    }
}

/// What the test did to the log.
#[derive(Clone, Debug, Default)]
struct Model {
    /// The batches the log holds by what the test did (those below its
    /// start too), as stored, by base offset.
    batches: BTreeMap<Offset, Vec<u8>>,
    /// Every batch ever written, by base offset (a truncation's cut
    /// batches and those written over them after): what a reopened log
    /// may hold there.
    written: BTreeMap<Offset, BTreeSet<Vec<u8>>>,
    /// Epochs a leader assigned (`assign_epoch`), with their start.
    assigned: BTreeSet<(LeaderEpoch, Offset)>,
    /// The epoch appends are made in.
    epoch: LeaderEpoch,
    /// The next base sequence of each producer.
    sequences: BTreeMap<ProducerId, i32>,
}

/// What an operation is allowed to remove: the batches wholly below a
/// new log start, the batches from a truncation's cut on.
#[derive(Clone, Copy, Debug, Default)]
struct Plan {
    /// The log start the operation moves to.
    start: Option<Offset>,
    /// The offset the operation truncates to.
    cut: Option<Offset>,
    /// The log start the setup moved to, for an operation that restarts
    /// the log empty at `cut`, below that start or at it: the batches
    /// wholly below it were gone before the operation and stay gone, and
    /// once the operation succeeded the log reopens empty at `cut`.
    deleted_below: Option<Offset>,
}

impl Plan {
    /// Whether a batch of the log before the operation, ending at `next`,
    /// may be gone after it.
    fn removes(&self, next: Offset) -> bool {
        self.below_start(next) || self.cut.is_some_and(|cut| next > cut)
    }

    /// Whether the batch ending at `next` lies wholly below the new log
    /// start, or was gone before the operation.
    fn below_start(&self, next: Offset) -> bool {
        self.start.is_some_and(|start| next <= start)
            || self.deleted_below.is_some_and(|start| next <= start)
    }
}

/// A log under test on its disk, the model of it, and the work it handed
/// its roll flusher (run by [`run_background`](Fixture::run_background)).
struct Fixture {
    log: Log,
    model: Model,
    work: Arc<Mutex<Vec<BackgroundWork>>>,
    disk: SimDisk,
    config: LogConfig,
    clock: Arc<ManualClock>,
    flusher: bool,
}

impl Fixture {
    fn open(disk: &SimDisk, config: &LogConfig, clock: &Arc<ManualClock>, flusher: bool) -> Self {
        let work: Arc<Mutex<Vec<BackgroundWork>>> = Arc::default();
        let log = open_log(disk, config, clock, flusher.then_some(&work))
            .unwrap_or_else(|e| panic!("a new log opens: {e}"));
        Fixture {
            log,
            model: Model::default(),
            work,
            disk: disk.clone(),
            config: config.clone(),
            clock: clock.clone(),
            flusher,
        }
    }

    /// The process crashes and starts again: the log is opened anew on
    /// the same disk (its open is the step that may fail).
    fn restart_process(&mut self) -> Result<()> {
        self.disk.crash();
        self.work.lock().unwrap().clear();
        let log = open_log(
            &self.disk,
            &self.config,
            &self.clock,
            self.flusher.then_some(&self.work),
        )?;
        self.log = log;
        Ok(())
    }

    /// Appends a batch of two records, as `producer`'s next one if given.
    fn append(&mut self, producer: Option<ProducerId>) -> Result<()> {
        let mut builder = RecordBatchBuilder::new(START_MS);
        let tag = match producer {
            Some(id) => {
                let sequence = *self.model.sequences.entry(id).or_insert(0);
                builder.producer(id, ProducerEpoch(0), Sequence(sequence));
                format!("p{} {sequence:03}", id.0)
            }
            None => format!("plain {:03}", self.model.batches.len()),
        };
        builder.push(tag.as_bytes());
        builder.push(format!("{tag}b").as_bytes());
        let batch = builder.build()?;
        let end = self.log.log_end_offset();
        let mut stored = batch.as_bytes().to_vec();
        set_base_offset(&mut stored, end);
        set_leader_epoch(&mut stored, self.model.epoch);
        // An append that fails may have written the batch (the flush
        // after a roll failed, or the write itself, part of it): the log
        // may hold it.
        self.model
            .written
            .entry(end)
            .or_default()
            .insert(stored.clone());
        let info = self.log.append_as_leader(&batch, self.model.epoch)?;
        assert!(!info.duplicate, "a new batch taken as a duplicate");
        assert_eq!(info.base_offset, end);
        self.model.batches.insert(end, stored);
        if let Some(id) = producer {
            *self.model.sequences.entry(id).or_insert(0) += 2;
        }
        Ok(())
    }

    /// Appends `count` plain batches.
    fn append_plain(&mut self, count: usize) -> Result<()> {
        (0..count).try_for_each(|_| self.append(None))
    }

    /// A new leader epoch from the log end, as a new leader records it.
    fn new_epoch(&mut self) -> Result<()> {
        let epoch = self.model.epoch.next();
        let end = self.log.log_end_offset();
        self.model.epoch = epoch;
        self.model.assigned.insert((epoch, end));
        self.log.assign_epoch(epoch, end)
    }

    /// `Log::truncate_to(cut)`: the batch holding `cut` goes whole.
    fn truncate_to(&mut self, cut: Offset) -> Result<()> {
        let from = self
            .model
            .batches
            .range(..=cut)
            .next_back()
            .map_or(cut, |(base, _)| *base);
        self.log.truncate_to(cut)?;
        drop(self.model.batches.split_off(&from));
        // The producers' next sequences go back with their batches.
        self.model.sequences = producers_last(self.model.batches.values())
            .into_iter()
            .map(|(id, (_, last))| (id, last.0 + 1))
            .collect();
        Ok(())
    }

    /// Runs the work the log handed its roll flusher, as the flusher's
    /// thread would, in order.
    fn run_background(&mut self) -> Result<()> {
        loop {
            let work = std::mem::take(&mut *self.work.lock().unwrap());
            if work.is_empty() {
                return Ok(());
            }
            for given in work {
                match given {
                    BackgroundWork::FlushRoll => self.log.flush()?,
                    BackgroundWork::FinishLogStartMoves => self.log.finish_log_start_moves()?,
                }
            }
        }
    }

    /// The base offsets of the log's segments.
    fn segment_bases(&self) -> Vec<Offset> {
        self.log.state.read().segments.keys().copied().collect()
    }

    /// The base offset of the batch after the one at `base`.
    fn batch_after(&self, base: Offset) -> Offset {
        *self
            .model
            .batches
            .range(base.next()..)
            .next()
            .unwrap_or_else(|| panic!("no batch after {base}"))
            .0
    }
}

/// Opens the log on `disk`, with a roll flusher that queues its work in
/// `work` when given.
fn open_log(
    disk: &SimDisk,
    config: &LogConfig,
    clock: &Arc<ManualClock>,
    work: Option<&Arc<Mutex<Vec<BackgroundWork>>>>,
) -> Result<Log> {
    let log = Log::open_on_disk(disk.shared(), DIR, config.clone(), clock.clone())?;
    if let Some(work) = work {
        let queue = Arc::clone(work);
        log.set_roll_flusher(RollFlusher(Box::new(move |given| {
            queue.lock().unwrap().push(given);
            true
        })));
    }
    Ok(log)
}

/// Each producer's last batch's producer epoch and last sequence among
/// `batches`, in offset order.
fn producers_last<'a>(
    batches: impl Iterator<Item = &'a Vec<u8>>,
) -> BTreeMap<ProducerId, (ProducerEpoch, Sequence)> {
    let mut last = BTreeMap::new();
    for bytes in batches {
        let header = parse_header(bytes).unwrap_or_else(|e| panic!("a stored batch: {e:?}"));
        if header.producer_id != ProducerId::NONE {
            last.insert(
                header.producer_id,
                (header.producer_epoch, header.last_sequence()),
            );
        }
    }
    last
}

/// One fault a sweep run plans.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// `EIO` on the n-th operation of the kind, then a process crash.
    Eio(DiskOperation, u64),
    /// A power loss at the n-th operation.
    PowerLoss(u64),
}

/// One sweep: a log built by `setup` (no faults), then `op` run with each
/// fault in turn.
struct Sweep<S, O> {
    name: &'static str,
    config: LogConfig,
    /// Whether the log has a roll flusher (whose work `op` runs with
    /// [`Fixture::run_background`]).
    flusher: bool,
    setup: S,
    op: O,
}

impl<S, O> Sweep<S, O>
where
    S: Fn(&mut Fixture) -> Plan,
    O: Fn(&mut Fixture, &Plan) -> Result<()>,
{
    /// Runs every fault; panics listing the runs whose reopened log broke
    /// a rule.
    fn run(&self) {
        let mut problems = Vec::new();
        let mut runs = 0;
        for kind in KINDS {
            for nth in 1..=OPERATIONS_MAX {
                runs += 1;
                let fired = self.run_one(Fault::Eio(kind, nth), &mut problems);
                if !fired {
                    break;
                }
                assert!(nth < OPERATIONS_MAX, "{}: {kind:?} never ends", self.name);
            }
        }
        for nth in 1..=OPERATIONS_MAX {
            runs += 1;
            if !self.run_one(Fault::PowerLoss(nth), &mut problems) {
                break;
            }
            assert!(nth < OPERATIONS_MAX, "{}: power loss never ends", self.name);
        }
        assert!(
            problems.is_empty(),
            "{}: {} of {runs} runs broke a rule:\n{}",
            self.name,
            problems.len(),
            problems.join("\n")
        );
    }

    /// One run with `fault`; returns whether the fault came before the
    /// operation ended.
    fn run_one(&self, fault: Fault, problems: &mut Vec<String>) -> bool {
        let disk = SimDisk::new(1);
        let clock = Arc::new(ManualClock::new(START_MS));
        let mut fixture = Fixture::open(&disk, &self.config, &clock, self.flusher);
        let plan = (self.setup)(&mut fixture);
        let before = fixture.model.clone();
        let flushed_before = fixture.log.flushed_offset();
        let failures_before = disk.stats().eio_failures;
        match fault {
            Fault::Eio(kind, nth) => disk.fail_with_eio(EioPlan::Nth(nth), &[kind]),
            Fault::PowerLoss(nth) => {
                // Torn: each file keeps a random prefix of its unsynced
                // writes, as a real disk may.
                disk.set_torn_writes(true);
                disk.lose_power_at_operation(nth);
            }
        }
        let result = (self.op)(&mut fixture, &plan);
        disk.fail_with_eio(EioPlan::Never, &[]);
        // Whatever failed, the log, poisoned or not, still says what it
        // holds: a step cut short never leaves it without an active
        // segment (a restart whose removal failed did, and the follower's
        // next look at its log end panicked: simulator seed 30 with `EIO`
        // on any operation).
        // Nor with its start above its high watermark, that above its end,
        // or a gap between its segments (a truncation whose removal failed
        // had kept the segments after its cut; review of 9f6c5d5).
        let (start, end) = (fixture.log.log_start_offset(), fixture.log.log_end_offset());
        if !fixture.log.state.read().check_invariants() {
            problems.push(format!(
                "{fault:?}: after the operation the log's state breaks its invariants (start {start}, high watermark {}, end {end})",
                fixture.log.high_watermark()
            ));
        }
        if let Err(problem) = check_end_report(&fixture.log, &fixture.model) {
            problems.push(format!(
                "{fault:?}: after the operation ({}) the log's report of its end {problem}",
                if result.is_ok() {
                    "succeeded"
                } else {
                    "failed"
                }
            ));
        }
        let fired = match fault {
            Fault::Eio(..) => disk.stats().eio_failures > failures_before,
            Fault::PowerLoss(_) => !disk.power_loss_pending(),
        };
        disk.cancel_power_loss();
        let flushed_after = fixture.log.flushed_offset();
        // The run ends with the process gone: crashed after an `EIO`, or
        // the machine's power lost (at the planned operation, or after an
        // operation that ended before it).
        match fault {
            Fault::Eio(..) => disk.crash(),
            Fault::PowerLoss(_) => {
                if !fired {
                    disk.lose_power();
                }
            }
        }
        let Fixture { log, model, .. } = fixture;
        drop(log);
        let what = format!(
            "{fault:?} (the operation {})",
            match &result {
                Ok(()) => "succeeded".to_string(),
                Err(e) => format!("failed: {e}"),
            }
        );
        let expected = Expected {
            before: &before,
            after: &model,
            flushed_before,
            flushed_after,
            plan,
            succeeded: result.is_ok(),
            power_lost: matches!(fault, Fault::PowerLoss(_)),
        };
        if let Err(problem) = check_reopened(&disk, &self.config, &clock, &expected) {
            problems.push(format!("{what}: {problem}"));
        }
        fired
    }
}

/// What `log` reports of its end to unclean recovery
/// ([`Log::end_report`]), read from memory even when it is poisoned, as a
/// follower's is: the last batch's epoch is that of a batch the test wrote
/// ending at the log end (none for an empty log), and the epoch cache
/// names only epochs of batches the test wrote from the log start to its
/// end, its start line, or an epoch a leader assigned at its end (review
/// of cc5c76a: a truncation whose sync failed kept the cut epoch as the
/// last batch's, and a restart's kept the old log's epochs).
fn check_end_report(log: &Log, model: &Model) -> std::result::Result<(), String> {
    let report = log.end_report(usize::MAX)?;
    let (start, end) = (report.log_start_offset, report.log_end_offset);
    let headers = || {
        model
            .written
            .range(..end)
            .flat_map(|(_, versions)| versions.iter())
            .filter_map(|bytes| parse_header(bytes).ok())
    };
    let last_epochs: BTreeSet<LeaderEpoch> = headers()
        .filter(|h| h.next_offset() == end)
        .map(|h| h.leader_epoch)
        .collect();
    let last_named = match report.last_batch_epoch {
        None => start == end || last_epochs.is_empty(),
        Some(epoch) => start < end && last_epochs.contains(&epoch),
    };
    if !last_named {
        return Err(format!(
            "names epoch {:?} as its last batch's, the batches written ending at {end}: {last_epochs:?} ({start}..{end})",
            report.last_batch_epoch
        ));
    }
    let held_epochs: BTreeSet<LeaderEpoch> = headers()
        .filter(|h| h.next_offset() > start)
        .map(|h| h.leader_epoch)
        .collect();
    let written_epochs: BTreeSet<LeaderEpoch> = headers().map(|h| h.leader_epoch).collect();
    // No sweep notes a start line: one reported is the epoch of the
    // cache's entry at the start of a log that holds no batch, which a
    // deletion moved there (or a leader's that appended nothing there).
    // An entry below the start names nothing there: a restart whose sync
    // failed kept the old log's, and reported its last epoch as the line
    // of the empty log (review of cc5c76a).
    if let Some(line) = report.start_line {
        if !report.epochs.contains(&(line, start)) {
            return Err(format!(
                "names start line {line}, the cache {:?} ({start}..{end})",
                report.epochs
            ));
        }
    }
    for (i, (epoch, at)) in report.epochs.iter().enumerate() {
        // An entry wholly below the start (the next begins at or before
        // it) is history a deferred log start move trims later; the one
        // covering the start and those after it describe what the log
        // holds.
        let below_start = report
            .epochs
            .get(i + 1)
            .is_some_and(|(_, next)| *next <= start);
        let named = if below_start {
            written_epochs.contains(epoch)
        } else {
            held_epochs.contains(epoch)
        } || report.start_line == Some(*epoch)
            || (*at == end && model.assigned.contains(&(*epoch, *at)));
        if !named {
            return Err(format!(
                "names epoch {epoch} at {at}, written from the start: {held_epochs:?}, start line {:?} ({start}..{end})",
                report.start_line
            ));
        }
    }
    Ok(())
}

/// What a reopened log must hold.
struct Expected<'a> {
    /// The model before the operation.
    before: &'a Model,
    /// The model after the operation's steps that succeeded.
    after: &'a Model,
    flushed_before: Offset,
    flushed_after: Offset,
    plan: Plan,
    /// Whether the operation returned `Ok`.
    succeeded: bool,
    /// Whether the run ended in a power loss (not a process crash).
    power_lost: bool,
}

/// The batches of `log` from its start to its end, by base offset, read
/// one after the other: `Err` unless they are dense (the first holds the
/// log start, each starts where the one before ended, the last ends at the
/// log end).
fn read_all(log: &Log) -> std::result::Result<BTreeMap<Offset, Vec<u8>>, String> {
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    let mut held = BTreeMap::new();
    let mut next = start;
    while next < end {
        let read = log
            .read(next, 1 << 20)
            .map_err(|e| format!("reading {next} ({start}..{end}): {e}"))?;
        let mut at = 0;
        while at < read.records.len() {
            let header = parse_header(&read.records[at..])
                .map_err(|e| format!("a batch read at {next}: {e:?}"))?;
            let first = held.is_empty();
            if (first && (header.base_offset > next || header.next_offset() <= next))
                || (!first && header.base_offset != next)
            {
                return Err(format!(
                    "offsets not dense: a batch at {} where {next} was next ({start}..{end})",
                    header.base_offset
                ));
            }
            held.insert(
                header.base_offset,
                read.records[at..at + header.size_bytes()].to_vec(),
            );
            next = header.next_offset();
            at += header.size_bytes();
        }
        if read.records.is_empty() {
            return Err(format!("an empty read at {next} below the end {end}"));
        }
    }
    if next != end {
        return Err(format!("the batches end at {next}, the log at {end}"));
    }
    Ok(held)
}

/// Reopens the log on `disk` and checks it against `expected` (see the
/// module doc), then appends to it, flushes, loses power and checks the
/// append is there.
fn check_reopened(
    disk: &SimDisk,
    config: &LogConfig,
    clock: &Arc<ManualClock>,
    expected: &Expected<'_>,
) -> std::result::Result<(), String> {
    let log = match Log::open_on_disk(disk.shared(), DIR, config.clone(), clock.clone()) {
        Ok(log) => log,
        // The refusal `Log::open` documents (SPEC 2.3): a power loss tore
        // records above the recovery point that may have been committed
        // (the high watermark is not bounded by the flushed offset under
        // `FlushPolicy::Never`), with valid batches after them. A node
        // opens such a log once it reported its unclean stop, cutting
        // them: what a flush covered must be there still.
        Err(Error::Corrupt { reason, .. })
            if expected.power_lost && reason.contains("may have been committed") =>
        {
            Log::open_recovering(
                disk.shared(),
                DIR,
                config.clone(),
                clock.clone(),
                DamageAboveRecoveryPoint::CutAfterReportedUncleanStop,
            )
            .map_err(|e| {
                format!("the log does not reopen, even after a reported unclean stop: {e}")
            })?
        }
        Err(e) => return Err(format!("the log does not reopen: {e}")),
    };
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    let held = read_all(&log)?;
    // Byte for byte: what a flush covered and the operation does not
    // remove is there.
    let plan = &expected.plan;
    let next_of = |bytes: &Vec<u8>| parse_header(bytes).map(|h| h.next_offset()).ok();
    // Of the log before the operation, what its flushes covered and the
    // operation may not remove; of the log the operation's successful
    // steps left, what their flushes covered (a cut's later appends
    // included) above the new start.
    for (model, flushed, before) in [
        (expected.before, expected.flushed_before, true),
        (expected.after, expected.flushed_after, false),
    ] {
        for (base, bytes) in &model.batches {
            let Some(next) = next_of(bytes) else {
                return Err(format!("the model's batch at {base} does not parse"));
            };
            let removable = if before {
                plan.removes(next)
            } else {
                plan.below_start(next)
            };
            if next > flushed || removable {
                continue;
            }
            match held.get(base) {
                Some(read) if read == bytes => {}
                Some(_) => {
                    return Err(format!(
                        "the flushed batch at {base} reads back changed ({start}..{end})"
                    ))
                }
                None => {
                    return Err(format!(
                        "the flushed batch {base}..{next} is gone ({start}..{end})"
                    ))
                }
            }
        }
    }
    // Nothing the test did not write; after a successful operation, only
    // what it left.
    for (base, bytes) in &held {
        let known = if expected.succeeded {
            expected.after.batches.get(base) == Some(bytes)
        } else {
            expected
                .after
                .written
                .get(base)
                .is_some_and(|versions| versions.contains(bytes))
        };
        if !known {
            return Err(format!(
                "the batch at {base} is not one the {} left there ({start}..{end})",
                if expected.succeeded {
                    "operation"
                } else {
                    "test"
                }
            ));
        }
    }
    if expected.succeeded {
        if let Some(moved) = plan.start {
            if start < moved {
                return Err(format!(
                    "the log start moved to {moved}, but reopens at {start}"
                ));
            }
        }
    }
    if let Some(deleted) = plan.deleted_below {
        // What the setup's start move deleted stays deleted, unless the
        // operation restarted the log below it: then it reopens empty at
        // the cut, once the operation succeeded.
        if let Some((base, _)) = held
            .iter()
            .find(|(_, bytes)| next_of(bytes).is_some_and(|next| next <= deleted))
        {
            return Err(format!(
                "the batch at {base}, below the start {deleted} the setup moved to, is back ({start}..{end})"
            ));
        }
        if let (true, Some(cut)) = (expected.succeeded, plan.cut) {
            if (start, end) != (cut, cut) {
                return Err(format!(
                    "the log restarted at {cut}, but reopens as {start}..{end}"
                ));
            }
        }
    }
    // The producers: of the batches held, and of those below the start.
    if start < end {
        let below_start = expected
            .after
            .batches
            .range(..start)
            .filter(|(base, _)| !held.contains_key(base))
            .map(|(_, bytes)| bytes);
        let known = producers_last(below_start.chain(held.values()));
        for producer in [P1, P2] {
            let found = log.producer_last_sequence(producer);
            let wanted = known.get(&producer).copied();
            if found != wanted {
                return Err(format!(
                    "producer {producer}: the log ({start}..{end}) knows {found:?}, its batches say {wanted:?}"
                ));
            }
        }
    }
    // The epoch cache names the epochs of batches held, the start line,
    // or an epoch a leader assigned at the log end and wrote nothing in.
    let report = log.end_report(usize::MAX)?;
    let held_epochs: BTreeSet<LeaderEpoch> = held
        .values()
        .filter_map(|bytes| parse_header(bytes).ok().map(|h| h.leader_epoch))
        .collect();
    for (epoch, at) in &report.epochs {
        let named = held_epochs.contains(epoch)
            || report.start_line == Some(*epoch)
            || (*at == end && expected.after.assigned.contains(&(*epoch, *at)));
        if !named {
            return Err(format!(
                "the epoch cache names epoch {epoch} at {at}, held: {held_epochs:?}, start line {:?} ({start}..{end})",
                report.start_line
            ));
        }
    }
    if let Some(last) = held.values().next_back() {
        let last_epoch = parse_header(last).ok().map(|h| h.leader_epoch);
        if log.epoch_below(end) != last_epoch {
            return Err(format!(
                "the epoch below the end {end} is {:?}, the last batch's {last_epoch:?}",
                log.epoch_below(end)
            ));
        }
    }
    if !log.state.read().check_invariants() {
        return Err("the reopened log's invariants do not hold".to_string());
    }
    // The reopened log takes an append, and keeps it through a power loss
    // after its flush, with what it held.
    let epoch = expected
        .after
        .epoch
        .max(log.latest_epoch().unwrap_or_default());
    let mut builder = RecordBatchBuilder::new(START_MS);
    builder.push(b"after").push(b"after b");
    let batch = builder.build().map_err(|e| e.to_string())?;
    let appended = log
        .append_as_leader(&batch, epoch)
        .and_then(|info| log.flush().map(|()| info))
        .map_err(|e| format!("the reopened log ({start}..{end}) takes no append: {e}"))?;
    if appended.base_offset != end {
        return Err(format!(
            "an append to the reopened log lands at {}, not {end}",
            appended.base_offset
        ));
    }
    disk.lose_power();
    drop(log);
    let again = Log::open_on_disk(disk.shared(), DIR, config.clone(), clock.clone())
        .map_err(|e| format!("the log does not reopen after an append and a power loss: {e}"))?;
    let mut held_again = read_all(&again)?;
    let after_append = held_again.split_off(&end);
    if again.log_start_offset() != start || held_again != held || after_append.len() != 1 {
        return Err(format!(
            "after an append, a flush and a power loss the log holds {}..{} ({} batches from the old end), not {start}..{} with the same batches",
            again.log_start_offset(),
            again.log_end_offset(),
            after_append.len(),
            appended.log_end_offset
        ));
    }
    Ok(())
}

/// Epoch 0: `P1`'s batches between plain ones; epoch 1: `P1`'s, `P2`'s
/// and plain ones; over several segments, committed to the end.
fn producers_in_two_epochs(fixture: &mut Fixture) {
    for _ in 0..4 {
        fixture.append(Some(P1)).unwrap();
        fixture.append(None).unwrap();
    }
    fixture.new_epoch().unwrap();
    for _ in 0..3 {
        fixture.append(Some(P2)).unwrap();
        fixture.append(Some(P1)).unwrap();
        fixture.append(None).unwrap();
    }
    fixture.log.set_high_watermark(fixture.log.log_end_offset());
}

/// Epoch 0: `P1`'s batches between plain ones, in the first segments;
/// epoch 1: plain ones and two of `P2`'s, over more segments; committed to
/// the end. A log start inside the second to last segment deletes every
/// batch of `P1`: only a producer snapshot knows it then.
fn producers_then_more(fixture: &mut Fixture) -> Offset {
    for _ in 0..4 {
        fixture.append(Some(P1)).unwrap();
        fixture.append(None).unwrap();
    }
    fixture.new_epoch().unwrap();
    fixture.append_plain(3).unwrap();
    fixture.append(Some(P2)).unwrap();
    fixture.append_plain(5).unwrap();
    fixture.append(Some(P2)).unwrap();
    fixture.append_plain(2).unwrap();
    fixture.log.set_high_watermark(fixture.log.log_end_offset());
    let bases = fixture.segment_bases();
    assert!(bases.len() >= 4, "segments: {bases:?}");
    let start = fixture.batch_after(bases[bases.len() - 2]);
    let last_of_p1 = fixture
        .model
        .batches
        .iter()
        .filter(|(_, bytes)| parse_header(bytes).is_ok_and(|h| h.producer_id == P1))
        .map(|(base, _)| *base)
        .next_back()
        .unwrap();
    assert!(last_of_p1 < bases[bases.len() - 2]);
    start
}

/// A roll's multi-step work: the appends that roll segments, the flush the
/// roll hands its flusher (or runs on the appending thread without one),
/// and a flush of the whole log.
#[test]
fn a_roll_and_its_flush_cut_short_lose_nothing_flushed() {
    for flusher in [true, false] {
        Sweep {
            name: if flusher {
                "roll, background flush, flush"
            } else {
                "roll with its flush on the appending thread, flush"
            },
            config: small_segments(FlushPolicy::Never),
            flusher,
            setup: |fixture: &mut Fixture| {
                producers_in_two_epochs(fixture);
                fixture.run_background().unwrap();
                fixture.log.flush().unwrap();
                Plan::default()
            },
            op: |fixture: &mut Fixture, _: &Plan| {
                let segments = fixture.segment_bases().len();
                fixture.append(Some(P1))?;
                fixture.append(Some(P2))?;
                fixture.append_plain(4)?;
                fixture.append(Some(P1))?;
                assert!(fixture.segment_bases().len() > segments, "no roll");
                fixture.run_background()?;
                fixture.log.flush()
            },
        }
        .run();
    }
}

/// A follower's truncation across segments (SPEC 2.7), then the new
/// leader's epoch and appends over the cut, and a flush: at a batch inside
/// a segment with everything flushed, and at a segment's base with the
/// last segments still waiting for their roll's flush (and their producer
/// snapshots pending).
#[test]
fn a_truncation_cut_short_keeps_everything_below_the_cut() {
    for at_segment_base in [false, true] {
        Sweep {
            name: if at_segment_base {
                "truncate_to a segment base below unflushed segments, appends, flush"
            } else {
                "truncate_to inside a segment, appends, flush"
            },
            config: small_segments(FlushPolicy::Never),
            flusher: true,
            setup: move |fixture: &mut Fixture| {
                producers_in_two_epochs(fixture);
                fixture.run_background().unwrap();
                if !at_segment_base {
                    fixture.new_epoch().unwrap();
                    fixture.append(Some(P1)).unwrap();
                    fixture.append_plain(3).unwrap();
                }
                fixture.log.flush().unwrap();
                if at_segment_base {
                    fixture.new_epoch().unwrap();
                    fixture.append(Some(P1)).unwrap();
                    fixture.append_plain(6).unwrap();
                    assert!(!fixture.work.lock().unwrap().is_empty(), "no roll waits");
                }
                let bases = fixture.segment_bases();
                assert!(bases.len() >= 4, "segments: {bases:?}");
                let cut = if at_segment_base {
                    bases[2]
                } else {
                    fixture.batch_after(bases[1])
                };
                assert!(cut < fixture.log.flushed_offset());
                Plan {
                    start: None,
                    cut: Some(cut),
                    deleted_below: None,
                }
            },
            op: |fixture: &mut Fixture, plan: &Plan| {
                fixture.truncate_to(plan.cut.unwrap())?;
                fixture.new_epoch()?;
                fixture.append(Some(P2))?;
                fixture.append(None)?;
                fixture.run_background()?;
                fixture.log.flush()
            },
        }
        .run();
    }
}

/// A log start move that deletes segments (`set_log_start_offset`), then a
/// flush: with the rolls' producer snapshots written, and with them still
/// pending (every append fsynced under `FlushPolicy::Always`, the rolls'
/// flushes not yet run), so that the move writes the snapshot covering its
/// new first segment.
#[test]
fn a_log_start_move_cut_short_keeps_the_records_above_it_and_the_producers() {
    for pending_snapshots in [false, true] {
        Sweep {
            name: if pending_snapshots {
                "set_log_start_offset with pending snapshots, flush"
            } else {
                "set_log_start_offset, flush"
            },
            config: small_segments(if pending_snapshots {
                FlushPolicy::Always
            } else {
                FlushPolicy::Never
            }),
            flusher: true,
            setup: move |fixture: &mut Fixture| {
                let start = producers_then_more(fixture);
                if !pending_snapshots {
                    fixture.run_background().unwrap();
                    fixture.log.flush().unwrap();
                }
                assert_eq!(fixture.log.flushed_offset(), fixture.log.log_end_offset());
                Plan {
                    start: Some(start),
                    cut: None,
                    deleted_below: None,
                }
            },
            op: |fixture: &mut Fixture, plan: &Plan| {
                fixture.log.set_log_start_offset(plan.start.unwrap())?;
                fixture.log.flush()
            },
        }
        .run();
    }
}

/// A follower's deferred log start move (`raise_log_start_offset_deferred`)
/// and its completion by the roll flusher, then a flush; and the same move
/// finished by a truncation above the new start instead.
#[test]
fn a_deferred_log_start_move_cut_short_keeps_the_records_above_it_and_the_producers() {
    for truncated in [false, true] {
        Sweep {
            name: if truncated {
                "raise_log_start_offset_deferred, truncate_to above it, flush"
            } else {
                "raise_log_start_offset_deferred, finish_log_start_moves, flush"
            },
            config: small_segments(FlushPolicy::Always),
            flusher: true,
            setup: move |fixture: &mut Fixture| {
                let start = producers_then_more(fixture);
                let cut = truncated.then(|| fixture.batch_after(fixture.batch_after(start)));
                Plan {
                    start: Some(start),
                    cut,
                    deleted_below: None,
                }
            },
            op: |fixture: &mut Fixture, plan: &Plan| {
                fixture
                    .log
                    .raise_log_start_offset_deferred(plan.start.unwrap())?;
                if let Some(cut) = plan.cut {
                    fixture.truncate_to(cut)?;
                }
                fixture.run_background()?;
                fixture.log.flush()
            },
        }
        .run();
    }
}

/// A truncation that restarts the log: to an offset below its start (an
/// unclean election of a shorter log after retention moved the start),
/// and into the batch that straddles an exact log start (the batch goes
/// whole, and the log restarts empty at its start). Both take the
/// restart's steps inside `truncate_to`, with its locks held; no sweep
/// reached them before.
#[test]
fn a_truncation_below_the_log_start_cut_short_reopens_a_prefix_or_the_restarted_log() {
    for straddling in [false, true] {
        Sweep {
            name: if straddling {
                "set_log_start_offset inside a batch, truncate_to inside it, flush"
            } else {
                "truncate_to below the log start, flush"
            },
            config: small_segments(FlushPolicy::Never),
            flusher: true,
            setup: move |fixture: &mut Fixture| {
                let start = producers_then_more(fixture);
                // Batches hold two records: one past a batch's base is
                // inside it.
                let (start, cut) = if straddling {
                    (start.next(), start.next())
                } else {
                    let below = *fixture.model.batches.range(..start).next_back().unwrap().0;
                    (start, below)
                };
                fixture.log.set_log_start_offset(start).unwrap();
                fixture.run_background().unwrap();
                fixture.log.flush().unwrap();
                assert_eq!(fixture.log.log_start_offset(), start);
                Plan {
                    start: None,
                    cut: Some(cut),
                    deleted_below: Some(start),
                }
            },
            op: |fixture: &mut Fixture, plan: &Plan| {
                let cut = plan.cut.unwrap();
                fixture.truncate_to(cut)?;
                // It restarted, empty at the cut (inside the straddling
                // batch, the cut is the log start).
                assert_eq!(
                    (fixture.log.log_start_offset(), fixture.log.log_end_offset()),
                    (cut, cut)
                );
                fixture.log.flush()
            },
        }
        .run();
    }
}

/// A restart (`truncate_fully_and_start_at`) past the log end, with every
/// kind of operation failing in turn (the restart's test in roll_flush.rs
/// fails its directory operations only), then a flush.
#[test]
fn a_restart_cut_short_reopens_a_prefix_or_the_restarted_log() {
    Sweep {
        name: "truncate_fully_and_start_at, flush",
        config: small_segments(FlushPolicy::Never),
        flusher: true,
        setup: |fixture: &mut Fixture| {
            let start = producers_then_more(fixture);
            fixture.log.set_log_start_offset(start).unwrap();
            fixture.run_background().unwrap();
            fixture.log.flush().unwrap();
            Plan {
                start: Some(Offset(fixture.log.log_end_offset().0 + 100)),
                cut: None,
                deleted_below: None,
            }
        },
        op: |fixture: &mut Fixture, plan: &Plan| {
            fixture
                .log
                .truncate_fully_and_start_at(plan.start.unwrap())?;
            fixture.log.flush()
        },
    }
    .run();
}

/// The checkpoint writes: a new epoch (the epoch cache file), the line
/// epoch file, a flush (the log checkpoint) and a clean close (producer
/// snapshot, sealed index, clean checkpoint).
#[test]
fn checkpoint_writes_cut_short_lose_nothing_flushed() {
    Sweep {
        name: "assign_epoch, note_line_epoch, append, flush, close",
        config: small_segments(FlushPolicy::Never),
        flusher: false,
        setup: |fixture: &mut Fixture| {
            producers_in_two_epochs(fixture);
            fixture.log.flush().unwrap();
            Plan::default()
        },
        op: |fixture: &mut Fixture, _: &Plan| {
            fixture.new_epoch()?;
            fixture.log.note_line_epoch(fixture.model.epoch)?;
            fixture.append(Some(P2))?;
            fixture.log.set_high_watermark(fixture.log.log_end_offset());
            fixture.log.flush()?;
            fixture.log.close_in_place()
        },
    }
    .run();
}

/// Recovery's own multi-step work, cut short: the open of a log a crash
/// left with segments below its checkpointed start (a log start move whose
/// deletions failed), rolled segments whose flush never ran (their
/// producer snapshots lost, the rebuild's to write) and a tail above the
/// recovery point to scan; then a flush.
#[test]
fn a_recovery_cut_short_loses_nothing_flushed() {
    Sweep {
        name: "open after a crash, flush",
        config: small_segments(FlushPolicy::Never),
        flusher: true,
        setup: |fixture: &mut Fixture| {
            let start = producers_then_more(fixture);
            fixture.append_plain(4).unwrap();
            fixture.log.set_high_watermark(fixture.log.log_end_offset());
            // The move's third directory operation fails: the first
            // deletion, after the renames of the covering snapshot and of
            // the checkpoint naming the new start.
            fixture
                .disk
                .fail_with_eio(EioPlan::Nth(3), &[DiskOperation::Directory]);
            let (flushed, end) = (fixture.log.flushed_offset(), fixture.log.log_end_offset());
            assert!(fixture.log.set_log_start_offset(start).is_err());
            fixture.disk.fail_with_eio(EioPlan::Never, &[]);
            assert_eq!(
                fixture.log.log_start_offset(),
                start,
                "the move's checkpoint failed"
            );
            assert!(
                fixture
                    .disk
                    .paths()
                    .iter()
                    .any(|path| path.ends_with("00000000000000000000.log")),
                "the first segment is deleted"
            );
            assert!(flushed < end, "nothing left to scan");
            Plan {
                start: Some(start),
                cut: None,
                deleted_below: None,
            }
        },
        op: |fixture: &mut Fixture, _: &Plan| {
            fixture.restart_process()?;
            fixture.run_background()?;
            fixture.log.flush()
        },
    }
    .run();
}
