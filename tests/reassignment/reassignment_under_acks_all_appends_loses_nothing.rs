//! SPEC 3.10 under continuous `acks=all` appends (issue 26): adding a
//! replica, removing one, moving the leader's replica away, replacing a
//! dead node, growing 3 → 5 and shrinking 5 → 3. In each, the move
//! completes through the controller (replicas = target, ISR = target), a
//! removed replica deletes its copy, nothing acknowledged is lost, and the
//! replicas end with the same committed records. The writer's longest
//! stall is printed.

use std::time::{Duration, Instant};

use isrlog::NodeId;

use crate::reassignment_support::*;

#[test]
fn adding_a_replica() {
    let cluster = cluster(4);
    let writer = Writer::start(&cluster);
    let moving = admin(&cluster, |n| n.reassign_log(LOG, nodes(&[0, 1, 2, 3]))).unwrap();
    assert_eq!(moving.adding_replicas, nodes(&[3]));
    wait_completed(&cluster, &nodes(&[0, 1, 2, 3]));
    let writes = writer.stop();
    check_nothing_lost(&cluster, &writes);
}

#[test]
fn removing_a_replica() {
    let cluster = cluster(3);
    let leader = cluster.leader_of(LOG).unwrap();
    let removed = nodes(&[0, 1, 2])
        .into_iter()
        .find(|n| *n != leader)
        .unwrap();
    let target: Vec<_> = nodes(&[0, 1, 2])
        .into_iter()
        .filter(|n| *n != removed)
        .collect();
    let writer = Writer::start(&cluster);
    let moving = admin(&cluster, |n| n.reassign_log(LOG, target.clone())).unwrap();
    assert!(moving.removing_replicas == vec![removed] || !moving.is_reassigning());
    wait_completed(&cluster, &target);
    wait_deleted(&cluster, removed);
    let writes = writer.stop();
    check_nothing_lost(&cluster, &writes);
}

#[test]
fn moving_the_leaders_replica_away() {
    let cluster = cluster(4);
    let leader = cluster.leader_of(LOG).unwrap();
    let target: Vec<_> = nodes(&[0, 1, 2, 3])
        .into_iter()
        .filter(|n| *n != leader)
        .collect();
    let writer = Writer::start(&cluster);
    let started = Instant::now();
    admin(&cluster, |n| n.reassign_log(LOG, target.clone())).unwrap();
    wait_completed(&cluster, &target);
    // The leader handed over itself, as in a controlled shutdown: the
    // controller completes a move without that only after waiting 10 s.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the move took {:?}: the leader did not hand over",
        started.elapsed()
    );
    let new_leader = cluster.leader_of(LOG).unwrap();
    assert!(target.contains(&new_leader), "{new_leader} leads");
    wait_deleted(&cluster, leader);
    let writes = writer.stop();
    check_nothing_lost(&cluster, &writes);
}

#[test]
fn replacing_a_dead_node() {
    let cluster = cluster(4);
    let leader = cluster.leader_of(LOG).unwrap();
    let dead = nodes(&[0, 1, 2])
        .into_iter()
        .find(|n| *n != leader)
        .unwrap();
    let writer = Writer::start(&cluster);
    cluster.crash(dead);
    assert!(
        cluster.wait_until(WAIT_MAX, |c| !c.in_sync_replicas(LOG).contains(&dead)),
        "the dead node stayed in the ISR"
    );
    let replaced = admin(&cluster, |n| n.replace_node(dead, NodeId(3))).unwrap();
    assert_eq!(replaced.len(), 1);
    let target: Vec<_> = nodes(&[0, 1, 2])
        .into_iter()
        .map(|n| if n == dead { NodeId(3) } else { n })
        .collect();
    wait_completed(&cluster, &target);
    let writes = writer.stop();
    check_nothing_lost(&cluster, &writes);
    // The dead node's disk comes back later: its stray copy goes at start.
    cluster.restart(dead).unwrap();
    wait_deleted(&cluster, dead);
}

#[test]
fn growing_3_to_5_and_shrinking_5_to_3() {
    let cluster = cluster(5);
    let writer = Writer::start(&cluster);
    admin(&cluster, |n| n.reassign_log(LOG, nodes(&[0, 1, 2, 3, 4]))).unwrap();
    wait_completed(&cluster, &nodes(&[0, 1, 2, 3, 4]));
    admin(&cluster, |n| n.reassign_log(LOG, nodes(&[2, 3, 4]))).unwrap();
    wait_completed(&cluster, &nodes(&[2, 3, 4]));
    wait_deleted(&cluster, NodeId(0));
    wait_deleted(&cluster, NodeId(1));
    let writes = writer.stop();
    check_nothing_lost(&cluster, &writes);
}

#[test]
fn a_bad_target_is_refused_naming_the_field_and_value() {
    let cluster = cluster(4);
    let cases: &[(&[u32], &str)] = &[
        (&[], "target replicas is empty"),
        (&[0, 1, 1], "name node-1 twice"),
        (&[0], "fewer than min_insync_replicas 2"),
        (&[0, 1, 9], "target replica node-9 is not a live node"),
    ];
    for (target, fragment) in cases {
        let error = admin(&cluster, |n| n.reassign_log(LOG, nodes(target))).unwrap_err();
        assert!(
            error.to_string().contains(fragment),
            "{target:?}: {error} does not say {fragment:?}"
        );
    }
    assert!(!state(&cluster).is_reassigning());
}
