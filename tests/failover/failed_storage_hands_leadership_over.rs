//! Automatic failover when the leader's disk fails: a failed fsync poisons
//! the leader's log (it refuses all further work), so the leader resigns —
//! it leaves the ISR and the log leaderless in a new epoch — and the
//! controller elects another in-sync replica. Without this the log stayed
//! unavailable for as long as the failed node stayed up.

use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{Acks, Coordinator, Error, Isolation, LogId, NodeId, Offset};

#[test]
fn a_leader_whose_storage_fails_hands_over_and_nothing_committed_is_lost() {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .build()
        .unwrap();
    let log = LogId(0);
    cluster.create_log(log, 3).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    assert_eq!(leader.node_id(), NodeId(0));
    for i in 0..10 {
        leader.append_values(&[format!("m{i}")], Acks::All).unwrap();
    }

    leader.fail_storage_for_test();
    assert!(leader.is_storage_failed());
    assert!(matches!(
        leader.append_values(&[b"x"], Acks::All),
        Err(Error::Poisoned { .. }) | Err(Error::NotLeader { .. })
    ));

    assert!(
        cluster.wait_until(Duration::from_secs(10), |c| {
            matches!(c.leader_of(log), Some(l) if l != NodeId(0))
        }),
        "no new leader: {:?}",
        cluster.coordinator.log_state(log)
    );
    let state = cluster.coordinator.log_state(log).unwrap().unwrap();
    assert!(!state.in_sync_replicas.contains(&NodeId(0)));
    let new_leader = cluster.leader_log(log).unwrap();
    // min ISR 2 with one replica failed: the two healthy ones commit.
    new_leader.append_values(&[b"after"], Acks::All).unwrap();
    let values: Vec<Vec<u8>> = new_leader
        .read(Offset(0), 1 << 20, Isolation::Committed)
        .unwrap()
        .iter()
        .flat_map(|b| b.records().map(|r| r.unwrap().value.to_vec()))
        .collect();
    assert_eq!(values.len(), 11);
    assert_eq!(values[0], b"m0".to_vec());
    assert_eq!(values[10], b"after".to_vec());
}
