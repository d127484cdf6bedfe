//! Regression (issue 23, item 7): the leader took any fetch that named a
//! follower as that follower's log end, whichever process had sent it. A
//! fetch delayed from before the follower restarted with an empty disk
//! said "caught up" for a replica that held nothing: the leader counted it
//! and put the empty replica back into the ISR (Kafka's KIP-903 bug), and
//! a delayed fetch at offset 0 moved a caught-up follower's recorded log
//! end back to 0, holding every `acks=all` append until its next fetch.
//!
//! Fix (SPEC 3.2, Kafka's broker epoch): the coordinator hands out an
//! incarnation at every registration, every fetch carries the sender's, and
//! the leader counts a fetch only from the follower's current incarnation
//! (others are answered `StaleIncarnation` and change nothing). Within one
//! incarnation a fetch never moves the recorded log end backwards unless
//! the leader asked the follower to truncate.

use std::time::{Duration, Instant};

use crate::failover_support::fetch_request;
use isrlog::testing::{Cluster, Lose, SessionEnd};
use isrlog::transport::{ErrorCode, Response};
use isrlog::{Acks, Incarnation, LogId, NodeId, Offset, PreviousShutdown, ReplicatedLog};

const LOG: LogId = LogId(3);
const RECORDS: usize = 20;

/// How many records the leader believes `follower` lacks (`u64::MAX`:
/// it has not fetched in this epoch).
fn lag(leader: &ReplicatedLog, follower: NodeId) -> u64 {
    leader
        .follower_lag(follower)
        .map_or(u64::MAX, |(lag, _)| lag)
}

#[test]
fn a_delayed_fetch_from_before_a_restart_neither_readmits_nor_holds_back() {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .session_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let leader_id = leader.node_id();
    for i in 0..RECORDS {
        leader
            .append_values(&[format!("record-{i}").as_bytes()], Acks::All)
            .unwrap();
    }
    let end = leader.log_end_offset();
    let epoch = leader.leader_epoch();
    let mut others = cluster.node_ids().into_iter().filter(|n| *n != leader_id);
    let (victim, other) = (others.next().unwrap(), others.next().unwrap());
    assert!(
        cluster.wait_until(Duration::from_secs(10), |c| c.in_sync_replicas(LOG).len()
            == 3
            && lag(&leader, victim) == 0),
        "not all caught up: ISR {:?}",
        cluster.in_sync_replicas(LOG)
    );
    let old = cluster.incarnation(victim).unwrap();
    // The fetch the victim sent just before it crashed: at the leader's
    // end, acknowledging everything. It is delivered after the restart.
    let delayed_at_end = fetch_request(LOG, victim, old, epoch, end, Some(epoch));

    // The victim crashes and comes back, before its session expires, with
    // an empty disk; it cannot reach the leader yet, so it holds nothing.
    cluster.crash_with(victim, Lose::Nothing, SessionEnd::OnExpiry);
    std::fs::remove_dir_all(cluster.node_dir(victim)).unwrap();
    cluster.network.partition(&[victim], &[leader_id, other]);
    cluster.restart(victim).unwrap();
    assert_eq!(
        cluster.with_node(victim, |n| n.previous_shutdown()),
        Some(PreviousShutdown::LostData)
    );
    let new = cluster.incarnation(victim).unwrap();
    assert!(new > old, "restart got {new}, not above {old}");
    assert!(
        cluster.wait_until(Duration::from_secs(10), |c| !c
            .in_sync_replicas(LOG)
            .contains(&victim)
            && !leader.in_sync_replicas().contains(&victim)),
        "the emptied victim never left the ISR: {:?}",
        cluster.in_sync_replicas(LOG)
    );
    let handler = cluster.with_node(leader_id, |n| n.handler()).unwrap();

    // The delayed fetch arrives. If the leader has read the new
    // registration, it is refused at once; if not yet (the race a real
    // cluster has too), it may be counted, but the leader checks the
    // coordinator's current incarnation before an ISR expansion (KIP-903)
    // and does not add the replica. Either way the empty replica stays out.
    let answer = handler.handle(victim, delayed_at_end.clone());
    let view = cluster.with_node(leader_id, |n| n.peer_incarnation(victim));
    println!(
        "delayed fetch before the leader's view was checked: {}, leader's view of the victim then: {view:?}",
        match &answer {
            Response::Error(ErrorCode::StaleIncarnation) => "refused",
            Response::Fetch(_) => "served (the leader had not read the restart yet)",
            _ => "other",
        }
    );
    assert!(
        matches!(
            answer,
            Response::Error(ErrorCode::StaleIncarnation) | Response::Fetch(_)
        ),
        "{answer:?}"
    );
    let watch_until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < watch_until {
        let isr = cluster.in_sync_replicas(LOG);
        assert!(
            !isr.contains(&victim),
            "a fetch from the victim's previous life put its empty replica in the ISR: {isr:?}"
        );
        assert!(!leader.in_sync_replicas().contains(&victim));
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        cluster.log(victim, LOG).unwrap().log_end_offset(),
        Offset(0),
        "the victim really holds nothing"
    );
    // Once the leader has read the new registration, the same fetch is
    // refused before it reaches the log.
    assert!(
        cluster.wait_until(Duration::from_secs(10), |c| c
            .with_node(leader_id, |n| n.peer_incarnation(victim))
            == Some(Some(new))),
        "the leader never read the victim's new incarnation"
    );
    let answer = handler.handle(victim, delayed_at_end.clone());
    assert_eq!(answer, Response::Error(ErrorCode::StaleIncarnation));
    assert!(!cluster.in_sync_replicas(LOG).contains(&victim));

    // The victim reaches the leader again, fetches the log and rejoins.
    cluster.network.heal();
    assert!(
        cluster.wait_until(Duration::from_secs(20), |c| c
            .in_sync_replicas(LOG)
            .contains(&victim)
            && lag(&leader, victim) == 0),
        "the victim never rejoined: ISR {:?}, lag {}",
        cluster.in_sync_replicas(LOG),
        lag(&leader, victim)
    );
    let high_watermark = leader.high_watermark();
    assert_eq!(high_watermark, leader.log_end_offset());

    // A fetch of its previous life at offset 0 (sent when its log was
    // empty, delivered now): refused; its recorded log end, the ISR and
    // the high watermark stay.
    let delayed_at_zero = fetch_request(LOG, victim, old, epoch, Offset(0), None);
    for request in [delayed_at_zero, delayed_at_end] {
        let answer = handler.handle(victim, request);
        assert_eq!(answer, Response::Error(ErrorCode::StaleIncarnation));
        assert_eq!(lag(&leader, victim), 0, "the recorded log end moved back");
    }
    // The same fetch in its current incarnation, replayed: served, but
    // it does not move the recorded log end back either (no truncation
    // was asked for).
    let replayed = handler.handle(
        victim,
        fetch_request(LOG, victim, new, epoch, Offset(0), None),
    );
    assert!(
        matches!(&replayed, Response::Fetch(f) if f.logs[0].error == ErrorCode::None),
        "{replayed:?}"
    );
    assert_eq!(lag(&leader, victim), 0, "a replayed fetch moved it back");
    assert!(cluster.in_sync_replicas(LOG).contains(&victim));
    assert_eq!(leader.high_watermark(), high_watermark);

    // A name nobody registered, and a made-up larger incarnation: refused.
    for incarnation in [Incarnation(0), Incarnation(u64::MAX)] {
        let answer = handler.handle(
            victim,
            fetch_request(LOG, victim, incarnation, epoch, Offset(0), None),
        );
        assert_eq!(answer, Response::Error(ErrorCode::StaleIncarnation));
    }
    assert_eq!(lag(&leader, victim), 0);

    // Nothing holds `acks=all` back: an append commits at once.
    let started = Instant::now();
    leader.append_values(&[b"after"], Acks::All).unwrap();
    println!("acks=all after the stale fetches: {:?}", started.elapsed());
    assert!(leader.high_watermark() > high_watermark);
}
