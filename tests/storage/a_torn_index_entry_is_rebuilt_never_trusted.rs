//! SPEC 2.3 / G5: an offset index entry that passes the file's own checks
//! (increasing, inside the data) but does not describe the data, as a power
//! loss that kept part of an index write leaves it, makes recovery rebuild
//! the index; it never moves the recovery point into the middle of a batch
//! (which cut fsynced records or refused to open) and never breaks the
//! order of the entries (a debug assertion, and lookups that go wrong in a
//! release build).
//!
//! Found by the simulated disk (issue 28): seeds 184 and 725 of
//! `sim_disk_power_loss_keeps_what_was_flushed`, which replay the same
//! damage there.

use crate::storage_support::*;
use isrlog::{LeaderEpoch, LogConfig, Offset};

fn config() -> LogConfig {
    LogConfig {
        index_bytes_max: 4096,
        ..dense_index()
    }
}

/// Four batches of three records, the first two flushed (recovery point 6),
/// then a crash; returns the directory and the batches' start positions.
fn crashed_log() -> (tempfile::TempDir, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config());
    let mut starts = Vec::new();
    let mut at = 0;
    for (i, tag) in ["a", "b", "c", "d"].iter().enumerate() {
        let info = log
            .append_as_leader(&batch(tag, 3), LeaderEpoch(0))
            .unwrap();
        starts.push(at);
        at += log.read(info.base_offset, 1).unwrap().records.len() as u64;
        if i == 1 {
            log.flush().unwrap();
        }
    }
    assert_eq!(log.recovery_point(), Offset(6));
    drop(log);
    (dir, starts)
}

fn entry(relative_offset: u32, position: u32) -> Vec<u8> {
    [relative_offset.to_le_bytes(), position.to_le_bytes()].concat()
}

fn write_index(dir: &std::path::Path, entries: &[Vec<u8>]) {
    let mut bytes = entries.concat();
    bytes.resize(4096, 0);
    std::fs::write(dir.join("00000000000000000000.index"), bytes).unwrap();
}

fn assert_everything_kept(dir: &std::path::Path) {
    let log = open_with(dir, config(), &clock())
        .unwrap_or_else(|e| panic!("the log refused to open: {e}"));
    let report = log.recovery_report();
    assert_eq!(report.indexes_rebuilt.len(), 1, "{report:?}");
    assert!(report.truncations.is_empty(), "{report:?}");
    assert_eq!(log.log_end_offset(), Offset(12));
    let values: Vec<Vec<u8>> = read_all(&log).into_iter().map(|(_, v)| v).collect();
    let expected: Vec<Vec<u8>> = ["a", "b", "c", "d"]
        .iter()
        .flat_map(|tag| (0..3).map(move |i| format!("{tag}-{i}").into_bytes()))
        .collect();
    assert_eq!(values, expected);
}

#[test]
fn an_entry_for_the_recovery_point_inside_a_batch_is_rebuilt_not_cut_there() {
    let (dir, starts) = crashed_log();
    // The entry for offset 6 (batch "c", at starts[2]) came back torn: its
    // position is inside batch "b", which was fsynced. Increasing and inside
    // the data, so the file's check accepts it.
    let torn = starts[1] as u32 + 20;
    assert!(u64::from(torn) < starts[2]);
    write_index(dir.path(), &[entry(3, starts[1] as u32), entry(6, torn)]);
    assert_everything_kept(dir.path());
}

#[test]
fn an_entry_naming_a_later_offset_before_the_scan_is_rebuilt() {
    let (dir, starts) = crashed_log();
    // An entry for offset 9 at a position before the recovery point's
    // batch: recovery scans from batch "c" (offset 6) and would add (6, ..)
    // after (9, 23).
    write_index(dir.path(), &[entry(9, 23)]);
    let _ = starts;
    assert_everything_kept(dir.path());
}
