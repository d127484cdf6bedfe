//! Issue 24 review, finding 6: an earlier version created `/cluster_id`
//! before the counters, in separate steps; a store it left half-created
//! (a cluster id, no counters) was never completed, since the counters
//! are created only with the cluster id: no controller and no producer id,
//! ever. A store that provably handed nothing out (no log ever created, no
//! counter or controller znode ever there) now gets both counters, the
//! controller epoch above every zxid so far rather than 0. A store whose
//! counters were deleted keeps refusing to restart them.

use std::time::Duration;

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::ZkShell;
use isrlog::{Coordinator, NodeId, ZkCoordinator, ZkCoordinatorConfig};

const CLUSTER_ID: &[u8] = br#"{"format":1,"cluster_id":"000000000000000000000000000000ab"}"#;

/// A chroot as the earlier version left it after creating `/cluster_id`.
fn half_created(connect: &str, chroot: &str) -> ZkShell {
    let root = ZkShell::connect(connect, "/").expect("shell");
    root.create(chroot, b"").unwrap();
    let raw = ZkShell::connect(connect, chroot).expect("shell");
    for path in ["/nodes", "/logs"] {
        raw.create(path, b"").unwrap();
    }
    raw.create("/cluster_id", CLUSTER_ID).unwrap();
    raw
}

fn config(connect: String, chroot: &str) -> ZkCoordinatorConfig {
    let mut config = ZkCoordinatorConfig::new(connect);
    config.chroot = chroot.to_owned();
    config
}

#[test]
fn a_store_left_half_created_gets_its_counters() {
    let server = server();
    let chroot = "/half-created";
    let raw = half_created(&server.connect_string(), chroot);

    let c = ZkCoordinator::connect(config(server.connect_string(), chroot)).expect("opens");
    let (data, _) = raw
        .get("/controller_epoch")
        .expect("the epoch record is created");
    let record: serde_json::Value = serde_json::from_slice(&data).unwrap();
    let start = record["epoch"].as_u64().expect("an epoch");
    assert!(
        start > 0,
        "the epoch starts at the zxid floor, not 0: {record}"
    );
    assert!(
        raw.exists("/producer_ids").unwrap(),
        "the counter is created"
    );

    let node = NodeId(1);
    c.register_node(node, Duration::from_secs(20)).unwrap();
    let epoch = c.try_become_controller(node).unwrap().expect("seat free");
    assert!(epoch.0 > start, "{epoch} after {start}");
    c.allocate_producer_id()
        .expect("producer ids are handed out");
    assert_eq!(
        c.cluster_id().unwrap().to_string(),
        "000000000000000000000000000000ab"
    );
}

#[test]
fn a_store_that_may_have_handed_ids_out_is_not_completed() {
    let server = server();
    // A log was created (and deleted) under /logs: its producers may hold
    // ids.
    let with_a_log = "/half-created-with-a-log";
    let raw = half_created(&server.connect_string(), with_a_log);
    raw.create("/logs/1", b"").unwrap();
    raw.delete_all("/logs/1").unwrap();
    drop(ZkCoordinator::connect(config(server.connect_string(), with_a_log)).expect("opens"));
    assert!(!raw.exists("/controller_epoch").unwrap());
    assert!(!raw.exists("/producer_ids").unwrap());

    // The counters existed and were deleted, with no log ever created.
    let deleted = "/half-created-counters-deleted";
    let raw = half_created(&server.connect_string(), deleted);
    raw.create("/producer_ids", br#"{"format":1,"next_block_start":40}"#)
        .unwrap();
    raw.delete_all("/producer_ids").unwrap();
    drop(ZkCoordinator::connect(config(server.connect_string(), deleted)).expect("opens"));
    assert!(!raw.exists("/controller_epoch").unwrap());
    assert!(
        !raw.exists("/producer_ids").unwrap(),
        "the counter restarted"
    );
}
