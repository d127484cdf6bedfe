//! Issue 28, SPEC 2.3, 2.7 and G5 on a simulated disk: a log on
//! `testing::SimDisk` runs a random workload (appends in rising epochs,
//! rolls, truncations, flushes, high watermarks, clean closes, process
//! crashes) and loses power, now or in the middle of an operation, with
//! or without torn writes. After every restart: the log opens (a torn tail
//! is cut and reported, never refused), everything below the offset the
//! log said was fsynced is there, and every record it serves is the one
//! appended at its offset. A bit flipped in a stored segment after a clean
//! close is `Corrupt` naming the file and a position at or before the flip,
//! at open or at the read, never a wrong record.
//!
//! Each run prints its seed when it fails; `ISRLOG_SEED=n` replays one
//! seed, `ISRLOG_SEEDS=n` runs seeds `0..n` (default 200), and
//! `ISRLOG_TRACE=1` prints every step, the disk before every restart and
//! what the log makes of the same files on the real disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::storage_support::*;
use isrlog::testing::{Disk, DiskOperation, EioPlan, SimDisk};
use isrlog::{
    Error, FlushPolicy, LeaderEpoch, Log, LogConfig, ManualClock, Offset, RecordBatchBuilder,
};

/// SplitMix64, the test's own source of choices (the disk has its own).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.next() % bound
        }
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

const LOG_DIR: &str = "/data/log-0";

/// Seeds to run: `ISRLOG_SEED` alone, or `0..ISRLOG_SEEDS` (default `default`).
fn seeds(default: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("ISRLOG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let count = std::env::var("ISRLOG_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    (0..count).collect()
}

fn random_config(rng: &mut Rng) -> LogConfig {
    let flush_policy = match rng.below(4) {
        0 => FlushPolicy::Always,
        1 => FlushPolicy::Every {
            messages: 1 + rng.below(8),
            interval: Duration::from_secs(3600),
        },
        _ => FlushPolicy::Never,
    };
    LogConfig {
        segment_bytes_max: 200 + rng.below(2000),
        index_interval_bytes: rng.below(300),
        index_bytes_max: 8 * (1 + rng.below(64)),
        flush_policy,
        retention_bytes: rng.chance(2).then(|| 500 + rng.below(5000)),
        ..LogConfig::default()
    }
}

fn open_on(disk: &SimDisk, config: &LogConfig, clock: &ManualClock) -> isrlog::Result<Log> {
    Log::open_on_disk(
        disk.shared(),
        LOG_DIR,
        config.clone(),
        Arc::new(clock.clone()),
    )
}

/// What the test knows of the log.
struct Model {
    /// The value appended at each offset (from 0; the log never deletes
    /// from the front here). Values of an append whose outcome is unknown
    /// (it failed when the power went) are included: the log may or may
    /// not keep them.
    values: Vec<Option<Vec<u8>>>,
    /// Offsets below this were reported fsynced: they survive anything.
    promised: u64,
    /// The log start a restart may not go below (it was checkpointed).
    start: u64,
    /// Newest epoch used.
    epoch: u32,
    /// Bumped by every truncation, so rewritten offsets get new values.
    generation: u64,
}

/// The leader a follower run fetches from.
struct Leader {
    log: Log,
    /// The leader's records, by offset.
    values: Vec<Vec<u8>>,
    /// Keeps the leader's disk alive.
    _disk: SimDisk,
}

impl Leader {
    fn new(seed: u64, clock: &ManualClock) -> Result<Leader, String> {
        let disk = SimDisk::new(seed ^ 0x1ead_e500);
        let log = Log::open_on_disk(
            disk.shared(),
            "/leader/log-0",
            // A small index: the simulated disk copies a mapping whole.
            LogConfig {
                index_bytes_max: 4096,
                ..LogConfig::default()
            },
            Arc::new(clock.clone()),
        )
        .map_err(|e| format!("the leader's log: {e}"))?;
        Ok(Leader {
            log,
            values: Vec::new(),
            _disk: disk,
        })
    }

    /// Appends 1 to 3 batches, sometimes in a new epoch.
    fn append(&mut self, rng: &mut Rng, model: &mut Model, seed: u64) -> Result<(), String> {
        for _ in 0..1 + rng.below(3) {
            if rng.chance(8) {
                model.epoch += 1;
            }
            let mut builder = RecordBatchBuilder::new(START_MS);
            for _ in 0..1 + rng.below(5) {
                let value = format!(
                    "s{seed}-leader-o{}-{}",
                    self.values.len(),
                    "y".repeat(rng.below(40) as usize)
                );
                builder.push(value.as_bytes());
                self.values.push(value.into_bytes());
            }
            let batch = builder.build().map_err(|e| e.to_string())?;
            self.log
                .append_as_leader(&batch, LeaderEpoch(model.epoch))
                .map_err(|e| format!("the leader's append: {e}"))?;
        }
        Ok(())
    }
}

/// Everything `log` serves, as `(offset, value)`; `Err` names the first
/// error.
fn read_everything(log: &Log) -> Result<Vec<(u64, Vec<u8>)>, Error> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    let end = log.log_end_offset();
    while next < end {
        let result = log.read(next, 1)?;
        if result.is_empty() {
            return Err(Error::Corrupt {
                path: PathBuf::from(LOG_DIR),
                position: 0,
                reason: format!("empty read at {next} below the end {end}"),
            });
        }
        for batch in result.batches() {
            let batch = batch?;
            for record in batch.records() {
                let record = record?;
                if record.offset >= next {
                    out.push((record.offset.0, record.value.to_vec()));
                }
            }
            next = batch.next_offset();
        }
    }
    Ok(out)
}

/// The checks after a restart; brings the model in line with the log.
fn check_after_restart(
    log: &Log,
    disk: &SimDisk,
    model: &mut Model,
    what: &str,
) -> Result<(), String> {
    let end = log.log_end_offset().0;
    if end < model.promised {
        return Err(format!(
            "after {what}: the log ends at {end} but {} offsets were reported fsynced",
            model.promised
        ));
    }
    if end > model.values.len() as u64 {
        return Err(format!(
            "after {what}: the log ends at {end}, past the {} offsets ever appended",
            model.values.len()
        ));
    }
    let start = log.log_start_offset().0;
    if start < model.start || start > end {
        return Err(format!(
            "after {what}: the log starts at {start} (ends at {end}), its start was moved to {}",
            model.start
        ));
    }
    let served = read_everything(log).map_err(|e| format!("after {what}: read failed: {e}"))?;
    if served.len() as u64 != end - start {
        return Err(format!(
            "after {what}: {} records served from the start {start} to the end {end}",
            served.len()
        ));
    }
    for (offset, value) in &served {
        let Some(expected) = &model.values[*offset as usize] else {
            return Err(format!(
                "after {what}: offset {offset} served, the log was restarted above it"
            ));
        };
        if value != expected {
            return Err(format!(
                "after {what}: offset {offset} holds {:?}, {:?} was appended there",
                String::from_utf8_lossy(value),
                String::from_utf8_lossy(expected)
            ));
        }
    }
    let report = log.recovery_report();
    for tail in &report.truncations {
        if let Some(bytes) = disk.contents(&tail.path) {
            if bytes.len() as u64 != tail.position {
                return Err(format!(
                    "after {what}: the report says {} was cut at {}, it holds {} bytes",
                    tail.path.display(),
                    tail.position,
                    bytes.len()
                ));
            }
        }
    }
    if log.high_watermark() > log.log_end_offset() {
        return Err(format!("after {what}: high watermark above the log end"));
    }
    if let Some((epoch, _)) = log.epoch_entries().last() {
        if epoch.0 > model.epoch {
            return Err(format!(
                "after {what}: epoch {epoch} in the cache, newest used {}",
                model.epoch
            ));
        }
    }
    model.values.truncate(end as usize);
    Ok(())
}

/// Opens the log after a restart; `Err` if it refuses.
/// Whether `ISRLOG_TRACE` asks for a trace of each step.
fn tracing_on() -> bool {
    std::env::var("ISRLOG_TRACE").is_ok()
}

/// Trace only: opens a copy of the simulated log directory on the real
/// disk, which tells a fault of the simulation from one of the log.
fn open_copy_on_real_disk(disk: &SimDisk, config: &LogConfig, clock: &ManualClock) -> String {
    let real = tempfile::tempdir().unwrap();
    for path in disk.paths() {
        if let (Some(bytes), Ok(rest)) = (disk.contents(&path), path.strip_prefix(LOG_DIR)) {
            std::fs::write(real.path().join(rest), bytes).unwrap();
        }
    }
    let copy = Log::open(real.path(), config.clone(), Arc::new(clock.clone()));
    format!(
        "{:?}",
        copy.map(|l| (l.log_end_offset(), l.recovery_report().clone()))
    )
}

fn reopen(
    disk: &SimDisk,
    config: &LogConfig,
    clock: &ManualClock,
    model: &mut Model,
    what: &str,
) -> Result<Log, String> {
    // A restart ends a fault phase: the disk is healed.
    disk.fail_with_eio(EioPlan::Never, &[]);
    disk.set_space_bytes_max(None);
    // A planned power loss may strike during recovery itself: the machine
    // restarts again, as often as it takes.
    loop {
        let losses = disk.stats().power_losses;
        if tracing_on() {
            eprintln!(
                "{what}: opening\n{}the same files on the real disk: {}",
                disk.describe(),
                open_copy_on_real_disk(disk, config, clock)
            );
        }
        match open_on(disk, config, clock) {
            Ok(log) => {
                if tracing_on() {
                    eprintln!("{what}: reopened: {:?}", log.recovery_report());
                }
                if disk.stats().power_losses != losses {
                    // Struck after the open, in nothing it did: not possible
                    // here (single thread), but never trust such a log.
                    return Err(format!("after {what}: power lost during a successful open"));
                }
                // A planned power loss that did not come by the restart is
                // called off: the checks read through this log.
                disk.cancel_power_loss();
                check_after_restart(&log, disk, model, what)?;
                return Ok(log);
            }
            Err(e) if disk.stats().power_losses != losses => {
                if tracing_on() {
                    eprintln!("{what}: power lost during recovery ({e}); restarting again");
                }
            }
            Err(e) => return Err(format!("after {what}: the log refused to open: {e}")),
        }
    }
}

/// One random run. `Ok` carries the disk's fingerprint (for the
/// determinism test).
fn run(seed: u64) -> Result<u64, String> {
    let mut rng = Rng(seed);
    let disk = SimDisk::new(seed);
    disk.set_torn_writes(rng.chance(2));
    disk.create_dir_all(Path::new("/data"))
        .map_err(|e| e.to_string())?;
    disk.sync_dir(Path::new("/")).map_err(|e| e.to_string())?;
    let config = random_config(&mut rng);
    let clock = ManualClock::new(START_MS);
    let mut model = Model {
        values: Vec::new(),
        promised: 0,
        start: 0,
        epoch: 0,
        generation: 0,
    };
    let mut log = open_on(&disk, &config, &clock).map_err(|e| format!("first open: {e}"))?;
    // A third of the runs are a follower's: batches come from a leader's
    // log (on a disk of its own, never faulted) and are appended with
    // `append_as_follower`; log start moves other than retention are left
    // to leader runs.
    let mut follower = if rng.chance(3) {
        Some(Leader::new(seed, &clock)?)
    } else {
        None
    };
    let steps = 20 + rng.below(200);
    let trace = tracing_on();
    // A third of the runs start with a fault phase: failed fsyncs (after
    // which the log must be poisoned), or failed writes and a full disk
    // (a per-call error is allowed, if the log stays consistent). The first
    // injected failure heals the disk.
    let fault_phase = rng.below(6);
    match fault_phase {
        0 => disk.fail_with_eio(EioPlan::OneIn(5 + rng.below(30)), &[DiskOperation::Sync]),
        1 => disk.fail_with_eio(
            EioPlan::OneIn(5 + rng.below(100)),
            &[DiskOperation::Write, DiskOperation::SetLength],
        ),
        2 => disk.set_space_bytes_max(Some(2_000 + rng.below(20_000))),
        _ => {}
    }
    // Power losses up to the open of the current log: one after it, even
    // inside an operation that swallowed its error, kills this log.
    let mut losses_at_open = disk.stats().power_losses;
    for step in 0..steps {
        let what = format!("step {step}");
        let losses_before = disk.stats().power_losses;
        let faults_before = disk.stats().eio_failures + disk.stats().full_disk_failures;
        let outcome: Result<(), Error> = match rng.below(100) {
            0..=49 if follower.is_some() => {
                let Some(leader) = &mut follower else {
                    unreachable!()
                };
                // New batches on the leader now and then, then one fetch
                // of whatever this log lacks, appended as a follower does.
                if rng.chance(2) || leader.values.len() as u64 == log.log_end_offset().0 {
                    leader.append(&mut rng, &mut model, seed)?;
                }
                let from = log.log_end_offset().0;
                let fetched = leader
                    .log
                    .read(Offset(from), 1 + rng.below(3000) as usize)
                    .map_err(|e| format!("the leader's read at {from}: {e}"))?;
                let mut next = from;
                for batch in fetched.batches() {
                    next = batch.map_err(|e| e.to_string())?.next_offset().0;
                }
                model.values.resize(from as usize, None);
                model.values.extend(
                    leader.values[from as usize..next as usize]
                        .iter()
                        .cloned()
                        .map(Some),
                );
                log.append_as_follower(&fetched.records).map(|_| ())
            }
            50..=51 | 54 if follower.is_some() => Ok(()),
            0..=49 => {
                if rng.chance(8) {
                    model.epoch += 1;
                }
                let count = 1 + rng.below(5) as usize;
                let base = log.log_end_offset().0;
                let mut builder = RecordBatchBuilder::new(START_MS);
                let mut values = Vec::new();
                for i in 0..count as u64 {
                    let value = format!(
                        "s{seed}-g{}-o{}-{}",
                        model.generation,
                        base + i,
                        "x".repeat(rng.below(40) as usize)
                    );
                    builder.push(value.as_bytes());
                    values.push(Some(value.into_bytes()));
                }
                model.values.resize(base as usize, None);
                model.values.extend(values);
                let batch = builder.build().map_err(|e| e.to_string())?;
                log.append_as_leader(&batch, LeaderEpoch(model.epoch))
                    .map(|_| ())
            }
            50..=51 => {
                let start = log.log_start_offset().0;
                let high_watermark = log.high_watermark().0.max(start);
                let to = start + rng.below(high_watermark - start + 1);
                let result = log.set_log_start_offset(Offset(to));
                if result.is_ok() {
                    model.start = model.start.max(log.log_start_offset().0);
                }
                result
            }
            52..=53 => {
                let result = log
                    .delete_segments_by_retention(log.high_watermark())
                    .map(|_| ());
                if result.is_ok() {
                    model.start = model.start.max(log.log_start_offset().0);
                }
                result
            }
            54 => {
                // A follower restarting its log elsewhere: nothing before
                // is promised any more; a crash midway may leave a prefix
                // of the old log or an empty one (at either start).
                let start = log.log_start_offset().0;
                let end = log.log_end_offset().0;
                let to = start.saturating_sub(3) + rng.below(end + 13 - start.saturating_sub(3));
                let result = log.truncate_fully_and_start_at(Offset(to));
                model.promised = 0;
                if result.is_ok() {
                    model.values = vec![None; to as usize];
                    model.start = to;
                    model.generation += 1;
                } else if (model.values.len() as u64) < to {
                    model.values.resize(to as usize, None);
                }
                result
            }
            55..=66 => log.flush(),
            67..=72 => {
                let start = log.log_start_offset().0;
                let end = log.log_end_offset().0;
                let to = start + rng.below(end - start + 1);
                // Batches are cut whole: the one holding `to` goes.
                let cut = match log.read(Offset(to), 1) {
                    Ok(read) => read
                        .batches()
                        .next()
                        .and_then(|b| b.ok())
                        .map_or(to, |b| b.base_offset().0.min(to)),
                    Err(_) => to,
                };
                let result = log.truncate_to(Offset(to));
                // Even a truncation cut short by the power may have removed
                // anything from there on (SPEC 2.7), never below.
                model.promised = model.promised.min(cut);
                if result.is_ok() {
                    model.values.truncate(log.log_end_offset().0 as usize);
                    model.generation += 1;
                }
                result
            }
            73..=78 => {
                let end = log.log_end_offset().0;
                log.set_high_watermark(Offset(rng.below(end + 1)));
                Ok(())
            }
            79..=82 => {
                // A power loss somewhere in the next operations.
                disk.lose_power_at_operation(1 + rng.below(40));
                Ok(())
            }
            83..=88 => {
                drop(log);
                disk.lose_power();
                log = reopen(
                    &disk,
                    &config,
                    &clock,
                    &mut model,
                    &format!("{what}: power loss"),
                )?;

                losses_at_open = disk.stats().power_losses;
                continue;
            }
            89..=92 => {
                drop(log);
                disk.crash();
                // The machine kept running: nothing written is lost (unless a
                // planned power loss struck during the restart).
                let appended = model.values.len() as u64;
                let losses = disk.stats().power_losses;
                log = reopen(
                    &disk,
                    &config,
                    &clock,
                    &mut model,
                    &format!("{what}: crash"),
                )?;

                losses_at_open = disk.stats().power_losses;
                if disk.stats().power_losses == losses && log.log_end_offset().0 != appended {
                    return Err(format!(
                        "{what}: a process crash lost records: end {} of {appended}",
                        log.log_end_offset()
                    ));
                }
                continue;
            }
            93..=95 => {
                let closed = log.close();
                if closed.is_ok() {
                    model.promised = model.values.len() as u64;
                } else {
                    // The power went during the close.
                    disk.lose_power();
                }
                log = reopen(
                    &disk,
                    &config,
                    &clock,
                    &mut model,
                    &format!("{what}: close"),
                )?;

                losses_at_open = disk.stats().power_losses;
                if closed.is_ok() && !log.recovery_report().truncations.is_empty() {
                    return Err(format!("{what}: a clean close left a tail to cut"));
                }
                continue;
            }
            _ => {
                clock.advance(Duration::from_secs(1 + rng.below(3600)));
                Ok(())
            }
        };
        if trace {
            eprint!("{}", disk.describe());
            eprintln!(
                "{what}: {outcome:?}; log end {}, flushed {}, promised {}, values {}, power losses {}",
                log.log_end_offset(),
                log.flushed_offset(),
                model.promised,
                model.values.len(),
                disk.stats().power_losses
            );
        }
        match outcome {
            Ok(()) => {
                model.promised = model.promised.max(log.flushed_offset().0);
            }
            Err(error)
                if disk.stats().eio_failures + disk.stats().full_disk_failures > faults_before
                    && disk.stats().power_losses == losses_before =>
            {
                if fault_phase == 0 && !log.is_poisoned() {
                    return Err(format!(
                        "{what}: a failed fsync ({error}) left the log unpoisoned"
                    ));
                }
                // The disk heals; a poisoned log is restarted (the process
                // stops and starts again, or the power goes).
                disk.fail_with_eio(EioPlan::Never, &[]);
                disk.set_space_bytes_max(None);
                if log.is_poisoned() {
                    drop(log);
                    if rng.chance(2) {
                        disk.crash();
                    } else {
                        disk.lose_power();
                    }
                    log = reopen(
                        &disk,
                        &config,
                        &clock,
                        &mut model,
                        &format!("{what}: restart after {error}"),
                    )?;

                    losses_at_open = disk.stats().power_losses;
                } else {
                    // A per-call error: the log goes on, at the end it says.
                    model.values.truncate(log.log_end_offset().0 as usize);
                }
            }
            Err(error) => {
                // Otherwise only a power loss fails an operation here: the
                // process is dead, the machine restarts.
                if disk.stats().power_losses == losses_at_open {
                    return Err(format!("{what}: unexpected error {error}"));
                }
                drop(log);
                log = reopen(
                    &disk,
                    &config,
                    &clock,
                    &mut model,
                    &format!("{what}: power loss in an operation ({error})"),
                )?;

                losses_at_open = disk.stats().power_losses;
            }
        }
        // A planned power loss not yet reached stays planned; the final one
        // below comes anyway.
    }
    drop(log);
    disk.cancel_power_loss();
    disk.fail_with_eio(EioPlan::Never, &[]);
    disk.set_space_bytes_max(None);
    disk.lose_power();
    let log = reopen(&disk, &config, &clock, &mut model, "the final power loss")?;
    drop(log);
    Ok(disk.fingerprint())
}

/// Regression (seed 184): a power loss kept part of a write of the index
/// entry for the recovery point ((4, 300) came back as (4, 44)); recovery
/// took the entry's position as the recovery point's batch without reading
/// it, cut the segment there, inside fsynced data, and then refused to
/// open. Recovery now reads the header the entry points at and rebuilds the
/// index when it does not match (`Segment::walk_to`).
#[test]
fn seed_184_a_torn_index_entry_at_the_recovery_point_never_cuts_flushed_data() {
    run(184).unwrap();
}

/// Regression (seed 725): a torn index entry named offset 7 at a position
/// inside the first batch, before the recovery point's batch (offset 3);
/// recovery kept it below the position it scanned from and appended (3, ..)
/// after it: a debug assertion, and an out-of-order index in a release
/// build. Recovery now rebuilds an index with such an entry
/// (`Segment::index_entry_contradicting`).
#[test]
fn seed_725_a_torn_index_entry_naming_a_later_offset_is_rebuilt() {
    run(725).unwrap();
}

/// Regression: a new log's directory was created but its parent never
/// fsynced, so a power loss after the log's first flush took the whole
/// directory, flushed records and all (every seed failed so at first).
/// Recovery now creates directories with `create_dir_durably`.
#[test]
fn a_new_log_directory_survives_a_power_loss_after_its_first_flush() {
    let disk = SimDisk::new(0);
    disk.create_dir_all(Path::new("/data")).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    let config = LogConfig::default();
    let log = open_on(&disk, &config, &clock()).unwrap();
    log.append_as_leader(&batch("a", 3), LeaderEpoch(0))
        .unwrap();
    log.flush().unwrap();
    drop(log);
    disk.lose_power();
    let log = open_on(&disk, &config, &clock()).unwrap();
    assert_eq!(log.log_end_offset(), Offset(3));
}

/// Regression (seed 396): the fsync of the epoch cache's temporary file
/// failed during an append in a new epoch; the append failed but the log
/// went on with the epoch in its cache in memory only. The next batch of
/// that epoch did not write the cache again, was fsynced and acknowledged,
/// and after a power loss recovery took it for damage and cut it (other
/// seeds: fsynced batches read back as `Corrupt`, or the log refused to
/// open). A failed write of the epoch cache or of the log checkpoint now
/// poisons the log, as a failed data fsync does.
#[test]
fn seed_396_a_failed_epoch_cache_write_poisons_the_log() {
    run(396).unwrap();
}

#[test]
fn a_failed_fsync_of_the_epoch_cache_poisons_the_log() {
    let disk = SimDisk::new(0);
    disk.create_dir_all(Path::new("/data")).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    let config = LogConfig {
        flush_policy: FlushPolicy::Always,
        ..LogConfig::default()
    };
    let log = open_on(&disk, &config, &clock()).unwrap();
    log.append_as_leader(&batch("a", 1), LeaderEpoch(0))
        .unwrap();
    // The next fsync is the epoch cache's, for epoch 1.
    disk.fail_with_eio(EioPlan::Nth(1), &[DiskOperation::Sync]);
    let failed = log.append_as_leader(&batch("b", 1), LeaderEpoch(1));
    assert!(failed.is_err());
    assert!(log.is_poisoned());
    let refused = log.append_as_leader(&batch("c", 1), LeaderEpoch(1));
    assert!(
        matches!(refused, Err(Error::Poisoned { .. })),
        "{refused:?}"
    );
    drop(log);
    disk.lose_power();
    let log = open_on(&disk, &config, &clock()).unwrap();
    assert_eq!(log.log_end_offset(), Offset(1));
    assert_eq!(read_everything(&log).unwrap().len(), 1);
}

fn replay_hint(seed: u64, test: &str) -> String {
    format!("replay: ISRLOG_SEED={seed} cargo test --test storage {test}")
}

#[test]
fn random_workloads_and_power_losses_keep_every_flushed_record() {
    let seeds = seeds(200);
    let mut failures = Vec::new();
    let started = std::time::Instant::now();
    for &seed in &seeds {
        let outcome = std::panic::catch_unwind(|| run(seed)).unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("panicked: {message}"))
        });
        if let Err(failure) = outcome {
            eprintln!(
                "seed {seed}: {failure}\n  {}",
                replay_hint(seed, "random_workloads_and_power_losses")
            );
            failures.push(seed);
        }
    }
    let elapsed = started.elapsed();
    eprintln!(
        "{} seeds ({}..={}) in {:.1} s, {:.0} seeds/s",
        seeds.len(),
        seeds.first().copied().unwrap_or(0),
        seeds.last().copied().unwrap_or(0),
        elapsed.as_secs_f64(),
        seeds.len() as f64 / elapsed.as_secs_f64().max(1e-9)
    );
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed: {failures:?}",
        failures.len(),
        seeds.len()
    );
}

#[test]
fn the_same_seed_gives_the_same_disk_byte_for_byte() {
    for seed in [3, 17] {
        assert_eq!(run(seed), run(seed), "seed {seed}");
    }
}

/// A clean log of a few segments on a fresh disk, closed: every byte of
/// its data files lies below the recovery point.
fn closed_log(seed: u64) -> (SimDisk, LogConfig, Vec<Vec<u8>>) {
    let disk = SimDisk::new(seed);
    disk.create_dir_all(Path::new("/data")).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    let config = LogConfig {
        segment_bytes_max: 600,
        index_interval_bytes: 100,
        index_bytes_max: 256,
        ..LogConfig::default()
    };
    let log = open_on(&disk, &config, &clock()).unwrap();
    let mut values = Vec::new();
    for i in 0..30u32 {
        let tag = format!("b{i}");
        log.append_as_leader(&batch(&tag, 3), LeaderEpoch(i / 10))
            .unwrap();
        values.extend((0..3).map(|j| format!("{tag}-{j}").into_bytes()));
    }
    log.close().unwrap();
    (disk, config, values)
}

#[test]
fn a_flipped_bit_in_a_closed_segment_is_corrupt_naming_file_and_position() {
    for seed in seeds(100) {
        let (disk, config, values) = closed_log(seed);
        let (path, position, bit) = disk
            .flip_random_bit(|p| p.extension().is_some_and(|e| e == "log"))
            .unwrap();
        let context = format!(
            "seed {seed}: bit {bit} of byte {position} of {} ({})",
            path.display(),
            replay_hint(seed, "a_flipped_bit_in_a_closed_segment")
        );
        let error = match open_on(&disk, &config, &clock()) {
            Err(error) => error,
            Ok(log) => {
                let served = read_everything(&log);
                match served {
                    Err(error) => error,
                    Ok(served) => panic!(
                        "{context}: the flip went unnoticed; {} records served",
                        served.len()
                    ),
                }
            }
        };
        match &error {
            Error::Corrupt {
                path: named,
                position: at,
                ..
            } => {
                assert_eq!(*named, path, "{context}: {error}");
                assert!(*at <= position, "{context}: named position {at}: {error}");
            }
            other => panic!("{context}: expected Corrupt, got {other}"),
        }
        let _ = values;
    }
}

#[test]
fn a_flipped_bit_in_any_other_file_never_serves_a_wrong_record() {
    for seed in seeds(100) {
        let (disk, config, values) = closed_log(seed);
        let (path, position, bit) = disk
            .flip_random_bit(|p| p.extension().is_none_or(|e| e != "log"))
            .unwrap();
        let context = format!(
            "seed {seed}: bit {bit} of byte {position} of {} ({})",
            path.display(),
            replay_hint(seed, "a_flipped_bit_in_any_other_file")
        );
        let Ok(log) = open_on(&disk, &config, &clock()) else {
            continue;
        };
        if let Ok(served) = read_everything(&log) {
            assert_eq!(served.len(), values.len(), "{context}");
            for (offset, value) in served {
                assert_eq!(value, values[offset as usize], "{context}: offset {offset}");
            }
        }
    }
}
