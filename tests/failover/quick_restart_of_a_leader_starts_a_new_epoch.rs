//! Regression: a leader that restarts quicker than its session timeout used
//! to lead again in the SAME leader epoch. After a power loss under a weak
//! flush policy it had lost records of that epoch that its followers kept;
//! the records it then wrote at the same offsets in the same epoch looked
//! consistent to the epoch protocol, so followers kept different bytes at
//! the same offsets (a G2 violation) or stalled appending batches whose
//! boundaries no longer lined up. Fix: a restarted node that finds itself
//! leader of an epoch it already wrote in first moves the log to a new
//! epoch by compare-and-set (`Node::reconcile`), as Kafka's broker epochs
//! (KIP-380) do.
//!
//! Since unclean-shutdown detection (SPEC 3.5, KIP-966) such a leader does
//! not even lead again while another in-sync replica exists: it restarts
//! without its clean-shutdown marker, reports it, and leaves the ISR, which
//! makes the log leaderless in a new epoch; the controller elects a follower
//! that kept the records the old leader lost. This test now checks that
//! outcome: a new epoch, another leader, nothing acknowledged lost, and
//! replicas that agree.

use std::time::Duration;

use isrlog::testing::{Cluster, Lose, SessionEnd};
use isrlog::{
    Acks, Coordinator, FlushPolicy, Isolation, LeaderEpoch, LogConfig, LogId, NodeId, Offset,
    ReplicationConfig,
};

const LOG: LogId = LogId(0);

fn committed(cluster: &Cluster, node: NodeId) -> Vec<(Offset, LeaderEpoch, Vec<u8>)> {
    let handle = cluster.log(node, LOG).unwrap();
    let mut out = Vec::new();
    for batch in handle
        .read(Offset(0), 1 << 24, Isolation::Committed)
        .unwrap()
    {
        for record in batch.records() {
            let record = record.unwrap();
            out.push((record.offset, batch.leader_epoch(), record.value.to_vec()));
        }
    }
    out
}

/// Seeds chosen so that the power loss keeps nothing of the unflushed tail
/// for some of them (the whole epoch is lost, and with it the epoch cache
/// entry that used to trigger the new epoch) and a torn prefix for others.
#[test]
fn a_leader_restarted_before_its_session_expires_leads_in_a_new_epoch_and_replicas_agree() {
    for seed in 0..8 {
        restart_quickly_after_power_loss(seed);
    }
}

fn restart_quickly_after_power_loss(seed: u64) {
    let cluster = Cluster::builder()
        .nodes(3)
        .session_timeout(Duration::from_secs(60))
        .log_config(LogConfig {
            flush_policy: FlushPolicy::Never,
            ..LogConfig::default()
        })
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            fetch_wait_max: Duration::from_millis(20),
            request_timeout: Duration::from_secs(5),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let old_leader = leader.node_id();
    for i in 0..20 {
        leader
            .append_values(&[format!("before-{i}")], Acks::All)
            .unwrap();
    }
    let epoch_before = cluster
        .coordinator
        .log_state(LOG)
        .unwrap()
        .unwrap()
        .leader_epoch;

    // Power loss on the leader: nothing was ever fsynced, so its log loses
    // its unflushed tail, which the followers hold. It restarts at once.
    cluster.crash_with(
        old_leader,
        Lose::UnflushedBytes { seed },
        SessionEnd::OnExpiry,
    );
    cluster.restart(old_leader).unwrap();

    assert!(
        cluster.wait_until(Duration::from_secs(20), |c| c
            .leader_of(LOG)
            .is_some_and(|leader| leader != old_leader)),
        "seed {seed}: no other replica was elected: {:?}",
        cluster.coordinator.log_state(LOG).unwrap()
    );
    let leader = cluster.leader_log(LOG).unwrap();
    let state = cluster.coordinator.log_state(LOG).unwrap().unwrap();
    assert_ne!(
        state.leader,
        Some(old_leader),
        "the leader that lost power leads again"
    );
    assert!(
        state.leader_epoch > epoch_before,
        "the log stayed in epoch {epoch_before}"
    );
    for i in 0..20 {
        leader
            .append_values(&[format!("after-{i}")], Acks::All)
            .unwrap();
    }

    // Every replica ends with the same committed records, epochs included.
    let converged = cluster.wait_until(Duration::from_secs(10), |c| {
        let reference = committed(c, old_leader);
        reference.len() >= 20
            && c.node_ids()
                .into_iter()
                .all(|node| c.log(node, LOG).unwrap().high_watermark() == leader.high_watermark())
            && c.node_ids()
                .into_iter()
                .all(|node| committed(c, node) == reference)
    });
    assert!(
        converged,
        "seed {seed}: replicas disagree on committed records"
    );
    let values: Vec<Vec<u8>> = committed(&cluster, old_leader)
        .into_iter()
        .map(|(_, _, v)| v)
        .collect();
    let expected: Vec<Vec<u8>> = (0..20)
        .map(|i| format!("before-{i}").into_bytes())
        .chain((0..20).map(|i| format!("after-{i}").into_bytes()))
        .collect();
    assert_eq!(values, expected, "seed {seed}: acknowledged records lost");
}
