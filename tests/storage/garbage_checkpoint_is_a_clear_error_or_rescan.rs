//! SPEC 2.3/2.4, G5: a garbage checkpoint never panics: a bad log-state
//! checkpoint means a full rescan (reported, naming the file); a bad epoch
//! cache is rebuilt from the batches (reported, naming the file).

use crate::storage_support::*;
use isrlog::{LeaderEpoch, Offset};

type Records = Vec<(Offset, Vec<u8>)>;
type Epochs = Vec<(LeaderEpoch, Offset)>;

fn closed_log() -> (tempfile::TempDir, Records, Epochs) {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), dense_index());
    for (epoch, tag) in [(0, "a"), (0, "b"), (3, "c"), (5, "d"), (5, "e")] {
        log.append_as_leader(&batch(tag, 2), LeaderEpoch(epoch))
            .unwrap();
    }
    let all = read_all(&log);
    let epochs = log.epoch_entries();
    log.close().unwrap();
    (dir, all, epochs)
}

#[test]
fn garbage_log_checkpoint_means_a_reported_full_rescan() {
    for garbage in [
        &b""[..],
        b"\xff\xfe\x00garbage",
        b"isrlog log-state v1\nrecovery_point 10\n",
    ] {
        let (dir, all, _) = closed_log();
        let path = dir.path().join("log-state.checkpoint");
        std::fs::write(&path, garbage).unwrap();
        let log = open(dir.path(), dense_index());
        let report = log.recovery_report();
        assert_eq!(report.recovery_point, Offset(0));
        assert!(!report.clean_shutdown);
        assert_eq!(report.batches_scanned, 5, "{report:?}");
        assert!(
            report.checkpoint_problems[0].contains(path.to_str().unwrap()),
            "{report:?}"
        );
        assert!(report.truncations.is_empty());
        assert_eq!(read_all(&log), all);
        // The rescan rewrote a good checkpoint.
        log.close().unwrap();
        assert!(open(dir.path(), dense_index()).recovery_report().is_clean());
    }
}

#[test]
fn garbage_epoch_cache_is_rebuilt_from_the_batches() {
    for garbage in [&b"nonsense"[..], b""] {
        let (dir, all, epochs) = closed_log();
        let path = dir.path().join("leader-epoch.checkpoint");
        std::fs::write(&path, garbage).unwrap();
        let log = open(dir.path(), dense_index());
        let report = log.recovery_report();
        assert!(report.epoch_cache_rebuilt, "{report:?}");
        assert!(report.checkpoint_problems[0].contains(path.to_str().unwrap()));
        assert_eq!(log.epoch_entries(), epochs);
        assert_eq!(read_all(&log), all);
    }
}

#[test]
fn missing_epoch_cache_is_rebuilt_and_reported() {
    let (dir, _, epochs) = closed_log();
    std::fs::remove_file(dir.path().join("leader-epoch.checkpoint")).unwrap();
    let log = open(dir.path(), dense_index());
    assert!(log.recovery_report().epoch_cache_rebuilt);
    assert_eq!(log.epoch_entries(), epochs);
}

#[test]
fn a_clean_reopen_scans_nothing() {
    let (dir, all, _) = closed_log();
    let log = open(dir.path(), dense_index());
    let report = log.recovery_report();
    assert!(report.clean_shutdown);
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.bytes_scanned, 0);
    assert_eq!(report.recovery_point, Offset(10));
    assert_eq!(read_all(&log), all);
}
