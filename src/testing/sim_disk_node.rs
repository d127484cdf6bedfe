//! A node whose data directory lives on a [`SimDisk`](crate::testing::SimDisk)
//! (issue 28): the node's own files (identity, lock, clean-shutdown marker)
//! and its logs all go through the storage `Disk`, so a power loss of the
//! simulated machine is a power loss of the node.

use std::path::Path;
use std::time::Duration;

use crate::storage::disk::{Disk, SimDisk};
use crate::sync::Arc;
use crate::{
    Acks, Coordinator, FlushPolicy, LogId, MemoryCoordinator, MemoryNetwork, Node, NodeConfig,
    NodeId, Offset, PreviousShutdown, SystemClock,
};

const DATA_DIR: &str = "/sim/node-0";
const WAIT: Duration = Duration::from_secs(10);

fn start(disk: &SimDisk, network: &MemoryNetwork, coordinator: &MemoryCoordinator) -> Node {
    let mut config = NodeConfig::new(NodeId(0), DATA_DIR);
    config.replication.min_insync_replicas = 1;
    config.log.flush_policy = FlushPolicy::Always;
    let node = Node::start_on_disk(
        disk.shared(),
        config,
        Arc::new(network.transport(NodeId(0))),
        Arc::new(coordinator.clone()),
        Arc::new(SystemClock),
    )
    .unwrap();
    network.register(NodeId(0), node.handler());
    node
}

/// Also the regression of the node's half of `create_dir_durably`: the
/// data directory's parent was never fsynced, so after a clean shutdown
/// and a power loss the directory was gone and the node came back as one
/// that lost its data (`LostData`), not `Clean`.
#[test]
fn a_node_on_a_simulated_disk_keeps_its_records_and_identity_through_a_power_loss() {
    let disk = SimDisk::new(11);
    let network = MemoryNetwork::new(0);
    let coordinator = MemoryCoordinator::new(Arc::new(SystemClock));
    let log = LogId(1);
    coordinator.create_log(log, vec![NodeId(0)]).unwrap();

    let node = start(&disk, &network, &coordinator);
    assert_eq!(node.previous_shutdown(), PreviousShutdown::Fresh);
    let replica = node.wait_for_log(log, WAIT).unwrap();
    replica.wait_until_leader(WAIT).unwrap();
    replica
        .append_values(&[b"hello", b"world"], Acks::All)
        .unwrap();
    drop(replica);
    node.shutdown().unwrap();
    // Nothing reached the real file system.
    assert!(!Path::new(DATA_DIR).exists());
    assert!(disk.exists(&Path::new(DATA_DIR).join("identity.properties")));

    disk.lose_power();
    let node = start(&disk, &network, &coordinator);
    // The marker, the identity and the data directory itself were durable.
    assert_eq!(node.previous_shutdown(), PreviousShutdown::Clean);
    let replica = node.wait_for_log(log, WAIT).unwrap();
    replica.wait_until_leader(WAIT).unwrap();
    let batches = replica.read_blocking(Offset(0), 1 << 20, WAIT).unwrap();
    let values: Vec<Vec<u8>> = batches
        .iter()
        .flat_map(|b| b.records())
        .map(|r| r.unwrap().value.to_vec())
        .collect();
    assert_eq!(values, [b"hello".to_vec(), b"world".to_vec()]);
    drop(replica);
    node.shutdown().unwrap();
}
