//! Issue 11: a node that stops heartbeating leaves the live set within its
//! session timeout even while znodes keep changing. (The watcher's tick,
//! which ends lapsed leases, once ran only after a quiet spell with no
//! notification, so a steady stream of changes kept a hung node live.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use isrlog::testing::zookeeper::ZkServer;
use isrlog::{Coordinator, LogId, NodeId, ZkCoordinator, ZkCoordinatorConfig};

const SESSION_TIMEOUT: Duration = Duration::from_secs(1);

#[test]
fn a_silent_node_leaves_the_live_set_while_znodes_keep_changing() {
    let server = ZkServer::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = "/lease-lapses".to_owned();
    config.call_timeout = Duration::from_secs(5);
    let c = ZkCoordinator::connect(config).unwrap_or_else(|e| panic!("cannot connect: {e}"));
    let (silent, busy) = (NodeId(1), NodeId(2));
    c.register_node(silent, SESSION_TIMEOUT).unwrap();
    c.register_node(busy, Duration::from_secs(20)).unwrap();
    assert_eq!(c.live_nodes().unwrap(), vec![silent, busy]);

    let done = AtomicBool::new(false);
    let left_after = std::thread::scope(|scope| {
        // A znode changes every 20 ms, far more often than any tick.
        scope.spawn(|| {
            let mut log = 1;
            while !done.load(Ordering::Relaxed) {
                c.create_log(LogId(log), vec![busy]).unwrap();
                log += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let started = Instant::now();
        // Generous on a loaded machine, but far below "never".
        let bound = SESSION_TIMEOUT + Duration::from_secs(4);
        let left_after = loop {
            c.heartbeat(busy).unwrap();
            if !c.live_nodes().unwrap().contains(&silent) {
                break Some(started.elapsed());
            }
            if started.elapsed() > bound {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        done.store(true, Ordering::Relaxed);
        left_after
    });
    let left_after = left_after.unwrap_or_else(|| {
        panic!("the silent node is still live well past its {SESSION_TIMEOUT:?} session timeout")
    });
    assert!(
        left_after >= SESSION_TIMEOUT / 2,
        "left too early: {left_after:?}"
    );
    assert_eq!(c.live_nodes().unwrap(), vec![busy]);
}

/// ZooKeeper clamps session timeouts to its [minSessionTimeout,
/// maxSessionTimeout]; a node must not run with a session timeout other than
/// the one it asked for.
#[test]
fn a_session_timeout_the_server_would_clamp_fails_registration() {
    let server = ZkServer::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = "/clamped".to_owned();
    let c = ZkCoordinator::connect(config).unwrap_or_else(|e| panic!("cannot connect: {e}"));
    // The test servers allow at most 60 s.
    match c.register_node(NodeId(1), Duration::from_secs(90)) {
        Err(error @ isrlog::Error::InvalidConfig { .. }) => {
            let text = error.to_string();
            assert!(text.contains("90s") && text.contains("60s"), "{text}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert_eq!(c.live_nodes().unwrap(), vec![]);
    c.register_node(NodeId(1), Duration::from_secs(20)).unwrap();
    assert_eq!(c.live_nodes().unwrap(), vec![NodeId(1)]);
}
