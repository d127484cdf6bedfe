//! Read throughput and open time of `Log` (issue 2, "Performance"):
//! - sequential read of 256 MiB of 1 KiB records from a warm log, MB/s and
//!   the ratio to `File::read` of the same segment file (target >= 0.7);
//! - open time of a 1 GiB log after a clean close (must not scan) and after
//!   a crash with the recovery point at 3/4 (scans only the last quarter).
//!
//! `cargo bench --bench log_read` runs it; `-- --test` runs a tiny version.

use std::fs::File;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use isrlog::{LeaderEpoch, Log, LogConfig, Offset, RecordBatch, RecordBatchBuilder, SystemClock};

const READ_BYTES_MAX: usize = 1 << 20;

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

fn open(dir: &std::path::Path) -> Log {
    Log::open(dir, LogConfig::default(), Arc::new(SystemClock)).expect("open")
}

fn read_file(path: &std::path::Path) -> (Duration, usize) {
    let mut buf = vec![0u8; READ_BYTES_MAX];
    let start = Instant::now();
    let mut file = File::open(path).expect("open");
    let mut total = 0;
    loop {
        let n = file.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        total += n;
    }
    (start.elapsed(), total)
}

fn read_log(log: &Log) -> (Duration, usize) {
    let start = Instant::now();
    let mut next = Offset::ZERO;
    let mut total = 0;
    let end = log.log_end_offset();
    while next < end {
        let result = log.read(next, READ_BYTES_MAX).expect("read");
        total += result.records.len();
        next = result.next_offset().expect("data");
    }
    (start.elapsed(), total)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--test");
    let batch = batch_of_100_kib_records();
    let read_total: usize = if quick { 4 << 20 } else { 256 << 20 };
    let open_total: usize = if quick { 8 << 20 } else { 1 << 30 };

    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = open(dir.path());
        fill(&log, &batch, read_total);
        log.close().expect("close");
    }
    let log = open(dir.path());
    let segment = dir.path().join("00000000000000000000.log");
    // Warm the page cache and the allocator.
    read_file(&segment);
    read_log(&log);
    let rounds = if quick { 1 } else { 5 };
    let (mut best_file, mut best_log) = (Duration::MAX, Duration::MAX);
    let mut bytes = 0;
    for _ in 0..rounds {
        let (t, n) = read_file(&segment);
        best_file = best_file.min(t);
        let (t, m) = read_log(&log);
        assert_eq!(n, m, "the log returned every byte of the file");
        best_log = best_log.min(t);
        bytes = n;
    }
    let mb = bytes as f64 / 1e6;
    let file_mbps = mb / best_file.as_secs_f64();
    let log_mbps = mb / best_log.as_secs_f64();
    println!("sequential read of {mb:.0} MB in {READ_BYTES_MAX} byte reads, best of {rounds}:");
    println!("  File::read  {file_mbps:8.0} MB/s");
    println!(
        "  Log::read   {log_mbps:8.0} MB/s   ratio {:.2} (target >= 0.7; Log::read also checks every CRC)",
        log_mbps / file_mbps
    );
    drop(log);
    drop(dir);

    // Open time after a clean close and after a crash.
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = open(dir.path());
        fill(&log, &batch, open_total);
        log.close().expect("close");
    }
    let start = Instant::now();
    let log = open(dir.path());
    let clean = start.elapsed();
    let clean_scanned = log.recovery_report().bytes_scanned;
    drop(log);
    println!(
        "open of a {} MB log after a clean close: {clean:?} ({clean_scanned} bytes scanned)",
        open_total / 1_000_000
    );
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = open(dir.path());
        fill(&log, &batch, open_total / 4 * 3);
        log.flush().expect("flush");
        fill(&log, &batch, open_total / 4);
        // Dropped without close: a crash.
    }
    let start = Instant::now();
    let log = open(dir.path());
    let crashed = start.elapsed();
    let report = log.recovery_report();
    println!(
        "open of a {} MB log after a crash, recovery point at 3/4: {crashed:?} ({} MB scanned, {} batches)",
        open_total / 1_000_000,
        report.bytes_scanned / 1_000_000,
        report.batches_scanned
    );
}
