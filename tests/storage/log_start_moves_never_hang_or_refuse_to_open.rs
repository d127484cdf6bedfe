//! Issue 25, the log-start defects on the paths that deletion will use
//! (SPEC 2.6, 2.7): a truncation below the log start must not hang, a crash
//! inside a restart of the log must reopen, and a crash after the log start
//! moved above a leader change must reopen.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use crate::storage_support::*;
use isrlog::{LeaderEpoch, Log, LogConfig, Offset};

/// Small segments, so that the log start can move by whole segments.
fn config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 600,
        batch_bytes_max: 600,
        index_interval_bytes: 100,
        ..LogConfig::default()
    }
}

/// Segments large enough that these tests' logs stay in one.
fn one_segment() -> LogConfig {
    LogConfig {
        segment_bytes_max: 1 << 20,
        ..LogConfig::default()
    }
}

/// 60 records in batches of 3, epoch 0, all committed; the log start then
/// moved to the second segment's base plus one batch.
fn log_with_a_raised_start(dir: &Path) -> (Log, Offset) {
    let log = open(dir, config());
    for i in 0..20 {
        log.append_as_leader(&batch(&format!("v{i}"), 3), LeaderEpoch(0))
            .unwrap();
    }
    log.set_high_watermark(log.log_end_offset());
    let second = segment_files(dir)
        .get(1)
        .and_then(|path| path.file_stem()?.to_str()?.parse::<u64>().ok())
        .expect("a second segment");
    let start = Offset(second + 3);
    log.set_log_start_offset(start).unwrap();
    assert_eq!(log.log_start_offset(), start);
    (log, start)
}

/// Before: `truncate_to` held the checkpoint lock and called
/// `truncate_fully_and_start_at`, which took it again: the caller (a
/// follower's fetcher) hung for ever.
#[test]
fn truncate_to_below_the_log_start_restarts_the_log_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let (log, start) = log_with_a_raised_start(dir.path());
    let target = Offset(start.0 - 5);
    let (done, finished) = mpsc::channel();
    let log = std::sync::Arc::new(log);
    let truncating = std::sync::Arc::clone(&log);
    std::thread::spawn(move || {
        let _ = done.send(truncating.truncate_to(target));
    });
    let outcome = finished
        .recv_timeout(Duration::from_secs(20))
        .expect("truncate_to below the log start returned (it used to hang)");
    outcome.unwrap();
    assert_eq!(log.log_start_offset(), target);
    assert_eq!(log.log_end_offset(), target);
    assert_eq!(log.high_watermark(), target);
    assert!(log.epoch_entries().is_empty());
    let info = log
        .append_as_leader(&batch("after", 2), LeaderEpoch(3))
        .unwrap();
    assert_eq!(info.base_offset, target);
    drop(log);
    let log = open(dir.path(), config());
    assert_eq!(log.log_start_offset(), target);
    assert_eq!(log.log_end_offset(), Offset(target.0 + 2));
}

/// A crash inside `truncate_fully_and_start_at`, at each step: checkpoint
/// written, old segments deleted newest first (each count), new empty
/// segment created. Every state reopens, as a prefix of the old log from
/// its start or as an empty log. The checkpoint of the intermediate states
/// is the one the restart really writes first, caught by making the
/// creation of the new segment fail (a directory in its place). Before, its
/// recovery point was the old start, above the new empty segment when the
/// new offset was lower, and recovery refused to open.
#[test]
fn a_crash_at_any_step_of_a_restart_reopens() {
    for restart_at in [Offset(4), Offset(500)] {
        let before = tempfile::tempdir().unwrap();
        let old_start = {
            let (log, start) = log_with_a_raised_start(before.path());
            log.flush().unwrap();
            start
        };
        let after = tempfile::tempdir().unwrap();
        copy_dir(before.path(), after.path());
        {
            let log = open(after.path(), config());
            log.truncate_fully_and_start_at(restart_at).unwrap();
        }
        let new_segment = segment_files(after.path());
        assert_eq!(new_segment.len(), 1);
        let new_name = new_segment[0].file_name().unwrap().to_owned();
        let probe = tempfile::tempdir().unwrap();
        copy_dir(before.path(), probe.path());
        {
            let log = open(probe.path(), config());
            std::fs::create_dir(probe.path().join(&new_name)).unwrap();
            assert!(
                log.truncate_fully_and_start_at(restart_at).is_err(),
                "the new segment cannot be created over a directory"
            );
        }
        let checkpoint = probe.path().join("log-state.checkpoint");
        let old_segments = segment_files(before.path());
        // (old segments deleted, new segment present)
        let mut states: Vec<(usize, bool)> = (0..=old_segments.len()).map(|k| (k, false)).collect();
        states.push((old_segments.len(), true));
        for (deleted, created) in states {
            let dir = tempfile::tempdir().unwrap();
            copy_dir(before.path(), dir.path());
            std::fs::copy(&checkpoint, dir.path().join("log-state.checkpoint")).unwrap();
            for path in old_segments.iter().rev().take(deleted) {
                let name = path.file_name().unwrap();
                std::fs::remove_file(dir.path().join(name)).unwrap();
                let _ = std::fs::remove_file(dir.path().join(name).with_extension("index"));
            }
            if created {
                std::fs::copy(&new_segment[0], dir.path().join(&new_name)).unwrap();
            }
            let what = format!(
                "restart at {restart_at}, {deleted} of {} old segments deleted, new one created: {created}",
                old_segments.len()
            );
            let log = open_with(dir.path(), config(), &clock())
                .unwrap_or_else(|e| panic!("{what}: the log must reopen: {e}"));
            let (start, end) = (log.log_start_offset(), log.log_end_offset());
            if deleted == 0 {
                assert_eq!((start, end), (old_start, Offset(60)), "{what}");
            } else if deleted < old_segments.len() {
                assert_eq!(start, old_start, "{what}: a prefix from the old start");
                assert!(end < Offset(60), "{what}");
            } else {
                assert_eq!(start, end, "{what}: empty");
                assert!(start == old_start || start == restart_at, "{what}: {start}");
            }
            let info = log
                .append_as_leader(&batch("next", 1), LeaderEpoch(5))
                .unwrap();
            assert_eq!(info.base_offset, end, "{what}: appends continue at the end");
        }
    }
}

/// Before: raising the log start rewrote the epoch cache's first entry to
/// start there, but the checkpoint kept the recovery point at the flushed
/// offset, below it. After a crash, recovery checked the batches between
/// the two against the rewritten cache, found "wrong" epochs below a
/// leader change and refused to open (`Corrupt`, "delete this log's
/// directory"), under the default `FlushPolicy::Never`.
#[test]
fn a_crash_after_the_log_start_passed_a_leader_change_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let big_segments = one_segment();
    let expected = {
        let log = open(dir.path(), big_segments.clone());
        for i in 0..5 {
            log.append_as_leader(&batch(&format!("e0-{i}"), 2), LeaderEpoch(0))
                .unwrap();
        }
        for i in 0..5 {
            log.append_as_leader(&batch(&format!("e1-{i}"), 2), LeaderEpoch(1))
                .unwrap();
        }
        log.set_high_watermark(log.log_end_offset());
        // Above the leader change at 10, inside the only segment: nothing
        // is deleted, the cache now starts at (epoch 1, 14).
        log.set_log_start_offset(Offset(14)).unwrap();
        let expected = read_all(&log);
        drop(log); // a crash: no clean shutdown, nothing flushed
        expected
    };
    let log = open_with(dir.path(), big_segments, &clock())
        .unwrap_or_else(|e| panic!("the log must reopen after a crash: {e}"));
    assert_eq!(log.log_start_offset(), Offset(14));
    assert_eq!(log.log_end_offset(), Offset(20));
    assert_eq!(read_all(&log), expected);
    assert_eq!(log.last_batch_epoch(), Some(LeaderEpoch(1)));
}

/// A log start move trims the epoch cache in memory only (issue 25: its
/// fsync no longer runs under the log's lock); the file keeps the older
/// entries until it is next written. Both states reopen after a crash:
/// the file not yet written (older entries, a batch below the log start
/// carrying a later epoch than the file's first entry), and written again
/// by a later leader change (entries from the log start on).
#[test]
fn a_crash_after_a_log_start_move_reopens_whether_or_not_the_epoch_file_was_written_since() {
    for leader_change_after in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let big_segments = one_segment();
        let expected = {
            let log = open(dir.path(), big_segments.clone());
            for (epoch, count) in [(0, 3), (2, 3), (5, 3)] {
                for i in 0..count {
                    log.append_as_leader(&batch(&format!("e{epoch}-{i}"), 2), LeaderEpoch(epoch))
                        .unwrap();
                }
            }
            log.set_high_watermark(log.log_end_offset());
            // Inside epoch 2's batches: entries 0@0 and 2@6 become 2@8.
            log.set_log_start_offset(Offset(8)).unwrap();
            assert_eq!(
                log.epoch_entries(),
                vec![(LeaderEpoch(2), Offset(8)), (LeaderEpoch(5), Offset(12))]
            );
            if leader_change_after {
                log.append_as_leader(&batch("e7", 2), LeaderEpoch(7))
                    .unwrap();
                log.set_high_watermark(log.log_end_offset());
            }
            let expected = read_all(&log);
            drop(log); // a crash: no clean shutdown, nothing flushed
            expected
        };
        let log = open_with(dir.path(), big_segments, &clock()).unwrap_or_else(|e| {
            panic!("leader change after: {leader_change_after}: the log must reopen: {e}")
        });
        assert_eq!(log.log_start_offset(), Offset(8));
        assert_eq!(read_all(&log), expected);
        assert_eq!(
            log.epoch_entries().first(),
            Some(&(LeaderEpoch(2), Offset(8))),
            "the open trims the cache to the log start"
        );
    }
}
