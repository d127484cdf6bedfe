//! SPEC 3.3, 3.4 (issue 24 item 1), against a real ZooKeeper: the sequence
//! of the issue with the reply dropped by the leader's proxy after the
//! server applied the write. Replicas [A, B, C], min ISR 2, ISR {A, C}, A
//! leads; B catches up and A writes {A, B, C}; ZooKeeper applies it and the
//! answer never reaches A (the connection goes silent, then closes). The
//! write's outcome is unknown, so A keeps B in its maximal ISR: the high
//! watermark does not pass B's log end until a read settles the change, an
//! `acks=all` write acknowledged only by C does not return, and when A is
//! later cut off the controller's choice loses nothing acknowledged.

use std::time::{Duration, Instant};

use crate::zookeeper_support::{committed_values, server};
use isrlog::testing::ZkCluster;
use isrlog::{Acks, Coordinator, LogId, ReplicationConfig};

const LOG: LogId = LogId(0);
/// How long the leader's connection stays silent after the lost reply.
const HOLD: Duration = Duration::from_secs(3);

#[test]
fn zookeeper_a_lost_isr_expansion_reply_never_loses_acknowledged_records() {
    let server = server();
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(3)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_millis(500),
            fetch_wait_max: Duration::from_millis(20),
            request_timeout: Duration::from_secs(30),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .session_timeout(Duration::from_secs(6))
        .call_timeout(Duration::from_secs(1))
        .proxied(true)
        .build()
        .expect("cluster");
    let replicas = cluster.create_log(LOG, 3).expect("create log");
    let (a, b, c) = (replicas[0], replicas[1], replicas[2]);
    let leader = cluster.leader_log(LOG).expect("a leader");
    assert_eq!(leader.node_id(), a);
    leader.append_values(&[b"first"], Acks::All).expect("first");

    // ISR {A, C}: B is cut off from the others and falls out.
    cluster.network.partition(&[b], &[a, c]);
    leader
        .append_values(&[b"second"], Acks::All)
        .expect("second");
    assert!(
        cluster.wait_until(Duration::from_secs(15), |cluster| cluster
            .in_sync_replicas(LOG)
            .len()
            == 2),
        "B never left the ISR: {:?}",
        cluster.in_sync_replicas(LOG)
    );
    assert_eq!(cluster.in_sync_replicas(LOG), vec![a, c]);

    // B comes back; A's expansion reaches ZooKeeper, the reply does not.
    let proxy = cluster.proxy(a).expect("proxied");
    proxy.lose_reply_to_next_write("/logs/0", HOLD);
    cluster.network.heal();
    let deadline = Instant::now() + Duration::from_secs(15);
    while cluster.in_sync_replicas(LOG).len() < 3 {
        assert!(
            Instant::now() < deadline,
            "B never rejoined the ISR in ZooKeeper"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        proxy.replies_lost(),
        1,
        "the expansion's reply was not lost"
    );
    // B stops fetching at once, holding everything up to here.
    cluster.network.partition(&[b], &[a, c]);
    let b_log_end = cluster.log(b, LOG).expect("B's handle").log_end_offset();
    let lost_at = Instant::now();

    // Acknowledged by C alone, this write must not commit while ZooKeeper
    // records B in the ISR and A does not know better.
    let pending = {
        let leader = leader.clone();
        std::thread::spawn(move || leader.append_values(&[b"third"], Acks::All))
    };
    while lost_at.elapsed() < HOLD / 2 {
        assert!(
            leader.high_watermark() <= b_log_end,
            "HW {:?} passed the log end {b_log_end:?} of B, which ZooKeeper records as in the ISR",
            leader.high_watermark()
        );
        assert!(
            !pending.is_finished(),
            "acks=all returned while the ISR change was unsettled"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // A reconnects, reads the stored ISR, shrinks B out (it lags) and only
    // then commits.
    let acknowledged = pending.join().expect("append thread");
    assert!(
        acknowledged.is_ok(),
        "after the shrink the write commits: {acknowledged:?}"
    );
    eprintln!("acknowledged {:?} after the lost reply", lost_at.elapsed());
    assert_eq!(cluster.in_sync_replicas(LOG), vec![a, c]);

    // A crashes: the controller elects C, not B, and C has every
    // acknowledged record.
    cluster.crash(a);
    assert!(
        cluster.wait_until(Duration::from_secs(20), |cluster| cluster
            .leader_of(LOG)
            .is_some_and(|leader| leader != a)),
        "no new leader"
    );
    assert_eq!(cluster.leader_of(LOG), Some(c));
    cluster.network.heal();
    let new_leader = cluster.leader_log(LOG).expect("the new leader leads");
    assert!(
        cluster.wait_until(Duration::from_secs(10), |_| committed_values(&new_leader)
            .len()
            >= 3),
        "the new leader does not commit what it holds"
    );
    assert_eq!(
        committed_values(&new_leader),
        vec!["first", "second", "third"]
    );
    cluster.shutdown().expect("shutdown");
}

/// A lost reply to an ISR shrink: replicas [A, B, C], ISR {A, B, C}, A
/// leads; B is cut off and A writes {A, C}; ZooKeeper applies it and the
/// answer never reaches A. Until a read settles the change, B still counts
/// toward the high watermark (SPEC 3.3: a pending shrink keeps counting),
/// so an `acks=all` write does not return; once settled it commits, and
/// when A crashes the controller elects C, which has every acknowledged
/// record.
#[test]
fn zookeeper_a_lost_isr_shrink_reply_never_loses_acknowledged_records() {
    let server = server();
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(3)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_millis(500),
            fetch_wait_max: Duration::from_millis(20),
            request_timeout: Duration::from_secs(30),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .session_timeout(Duration::from_secs(6))
        .call_timeout(Duration::from_secs(1))
        .proxied(true)
        .build()
        .expect("cluster");
    let replicas = cluster.create_log(LOG, 3).expect("create log");
    let (a, b, c) = (replicas[0], replicas[1], replicas[2]);
    let leader = cluster.leader_log(LOG).expect("a leader");
    assert_eq!(leader.node_id(), a);
    leader.append_values(&[b"first"], Acks::All).expect("first");
    assert!(
        cluster.wait_until(Duration::from_secs(10), |cluster| cluster
            .in_sync_replicas(LOG)
            .len()
            == 3),
        "the ISR never held all three"
    );

    // B is cut off; A's shrink reaches ZooKeeper, the reply does not.
    let proxy = cluster.proxy(a).expect("proxied");
    proxy.lose_reply_to_next_write("/logs/0", HOLD);
    cluster.network.partition(&[b], &[a, c]);
    let b_log_end = cluster.log(b, LOG).expect("B's handle").log_end_offset();
    let deadline = Instant::now() + Duration::from_secs(15);
    while cluster.in_sync_replicas(LOG).len() > 2 {
        assert!(
            Instant::now() < deadline,
            "B never left the ISR in ZooKeeper"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let lost_at = Instant::now();
    assert_eq!(proxy.replies_lost(), 1, "the shrink's reply was not lost");
    assert_eq!(cluster.in_sync_replicas(LOG), vec![a, c]);

    // Acknowledged by C alone, this write must not commit while A does
    // not know whether ZooKeeper took B out.
    let pending = {
        let leader = leader.clone();
        std::thread::spawn(move || leader.append_values(&[b"second"], Acks::All))
    };
    while lost_at.elapsed() < HOLD / 2 {
        assert!(
            leader.high_watermark() <= b_log_end,
            "HW {:?} passed the log end {b_log_end:?} of B while the shrink was unsettled",
            leader.high_watermark()
        );
        assert!(
            !pending.is_finished(),
            "acks=all returned while the ISR change was unsettled"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let acknowledged = pending.join().expect("append thread");
    assert!(
        acknowledged.is_ok(),
        "once the shrink is settled the write commits: {acknowledged:?}"
    );
    eprintln!(
        "shrink: acknowledged {:?} after the lost reply",
        lost_at.elapsed()
    );
    assert_eq!(cluster.in_sync_replicas(LOG), vec![a, c]);

    cluster.crash(a);
    assert!(
        cluster.wait_until(Duration::from_secs(20), |cluster| cluster
            .leader_of(LOG)
            .is_some_and(|leader| leader != a)),
        "no new leader"
    );
    assert_eq!(cluster.leader_of(LOG), Some(c));
    cluster.network.heal();
    let new_leader = cluster.leader_log(LOG).expect("the new leader leads");
    assert!(
        cluster.wait_until(Duration::from_secs(10), |_| committed_values(&new_leader)
            .len()
            >= 2),
        "the new leader does not commit what it holds"
    );
    assert_eq!(committed_values(&new_leader), vec!["first", "second"]);
    cluster.shutdown().expect("shutdown");
}

/// A lost reply to an election: the leader of a log crashes, the
/// controller (on another node) writes the new leader, ZooKeeper applies
/// it and the answer never reaches the controller. The controller settles
/// the outcome by reading, the log gets exactly one new leader (one epoch
/// more), and nothing acknowledged before the crash is lost.
#[test]
fn zookeeper_a_lost_election_reply_never_loses_acknowledged_records() {
    let server = server();
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(3)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_secs(10),
            fetch_wait_max: Duration::from_millis(20),
            request_timeout: Duration::from_secs(30),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .session_timeout(Duration::from_secs(6))
        .call_timeout(Duration::from_secs(1))
        .proxied(true)
        .build()
        .expect("cluster");
    let (controller, _) = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(seated)) = cluster.coordinator().controller() {
                break seated;
            }
            assert!(Instant::now() < deadline, "no controller");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // A log whose leader is not the controller.
    let log = LogId((controller.0 + 1) % 3);
    let replicas = cluster.create_log(log, 3).expect("create log");
    let old_leader = replicas[0];
    assert_ne!(old_leader, controller);
    let leader = cluster.leader_log(log).expect("a leader");
    let mut acknowledged = Vec::new();
    for n in 0..50 {
        let value = format!("record-{n}");
        leader
            .append_values(&[value.as_bytes()], Acks::All)
            .expect("append before the crash");
        acknowledged.push(value);
    }
    let epoch_before = cluster.leader_epoch_of(log);

    let proxy = cluster.proxy(controller).expect("proxied");
    proxy.lose_reply_to_next_write(&format!("/logs/{}", log.0), HOLD);
    let crashed_at = Instant::now();
    cluster.crash(old_leader);
    assert!(
        cluster.wait_until(Duration::from_secs(20), |cluster| cluster
            .leader_of(log)
            .is_some_and(|leader| leader != old_leader)),
        "no new leader"
    );
    eprintln!(
        "election: new leader {:?} after the crash",
        crashed_at.elapsed()
    );
    assert_eq!(proxy.replies_lost(), 1, "the election's reply was not lost");
    let new_leader = cluster.leader_log(log).expect("the new leader leads");
    // The controller learns the outcome once its connection is back, and
    // elects nobody else meanwhile.
    std::thread::sleep(HOLD + Duration::from_secs(1));
    assert_eq!(cluster.leader_of(log), Some(new_leader.node_id()));
    assert_eq!(
        cluster.leader_epoch_of(log),
        epoch_before.next(),
        "one election, one epoch"
    );
    new_leader
        .append_values(&[b"after"], Acks::All)
        .expect("the new leader serves");
    acknowledged.push("after".to_owned());
    let committed = committed_values(&new_leader);
    for value in &acknowledged {
        assert!(
            committed.contains(value),
            "{value} was acknowledged and is missing after the election"
        );
    }
    cluster.shutdown().expect("shutdown");
}
