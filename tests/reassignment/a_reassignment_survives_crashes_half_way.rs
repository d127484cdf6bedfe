//! SPEC 3.10: the state of a move lives in the coordinator, so it survives
//! the crash of the controller half-way (another node's controller
//! completes it) and the crash of the replica being added (it catches up
//! once back and the move completes), under continuous `acks=all` appends
//! that lose nothing acknowledged.

use std::time::Duration;

use isrlog::{Coordinator, NodeId};

use crate::reassignment_support::*;

#[test]
fn a_reassignment_survives_a_controller_crash_half_way() {
    let cluster = cluster(5);
    let (controller, _) = cluster.coordinator.controller().unwrap().unwrap();
    // The added replica is not the controller, which is about to crash.
    let added = if controller == NodeId(3) {
        NodeId(4)
    } else {
        NodeId(3)
    };
    let others: Vec<NodeId> = cluster
        .node_ids()
        .into_iter()
        .filter(|n| *n != added)
        .collect();
    let writer = Writer::start(&cluster);
    cluster.network.partition(&[added], &others);
    let target = vec![added, NodeId(1), NodeId(2)];
    admin(&cluster, |n| n.reassign_log(LOG, target.clone())).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(state(&cluster).is_reassigning());

    cluster.crash(controller);
    assert!(
        cluster.wait_until(WAIT_MAX, |c| {
            matches!(c.coordinator.controller(), Ok(Some((n, _))) if n != controller)
        }),
        "no other controller took over"
    );
    cluster.network.heal();
    cluster.restart(controller).unwrap();
    wait_completed(&cluster, &target);
    let writes = writer.stop();
    check_nothing_lost(&cluster, &writes);
    if !target.contains(&controller) {
        wait_deleted(&cluster, controller);
    }
}

#[test]
fn a_reassignment_survives_a_crash_of_the_added_replica_half_way() {
    let cluster = cluster(4);
    let writer = Writer::start(&cluster);
    let added = NodeId(3);
    cluster.network.partition(&[added], &nodes(&[0, 1, 2]));
    let target = nodes(&[0, 1, 2, 3]);
    admin(&cluster, |n| n.reassign_log(LOG, target.clone())).unwrap();
    assert!(
        cluster.wait_until(WAIT_MAX, |c| c.log(added, LOG).is_ok()),
        "the added replica was not opened"
    );
    // It opened its copy and cannot catch up: crash it half-way.
    cluster.crash(added);
    cluster.network.heal();
    std::thread::sleep(Duration::from_millis(200));
    let half_way = state(&cluster);
    assert!(half_way.is_reassigning(), "{half_way:?}");
    assert!(!half_way.is_in_sync(added));

    cluster.restart(added).unwrap();
    // While it catches up, its leader reports how far behind it is.
    let leader = half_way.leader.unwrap();
    let lag_seen = cluster.wait_until(WAIT_MAX, |c| {
        let progress = c.with_node(leader, |n| n.reassignments());
        let reported = matches!(progress, Some(Ok(progress)) if progress.iter().any(|p| {
            p.adding_replicas
                .iter()
                .any(|a| a.node == added && a.lag_records.is_some())
        }));
        // Or the move completed between two looks: the leader then
        // reports no move at all (an empty list, not an error), and there
        // is nothing left to report (1 run in 20 of the binary under load
        // failed here with the move completed).
        reported || !state(c).is_reassigning()
    });
    assert!(lag_seen, "the added replica's lag was never reported");
    wait_completed(&cluster, &target);
    let progress = cluster
        .with_node(leader, |n| n.reassignments())
        .unwrap()
        .unwrap();
    assert!(progress.is_empty(), "{progress:?}");
    let writes = writer.stop();
    check_nothing_lost(&cluster, &writes);
}

#[test]
fn a_reassignment_survives_a_crash_of_the_leader_half_way() {
    let cluster = cluster(4);
    let writer = Writer::start(&cluster);
    let added = NodeId(3);
    let leader = cluster.leader_of(LOG).unwrap();
    cluster.network.partition(&[added], &nodes(&[0, 1, 2]));
    // The leader stays a replica; another original one is removed.
    let removed = nodes(&[0, 1, 2])
        .into_iter()
        .find(|n| *n != leader)
        .unwrap();
    let target: Vec<NodeId> = nodes(&[0, 1, 2, 3])
        .into_iter()
        .filter(|n| *n != removed)
        .collect();
    admin(&cluster, |n| n.reassign_log(LOG, target.clone())).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    cluster.crash(leader);
    assert!(
        cluster.wait_until(WAIT_MAX, |c| c.leader_of(LOG).is_some_and(|l| l != leader)),
        "no new leader after the crash"
    );
    let half_way = state(&cluster);
    assert!(half_way.is_reassigning(), "{half_way:?}");
    cluster.network.heal();
    cluster.restart(leader).unwrap();
    wait_completed(&cluster, &target);
    wait_deleted(&cluster, removed);
    let writes = writer.stop();
    check_nothing_lost(&cluster, &writes);
}
