//! SPEC 3.5 with a log document this node cannot read or change (a newer
//! node wrote it, issue 24): a node that stopped uncleanly cannot record
//! its report in that log, keeps out of it, and records it once it can.
//! Two things this test pins down:
//!
//! - the end it will report is what its replica holds, not "empty": the
//!   document could not be read at start, so the report at start never saw
//!   the log, and an empty report would let unclean recovery pass over the
//!   replica with the most records;
//! - the report is retried on a timer, not only when the document changes:
//!   a retry that failed (or a document that became readable without a
//!   notification) must not leave the replica out for ever.

use std::time::{Duration, Instant};

use isrlog::testing::{Cluster, Lose, SessionEnd};
use isrlog::{
    Acks, LogEnd, LogId, NodeId, Offset, ReplicationConfig, UNCLEAN_REPORT_RETRY_INTERVAL,
};

const LOG: LogId = LogId(0);

fn pending(cluster: &Cluster, node: NodeId) -> Vec<(LogId, Option<LogEnd>)> {
    cluster
        .with_node(node, |n| n.pending_unclean_reports())
        .expect("the node runs")
}

#[test]
fn a_pending_unclean_report_carries_the_replicas_real_end_and_is_retried_on_a_timer() {
    let cluster = Cluster::builder()
        .nodes(3)
        // Long enough that no lag or expiry takes the replica out of the
        // ISR while the test runs.
        .session_timeout(Duration::from_secs(60))
        .replication(ReplicationConfig {
            // The restart ends the crashed process's registration at once
            // (the unclean report does, to fence ISR expansions built on
            // its fetches), and the controller then takes the dead
            // replica out of the ISR: with 3 it joins the ELR, still
            // eligible, so its report is still owed.
            min_insync_replicas: 3,
            replica_lag_time_max: Duration::from_secs(60),
            fetch_wait_max: Duration::from_millis(20),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    for i in 0..10 {
        leader
            .append_values(&[format!("acknowledged-{i}")], Acks::All)
            .unwrap();
    }
    let epoch = leader.leader_epoch();
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|node| *node != leader.node_id())
        .unwrap();

    // The follower's coordinator cannot read or change the log's document
    // from now on; it crashes and starts again within its session.
    let document = cluster.coordinator_delay(follower);
    document.refuse_document(LOG);
    cluster.crash_with(follower, Lose::Nothing, SessionEnd::OnExpiry);
    cluster.restart(follower).unwrap();
    let reports = pending(&cluster, follower);
    let [(LOG, Some(end))] = reports.as_slice() else {
        panic!("one pending report of {LOG} with a known end, not {reports:?}");
    };
    assert_eq!(
        (end.last_epoch, end.log_end_offset, end.line_epoch),
        (Some(epoch), Offset(10), Some(epoch)),
        "the pending report must carry what the replica holds, and its line"
    );
    assert_eq!(
        end.epochs.last().map(|(last, _)| *last),
        Some(epoch),
        "and its epoch cache: {end:?}"
    );

    // It keeps out of the log: no fetch while the leader appends.
    for i in 0..5 {
        leader
            .append_values(&[format!("while-out-{i}")], Acks::Leader)
            .unwrap();
    }
    let out = cluster.log(follower, LOG).unwrap();
    std::thread::sleep(UNCLEAN_REPORT_RETRY_INTERVAL * 2);
    assert_eq!(out.log_end_offset(), Offset(10), "it fetched while out");
    assert_eq!(pending(&cluster, follower).len(), 1);

    // The document becomes readable without changing, so nothing notifies:
    // only the timed retry records the report.
    document.accept_document(LOG);
    let started = Instant::now();
    assert!(
        cluster.wait_until(UNCLEAN_REPORT_RETRY_INTERVAL * 5, |c| pending(c, follower)
            .is_empty()),
        "the report was not retried without a notification"
    );
    eprintln!(
        "report recorded {:?} after the document became readable",
        started.elapsed()
    );
    assert!(
        cluster.wait_until(Duration::from_secs(20), |c| {
            c.in_sync_replicas(LOG).contains(&follower) && out.log_end_offset() == Offset(15)
        }),
        "the replica did not catch up and rejoin: end {}, ISR {:?}",
        out.log_end_offset(),
        cluster.in_sync_replicas(LOG)
    );
    cluster.shutdown().unwrap();
}
