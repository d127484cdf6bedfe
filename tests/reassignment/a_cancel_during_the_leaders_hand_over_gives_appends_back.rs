//! SPEC 3.10: a leader that a move removes stops its appends to hand the
//! log over (as in a controlled shutdown) once a target replica has
//! caught up, and waits for the high watermark to reach where they
//! stopped. If the move is cancelled meanwhile, the leader stays and its
//! appends run again at once, not when the hand-over's own deadline (2 s)
//! passes. Here a target replica cut off from the leader (still in the ISR)
//! holds the high watermark, so the hand-over cannot finish before the
//! cancellation.

use std::time::{Duration, Instant};

use isrlog::{Acks, Error, NodeId};

use crate::reassignment_support::*;

#[test]
fn a_cancel_during_the_leaders_hand_over_gives_appends_back() {
    let cluster = cluster_with_lag(3, Duration::from_secs(5));
    let leader = cluster.leader_of(LOG).unwrap();
    let handle = cluster.log(leader, LOG).unwrap();
    handle.append_values(&["before"], Acks::All).unwrap();
    let followers: Vec<NodeId> = nodes(&[0, 1, 2])
        .into_iter()
        .filter(|n| *n != leader)
        .collect();
    let cut_off = followers[0];
    let others: Vec<NodeId> = nodes(&[0, 1, 2])
        .into_iter()
        .filter(|n| *n != cut_off)
        .collect();
    cluster.network.partition(&[cut_off], &others);
    // A record the cut-off replica cannot fetch: the high watermark stays
    // below the log end while it is in the ISR. (Without it, the leader's
    // hand-over could finish at once, everyone having fetched everything.)
    handle
        .append_values(&["after the cut"], Acks::Leader)
        .unwrap();
    // A shrink that removes the leader: every target replica is in the
    // ISR at once, and the replica set (so the leader epoch) stays.
    let moving = admin(&cluster, |n| n.reassign_log(LOG, followers.clone())).unwrap();
    assert_eq!(moving.removing_replicas, vec![leader]);
    let stopped = cluster.wait_until(Duration::from_millis(1500), |_| {
        matches!(
            handle.append_values(&["probe"], Acks::Leader),
            Err(Error::NotLeader { leader: None, .. })
        )
    });
    assert!(stopped, "the leader never stopped its appends to hand over");

    let cancelled = admin(&cluster, |n| n.cancel_reassignment(LOG)).unwrap();
    assert!(!cancelled.is_reassigning(), "{cancelled:?}");
    assert_eq!(cancelled.leader, Some(leader));
    assert_eq!(cancelled.leader_epoch, moving.leader_epoch);
    let at = Instant::now();
    let resumed = cluster.wait_until(Duration::from_secs(3), |_| {
        handle.append_values(&["after"], Acks::Leader).is_ok()
    });
    assert!(resumed, "appends never resumed");
    assert!(
        at.elapsed() < Duration::from_millis(1000),
        "appends resumed only {:?} after the cancellation",
        at.elapsed()
    );
    cluster.network.heal();
    wait_completed(&cluster, &nodes(&[0, 1, 2]));
}
