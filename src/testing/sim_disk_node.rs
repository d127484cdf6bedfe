//! A node whose data directory lives on a [`SimDisk`](crate::testing::SimDisk)
//! (issue 28): the node's own files (identity, lock, clean-shutdown marker)
//! and its logs all go through the storage `Disk`, so a power loss of the
//! simulated machine is a power loss of the node.

use std::path::Path;
use std::time::Duration;

use crate::storage::disk::{Disk, DiskOperation, EioPlan, SimDisk};
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

/// helper-152's review: a batch that goes straight to the log (32 KiB and
/// over, or idempotent) and whose fsync fails after its write may be in
/// the log, and may yet be replicated and committed. `append_pipelined`
/// used to return that failure from the call, whose errors mean "nothing
/// was appended" (a caller would re-send it, and a plain batch would be in
/// the log twice); it is now the handle's outcome, and the handle names
/// the epoch the batch was placed in. The blocking `append` of the next
/// batch is refused at once: the log is poisoned.
#[test]
fn a_direct_append_whose_fsync_failed_after_its_write_is_an_unknown_outcome() {
    a_direct_append_that_failed_is_an_unknown_outcome(DiskOperation::Sync);
}

/// helper-157's review: a write that fails may still have put the whole
/// batch on disk (the next open's recovery keeps it), so it is an unknown
/// outcome too, not a refusal.
#[test]
fn a_direct_append_whose_write_failed_is_an_unknown_outcome() {
    a_direct_append_that_failed_is_an_unknown_outcome(DiskOperation::Write);
}

/// A lone leader on a simulated disk, one record appended, whose next
/// direct append (40 KiB, `acks`) meets an `EIO` on its first `failing`
/// operation: that call's answer, with the disk, the node and its log.
fn direct_append_meeting_eio(
    failing: DiskOperation,
    acks: Acks,
) -> (
    crate::error::Result<crate::AppendHandle>,
    SimDisk,
    Node,
    crate::ReplicatedLog,
) {
    let disk = SimDisk::new(12);
    let network = MemoryNetwork::new(0);
    let coordinator = MemoryCoordinator::new(Arc::new(SystemClock));
    let log = LogId(1);
    coordinator.create_log(log, vec![NodeId(0)]).unwrap();
    let node = start(&disk, &network, &coordinator);
    let replica = node.wait_for_log(log, WAIT).unwrap();
    replica.wait_until_leader(WAIT).unwrap();
    replica.append_values(&[b"before"], Acks::All).unwrap();

    let mut builder = crate::RecordBatchBuilder::new(1);
    builder.push(&[7u8; 40 * 1024]);
    let large = builder.build().unwrap();
    disk.fail_with_eio(EioPlan::Nth(1), &[failing]);
    let answer = replica.append_pipelined(&large, acks);
    disk.fail_with_eio(EioPlan::Never, &[]);
    (answer, disk, node, replica)
}

fn a_direct_append_that_failed_is_an_unknown_outcome(failing: DiskOperation) {
    use crate::Error;

    let (answer, _disk, node, replica) = direct_append_meeting_eio(failing, Acks::Leader);
    let handle = answer.expect("the batch may be in the log: the call reports no refusal");
    assert!(handle.leader_epoch().is_some());
    let outcome = handle.wait();
    assert!(
        matches!(outcome, Err(Error::Io { .. } | Error::Poisoned { .. })),
        "the failed {failing:?} is the handle's outcome: {outcome:?}"
    );
    let refused = replica.append_values(&[b"after"], Acks::Leader);
    assert!(
        matches!(refused, Err(Error::Poisoned { .. })),
        "a poisoned log refuses at once: {refused:?}"
    );
    drop(replica);
    node.halt();
}

/// SPEC 3.1: `acks=0` reports no error of the write itself. A direct
/// append whose fsync failed after its write answers with the offsets the
/// batch may be at (helper-157's review: it returned the error, which the
/// pipelined call passed on as "nothing was appended").
#[test]
fn an_acks_0_direct_append_whose_fsync_failed_answers_its_offsets() {
    let (answer, _disk, node, replica) = direct_append_meeting_eio(DiskOperation::Sync, Acks::None);
    let handle = answer.expect("acks=0 reports no error of the write");
    let outcome = handle.wait().expect("acks=0 reports no error of the write");
    assert_eq!(outcome.base_offset, Offset(1));
    drop(replica);
    node.halt();
}
