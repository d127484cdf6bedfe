//! Issue 24 review, finding 5: opening the coordinator moved an earlier
//! version's persistent `/controller` record and failed on one it could
//! not read, so a single persistent `/controller` that is not such a
//! record (an operator's `create /controller ""`) stopped every node from
//! opening. Opening now logs it and carries on; every election tries the
//! move again and fails with an error naming `/controller` and what to do,
//! until an operator deletes it.

use std::time::Duration;

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::ZkShell;
use isrlog::{Coordinator, Error, NodeId, ZkCoordinator, ZkCoordinatorConfig};

#[test]
fn an_unreadable_persistent_controller_znode_stops_no_node_from_opening() {
    let server = server();
    let chroot = "/unreadable-controller";
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = chroot.to_owned();
    drop(ZkCoordinator::connect(config.clone()).expect("connect"));
    let raw = ZkShell::connect(&server.connect_string(), chroot).expect("shell");
    raw.create("/controller", b"").unwrap();

    let c = ZkCoordinator::connect(config).expect("a node still opens");
    let node = NodeId(1);
    c.register_node(node, Duration::from_secs(20)).unwrap();
    assert_eq!(c.controller().unwrap(), None);
    match c.try_become_controller(node) {
        Err(Error::CoordinatorDocument { path, reason }) => {
            assert_eq!(path, "/controller", "{reason}");
            assert!(reason.contains("deleteall /controller"), "{reason}");
        }
        other => panic!("an unreadable /controller: expected an error naming it, got {other:?}"),
    }

    raw.delete_all("/controller").unwrap();
    let epoch = c.try_become_controller(node).unwrap().expect("seat free");
    assert_eq!(c.controller().unwrap(), Some((node, epoch)));
}
