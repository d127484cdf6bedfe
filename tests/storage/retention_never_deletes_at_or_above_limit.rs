//! SPEC 2.6: retention deletes whole segments from the front, by size and by
//! age, never a segment holding an offset at or above the limit (the high
//! watermark) and never the active segment; it raises the log start offset
//! (checkpointed) and trims the epoch cache.

use std::time::Duration;

use crate::storage_support::*;
use isrlog::{Clock, Error, LeaderEpoch, LogConfig, Offset};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 500,
        batch_bytes_max: 500,
        retention_bytes: Some(1),
        ..LogConfig::default()
    }
}

/// Segment base offsets of a log directory.
fn bases(dir: &std::path::Path) -> Vec<u64> {
    segment_files(dir)
        .iter()
        .map(|p| p.file_stem().unwrap().to_str().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn retention_by_bytes_stops_below_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config());
    for i in 0..20u32 {
        log.append_as_leader(&batch(&format!("v{i}"), 3), LeaderEpoch(i / 10))
            .unwrap();
    }
    let all_bases = bases(dir.path());
    assert!(all_bases.len() >= 5);
    let limit = Offset(all_bases[3] + 1); // inside the fourth segment
    let deleted = log.delete_segments_by_retention(limit).unwrap();
    assert_eq!(deleted, 3);
    assert_eq!(bases(dir.path()), all_bases[3..]);
    assert_eq!(log.log_start_offset(), Offset(all_bases[3]));
    // Nothing more may go while the limit stays.
    assert_eq!(log.delete_segments_by_retention(limit).unwrap(), 0);
    // With the limit at the end, everything but the active segment goes.
    let end = log.log_end_offset();
    log.delete_segments_by_retention(end).unwrap();
    assert_eq!(bases(dir.path()), [*all_bases.last().unwrap()]);
    let start = log.log_start_offset();
    assert_eq!(start, Offset(*all_bases.last().unwrap()));
    // The epoch cache starts at the log start.
    assert_eq!(log.epoch_entries()[0].1, start);
    match log.read(Offset(0), 100) {
        Err(Error::OffsetOutOfRange {
            requested,
            log_start,
            log_end,
        }) => {
            assert_eq!((requested, log_start, log_end), (Offset(0), start, end));
        }
        other => panic!("{other:?}"),
    }
    drop(log);
    let log = open(dir.path(), config());
    assert_eq!(log.log_start_offset(), start);
    assert_eq!(read_all(&log).len() as u64, end.0 - start.0);
}

#[test]
fn retention_by_age_uses_the_newest_record_of_a_segment() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let config = LogConfig {
        retention_bytes: None,
        retention_age: Some(Duration::from_secs(60)),
        ..config()
    };
    let log = open_with(dir.path(), config, &clock).unwrap();
    for i in 0..12 {
        let b = batch_at(&format!("v{i}"), 3, clock.wall_clock_ms());
        log.append_as_leader(&b, LeaderEpoch(0)).unwrap();
        clock.advance(Duration::from_secs(10));
    }
    let all_bases = bases(dir.path());
    assert!(all_bases.len() >= 3);
    let end = log.log_end_offset();
    // The records span 120 s: the oldest segments are past 60 s already,
    // the newest ones are not.
    let before = log.log_start_offset();
    let deleted = log.delete_segments_by_retention(end).unwrap();
    assert!(deleted >= 1);
    assert!(log.log_start_offset() > before);
    assert!(bases(dir.path()).len() >= 2, "recent segments stay");
    clock.advance(Duration::from_secs(3600));
    log.delete_segments_by_retention(end).unwrap();
    assert_eq!(bases(dir.path()), [*all_bases.last().unwrap()]);
}

#[test]
fn set_log_start_offset_deletes_segments_wholly_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config());
    for i in 0..20 {
        log.append_as_leader(&batch(&format!("v{i}"), 3), LeaderEpoch(0))
            .unwrap();
    }
    let all_bases = bases(dir.path());
    let start = Offset(all_bases[2] + 2);
    // Only committed records can be deleted.
    log.set_high_watermark(log.log_end_offset());
    log.set_log_start_offset(start).unwrap();
    assert_eq!(log.log_start_offset(), start);
    assert_eq!(bases(dir.path()), all_bases[2..]);
    let end = log.log_end_offset();
    let below = Offset(all_bases[2]);
    match log.read(below, 10) {
        Err(Error::OffsetOutOfRange {
            requested,
            log_start,
            log_end,
        }) => assert_eq!((requested, log_start, log_end), (below, start, end)),
        other => panic!("read at {below}, below the log start {start}: {other:?}"),
    }
    let at_start = log.read(start, 10).unwrap();
    assert_eq!(at_start.log_start_offset, start);
    let first = at_start
        .batches()
        .next()
        .expect("a batch holds the log start")
        .unwrap();
    assert!(
        first.base_offset() <= start && start <= first.last_offset(),
        "read at {start} returned the batch {}..={}",
        first.base_offset(),
        first.last_offset()
    );
    // A start above the high watermark (here: above the end) is refused
    // and changes nothing; emptying a log is `truncate_fully_and_start_at`.
    match log.set_log_start_offset(Offset(1000)) {
        Err(Error::LogStartAboveHighWatermark {
            requested,
            high_watermark,
        }) => assert_eq!((requested, high_watermark), (Offset(1000), end)),
        other => panic!("a log start above the high watermark: {other:?}"),
    }
    assert_eq!(log.log_start_offset(), start);
    assert_eq!(log.log_end_offset(), end);
    log.truncate_fully_and_start_at(Offset(1000)).unwrap();
    assert_eq!(log.log_end_offset(), Offset(1000));
}

/// Issue 25: a log start between the high watermark and the log end would
/// make uncommitted records count as committed after a restart (G3).
#[test]
fn set_log_start_offset_never_passes_the_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config());
    for i in 0..20 {
        log.append_as_leader(&batch(&format!("v{i}"), 3), LeaderEpoch(0))
            .unwrap();
    }
    let high_watermark = Offset(30);
    log.set_high_watermark(high_watermark);
    match log.set_log_start_offset(Offset(31)) {
        Err(Error::LogStartAboveHighWatermark {
            requested,
            high_watermark: got,
        }) => assert_eq!((requested, got), (Offset(31), high_watermark)),
        other => panic!("a log start above the high watermark: {other:?}"),
    }
    assert_eq!(log.log_start_offset(), Offset(0));
    assert_eq!(log.high_watermark(), high_watermark);
    log.set_log_start_offset(high_watermark).unwrap();
    assert_eq!(log.log_start_offset(), high_watermark);
    assert_eq!(log.high_watermark(), high_watermark);
    drop(log);
    let log = open(dir.path(), config());
    assert_eq!(
        log.high_watermark(),
        high_watermark,
        "nothing uncommitted became committed"
    );
}
