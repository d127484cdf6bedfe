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
    // `Node::shutdown` with a timeout hands logs over on threads; these
    // nodes stop that way with no one to hand them to.
    open_with_shutdown_timeout(disk, network, coordinator, clock, Duration::ZERO)
}

fn open_with_shutdown_timeout(
    disk: &SimDisk,
    network: &MemoryNetwork,
    coordinator: &MemoryCoordinator,
    clock: &ManualClock,
    controlled_shutdown_timeout: Duration,
) -> SteppedNode {
    let mut config = NodeConfig::new(NodeId(0), DATA_DIR);
    config.replication.min_insync_replicas = 1;
    config.log.flush_policy = FlushPolicy::Always;
    config.controlled_shutdown_timeout = controlled_shutdown_timeout;
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
            line_epoch: Some(handle.leader_epoch()),
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

/// A fetch from `follower` at `offset`, answered at once (its wait over),
/// as the leader's handler takes it.
fn fetch_at(node: &SteppedNode, clock: &ManualClock, log: LogId, follower: NodeId, offset: Offset) {
    let handle = node.node().log(log).unwrap();
    let request = FetchRequest {
        replica: follower,
        incarnation: Incarnation(0),
        wait_max: Duration::from_millis(100),
        bytes_max: 1 << 20,
        logs: vec![FetchLog {
            log,
            current_leader_epoch: handle.leader_epoch(),
            fetch_offset: offset,
            last_fetched_epoch: (offset > Offset::ZERO).then(|| handle.leader_epoch()),
            line_epoch: Some(handle.leader_epoch()),
            log_start_offset: Offset(0),
            bytes_max: 1 << 16,
            applied_offset: None,
        }],
    };
    let answer = node.poll_fetch(follower, &request, FetchArrival::New(clock.now()), true);
    assert!(
        matches!(answer, FetchPoll::Answer(Response::Fetch(_))),
        "{answer:?}"
    );
}

/// Issue 28: a reassignment's hand-over is a step that never waits. The
/// leader (node 0) is removed; its target replica node 1 has fetched
/// everything while node 2, also in the ISR, has not, so the high
/// watermark is below the log end when appends stop. The threaded node
/// waits for it there (briefly, on real time); a node without threads
/// returned from the control step (inside a simulation, where a wait
/// panics) and names node 1 on a later step, once node 2's fetch moved the
/// high watermark. The hand-over's timers run on the node's clock: two
/// simulated seconds with the high watermark stuck give the appends back.
#[test]
fn a_reassignment_hand_over_steps_without_waiting_for_the_high_watermark() {
    let disk = SimDisk::new(30);
    let network = MemoryNetwork::new(30);
    let clock = ManualClock::default();
    let coordinator = MemoryCoordinator::new(Arc::new(clock.clone()));
    let log = LogId(1);
    let mut node = open(&disk, &network, &coordinator, &clock);
    for peer in [NodeId(1), NodeId(2)] {
        coordinator
            .register_node(peer, Duration::from_secs(600))
            .unwrap();
    }
    node.node()
        .create_log(log, vec![NodeId(0), NodeId(1), NodeId(2)])
        .unwrap();
    step_until(&mut node, &clock, |node| leads(node, log));
    let handle = node.node().log(log).unwrap();
    assert!(handle
        .append_pipelined(&batch(b"x"), Acks::Leader)
        .unwrap()
        .is_done());
    // Node 1 holds the record; node 2 fetches, but from the start.
    fetch_at(&node, &clock, log, NodeId(1), Offset(0));
    fetch_at(&node, &clock, log, NodeId(1), Offset(1));
    fetch_at(&node, &clock, log, NodeId(2), Offset(0));
    assert_eq!(handle.high_watermark(), Offset(0));

    let _simulation = crate::simulation::SimulationGuard::enter(30);
    crate::coordinator::reassign_log(&coordinator, log, &[NodeId(1), NodeId(2)], 1).unwrap();
    node.step_control(clock.now());
    let refused = handle.append_pipelined(&batch(b"y"), Acks::Leader);
    assert!(
        matches!(refused, Err(crate::Error::NotLeader { .. })),
        "appends stop for the hand-over: {refused:?}"
    );
    assert_eq!(
        coordinator.log_state(log).unwrap().unwrap().leader,
        Some(NodeId(0)),
        "nobody is named while the high watermark is below the stopped end"
    );
    // Stuck past the hand-over's wait on the node's clock: appends resume.
    clock.advance(Duration::from_millis(2100));
    fetch_at(&node, &clock, log, NodeId(1), Offset(1));
    fetch_at(&node, &clock, log, NodeId(2), Offset(0));
    node.step_control(clock.now());
    assert!(handle
        .append_pipelined(&batch(b"y"), Acks::Leader)
        .unwrap()
        .is_done());
    // After the retry pause, with both followers caught up, node 1 leads.
    clock.advance(Duration::from_millis(1100));
    for follower in [NodeId(1), NodeId(2)] {
        fetch_at(&node, &clock, log, follower, Offset(2));
    }
    assert_eq!(handle.high_watermark(), Offset(2));
    node.step_control(clock.now());
    node.step_control(clock.now());
    let state = coordinator.log_state(log).unwrap().unwrap();
    assert_eq!(state.leader, Some(NodeId(1)), "{state:?}");
    drop(handle);
    node.into_node().halt();
}

/// Node 0, stepped, leading log 1 of nodes 0 and 1 (node 1 registered by
/// hand, never running), with the given controlled-shutdown timeout.
struct Leading {
    disk: SimDisk,
    network: MemoryNetwork,
    clock: ManualClock,
    coordinator: MemoryCoordinator,
    node: SteppedNode,
    log: LogId,
    handle: crate::ReplicatedLog,
}

fn leading_two_replicas(seed: u64, shutdown_timeout: Duration) -> Leading {
    let disk = SimDisk::new(seed);
    let network = MemoryNetwork::new(seed);
    let clock = ManualClock::default();
    let coordinator = MemoryCoordinator::new(Arc::new(clock.clone()));
    let log = LogId(1);
    let mut node =
        open_with_shutdown_timeout(&disk, &network, &coordinator, &clock, shutdown_timeout);
    coordinator
        .register_node(NodeId(1), Duration::from_secs(600))
        .unwrap();
    node.node()
        .create_log(log, vec![NodeId(0), NodeId(1)])
        .unwrap();
    step_until(&mut node, &clock, |node| leads(node, log));
    let handle = node.node().log(log).unwrap();
    Leading {
        disk,
        network,
        clock,
        coordinator,
        node,
        log,
        handle,
    }
}

/// SPEC 3.5, in steps: a leader's controlled shutdown stops appends, names
/// no successor while the in-sync follower has not fetched the stopped
/// end, names it on the step after it has, and then stops cleanly (its
/// next start finds the clean-shutdown marker) without waiting anywhere.
#[test]
fn a_stepped_controlled_shutdown_hands_the_leadership_to_a_caught_up_follower_first() {
    let Leading {
        disk,
        network,
        clock,
        coordinator,
        mut node,
        log,
        handle,
    } = leading_two_replicas(31, Duration::from_secs(5));
    assert!(handle
        .append_pipelined(&batch(b"x"), Acks::Leader)
        .unwrap()
        .is_done());
    fetch_at(&node, &clock, log, NodeId(1), Offset(0));

    let _simulation = crate::simulation::SimulationGuard::enter(31);
    assert_eq!(node.begin_controlled_shutdown(clock.now()), 1);
    assert!(matches!(
        handle.append_pipelined(&batch(b"y"), Acks::Leader),
        Err(crate::Error::NotLeader { .. })
    ));
    assert_eq!(
        node.step_controlled_shutdown(clock.now()),
        None,
        "node 1 lacks x"
    );
    assert_eq!(
        coordinator.log_state(log).unwrap().unwrap().leader,
        Some(NodeId(0))
    );
    clock.advance(Duration::from_millis(5));
    fetch_at(&node, &clock, log, NodeId(1), Offset(1));
    assert_eq!(node.step_controlled_shutdown(clock.now()), Some(1));
    let state = coordinator.log_state(log).unwrap().unwrap();
    assert_eq!(state.leader, Some(NodeId(1)), "{state:?}");
    assert!(!state.in_sync_replicas.contains(&NodeId(0)), "{state:?}");
    drop(handle);
    assert!(node.finish_controlled_shutdown().unwrap());
    assert!(!coordinator.live_nodes().unwrap().contains(&NodeId(0)));
    drop(_simulation);

    let node = open(&disk, &network, &coordinator, &clock);
    assert_eq!(node.node().previous_shutdown(), PreviousShutdown::Clean);
    node.into_node().halt();
}

/// A zero `controlled_shutdown_timeout` skips the winding down in steps as
/// `Node::shutdown` does: appends go on until the node stops, nothing is
/// handed over, no ISR is left, and the stop is still clean (review of
/// babce65: the stepped path wound down regardless).
#[test]
fn a_stepped_shutdown_with_a_zero_timeout_hands_nothing_over_and_stops_cleanly() {
    let Leading {
        disk,
        network,
        clock,
        coordinator,
        mut node,
        log,
        handle,
    } = leading_two_replicas(32, Duration::ZERO);
    fetch_at(&node, &clock, log, NodeId(1), Offset(0));

    let _simulation = crate::simulation::SimulationGuard::enter(32);
    assert_eq!(node.begin_controlled_shutdown(clock.now()), 0);
    assert!(handle
        .append_pipelined(&batch(b"x"), Acks::Leader)
        .unwrap()
        .is_done());
    assert_eq!(node.step_controlled_shutdown(clock.now()), Some(0));
    drop(handle);
    assert!(node.finish_controlled_shutdown().unwrap());
    let state = coordinator.log_state(log).unwrap().unwrap();
    assert_eq!(state.leader, Some(NodeId(0)), "{state:?}");
    assert!(state.in_sync_replicas.contains(&NodeId(0)), "{state:?}");
    assert!(!coordinator.live_nodes().unwrap().contains(&NodeId(0)));
    drop(_simulation);

    let node = open(&disk, &network, &coordinator, &clock);
    assert_eq!(node.node().previous_shutdown(), PreviousShutdown::Clean);
    node.into_node().halt();
}
