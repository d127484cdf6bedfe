//! Helpers shared by the scenario tests against a real ZooKeeper server.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use isrlog::testing::zookeeper::{ZkProxy, ZkServer, ZkShell};
use isrlog::testing::ZkCluster;
use isrlog::{
    Acks, Isolation, LogId, NodeId, Offset, ReplicatedLog, ReplicationConfig, ZkCoordinator,
    ZkCoordinatorConfig,
};

/// A coordinator under `chroot` that reaches `server` through a fresh
/// proxy (which can lose replies or cut the connection), with 1 s calls;
/// the chroot's layout is created directly first. Also a shell on the
/// chroot that bypasses the proxy, to see what ZooKeeper really holds.
pub fn coordinator_through_a_proxy(
    server: &ZkServer,
    chroot: &str,
) -> (ZkProxy, ZkCoordinator, ZkShell) {
    let proxy = ZkProxy::start(&server.connect_string()).expect("proxy");
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = chroot.to_owned();
    drop(ZkCoordinator::connect(config.clone()).expect("connect"));
    config.connect = proxy.connect_string();
    config.call_timeout = Duration::from_secs(1);
    let coordinator = ZkCoordinator::connect(config).expect("connect through the proxy");
    let shell = ZkShell::connect(&server.connect_string(), chroot).expect("shell");
    (proxy, coordinator, shell)
}

/// Starts a standalone server, or fails saying what is missing.
pub fn server() -> ZkServer {
    ZkServer::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"))
}

/// Replication settings for failover scenarios: min ISR 2, short waits.
pub fn replication() -> ReplicationConfig {
    ReplicationConfig {
        min_insync_replicas: 2,
        replica_lag_time_max: Duration::from_secs(2),
        fetch_wait_max: Duration::from_millis(50),
        request_timeout: Duration::from_secs(2),
        fetch_backoff: Duration::from_millis(5),
        ..ReplicationConfig::default()
    }
}

/// Every committed record value of `handle`, in offset order.
pub fn committed_values(handle: &ReplicatedLog) -> Vec<String> {
    let mut values = Vec::new();
    let mut next = handle.log_start_offset();
    loop {
        let batches = handle
            .read(next, 1 << 20, Isolation::Committed)
            .unwrap_or_else(|e| panic!("read of {} from {next}: {e}", handle.node_id()));
        let Some(last) = batches.last() else {
            return values;
        };
        next = last.next_offset();
        for batch in &batches {
            for record in batch.records() {
                let record = record.expect("record decodes");
                values.push(String::from_utf8_lossy(&record.value).into_owned());
            }
        }
    }
}

/// The raw bytes of every committed batch below `end` on `handle`.
pub fn committed_bytes(handle: &ReplicatedLog, end: Offset) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut next = handle.log_start_offset();
    while next < end {
        let batches = handle
            .read(next, 1 << 20, Isolation::Committed)
            .expect("read committed");
        assert!(!batches.is_empty(), "{} stops at {next}", handle.node_id());
        for batch in &batches {
            bytes.extend_from_slice(batch.as_bytes());
            next = batch.next_offset();
        }
    }
    bytes
}

/// `acks=all` traffic on one log from a background thread: each value is
/// appended once to whichever node leads; a value whose append returned
/// `Ok` is *acknowledged*. Errors (a failover in progress, ZooKeeper away)
/// are counted and the next value is tried after a short pause.
pub struct Traffic {
    acknowledged: Mutex<Vec<String>>,
    failed: AtomicU64,
    stop: AtomicBool,
}

impl Traffic {
    pub fn new() -> Traffic {
        Traffic {
            acknowledged: Mutex::new(Vec::new()),
            failed: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        }
    }

    /// Runs until [`Traffic::stop`]; meant for a scoped thread.
    pub fn run(&self, cluster: &ZkCluster, log: LogId, prefix: &str) {
        let mut n = 0u64;
        while !self.stop.load(Ordering::SeqCst) {
            n += 1;
            let value = format!("{prefix}-{n}");
            // Asks the nodes who leads, not ZooKeeper, which may be down.
            let outcome = cluster
                .believed_leader_log(log)
                .map(|leader| leader.append_values(&[value.as_bytes()], Acks::All));
            match outcome {
                Some(Ok(_)) => {
                    self.acknowledged.lock().unwrap().push(value);
                    // A few hundred records a second are plenty, and keep
                    // the debug build's per-append invariant checks cheap.
                    std::thread::sleep(Duration::from_millis(2));
                }
                Some(Err(_)) | None => {
                    self.failed.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// A guard that stops the traffic when dropped, so that a failed
    /// assertion in a scope does not wait forever for the traffic thread.
    pub fn stop_on_drop(&self) -> StopOnDrop<'_> {
        StopOnDrop(self)
    }

    pub fn acknowledged_count(&self) -> usize {
        self.acknowledged.lock().unwrap().len()
    }

    pub fn failed_count(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }

    pub fn acknowledged(&self) -> Vec<String> {
        self.acknowledged.lock().unwrap().clone()
    }

    /// Waits until `more` appends beyond `from` were acknowledged; false
    /// after `timeout`.
    pub fn wait_for(&self, from: usize, more: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.acknowledged_count() >= from + more {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }
}

/// Stops a [`Traffic`] when dropped.
pub struct StopOnDrop<'a>(&'a Traffic);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Asserts that every acknowledged value is committed on `handle`.
pub fn assert_nothing_acknowledged_lost(acknowledged: &[String], handle: &ReplicatedLog) {
    let present: BTreeSet<String> = committed_values(handle).into_iter().collect();
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|value| !present.contains(*value))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged records are missing on {}, e.g. {:?}",
        lost.len(),
        acknowledged.len(),
        handle.node_id(),
        &lost[..lost.len().min(5)]
    );
}

/// Waits until every node is in the ISR and holds the same log end and
/// high watermark, then asserts that all hold the same committed bytes.
pub fn assert_converged(cluster: &ZkCluster, log: LogId, timeout: Duration) {
    let everyone: Vec<NodeId> = cluster.node_ids();
    let converged = cluster.wait_until(timeout, |c| {
        let Ok(leader) = c.leader_log(log) else {
            return false;
        };
        let end = leader.log_end_offset();
        let mut isr = c.in_sync_replicas(log);
        isr.sort();
        isr == everyone
            && everyone.iter().all(|&node| {
                c.log(node, log)
                    .is_ok_and(|h| h.log_end_offset() == end && h.high_watermark() == end)
            })
    });
    let report: Vec<String> = everyone
        .iter()
        .map(|&node| match cluster.log(node, log) {
            Ok(h) => format!(
                "{node}: LEO {} HW {}",
                h.log_end_offset(),
                h.high_watermark()
            ),
            Err(e) => format!("{node}: {e}"),
        })
        .collect();
    assert!(
        converged,
        "replicas did not converge within {timeout:?}: ISR {:?}, {report:?}",
        cluster.in_sync_replicas(log)
    );
    let leader = cluster.leader_log(log).expect("leader");
    let end = leader.log_end_offset();
    let reference = committed_bytes(&leader, end);
    for node in everyone {
        let handle = cluster.log(node, log).expect("handle");
        assert!(
            committed_bytes(&handle, end) == reference,
            "{node}'s committed bytes differ from the leader's"
        );
    }
}
