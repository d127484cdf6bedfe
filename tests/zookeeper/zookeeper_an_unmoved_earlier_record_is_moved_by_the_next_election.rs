//! Issue 24 review, finding 1: with `/controller_epoch` missing and an
//! earlier version's persistent `/controller` record still in place (its
//! move failed when the node opened, say, or lost a race), reading the
//! controller failed on the missing `/controller_epoch` before looking at
//! `/controller`, so no election ever tried the move again, and the error
//! sent the operator to create `/controller_epoch` by hand. Now the
//! controller view carries the old record's epoch, nobody sits, and the
//! next election moves the record and takes the seat above its epoch.

use std::time::Duration;

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::ZkShell;
use isrlog::{Coordinator, NodeId, ZkCoordinator, ZkCoordinatorConfig};

#[test]
fn an_unmoved_earlier_record_is_moved_by_the_next_election() {
    let server = server();
    let chroot = "/unmoved-record";
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = chroot.to_owned();
    let c = ZkCoordinator::connect(config).expect("connect");
    let raw = ZkShell::connect(&server.connect_string(), chroot).expect("shell");
    let node = NodeId(1);
    c.register_node(node, Duration::from_secs(20)).unwrap();

    // What a move that did not happen leaves, once this coordinator is
    // open: the earlier layout's record (epoch 7 at base 5, version 2) and
    // seat, and no /controller_epoch.
    raw.delete_all("/controller_epoch").unwrap();
    let record = |epoch: u64, controller: &str| {
        format!(r#"{{"format":1,"epoch":{epoch},"controller":{controller},"epoch_base":5}}"#)
    };
    raw.create("/controller", record(5, "null").as_bytes())
        .unwrap();
    raw.set("/controller", record(6, "1").as_bytes()).unwrap();
    raw.set("/controller", record(7, "2").as_bytes()).unwrap();
    raw.create("/controller/seat", b"").unwrap();

    // Nobody sits; not an error telling the operator to restore
    // /controller_epoch by hand.
    assert_eq!(c.controller().unwrap(), None);
    let epoch = c
        .try_become_controller(node)
        .unwrap_or_else(|e| panic!("the election did not move the earlier record: {e}"))
        .expect("seat free");
    assert!(epoch.0 > 7, "epoch {epoch} after the earlier record's 7");
    assert!(raw.exists("/controller_epoch").unwrap(), "epoch not moved");
    assert_eq!(c.controller().unwrap(), Some((node, epoch)));
}
