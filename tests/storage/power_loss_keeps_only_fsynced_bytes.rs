//! The crash seam of the storage layer (SPEC G1b): `Log::halt_for_crash`
//! reports, per segment file, exactly the bytes the last fsync covered; a
//! halted log refuses every later write; cutting the files to the reported
//! lengths and reopening gives the flushed prefix.

use crate::storage_support::*;
use isrlog::{Error, FlushPolicy, LeaderEpoch, LogConfig, Offset};

fn cut(files: &[(std::path::PathBuf, u64)]) {
    for (path, length) in files {
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.set_len(*length).unwrap();
    }
}

#[test]
fn halt_reports_the_fsynced_length_and_a_reopen_keeps_the_flushed_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        flush_policy: FlushPolicy::Never,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config.clone());
    log.append_as_leader(&batch("a", 3), LeaderEpoch(0))
        .unwrap();
    log.flush().unwrap();
    let flushed_bytes = log.read(Offset(0), 1 << 20).unwrap().records.len() as u64;
    log.append_as_leader(&batch("b", 2), LeaderEpoch(0))
        .unwrap();
    let files = log.halt_for_crash();
    assert_eq!(files.len(), 1);
    assert_eq!(
        files[0].1, flushed_bytes,
        "durable length is the flushed one"
    );
    let on_disk = std::fs::metadata(&files[0].0).unwrap().len();
    assert!(on_disk > flushed_bytes, "the unflushed batch was written");
    let refused = log.append_as_leader(&batch("c", 1), LeaderEpoch(0));
    assert!(
        matches!(refused, Err(Error::Poisoned { .. })),
        "a halted log takes no writes and says it is poisoned: {refused:?}"
    );
    assert_eq!(std::fs::metadata(&files[0].0).unwrap().len(), on_disk);
    drop(log);
    cut(&files);
    let log = open(dir.path(), config);
    assert_eq!(log.log_end_offset(), Offset(3));
    let values: Vec<Vec<u8>> = read_all(&log).into_iter().map(|(_, v)| v).collect();
    assert_eq!(
        values,
        vec![b"a-0".to_vec(), b"a-1".to_vec(), b"a-2".to_vec()]
    );
}

#[test]
fn under_flush_always_every_returned_append_is_durable_and_new_segments_start_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        flush_policy: FlushPolicy::Always,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config.clone());
    for i in 0..5 {
        log.append_as_leader(&batch(&format!("x{i}"), 2), LeaderEpoch(0))
            .unwrap();
    }
    let total = log.read(Offset(0), 1 << 20).unwrap().records.len() as u64;
    let files = log.halt_for_crash();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].1, total);
    drop(log);

    // A segment created by a process and never synced counts as empty.
    let fresh = tempfile::tempdir().unwrap();
    let log = open(
        fresh.path(),
        LogConfig {
            flush_policy: FlushPolicy::Never,
            ..LogConfig::default()
        },
    );
    log.truncate_fully_and_start_at(Offset(7)).unwrap();
    log.append_as_leader(&batch("y", 2), LeaderEpoch(0))
        .unwrap();
    let files = log.halt_for_crash();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].1, 0);
    drop(log);
    cut(&files);
    let log = open(fresh.path(), LogConfig::default());
    assert_eq!(log.log_end_offset(), Offset(7));
}
