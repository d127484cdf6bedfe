//! SPEC 3.6, last rule, in Kafka's mode (`retain_until_applied = false`;
//! by default deletion waits for the applications and such a follower
//! reports that it needs a snapshot, SPEC 3.9): a follower whose log end is
//! below the leader's log start offset (it was down while the leader's
//! retention deleted the segments it still needed) discards its log and
//! restarts at the leader's log start. Committed data from there matches
//! the leader byte for byte.

use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{
    Acks, Error, Isolation, LogConfig, LogId, Offset, RecordBatch, ReplicatedLog, ReplicationConfig,
};

/// Committed batches of `handle` from `from` to its high watermark.
fn committed_from(handle: &ReplicatedLog, from: Offset) -> Vec<RecordBatch> {
    let mut batches = Vec::new();
    let mut next = from;
    loop {
        let read = handle.read(next, 1 << 20, Isolation::Committed).unwrap();
        let Some(last) = read.last() else {
            return batches;
        };
        next = last.next_offset();
        batches.extend(read);
    }
}

#[test]
fn follower_below_leader_log_start_discards_its_log_and_restarts_there() {
    let builder = Cluster::builder();
    // Kafka's behaviour, explicitly: retention deletes up to the high
    // watermark although no application reports a position, and the
    // follower, with no snapshot store, restarts at the leader's log start.
    let kafka = ReplicationConfig {
        retain_until_applied: false,
        ..builder.replication_config()
    };
    let cluster = builder
        .nodes(3)
        .replication(kafka)
        .min_insync_replicas(2)
        .session_timeout(Duration::from_millis(300))
        .log_config(LogConfig {
            segment_bytes_max: 8 * 1024,
            retention_bytes: Some(16 * 1024),
            ..LogConfig::default()
        })
        .retention_check_interval(Duration::from_millis(10))
        .build()
        .unwrap();
    let log = LogId(0);
    let replicas = cluster.create_log(log, 3).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    let lagging = replicas[2];
    assert_ne!(lagging, leader.node_id());
    let value = vec![7u8; 1000];
    for _ in 0..5 {
        leader.append_values(&[&value[..]], Acks::All).unwrap();
    }
    let on_lagging = cluster.log(lagging, log).unwrap();
    assert!(cluster.wait_until(Duration::from_secs(5), |_| {
        on_lagging.log_end_offset() == Offset(5)
    }));

    // The follower is down while the leader writes ~100 KiB and retention
    // deletes every segment holding what the follower has or needs next.
    cluster.crash(lagging);
    assert!(cluster.wait_until(Duration::from_secs(5), |c| !c
        .in_sync_replicas(log)
        .contains(&lagging)));
    for _ in 0..100 {
        leader.append_values(&[&value[..]], Acks::All).unwrap();
    }
    assert!(
        cluster.wait_until(Duration::from_secs(5), |_| leader.log_start_offset()
            > Offset(5)),
        "retention never moved the leader's log start past the follower's end"
    );

    cluster.restart(lagging).unwrap();
    let on_lagging = cluster.log(lagging, log).unwrap();
    assert!(
        cluster.wait_until(Duration::from_secs(10), |c| {
            c.in_sync_replicas(log).contains(&lagging)
                && on_lagging.log_end_offset() == leader.log_end_offset()
        }),
        "follower: start {} leo {}; leader: start {} leo {}",
        on_lagging.log_start_offset(),
        on_lagging.log_end_offset(),
        leader.log_start_offset(),
        leader.log_end_offset()
    );
    // Its old records (offsets 0..5) are gone: it restarted at the
    // leader's log start, not at its own end.
    assert!(on_lagging.log_start_offset() > Offset(5));
    assert!(matches!(
        on_lagging.read(Offset(0), 1024, Isolation::Committed),
        Err(Error::OffsetOutOfRange { .. })
    ));
    // One more write commits everything on all three.
    let last = leader.append_values(&[&value[..]], Acks::All).unwrap();
    assert!(cluster.wait_until(Duration::from_secs(5), |_| {
        on_lagging.high_watermark() > last.last_offset
    }));
    // Retention may still run once after that append; the follower learns
    // the leader's log start from its next fetch answer.
    std::thread::sleep(Duration::from_millis(50));
    assert!(cluster.wait_until(Duration::from_secs(5), |_| {
        on_lagging.log_start_offset() == leader.log_start_offset()
    }));
    let from = leader.log_start_offset();
    let ours = committed_from(&on_lagging, from);
    let theirs = committed_from(&leader, from);
    assert!(!ours.is_empty());
    assert_eq!(
        ours.iter().map(RecordBatch::as_bytes).collect::<Vec<_>>(),
        theirs.iter().map(RecordBatch::as_bytes).collect::<Vec<_>>()
    );
    cluster.shutdown().unwrap();
}
