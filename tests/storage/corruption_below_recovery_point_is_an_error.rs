//! SPEC 2.3 / G5: a flipped byte below the recovery point is
//! `Error::Corrupt` naming the file and byte position; in the unflushed tail
//! it is cut off and reported.

use crate::storage_support::*;
use isrlog::{Error, LeaderEpoch, Offset};

/// Builds a log with three flushed batches and one unflushed one; returns
/// the directory, the data file and the start position of each batch.
fn crashed_log() -> (tempfile::TempDir, std::path::PathBuf, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), dense_index());
    let mut starts = Vec::new();
    let mut at = 0;
    for (i, tag) in ["a", "b", "c", "d"].iter().enumerate() {
        let info = log
            .append_as_leader(&batch(tag, 3), LeaderEpoch(0))
            .unwrap();
        starts.push(at);
        at += log.read(info.base_offset, 1).unwrap().records.len() as u64;
        if i == 2 {
            log.flush().unwrap();
        }
    }
    drop(log);
    let file = segment_files(dir.path()).remove(0);
    (dir, file, starts)
}

fn flip(file: &std::path::Path, position: u64) {
    let mut bytes = std::fs::read(file).unwrap();
    bytes[position as usize] ^= 0x20;
    std::fs::write(file, bytes).unwrap();
}

#[test]
fn flipped_body_byte_below_the_recovery_point_is_corrupt_when_read() {
    let (dir, file, starts) = crashed_log();
    // A value byte of batch "b" (offsets 3..6), which recovery trusts.
    flip(&file, starts[1] + 70);
    let log = open(dir.path(), dense_index());
    assert_eq!(log.recovery_report().recovery_point, Offset(9));
    assert_eq!(log.log_end_offset(), Offset(12));
    match log.read(Offset(4), 1 << 20) {
        Err(Error::Corrupt { path, position, .. }) => {
            assert_eq!(path, file);
            assert_eq!(position, starts[1]);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // The batches around it still read, whole and unchanged.
    for (from, tag) in [(Offset(0), "a"), (Offset(6), "c")] {
        let read = log
            .read(from, 1)
            .unwrap_or_else(|error| panic!("read at {from}: {error}"));
        let batches: Vec<_> = read.batches().map(|b| b.unwrap()).collect();
        assert_eq!(batches.len(), 1, "read at {from} with bytes_max 1");
        assert_eq!(batches[0].base_offset(), from);
        let values: Vec<Vec<u8>> = batches[0]
            .records()
            .map(|r| r.unwrap().value.to_vec())
            .collect();
        let written: Vec<Vec<u8>> = (0..3).map(|i| format!("{tag}-{i}").into_bytes()).collect();
        assert_eq!(values, written, "batch {tag:?}");
    }
}

#[test]
fn flipped_header_byte_below_the_recovery_point_refuses_to_open() {
    let (dir, file, starts) = crashed_log();
    // The magic byte of batch "c": recovery walks this header to find the
    // recovery point. Without the index, it walks every header.
    std::fs::remove_file(dir.path().join("00000000000000000000.index")).unwrap();
    flip(&file, starts[2] + 16);
    match open_with(dir.path(), dense_index(), &clock()) {
        Err(Error::Corrupt {
            path,
            position,
            reason,
        }) => {
            assert_eq!(path, file);
            assert_eq!(position, starts[2]);
            assert!(reason.contains("magic"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn flipped_byte_in_the_unflushed_tail_is_truncated_and_reported() {
    let (dir, file, starts) = crashed_log();
    flip(&file, starts[3] + 70);
    let log = open(dir.path(), dense_index());
    let report = log.recovery_report();
    assert_eq!(log.log_end_offset(), Offset(9));
    assert_eq!(report.truncations.len(), 1);
    let tail = &report.truncations[0];
    assert_eq!(tail.path, file);
    assert_eq!(tail.position, starts[3]);
    assert_eq!(tail.batches, 1, "the corrupt batch was a whole frame");
    assert!(tail.reason.contains("CRC"), "{}", tail.reason);
    assert_eq!(read_all(&log).len(), 9);
}
