//! SPEC 3.10 with 3.4: a leader that a move removes hands the log over (as
//! in a controlled shutdown) by stopping its appends until the high
//! watermark reaches their end. While an ISR member is cut off, that end
//! is out of reach until `replica_lag_time_max` drops the member from the
//! ISR: stopping appends then would refuse `acks=1` appends for nothing
//! (they stopped for 2 s of every 3 before, review of 5683f2c). The
//! leader keeps taking them, and hands over once every ISR member fetches
//! again; a cancellation meanwhile leaves it leading, and nothing
//! acknowledged is lost.

use std::time::{Duration, Instant};

use isrlog::{Acks, Error, NodeId};

use crate::reassignment_support::*;

#[test]
fn a_removed_leader_keeps_taking_appends_while_a_cut_off_replica_holds_the_high_watermark() {
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
    // below the log end while it is in the ISR. Then long enough for the
    // leader to see it stopped fetching (2 x fetch_wait_max).
    handle
        .append_values(&["after the cut"], Acks::Leader)
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // A shrink that removes the leader: every target replica is in the
    // ISR at once, and the replica set (so the leader epoch) stays.
    let moving = admin(&cluster, |n| n.reassign_log(LOG, followers.clone())).unwrap();
    assert_eq!(moving.removing_replicas, vec![leader]);
    let until = Instant::now() + Duration::from_millis(1500);
    let (mut taken, mut refused) = (0, 0);
    while Instant::now() < until {
        match handle.append_values(&["probe"], Acks::Leader) {
            Ok(_) => taken += 1,
            Err(Error::NotLeader { .. }) => refused += 1,
            Err(error) => panic!("unexpected {error}"),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        refused, 0,
        "the removed leader stopped its appends ({taken} taken) while a cut-off replica held the high watermark"
    );
    assert!(state(&cluster).is_reassigning());
    assert_eq!(state(&cluster).leader, Some(leader));

    let cancelled = admin(&cluster, |n| n.cancel_reassignment(LOG)).unwrap();
    assert!(!cancelled.is_reassigning(), "{cancelled:?}");
    assert_eq!(cancelled.leader, Some(leader));
    assert_eq!(cancelled.leader_epoch, moving.leader_epoch);
    handle.append_values(&["after"], Acks::Leader).unwrap();
    cluster.network.heal();
    wait_completed(&cluster, &nodes(&[0, 1, 2]));
    let writes = Writes::default();
    check_nothing_lost(&cluster, &writes);
}
