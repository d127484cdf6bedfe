//! Issue 11: a three-server ZooKeeper ensemble on loopback whose ZooKeeper
//! leader is killed (SIGKILL) while three isrlog nodes take `acks=all`
//! traffic. The remaining two servers elect a new ZooKeeper leader; the
//! clients connected to the dead server move to a live one within their
//! sessions; isrlog keeps serving throughout, and no acknowledged record is
//! lost. The killed server then rejoins.

use std::time::{Duration, Instant};

use crate::zookeeper_support::{assert_converged, assert_nothing_acknowledged_lost, Traffic};
use isrlog::testing::zookeeper::ZkEnsemble;
use isrlog::testing::ZkCluster;
use isrlog::{Coordinator, LogId};

const LOG: LogId = LogId(0);
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

#[test]
fn killing_the_zookeeper_leader_does_not_stop_isrlog() {
    let mut ensemble =
        ZkEnsemble::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
    let cluster = ZkCluster::builder(ensemble.connect_string())
        .nodes(3)
        .replication(crate::zookeeper_support::replication())
        .session_timeout(SESSION_TIMEOUT)
        .build()
        .expect("cluster");
    cluster.create_log(LOG, 3).expect("create log");
    let traffic = Traffic::new();
    std::thread::scope(|scope| {
        scope.spawn(|| traffic.run(&cluster, LOG, "record"));
        let _stop = traffic.stop_on_drop();
        assert!(
            traffic.wait_for(0, 100, Duration::from_secs(20)),
            "no traffic before the kill"
        );
        let zookeeper_leader = ensemble.leader().expect("the ensemble has a leader");
        let killed_at = Instant::now();
        ensemble.kill(zookeeper_leader);
        let during = traffic.acknowledged_count();
        assert!(
            traffic.wait_for(during, 100, Duration::from_secs(10)),
            "isrlog stopped serving when the ZooKeeper leader died"
        );
        // The coordinator works again once the others elected a leader.
        assert!(
            cluster.wait_until(Duration::from_secs(20), |c| {
                c.coordinator()
                    .live_nodes()
                    .is_ok_and(|live| live.len() == 3)
                    && c.coordinator().logs().is_ok()
            }),
            "ZooKeeper did not come back with all three nodes live"
        );
        eprintln!(
            "ZooKeeper peer {} (its leader) killed; coordinator serving again {:?} later",
            zookeeper_leader + 1,
            killed_at.elapsed()
        );
        ensemble
            .resume(zookeeper_leader)
            .expect("restart the killed peer");
        let after = traffic.acknowledged_count();
        assert!(
            traffic.wait_for(after, 100, Duration::from_secs(20)),
            "traffic did not go on after the killed peer came back"
        );
        traffic.stop();
    });
    assert_converged(&cluster, LOG, Duration::from_secs(20));
    let leader = cluster.leader_log(LOG).expect("leader");
    assert_nothing_acknowledged_lost(&traffic.acknowledged(), &leader);
}
