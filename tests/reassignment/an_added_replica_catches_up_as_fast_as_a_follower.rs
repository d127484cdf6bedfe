//! Issue 26's catch-up criterion: a replica added by a reassignment
//! fetches a backlog at no less than half the rate of a follower fetching
//! the same backlog from the same leader in the same run. A follower is
//! stopped while the leader takes the backlog; then it restarts and the
//! new replica is added at the same moment, and each one's time from its
//! replica being opened to its log end reaching the leader's is compared.

use std::time::{Duration, Instant};

use isrlog::{Acks, NodeId};

use crate::reassignment_support::*;

#[test]
fn an_added_replica_catches_up_as_fast_as_a_follower() {
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
    let mut opened: [Option<Instant>; 2] = [None, None];
    let mut caught_up: [Option<Instant>; 2] = [None, None];
    let deadline = Instant::now() + WAIT_MAX;
    while caught_up.iter().any(Option::is_none) && Instant::now() < deadline {
        for (i, node) in [follower, added].into_iter().enumerate() {
            if let Ok(replica) = cluster.log(node, LOG) {
                let now = Instant::now();
                opened[i].get_or_insert(now);
                if caught_up[i].is_none() && replica.log_end_offset() >= end {
                    caught_up[i] = Some(now);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = |i: usize| -> Duration {
        match (opened[i], caught_up[i]) {
            (Some(from), Some(to)) => to - from,
            _ => panic!("replica {i} did not catch up to {end}"),
        }
    };
    let (follower_took, added_took) = (took(0), took(1));
    eprintln!(
        "{} records: the follower caught up in {follower_took:?}, the added replica in {added_took:?}",
        end.0
    );
    // Half the rate is twice the time; 100 ms of slack for the 1 ms polls
    // and scheduling on a busy machine.
    assert!(
        added_took <= follower_took * 2 + Duration::from_millis(100),
        "the added replica took {added_took:?}, the follower {follower_took:?}"
    );
    wait_completed(&cluster, &nodes(&[0, 1, 2, 3]));
}
