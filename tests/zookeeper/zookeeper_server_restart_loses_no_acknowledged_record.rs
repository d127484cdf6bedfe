//! Issue 11: the standalone ZooKeeper server is killed (SIGKILL) while
//! three nodes take `acks=all` traffic, and started again on the same port
//! and data a moment later. The nodes' clients reconnect to their sessions
//! (which ZooKeeper keeps across a restart), traffic goes on, and no
//! acknowledged record is lost.

use std::time::{Duration, Instant};

use crate::zookeeper_support::{
    assert_converged, assert_nothing_acknowledged_lost, server, Traffic,
};
use isrlog::testing::ZkCluster;
use isrlog::{Coordinator, LogId};

const LOG: LogId = LogId(0);
/// Long enough for the server to come back before sessions expire.
const SESSION_TIMEOUT: Duration = Duration::from_secs(15);

#[test]
fn zookeeper_restart_under_traffic_loses_no_acknowledged_record() {
    let mut server = server();
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(3)
        .replication(crate::zookeeper_support::replication())
        .session_timeout(SESSION_TIMEOUT)
        .build()
        .expect("cluster");
    cluster.create_log(LOG, 3).expect("create log");
    let sessions_before: Vec<Option<i64>> = cluster
        .node_ids()
        .into_iter()
        .map(|node| cluster.session_id(node))
        .collect();
    let traffic = Traffic::new();
    std::thread::scope(|scope| {
        scope.spawn(|| traffic.run(&cluster, LOG, "record"));
        let _stop = traffic.stop_on_drop();
        assert!(
            traffic.wait_for(0, 100, Duration::from_secs(20)),
            "no traffic before the restart"
        );
        let leader_before = cluster.leader_of(LOG).expect("a leader");
        server.kill();
        let killed_at = Instant::now();
        let during = traffic.acknowledged_count();
        // Replication needs no coordinator while the ISR holds.
        assert!(
            traffic.wait_for(during, 50, Duration::from_secs(10)),
            "traffic stopped while ZooKeeper was down"
        );
        server.resume().expect("restart ZooKeeper");
        eprintln!("ZooKeeper was down for {:?}", killed_at.elapsed());
        assert!(
            cluster.wait_until(Duration::from_secs(10), |c| {
                c.coordinator()
                    .live_nodes()
                    .is_ok_and(|live| live.len() == 3)
            }),
            "the nodes' sessions did not come back after the restart"
        );
        let after = traffic.acknowledged_count();
        assert!(
            traffic.wait_for(after, 100, Duration::from_secs(20)),
            "traffic did not go on after the restart"
        );
        traffic.stop();
        assert_eq!(
            cluster.leader_of(LOG),
            Some(leader_before),
            "a restart within the session timeout must not move leadership"
        );
    });
    assert_eq!(
        sessions_before,
        cluster
            .node_ids()
            .into_iter()
            .map(|node| cluster.session_id(node))
            .collect::<Vec<_>>(),
        "sessions are kept across a ZooKeeper restart"
    );
    assert_converged(&cluster, LOG, Duration::from_secs(20));
    let leader = cluster.leader_log(LOG).expect("leader");
    assert_nothing_acknowledged_lost(&traffic.acknowledged(), &leader);
}
