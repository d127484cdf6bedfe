//! SPEC 3.1: when each `acks` level returns, and the errors of `acks=all`.

use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::{Acks, Error, LogId, ManualClock, NodeId, Offset, ReplicationConfig};

fn cluster(clock: &ManualClock, request_timeout: Duration) -> Cluster {
    Cluster::builder()
        .nodes(3)
        .manual_clock(clock.clone())
        .session_timeout(Duration::from_secs(3600))
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_secs(10),
            fetch_wait_max: Duration::from_millis(20),
            request_timeout,
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap()
}

/// Moves manual time forward in steps, giving fetchers real time to run.
fn advance(clock: &ManualClock, total: Duration) {
    let step = Duration::from_millis(500);
    let mut moved = Duration::ZERO;
    while moved < total {
        clock.advance(step);
        moved += step;
        std::thread::sleep(Duration::from_millis(30));
    }
}

const LOG: LogId = LogId(0);
const LEADER: NodeId = NodeId(0);
const FOLLOWERS: [NodeId; 2] = [NodeId(1), NodeId(2)];

#[test]
fn acks_one_returns_after_the_local_append_without_waiting_for_followers() {
    let clock = ManualClock::default();
    let cluster = cluster(&clock, Duration::from_secs(5));
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    cluster.network.partition(&[LEADER], &FOLLOWERS);
    let out = leader.append_values(&[b"x"], Acks::Leader).unwrap();
    assert_eq!(out.base_offset, Offset(0));
    assert_eq!(leader.log_end_offset(), Offset(1));
    assert_eq!(
        leader.high_watermark(),
        Offset(0),
        "not committed without followers"
    );
    for follower in FOLLOWERS {
        assert_eq!(
            cluster.log(follower, LOG).unwrap().log_end_offset(),
            Offset(0)
        );
    }
}

#[test]
fn acks_zero_returns_once_handed_to_the_log() {
    let clock = ManualClock::default();
    let cluster = cluster(&clock, Duration::from_secs(5));
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    cluster.network.partition(&[LEADER], &FOLLOWERS);
    let started = Instant::now();
    leader.append_values(&[b"x"], Acks::None).unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(leader.log_end_offset(), Offset(1));
}

#[test]
fn acks_all_returns_only_once_committed_and_times_out_when_it_cannot_be() {
    let clock = ManualClock::default();
    let cluster = cluster(&clock, Duration::from_millis(300));
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let out = leader.append_values(&[b"a"], Acks::All).unwrap();
    assert!(leader.high_watermark() > out.last_offset);
    for follower in FOLLOWERS {
        assert!(cluster.log(follower, LOG).unwrap().log_end_offset() > out.last_offset);
    }
    // Followers cut off but still in the ISR: the append cannot commit.
    cluster.network.partition(&[LEADER], &FOLLOWERS);
    match leader.append_values(&[b"b"], Acks::All) {
        Err(Error::Timeout { .. }) => {}
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert_eq!(
        leader.high_watermark(),
        Offset(1),
        "offset 1 must not be committed"
    );
    // After healing, the batch left in the log commits and new appends succeed.
    cluster.network.heal();
    let out = leader.append_values(&[b"c"], Acks::All).unwrap();
    assert_eq!(out.base_offset, Offset(2));
    assert!(leader.high_watermark() >= Offset(3));
}

#[test]
fn acks_all_with_isr_below_min_fails_before_appending() {
    let clock = ManualClock::default();
    let cluster = cluster(&clock, Duration::from_secs(5));
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    leader.append_values(&[b"a"], Acks::All).unwrap();
    cluster.network.partition(&[LEADER], &FOLLOWERS);
    advance(&clock, Duration::from_secs(12));
    assert!(
        cluster.wait_until(Duration::from_secs(5), |c| c.in_sync_replicas(LOG)
            == vec![LEADER]),
        "ISR did not shrink: {:?}",
        cluster.in_sync_replicas(LOG)
    );
    let before = leader.log_end_offset();
    match leader.append_values(&[b"b"], Acks::All) {
        Err(Error::NotEnoughReplicas {
            in_sync: 1,
            min_insync_replicas: 2,
        }) => {}
        other => panic!("expected NotEnoughReplicas, got {other:?}"),
    }
    assert_eq!(leader.log_end_offset(), before, "nothing may be appended");
}

#[test]
fn acks_all_fails_with_not_enough_replicas_after_append_when_the_isr_shrinks_while_waiting() {
    let clock = ManualClock::default();
    let cluster = cluster(&clock, Duration::from_secs(20));
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    leader.append_values(&[b"a"], Acks::All).unwrap();
    cluster.network.partition(&[LEADER], &FOLLOWERS);
    let appender = {
        let leader = leader.clone();
        std::thread::spawn(move || leader.append_values(&[b"b"], Acks::All))
    };
    std::thread::sleep(Duration::from_millis(50));
    advance(&clock, Duration::from_secs(12));
    match appender.join().unwrap() {
        Err(Error::NotEnoughReplicasAfterAppend { .. }) => {}
        other => panic!("expected NotEnoughReplicasAfterAppend, got {other:?}"),
    }
    assert_eq!(
        leader.log_end_offset(),
        Offset(2),
        "the batch stays in the log"
    );
    assert_eq!(leader.high_watermark(), Offset(1), "and is not committed");
}
