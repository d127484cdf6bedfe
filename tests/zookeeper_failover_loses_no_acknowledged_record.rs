//! Issue 11: replication on a real ZooKeeper. Three nodes, each with its
//! own `ZkCoordinator` (as three processes would have), `acks=all` traffic
//! with min ISR 2. The leader's process hangs (threads halted, nothing
//! renews its lease): its ZooKeeper session ends one session timeout later,
//! the controller elects a new leader, traffic continues on it, and no
//! acknowledged record is lost. The old leader restarts, catches up and
//! rejoins the ISR, and all three logs end identical.

mod zookeeper_support;

use std::time::{Duration, Instant};

use isrlog::testing::{Lose, SessionEnd, ZkCluster};
use isrlog::LogId;
use zookeeper_support::{assert_converged, assert_nothing_acknowledged_lost, server, Traffic};

const LOG: LogId = LogId(0);
const SESSION_TIMEOUT: Duration = Duration::from_secs(1);

#[test]
fn leader_crash_fails_over_without_losing_acknowledged_records() {
    let server = server();
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(3)
        .replication(zookeeper_support::replication())
        .session_timeout(SESSION_TIMEOUT)
        .build()
        .expect("cluster");
    cluster.create_log(LOG, 3).expect("create log");
    let traffic = Traffic::new();
    std::thread::scope(|scope| {
        scope.spawn(|| traffic.run(&cluster, LOG, "record"));
        let _stop = traffic.stop_on_drop();
        assert!(
            traffic.wait_for(0, 200, Duration::from_secs(20)),
            "no traffic before the crash"
        );
        let old_leader = cluster.leader_of(LOG).expect("a leader");
        let before = traffic.acknowledged_count();
        let crashed_at = Instant::now();
        cluster.crash_with(old_leader, Lose::Nothing, SessionEnd::OnExpiry);
        assert!(
            cluster.wait_until(SESSION_TIMEOUT + Duration::from_secs(5), |c| {
                c.leader_of(LOG).is_some_and(|leader| leader != old_leader)
            }),
            "no new leader within {:?} of the crash of {old_leader}",
            SESSION_TIMEOUT + Duration::from_secs(5)
        );
        let elected_after = crashed_at.elapsed();
        assert!(
            traffic.wait_for(before, 200, Duration::from_secs(20)),
            "traffic did not resume on the new leader"
        );
        eprintln!(
            "failover: new leader elected {elected_after:?} after the crash (session timeout {SESSION_TIMEOUT:?}); \
             traffic resumed {:?} after it",
            crashed_at.elapsed()
        );
        traffic.stop();
        let new_leader = cluster.leader_log(LOG).expect("new leader");
        assert_ne!(new_leader.node_id(), old_leader);
        assert_nothing_acknowledged_lost(&traffic.acknowledged(), &new_leader);

        cluster.restart(old_leader).expect("restart the old leader");
    });
    assert_converged(&cluster, LOG, Duration::from_secs(20));
    let leader = cluster.leader_log(LOG).expect("leader");
    assert_nothing_acknowledged_lost(&traffic.acknowledged(), &leader);
}
