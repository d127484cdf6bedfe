//! SPEC 3.10: a reassignment cancelled half-way (its added replica cut off,
//! so it cannot catch up) returns the log to its original replicas under
//! continuous `acks=all` appends: the added replica deletes its copy,
//! nothing acknowledged is lost, and a second reassignment replaces a
//! first one (KIP-455) rather than stacking on it.

use std::time::Duration;

use isrlog::NodeId;

use crate::reassignment_support::*;

#[test]
fn a_cancelled_reassignment_returns_to_the_original_replicas() {
    let cluster = cluster(4);
    let writer = Writer::start(&cluster);
    cluster.network.partition(&nodes(&[3]), &nodes(&[0, 1, 2]));
    let moving = admin(&cluster, |n| n.reassign_log(LOG, nodes(&[3, 1, 2]))).unwrap();
    assert_eq!(moving.adding_replicas, nodes(&[3]));
    assert_eq!(moving.removing_replicas, nodes(&[0]));
    assert!(
        cluster.wait_until(WAIT_MAX, |c| c.log(NodeId(3), LOG).is_ok()),
        "the added replica was not opened"
    );
    std::thread::sleep(Duration::from_millis(300));
    let half_way = state(&cluster);
    assert!(half_way.is_reassigning(), "{half_way:?}");
    assert!(!half_way.is_in_sync(NodeId(3)));
    // Progress, as the leader reports it for metrics: the added replica,
    // out of the ISR, and the one to be removed.
    let leader = half_way.leader.unwrap();
    let progress = cluster
        .with_node(leader, |n| n.reassignments())
        .unwrap()
        .unwrap();
    assert_eq!(progress.len(), 1, "{progress:?}");
    assert_eq!(progress[0].log, LOG);
    assert_eq!(progress[0].target_replicas, nodes(&[3, 1, 2]));
    assert_eq!(progress[0].removing_replicas, nodes(&[0]));
    assert_eq!(progress[0].adding_replicas.len(), 1);
    assert_eq!(progress[0].adding_replicas[0].node, NodeId(3));
    assert!(!progress[0].adding_replicas[0].in_sync);

    let cancelled = admin(&cluster, |n| n.cancel_reassignment(LOG)).unwrap();
    assert!(!cancelled.is_reassigning(), "{cancelled:?}");
    // The original replicas as a set: as Kafka's KRaft controller reverts,
    // in the order they had during the move (target's replicas first).
    let mut replicas = cancelled.replicas.clone();
    replicas.sort();
    assert_eq!(replicas, nodes(&[0, 1, 2]));
    wait_deleted(&cluster, NodeId(3));
    cluster.network.heal();
    wait_completed(&cluster, &nodes(&[0, 1, 2]));
    let writes = writer.stop();
    check_nothing_lost(&cluster, &writes);
}

#[test]
fn a_second_reassignment_replaces_the_first() {
    let cluster = cluster(5);
    let writer = Writer::start(&cluster);
    cluster
        .network
        .partition(&nodes(&[3]), &nodes(&[0, 1, 2, 4]));
    admin(&cluster, |n| n.reassign_log(LOG, nodes(&[0, 1, 3]))).unwrap();
    assert!(
        cluster.wait_until(WAIT_MAX, |c| c.log(NodeId(3), LOG).is_ok()),
        "the first move's replica was not opened"
    );
    let second = admin(&cluster, |n| n.reassign_log(LOG, nodes(&[0, 1, 4]))).unwrap();
    // The original replicas are still [0, 1, 2]: node 3 leaves at once.
    assert_eq!(second.adding_replicas, nodes(&[4]));
    assert_eq!(second.removing_replicas, nodes(&[2]));
    assert!(!second.replicas.contains(&NodeId(3)), "{second:?}");
    wait_deleted(&cluster, NodeId(3));
    wait_completed(&cluster, &nodes(&[0, 1, 4]));
    wait_deleted(&cluster, NodeId(2));
    cluster.network.heal();
    let writes = writer.stop();
    check_nothing_lost(&cluster, &writes);
}
