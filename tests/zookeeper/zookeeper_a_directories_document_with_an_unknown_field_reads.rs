//! Issue 24, item 2 (review): a node's directories document
//! (`/directories/<node>`) was decoded with `deny_unknown_fields`, so one
//! field written by a newer isrlog during a rolling upgrade made the node's
//! own placements unreadable, and the node could not start. Now it is read
//! forward-compatibly, as the log documents are, and writing over it is
//! refused (naming the znode and the field) rather than dropping the
//! field.

use std::time::Duration;

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::ZkShell;
use isrlog::{Coordinator, DirectoryId, Error, LogId, NodeId, ZkCoordinator, ZkCoordinatorConfig};

#[test]
fn a_directories_document_with_an_unknown_field_reads_and_is_not_overwritten() {
    let server = server();
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = "/directories-unknown-field".to_owned();
    let c = ZkCoordinator::connect(config.clone()).expect("connect");
    let raw = ZkShell::connect(&server.connect_string(), &config.chroot).expect("shell");
    let node = NodeId(1);
    c.register_node(node, Duration::from_secs(20)).unwrap();
    let newer = br#"{"format":1,"replicas":{"3":"0000000000000000000000000000000a"},"tier":"ssd"}"#;
    raw.create("/directories/1", newer).unwrap();

    assert_eq!(
        c.replica_directories(node).expect("a newer field reads"),
        vec![(LogId(3), DirectoryId(10))]
    );
    match c.record_replica_directories(node, DirectoryId(11), &[LogId(4)]) {
        Err(Error::CoordinatorDocument { path, reason }) => assert!(
            path == "/directories/1" && reason.contains("tier"),
            "{path}: {reason}"
        ),
        other => panic!("writing over an unknown field must be refused: {other:?}"),
    }
    assert_eq!(
        raw.get("/directories/1").unwrap().0,
        newer.to_vec(),
        "the document was changed"
    );
}
