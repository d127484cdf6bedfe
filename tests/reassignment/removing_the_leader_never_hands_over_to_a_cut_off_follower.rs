//! SPEC 3.10 with 3.4: a reassignment removes the leader while a target
//! replica is cut off from everyone. The cut-off replica is still in the
//! ISR (until `replica_lag_time_max` passes) and first in the target, so a
//! controller naming "the first live target replica in the ISR" would make
//! it leader, and the log would be unavailable until the partition heals.
//! The leader hands over as in a controlled shutdown instead, to a target
//! replica that has fetched everything; the move completes once the
//! cut-off replica is back in the ISR, and nothing acknowledged is lost.

use std::time::Duration;

use isrlog::NodeId;

use crate::reassignment_support::*;

#[test]
fn removing_the_leader_never_hands_over_to_a_cut_off_follower() {
    let cluster = cluster_with_lag(4, Duration::from_secs(3));
    let old_leader = cluster.leader_of(LOG).unwrap();
    let cut_off = nodes(&[0, 1, 2])
        .into_iter()
        .find(|n| *n != old_leader)
        .unwrap();
    let others: Vec<NodeId> = cluster
        .node_ids()
        .into_iter()
        .filter(|n| *n != cut_off)
        .collect();
    let target: Vec<NodeId> = std::iter::once(cut_off)
        .chain(
            nodes(&[0, 1, 2, 3])
                .into_iter()
                .filter(|n| *n != cut_off && *n != old_leader),
        )
        .collect();
    let writer = Writer::start(&cluster);
    cluster.network.partition(&[cut_off], &others);
    admin(&cluster, |n| n.reassign_log(LOG, target.clone())).unwrap();
    let handed_over = cluster.wait_until(WAIT_MAX, |c| {
        c.leader_of(LOG).is_some_and(|leader| leader != old_leader)
    });
    assert!(
        handed_over,
        "the leader kept the log: {:?}",
        state(&cluster)
    );
    let new_leader = cluster.leader_of(LOG).unwrap();
    assert_ne!(new_leader, cut_off, "the cut-off replica was made leader");
    assert!(target.contains(&new_leader), "{new_leader} leads");
    // The cut-off replica leaves the ISR after `replica_lag_time_max`; the
    // move then waits for it to catch up again, and completes once the
    // partition heals.
    assert!(
        cluster.wait_until(WAIT_MAX, |c| !c.in_sync_replicas(LOG).contains(&cut_off)),
        "the cut-off replica stayed in the ISR"
    );
    let held = state(&cluster);
    assert!(held.is_reassigning(), "{held:?}");
    assert_eq!(cluster.leader_of(LOG), Some(new_leader));
    cluster.network.heal();
    wait_completed(&cluster, &target);
    wait_deleted(&cluster, old_leader);
    let writes = writer.stop();
    check_nothing_lost(&cluster, &writes);
}
