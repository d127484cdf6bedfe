//! Regression: a dropped `testing::Cluster` kept its nodes alive in a
//! reference cycle (network → node handler → node → transport → network),
//! with every log file open. The randomised fault test, which builds one
//! cluster per seed in one process, ran out of file descriptors after a
//! few dozen seeds: logs were poisoned by `EMFILE` and the cluster stalled.
//! Fix: dropping a cluster unregisters its nodes from the network, and a
//! halted node lets go of its replicas.

use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{Acks, LogId, NodeId};

fn open_file_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

fn one_cluster() {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .build()
        .unwrap();
    for log in 0..3 {
        cluster.create_log(LogId(log), 3).unwrap();
        let leader = cluster.leader_log(LogId(log)).unwrap();
        leader.append_values(&[b"x"], Acks::All).unwrap();
    }
    // A crash and a restart, as the fault test does.
    cluster.crash(NodeId(2));
    cluster.restart(NodeId(2)).unwrap();
    assert!(cluster.wait_until(Duration::from_secs(5), |c| c
        .log(NodeId(2), LogId(0))
        .is_ok()));
}

#[test]
fn dropping_clusters_does_not_leak_open_files() {
    // Warm up (lazily opened process-wide files, thread pools).
    one_cluster();
    let before = open_file_descriptors();
    for _ in 0..6 {
        one_cluster();
    }
    // Give threads that were told to stop a moment to finish, and the
    // tests running beside this one in the process (their files count
    // too) a moment to close theirs: up to 3 s. A leak of the 6 clusters
    // (3 nodes of 3 logs each, a data and an index file per log at least)
    // stays far above the margin however long it waits.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut after = open_file_descriptors();
    while after > before + 10 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        after = open_file_descriptors();
    }
    assert!(
        after <= before + 10,
        "open file descriptors grew from {before} to {after} over 6 dropped clusters"
    );
}
