//! Regression for fault-test seed 5 of `PowerLossFlushNever` (SPEC G1(c),
//! §3.5): a replica that left the ISR with its disk (here a clean stop;
//! in the seed, a session that expired while the node was cut off from
//! the coordinator) holds every record committed while it was a member.
//! When every later ISR and ELR member then loses power and comes back
//! without part of those records, unclean recovery elected the longest
//! log among them, and the replica that still held everything truncated
//! to it: acknowledged records were lost although a replica that was in
//! the ISR when they were committed came back with its disk.
//!
//! Fix: while a log is in unclean recovery, a live replica outside its
//! ISR, ELR and unclean list reports its log end
//! (`LogState::recovery_candidate_update`), the election waits for that
//! report, and the longest log leads.

use std::time::Duration;

use crate::failover_support::*;
use isrlog::testing::{Cluster, Lose, SessionEnd};
use isrlog::{Acks, Controller, Isolation, LogConfig, LogId, MemoryCoordinator, NodeId, Offset};

const LOG: LogId = LogId(0);
const RECORDS: usize = 20;
/// Generous on a loaded 2-core machine: every wait is a wait-until loop.
const WAIT: Duration = Duration::from_secs(20);

/// The node id of the controller outside the cluster: it keeps running
/// while every node of the cluster is down.
const OUTSIDE: NodeId = NodeId(9);

/// The outside controller (`failover_support::outside_controller`).
fn outside_controller(cluster: &Cluster) -> (MemoryCoordinator, Controller) {
    crate::failover_support::outside_controller(cluster, OUTSIDE, Duration::from_millis(50), WAIT)
}

fn values(cluster: &Cluster, node: NodeId) -> Vec<Vec<u8>> {
    let Ok(handle) = cluster.log(node, LOG) else {
        return Vec::new();
    };
    // A read stops at a segment's end: read on until the high watermark.
    let mut out = Vec::new();
    let mut next = Offset(0);
    loop {
        let Ok(batches) = handle.read(next, 1 << 24, Isolation::Committed) else {
            return out;
        };
        let Some(last) = batches.last() else {
            return out;
        };
        next = last.next_offset();
        for batch in &batches {
            out.extend(batch.records().map(|r| r.unwrap().value.to_vec()));
        }
    }
}

#[test]
fn unclean_recovery_counts_a_replica_that_left_the_isr_with_its_disk() {
    let cluster = Cluster::builder()
        .nodes(3)
        .controller(None)
        .session_timeout(Duration::from_millis(500))
        .replication(replication(2))
        // Small segments: every roll flushes (`FlushPolicy::Never` flushes
        // nothing else), so a power loss keeps a prefix of the records and
        // loses the active segment's part of them.
        .log_config(LogConfig {
            segment_bytes_max: 4 * 1024,
            ..LogConfig::default()
        })
        .build()
        .unwrap();
    let (_coordinator, _controller) = outside_controller(&cluster);
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let leader_id = leader.node_id();
    let mut acknowledged = Vec::new();
    for i in 0..RECORDS {
        let mut value = format!("record-{i:02}-").into_bytes();
        value.resize(1000, b'.');
        leader.append_values(&[&value], Acks::All).unwrap();
        acknowledged.push(value);
    }
    let followers: Vec<NodeId> = cluster
        .node_ids()
        .into_iter()
        .filter(|n| *n != leader_id)
        .collect();
    let (keeper, other) = (followers[0], followers[1]);
    assert!(cluster.wait_until(WAIT, |c| c
        .node_ids()
        .into_iter()
        .all(|n| values(c, n) == acknowledged)));

    // The keeper leaves the ISR with every record on its disk.
    cluster.stop_node(keeper).unwrap();
    assert!(cluster.wait_until(WAIT, |c| !c.in_sync_replicas(LOG).contains(&keeper)));
    // Then both members of the ISR lose power, the leader first.
    cluster.crash_with(
        leader_id,
        Lose::UnflushedBytes { seed: 1 },
        SessionEnd::Immediately,
    );
    assert!(cluster.wait_until(WAIT, |c| c.leader_of(LOG) == Some(other)));
    cluster.crash_with(
        other,
        Lose::UnflushedBytes { seed: 2 },
        SessionEnd::Immediately,
    );
    assert!(cluster.wait_until(WAIT, |c| c.leader_of(LOG).is_none()));

    // The keeper comes back first (the log has no eligible leader: it
    // waits), then the two that lost power.
    cluster.restart(keeper).unwrap();
    cluster.restart(leader_id).unwrap();
    cluster.restart(other).unwrap();
    let kept = |node| values(&cluster, node).len();
    let converged = cluster.wait_until(WAIT, |c| {
        c.leader_of(LOG).is_some()
            && c.node_ids()
                .into_iter()
                .all(|n| values(c, n) == acknowledged)
    });
    assert!(
        converged,
        "leader {:?}, ISR {:?}, records on the keeper {}, the old leader {}, the other {}",
        cluster.leader_of(LOG),
        cluster.in_sync_replicas(LOG),
        kept(keeper),
        kept(leader_id),
        kept(other)
    );
    cluster.shutdown().unwrap();
}
