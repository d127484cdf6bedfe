//! SPEC 3.9: a follower downloads its leader's snapshot into a scratch file
//! of the log's directory, never fsynced; a crash before the install ends
//! leaves it behind. Opening the log deletes it (the next transfer starts
//! from the beginning), and keeps everything else.

use crate::storage_support::*;
use isrlog::{LeaderEpoch, LogConfig};

#[test]
fn a_snapshot_download_left_by_a_crash_is_deleted_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    for i in 0..5 {
        log.append_as_leader(&batch(&format!("r{i}"), 1), LeaderEpoch(0))
            .unwrap();
    }
    let records = read_all(&log);
    log.close().unwrap();
    let leftover = dir.path().join("snapshot-download-17");
    std::fs::write(&leftover, vec![0x5a; 4096]).unwrap();

    let log = open(dir.path(), LogConfig::default());
    assert!(!leftover.exists(), "the download was kept");
    assert_eq!(read_all(&log), records);
    log.close().unwrap();
}
