//! Issue 6: replication over loopback TCP survives the leader's death.
//!
//! Three nodes, each with its own `TcpServer` and `TcpTransport`, one shared
//! `MemoryCoordinator`. A log with RF 3 and min ISR 2 takes `acks=all`
//! appends; the leader is killed (server stopped, node halted, coordinator
//! not told: its 500 ms session runs out); a new leader is elected, `acks=all`
//! appends continue on it, and every acknowledged record is on it. The old
//! node then restarts on a new port, catches up, rejoins the ISR, and all
//! three logs hold the same bytes.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use isrlog::testing::TcpCluster;
use isrlog::{Acks, Error, Isolation, LogId, Offset, ReplicatedLog};

const LOG: LogId = LogId(0);

/// Appends `values` with `acks=all`, retrying the errors a failover produces
/// (the append was refused or its outcome is unknown); gives up after `wait`.
fn append_acknowledged(leader: &ReplicatedLog, values: &[String], wait: Duration) {
    let deadline = Instant::now() + wait;
    loop {
        match leader.append_values(values, Acks::All) {
            Ok(_) => return,
            Err(
                error @ (Error::NotEnoughReplicas { .. }
                | Error::NotEnoughReplicasAfterAppend { .. }
                | Error::Timeout { .. }),
            ) if Instant::now() < deadline => {
                tracing::debug!(%error, "retrying");
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(error) => panic!("acks=all append of {values:?} failed: {error}"),
        }
    }
}

/// Every committed record value on `log`, in offset order.
fn committed_values(log: &ReplicatedLog) -> Vec<String> {
    let mut values = Vec::new();
    let mut next = Offset(0);
    loop {
        let batches = log
            .read(next, 1 << 20, Isolation::Committed)
            .expect("read committed");
        if batches.is_empty() {
            return values;
        }
        for batch in &batches {
            for record in batch.records() {
                let record = record.expect("record decodes");
                if record.offset >= next {
                    values.push(String::from_utf8(record.value.to_vec()).expect("utf-8 value"));
                }
            }
            next = batch.next_offset();
        }
    }
}

/// The raw bytes of every batch below `end` on `log`.
fn committed_bytes(log: &ReplicatedLog, end: Offset) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut next = Offset(0);
    while next < end {
        let batches = log
            .read(next, 1 << 20, Isolation::Committed)
            .expect("read committed");
        assert!(!batches.is_empty(), "{} stops at {next}", log.node_id());
        for batch in &batches {
            bytes.extend_from_slice(batch.as_bytes());
            next = batch.next_offset();
        }
    }
    bytes
}

#[test]
fn tcp_replication_survives_leader_kill() {
    let cluster = TcpCluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .session_timeout(Duration::from_millis(500))
        .build()
        .expect("cluster");
    cluster.create_log(LOG, 3).expect("create log");
    let old_leader_id = cluster.leader_of(LOG).expect("a leader");
    let old_leader = cluster.leader_log(LOG).expect("leader handle");

    let mut acknowledged = BTreeSet::new();
    for n in 0..50 {
        let values: Vec<String> = (0..10).map(|i| format!("before-{n}-{i}")).collect();
        old_leader
            .append_values(&values, Acks::All)
            .expect("acks=all append over TCP");
        acknowledged.extend(values);
    }
    drop(old_leader);

    // --- Kill the leader; the controller notices when its session expires.
    let killed_at = Instant::now();
    cluster.crash(old_leader_id);
    assert!(
        cluster.wait_until(Duration::from_secs(4), |c| {
            c.leader_of(LOG).is_some_and(|l| l != old_leader_id)
        }),
        "no new leader within 4 s of killing {old_leader_id}"
    );
    let new_leader = cluster.leader_log(LOG).expect("new leader handle");
    let new_leader_id = new_leader.node_id();
    assert_ne!(new_leader_id, old_leader_id);
    for n in 0..50 {
        let values: Vec<String> = (0..10).map(|i| format!("after-{n}-{i}")).collect();
        append_acknowledged(&new_leader, &values, Duration::from_secs(3));
        acknowledged.extend(values);
    }
    let failover = killed_at.elapsed();

    let present: BTreeSet<String> = committed_values(&new_leader).into_iter().collect();
    let lost: Vec<&String> = acknowledged.difference(&present).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged records are missing on the new leader {new_leader_id}, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );

    // --- Restart the old leader on a new port; it catches up and rejoins.
    cluster.restart(old_leader_id).expect("restart");
    let end = new_leader.log_end_offset();
    let everyone = cluster.node_ids();
    let caught_up = cluster.wait_until(Duration::from_secs(4), |c| {
        let mut isr = c.in_sync_replicas(LOG);
        isr.sort();
        isr == everyone
            && everyone.iter().all(|&node| {
                c.log(node, LOG)
                    .is_ok_and(|log| log.log_end_offset() == end && log.high_watermark() == end)
            })
    });
    assert!(
        caught_up,
        "restarted {old_leader_id} did not catch up: ISR {:?}, LEO/HW {:?}",
        cluster.in_sync_replicas(LOG),
        everyone
            .iter()
            .map(|&n| cluster
                .log(n, LOG)
                .map(|l| (l.log_end_offset(), l.high_watermark())))
            .collect::<Vec<_>>()
    );
    let reference = committed_bytes(&new_leader, end);
    for node in everyone {
        let log = cluster.log(node, LOG).expect("handle");
        assert!(
            committed_bytes(&log, end) == reference,
            "{node}'s log differs from the leader's below {end}"
        );
    }
    // Generous: this includes 50 acks=all appends in a debug build on a
    // possibly loaded machine; it catches a failover that never happens.
    assert!(
        failover < Duration::from_secs(20),
        "failover took {failover:?}"
    );
    cluster.shutdown().expect("shutdown");
}
