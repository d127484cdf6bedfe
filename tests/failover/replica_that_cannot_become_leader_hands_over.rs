//! A replica elected leader whose storage has failed cannot take the role
//! (it cannot even record the new epoch). It resigns like a leader whose
//! storage fails under it: it leaves the ISR and the log leaderless in a
//! new epoch, and the controller elects another in-sync replica. Without
//! this the log stayed leaderless until the failed node was restarted.

use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{Acks, Coordinator, Isolation, LogId, NodeId, Offset};

#[test]
fn an_elected_replica_with_failed_storage_hands_leadership_on() {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(1)
        .session_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let log = LogId(0);
    cluster.create_log(log, 3).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    assert_eq!(leader.node_id(), NodeId(0));
    for i in 0..10 {
        leader.append_values(&[format!("m{i}")], Acks::All).unwrap();
    }
    // Node 1 is next in assignment order and in the ISR: the controller's
    // choice once node 0 is gone. Its disk fails first.
    cluster.log(NodeId(1), log).unwrap().fail_storage_for_test();
    cluster.crash(NodeId(0));

    assert!(
        cluster.wait_until(Duration::from_secs(10), |c| {
            c.leader_of(log) == Some(NodeId(2))
        }),
        "node 2 never led: {:?}",
        cluster.coordinator.log_state(log)
    );
    let state = cluster.coordinator.log_state(log).unwrap().unwrap();
    assert!(!state.in_sync_replicas.contains(&NodeId(1)), "{state:?}");
    let new_leader = cluster.leader_log(log).unwrap();
    new_leader
        .wait_until_leader(Duration::from_secs(5))
        .unwrap_or_else(|error| panic!("node 2 does not take the role: {error}"));
    new_leader.append_values(&[b"after"], Acks::All).unwrap();
    let values: Vec<Vec<u8>> = new_leader
        .read(Offset(0), 1 << 20, Isolation::Committed)
        .unwrap()
        .iter()
        .flat_map(|b| b.records().map(|r| r.unwrap().value.to_vec()))
        .collect();
    assert_eq!(values.len(), 11, "a committed record was lost");
    assert_eq!(values[10], b"after".to_vec());
}
