//! Issue 11: replication on a real ZooKeeper. Three nodes, each with its
//! own `ZkCoordinator` (as three processes would have) reaching ZooKeeper
//! through a proxy of its own, `acks=all` traffic with min ISR 2. The
//! leader's process crashes: its connections to ZooKeeper go with it (cut
//! at its proxy) and its threads stop, so ZooKeeper itself must expire its
//! session, one session timeout later. The controller elects a new leader,
//! traffic continues on it, and no acknowledged record is lost. The old
//! leader restarts, catches up and rejoins the ISR, and all three logs end
//! identical. The same holds when the leader's process hangs instead
//! (threads halted, connections kept, the client still pinging): its own
//! coordinator then ends its session when its lease lapses.

use std::time::{Duration, Instant};

use crate::zookeeper_support::{
    assert_converged, assert_nothing_acknowledged_lost, server, Traffic,
};
use isrlog::testing::{Lose, SessionEnd, ZkCluster};
use isrlog::LogId;

const LOG: LogId = LogId(0);
const SESSION_TIMEOUT: Duration = Duration::from_secs(1);

/// How the leader goes.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Its process dies and its connections to ZooKeeper with it.
    Crash,
    /// Its process hangs; its ZooKeeper client keeps pinging.
    Hang,
}

#[test]
fn leader_crash_fails_over_without_losing_acknowledged_records() {
    fail_over(Fault::Crash);
}

#[test]
fn leader_hang_fails_over_without_losing_acknowledged_records() {
    fail_over(Fault::Hang);
}

fn fail_over(fault: Fault) {
    let server = server();
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(3)
        .replication(crate::zookeeper_support::replication())
        .session_timeout(SESSION_TIMEOUT)
        .proxied(true)
        .build()
        .expect("cluster");
    cluster.create_log(LOG, 3).expect("create log");
    let traffic = Traffic::new();
    std::thread::scope(|scope| {
        scope.spawn(|| traffic.run(&cluster, LOG, "record"));
        let _stop = traffic.stop_on_drop();
        assert!(
            traffic.wait_for(0, 200, Duration::from_secs(20)),
            "no traffic before the {fault:?}"
        );
        let old_leader = cluster.leader_of(LOG).expect("a leader");
        let before = traffic.acknowledged_count();
        let crashed_at = Instant::now();
        if let Fault::Crash = fault {
            cluster
                .cut_from_zookeeper(old_leader, true)
                .expect("a proxied cluster");
        }
        cluster.crash_with(old_leader, Lose::Nothing, SessionEnd::OnExpiry);
        assert!(
            cluster.wait_until(SESSION_TIMEOUT + Duration::from_secs(5), |c| {
                c.leader_of(LOG).is_some_and(|leader| leader != old_leader)
            }),
            "no new leader within {:?} of the {fault:?} of {old_leader}",
            SESSION_TIMEOUT + Duration::from_secs(5)
        );
        let elected_after = crashed_at.elapsed();
        assert!(
            traffic.wait_for(before, 200, Duration::from_secs(20)),
            "traffic did not resume on the new leader"
        );
        eprintln!(
            "failover after a {fault:?}: new leader elected {elected_after:?} after it (session timeout \
             {SESSION_TIMEOUT:?}); traffic resumed {:?} after it",
            crashed_at.elapsed()
        );
        traffic.stop();
        let new_leader = cluster.leader_log(LOG).expect("new leader");
        assert_ne!(new_leader.node_id(), old_leader);
        assert_nothing_acknowledged_lost(&traffic.acknowledged(), &new_leader);

        if let Fault::Crash = fault {
            cluster
                .cut_from_zookeeper(old_leader, false)
                .expect("a proxied cluster");
        }
        cluster.restart(old_leader).expect("restart the old leader");
    });
    assert_converged(&cluster, LOG, Duration::from_secs(20));
    let leader = cluster.leader_log(LOG).expect("leader");
    assert_nothing_acknowledged_lost(&traffic.acknowledged(), &leader);
}
