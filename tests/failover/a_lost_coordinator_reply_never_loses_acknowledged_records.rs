//! SPEC 3.3, 3.4 (issue 24 item 1): an ISR change whose answer from the
//! coordinator was lost is neither accepted nor refused. It stays pending,
//! and a pending expansion keeps counting for the high watermark, until a
//! read of the stored state settles it; so the high watermark never passes
//! a replica the coordinator may already record as in the ISR, and the
//! controller, electing that replica, loses nothing acknowledged.
//!
//! The memory coordinator applies the leader's expansion, loses the answer
//! and cuts the leader off (as a ZooKeeper connection that drops after the
//! server applied the write); the event of the write is withheld too.

use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::{Acks, Coordinator, ReplicationConfig, Role};

use crate::failover_support::committed_values;

#[test]
fn a_lost_isr_expansion_reply_keeps_the_replica_counting_until_a_read_settles_it() {
    let cluster = Cluster::builder()
        .nodes(3)
        .session_timeout(Duration::from_secs(60))
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_millis(500),
            fetch_wait_max: Duration::from_millis(20),
            request_timeout: Duration::from_secs(20),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap();
    let log = isrlog::LogId(0);
    let replicas = cluster.create_log(log, 3).unwrap();
    let (a, b, c) = (replicas[0], replicas[1], replicas[2]);
    let leader = cluster.leader_log(log).unwrap();
    assert_eq!(leader.node_id(), a);
    leader.append_values(&[b"first"], Acks::All).unwrap();

    // ISR {A, C}: B is cut off from the others and falls out.
    cluster.network.partition(&[b], &[a, c]);
    leader.append_values(&[b"second"], Acks::All).unwrap();
    assert!(
        cluster.wait_until(Duration::from_secs(10), |cluster| cluster
            .in_sync_replicas(log)
            .len()
            == 2),
        "B never left the ISR: {:?}",
        cluster.in_sync_replicas(log)
    );
    assert_eq!(cluster.in_sync_replicas(log), vec![a, c]);

    // B comes back and catches up; A's expansion {A, B, C} is stored, but
    // the answer is lost and A is cut off from the coordinator.
    cluster.coordinator.lose_compare_and_set_replies(a, 1);
    cluster.network.heal();
    let deadline = Instant::now() + Duration::from_secs(10);
    while cluster.in_sync_replicas(log).len() < 3 {
        assert!(Instant::now() < deadline, "B never rejoined the ISR");
        std::thread::sleep(Duration::from_millis(1));
    }
    // B stops fetching at once, holding everything up to here.
    cluster.network.partition(&[b], &[a, c]);
    let b_log_end = cluster.log(b, log).unwrap().log_end_offset();

    // A write acknowledged by C alone must not commit: B, which the
    // coordinator records as in the ISR, does not have it.
    let pending = {
        let leader = leader.clone();
        std::thread::spawn(move || leader.append_values(&[b"third"], Acks::All))
    };
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        !pending.is_finished(),
        "acks=all returned while the ISR change was unsettled"
    );
    assert!(
        leader.high_watermark() <= b_log_end,
        "HW {:?} passed the log end {b_log_end:?} of B, which the coordinator records as in the ISR",
        leader.high_watermark()
    );

    // Reconnected, A reads the stored ISR, adopts it, then shrinks B out
    // (it lags) and only then commits.
    cluster.coordinator.set_node_unavailable(a, false);
    let acknowledged = pending.join().unwrap();
    assert!(
        acknowledged.is_ok(),
        "after the shrink the write commits: {acknowledged:?}"
    );
    assert_eq!(cluster.in_sync_replicas(log), vec![a, c]);

    // A crashes: the controller elects C, not B, and C has every
    // acknowledged record.
    cluster.crash(a);
    assert!(
        cluster.wait_until(Duration::from_secs(10), |cluster| cluster
            .leader_of(log)
            .is_some_and(|leader| leader != a)),
        "no new leader"
    );
    assert_eq!(cluster.leader_of(log), Some(c));
    cluster.network.heal();
    let new_leader = cluster.leader_log(log).unwrap();
    assert_eq!(new_leader.role(), Role::Leader);
    assert!(
        cluster.wait_until(Duration::from_secs(10), |_| committed_values(&new_leader)
            .len()
            >= 3),
        "the new leader does not commit what it holds"
    );
    let values: Vec<String> = committed_values(&new_leader)
        .into_iter()
        .map(|(_, value)| value)
        .collect();
    assert_eq!(values, vec!["first", "second", "third"]);
    let state = cluster.coordinator.log_state(log).unwrap().unwrap();
    assert_eq!(state.leader, Some(c));
}
