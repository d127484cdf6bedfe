//! SPEC 3.7: a leader cut off from the followers and the coordinator cannot
//! commit: its `acks=all` appends never succeed. Its session expires, the
//! controller elects another leader, and after healing the old leader
//! truncates its unacknowledged suffix and follows.

use std::time::Duration;

use crate::failover_support::*;
use isrlog::{Acks, Error, LogId, NodeId, Offset, Role};

#[test]
fn partitioned_leader_never_acknowledges_and_rejoins_as_follower() {
    let cluster = controlled_cluster(3, false);
    let log = LogId(0);
    let (a, b, c) = (NodeId(0), NodeId(1), NodeId(2));
    cluster.create_log(log, 3).unwrap();
    let old_leader = cluster.leader_log(log).unwrap();
    assert_eq!(old_leader.node_id(), a);
    old_leader.append_values(&["r1"], Acks::All).unwrap();

    cluster.coordinator.set_node_unavailable(a, true);
    cluster.network.partition(&[a], &[b, c]);
    let stale = {
        let old_leader = old_leader.clone();
        std::thread::spawn(move || old_leader.append_values(&["never acknowledged"], Acks::All))
    };

    // a's session expires and b (first live ISR member) is elected.
    assert!(cluster.wait_until(Duration::from_secs(5), |cl| cl.leader_of(log) == Some(b)));
    let new_leader = cluster.leader_log(log).unwrap();
    new_leader.append_values(&["r2"], Acks::All).unwrap();
    let stale = stale.join().unwrap();
    // It cannot commit, and cannot shrink its ISR through the coordinator:
    // the append runs out its request timeout (outcome unknown), or fails as
    // not the leader should it hear that it was deposed.
    assert!(
        matches!(stale, Err(Error::Timeout { .. } | Error::NotLeader { .. })),
        "the cut-off leader acknowledged or failed otherwise: {stale:?}"
    );

    cluster.coordinator.set_node_unavailable(a, false);
    cluster.network.heal();
    assert!(
        cluster.wait_until(Duration::from_secs(5), |_| old_leader.role()
            == Role::Follower { leader: b })
    );
    assert!(
        cluster.wait_until(Duration::from_secs(5), |cl| cl.in_sync_replicas(log).len()
            == 3)
    );
    new_leader.append_values(&["r3"], Acks::All).unwrap();
    let on_c = cluster.log(c, log).unwrap();
    assert!(wait_converged(
        &cluster,
        &[&old_leader, &new_leader, &on_c],
        Offset(3)
    ));
    for handle in [&old_leader, &new_leader, &on_c] {
        assert_eq!(
            committed_values(handle),
            vec![(0, "r1".into()), (1, "r2".into()), (2, "r3".into())],
            "on {}",
            handle.node_id()
        );
    }
    assert_eq!(
        committed_batches(&old_leader),
        committed_batches(&new_leader)
    );
}
