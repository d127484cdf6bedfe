//! Issue 23, item 1, over ZooKeeper (SPEC 2.8): a replica whose node comes
//! back with an empty data directory (a replaced disk, a new volume, a
//! changed path) is a start that lost data, never a fresh one. The
//! directory identity the coordinator keeps for each replica lives in
//! ZooKeeper here, so a new coordinator (a new process) must find it: the
//! replicas leave the ISR, a log the node led gets another leader in a new
//! epoch, and it fetches the log again and rejoins the ISR once caught up.
//! For a leader and for a follower, back before its session expired and
//! after: nothing acknowledged is lost.

use std::time::Duration;

use isrlog::testing::{Lose, SessionEnd, ZkCluster};
use isrlog::{Acks, Coordinator, Isolation, LogId, NodeId, Offset, PreviousShutdown};

use crate::zookeeper_support::server;

const LOG: LogId = LogId(1);
const RECORDS: usize = 50;

fn values(cluster: &ZkCluster, node: NodeId) -> Vec<Vec<u8>> {
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
    let server = server();
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(3)
        .replication(crate::zookeeper_support::replication())
        .session_timeout(Duration::from_secs(1))
        .build()
        .expect("cluster");
    cluster.create_log(LOG, 3).expect("create log");
    let leader = cluster.leader_log(LOG).expect("leader");
    let mut acknowledged = Vec::new();
    for i in 0..RECORDS {
        let value = format!("record-{i}").into_bytes();
        leader.append_values(&[&value], Acks::All).expect("append");
        acknowledged.push(value);
    }
    let leader_id = cluster.leader_of(LOG).expect("a leader");
    let node = match victim {
        Victim::Leader => leader_id,
        Victim::Follower => cluster
            .node_ids()
            .into_iter()
            .find(|n| *n != leader_id)
            .expect("a follower"),
    };
    assert!(
        cluster.wait_until(Duration::from_secs(10), |c| c.in_sync_replicas(LOG).len()
            == 3)
    );

    cluster.crash_with(node, Lose::Nothing, session);
    if session == SessionEnd::Immediately {
        assert!(cluster.wait_until(Duration::from_secs(20), |c| {
            !c.coordinator().live_nodes().unwrap().contains(&node)
                && c.leader_of(LOG).is_some_and(|l| l != node)
        }));
    }
    std::fs::remove_dir_all(cluster.node_dir(node)).unwrap();
    cluster.restart(node).expect("restart");
    assert_eq!(
        cluster.with_node(node, |n| n.previous_shutdown()),
        Some(PreviousShutdown::LostData),
        "{victim:?} {session:?}: an emptied directory is never fresh"
    );

    let caught_up = cluster.wait_until(Duration::from_secs(30), |c| {
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
    cluster
        .leader_log(LOG)
        .expect("leader")
        .append_values(&[b"after"], Acks::All)
        .expect("append after");
    cluster.shutdown().expect("shutdown");
}

#[test]
fn zookeeper_a_leader_back_with_an_empty_directory_before_its_session_expires_loses_nothing() {
    empty_directory_restart(Victim::Leader, SessionEnd::OnExpiry);
}

#[test]
fn zookeeper_a_follower_back_with_an_empty_directory_before_its_session_expires_loses_nothing() {
    empty_directory_restart(Victim::Follower, SessionEnd::OnExpiry);
}

#[test]
fn zookeeper_a_leader_back_with_an_empty_directory_after_its_session_expired_loses_nothing() {
    empty_directory_restart(Victim::Leader, SessionEnd::Immediately);
}

#[test]
fn zookeeper_a_follower_back_with_an_empty_directory_after_its_session_expired_loses_nothing() {
    empty_directory_restart(Victim::Follower, SessionEnd::Immediately);
}
