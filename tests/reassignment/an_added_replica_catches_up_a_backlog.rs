//! SPEC 3.10 with 3.4: a replica added by a reassignment fetches the whole
//! backlog the leader took while it did not exist (here at the same time
//! as a restarted follower fetches the same backlog), joins the ISR, and
//! the move completes with its copy equal to the leader's. Its rate against
//! the follower's (issue 26: at least 0.5x) is measured by
//! `cargo bench --bench reassignment`, not here.

use isrlog::{Acks, NodeId};

use crate::reassignment_support::*;

#[test]
fn an_added_replica_catches_up_a_backlog() {
    let cluster = cluster(4);
    let leader = cluster.leader_of(LOG).unwrap();
    let follower = nodes(&[0, 1, 2])
        .into_iter()
        .find(|n| *n != leader)
        .unwrap();
    let added = NodeId(3);
    cluster.stop_node(follower).unwrap();
    let handle = cluster.leader_log(LOG).unwrap();
    let value = "x".repeat(200);
    let batch: Vec<&str> = vec![value.as_str(); 200];
    for _ in 0..150 {
        handle.append_values(&batch, Acks::All).unwrap();
    }
    let end = handle.log_end_offset();

    cluster.restart(follower).unwrap();
    admin(&cluster, |n| n.reassign_log(LOG, nodes(&[0, 1, 2, 3]))).unwrap();
    wait_completed(&cluster, &nodes(&[0, 1, 2, 3]));
    let leader_copy = committed_values(&handle);
    assert_eq!(leader_copy.len() as u64, end.0);
    for node in [follower, added] {
        let replica = cluster.log(node, LOG).unwrap();
        assert!(
            cluster.wait_until(WAIT_MAX, |_| replica.high_watermark() >= end),
            "{node} did not learn the high watermark {end}"
        );
        assert_eq!(
            committed_values(&replica),
            leader_copy,
            "{node}'s copy differs from the leader's"
        );
    }
}
