//! SPEC 2.1: only the newest segment is written; it rolls when the next
//! batch would take it past `segment_bytes_max`, when it is older than
//! `segment_age_max`, or when its index is full. Files are named by their
//! base offset with 20 digits.

use std::time::Duration;

use crate::storage_support::*;
use isrlog::{LeaderEpoch, LogConfig, Offset};

#[test]
fn segments_roll_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes_max: 1000,
        batch_bytes_max: 1000,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config.clone());
    let mut bases = vec![Offset(0)];
    let mut size = 0u64;
    for i in 0..30 {
        let b = batch(&format!("value-{i:04}"), 5);
        let bytes = b.size_bytes() as u64;
        let info = log.append_as_leader(&b, LeaderEpoch(0)).unwrap();
        if size + bytes > 1000 {
            bases.push(info.base_offset);
            size = 0;
        }
        size += bytes;
    }
    let files = segment_files(dir.path());
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    let expected: Vec<String> = bases.iter().map(|b| format!("{:020}.log", b.0)).collect();
    assert_eq!(names, expected);
    for file in &files {
        assert!(std::fs::metadata(file).unwrap().len() <= 1000);
    }
    assert_eq!(log.stats().segments, bases.len() as u64);
    assert_eq!(log.stats().rolls, bases.len() as u64 - 1);
    // Reads cross the segment boundaries.
    assert_eq!(read_all(&log).len(), 150);
    // A roll makes the finished segment durable and moves the recovery
    // point past it.
    assert!(log.recovery_point() >= *bases.last().unwrap());
    log.close().unwrap();
    // Rolled indexes were trimmed; the reopened log has the same segments.
    let log = open(dir.path(), config);
    assert_eq!(log.stats().segments, bases.len() as u64);
    assert_eq!(read_all(&log).len(), 150);
}

#[test]
fn segments_roll_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let config = LogConfig {
        segment_age_max: Duration::from_secs(3600),
        ..LogConfig::default()
    };
    let log = open_with(dir.path(), config, &clock).unwrap();
    log.append_as_leader(&batch("a", 2), LeaderEpoch(0))
        .unwrap();
    clock.advance(Duration::from_secs(3599));
    log.append_as_leader(&batch("b", 2), LeaderEpoch(0))
        .unwrap();
    assert_eq!(segment_files(dir.path()).len(), 1);
    clock.advance(Duration::from_secs(1));
    let info = log
        .append_as_leader(&batch("c", 2), LeaderEpoch(0))
        .unwrap();
    let files = segment_files(dir.path());
    assert_eq!(files.len(), 2);
    assert!(files[1].ends_with(format!("{:020}.log", info.base_offset.0)));
    assert_eq!(info.base_offset, Offset(4));
    // The new segment's age starts now.
    clock.advance(Duration::from_secs(10));
    log.append_as_leader(&batch("d", 2), LeaderEpoch(0))
        .unwrap();
    assert_eq!(segment_files(dir.path()).len(), 2);
}

#[test]
fn segments_roll_when_the_index_is_full() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        index_bytes_max: 16, // two entries
        index_interval_bytes: 0,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config);
    // Batch 0 needs no entry, batches 1 and 2 fill the index, batch 3 rolls.
    for i in 0..4 {
        log.append_as_leader(&batch(&format!("{i}"), 1), LeaderEpoch(0))
            .unwrap();
    }
    let files = segment_files(dir.path());
    assert_eq!(files.len(), 2);
    assert!(files[1].ends_with("00000000000000000003.log"));
    assert_eq!(read_all(&log).len(), 4);
}
