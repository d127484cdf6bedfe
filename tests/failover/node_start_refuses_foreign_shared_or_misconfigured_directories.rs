//! `Node::start` checks before it starts (issue 23, items 1-3; SPEC 2.8):
//! a data directory of another node or another cluster is refused with an
//! error naming both ids, and nothing is written to it; a second node on a
//! directory in use fails at once naming the directory; and a start whose
//! controller settings are invalid fails before any thread starts (it used
//! to start the control thread first and leave it heartbeating for ever).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use isrlog::{
    ControllerConfig, Coordinator, Error, MemoryCoordinator, MemoryNetwork, Node, NodeConfig,
    NodeId, SystemClock,
};

fn start(
    network: &MemoryNetwork,
    coordinator: &MemoryCoordinator,
    id: u32,
    dir: &Path,
) -> isrlog::Result<Node> {
    Node::start(
        NodeConfig::new(NodeId(id), dir),
        Arc::new(network.transport(NodeId(id))),
        Arc::new(coordinator.for_node(NodeId(id))),
        Arc::new(SystemClock),
    )
}

/// Every file under `dir` with its contents, to show nothing changed.
fn snapshot(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(snapshot(&path));
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn another_nodes_directory_is_refused_naming_both_ids_and_left_untouched() {
    let root = tempfile::tempdir().unwrap();
    let network = MemoryNetwork::new(0);
    let coordinator = MemoryCoordinator::new(Arc::new(SystemClock));
    let dir = root.path().join("node-1");
    start(&network, &coordinator, 1, &dir)
        .unwrap()
        .shutdown()
        .unwrap();
    let before = snapshot(&dir);

    let error = start(&network, &coordinator, 2, &dir).unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(
            error,
            Error::DirectoryIdentityMismatch {
                field: "node id",
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("node id 1") && text.contains("node id 2"),
        "{text}"
    );
    assert!(text.contains(&dir.display().to_string()), "{text}");
    assert_eq!(snapshot(&dir), before, "nothing written");
    assert!(!coordinator.live_nodes().unwrap().contains(&NodeId(2)));
}

#[test]
fn another_clusters_directory_is_refused_naming_both_ids_and_left_untouched() {
    let root = tempfile::tempdir().unwrap();
    let network = MemoryNetwork::new(0);
    let first = MemoryCoordinator::new(Arc::new(SystemClock));
    let second = MemoryCoordinator::new(Arc::new(SystemClock));
    let dir = root.path().join("node-1");
    start(&network, &first, 1, &dir)
        .unwrap()
        .shutdown()
        .unwrap();
    let before = snapshot(&dir);

    let error = start(&network, &second, 1, &dir).unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(
            error,
            Error::DirectoryIdentityMismatch {
                field: "cluster id",
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains(&first.cluster_id().unwrap().to_string()),
        "{text}"
    );
    assert!(
        text.contains(&second.cluster_id().unwrap().to_string()),
        "{text}"
    );
    assert_eq!(snapshot(&dir), before, "nothing written");
    assert!(second.live_nodes().unwrap().is_empty());
}

#[test]
fn a_second_node_on_a_directory_in_use_fails_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let network = MemoryNetwork::new(0);
    let coordinator = MemoryCoordinator::new(Arc::new(SystemClock));
    let dir = root.path().join("node-1");
    let running = start(&network, &coordinator, 1, &dir).unwrap();

    // The same node id started twice (an overlapping restart).
    let error = start(&network, &coordinator, 1, &dir).unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, Error::DirectoryLocked { .. }), "{text}");
    assert!(text.contains(&dir.display().to_string()), "{text}");
    assert!(coordinator.live_nodes().unwrap().contains(&NodeId(1)));

    // Once the first stops, the directory is free again.
    running.shutdown().unwrap();
    start(&network, &coordinator, 1, &dir)
        .unwrap()
        .shutdown()
        .unwrap();
}

#[test]
fn a_start_with_an_invalid_controller_config_fails_and_leaves_nothing_running() {
    let root = tempfile::tempdir().unwrap();
    let network = MemoryNetwork::new(0);
    let coordinator = MemoryCoordinator::new(Arc::new(SystemClock));
    let dir = root.path().join("node-7");
    let mut config = NodeConfig::new(NodeId(7), &dir);
    config.controller = Some(ControllerConfig {
        poll_interval: Duration::ZERO,
        ..ControllerConfig::default()
    });
    let error = Node::start(
        config,
        Arc::new(network.transport(NodeId(7))),
        Arc::new(coordinator.for_node(NodeId(7))),
        Arc::new(SystemClock),
    )
    .unwrap_err();
    assert!(
        matches!(
            error,
            Error::InvalidConfig {
                field: "poll_interval",
                ..
            }
        ),
        "{error}"
    );
    // Nothing registers, heartbeats, subscribes or takes the controller
    // seat, now or later.
    for _ in 0..3 {
        assert!(coordinator.live_nodes().unwrap().is_empty());
        assert_eq!(coordinator.subscriber_count(), 0);
        assert_eq!(coordinator.controller().unwrap(), None);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!dir.exists(), "nothing written");
}
