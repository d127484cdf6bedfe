//! Issue 11: connection loss is not session loss, even for a node whose
//! control loop is inside a coordinator call while ZooKeeper is out of
//! reach. The node heartbeats from the loop that also makes coordinator
//! calls, each of which waits (up to the call timeout, longer than the
//! session timeout here) for the reconnection; the heartbeats it skips
//! meanwhile must not make the node's own coordinator end its session (a
//! pointless failover). An outage shorter than the session timeout leaves
//! the node with the same ZooKeeper session, its leadership untouched.

use std::time::{Duration, Instant};

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::ZkProxy;
use isrlog::testing::ZkCluster;
use isrlog::{
    Acks, Coordinator, CoordinatorEvent, LogId, NodeId, ReplicationConfig, ZkCoordinator,
    ZkCoordinatorConfig,
};

fn coordinator(connect: String, chroot: &str) -> ZkCoordinator {
    let mut config = ZkCoordinatorConfig::new(connect);
    config.chroot = chroot.to_owned();
    config.session_timeout = Duration::from_secs(20);
    // Longer than the node's session, as in `ZkCluster`: one call can wait
    // through a whole outage.
    config.call_timeout = Duration::from_secs(10);
    ZkCoordinator::connect(config).unwrap_or_else(|e| panic!("cannot connect: {e}"))
}

/// The control loop, step by step: it heartbeats, is busy for 0.7 of a
/// session timeout, then makes a call just as ZooKeeper goes out of reach
/// for 0.35 of a timeout. The call waits for the reconnection and returns
/// more than a session timeout after the last heartbeat — yet well within
/// one timeout of ZooKeeper's last word, so ZooKeeper keeps the session.
/// (The outage is kept short because the client library's reconnection
/// backs off — 100 ms doubling per attempt, plus jitter — so it may
/// reconnect well after the outage ends: here by about 0.5 of a timeout.)
/// Deterministic: the lease alone would lapse before the call returns.
#[test]
fn a_call_waiting_through_a_short_outage_keeps_the_callers_session() {
    const SESSION_TIMEOUT: Duration = Duration::from_secs(4);
    let server = server();
    let proxy = ZkProxy::start(&server.connect_string()).expect("proxy");
    let c = coordinator(proxy.connect_string(), "/short-outage");
    let observer = coordinator(server.connect_string(), "/short-outage");
    let node = NodeId(1);
    c.register_node(node, SESSION_TIMEOUT).unwrap();
    let created = c.create_log(LogId(1), vec![node]).unwrap();
    let session = c.session_id(node).expect("a session");
    let others_see = observer.subscribe_all(NodeId(9)).unwrap();

    c.heartbeat(node).unwrap();
    let heartbeat_at = Instant::now();
    std::thread::sleep(SESSION_TIMEOUT * 7 / 10);
    let outage = SESSION_TIMEOUT * 35 / 100;
    proxy.set_cut(true);
    let state = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(outage);
            proxy.set_cut(false);
        });
        c.log_state(LogId(1))
    });
    let gap = heartbeat_at.elapsed();
    assert_eq!(
        state.expect("the call waits through the outage"),
        Some(created)
    );
    assert!(
        gap > SESSION_TIMEOUT,
        "the scenario needs a call returning more than a session timeout after the last \
         heartbeat; it returned after {gap:?}"
    );
    eprintln!("{outage:?} outage: the call returned {gap:?} after the last heartbeat");
    c.heartbeat(node)
        .expect("a node that was in a call is not hung: its session goes on");
    assert_eq!(c.session_id(node), Some(session), "the same session serves");
    assert!(observer.live_nodes().unwrap().contains(&node));
    for event in others_see.try_iter() {
        if let CoordinatorEvent::NodesChanged { live } = event {
            assert!(
                live.is_empty() || live.contains(&node),
                "{node} left the live set during the outage: {live:?}"
            );
        }
    }
}

/// The same through a whole node: a proxied cluster whose leader's ISR
/// shrinks (a follower crashed) just as the leader loses ZooKeeper for
/// 0.35 of its session timeout. The leader's control loop waits in the ISR
/// compare-and-set through the outage; afterwards it has the same session,
/// it still leads in the same epoch, and the ISR change went through. (How
/// long the loop went without a heartbeat depends on where in its
/// heartbeat period the outage fell, so this end-to-end check is not what
/// pins the lease rule down: the test above is.)
#[test]
fn a_leader_in_an_isr_change_during_a_short_outage_keeps_its_session_and_leadership() {
    const SESSION_TIMEOUT: Duration = Duration::from_secs(4);
    const LOG: LogId = LogId(0);
    let server = server();
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(3)
        .session_timeout(SESSION_TIMEOUT)
        .call_timeout(Duration::from_secs(10))
        .replication(ReplicationConfig {
            min_insync_replicas: 1,
            // A crashed follower leaves the ISR quickly, so that the
            // leader's compare-and-set falls inside the outage.
            replica_lag_time_max: Duration::from_millis(200),
            ..crate::zookeeper_support::replication()
        })
        .proxied(true)
        .build()
        .expect("cluster");
    let replicas = cluster.create_log(LOG, 3).expect("create log");
    let leader = cluster.leader_log(LOG).expect("a leader");
    let leader_id = leader.node_id();
    assert!(
        cluster.wait_until(Duration::from_secs(20), |c| {
            c.in_sync_replicas(LOG).len() == 3
        }),
        "the followers never joined the ISR"
    );
    let epoch = cluster.leader_epoch_of(LOG);
    let session = cluster.session_id(leader_id).expect("the leader's session");
    let follower = *replicas
        .iter()
        .find(|&&node| node != leader_id)
        .expect("a follower");

    cluster.crash(follower);
    cluster
        .cut_from_zookeeper(leader_id, true)
        .expect("a proxied cluster");
    std::thread::sleep(SESSION_TIMEOUT * 35 / 100);
    cluster
        .cut_from_zookeeper(leader_id, false)
        .expect("a proxied cluster");

    assert!(
        cluster.wait_until(Duration::from_secs(20), |c| {
            !c.in_sync_replicas(LOG).contains(&follower)
        }),
        "the crashed follower never left the ISR"
    );
    assert_eq!(
        cluster.session_id(leader_id),
        Some(session),
        "the leader's own coordinator ended its session over a short outage"
    );
    assert_eq!(
        cluster.leader_of(LOG),
        Some(leader_id),
        "a failover happened"
    );
    assert_eq!(cluster.leader_epoch_of(LOG), epoch, "a failover happened");
    let appended = cluster
        .leader_log(LOG)
        .expect("the leader leads")
        .append_values(&[b"after the outage"], Acks::All);
    assert!(appended.is_ok(), "{appended:?}");
    assert_eq!(
        cluster.session_id(leader_id),
        Some(session),
        "the leader's session ended after the outage"
    );
}
