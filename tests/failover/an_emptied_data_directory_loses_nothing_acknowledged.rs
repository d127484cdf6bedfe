//! Regression (issue 23, item 1): a replica whose node came back with an
//! empty data directory (a replaced disk, a new volume, a changed path) was
//! taken for a fresh node. A leader that did so before its session expired
//! kept leading its epoch at log end 0, and both followers truncated to it:
//! all 50 acknowledged records were gone. Fix (SPEC 2.8): the directory has
//! an identity, the coordinator records which directory each replica lives
//! on, and a start that finds a placed replica missing reports it like an
//! unclean shutdown with an empty log end before it serves anything. Its
//! replicas leave the ISR and ELR, a log it led gets another leader in a new
//! epoch, and it fetches the log again and rejoins the ISR once caught up.

use std::time::Duration;

use isrlog::testing::{Cluster, Lose, SessionEnd};
use isrlog::{Acks, Coordinator, Isolation, LogId, NodeId, Offset, PreviousShutdown};

const LOG: LogId = LogId(1);
const RECORDS: usize = 50;

fn values(cluster: &Cluster, node: NodeId) -> Vec<Vec<u8>> {
    let Ok(handle) = cluster.log(node, LOG) else {
        return Vec::new();
    };
    let Ok(batches) = handle.read(Offset(0), 1 << 24, Isolation::Committed) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for batch in batches {
        for record in batch.records() {
            out.push(record.unwrap().value.to_vec());
        }
    }
    out
}

#[derive(Clone, Copy, Debug)]
enum Victim {
    Leader,
    Follower,
}

fn empty_directory_restart(victim: Victim, session: SessionEnd) {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .session_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let mut acknowledged = Vec::new();
    for i in 0..RECORDS {
        let value = format!("record-{i}").into_bytes();
        leader.append_values(&[&value], Acks::All).unwrap();
        acknowledged.push(value);
    }
    let leader_id = cluster.leader_of(LOG).unwrap();
    let node = match victim {
        Victim::Leader => leader_id,
        Victim::Follower => cluster
            .node_ids()
            .into_iter()
            .find(|n| *n != leader_id)
            .unwrap(),
    };
    assert_eq!(cluster.in_sync_replicas(LOG).len(), 3);

    cluster.crash_with(node, Lose::Nothing, session);
    if session == SessionEnd::OnExpiry {
        // Comes back in time, or after the coordinator saw it gone.
    } else {
        assert!(cluster.wait_until(Duration::from_secs(10), |c| {
            !c.coordinator.live_nodes().unwrap().contains(&node)
                && c.leader_of(LOG).is_some_and(|l| l != node)
        }));
    }
    std::fs::remove_dir_all(cluster.node_dir(node)).unwrap();
    cluster.restart(node).unwrap();
    assert_eq!(
        cluster.with_node(node, |n| n.previous_shutdown()),
        Some(PreviousShutdown::LostData),
        "{victim:?} {session:?}: an emptied directory is never fresh"
    );

    let caught_up = cluster.wait_until(Duration::from_secs(20), |c| {
        c.in_sync_replicas(LOG).contains(&node)
            && c.leader_of(LOG).is_some()
            && c.node_ids()
                .into_iter()
                .all(|n| values(c, n) == acknowledged)
    });
    assert!(
        caught_up,
        "{victim:?} {session:?}: ISR {:?}, leader {:?}, records per node {:?}",
        cluster.in_sync_replicas(LOG),
        cluster.leader_of(LOG),
        cluster
            .node_ids()
            .into_iter()
            .map(|n| values(&cluster, n).len())
            .collect::<Vec<_>>()
    );
    if matches!(victim, Victim::Leader) {
        assert_ne!(cluster.leader_of(LOG), None);
    }
    // The leader still takes `acks=all` appends with all three in sync.
    cluster
        .leader_log(LOG)
        .unwrap()
        .append_values(&[b"after"], Acks::All)
        .unwrap();
    cluster.shutdown().unwrap();
}

#[test]
fn a_leader_back_with_an_empty_directory_before_its_session_expires_loses_nothing() {
    empty_directory_restart(Victim::Leader, SessionEnd::OnExpiry);
}

#[test]
fn a_follower_back_with_an_empty_directory_before_its_session_expires_loses_nothing() {
    empty_directory_restart(Victim::Follower, SessionEnd::OnExpiry);
}

#[test]
fn a_leader_back_with_an_empty_directory_after_its_session_expired_loses_nothing() {
    empty_directory_restart(Victim::Leader, SessionEnd::Immediately);
}

#[test]
fn a_follower_back_with_an_empty_directory_after_its_session_expired_loses_nothing() {
    empty_directory_restart(Victim::Follower, SessionEnd::Immediately);
}

/// README's recovery of one damaged replica: delete its log directory and
/// restart the node. The replica is reported lost, refetches, and rejoins.
#[test]
fn a_deleted_log_directory_is_refetched_and_rejoins() {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let mut acknowledged = Vec::new();
    for i in 0..RECORDS {
        let value = format!("record-{i}").into_bytes();
        leader.append_values(&[&value], Acks::All).unwrap();
        acknowledged.push(value);
    }
    let node = cluster.leader_of(LOG).unwrap();
    cluster.stop_node(node).unwrap();
    std::fs::remove_dir_all(cluster.node_dir(node).join(format!("log-{}", LOG.0))).unwrap();
    cluster.restart(node).unwrap();
    assert_eq!(
        cluster.with_node(node, |n| n.previous_shutdown()),
        Some(PreviousShutdown::LostData)
    );
    assert!(cluster.wait_until(Duration::from_secs(20), |c| {
        c.in_sync_replicas(LOG).contains(&node)
            && c.node_ids()
                .into_iter()
                .all(|n| values(c, n) == acknowledged)
    }));
    cluster.shutdown().unwrap();
}
