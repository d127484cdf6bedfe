//! SPEC 2.7: `truncate_to(offset)` removes every record `>= offset` across
//! segments, drops epoch cache entries starting at or after it, lets appends
//! continue from there, and is crash safe: a crash between any two of its
//! steps recovers to a prefix that holds everything below `offset`.

use std::path::Path;

use crate::storage_support::*;
use isrlog::{LeaderEpoch, Log, LogConfig, Offset};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 600,
        batch_bytes_max: 600,
        index_interval_bytes: 100,
        ..LogConfig::default()
    }
}

/// 12 batches of 3 records (offsets 0..36) in epochs 0, 2 and 4, spread
/// over several segments.
fn build(dir: &Path) -> Log {
    let log = open(dir, config());
    for i in 0..12u32 {
        let epoch = LeaderEpoch(2 * (i / 4));
        log.append_as_leader(&batch(&format!("v{i}"), 3), epoch)
            .unwrap();
    }
    assert!(log.stats().segments >= 4, "{:?}", log.stats());
    log
}

#[test]
fn truncate_to_removes_the_suffix_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = build(dir.path());
    let before = read_all(&log);
    assert_eq!(
        log.epoch_entries(),
        vec![
            (LeaderEpoch(0), Offset(0)),
            (LeaderEpoch(2), Offset(12)),
            (LeaderEpoch(4), Offset(24))
        ]
    );
    log.set_high_watermark(Offset(30));
    // Offset 12 is where epoch 2 starts: its entry goes too.
    log.truncate_to(Offset(12)).unwrap();
    assert_eq!(log.log_end_offset(), Offset(12));
    assert_eq!(log.epoch_entries(), vec![(LeaderEpoch(0), Offset(0))]);
    assert_eq!(log.last_batch_epoch(), Some(LeaderEpoch(0)));
    assert_eq!(log.high_watermark(), Offset(12));
    assert_eq!(read_all(&log), before[..12]);
    for file in segment_files(dir.path()) {
        let base: u64 = file.file_stem().unwrap().to_str().unwrap().parse().unwrap();
        assert!(base <= 12, "{file:?} should be gone");
    }
    // Appends continue from the new end, in a new epoch.
    let info = log
        .append_as_leader(&batch("new", 2), LeaderEpoch(5))
        .unwrap();
    assert_eq!(info.base_offset, Offset(12));
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(2)).unwrap().end_offset,
        Offset(12)
    );
    // Truncating at or past the end changes nothing.
    log.truncate_to(Offset(100)).unwrap();
    assert_eq!(log.log_end_offset(), Offset(14));
    drop(log);
    // After a crash the truncated log is what recovery finds.
    let log = open(dir.path(), config());
    assert_eq!(log.log_end_offset(), Offset(14));
    assert_eq!(read_all(&log)[..12], before[..12]);
}

#[test]
fn truncate_inside_a_segment_keeps_its_front() {
    let dir = tempfile::tempdir().unwrap();
    let log = build(dir.path());
    let before = read_all(&log);
    log.truncate_to(Offset(27)).unwrap();
    assert_eq!(log.log_end_offset(), Offset(27));
    assert_eq!(log.last_batch_epoch(), Some(LeaderEpoch(4)));
    assert_eq!(read_all(&log), before[..27]);
    log.close().unwrap();
    let log = open(dir.path(), config());
    assert!(log.recovery_report().is_clean());
    assert_eq!(read_all(&log), before[..27]);
}

/// Simulates a crash after each step of `truncate_to` by assembling the
/// directory from the files before and after the truncation: the files a
/// step has already changed come from "after", the rest from "before".
#[test]
fn truncate_to_is_crash_safe_between_steps() {
    let before_dir = tempfile::tempdir().unwrap();
    let after_dir = tempfile::tempdir().unwrap();
    let offset = Offset(15);
    {
        let log = build(before_dir.path());
        log.flush().unwrap();
        drop(log); // crash, with everything flushed
    }
    copy_dir(before_dir.path(), after_dir.path());
    let expected = {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(before_dir.path(), copy.path());
        read_all(&open(copy.path(), config()))
    };
    {
        let log = open(after_dir.path(), config());
        log.truncate_to(offset).unwrap();
        drop(log);
    }
    let before_segments = segment_files(before_dir.path());
    let after_segments = segment_files(after_dir.path());
    let cut_segment = after_segments
        .last()
        .unwrap()
        .file_name()
        .unwrap()
        .to_owned();

    // Steps: 1 checkpoint lowered, 2 file cut (+ index), 3 later segments
    // deleted (newest first: k of them), 4 epoch cache fixed.
    let later: Vec<_> = before_segments
        .iter()
        .filter(|p| {
            !after_segments
                .iter()
                .any(|a| a.file_name() == p.file_name())
        })
        .cloned()
        .collect();
    assert!(later.len() >= 2);
    let mut states = vec![];
    for step in 0..=2 {
        states.push((step, 0));
    }
    for deleted in 1..=later.len() {
        states.push((3, deleted));
    }
    states.push((4, later.len()));
    for (step, deleted) in states {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(before_dir.path(), dir.path());
        let take_after = |name: &str| {
            std::fs::copy(after_dir.path().join(name), dir.path().join(name)).unwrap();
        };
        if step >= 1 {
            take_after("log-state.checkpoint");
        }
        if step >= 2 {
            let name = cut_segment.to_str().unwrap();
            take_after(name);
            take_after(&name.replace(".log", ".index"));
        }
        for path in later.iter().rev().take(deleted) {
            std::fs::remove_file(dir.path().join(path.file_name().unwrap())).unwrap();
            std::fs::remove_file(
                dir.path()
                    .join(path.file_name().unwrap())
                    .with_extension("index"),
            )
            .unwrap();
        }
        if step >= 4 {
            take_after("leader-epoch.checkpoint");
        }
        let log = open(dir.path(), config());
        let end = log.log_end_offset();
        assert!(end >= offset, "step {step}/{deleted}: end {end}");
        let got = read_all(&log);
        assert_eq!(got, expected[..end.0 as usize], "step {step}/{deleted}");
        assert!(
            log.epoch_entries().iter().all(|(_, start)| *start < end),
            "step {step}/{deleted}: {:?}",
            log.epoch_entries()
        );
        // Finishing the truncation after the crash gives the same log.
        log.truncate_to(offset).unwrap();
        assert_eq!(read_all(&log), expected[..offset.0 as usize]);
    }
}

#[test]
fn truncate_fully_and_start_at_restarts_an_empty_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = build(dir.path());
    log.truncate_fully_and_start_at(Offset(100)).unwrap();
    assert_eq!(log.log_start_offset(), Offset(100));
    assert_eq!(log.log_end_offset(), Offset(100));
    assert!(log.epoch_entries().is_empty());
    assert_eq!(log.last_batch_epoch(), None);
    assert_eq!(segment_files(dir.path()).len(), 1);
    let info = log
        .append_as_leader(&batch("x", 2), LeaderEpoch(7))
        .unwrap();
    assert_eq!(info.base_offset, Offset(100));
    drop(log);
    let log = open(dir.path(), config());
    assert_eq!(log.log_start_offset(), Offset(100));
    assert_eq!(log.log_end_offset(), Offset(102));
}
