//! A node opened without threads ([`SteppedNode`], issue 28): the test
//! drives its control pass, deadline pass and completion pass by hand on a
//! manual clock, as the simulator will, and appends through the
//! non-blocking paths only.

use std::time::Duration;

use crate::node::SteppedNode;
use crate::record::RecordBatchBuilder;
use crate::storage::disk::SimDisk;
use crate::sync::{Arc, Mutex};
use crate::{
    Acks, Clock, Coordinator, FlushPolicy, Isolation, LogId, ManualClock, MemoryCoordinator,
    MemoryNetwork, Node, NodeConfig, NodeId, Offset, PreviousShutdown,
};

const DATA_DIR: &str = "/sim/stepped-0";
/// Simulated time a test may spend before giving up on a condition.
const PATIENCE: Duration = Duration::from_secs(30);

fn open(
    disk: &SimDisk,
    network: &MemoryNetwork,
    coordinator: &MemoryCoordinator,
    clock: &ManualClock,
) -> SteppedNode {
    let mut config = NodeConfig::new(NodeId(0), DATA_DIR);
    config.replication.min_insync_replicas = 1;
    config.log.flush_policy = FlushPolicy::Always;
    // A controlled shutdown hands logs over on threads; this node has no
    // one to hand them to.
    config.controlled_shutdown_timeout = Duration::ZERO;
    let node = Node::open_on_disk(
        disk.shared(),
        config,
        Arc::new(network.transport(NodeId(0))),
        Arc::new(coordinator.clone()),
        Arc::new(clock.clone()),
    )
    .unwrap();
    network.register(NodeId(0), node.node().handler());
    node
}

/// Advances the manual clock to each of the node's wake-ups and steps its
/// passes there, until `done` holds; panics after [`PATIENCE`].
fn step_until(node: &mut SteppedNode, clock: &ManualClock, done: impl Fn(&SteppedNode) -> bool) {
    let start = clock.elapsed();
    loop {
        node.step_control(clock.now());
        node.expire_deadlines();
        node.run_completions();
        if done(node) {
            return;
        }
        assert!(
            clock.elapsed() - start < PATIENCE,
            "not done after {PATIENCE:?} of simulated time"
        );
        let wake = node.next_wake();
        let now = clock.now();
        assert!(wake > now, "the control core wants no wake-up in the past");
        clock.advance(wake - now);
    }
}

fn leads(node: &SteppedNode, log: LogId) -> bool {
    node.node().log(log).is_ok_and(|log| log.is_leader())
}

fn batch(value: &[u8]) -> crate::RecordBatch {
    let mut builder = RecordBatchBuilder::new(0);
    builder.push(value);
    builder.build().unwrap()
}

fn values(node: &SteppedNode, log: LogId) -> Vec<Vec<u8>> {
    let log = node.node().log(log).unwrap();
    log.read(Offset(0), 1 << 20, Isolation::Committed)
        .unwrap()
        .iter()
        .flat_map(|b| b.records())
        .map(|r| r.unwrap().value.to_vec())
        .collect()
}

/// A one-node cluster without node threads: the control pass follows the
/// log's creation and the node leads; pipelined appends with `Acks::Leader`
/// and `Acks::All` are decided by the appending call itself (no fetch, no
/// deadline pass, no completion thread needed), their callbacks run, and
/// the records are committed, survive a clean shutdown and a power loss,
/// and are read back by a node opened the same way.
#[test]
fn a_node_without_threads_leads_and_commits_pipelined_appends_on_manual_time() {
    let disk = SimDisk::new(28);
    let network = MemoryNetwork::new(28);
    let clock = ManualClock::default();
    let coordinator = MemoryCoordinator::new(Arc::new(clock.clone()));
    let log = LogId(1);

    let mut node = open(&disk, &network, &coordinator, &clock);
    assert_eq!(node.node().previous_shutdown(), PreviousShutdown::Fresh);
    assert_eq!(node.node().fetcher_thread_count(), 0);
    node.node().create_log(log, vec![NodeId(0)]).unwrap();
    // The creation reaches the node only through its control pass.
    assert!(
        node.node().log(log).is_err(),
        "no thread followed the event"
    );
    step_until(&mut node, &clock, |node| leads(node, log));

    let handle = node.node().log(log).unwrap();
    let leader = handle
        .append_pipelined(&batch(b"one"), Acks::Leader)
        .unwrap();
    let all = handle.append_pipelined(&batch(b"two"), Acks::All).unwrap();
    assert!(
        leader.is_done() && all.is_done(),
        "a lone leader decides at once"
    );
    let ran = Arc::new(Mutex::new(Vec::new()));
    {
        let ran = Arc::clone(&ran);
        // Known already: the callback runs here, before this returns.
        all.on_complete(move |outcome| ran.lock().push(outcome.map(|o| o.base_offset).ok()));
    }
    assert_eq!(*ran.lock(), vec![Some(Offset(1))]);
    let leader = leader.wait().unwrap();
    assert_eq!(leader.base_offset, Offset(0));
    // Time passes: heartbeats keep the session, nothing times out.
    let later = clock.elapsed() + Duration::from_secs(10);
    step_until(&mut node, &clock, |_| clock.elapsed() >= later);
    assert!(leads(&node, log));
    assert_eq!(
        coordinator.live_nodes().unwrap(),
        [NodeId(0)],
        "the control pass heartbeats on manual time"
    );
    assert_eq!(values(&node, log), [b"one".to_vec(), b"two".to_vec()]);
    assert_eq!(node.node().fetcher_thread_count(), 0);
    drop(handle);
    node.into_node().shutdown().unwrap();

    disk.lose_power();
    let mut node = open(&disk, &network, &coordinator, &clock);
    assert_eq!(node.node().previous_shutdown(), PreviousShutdown::Clean);
    step_until(&mut node, &clock, |node| leads(node, log));
    assert_eq!(values(&node, log), [b"one".to_vec(), b"two".to_vec()]);
    // Dropped without a shutdown, a node without threads stops as a started
    // one does: its session ends at once.
    drop(node);
    assert!(coordinator.live_nodes().unwrap().is_empty());
}
