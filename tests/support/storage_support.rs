//! Helpers shared by the storage integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use isrlog::{Log, LogConfig, ManualClock, Offset, RecordBatch, RecordBatchBuilder};

/// Wall-clock start of every test's manual clock.
pub const START_MS: i64 = 1_700_000_000_000;

pub fn clock() -> ManualClock {
    ManualClock::new(START_MS)
}

/// A batch of `count` records whose values name `tag` and the record index.
pub fn batch(tag: &str, count: usize) -> RecordBatch {
    batch_at(tag, count, START_MS)
}

/// Like [`batch`], with the records' timestamp.
pub fn batch_at(tag: &str, count: usize, timestamp_ms: i64) -> RecordBatch {
    let mut b = RecordBatchBuilder::new(timestamp_ms);
    for i in 0..count {
        b.push(format!("{tag}-{i}").as_bytes());
    }
    b.build().unwrap()
}

pub fn open_with(dir: &Path, config: LogConfig, clock: &ManualClock) -> isrlog::Result<Log> {
    Log::open(dir, config, Arc::new(clock.clone()))
}

pub fn open(dir: &Path, config: LogConfig) -> Log {
    open_with(dir, config, &clock()).unwrap()
}

/// Every record from the log start to the log end, as (offset, value),
/// read with small reads so that reads cross batch and segment boundaries.
pub fn read_all(log: &Log) -> Vec<(Offset, Vec<u8>)> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    let end = log.log_end_offset();
    while next < end {
        let result = log.read(next, 1).unwrap();
        assert!(
            !result.is_empty(),
            "empty read at {next} below the end {end}"
        );
        for batch in result.batches() {
            let batch = batch.unwrap();
            for record in batch.records() {
                let record = record.unwrap();
                if record.offset >= next {
                    out.push((record.offset, record.value.to_vec()));
                }
            }
            next = batch.next_offset();
        }
    }
    out
}

/// The segment data files of a log directory, sorted.
pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files
}

/// Copies every file of `from` into the (existing, empty) directory `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// A config whose every batch after a segment's first gets an index entry.
pub fn dense_index() -> LogConfig {
    LogConfig {
        index_interval_bytes: 0,
        ..LogConfig::default()
    }
}
