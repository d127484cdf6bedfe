//! SPEC 2.5, `FlushPolicy::Every { interval }`: data appended to a log that
//! then goes idle is fsynced within about the interval, not only on the next
//! append (the node's control loop flushes due logs, as Kafka's log flusher
//! does).

use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{Acks, FlushPolicy, LogConfig, LogId, NodeId};

#[test]
fn an_idle_log_is_flushed_within_its_flush_interval() {
    let cluster = Cluster::builder()
        .nodes(2)
        .log_config(LogConfig {
            flush_policy: FlushPolicy::Every {
                messages: u64::MAX,
                interval: Duration::from_millis(50),
            },
            ..LogConfig::default()
        })
        .build()
        .unwrap();
    let log = LogId(0);
    cluster.create_log(log, 2).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    let out = leader.append_values(&[b"x", b"y"], Acks::All).unwrap();
    let follower = cluster.log(NodeId(1), log).unwrap();
    for replica in [&leader, &follower] {
        assert!(
            cluster.wait_until(Duration::from_secs(5), |_| replica.flushed_offset()
                > out.last_offset),
            "{} never flushed: flushed {} of {}",
            replica.node_id(),
            replica.flushed_offset(),
            replica.log_end_offset()
        );
        assert!(replica.log_stats().fsyncs >= 1);
    }
}
