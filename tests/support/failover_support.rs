//! Helpers shared by the failover scenario tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{
    CasOutcome, Controller, ControllerConfig, Coordinator, Isolation, LogId, LogUpdate,
    MemoryCoordinator, NodeId, Offset, ReplicatedLog, ReplicationConfig,
};

/// Starts a controller as node `id`, outside the cluster (it keeps running
/// while every node is down), with its own session, no unclean election,
/// min ISR 2 and `poll_interval`, and waits up to `wait` until it holds the
/// seat.
pub fn outside_controller(
    cluster: &Cluster,
    id: NodeId,
    poll_interval: Duration,
    wait: Duration,
) -> (MemoryCoordinator, Controller) {
    let coordinator = cluster.coordinator.for_node(id);
    coordinator
        .register_node(id, Duration::from_secs(3600))
        .unwrap();
    let controller = Controller::start(
        id,
        Arc::new(coordinator.clone()),
        ControllerConfig {
            unclean_leader_election: false,
            poll_interval,
            min_insync_replicas: 2,
            ..ControllerConfig::default()
        },
    )
    .unwrap();
    let deadline = std::time::Instant::now() + wait;
    while coordinator.controller().unwrap().map(|(node, _)| node) != Some(id) {
        assert!(
            std::time::Instant::now() < deadline,
            "the outside controller never took the seat"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    (coordinator, controller)
}

/// Real-time replication settings with short waits, and `min_isr`.
pub fn replication(min_insync_replicas: usize) -> ReplicationConfig {
    ReplicationConfig {
        min_insync_replicas,
        replica_lag_time_max: Duration::from_secs(10),
        fetch_wait_max: Duration::from_millis(20),
        request_timeout: Duration::from_secs(2),
        fetch_backoff: Duration::from_millis(5),
        ..ReplicationConfig::default()
    }
}

/// A cluster of `nodes` without a controller: the scenario moves leadership
/// itself, step by step, through the coordinator.
pub fn scripted_cluster(nodes: usize, min_insync_replicas: usize) -> Cluster {
    Cluster::builder()
        .nodes(nodes)
        .controller(None)
        .session_timeout(Duration::from_secs(3600))
        .replication(replication(min_insync_replicas))
        .build()
        .unwrap()
}

/// Writes `leader` (epoch + 1) and `isr` for `log` with compare-and-set, as
/// the controller does, and returns the new epoch.
pub fn elect(cluster: &Cluster, log: LogId, leader: NodeId, isr: &[NodeId]) -> u32 {
    let state = cluster.coordinator.log_state(log).unwrap().unwrap();
    let epoch = state.leader_epoch.next();
    let update = LogUpdate {
        leader: Some(leader),
        leader_epoch: epoch,
        in_sync_replicas: isr.to_vec(),
        eligible_leader_replicas: Vec::new(),
        unclean_report: None,
        assignment: None,
    };
    let outcome = cluster
        .coordinator
        .compare_and_set(log, state.leader_epoch, state.version, update)
        .unwrap();
    assert!(matches!(outcome, CasOutcome::Applied(_)), "{outcome:?}");
    epoch.0
}

/// Every committed batch of `handle`, as (base offset, epoch, bytes).
pub fn committed_batches(handle: &ReplicatedLog) -> Vec<(Offset, u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut next = handle.log_start_offset();
    loop {
        let batches = handle.read(next, 1 << 20, Isolation::Committed).unwrap();
        let Some(last) = batches.last() else {
            return out;
        };
        next = last.next_offset();
        for batch in &batches {
            out.push((
                batch.base_offset(),
                batch.leader_epoch().0,
                batch.as_bytes().to_vec(),
            ));
        }
    }
}

/// Every committed record of `handle`, as (offset, value).
pub fn committed_values(handle: &ReplicatedLog) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut next = handle.log_start_offset();
    loop {
        let batches = handle.read(next, 1 << 20, Isolation::Committed).unwrap();
        let Some(last) = batches.last() else {
            return out;
        };
        next = last.next_offset();
        for batch in &batches {
            for record in batch.records() {
                let record = record.unwrap();
                out.push((
                    record.offset.0,
                    String::from_utf8_lossy(&record.value).into_owned(),
                ));
            }
        }
    }
}

/// Waits (up to 5 s) until `handles` all have log end and high watermark
/// `end`.
pub fn wait_converged(cluster: &Cluster, handles: &[&ReplicatedLog], end: Offset) -> bool {
    cluster.wait_until(Duration::from_secs(5), |_| {
        handles
            .iter()
            .all(|h| h.log_end_offset() == end && h.high_watermark() == end)
    })
}

/// A cluster of `nodes` with a controller on every node, short sessions and
/// a short replica lag limit, so failures are noticed within a second.
pub fn controlled_cluster(nodes: usize, unclean_leader_election: bool) -> Cluster {
    Cluster::builder()
        .nodes(nodes)
        .session_timeout(Duration::from_millis(300))
        .replication(ReplicationConfig {
            replica_lag_time_max: Duration::from_millis(300),
            ..replication(2)
        })
        .controller(Some(isrlog::ControllerConfig {
            unclean_leader_election,
            poll_interval: Duration::from_millis(100),
            ..isrlog::ControllerConfig::default()
        }))
        .build()
        .unwrap()
}

/// A fetch of `log` by `follower` of `incarnation` in `epoch`, at
/// `fetch_offset` (everything below it acknowledged), with
/// `last_fetched_epoch`, answered at once: what a follower sends, for
/// tests that hand it to a leader's handler themselves (delivered late,
/// replayed).
pub fn fetch_request(
    log: LogId,
    follower: NodeId,
    incarnation: isrlog::Incarnation,
    epoch: isrlog::LeaderEpoch,
    fetch_offset: Offset,
    last_fetched_epoch: Option<isrlog::LeaderEpoch>,
) -> isrlog::transport::Request {
    use isrlog::transport::{FetchLog, FetchRequest, Request};
    Request::Fetch(FetchRequest {
        replica: follower,
        incarnation,
        wait_max: Duration::ZERO,
        bytes_max: 1 << 20,
        logs: vec![FetchLog {
            log,
            current_leader_epoch: epoch,
            fetch_offset,
            last_fetched_epoch,
            line_epoch: Some(epoch),
            log_start_offset: Offset(0),
            bytes_max: 1 << 20,
            applied_offset: None,
        }],
    })
}
