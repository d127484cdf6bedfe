//! SPEC 3.8 / G3: a committed read never returns an offset at or above the
//! high watermark of the replica it reads from, on the leader or on a
//! follower, while writes are in flight; and the leader's high watermark
//! never moves backwards.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{Acks, Isolation, LogId, NodeId, Offset};

#[test]
fn committed_reads_stay_below_the_high_watermark_on_every_replica() {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .build()
        .unwrap();
    let log = LogId(3);
    cluster.create_log(log, 3).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let leader = leader.clone();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let acks = if i.is_multiple_of(3) {
                    Acks::All
                } else {
                    Acks::Leader
                };
                leader
                    .append_values(&[format!("{i}"), format!("{i}b")], acks)
                    .unwrap();
                i += 1;
            }
        })
    };
    let readers: Vec<_> = [NodeId(0), NodeId(1), NodeId(2)]
        .into_iter()
        .map(|node| {
            let handle = cluster.log(node, log).unwrap();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut reads = 0u64;
                let mut last_hw = Offset(0);
                while !stop.load(Ordering::Relaxed) {
                    let batches = handle
                        .read(Offset(0), 64 * 1024, Isolation::Committed)
                        .unwrap();
                    let hw_after = handle.high_watermark();
                    for batch in &batches {
                        assert!(
                            batch.last_offset() < hw_after,
                            "{node}: read offset {} with HW {hw_after}",
                            batch.last_offset()
                        );
                    }
                    if handle.is_leader() {
                        assert!(
                            hw_after >= last_hw,
                            "leader HW moved back from {last_hw} to {hw_after}"
                        );
                    }
                    last_hw = hw_after;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    for reader in readers {
        assert!(reader.join().unwrap() > 10);
    }
    assert!(leader.high_watermark() > Offset(10));
}

#[test]
fn uncommitted_reads_are_for_the_leader_only() {
    let cluster = Cluster::builder().nodes(2).build().unwrap();
    let log = LogId(0);
    cluster.create_log(log, 2).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    leader.append_values(&[b"x"], Acks::Leader).unwrap();
    let batches = leader
        .read(Offset(0), 1024, Isolation::Uncommitted)
        .unwrap();
    let records: Vec<(Offset, Vec<u8>)> = batches
        .iter()
        .flat_map(|b| b.records().map(|r| r.unwrap()))
        .map(|r| (r.offset, r.value.to_vec()))
        .collect();
    assert_eq!(records, vec![(Offset(0), b"x".to_vec())]);
    let follower = cluster.log(NodeId(1), log).unwrap();
    let refused = follower.read(Offset(0), 1024, Isolation::Uncommitted);
    assert!(
        matches!(refused, Err(isrlog::Error::NotLeader { .. })),
        "{refused:?}"
    );
    // Reading past the log end is an error naming both bounds.
    match leader.read(Offset(99), 1024, Isolation::Committed) {
        Err(isrlog::Error::OffsetOutOfRange {
            requested,
            log_start,
            log_end,
        }) => {
            assert_eq!(
                (requested, log_start, log_end),
                (Offset(99), Offset(0), Offset(1))
            );
        }
        other => panic!("{other:?}"),
    }
}
