//! Issue 13, part 3 (Kafka's controlled shutdown): `Node::shutdown` first
//! moves the leadership of the logs the node leads to another in-sync
//! replica, then stops.
//!
//! - Without a controller, nothing else would ever elect a new leader: the
//!   stopped leader's log has one only because the node handed it over.
//! - A rolling restart of all three nodes, twice, under continuous
//!   `acks=all` appends that retry on `NotLeader`: no acknowledged record
//!   is lost, no append fails after it was written (the only errors are
//!   refusals before appending), and the longest stall is printed (the
//!   benchmark of record is `benches/rolling_restart.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::{
    Acks, Coordinator, Error, Isolation, LogId, NodeId, Offset, ReplicatedLog, ReplicationConfig,
};

const LOG: LogId = LogId(0);
const WAIT_MAX: Duration = Duration::from_secs(20);

fn replication() -> ReplicationConfig {
    ReplicationConfig {
        min_insync_replicas: 2,
        fetch_wait_max: Duration::from_millis(100),
        replica_lag_time_max: Duration::from_secs(10),
        request_timeout: Duration::from_secs(5),
        fetch_backoff: Duration::from_millis(5),
        ..ReplicationConfig::default()
    }
}

fn committed_values(log: &ReplicatedLog) -> BTreeMap<Offset, String> {
    let mut out = BTreeMap::new();
    let mut from = Offset(0);
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

fn wait_for_full_isr(cluster: &Cluster) {
    assert!(
        cluster.wait_until(WAIT_MAX, |c| c.in_sync_replicas(LOG).len() == 3),
        "the ISR did not grow back to 3: {:?}",
        cluster.in_sync_replicas(LOG)
    );
}

#[test]
fn without_a_controller_a_stopping_leader_hands_its_log_over() {
    let cluster = Cluster::builder()
        .nodes(3)
        .controller(None)
        .replication(replication())
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let old = leader.node_id();
    wait_for_full_isr(&cluster);
    leader.append_values(&["before"], Acks::All).unwrap();

    cluster.stop_node(old).unwrap();

    let state = cluster.coordinator.log_state(LOG).unwrap().unwrap();
    let new = state.leader.expect("the stopped leader named a successor");
    assert_ne!(new, old);
    assert!(
        !state.in_sync_replicas.contains(&old),
        "the stopped node left the ISR: {:?}",
        state.in_sync_replicas
    );
    let handle = cluster.log(new, LOG).unwrap();
    handle.wait_until_leader(WAIT_MAX).unwrap();
    handle.append_values(&["after"], Acks::All).unwrap();
    let values: Vec<String> = committed_values(&handle).into_values().collect();
    assert_eq!(values, vec!["before", "after"]);
}

/// What the writer saw.
#[derive(Default)]
struct Writes {
    acknowledged: BTreeMap<Offset, String>,
    /// Errors after the batch may have been written (not a refusal).
    ambiguous: Vec<String>,
    longest_stall: Duration,
}

fn write_until(cluster: Arc<Cluster>, stop: Arc<AtomicBool>) -> Writes {
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
                next += 1;
                writes.longest_stall = writes.longest_stall.max(last_ok.elapsed());
                last_ok = Instant::now();
            }
            // Refused before appending: retry elsewhere.
            Err(
                Error::NotLeader { .. }
                | Error::NotEnoughReplicas { .. }
                | Error::LeaderNotAvailable(_)
                | Error::Shutdown,
            ) => std::thread::sleep(Duration::from_millis(1)),
            Err(error) => {
                writes.ambiguous.push(error.to_string());
                next += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    writes
}

#[test]
fn rolling_restart_twice_under_acks_all_loses_nothing_and_fails_no_write() {
    let cluster = Arc::new(
        Cluster::builder()
            .nodes(3)
            .replication(replication())
            .build()
            .unwrap(),
    );
    cluster.create_log(LOG, 3).unwrap();
    wait_for_full_isr(&cluster);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (cluster, stop) = (Arc::clone(&cluster), Arc::clone(&stop));
        std::thread::spawn(move || write_until(cluster, stop))
    };
    let mut restarts = 0;
    for _round in 0..2 {
        for node in cluster.node_ids() {
            cluster.stop_node(node).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            cluster.restart(node).unwrap();
            wait_for_full_isr(&cluster);
            restarts += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::SeqCst);
    let writes = writer.join().unwrap();
    assert_eq!(restarts, 6);
    assert!(
        writes.acknowledged.len() > 10,
        "the writer made no progress"
    );
    assert!(
        writes.ambiguous.is_empty(),
        "appends failed after they may have been written: {:?}",
        writes.ambiguous
    );
    let leader = cluster.leader_log(LOG).unwrap();
    let stored = committed_values(&leader);
    for (offset, value) in &writes.acknowledged {
        assert_eq!(
            stored.get(offset),
            Some(value),
            "acknowledged {value} at {offset} is not there"
        );
    }
    eprintln!(
        "rolling restart: {} acknowledged appends, longest stall {:?}",
        writes.acknowledged.len(),
        writes.longest_stall
    );
    let _: Vec<NodeId> = cluster.node_ids();
}
