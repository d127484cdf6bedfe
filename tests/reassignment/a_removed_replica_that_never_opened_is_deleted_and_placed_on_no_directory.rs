//! SPEC 2.8 and 3.10: a replica that a reassignment removes while its
//! node cannot open it (here a segment missing from the middle of its log:
//! recovery refuses to open, SPEC 2.3) goes as a hosted one does: its
//! copy is deleted and recorded as placed on no directory. Before, the
//! node only forgot it: its damaged files stayed (opened again, and
//! failing again, if a move added the replica back) and the coordinator
//! kept the placement an earlier start recorded, naming this node's
//! directory for a log it is no longer a replica of (review finding).

use std::sync::Arc;
use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{Acks, DirectoryId, LogConfig, NodeId, ReplicationConfig};

use crate::reassignment_support::*;

#[test]
fn a_removed_replica_that_never_opened_is_deleted_and_placed_on_no_directory() {
    let cluster = Arc::new(
        Cluster::builder()
            .nodes(4)
            .replication(ReplicationConfig {
                min_insync_replicas: 2,
                fetch_wait_max: Duration::from_millis(50),
                request_timeout: Duration::from_secs(5),
                fetch_backoff: Duration::from_millis(5),
                ..ReplicationConfig::default()
            })
            .session_timeout(Duration::from_secs(2))
            .log_config(LogConfig {
                segment_bytes_max: 600,
                ..LogConfig::default()
            })
            .build()
            .unwrap(),
    );
    assert_eq!(cluster.create_log(LOG, 3).unwrap(), nodes(&[0, 1, 2]));
    let leader = cluster.leader_log(LOG).unwrap();
    for i in 0..40 {
        leader
            .append_values(&[format!("record {i}")], Acks::All)
            .unwrap();
    }
    assert!(cluster.wait_until(WAIT_MAX, |c| c.in_sync_replicas(LOG).len() == 3));
    let placed = |node: NodeId| placed(&cluster, node);
    let damaged = NodeId(2);
    let first = placed(damaged).expect("node 2's replica is placed");
    assert_ne!(first, DirectoryId::UNASSIGNED);

    // Take a segment out of the middle of node 2's copy: it cannot open.
    cluster.stop_node(damaged).unwrap();
    let dir = replica_dir(&cluster, damaged);
    let mut segments: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    assert!(segments.len() >= 3, "{segments:?}");
    std::fs::remove_file(&segments[segments.len() / 2]).unwrap();
    cluster.start_node(damaged).unwrap();
    let not_opened = |c: &Cluster| {
        c.with_node(damaged, |n| n.logs_not_opened())
            .is_some_and(|logs| logs.iter().any(|(log, _)| *log == LOG))
    };
    assert!(
        cluster.wait_until(WAIT_MAX, not_opened),
        "node 2 opened the damaged copy"
    );
    assert_eq!(placed(damaged), Some(first), "placed by the first start");

    // Moved off node 2 while it still cannot open it.
    let target = nodes(&[0, 1, 3]);
    admin(&cluster, |n| n.reassign_log(LOG, target.clone())).unwrap();
    wait_completed(&cluster, &target);
    assert!(
        cluster.wait_until(WAIT_MAX, |c| !replica_dir(c, damaged).exists()),
        "the removed replica's damaged copy is still there"
    );
    assert!(
        cluster.wait_until(WAIT_MAX, |_| placed(damaged)
            == Some(DirectoryId::UNASSIGNED)),
        "node 2's removed replica is still placed on {:?}",
        placed(damaged)
    );
    assert!(!not_opened(&cluster), "still named as not opened");
}
