//! Read throughput and open time of `Log` (issue 2, "Performance"):
//! - sequential read of 256 MiB of 1 KiB records from a warm log, MB/s and
//!   the ratio to `File::read` of the same segment file (target >= 0.7);
//! - open time of a 1 GiB log after a clean close (must not scan: well under
//!   a second) and after a crash with the recovery point at 3/4 (scans only
//!   the last quarter).
//!
//! Criterion measures each (`iter_custom`: one iteration is one pass over
//! the whole file or log, or one open; the logs are built outside the timed
//! part, and before each open after a crash the checkpoint of the crash is
//! put back, since an open moves the recovery point). Its warm-up warms the
//! page cache and the allocator. After its report the figures are printed
//! next to their baselines: read MB/s with the ratio, open times with the
//! bytes they scanned.
//!
//! `cargo bench --bench log_read` runs it; `-- --test` runs each routine
//! once on a log of a few MiB (CI).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use isrlog::{LeaderEpoch, Log, LogConfig, Offset, RecordBatch, RecordBatchBuilder, SystemClock};

const READ_BYTES_MAX: usize = 1 << 20;
/// Criterion's samples per benchmark (its minimum).
const SAMPLES: usize = 10;
/// The log's checkpoint file (recovery point, clean-shutdown flag).
const CHECKPOINT_FILE: &str = "log-state.checkpoint";

/// Criterion's test mode (the rule of its `configure_from_args`): each
/// routine runs once with one iteration, and its time is ignored.
fn quick() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench")
}

fn batch_of_100_kib_records() -> RecordBatch {
    let value = vec![0xA5u8; 1024];
    let mut builder = RecordBatchBuilder::with_capacity(1_700_000_000_000, 110 * 1024);
    for _ in 0..100 {
        builder.push(&value);
    }
    builder.build().expect("batch")
}

fn fill(log: &Log, batch: &RecordBatch, bytes: usize) {
    for _ in 0..bytes / batch.size_bytes() {
        log.append_as_leader(batch, LeaderEpoch(0)).expect("append");
    }
}

fn open(dir: &Path) -> Log {
    Log::open(dir, LogConfig::default(), Arc::new(SystemClock)).expect("open")
}

fn read_file(path: &Path) -> usize {
    let mut buf = vec![0u8; READ_BYTES_MAX];
    let mut file = File::open(path).expect("open");
    let mut total = 0;
    loop {
        let n = file.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        total += n;
    }
    total
}

fn read_log(log: &Log) -> usize {
    let mut next = Offset::ZERO;
    let mut total = 0;
    let end = log.log_end_offset();
    while next < end {
        let result = log.read(next, READ_BYTES_MAX).expect("read");
        total += result.records.len();
        next = result.next_offset().expect("data");
    }
    total
}

/// Times `iters` runs of `pass`, recording each run's time in `times`.
fn timed(iters: u64, times: &mut Vec<Duration>, mut pass: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let start = Instant::now();
        pass();
        let took = start.elapsed();
        times.push(took);
        total += took;
    }
    total
}

/// Printed first in test mode, whose figures come from one tiny run.
fn note_test_mode() {
    if quick() {
        println!(
            "(criterion test mode: one tiny run each; the figures below are not measurements)"
        );
    }
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// The times of criterion's measurement: the runs of its last `SAMPLES`
/// routine calls (`calls` holds how many runs each call made).
fn measured(times: &[Duration], calls: &[u64]) -> Vec<Duration> {
    let runs: u64 = calls[calls.len().saturating_sub(SAMPLES)..].iter().sum();
    times[times.len() - runs as usize..].to_vec()
}

fn sequential_read(c: &mut Criterion) {
    let batch = batch_of_100_kib_records();
    let total: usize = if quick() { 4 << 20 } else { 256 << 20 };
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = open(dir.path());
        fill(&log, &batch, total);
        log.close().expect("close");
    }
    let log = open(dir.path());
    let segment = dir.path().join("00000000000000000000.log");
    let bytes = read_file(&segment);
    assert_eq!(
        read_log(&log),
        bytes,
        "the log returns every byte of the file"
    );

    let (mut file_times, mut file_calls) = (Vec::new(), Vec::new());
    let (mut log_times, mut log_calls) = (Vec::new(), Vec::new());
    let mut group = c.benchmark_group("log_read/sequential_1MiB_reads");
    group
        .sample_size(SAMPLES)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("file_read", |b| {
        b.iter_custom(|iters| {
            file_calls.push(iters);
            timed(iters, &mut file_times, || {
                read_file(&segment);
            })
        })
    });
    group.bench_function("log_read", |b| {
        b.iter_custom(|iters| {
            log_calls.push(iters);
            timed(iters, &mut log_times, || {
                read_log(&log);
            })
        })
    });
    group.finish();

    if file_times.is_empty() || log_times.is_empty() {
        return; // filtered out on the command line
    }
    note_test_mode();
    let mb = bytes as f64 / 1e6;
    let file_times = measured(&file_times, &file_calls);
    let log_times = measured(&log_times, &log_calls);
    let rate = |t: Duration| mb / t.as_secs_f64();
    let (file_best, log_best) = (
        rate(*file_times.iter().min().expect("runs")),
        rate(*log_times.iter().min().expect("runs")),
    );
    let (file_median, log_median) = (rate(median(file_times)), rate(median(log_times)));
    println!("sequential read of {mb:.0} MB in {READ_BYTES_MAX} byte reads:");
    println!("  File::read  best {file_best:6.0} MB/s  median {file_median:6.0} MB/s");
    println!(
        "  Log::read   best {log_best:6.0} MB/s  median {log_median:6.0} MB/s   ratio best/best {:.2}, median/median {:.2} (target >= 0.7; Log::read also checks every CRC)",
        log_best / file_best,
        log_median / file_median
    );
}

/// Builds a log of `bytes` in `dir`: closed cleanly, or crashed (dropped
/// unclosed) after a flush at 3/4. Returns the checkpoint file's bytes.
fn build(dir: &Path, bytes: usize, crashed: bool) -> Vec<u8> {
    let batch = batch_of_100_kib_records();
    let log = open(dir);
    if crashed {
        fill(&log, &batch, bytes / 4 * 3);
        log.flush().expect("flush");
        fill(&log, &batch, bytes / 4);
        drop(log);
    } else {
        fill(&log, &batch, bytes);
        log.close().expect("close");
    }
    std::fs::read(dir.join(CHECKPOINT_FILE)).expect("checkpoint")
}

/// Opens the log in `dir` `iters` times, putting `checkpoint` back before
/// each (untimed); records each open's time and bytes scanned.
fn opens(
    dir: &Path,
    checkpoint: &[u8],
    iters: u64,
    times: &mut Vec<Duration>,
    scanned: &mut Vec<u64>,
) -> Duration {
    let path: PathBuf = dir.join(CHECKPOINT_FILE);
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        std::fs::write(&path, checkpoint).expect("restore checkpoint");
        let start = Instant::now();
        let log = open(dir);
        let took = start.elapsed();
        scanned.push(log.recovery_report().bytes_scanned);
        drop(log);
        times.push(took);
        total += took;
    }
    total
}

fn open_time(c: &mut Criterion) {
    let (bytes, size): (usize, &str) = if quick() {
        (8 << 20, "8MiB")
    } else {
        (1 << 30, "1GiB")
    };
    let mut group = c.benchmark_group(format!("log_read/open_{size}_log"));
    group
        .sample_size(SAMPLES)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_millis(2500));
    let mut results = Vec::new();
    // One log on disk at a time: each is 1 GiB.
    for (name, crashed) in [
        ("after_clean_close", false),
        ("after_crash_recovery_point_at_3_4", true),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let checkpoint = build(dir.path(), bytes, crashed);
        let (mut times, mut calls, mut scanned) = (Vec::new(), Vec::new(), Vec::new());
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                calls.push(iters);
                opens(dir.path(), &checkpoint, iters, &mut times, &mut scanned)
            })
        });
        if times.is_empty() {
            continue; // filtered out on the command line
        }
        let times = measured(&times, &calls);
        let scanned = scanned.last().copied().unwrap_or(0);
        results.push((name, times, scanned));
    }
    group.finish();
    note_test_mode();
    for (name, times, scanned) in results {
        println!(
            "open of a {size} log {name}: median {:?}, min {:?}, max {:?} over {} opens ({} MB scanned each)",
            median(times.clone()),
            times.iter().min().expect("opens"),
            times.iter().max().expect("opens"),
            times.len(),
            scanned / 1_000_000
        );
    }
}

criterion_group!(benches, sequential_read, open_time);
criterion_main!(benches);
