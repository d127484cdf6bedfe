//! SPEC 2.8 and 3.10 (helper-151's review, finding 3): the record that a
//! deleted replica is placed on no directory (`DirectoryId::UNASSIGNED`)
//! may fail to be written. Only logged, the old placement stayed on
//! record, and a start of the node after a move added the replica back
//! (before it was created again) counted it as one that lost its data:
//! every replica of the node left the ISR and ELR. The node now retries
//! the unassign on its report timer, and at its next start if it stopped
//! first, until it is written.

use isrlog::{DirectoryId, NodeId, PreviousShutdown};

use crate::reassignment_support::*;

/// Adds node 2 back to the log while it is down, restarts it, and checks
/// that the start was clean and the replica is placed on `directory` again.
fn add_back_and_restart(cluster: &isrlog::testing::Cluster, directory: DirectoryId) {
    cluster.stop_node(NodeId(2)).unwrap();
    add_back_while_down(cluster, &[0, 1, 3, 2], NodeId(2));
    assert!(!replica_dir(cluster, NodeId(2)).exists());
    cluster.restart(NodeId(2)).unwrap();
    let previous = cluster
        .with_node(NodeId(2), |n| n.previous_shutdown())
        .unwrap();
    assert_eq!(previous, PreviousShutdown::Clean);
    wait_completed(cluster, &nodes(&[0, 1, 2, 3]));
    assert_eq!(placed(cluster, NodeId(2)), Some(directory));
}

/// Moves the log off node 2 (to 0, 1 and 3) with its next `failures`
/// unassigns failing, and waits until node 2 deleted its copy: where the
/// replica was placed before, and node 2's coordinator knob.
fn remove_node_2_failing_unassigns(
    cluster: &isrlog::testing::Cluster,
    failures: u64,
) -> (DirectoryId, isrlog::testing::CoordinatorDelay) {
    let first = placed(cluster, NodeId(2)).expect("node 2's replica is placed");
    let delay = cluster.coordinator_delay(NodeId(2));
    delay.fail_unassigns(failures);
    let target = nodes(&[0, 1, 3]);
    admin(cluster, |n| n.reassign_log(LOG, target.clone())).unwrap();
    wait_completed(cluster, &target);
    wait_deleted(cluster, NodeId(2));
    (first, delay)
}

#[test]
fn a_failed_unassign_is_retried_on_the_report_timer() {
    let cluster = cluster(4);
    let (first, delay) = remove_node_2_failing_unassigns(&cluster, 2);
    assert!(
        cluster.wait_until(WAIT_MAX, |c| placed(c, NodeId(2))
            == Some(DirectoryId::UNASSIGNED)),
        "node 2's deleted replica is still placed on {:?}",
        placed(&cluster, NodeId(2))
    );
    assert_eq!(delay.unassigns_to_fail(), 0, "both failures were met");
    add_back_and_restart(&cluster, first);
}

#[test]
fn an_unassign_that_failed_until_the_node_stopped_is_written_at_its_next_start() {
    let cluster = cluster(4);
    let (first, delay) = remove_node_2_failing_unassigns(&cluster, u64::MAX);
    cluster.stop_node(NodeId(2)).unwrap();
    assert_eq!(placed(&cluster, NodeId(2)), Some(first));

    delay.fail_unassigns(0);
    cluster.restart(NodeId(2)).unwrap();
    assert_eq!(
        placed(&cluster, NodeId(2)),
        Some(DirectoryId::UNASSIGNED),
        "the start wrote the unassign"
    );
    add_back_and_restart(&cluster, first);
}

/// The start reads the log again before it unassigns a replica it is still
/// on record for: if that up-to-date read lists the node (the list of logs
/// it started from was stale, and a move added the replica back), the
/// replica is hosted, and, having no copy here while on record as placed
/// on this directory, counted as lost (SPEC 2.8), never left out of both
/// (helper-157's review).
#[test]
fn a_replica_added_back_behind_a_stale_list_is_counted_as_lost_not_skipped() {
    let cluster = cluster(4);
    let (first, delay) = remove_node_2_failing_unassigns(&cluster, u64::MAX);
    let removed = state(&cluster);
    cluster.stop_node(NodeId(2)).unwrap();
    assert_eq!(placed(&cluster, NodeId(2)), Some(first));
    add_back_while_down(&cluster, &[0, 1, 3, 2], NodeId(2));

    delay.fail_unassigns(0);
    delay.serve_stale_log_list(vec![removed]);
    cluster.restart(NodeId(2)).unwrap();
    let previous = cluster
        .with_node(NodeId(2), |n| n.previous_shutdown())
        .unwrap();
    assert_eq!(previous, PreviousShutdown::LostData);
    assert_eq!(placed(&cluster, NodeId(2)), Some(first), "not unassigned");
    wait_completed(&cluster, &nodes(&[0, 1, 2, 3]));
}
