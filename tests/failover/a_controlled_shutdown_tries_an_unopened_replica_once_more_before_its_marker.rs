//! SPEC 3.5: after an unclean start, a controlled shutdown writes no
//! clean-shutdown marker while a replica of that start never opened (the
//! next start must recover it as after an unclean stop). A replica that
//! keeps failing to open is retried after a doubling pause (up to
//! `OPEN_RETRY_BACKOFF_MAX`), so a stop that came during the pause never
//! tried again and left the next start unclean even once the replica
//! could open (review finding 3). The stop now tries once more, pause or
//! not, before it decides on the marker: here the damage is repaired
//! during a 4 s pause and the stop follows at once, and the next start is
//! clean.

use std::time::Duration;

use crate::failover_support::*;
use isrlog::testing::Cluster;
use isrlog::{Acks, LogConfig, LogId, NodeId, PreviousShutdown};

const LOG: LogId = LogId(0);
const WAIT: Duration = Duration::from_secs(20);

/// How long until `node`'s next attempt to open `LOG`, as
/// `Node::logs_not_opened` says, after how many failed attempts.
fn next_attempt(cluster: &Cluster, node: NodeId) -> Option<(Duration, u32)> {
    let logs = cluster.with_node(node, |n| n.logs_not_opened())?;
    let (_, text) = logs.into_iter().find(|(log, _)| *log == LOG)?;
    let after = text.split("; next attempt in ").nth(1)?;
    let (secs, rest) = after.split_once("s (")?;
    let failed = rest.split(' ').next()?.parse().ok()?;
    Some((Duration::from_secs_f64(secs.parse().ok()?), failed))
}

#[test]
fn a_controlled_shutdown_tries_an_unopened_replica_once_more_before_its_marker() {
    let cluster = Cluster::builder()
        .nodes(3)
        .session_timeout(Duration::from_secs(60))
        .replication(replication(2))
        .log_config(LogConfig {
            segment_bytes_max: 600,
            ..LogConfig::default()
        })
        .build()
        .unwrap();
    let damaged = NodeId(2);
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    for i in 0..40 {
        leader
            .append_values(&[format!("record {i}")], Acks::All)
            .unwrap();
    }
    assert!(cluster.wait_until(WAIT, |c| c.in_sync_replicas(LOG).len() == 3));
    // A clean stop whose marker is then lost: the next start is unclean,
    // and every record is below its copy's recovery point, so that a
    // segment missing there is damage no open may cut (SPEC 2.3; after a
    // crash, a gap above the recovery point may be cut, and the replica
    // opens).
    cluster.stop_node(damaged).unwrap();
    std::fs::remove_file(cluster.node_dir(damaged).join(".isrlog_clean_shutdown")).unwrap();

    // Take a segment out of the middle of its copy: it cannot open.
    let dir = cluster.node_dir(damaged).join("log-0");
    let mut segments: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    assert!(segments.len() >= 3, "{segments:?}");
    let middle = segments[segments.len() / 2].clone();
    let aside = cluster.root().join("aside.log");
    std::fs::rename(&middle, &aside).unwrap();

    cluster.restart(damaged).unwrap();
    let previous = cluster
        .with_node(damaged, |n| n.previous_shutdown())
        .unwrap();
    assert_eq!(previous, PreviousShutdown::Unclean);
    // Wait for a long pause: the third failure in a row waits 4 s.
    assert!(
        cluster.wait_until(WAIT, |c| next_attempt(c, damaged).is_some_and(
            |(pause, failed)| failed >= 3 && pause >= Duration::from_secs(2)
        )),
        "no long pause: {:?}",
        cluster.with_node(damaged, |n| n.logs_not_opened())
    );

    // Repaired during the pause, and stopped at once.
    std::fs::rename(&aside, &middle).unwrap();
    cluster.stop_node(damaged).unwrap();
    cluster.start_node(damaged).unwrap();
    let previous = cluster
        .with_node(damaged, |n| n.previous_shutdown())
        .unwrap();
    assert_eq!(
        previous,
        PreviousShutdown::Clean,
        "the stop tried the replica once more, opened it and wrote the marker"
    );
    let replica = cluster.log(damaged, LOG).unwrap();
    println!("log end at start: {:?}", replica.log_end_offset());
    assert!(cluster.wait_until(WAIT, |c| c.in_sync_replicas(LOG).len() == 3));
    assert!(cluster.wait_until(WAIT, |_| committed_values(&replica)
        == committed_values(&leader)));
}
