//! Issue 11: a `ZkCoordinator` whose connections to ZooKeeper are cut (at
//! a proxy) for less than its sessions' timeout keeps its sessions: calls
//! made meanwhile wait for the reconnection up to the call timeout, or fail
//! with a retriable error that says why; heartbeats go on; once back, the
//! same sessions serve and every subscriber is told to resync (a persistent
//! watch does not replay what changed meanwhile). Cut for longer than a
//! node's session timeout, the node learns that its session may be gone
//! (suspended, issue 24 item 4) about one timeout after the cut (ZooKeeper
//! expires it then; the client library alone would say so only 7/5 of a
//! timeout after it last heard from the server), its subscribers are told
//! it left, and the rest of the cluster sees it leave; once back, ZooKeeper
//! says the session expired and the node registers anew.

use std::time::{Duration, Instant};

use isrlog::testing::zookeeper::{ZkProxy, ZkServer};
use isrlog::{
    CasOutcome, Coordinator, CoordinatorEvent, Error, LogId, LogUpdate, NodeId, ZkCoordinator,
    ZkCoordinatorConfig,
};

const CALL_TIMEOUT: Duration = Duration::from_secs(2);

fn coordinator(connect: String, chroot: &str) -> ZkCoordinator {
    let mut config = ZkCoordinatorConfig::new(connect);
    config.chroot = chroot.to_owned();
    config.session_timeout = Duration::from_secs(20);
    config.call_timeout = CALL_TIMEOUT;
    ZkCoordinator::connect(config).unwrap_or_else(|e| panic!("cannot connect: {e}"))
}

#[test]
fn calls_wait_through_a_short_disconnection_and_sessions_survive_it() {
    let server = ZkServer::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
    let proxy = ZkProxy::start(&server.connect_string()).expect("proxy");
    let c = coordinator(proxy.connect_string(), "/connection-loss");
    let node = NodeId(1);
    c.register_node(node, Duration::from_secs(20)).unwrap();
    let created = c.create_log(LogId(1), vec![node]).unwrap();
    let session = c.session_id(node).expect("a session");
    let events = c.subscribe(node).unwrap();

    proxy.set_cut(true);
    // A call while cut off waits for the reconnection, then gives up.
    let started = Instant::now();
    match c.log_state(LogId(1)) {
        Err(error @ Error::Coordinator { .. }) => {
            assert!(error.is_retriable(), "{error}");
            let reason = error.to_string();
            assert!(
                reason.contains("/logs/1") && reason.contains("not connected to ZooKeeper"),
                "the error must say what could not be done and why: {reason}"
            );
        }
        other => panic!("expected a coordinator error while cut off, got {other:?}"),
    }
    let waited = started.elapsed();
    assert!(
        waited >= CALL_TIMEOUT - Duration::from_millis(100) && waited < CALL_TIMEOUT * 2,
        "the call should wait about the call timeout ({CALL_TIMEOUT:?}), waited {waited:?}"
    );
    // Connection loss is not session loss.
    c.heartbeat(node)
        .expect("heartbeats go on while reconnecting");

    // A call made while cut off succeeds if the connection comes back in
    // time.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            proxy.set_cut(false);
        });
        assert_eq!(c.log_state(LogId(1)).unwrap(), Some(created.clone()));
    });
    assert_eq!(c.session_id(node), Some(session), "the same session serves");
    assert_eq!(c.live_nodes().unwrap(), vec![node]);
    c.heartbeat(node).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match events.recv_deadline(deadline) {
            Ok(CoordinatorEvent::Resync) => break,
            Ok(_) => {}
            Err(error) => panic!("no Resync after the reconnection: {error}"),
        }
    }
    // Still watching after the reconnection: a change made elsewhere is
    // announced. (zookeeper-client 0.11 does not restore a persistent watch
    // when it reconnects a session; without the coordinator re-adding it,
    // this change would never be heard of.)
    let elsewhere = coordinator(server.connect_string(), "/connection-loss");
    let changed = match elsewhere
        .compare_and_set(
            LogId(1),
            created.leader_epoch,
            created.version,
            LogUpdate::in_sync_replicas(&created, vec![node], 1),
        )
        .unwrap()
    {
        CasOutcome::Applied(state) => state,
        stale => panic!("nobody else writes the log: {stale:?}"),
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match events.recv_deadline(deadline) {
            Ok(CoordinatorEvent::LogChanged(state)) if state == changed => break,
            Ok(_) => {}
            Err(error) => panic!("a change made after the reconnection was not announced: {error}"),
        }
    }
}

#[test]
fn a_node_cut_off_past_its_session_timeout_learns_it_promptly() {
    let server = ZkServer::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
    let proxy = ZkProxy::start(&server.connect_string()).expect("proxy");
    let cut_off = coordinator(proxy.connect_string(), "/session-loss");
    let observer = coordinator(server.connect_string(), "/session-loss");
    let (node, other) = (NodeId(1), NodeId(2));
    let session_timeout = Duration::from_secs(2);
    cut_off.register_node(node, session_timeout).unwrap();
    let events = cut_off.subscribe(node).unwrap();
    observer
        .register_node(other, Duration::from_secs(20))
        .unwrap();
    assert!(cut_off.try_become_controller(node).unwrap().is_some());
    assert_eq!(observer.live_nodes().unwrap(), vec![node, other]);
    let seen = Instant::now() + Duration::from_secs(5);
    loop {
        match events.recv_deadline(seen) {
            Ok(CoordinatorEvent::NodesChanged { live }) if live == vec![node, other] => break,
            Ok(_) => {}
            Err(error) => panic!("both nodes were never announced live: {error}"),
        }
    }

    proxy.set_cut(true);
    let cut_at = Instant::now();
    // The node keeps heartbeating, as a running process does; the first
    // failure says its session is gone.
    let learned = loop {
        if cut_off.heartbeat(node).is_err() {
            break cut_at.elapsed();
        }
        assert!(
            cut_at.elapsed() < session_timeout * 10,
            "the node never learned that its session expired"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!("session timeout {session_timeout:?}: the cut-off node learned it after {learned:?}");
    assert!(
        learned >= session_timeout,
        "learned after {learned:?}, before ZooKeeper could have expired the session \
         ({session_timeout:?} after the cut at the earliest)"
    );
    assert!(
        // Generous for a loaded machine (the heartbeats poll every 20 ms),
        // yet below the 7/5 of the timeout (2.8 s) after which the client
        // library would say so by itself.
        learned <= session_timeout + Duration::from_millis(500),
        "learned after {learned:?}, not promptly after the {session_timeout:?} timeout"
    );
    // Its subscribers are told it left, though ZooKeeper cannot be read.
    let told = Instant::now() + Duration::from_secs(5);
    loop {
        match events.recv_deadline(told) {
            Ok(CoordinatorEvent::NodesChanged { live }) if !live.contains(&node) => break,
            Ok(_) => {}
            Err(error) => panic!("the node's subscriber was not told it left: {error}"),
        }
    }
    let gone = Instant::now() + Duration::from_secs(5);
    while observer.live_nodes().unwrap() != vec![other] {
        assert!(Instant::now() < gone, "the others never saw the node leave");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        observer.controller().unwrap(),
        None,
        "the expired session's controller seat is gone"
    );
    // Back in touch, the node registers again with a new session.
    proxy.set_cut(false);
    let back = Instant::now();
    cut_off
        .register_node(node, session_timeout)
        .expect("register again");
    eprintln!(
        "registered again with a new session {:?} after the cut ended",
        back.elapsed()
    );
    assert_eq!(observer.live_nodes().unwrap(), vec![node, other]);
}
