//! SPEC 2.5: under `FlushPolicy::Always` an append returns only after an
//! fsync covering it, and concurrent appenders share fsyncs (group commit).

use std::sync::Arc;
use std::time::Duration;

use crate::storage_support::*;
use isrlog::{FlushPolicy, LeaderEpoch, LogConfig, Offset};

#[test]
fn group_commit_shares_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        flush_policy: FlushPolicy::Always,
        ..LogConfig::default()
    };
    let log = Arc::new(open(dir.path(), config));
    let threads = 8;
    let per_thread = 40;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    let info = log
                        .append_as_leader(&batch(&format!("t{t}-{i}"), 2), LeaderEpoch(0))
                        .unwrap();
                    assert!(
                        log.flushed_offset() > info.last_offset,
                        "append returned before the fsync covering it"
                    );
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    let stats = log.stats();
    assert_eq!(stats.appends, threads * per_thread);
    assert!(
        stats.fsyncs < stats.appends,
        "no fsync was shared: {stats:?}"
    );
    assert_eq!(log.flushed_offset(), Offset(threads * per_thread * 2));
}

#[test]
fn never_policy_does_not_fsync_on_append() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    for i in 0..10 {
        log.append_as_leader(&batch(&format!("{i}"), 1), LeaderEpoch(0))
            .unwrap();
    }
    assert_eq!(log.stats().fsyncs, 0);
    assert_eq!(log.flushed_offset(), Offset(0));
    log.flush().unwrap();
    assert_eq!(log.flushed_offset(), Offset(10));
    assert_eq!(log.stats().fsyncs, 1);
}

#[test]
fn every_policy_flushes_by_count_and_by_interval() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let config = LogConfig {
        flush_policy: FlushPolicy::Every {
            messages: 5,
            interval: Duration::from_secs(10),
        },
        ..LogConfig::default()
    };
    let log = open_with(dir.path(), config, &clock).unwrap();
    for i in 0..4 {
        log.append_as_leader(&batch(&format!("{i}"), 1), LeaderEpoch(0))
            .unwrap();
    }
    assert_eq!(log.stats().fsyncs, 0);
    log.append_as_leader(&batch("5th", 1), LeaderEpoch(0))
        .unwrap();
    assert_eq!(log.stats().fsyncs, 1);
    assert_eq!(log.flushed_offset(), Offset(5));
    log.append_as_leader(&batch("a", 1), LeaderEpoch(0))
        .unwrap();
    assert_eq!(log.stats().fsyncs, 1);
    clock.advance(Duration::from_secs(10));
    log.append_as_leader(&batch("b", 1), LeaderEpoch(0))
        .unwrap();
    assert_eq!(log.stats().fsyncs, 2);
    assert_eq!(log.flushed_offset(), Offset(7));
}
