//! SPEC 2.6 with replication: the leader deletes whole segments beyond the
//! retention limit (never at or above its high watermark), and followers
//! learn the new log start offset from fetch answers and apply it.

use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{Acks, Error, Isolation, LogConfig, LogId, NodeId, Offset, ReplicationConfig};

#[test]
fn retention_by_bytes_raises_the_log_start_on_leader_and_followers() {
    let builder = Cluster::builder();
    // Kafka's behaviour, explicitly: no application reports a position
    // here, which by default would hold deletion at the log start (SPEC
    // 3.9, `deletion_never_outruns_an_application` tests that bound).
    let kafka = ReplicationConfig {
        retain_until_applied: false,
        ..builder.replication_config()
    };
    let cluster = builder
        .nodes(3)
        .replication(kafka)
        .min_insync_replicas(2)
        .log_config(LogConfig {
            segment_bytes_max: 16 * 1024,
            retention_bytes: Some(32 * 1024),
            ..LogConfig::default()
        })
        .retention_check_interval(Duration::from_millis(10))
        .build()
        .unwrap();
    let log = LogId(0);
    cluster.create_log(log, 3).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    let value = vec![1u8; 1000];
    for _ in 0..200 {
        leader.append_values(&[&value[..]], Acks::All).unwrap();
    }
    assert!(
        cluster.wait_until(Duration::from_secs(5), |_| leader.log_start_offset()
            > Offset(0)),
        "retention never ran on the leader"
    );
    let leader_start = leader.log_start_offset();
    assert!(leader_start <= leader.high_watermark());
    // One more append carries the new log start to the followers.
    leader.append_values(&[&value[..]], Acks::All).unwrap();
    for node in [NodeId(1), NodeId(2)] {
        let follower = cluster.log(node, log).unwrap();
        assert!(
            cluster.wait_until(Duration::from_secs(5), |_| follower.log_start_offset()
                >= leader_start),
            "{node} kept log start {}",
            follower.log_start_offset()
        );
    }
    match leader.read(Offset(0), 1024, Isolation::Committed) {
        Err(Error::OffsetOutOfRange { log_start, .. }) => assert!(log_start >= leader_start),
        other => panic!("read below the log start gave {other:?}"),
    }
    let from_start = leader
        .read(leader.log_start_offset(), 1 << 20, Isolation::Committed)
        .unwrap();
    assert!(!from_start.is_empty());
}
