//! A node opened without threads ([`SteppedNode`], issue 28): the test
//! drives its control pass, deadline pass and completion pass by hand on a
//! manual clock, as the simulator will, and appends through the
//! non-blocking paths only.

use std::time::Duration;

use crate::node::{FetchPoll, SteppedNode};
use crate::record::RecordBatchBuilder;
use crate::replication::FetchArrival;
use crate::storage::disk::SimDisk;
use crate::sync::{Arc, Mutex};
use crate::transport::{FetchLog, FetchRequest, Response};
use crate::types::Incarnation;
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

/// A leader's fetch answer as a step: a follower's fetch at the leader's
/// log end parks at once instead of holding the caller in the long poll,
/// is held from then on, is answered empty once its wait is over, and with
/// the record once one arrived.
#[test]
fn a_fetch_at_the_log_end_parks_without_waiting_and_is_answered_when_data_arrives() {
    let disk = SimDisk::new(29);
    let network = MemoryNetwork::new(29);
    let clock = ManualClock::default();
    let coordinator = MemoryCoordinator::new(Arc::new(clock.clone()));
    let log = LogId(1);
    let mut node = open(&disk, &network, &coordinator, &clock);
    node.node()
        .create_log(log, vec![NodeId(0), NodeId(1)])
        .unwrap();
    step_until(&mut node, &clock, |node| leads(node, log));
    let handle = node.node().log(log).unwrap();
    let request = FetchRequest {
        replica: NodeId(1),
        incarnation: Incarnation(0),
        wait_max: Duration::from_millis(500),
        bytes_max: 1 << 20,
        logs: vec![FetchLog {
            log,
            current_leader_epoch: handle.leader_epoch(),
            fetch_offset: Offset(0),
            last_fetched_epoch: None,
            log_start_offset: Offset(0),
            bytes_max: 1 << 16,
            applied_offset: None,
        }],
    };
    let first = FetchArrival::New(clock.now());
    let FetchPoll::Park { arrival, .. } = node.poll_fetch(NodeId(1), &request, first, false) else {
        panic!("a fetch at the log end parks");
    };
    assert_eq!(arrival, FetchArrival::Held(first.arrived_at()));
    let records = |poll: FetchPoll| match poll {
        FetchPoll::Answer(Response::Fetch(response)) => response.logs[0].records.len(),
        other => panic!("expected a fetch answer, got {other:?}"),
    };
    assert_eq!(
        records(node.poll_fetch(NodeId(1), &request, arrival, true)),
        0
    );
    let appended = handle.append_pipelined(&batch(b"x"), Acks::Leader).unwrap();
    assert!(appended.is_done());
    assert!(records(node.poll_fetch(NodeId(1), &request, arrival, false)) > 0);
    drop(handle);
    node.into_node().shutdown().unwrap();
}
