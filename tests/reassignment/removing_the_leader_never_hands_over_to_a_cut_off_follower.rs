//! SPEC 3.10 with 3.4: a reassignment removes the leader while a target
//! replica is cut off from everyone. The cut-off replica is still in the
//! ISR (until `replica_lag_time_max` passes) and first in the target, so a
//! controller naming "the first live target replica in the ISR" would make
//! it leader, and the log would be unavailable until the partition heals.
//! The leader hands over as in a controlled shutdown instead, to a target
//! replica that has fetched everything; the move completes once the
//! cut-off replica is back in the ISR, and nothing acknowledged is lost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::NodeId;

use crate::reassignment_support::*;

/// A 4-node cluster with this `replica_lag_time_max`, a follower of the
/// log to cut off, the nodes it will be cut from, and a target that
/// removes the leader: the cut-off replica first, then the other
/// follower, then the added node 3.
struct CutOff {
    cluster: Arc<Cluster>,
    old_leader: NodeId,
    cut_off: NodeId,
    others: Vec<NodeId>,
    target: Vec<NodeId>,
}

fn cut_off_move(replica_lag_time_max: Duration) -> CutOff {
    let cluster = cluster_with_lag(4, replica_lag_time_max);
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
    CutOff {
        cluster,
        old_leader,
        cut_off,
        others,
        target,
    }
}

#[test]
fn removing_the_leader_never_hands_over_to_a_cut_off_follower() {
    let CutOff {
        cluster,
        old_leader,
        cut_off,
        others,
        target,
    } = cut_off_move(Duration::from_secs(3));
    let writer = Writer::start(&cluster);
    cluster.network.partition(&[cut_off], &others);
    admin(&cluster, |n| n.reassign_log(LOG, target.clone())).unwrap();
    // While the cut-off replica is in the ISR (and a while after), every
    // target replica may be in the ISR: the leadership may move, never to
    // the replica that cannot be reached.
    let mut leaders = Vec::new();
    let mut left_isr_at = None;
    let deadline = Instant::now() + WAIT_MAX;
    while Instant::now() < deadline {
        let s = state(&cluster);
        if let Some(leader) = s.leader {
            if leaders.last() != Some(&leader) {
                leaders.push(leader);
            }
        }
        if !s.is_in_sync(cut_off) && left_isr_at.is_none() {
            left_isr_at = Some(Instant::now());
        }
        if left_isr_at.is_some_and(|at| at.elapsed() > Duration::from_millis(500)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        !leaders.contains(&cut_off),
        "the cut-off replica {cut_off} was made leader: leaders {leaders:?}"
    );
    assert!(
        left_isr_at.is_some(),
        "the cut-off replica stayed in the ISR"
    );
    // The move waits for it to be back in the ISR, unless it completed
    // before the cut-off replica left the ISR: when that replica had
    // fetched everything before the cut and the leader stopped appends
    // within `2 x fetch_wait_max` of it, the high watermark reached the
    // stopped end, the leader handed over to the other target follower,
    // and every target replica was in the ISR (seen once in 20 runs).
    // Either way the cut-off replica never led (asserted above).
    let held = state(&cluster);
    if !held.is_reassigning() {
        let (mut replicas, mut expected) = (held.replicas.clone(), target.clone());
        replicas.sort();
        expected.sort();
        assert_eq!(replicas, expected, "{held:?}");
        assert_ne!(held.leader, Some(cut_off), "{held:?}");
    }
    cluster.network.heal();
    wait_completed(&cluster, &target);
    wait_deleted(&cluster, old_leader);
    assert!(target.contains(&cluster.leader_of(LOG).unwrap()));
    let writes = writer.stop();
    check_nothing_lost(&cluster, &writes);
}

/// Review of 714b35d: with the default `replica_lag_time_max` (30 s) the
/// cut-off replica stays in the ISR longer than the controller's fallback
/// used to wait (10 s) before naming the first live target replica leader
/// itself: it named the cut-off one, and the log could take no write until
/// the partition healed. The controller now waits longer than a replica
/// can stay in the ISR cut off.
#[test]
fn the_controller_never_names_a_cut_off_follower_under_the_default_lag() {
    let CutOff {
        cluster,
        old_leader,
        cut_off,
        others,
        target,
    } = cut_off_move(Duration::from_secs(30));
    // Appends go on after the cut: the cut-off replica stays behind the
    // leader's log end, so the leader's own hand-over cannot finish (its
    // high watermark waits for every ISR member) while the added node 3
    // catches up and joins the ISR. Every target replica is then in the
    // ISR, and the controller's wait runs.
    let writer = Writer::start(&cluster);
    cluster.network.partition(&[cut_off], &others);
    admin(&cluster, |n| n.reassign_log(LOG, target.clone())).unwrap();
    assert!(
        cluster.wait_until(WAIT_MAX, |c| state(c).is_in_sync(NodeId(3))),
        "the added replica did not join the ISR: {:?}",
        state(&cluster)
    );
    assert!(state(&cluster).is_reassigning(), "{:?}", state(&cluster));
    let partitioned_until = Instant::now() + Duration::from_secs(11);
    let mut leaders = Vec::new();
    while Instant::now() < partitioned_until {
        if let Some(leader) = state(&cluster).leader {
            if leaders.last() != Some(&leader) {
                leaders.push(leader);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        !leaders.contains(&cut_off),
        "the cut-off replica {cut_off} was made leader while partitioned: leaders {leaders:?}"
    );
    cluster.network.heal();
    wait_completed(&cluster, &target);
    wait_deleted(&cluster, old_leader);
    let writes = writer.stop();
    check_nothing_lost(&cluster, &writes);
}
