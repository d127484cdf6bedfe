//! SPEC 3.6 with an exact log start (issue 25, third log-start defect): a
//! leader whose log start lies inside a batch (a deletion at an exact
//! offset) answers a fetch at its log start with the whole batch holding
//! it, whose base is below. A follower that restarted its log at the
//! leader's log start must not reject that batch for ever (it did: the
//! batch's base is not its log end, and it asked again); as Kafka's
//! `Partition.appendRecordsToFollowerOrFutureReplica` does, an empty log
//! restarts at the batch's base, appends it, and moves its log start back
//! up to the leader's from the same answer. The follower restarts at the
//! leader's log start only in Kafka's mode (`retain_until_applied =
//! false`); by default it would report that it needs a snapshot (SPEC 3.9).

use std::sync::Arc;
use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{
    Acks, Error, Isolation, Log, LogConfig, LogId, Offset, ReplicationConfig, SystemClock,
};

/// Values per batch: every batch spans 4 offsets, so a log start of
/// `4k + 2` is inside one.
const PER_BATCH: usize = 4;

#[test]
fn a_log_start_inside_a_batch_restarts_the_follower_at_its_base() {
    let builder = Cluster::builder();
    // Kafka's behaviour, explicitly: no application reports a position,
    // and the follower, with no snapshot store, restarts at the leader's
    // log start.
    let kafka = ReplicationConfig {
        retain_until_applied: false,
        ..builder.replication_config()
    };
    let cluster = builder
        .nodes(3)
        .replication(kafka)
        .min_insync_replicas(2)
        .session_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let log = LogId(0);
    let replicas = cluster.create_log(log, 3).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    let leader_id = leader.node_id();
    let lagging = replicas[2];
    assert_ne!(lagging, leader_id);
    let other = replicas
        .iter()
        .copied()
        .find(|&r| r != leader_id && r != lagging)
        .unwrap();
    let value = [7u8; 100];
    let batch = vec![&value[..]; PER_BATCH];
    for _ in 0..5 {
        leader.append_values(&batch, Acks::All).unwrap();
    }
    let on_lagging = cluster.log(lagging, log).unwrap();
    assert!(cluster.wait_until(Duration::from_secs(5), |_| {
        on_lagging.log_end_offset() == Offset(20)
    }));

    // The follower is down while 40 more records are committed.
    cluster.crash(lagging);
    assert!(cluster.wait_until(Duration::from_secs(5), |c| !c
        .in_sync_replicas(log)
        .contains(&lagging)));
    for _ in 0..10 {
        leader.append_values(&batch, Acks::All).unwrap();
    }
    let on_other = cluster.log(other, log).unwrap();
    assert!(cluster.wait_until(Duration::from_secs(5), |_| {
        on_other.high_watermark() == Offset(60) && leader.high_watermark() == Offset(60)
    }));

    // Both in-sync replicas stop cleanly; each log's start is moved to 42,
    // inside the batch 40..44, as a deletion at an exact offset would.
    let mid_batch = Offset(42);
    cluster.stop_node(other).unwrap();
    cluster.stop_node(leader_id).unwrap();
    for node in [leader_id, other] {
        let dir = cluster.node_dir(node).join(format!("log-{}", log.0));
        let opened = Log::open(&dir, LogConfig::default(), Arc::new(SystemClock)).unwrap();
        assert_eq!(opened.high_watermark(), Offset(60), "node {node}");
        opened.set_log_start_offset(mid_batch).unwrap();
        opened.close().unwrap();
    }
    cluster.start_node(leader_id).unwrap();
    cluster.start_node(other).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    assert_eq!(leader.log_start_offset(), mid_batch);

    // The follower's log (0..20) ends below the leader's start: it restarts
    // at 42, is answered with the batch 40..44, and must take it.
    cluster.restart(lagging).unwrap();
    let on_lagging = cluster.log(lagging, log).unwrap();
    assert!(
        cluster.wait_until(Duration::from_secs(10), |c| {
            c.in_sync_replicas(log).contains(&lagging)
                && on_lagging.log_end_offset() == Offset(60)
                && on_lagging.log_start_offset() == mid_batch
        }),
        "follower: start {} leo {} hw {}; leader: start {} leo {}",
        on_lagging.log_start_offset(),
        on_lagging.log_end_offset(),
        on_lagging.high_watermark(),
        leader.log_start_offset(),
        leader.log_end_offset()
    );
    // Below the log start nothing is readable, from the start everything is.
    assert!(matches!(
        on_lagging.read(Offset(41), 1 << 20, Isolation::Committed),
        Err(Error::OffsetOutOfRange { .. })
    ));
    let ours = on_lagging
        .read(mid_batch, 1 << 20, Isolation::Committed)
        .unwrap();
    let theirs = leader
        .read(mid_batch, 1 << 20, Isolation::Committed)
        .unwrap();
    assert_eq!(
        ours.iter()
            .map(|b| b.as_bytes().to_vec())
            .collect::<Vec<_>>(),
        theirs
            .iter()
            .map(|b| b.as_bytes().to_vec())
            .collect::<Vec<_>>()
    );
    // And it keeps replicating.
    let last = leader.append_values(&batch, Acks::All).unwrap();
    assert!(cluster.wait_until(Duration::from_secs(5), |_| {
        on_lagging.high_watermark() > last.last_offset
    }));
    cluster.shutdown().unwrap();
}
