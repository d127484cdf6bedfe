//! Issue 24, item 4: a three-server ZooKeeper ensemble that loses its
//! quorum (two servers killed) for twice the nodes' session timeout, then
//! gets it back. ZooKeeper expires no session without a quorum, and gives
//! every session a fresh timeout when a new ZooKeeper leader takes over, so
//! the nodes' sessions are still there: each node, which meanwhile fenced
//! itself (its heartbeats failed, its subscribers were told it left),
//! resumes the same session instead of opening a new one. No log changes
//! leader or leader epoch (every node stayed up), every log has its leader
//! again within moments, and nothing acknowledged is lost.
//!
//! Before the fix, every coordinator gave up its sessions after a session
//! timeout without ZooKeeper; when the quorum came back the orphaned
//! sessions held the nodes' znodes and the controller seat for one more
//! session timeout, and then the controller moved leadership.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::zookeeper_support::{assert_converged, assert_nothing_acknowledged_lost, Traffic};
use isrlog::testing::zookeeper::ZkEnsemble;
use isrlog::testing::ZkCluster;
use isrlog::{Coordinator, LeaderEpoch, LogId, NodeId};

const SESSION_TIMEOUT: Duration = Duration::from_secs(3);
const LOGS: [LogId; 3] = [LogId(0), LogId(1), LogId(2)];

/// Each log's leader and leader epoch as ZooKeeper holds them.
fn leaders(cluster: &ZkCluster) -> BTreeMap<LogId, (Option<NodeId>, LeaderEpoch)> {
    LOGS.iter()
        .map(|&log| {
            let state = cluster.log_state(log).expect("the log exists");
            (log, (state.leader, state.leader_epoch))
        })
        .collect()
}

/// Whether every log's leader is live and knows it leads in the epoch
/// ZooKeeper holds.
fn every_log_led(cluster: &ZkCluster) -> bool {
    let Ok(live) = cluster.coordinator().live_nodes() else {
        return false;
    };
    LOGS.iter().all(|&log| {
        let Ok(Some(state)) = cluster.coordinator().log_state(log) else {
            return false;
        };
        state.leader.is_some_and(|leader| {
            live.contains(&leader)
                && cluster.log(leader, log).is_ok_and(|handle| {
                    handle.is_leader() && handle.leader_epoch() == state.leader_epoch
                })
        })
    })
}

#[test]
fn a_lost_quorum_keeps_every_session_and_every_leader() {
    let mut ensemble =
        ZkEnsemble::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
    let cluster = ZkCluster::builder(ensemble.connect_string())
        .nodes(3)
        .replication(crate::zookeeper_support::replication())
        .session_timeout(SESSION_TIMEOUT)
        .build()
        .expect("cluster");
    for log in LOGS {
        cluster.create_log(log, 3).expect("create log");
    }
    let traffic = Traffic::new();
    std::thread::scope(|scope| {
        scope.spawn(|| traffic.run(&cluster, LOGS[0], "record"));
        let _stop = traffic.stop_on_drop();
        assert!(
            traffic.wait_for(0, 100, Duration::from_secs(20)),
            "no traffic before the quorum loss"
        );
        assert!(
            cluster.wait_until(Duration::from_secs(10), every_log_led),
            "not every log led before the quorum loss"
        );
        let before = leaders(&cluster);
        let sessions: Vec<Option<i64>> = cluster
            .node_ids()
            .into_iter()
            .map(|node| cluster.session_id(node))
            .collect();
        let controller = cluster.coordinator().controller().expect("controller");

        ensemble.kill(0);
        ensemble.kill(1);
        let lost_at = Instant::now();
        std::thread::sleep(SESSION_TIMEOUT * 2);
        let during = traffic.acknowledged_count();
        let restart_at = Instant::now();
        ensemble
            .resume(0)
            .unwrap_or_else(|e| panic!("cannot restart ZooKeeper peer 1: {e}"));
        let quorum_at = Instant::now();
        eprintln!(
            "quorum lost for {:?}; a quorum serves again {:?} after the first restart began",
            quorum_at - lost_at,
            quorum_at - restart_at
        );
        assert!(
            cluster.wait_until(SESSION_TIMEOUT * 5, every_log_led),
            "not every log has a live leader again {:?} after the quorum came back",
            SESSION_TIMEOUT * 5
        );
        let led_after = quorum_at.elapsed();
        assert!(
            cluster.wait_until(SESSION_TIMEOUT * 5, |c| c
                .coordinator()
                .live_nodes()
                .is_ok_and(|live| live == c.node_ids())),
            "not every node is live again"
        );
        let live_after = quorum_at.elapsed();
        eprintln!(
            "session timeout {SESSION_TIMEOUT:?}: every log led by a live leader {led_after:?} \
             after the quorum came back, every node live {live_after:?} after"
        );
        ensemble
            .resume(1)
            .unwrap_or_else(|e| panic!("cannot restart ZooKeeper peer 2: {e}"));

        assert_eq!(
            leaders(&cluster),
            before,
            "a log changed leader (or leader epoch) though every node stayed up"
        );
        let sessions_after: Vec<Option<i64>> = cluster
            .node_ids()
            .into_iter()
            .map(|node| cluster.session_id(node))
            .collect();
        assert_eq!(sessions_after, sessions, "a node opened a new session");
        assert_eq!(
            cluster.coordinator().controller().expect("controller"),
            controller,
            "the controller changed"
        );
        assert!(
            traffic.wait_for(during, 100, Duration::from_secs(20)),
            "traffic did not continue after the quorum came back"
        );
        traffic.stop();
    });
    eprintln!(
        "{} acknowledged, {} failed appends",
        traffic.acknowledged_count(),
        traffic.failed_count()
    );
    assert_converged(&cluster, LOGS[0], Duration::from_secs(20));
    for node in cluster.node_ids() {
        let handle = cluster.log(node, LOGS[0]).expect("handle");
        assert_nothing_acknowledged_lost(&traffic.acknowledged(), &handle);
    }
}
