//! SPEC 3.1/3.2: an `acks=all` append returns once every ISR member holds
//! the batch, and followers serve it as committed.

use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{Acks, Isolation, LogId, NodeId, Offset};

#[test]
fn acks_all_append_is_on_every_replica_when_it_returns() {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .build()
        .unwrap();
    let log = LogId(0);
    let replicas = cluster.create_log(log, 3).unwrap();
    assert_eq!(replicas, vec![NodeId(0), NodeId(1), NodeId(2)]);
    let leader = cluster.leader_log(log).unwrap();
    for i in 0..20u32 {
        let out = leader
            .append_values(&[format!("record-{i}")], Acks::All)
            .unwrap();
        assert_eq!(out.base_offset, Offset(u64::from(i)));
        assert!(leader.high_watermark() > out.last_offset);
        for node in &replicas[1..] {
            let follower = cluster.log(*node, log).unwrap();
            assert!(
                follower.log_end_offset() > out.last_offset,
                "{node} lacks offset {}",
                out.last_offset
            );
        }
    }
    // Followers learn the high watermark with their next fetch.
    for node in &replicas[1..] {
        let follower = cluster.log(*node, log).unwrap();
        let batches = follower
            .read_blocking(Offset(19), 1 << 20, Duration::from_secs(5))
            .unwrap();
        assert!(!batches.is_empty(), "{node} never committed offset 19");
        let all = follower
            .read(Offset(0), 1 << 20, Isolation::Committed)
            .unwrap();
        let values: Vec<String> = all
            .iter()
            .flat_map(|b| {
                b.records()
                    .map(|r| String::from_utf8(r.unwrap().value.to_vec()).unwrap())
            })
            .collect();
        assert_eq!(values.len(), 20);
        assert_eq!(values[7], "record-7");
    }
    cluster.shutdown().unwrap();
}
