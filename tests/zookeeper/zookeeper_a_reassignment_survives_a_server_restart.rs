//! Issue 26 over ZooKeeper (SPEC 3.10): a reassignment that moves the
//! leader's replica away is stored in the log's znode (KIP-455's
//! `adding_replicas` and `removing_replicas`), is still there after the
//! ZooKeeper server is killed and started again half-way, and completes
//! once the added replica can fetch: replicas = target, the removed
//! replica's copy deleted, no acknowledged record lost.

use std::time::Duration;

use crate::zookeeper_support::{assert_nothing_acknowledged_lost, server, Traffic};
use isrlog::testing::ZkCluster;
use isrlog::{Coordinator, LogId, NodeId};

const LOG: LogId = LogId(0);
/// Long enough for the server to come back before sessions expire.
const SESSION_TIMEOUT: Duration = Duration::from_secs(15);
const WAIT_MAX: Duration = Duration::from_secs(30);

#[test]
fn zookeeper_a_reassignment_survives_a_server_restart() {
    let mut server = server();
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(4)
        .replication(crate::zookeeper_support::replication())
        .session_timeout(SESSION_TIMEOUT)
        .build()
        .expect("cluster");
    let original = cluster.create_log(LOG, 3).expect("create log");
    assert_eq!(original, vec![NodeId(0), NodeId(1), NodeId(2)]);
    let leader = cluster.leader_of(LOG).expect("a leader");
    let added = NodeId(3);
    let target: Vec<NodeId> = std::iter::once(added)
        .chain(original.iter().copied().filter(|n| *n != leader))
        .collect();
    let traffic = Traffic::new();
    std::thread::scope(|scope| {
        scope.spawn(|| traffic.run(&cluster, LOG, "record"));
        let _stop = traffic.stop_on_drop();
        assert!(
            traffic.wait_for(0, 50, Duration::from_secs(20)),
            "no traffic before the move"
        );
        // Hold the move half-way: the added replica cannot fetch yet.
        cluster.network.partition(&[added], &original);
        let moving = cluster
            .with_node(leader, |n| n.reassign_log(LOG, target.clone()))
            .expect("the leader runs")
            .expect("reassign");
        assert_eq!(moving.adding_replicas, vec![added]);
        assert_eq!(moving.removing_replicas, vec![leader]);

        server.kill();
        std::thread::sleep(Duration::from_millis(300));
        server.resume().expect("restart ZooKeeper");
        assert!(
            cluster.wait_until(WAIT_MAX, |c| {
                c.coordinator()
                    .live_nodes()
                    .is_ok_and(|live| live.len() == 4)
            }),
            "the nodes' sessions did not come back after the restart"
        );
        let stored = cluster.log_state(LOG).expect("the log");
        assert_eq!(stored.adding_replicas, vec![added], "{stored:?}");
        assert_eq!(stored.removing_replicas, vec![leader], "{stored:?}");

        cluster.network.heal();
        let completed = cluster.wait_until(WAIT_MAX, |c| {
            c.log_state(LOG).is_some_and(|s| {
                !s.is_reassigning() && s.replicas == target && s.in_sync_replicas.len() == 3
            })
        });
        assert!(
            completed,
            "the move did not complete: {:?}",
            cluster.log_state(LOG)
        );
        let during = traffic.acknowledged_count();
        assert!(
            traffic.wait_for(during, 50, Duration::from_secs(20)),
            "traffic did not go on after the move"
        );
        traffic.stop();
    });
    let new_leader = cluster.leader_of(LOG).expect("a leader");
    assert!(target.contains(&new_leader), "{new_leader} leads");
    let gone = cluster.wait_until(WAIT_MAX, |c| {
        !c.node_dir(leader).join(format!("log-{}", LOG.0)).exists()
    });
    assert!(gone, "the removed replica on {leader} was not deleted");
    let handle = cluster.leader_log(LOG).expect("leader");
    assert_nothing_acknowledged_lost(&traffic.acknowledged(), &handle);
}
