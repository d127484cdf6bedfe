//! SPEC 2.3 / G5: a torn tail at any byte of the last batches recovers to
//! the last complete batch, reports the cut, and never refuses to open.

use crate::storage_support::*;
use isrlog::{LeaderEpoch, LogConfig, Offset};

/// A small preallocated index, so that copying the directory for each of
/// the hundreds of cuts stays cheap.
fn config() -> LogConfig {
    LogConfig {
        index_bytes_max: 4096,
        ..dense_index()
    }
}

#[test]
fn torn_tail_recovers_to_last_complete_batch() {
    let original = tempfile::tempdir().unwrap();
    let (b_start, c_start, c_end) = {
        let log = open(original.path(), config());
        log.append_as_leader(&batch("a", 3), LeaderEpoch(0))
            .unwrap();
        log.flush().unwrap();
        log.append_as_leader(&batch("b", 3), LeaderEpoch(0))
            .unwrap();
        log.append_as_leader(&batch("c", 4), LeaderEpoch(1))
            .unwrap();
        let a = log.read(Offset(0), 1).unwrap().records.len() as u64;
        let b = log.read(Offset(3), 1).unwrap().records.len() as u64;
        let c = log.read(Offset(6), 1).unwrap().records.len() as u64;
        // Dropped without close: a crash with the recovery point at 3.
        (a, a + b, a + b + c)
    };
    let data_file = segment_files(original.path()).remove(0);
    let full = std::fs::read(&data_file).unwrap();
    assert_eq!(full.len() as u64, c_end);
    let expected_all = {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(original.path(), copy.path());
        read_all(&open(copy.path(), config()))
    };
    assert_eq!(expected_all.len(), 10);

    for cut in b_start..=c_end {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(original.path(), dir.path());
        let file = dir.path().join(data_file.file_name().unwrap());
        std::fs::write(&file, &full[..cut as usize]).unwrap();

        let log = open(dir.path(), config());
        let (boundary, end, epoch) = if cut < c_start {
            (b_start, Offset(3), LeaderEpoch(0))
        } else if cut < c_end {
            (c_start, Offset(6), LeaderEpoch(0))
        } else {
            (c_end, Offset(10), LeaderEpoch(1))
        };
        let report = log.recovery_report().clone();
        assert_eq!(log.log_end_offset(), end, "cut at {cut}");
        assert_eq!(report.recovery_point, Offset(3), "cut at {cut}");
        assert!(!report.clean_shutdown);
        assert_eq!(log.last_batch_epoch(), Some(epoch), "cut at {cut}");
        if cut == boundary {
            assert!(report.truncations.is_empty(), "cut at {cut}: {report:?}");
        } else {
            assert_eq!(report.truncations.len(), 1, "cut at {cut}: {report:?}");
            let tail = &report.truncations[0];
            assert_eq!(tail.path, file);
            assert_eq!(tail.position, boundary, "cut at {cut}");
            assert_eq!(tail.bytes, cut - boundary, "cut at {cut}");
            assert_eq!(tail.batches, 0, "a torn batch is not a whole frame");
            assert!(tail.reason.contains("torn"), "{}", tail.reason);
        }
        assert_eq!(std::fs::metadata(&file).unwrap().len(), boundary);
        // The prefix survived, byte for byte.
        let got = read_all(&log);
        assert_eq!(got, expected_all[..end.0 as usize], "cut at {cut}");
        // The epoch cache holds nothing past the end.
        assert!(log.epoch_entries().iter().all(|(_, start)| *start < end));
        // Appends continue from the recovered end (checked on a sample of
        // cuts: each append costs fsyncs).
        if cut % 16 != 0 && cut != boundary {
            continue;
        }
        let info = log
            .append_as_leader(&batch("d", 2), LeaderEpoch(2))
            .unwrap();
        assert_eq!(info.base_offset, end);
    }
}
