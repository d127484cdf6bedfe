//! Issue 24 (review): the live nodes were read in one multi-read with the
//! controller's znodes, and a missing one failed the whole read, so no
//! `NodesChanged` was sent until someone recreated it. Membership does not
//! depend on the seat or the epoch record: with both gone, a node that
//! registers is still announced.

use std::time::{Duration, Instant};

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::ZkShell;
use isrlog::{Coordinator, CoordinatorEvent, NodeId, ZkCoordinator, ZkCoordinatorConfig};

#[test]
fn membership_is_announced_without_the_controller_znodes() {
    let server = server();
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = "/membership-without-controller".to_owned();
    let c = ZkCoordinator::connect(config.clone()).expect("connect");
    let raw = ZkShell::connect(&server.connect_string(), &config.chroot).expect("shell");
    let (a, b) = (NodeId(1), NodeId(2));
    c.register_node(a, Duration::from_secs(20)).unwrap();
    c.try_become_controller(a).unwrap().expect("seat free");
    let events = c.subscribe(a).unwrap();
    // Both layouts' controller znodes.
    raw.delete_all("/controller").unwrap();
    raw.delete_all("/controller_epoch").unwrap();

    // Another process registers `b`, so this coordinator learns of it only
    // from ZooKeeper's notification.
    let other = ZkCoordinator::connect(config).expect("connect");
    other.register_node(b, Duration::from_secs(20)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(CoordinatorEvent::NodesChanged { live }) if live.contains(&b) => break,
            Ok(_) => {}
            Err(_) => panic!("no NodesChanged announced {b} with the controller znodes gone"),
        }
    }
    assert_eq!(c.live_nodes().unwrap(), vec![a, b]);
}
