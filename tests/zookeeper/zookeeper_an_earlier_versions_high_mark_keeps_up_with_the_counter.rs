//! Issue 24 review, finding 7: an earlier version keeps a second copy of
//! the producer id counter, `/producer_ids_high_mark`, and recreates a
//! missing `/producer_ids` from it (and the mark from the counter when the
//! mark is missing). This version stopped writing the mark, so in a rolling
//! upgrade the mark fell behind, and an earlier-version node that found
//! the counter deleted recreated it below ids already handed out:
//! duplicate producer ids. While the mark exists, every reservation now
//! moves it with the counter in the same transaction. (Deleting it once
//! would not last: an earlier-version node recreates it at its next
//! open.) A store without one never gets one.

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::ZkShell;
use isrlog::{Coordinator, ZkCoordinator, ZkCoordinatorConfig};

fn next_block_start(raw: &ZkShell, path: &str) -> i64 {
    let (data, _) = raw.get(path).unwrap();
    let document: serde_json::Value = serde_json::from_slice(&data).unwrap();
    document["next_block_start"]
        .as_i64()
        .expect("next_block_start")
}

fn config(connect: String, chroot: &str) -> ZkCoordinatorConfig {
    let mut config = ZkCoordinatorConfig::new(connect);
    config.chroot = chroot.to_owned();
    config.producer_id_block_size = 2;
    config
}

#[test]
fn the_high_mark_keeps_up_so_a_counter_recreated_from_it_repeats_no_id() {
    let server = server();
    let chroot = "/high-mark";
    let root = ZkShell::connect(&server.connect_string(), "/").expect("shell");
    root.create(chroot, b"").unwrap();
    let raw = ZkShell::connect(&server.connect_string(), chroot).expect("shell");
    for path in ["/nodes", "/logs", "/directories"] {
        raw.create(path, b"").unwrap();
    }
    let counter = br#"{"format":1,"next_block_start":40}"#;
    raw.create("/producer_ids", counter).unwrap();
    raw.create("/producer_ids_high_mark", counter).unwrap();

    let c = ZkCoordinator::connect(config(server.connect_string(), chroot)).expect("opens");
    let ids: Vec<i64> = (0..5)
        .map(|_| c.allocate_producer_id().unwrap().0)
        .collect();
    assert_eq!(
        next_block_start(&raw, "/producer_ids_high_mark"),
        next_block_start(&raw, "/producer_ids"),
        "the high mark fell behind the counter"
    );

    // An earlier-version node finds the counter deleted and recreates it
    // from the high mark.
    let (mark, _) = raw.get("/producer_ids_high_mark").unwrap();
    raw.delete_all("/producer_ids").unwrap();
    raw.create("/producer_ids", &mark).unwrap();
    let other = ZkCoordinator::connect(config(server.connect_string(), chroot)).expect("opens");
    let id = other.allocate_producer_id().unwrap().0;
    assert!(
        ids.iter().all(|&given| given < id),
        "producer id {id} handed out again: {ids:?}"
    );
}

#[test]
fn a_store_without_a_high_mark_gets_none() {
    let server = server();
    let chroot = "/no-high-mark";
    let c = ZkCoordinator::connect(config(server.connect_string(), chroot)).expect("opens");
    for _ in 0..3 {
        c.allocate_producer_id().unwrap();
    }
    let raw = ZkShell::connect(&server.connect_string(), chroot).expect("shell");
    assert!(!raw.exists("/producer_ids_high_mark").unwrap());
}
