//! SPEC 3.4, 3.7: a leader cut off from the coordinator and its followers
//! cannot change the ISR and never reports an `acks=all` success; once it
//! hears of the newer epoch it steps down, truncates its unacknowledged
//! suffix and follows.

use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{
    Acks, CasOutcome, Coordinator, Error, Isolation, LogId, LogUpdate, ManualClock, NodeId, Offset,
    ReplicationConfig, Role,
};

#[test]
fn a_deposed_leader_cannot_change_the_isr_and_its_acks_all_never_succeed() {
    let clock = ManualClock::default();
    let cluster = Cluster::builder()
        .nodes(3)
        .manual_clock(clock.clone())
        .session_timeout(Duration::from_secs(3600))
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_secs(10),
            fetch_wait_max: Duration::from_millis(20),
            request_timeout: Duration::from_secs(2),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap();
    let log = LogId(0);
    let (a, b, c) = (NodeId(0), NodeId(1), NodeId(2));
    cluster.create_log(log, 3).unwrap();
    let old_leader = cluster.leader_log(log).unwrap();
    old_leader
        .append_values(&[b"committed"], Acks::All)
        .unwrap();

    // Cut the leader off from everyone.
    cluster.coordinator.set_node_unavailable(a, true);
    cluster.network.partition(&[a], &[b, c]);
    let stale_append = {
        let old_leader = old_leader.clone();
        std::thread::spawn(move || old_leader.append_values(&[b"never acknowledged"], Acks::All))
    };

    // The others elect b in epoch 1 (what the controller does).
    let state = cluster.coordinator.log_state(log).unwrap().unwrap();
    let update = LogUpdate {
        leader: Some(b),
        leader_epoch: state.leader_epoch.next(),
        in_sync_replicas: vec![b, c],
        eligible_leader_replicas: Vec::new(),
        unclean_report: None,
        assignment: None,
    };
    let applied = cluster
        .coordinator
        .compare_and_set(log, state.leader_epoch, state.version, update)
        .unwrap();
    assert!(matches!(applied, CasOutcome::Applied(_)));
    let new_leader = cluster.leader_log(log).unwrap();
    assert_eq!(new_leader.node_id(), b);
    new_leader
        .append_values(&[b"new epoch"], Acks::All)
        .unwrap();

    // Time passes: the old leader wants to shrink its ISR but cannot.
    for _ in 0..30 {
        clock.advance(Duration::from_millis(500));
        std::thread::sleep(Duration::from_millis(10));
    }
    let state = cluster.coordinator.log_state(log).unwrap().unwrap();
    assert_eq!(state.leader, Some(b));
    assert_eq!(
        state.in_sync_replicas,
        vec![b, c],
        "the stale leader changed the ISR"
    );
    // Cut off from every follower and the coordinator, it can neither
    // commit nor shrink its accepted ISR, nor learn it was deposed: the
    // append can only run out its request timeout (outcome unknown).
    let stale = stale_append.join().unwrap();
    assert!(
        matches!(stale, Err(Error::Timeout { .. })),
        "stale acks=all must time out: {stale:?}"
    );
    assert_eq!(old_leader.role(), Role::Leader, "still believes it leads");

    // Reconnected, it steps down, drops its unacknowledged suffix and follows.
    cluster.coordinator.set_node_unavailable(a, false);
    cluster.network.heal();
    assert!(
        cluster.wait_until(Duration::from_secs(5), |_| old_leader.role()
            == Role::Follower { leader: b })
    );
    new_leader
        .append_values(&[b"after heal"], Acks::All)
        .unwrap();
    assert!(cluster.wait_until(Duration::from_secs(5), |_| {
        old_leader.log_end_offset() == new_leader.log_end_offset()
            && old_leader.high_watermark() == new_leader.high_watermark()
    }));
    let values = |handle: &isrlog::ReplicatedLog| -> Vec<Vec<u8>> {
        handle
            .read(Offset(0), 1 << 20, Isolation::Committed)
            .unwrap()
            .iter()
            .flat_map(|batch| batch.records().map(|r| r.unwrap().value.to_vec()))
            .collect()
    };
    assert_eq!(values(&old_leader), values(&new_leader));
    assert_eq!(
        values(&new_leader),
        vec![
            b"committed".to_vec(),
            b"new epoch".to_vec(),
            b"after heal".to_vec()
        ]
    );
}
