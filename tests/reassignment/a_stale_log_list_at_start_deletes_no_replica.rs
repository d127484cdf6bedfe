//! SPEC 3.10 (review of 714b35d): at start a node deletes the copies of
//! replicas that a reassignment removed while it was down. The list of
//! logs it reads then may be stale (`logs()` does not sync: a ZooKeeper
//! server behind the ensemble's leader can serve it), and may not list a
//! replica the coordinator counts in the ISR today. Such a copy must stay:
//! each candidate is read again, up to date, before it goes.

use isrlog::{Acks, Coordinator, NodeId};

use crate::reassignment_support::*;

#[test]
fn a_stale_log_list_at_start_deletes_no_replica() {
    let cluster = cluster(4);
    // A state that does not list node 3: the one before the move adds it.
    let before_the_move = state(&cluster);
    assert!(!before_the_move.replicas.contains(&NodeId(3)));
    let target = nodes(&[0, 1, 3]);
    admin(&cluster, |n| n.reassign_log(LOG, target.clone())).unwrap();
    wait_completed(&cluster, &target);
    let leader = cluster.leader_log(LOG).unwrap();
    leader.append_values(&["a", "b", "c"], Acks::All).unwrap();
    let end = leader.log_end_offset();
    let copy = cluster.log(NodeId(3), LOG).unwrap();
    assert!(cluster.wait_until(WAIT_MAX, |_| copy.log_end_offset() == end));
    drop(copy);

    cluster.stop_node(NodeId(3)).unwrap();
    assert!(replica_dir(&cluster, NodeId(3)).exists());
    // Node 3 restarts on a stale list, and cannot fetch for now: what it
    // holds right after the start is what it kept on disk.
    cluster
        .coordinator_delay(NodeId(3))
        .serve_stale_log_list(vec![before_the_move]);
    let others = nodes(&[0, 1, 2]);
    cluster.network.partition(&[NodeId(3)], &others);
    cluster.restart(NodeId(3)).unwrap();
    assert!(
        cluster.wait_until(WAIT_MAX, |c| c.log(NodeId(3), LOG).is_ok()),
        "node 3 does not host its replica after the restart"
    );
    let reopened = cluster.log(NodeId(3), LOG).unwrap();
    assert_eq!(
        reopened.log_end_offset(),
        end,
        "node 3 deleted its copy on a stale list of logs"
    );
    assert!(state(&cluster).replicas.contains(&NodeId(3)));
    cluster.network.heal();
    let stored = cluster.coordinator.log_state(LOG).unwrap().unwrap();
    assert!(stored.replicas.contains(&NodeId(3)), "{stored:?}");
}
