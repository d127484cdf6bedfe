//! Issue 24, item 2 (review): `/controller_epoch` and `/producer_ids` are
//! one per cluster. Refusing to write over a field a newer isrlog added to
//! them (as log documents refuse) would stop every election, or every
//! producer id allocation, of the whole cluster until the rolling upgrade
//! finished. They are written back with the unknown fields unchanged.

use std::time::Duration;

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::ZkShell;
use isrlog::{Coordinator, NodeId, ZkCoordinator, ZkCoordinatorConfig};

#[test]
fn singleton_documents_keep_unknown_fields_through_elections_and_allocations() {
    let server = server();
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = "/singleton-unknown-fields".to_owned();
    config.producer_id_block_size = 2;
    let c = ZkCoordinator::connect(config.clone()).expect("connect");
    let raw = ZkShell::connect(&server.connect_string(), &config.chroot).expect("shell");
    let node = NodeId(1);
    c.register_node(node, Duration::from_secs(20)).unwrap();

    // A newer version's field, written as its election would (epoch and
    // version move together).
    raw.set(
        "/controller_epoch",
        br#"{"format":1,"epoch":1,"controller":null,"term":{"a":[9]}}"#,
    )
    .unwrap();
    raw.set(
        "/producer_ids",
        br#"{"format":1,"next_block_start":10,"owner":"x"}"#,
    )
    .unwrap();

    let epoch = c
        .try_become_controller(node)
        .expect("an unknown field does not stop elections")
        .expect("seat free");
    assert_eq!(epoch.0, 2);
    let id = c
        .allocate_producer_id()
        .expect("an unknown field does not stop allocations");
    assert_eq!(id.0, 10);

    let text = |path| String::from_utf8(raw.get(path).unwrap().0).unwrap();
    let record = text("/controller_epoch");
    assert!(
        record.contains(r#""epoch":2"#) && record.contains(r#""term":{"a":[9]}"#),
        "{record}"
    );
    let counter = text("/producer_ids");
    assert!(
        counter.contains(r#""next_block_start":12"#) && counter.contains(r#""owner":"x""#),
        "{counter}"
    );
}
