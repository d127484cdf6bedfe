//! SPEC 2.8 and 3.10: a node that deletes its copy of a replica that a
//! reassignment removed records it as placed on no directory
//! (`DirectoryId::UNASSIGNED`, Kafka's KIP-858 `UNASSIGNED`). Added back
//! and not created again yet when the node stops cleanly, the replica is
//! then not taken for one that lost its data at the next start, which
//! would cost the node its clean standing (the ISR and ELR of every log it
//! hosts). Found by the simulator (seed 20005277: the node's disk was full,
//! so it could not create the replica added back).

use isrlog::{DirectoryId, NodeId, PreviousShutdown};

use crate::reassignment_support::*;

#[test]
fn a_deleted_replica_is_placed_on_no_directory() {
    let cluster = cluster(4);
    let placed = |node: NodeId| placed(&cluster, node);
    let first = placed(NodeId(2)).expect("node 2's replica is placed");
    assert_ne!(first, DirectoryId::UNASSIGNED);

    let target = nodes(&[0, 1, 3]);
    admin(&cluster, |n| n.reassign_log(LOG, target.clone())).unwrap();
    wait_completed(&cluster, &target);
    wait_deleted(&cluster, NodeId(2));
    assert!(
        cluster.wait_until(WAIT_MAX, |_| placed(NodeId(2))
            == Some(DirectoryId::UNASSIGNED)),
        "node 2's deleted replica is still placed on {:?}",
        placed(NodeId(2))
    );

    // Added back while node 2 is down, so that it has not created the
    // replica when it starts (written directly: an operator's call adds
    // only live nodes).
    cluster.stop_node(NodeId(2)).unwrap();
    add_back_while_down(&cluster, &[0, 1, 3, 2], NodeId(2));
    assert!(!replica_dir(&cluster, NodeId(2)).exists());

    cluster.restart(NodeId(2)).unwrap();
    let previous = cluster
        .with_node(NodeId(2), |n| n.previous_shutdown())
        .unwrap();
    assert_eq!(previous, PreviousShutdown::Clean);
    // It fetches its replica again, placed on its directory once more.
    wait_completed(&cluster, &nodes(&[0, 1, 2, 3]));
    assert_eq!(placed(NodeId(2)), Some(first));
}
