//! Shared by the reassignment tests (SPEC 3.10): a memory cluster, a writer
//! that appends with `acks=all` without pause, and the checks that nothing
//! it was told is acknowledged went missing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::{
    Acks, Assignment, CasOutcome, Coordinator, DirectoryId, Error, Isolation, LogId, LogState,
    LogUpdate, NodeId, Offset, ReplicatedLog, ReplicationConfig,
};

pub const LOG: LogId = LogId(0);
pub const WAIT_MAX: Duration = Duration::from_secs(30);

pub fn nodes(ids: &[u32]) -> Vec<NodeId> {
    ids.iter().copied().map(NodeId).collect()
}

/// A cluster of `count` nodes, min ISR 2, a 3-replica log 0 on nodes 0, 1
/// and 2 with its ISR full.
pub fn cluster(count: usize) -> Arc<Cluster> {
    cluster_with_lag(count, Duration::from_secs(10))
}

/// [`cluster`] with this `replica_lag_time_max`.
pub fn cluster_with_lag(count: usize, replica_lag_time_max: Duration) -> Arc<Cluster> {
    let cluster = Cluster::builder()
        .nodes(count)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            fetch_wait_max: Duration::from_millis(50),
            replica_lag_time_max,
            request_timeout: Duration::from_secs(5),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .session_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    assert_eq!(cluster.create_log(LOG, 3).unwrap(), nodes(&[0, 1, 2]));
    assert!(
        cluster.wait_until(WAIT_MAX, |c| c.in_sync_replicas(LOG).len() == 3),
        "the ISR did not fill: {:?}",
        cluster.in_sync_replicas(LOG)
    );
    Arc::new(cluster)
}

pub fn state(cluster: &Cluster) -> LogState {
    cluster.coordinator.log_state(LOG).unwrap().unwrap()
}

/// Any running node's handle on the cluster: where an operator's call goes.
pub fn admin<T>(cluster: &Cluster, f: impl Fn(&isrlog::Node) -> T) -> T {
    for id in cluster.node_ids() {
        if let Some(answer) = cluster.with_node(id, &f) {
            return answer;
        }
    }
    panic!("no node is running")
}

/// Waits until the log's replicas are `target` (as a set) with no move
/// left, and its ISR is all of them.
pub fn wait_completed(cluster: &Cluster, target: &[NodeId]) {
    let done = cluster.wait_until(WAIT_MAX, |c| {
        let s = state(c);
        !s.is_reassigning()
            && s.replicas.len() == target.len()
            && target.iter().all(|n| s.replicas.contains(n))
            && s.in_sync_replicas.len() == target.len()
    });
    assert!(
        done,
        "the move to {target:?} did not complete: {:?}",
        state(cluster)
    );
}

/// The directory of `node`'s replica of the log.
pub fn replica_dir(cluster: &Cluster, node: NodeId) -> PathBuf {
    cluster.node_dir(node).join(format!("log-{}", LOG.0))
}

/// Waits until `node` no longer holds a copy of the log (nor a handle).
pub fn wait_deleted(cluster: &Cluster, node: NodeId) {
    let gone = cluster.wait_until(WAIT_MAX, |c| {
        !replica_dir(c, node).exists() && c.log(node, LOG).is_err()
    });
    assert!(gone, "{node}'s removed replica is still there");
}

/// Where the coordinator has `node`'s replica of the log placed (SPEC
/// 2.8), if anywhere.
pub fn placed(cluster: &Cluster, node: NodeId) -> Option<DirectoryId> {
    cluster
        .coordinator
        .replica_directories(node)
        .unwrap()
        .into_iter()
        .find(|(log, _)| *log == LOG)
        .map(|(_, directory)| directory)
}

/// Adds `node`, which must be down, back to the log's replicas as a move
/// would (replicas `replicas`, `node` being added), written directly: an
/// operator's call adds only live nodes.
pub fn add_back_while_down(cluster: &Cluster, replicas: &[u32], node: NodeId) {
    let before = state(cluster);
    let update = LogUpdate {
        leader_epoch: before.leader_epoch.next(),
        assignment: Some(Assignment {
            replicas: nodes(replicas),
            adding_replicas: vec![node],
            removing_replicas: Vec::new(),
        }),
        ..LogUpdate::unchanged(&before)
    };
    let written = cluster
        .coordinator
        .compare_and_set(LOG, before.leader_epoch, before.version, update)
        .unwrap();
    assert!(matches!(written, CasOutcome::Applied(_)), "{written:?}");
}

/// What the writer saw.
#[derive(Default, Debug)]
pub struct Writes {
    pub acknowledged: BTreeMap<Offset, String>,
    /// Errors after the batch may have been written (outcome unknown).
    pub unknown: usize,
    pub longest_stall: Duration,
}

/// A thread appending `acks=all` to whoever leads, until stopped.
pub struct Writer {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicUsize>,
    thread: JoinHandle<Writes>,
}

/// Acknowledged appends a writer must have made before it is stopped.
const WRITES_MIN: usize = 21;

impl Writer {
    pub fn start(cluster: &Arc<Cluster>) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (cluster, stop, count) = (
                Arc::clone(cluster),
                Arc::clone(&stop),
                Arc::clone(&acknowledged),
            );
            std::thread::spawn(move || write_until(&cluster, &stop, &count))
        };
        // Some records before the move starts.
        std::thread::sleep(Duration::from_millis(100));
        Writer {
            stop,
            acknowledged,
            thread,
        }
    }

    /// Stops the writer once it made some appends after the move (at least
    /// [`WRITES_MIN`] in all; waits for them up to [`WAIT_MAX`], so that a
    /// slow, loaded machine does not fail a writer that is progressing).
    pub fn stop(self) -> Writes {
        std::thread::sleep(Duration::from_millis(100));
        let deadline = Instant::now() + WAIT_MAX;
        while self.acknowledged.load(Ordering::SeqCst) < WRITES_MIN && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.stop.store(true, Ordering::SeqCst);
        let writes = self.thread.join().unwrap();
        assert!(
            writes.acknowledged.len() >= WRITES_MIN,
            "the writer made no progress in {WAIT_MAX:?}: {writes:?}"
        );
        eprintln!(
            "{} acknowledged appends, {} of unknown outcome, longest stall {:?}",
            writes.acknowledged.len(),
            writes.unknown,
            writes.longest_stall
        );
        writes
    }
}

fn write_until(cluster: &Cluster, stop: &AtomicBool, count: &AtomicUsize) -> Writes {
    let mut writes = Writes::default();
    let mut last_ok = Instant::now();
    let mut next = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let handle = cluster
            .leader_of(LOG)
            .and_then(|node| cluster.log(node, LOG).ok());
        let Some(handle) = handle else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        let value = format!("v{next}");
        match handle.append_values(&[&value], Acks::All) {
            Ok(outcome) => {
                writes.acknowledged.insert(outcome.base_offset, value);
                count.fetch_add(1, Ordering::SeqCst);
                writes.longest_stall = writes.longest_stall.max(last_ok.elapsed());
                last_ok = Instant::now();
            }
            Err(
                Error::NotLeader { .. }
                | Error::NotEnoughReplicas { .. }
                | Error::LeaderNotAvailable(_)
                | Error::Shutdown,
            ) => std::thread::sleep(Duration::from_millis(1)),
            Err(_) => {
                writes.unknown += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        next += 1;
    }
    writes
}

pub fn committed_values(log: &ReplicatedLog) -> BTreeMap<Offset, String> {
    let mut out = BTreeMap::new();
    let mut from = log.log_start_offset();
    loop {
        let batches = log.read(from, 1 << 20, Isolation::Committed).unwrap();
        if batches.is_empty() {
            return out;
        }
        for batch in batches {
            for record in batch.records() {
                let record = record.unwrap();
                from = record.offset.next();
                out.insert(
                    record.offset,
                    String::from_utf8(record.value.to_vec()).unwrap(),
                );
            }
        }
    }
}

/// SPEC G1 and G2 after a move: every acknowledged record is on every
/// replica the log now has, at its offset, and the replicas hold the same
/// committed records.
pub fn check_nothing_lost(cluster: &Cluster, writes: &Writes) {
    let leader = cluster.leader_log(LOG).unwrap();
    // Every replica's high watermark reaches the leader's log end once the
    // writer is stopped (a follower learns it on its next fetch).
    let end = leader.log_end_offset();
    let replicas = state(cluster).replicas;
    let caught_up = cluster.wait_until(WAIT_MAX, |c| {
        leader.high_watermark() == end
            && replicas.iter().all(|n| {
                c.log(*n, LOG)
                    .map(|h| h.high_watermark() == end)
                    .unwrap_or(false)
            })
    });
    assert!(caught_up, "the replicas {replicas:?} did not reach {end}");
    let stored = committed_values(&leader);
    for (offset, value) in &writes.acknowledged {
        assert_eq!(
            stored.get(offset),
            Some(value),
            "acknowledged {value} at {offset} is not on the leader"
        );
    }
    for node in &replicas {
        let copy = committed_values(&cluster.log(*node, LOG).unwrap());
        assert_eq!(
            copy, stored,
            "{node} holds other committed records than the leader"
        );
    }
}
