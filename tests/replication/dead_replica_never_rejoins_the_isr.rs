//! A replica whose node is not alive never joins the ISR (as Kafka since
//! KIP-841), even when a fetch it sent before it died reaches the leader
//! afterwards and shows it caught up. Found as a flaky unclean-election
//! test under load: a crashed follower's last long poll, answered after the
//! crash, put it back into the ISR.

use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::transport::{ErrorCode, FetchLog, FetchRequest, Request, Response};
use isrlog::{Acks, Coordinator, LogId, NodeId, ReplicationConfig};

#[test]
fn a_late_fetch_from_a_crashed_follower_does_not_put_it_back_into_the_isr() {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(1)
        // No controller: its own clean-up of dead followers would hide the
        // leader's mistake (and when every node is down, none runs).
        .controller(None)
        .replication(ReplicationConfig {
            min_insync_replicas: 1,
            replica_lag_time_max: Duration::from_millis(300),
            fetch_wait_max: Duration::from_millis(50),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap();
    let log = LogId(0);
    let (a, b, c) = (NodeId(0), NodeId(1), NodeId(2));
    cluster.create_log(log, 3).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    assert_eq!(leader.node_id(), a);
    for i in 0..5 {
        leader.append_values(&[format!("m{i}")], Acks::All).unwrap();
    }
    let b_incarnation = cluster.incarnation(b).expect("b runs");
    cluster.crash(b);
    assert!(
        cluster.wait_until(Duration::from_secs(10), |cl| cl.in_sync_replicas(log)
            == vec![a, c]
            && leader.in_sync_replicas() == vec![a, c]),
        "b never left the ISR: {:?}",
        cluster.coordinator.log_state(log)
    );

    // The fetch b sent just before it crashed: fully caught up.
    let epoch = leader.leader_epoch();
    let late_fetch = Request::Fetch(FetchRequest {
        replica: b,
        incarnation: b_incarnation,
        wait_max: Duration::ZERO,
        bytes_max: 1 << 20,
        logs: vec![FetchLog {
            log,
            current_leader_epoch: epoch,
            fetch_offset: leader.log_end_offset(),
            last_fetched_epoch: Some(epoch),
            line_epoch: Some(epoch),
            log_start_offset: leader.log_start_offset(),
            bytes_max: 1 << 20,
            applied_offset: None,
        }],
    });
    let handler = cluster.with_node(a, |node| node.handler()).unwrap();
    // Refused as not from a live incarnation once the leader has read
    // that b's session ended; before that, served, and then the liveness
    // check before an ISR expansion keeps b out (KIP-841).
    let answer = handler.handle(b, late_fetch);
    assert!(
        matches!(
            answer,
            Response::Fetch(_) | Response::Error(ErrorCode::StaleIncarnation)
        ),
        "{answer:?}"
    );

    // The leader would act on what the fetch showed within milliseconds
    // (and shrink the ISR again only after `replica_lag_time_max`).
    let watch_until = std::time::Instant::now() + Duration::from_millis(250);
    while std::time::Instant::now() < watch_until {
        let isr = cluster.in_sync_replicas(log);
        assert!(!isr.contains(&b), "a dead replica joined the ISR: {isr:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
    // The leader still commits with the live ISR.
    leader.append_values(&["after"], Acks::All).unwrap();
}
