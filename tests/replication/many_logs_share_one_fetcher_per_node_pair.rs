//! Many logs on three nodes replicate independently, through one fetcher
//! thread per (follower node, leader node) pair, like Kafka's replica
//! fetcher threads.

use isrlog::testing::Cluster;
use isrlog::{Acks, Isolation, LogId, NodeId, Offset};

#[test]
fn twelve_logs_on_three_nodes_use_two_fetcher_threads_per_node() {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .build()
        .unwrap();
    let logs: Vec<LogId> = (0..12).map(LogId).collect();
    for &log in &logs {
        cluster.create_log(log, 3).unwrap();
    }
    // Leaders are spread round-robin: log i is led by node i mod 3.
    for &log in &logs {
        assert_eq!(cluster.leader_of(log), Some(NodeId(log.0 % 3)));
    }
    for round in 0..5u32 {
        for &log in &logs {
            let leader = cluster.leader_log(log).unwrap();
            let out = leader
                .append_values(&[format!("{}-{round}", log.0)], Acks::All)
                .unwrap();
            assert_eq!(
                out.base_offset,
                Offset(u64::from(round)),
                "{log} offsets are its own"
            );
        }
    }
    for node in cluster.node_ids() {
        // Each node follows the two other nodes: two fetcher threads.
        assert_eq!(
            cluster.with_node(node, |n| n.fetcher_thread_count()),
            Some(2),
            "{node}"
        );
        for &log in &logs {
            let handle = cluster.log(node, log).unwrap();
            assert!(handle.log_end_offset() >= Offset(5), "{node} {log}");
            if handle.is_leader() {
                let values: Vec<Vec<u8>> = handle
                    .read(Offset(0), 1 << 20, Isolation::Committed)
                    .unwrap()
                    .iter()
                    .flat_map(|b| b.records().map(|r| r.unwrap().value.to_vec()))
                    .collect();
                assert_eq!(values[4], format!("{}-4", log.0).into_bytes());
            }
        }
    }
}
