//! Issue 24, item 3 (review): the controller epoch moved from the data of a
//! persistent `/controller` (whose child `/controller/seat` was the seat)
//! to `/controller_epoch` (Kafka's layout), so that deleting `/controller`
//! only forces a re-election and the epoch record is never recreated. A
//! store written by the earlier layout still opens: its epoch is moved
//! once, in one transaction conditional on the old record's version, the
//! old seat goes with it, and the next controller's epoch is above the
//! old one. Its producer id counter is kept as it is.

use std::time::Duration;

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::ZkShell;
use isrlog::{Coordinator, NodeId, ZkCoordinator, ZkCoordinatorConfig};

#[test]
fn an_earlier_layouts_controller_epoch_moves_once_and_keeps_growing() {
    let server = server();
    let chroot = "/earlier-layout";
    let root = ZkShell::connect(&server.connect_string(), "/").expect("shell");
    root.create(chroot, b"").unwrap();
    let raw = ZkShell::connect(&server.connect_string(), chroot).expect("shell");
    for path in ["/nodes", "/logs", "/directories"] {
        raw.create(path, b"").unwrap();
    }
    raw.create(
        "/cluster_id",
        br#"{"format":1,"cluster_id":"000000000000000000000000000000ab"}"#,
    )
    .unwrap();
    raw.create("/producer_ids", br#"{"format":1,"next_block_start":40}"#)
        .unwrap();
    raw.create(
        "/producer_ids_high_mark",
        br#"{"format":1,"next_block_start":40}"#,
    )
    .unwrap();
    // Epoch 7 won by node 2, on a record recreated at base 5 and elected
    // twice since (version 2).
    raw.create(
        "/controller",
        br#"{"format":1,"epoch":5,"controller":null,"epoch_base":5}"#,
    )
    .unwrap();
    raw.set(
        "/controller",
        br#"{"format":1,"epoch":6,"controller":1,"epoch_base":5}"#,
    )
    .unwrap();
    raw.set(
        "/controller",
        br#"{"format":1,"epoch":7,"controller":2,"epoch_base":5}"#,
    )
    .unwrap();
    raw.create("/controller/seat", b"").unwrap();

    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = chroot.to_owned();
    let c = ZkCoordinator::connect(config.clone()).expect("an earlier store opens");
    assert!(raw.exists("/controller_epoch").unwrap(), "epoch not moved");
    assert!(!raw.exists("/controller").unwrap(), "old record left");
    assert_eq!(c.controller().unwrap(), None, "the old seat went");

    let node = NodeId(1);
    c.register_node(node, Duration::from_secs(20)).unwrap();
    let epoch = c.try_become_controller(node).unwrap().expect("seat free");
    assert!(epoch.0 > 7, "epoch {epoch} after the earlier store's 7");
    // Opening again moves nothing twice, and epochs keep growing.
    drop(ZkCoordinator::connect(config).expect("reopen"));
    c.resign_controller(node).unwrap();
    let again = c.try_become_controller(node).unwrap().expect("seat free");
    assert!(again > epoch, "{again} after {epoch}");
    let id = c.allocate_producer_id().unwrap().0;
    assert!(id >= 40, "producer id {id} below the earlier counter's 40");
}
