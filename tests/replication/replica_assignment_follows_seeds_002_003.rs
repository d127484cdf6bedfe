//! Seeds 002/003 replica assignment (issue 4): with `n` nodes, log `i` is
//! led by node `i mod n` and its `j`-th replica lives on `(i + j) mod n`;
//! a replication factor above the node count is an error, both from
//! `assign_replicas` and from `Cluster::create_log` (which must create
//! nothing then).

use isrlog::testing::Cluster;
use isrlog::{assign_replicas, Coordinator, Error, LogId, NodeId};

fn ids(raw: &[u32]) -> Vec<NodeId> {
    raw.iter().copied().map(NodeId).collect()
}

#[test]
fn replica_assignment_follows_seeds_002_003() {
    let nodes = ids(&[0, 1, 2, 3]);
    // (log index, replication factor, expected replicas in order)
    let table: &[(u32, usize, &[u32])] = &[
        (0, 1, &[0]),
        (0, 3, &[0, 1, 2]),
        (1, 3, &[1, 2, 3]),
        (2, 3, &[2, 3, 0]),
        (3, 3, &[3, 0, 1]),
        (4, 3, &[0, 1, 2]),
        (7, 2, &[3, 0]),
        (5, 4, &[1, 2, 3, 0]),
    ];
    for &(log, replication_factor, expected) in table {
        assert_eq!(
            assign_replicas(log, &nodes, replication_factor).unwrap(),
            ids(expected),
            "log {log}, replication factor {replication_factor}"
        );
    }
    assert!(matches!(
        assign_replicas(0, &nodes, 5),
        Err(Error::ReplicationFactorTooLarge {
            replication_factor: 5,
            nodes: 4
        })
    ));

    // Through the cluster: the coordinator holds the same layout and the
    // first replica leads.
    let cluster = Cluster::builder().nodes(3).build().unwrap();
    for index in 0..4u32 {
        let log = LogId(index);
        let replicas = cluster.create_log(log, 2).unwrap();
        let expected = ids(&[index % 3, (index + 1) % 3]);
        assert_eq!(replicas, expected, "{log}");
        let state = cluster.coordinator.log_state(log).unwrap().unwrap();
        assert_eq!(state.replicas, expected, "{log}");
        assert_eq!(state.leader, Some(expected[0]), "{log}");
        assert_eq!(cluster.leader_log(log).unwrap().node_id(), expected[0]);
    }
    let too_many = LogId(9);
    assert!(matches!(
        cluster.create_log(too_many, 4),
        Err(Error::ReplicationFactorTooLarge {
            replication_factor: 4,
            nodes: 3
        })
    ));
    assert!(cluster.coordinator.log_state(too_many).unwrap().is_none());
    cluster.shutdown().unwrap();
}
