//! Automatic failover when the leader's disk fails: a failed fsync poisons
//! the leader's log (it refuses all further work), so the leader resigns —
//! it leaves the ISR and the log leaderless in a new epoch — and the
//! controller elects another in-sync replica. Without this the log stayed
//! unavailable for as long as the failed node stayed up.

use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{Acks, Coordinator, Error, Isolation, LogId, NodeId, Offset};

use crate::failover_support::committed_values;

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

/// A leader alone in the ISR, with the others in the ELR (they left an ISR
/// that fell below `min_insync_replicas`, holding everything committed),
/// whose storage fails: it resigns to the ELR, and the controller elects
/// one of them, instead of keeping the log with a leader that cannot lead
/// (review of the controller, finding 6).
#[test]
fn a_leader_alone_in_the_isr_whose_storage_fails_hands_over_to_the_elr() {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .replication(isrlog::ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_millis(500),
            fetch_wait_max: Duration::from_millis(100),
            ..isrlog::ReplicationConfig::default()
        })
        .build()
        .unwrap();
    let log = LogId(0);
    cluster.create_log(log, 3).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    let a = leader.node_id();
    for i in 0..10 {
        leader.append_values(&[format!("m{i}")], Acks::All).unwrap();
    }
    let others: Vec<NodeId> = cluster.node_ids().into_iter().filter(|n| *n != a).collect();
    cluster.network.partition(&[a], &others);
    assert!(
        cluster.wait_until(Duration::from_secs(10), |c| {
            let state = c.coordinator.log_state(log).unwrap().unwrap();
            state.in_sync_replicas == vec![a]
                && others
                    .iter()
                    .all(|n| state.eligible_leader_replicas.contains(n))
        }),
        "the ISR did not shrink to the leader with the others in the ELR: {:?}",
        cluster.coordinator.log_state(log)
    );

    leader.fail_storage_for_test();
    assert!(
        cluster.wait_until(Duration::from_secs(10), |c| {
            matches!(c.leader_of(log), Some(l) if l != a)
        }),
        "no eligible replica took over: {:?}",
        cluster.coordinator.log_state(log)
    );
    cluster.network.heal();
    let new_leader = cluster.leader_log(log).unwrap();
    assert!(
        cluster.wait_until(Duration::from_secs(10), |_| {
            new_leader.append_values(&[b"after"], Acks::All).is_ok()
        }),
        "the new leader never committed an acks=all append: {:?}",
        cluster.coordinator.log_state(log)
    );
    let values: Vec<String> = committed_values(&new_leader)
        .into_iter()
        .map(|(_, value)| value)
        .collect();
    let expected: Vec<String> = (0..10)
        .map(|i| format!("m{i}"))
        .chain(["after".to_string()])
        .collect();
    assert_eq!(&values[..expected.len()], &expected[..]);
}
