//! Append throughput of `Log` against plain file writes measured in the same
//! run (issue 2, "Performance"):
//! - `FlushPolicy::Never`: 1 KiB records in batches of 100, MB/s and the
//!   ratio to `File::write_all` of the same bytes (target >= 0.8);
//! - `FlushPolicy::Always` with 4 concurrent appenders: commits/s and the
//!   ratio to one thread doing `write_all + sync_data` per 100 KiB batch
//!   (target >= 2x).
//!
//! Criterion measures each (`iter_custom`: one iteration is one 100 KiB
//! batch, or one commit; every sample writes a fresh file or log, created
//! and deleted outside the timed part; a group-commit sample is a round of
//! `COMMITS_PER_ROUND` commits). Its warm-up is ours too: freshly
//! freed memory is slow to reuse on this VM. The fsync latency of the shared
//! disk swings by 10x from second to second, so each group-commit sample
//! runs its baseline (the same number of single-thread commits) just before
//! it: the rounds alternate, and after criterion's report every round's
//! ratio is printed with the appends per fsync, then the median.
//!
//! `cargo bench --bench log_append` runs it; `-- --test` runs each routine
//! once on a few batches (CI).

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use isrlog::{
    FlushPolicy, LeaderEpoch, Log, LogConfig, RecordBatch, RecordBatchBuilder, SystemClock,
};

/// Criterion's samples per benchmark (its minimum).
const SAMPLES: usize = 10;
/// Batches, or commits, per routine call in criterion's test mode.
const QUICK_ITERATIONS: u64 = 20;
/// Concurrent appenders of the group-commit case.
const APPENDERS: usize = 4;
/// Commits per group-commit round (and per baseline round). Fixed, rather
/// than criterion's iteration count (which it derives from its warm-up and
/// which varied from about 200 to 2200 between runs), so every run measures
/// rounds of the same shape; criterion gets the round's time scaled to its
/// iteration count, i.e. the measured time per commit.
const COMMITS_PER_ROUND: u64 = 1500;

fn batch_of_100_kib_records() -> RecordBatch {
    let value = vec![0x5Au8; 1024];
    let mut builder = RecordBatchBuilder::with_capacity(1_700_000_000_000, 110 * 1024);
    for _ in 0..100 {
        builder.push(&value);
    }
    builder.build().expect("batch")
}

/// Criterion's test mode (the rule of its `configure_from_args`): each
/// routine runs once with one iteration, and its time is ignored.
fn quick() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench")
}

fn iterations(iters: u64) -> u64 {
    if quick() {
        QUICK_ITERATIONS
    } else {
        iters
    }
}

fn plain_write(dir: &std::path::Path, batch: &[u8], count: u64) -> Duration {
    let path = dir.join("plain.bin");
    let start = Instant::now();
    let mut file = File::create(&path).expect("create");
    for _ in 0..count {
        file.write_all(batch).expect("write");
    }
    let elapsed = start.elapsed();
    drop(file);
    std::fs::remove_file(&path).expect("remove");
    elapsed
}

fn log_append(batch: &RecordBatch, count: u64) -> Duration {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), LogConfig::default(), Arc::new(SystemClock)).expect("open");
    let start = Instant::now();
    for _ in 0..count {
        log.append_as_leader(batch, LeaderEpoch(0)).expect("append");
    }
    start.elapsed()
}

/// One thread, `write_all` of `per_sync` batches then one `sync_data`,
/// until `count` batches are written: batches (commits) per second. With
/// `per_sync` 1 it is the baseline; with `per_sync` = `APPENDERS` it is a
/// reference for group commit on this disk: every fsync covering one batch
/// of each appender, with no thread hand-off at all (not a strict bound:
/// the log may overlap writes with an fsync in flight).
fn plain_write_and_sync(dir: &std::path::Path, batch: &[u8], count: u64, per_sync: u64) -> f64 {
    let path = dir.join("plain-sync.bin");
    let mut file = File::create(&path).expect("create");
    let start = Instant::now();
    let mut written = 0;
    while written < count {
        for _ in 0..per_sync.min(count - written) {
            file.write_all(batch).expect("write");
            written += 1;
        }
        file.sync_data().expect("fsync");
    }
    let rate = count as f64 / start.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path).expect("remove");
    rate
}

/// `APPENDERS` threads appending under `FlushPolicy::Always` to a fresh
/// log until `count` appends returned: the time, and the fsyncs they took.
fn group_commit(batch: &RecordBatch, count: u64) -> (Duration, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        flush_policy: FlushPolicy::Always,
        ..LogConfig::default()
    };
    let log = Arc::new(Log::open(dir.path(), config, Arc::new(SystemClock)).expect("open"));
    let tickets = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..APPENDERS)
        .map(|_| {
            let (log, batch, tickets) = (log.clone(), batch.clone(), tickets.clone());
            std::thread::spawn(move || {
                while tickets.fetch_add(1, Ordering::Relaxed) < count {
                    log.append_as_leader(&batch, LeaderEpoch(0))
                        .expect("append");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("join");
    }
    let elapsed = start.elapsed();
    (elapsed, log.stats().fsyncs)
}

/// Throughputs of the last `SAMPLES` routine calls (criterion's
/// measurement; the calls before them are its warm-up, see
/// `Routine::sample` in criterion 0.5), in units per second.
fn measured(calls: &[(u64, Duration)]) -> Vec<f64> {
    calls[calls.len().saturating_sub(SAMPLES)..]
        .iter()
        .map(|(n, t)| *n as f64 / t.as_secs_f64())
        .collect()
}

/// Printed first in test mode, whose figures come from one tiny run.
fn note_test_mode() {
    if quick() {
        println!(
            "(criterion test mode: one tiny run each; the figures below are not measurements)"
        );
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn best(values: &[f64]) -> f64 {
    values.iter().copied().fold(0.0, f64::max)
}

fn flush_never(c: &mut Criterion) {
    let batch = batch_of_100_kib_records();
    let bytes = batch.as_bytes().clone();
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut plain: Vec<(u64, Duration)> = Vec::new();
    let mut logged: Vec<(u64, Duration)> = Vec::new();

    let mut group = c.benchmark_group("log_append/flush_never/100x1KiB_batches");
    group
        .sample_size(SAMPLES)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_millis(800))
        .throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("file_write_all", |b| {
        b.iter_custom(|iters| {
            let count = iterations(iters);
            let took = plain_write(scratch.path(), &bytes, count);
            plain.push((count, took));
            took
        })
    });
    group.bench_function("log_append_as_leader", |b| {
        b.iter_custom(|iters| {
            let count = iterations(iters);
            let took = log_append(&batch, count);
            logged.push((count, took));
            took
        })
    });
    group.finish();

    if plain.is_empty() || logged.is_empty() {
        return; // filtered out on the command line
    }
    note_test_mode();
    let mb = bytes.len() as f64 / 1e6;
    let plain = measured(&plain);
    let logged = measured(&logged);
    println!(
        "append, FlushPolicy::Never, 100 x 1 KiB batches, {} samples each:",
        plain.len()
    );
    println!(
        "  File::write_all  best {:6.0} MB/s  median {:6.0} MB/s",
        best(&plain) * mb,
        median(plain.clone()) * mb
    );
    println!(
        "  Log::append      best {:6.0} MB/s  median {:6.0} MB/s   ratio best/best {:.2}, median/median {:.2} (target >= 0.8)",
        best(&logged) * mb,
        median(logged.clone()) * mb,
        best(&logged) / best(&plain),
        median(logged) / median(plain)
    );
}

/// What one group-commit round measured.
struct Round {
    baseline_commits_per_s: f64,
    reference_commits_per_s: f64,
    commits: u64,
    took: Duration,
    fsyncs: u64,
}

fn flush_always(c: &mut Criterion) {
    let batch = batch_of_100_kib_records();
    let bytes = batch.as_bytes().clone();
    let scratch = tempfile::tempdir().expect("tempdir");
    let cases = ["4_appenders"];
    let mut rounds: Vec<Vec<Round>> = cases.iter().map(|_| Vec::new()).collect();

    let mut group = c.benchmark_group("log_append/flush_always/100KiB_batches");
    group
        .sample_size(SAMPLES)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    for (name, rounds) in cases.iter().zip(rounds.iter_mut()) {
        group.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                let count = if quick() {
                    QUICK_ITERATIONS
                } else {
                    COMMITS_PER_ROUND
                };
                // The baseline of this round, just before it, untimed by
                // criterion (which times the group commit).
                let baseline = plain_write_and_sync(scratch.path(), &bytes, count, 1);
                let reference =
                    plain_write_and_sync(scratch.path(), &bytes, count, APPENDERS as u64);
                let (took, fsyncs) = group_commit(&batch, count);
                rounds.push(Round {
                    baseline_commits_per_s: baseline,
                    reference_commits_per_s: reference,
                    commits: count,
                    took,
                    fsyncs,
                });
                took.mul_f64(iters as f64 / count as f64)
            })
        });
    }
    group.finish();

    note_test_mode();
    for (name, rounds) in cases.iter().zip(rounds) {
        if rounds.is_empty() {
            continue; // filtered out on the command line
        }
        let measured = &rounds[rounds.len().saturating_sub(SAMPLES)..];
        println!(
            "append, FlushPolicy::Always, 100 KiB batches, {APPENDERS} appenders ({name}), {} alternating rounds:",
            measured.len()
        );
        let mut ratios = Vec::new();
        let mut reference_ratios = Vec::new();
        let mut of_reference = Vec::new();
        for (i, round) in measured.iter().enumerate() {
            let rate = round.commits as f64 / round.took.as_secs_f64();
            let ratio = rate / round.baseline_commits_per_s;
            ratios.push(ratio);
            reference_ratios.push(round.reference_commits_per_s / round.baseline_commits_per_s);
            of_reference.push(rate / round.reference_commits_per_s);
            println!(
                "  round {i}: 1 thread write_all + sync_data {:7.0} commits/s | reference ({APPENDERS} writes per sync_data) {:7.0} | Log, {APPENDERS} appenders {rate:7.0} commits/s | ratio {ratio:.2} | {} appends shared {} fsyncs ({:.2} per fsync)",
                round.baseline_commits_per_s,
                round.reference_commits_per_s,
                round.commits,
                round.fsyncs,
                round.commits as f64 / round.fsyncs.max(1) as f64
            );
        }
        println!(
            "  median ratio {:.2} (target >= 2); reference on this disk, one thread writing {APPENDERS} batches per sync_data: median {:.2} of the baseline; group commit reaches {:.2} of that reference",
            median(ratios),
            median(reference_ratios),
            median(of_reference)
        );
    }
}

criterion_group!(benches, flush_never, flush_always);
criterion_main!(benches);
