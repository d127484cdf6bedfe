//! `MemoryCoordinator`'s fault injection and test hooks: an unreachable
//! coordinator, a crashed node, expiry driven by a manual clock, and the
//! `Resync` owed to a subscriber whose queue overflowed.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use isrlog::{
    CasOutcome, ControllerEpoch, Coordinator, CoordinatorEvent, Error, LeaderEpoch, LogId,
    LogUpdate, ManualClock, MemoryCoordinator, NodeId,
};

fn manual() -> (MemoryCoordinator, ManualClock) {
    let clock = ManualClock::default();
    (MemoryCoordinator::new(Arc::new(clock.clone())), clock)
}

fn queued(events: &Receiver<CoordinatorEvent>) -> Vec<CoordinatorEvent> {
    events.try_iter().collect()
}

fn assert_unavailable<T: std::fmt::Debug>(what: &str, result: isrlog::Result<T>) {
    match result {
        Err(Error::Coordinator { reason }) if reason == "unavailable" => {}
        other => panic!("{what}: expected Coordinator {{ unavailable }}, got {other:?}"),
    }
}

/// A heartbeat refused because the node's session ended, not because the
/// coordinator is unreachable (which would say "unavailable").
fn assert_no_session(what: &str, result: isrlog::Result<()>) {
    match result {
        Err(Error::Coordinator { reason }) if reason.contains("has no live session") => {}
        other => panic!("{what}: expected Coordinator {{ no live session }}, got {other:?}"),
    }
}

/// SPEC 3.7: a leader cut off from the coordinator cannot change the ISR,
/// and no other call gets through either.
#[test]
fn unavailable_coordinator_refuses_every_call_and_changes_nothing() {
    let (coordinator, _clock) = manual();
    let (n1, n2) = (NodeId(1), NodeId(2));
    coordinator
        .register_node(n1, Duration::from_secs(10))
        .unwrap();
    let before = coordinator.create_log(LogId(1), vec![n1, n2]).unwrap();
    let shrink = LogUpdate::in_sync_replicas(&before, vec![n1], 1);

    coordinator.set_unavailable(true);
    assert_unavailable(
        "compare_and_set",
        coordinator.compare_and_set(LogId(1), LeaderEpoch(0), 0, shrink.clone()),
    );
    assert_unavailable("create_log", coordinator.create_log(LogId(2), vec![n1]));
    assert_unavailable("log_state", coordinator.log_state(LogId(1)));
    assert_unavailable("logs", coordinator.logs());
    assert_unavailable(
        "register_node",
        coordinator.register_node(n2, Duration::from_secs(10)),
    );
    assert_unavailable("heartbeat", coordinator.heartbeat(n1));
    assert_unavailable("unregister_node", coordinator.unregister_node(n1));
    assert_unavailable("live_nodes", coordinator.live_nodes());
    assert_unavailable("subscribe", coordinator.subscribe(n1));
    assert_unavailable(
        "try_become_controller",
        coordinator.try_become_controller(n1),
    );
    assert_unavailable("controller", coordinator.controller());
    assert_unavailable("allocate_producer_id", coordinator.allocate_producer_id());

    coordinator.set_unavailable(false);
    assert_eq!(coordinator.log_state(LogId(1)).unwrap(), Some(before));
    assert_eq!(coordinator.logs().unwrap().len(), 1);
    assert_eq!(coordinator.live_nodes().unwrap(), vec![n1]);
    assert_eq!(coordinator.controller().unwrap(), None);
    let outcome = coordinator
        .compare_and_set(LogId(1), LeaderEpoch(0), 0, shrink)
        .unwrap();
    assert!(outcome.is_applied());
}

/// Nodes cut off from the coordinator cannot heartbeat, so their sessions
/// run out meanwhile, as ZooKeeper sessions would; what they missed hearing
/// is summed up by one `Resync` once the coordinator is back.
#[test]
fn sessions_expire_while_the_coordinator_is_unreachable() {
    let (coordinator, clock) = manual();
    coordinator
        .register_node(NodeId(1), Duration::from_secs(6))
        .unwrap();
    let events = coordinator.subscribe(NodeId(2)).unwrap();
    queued(&events);
    coordinator.set_unavailable(true);
    clock.advance(Duration::from_secs(7));
    assert_unavailable("heartbeat", coordinator.heartbeat(NodeId(1)));
    coordinator.tick();
    assert!(queued(&events).is_empty(), "events are withheld meanwhile");
    coordinator.set_unavailable(false);
    coordinator.tick();
    assert_eq!(queued(&events), vec![CoordinatorEvent::Resync]);
    assert!(coordinator.live_nodes().unwrap().is_empty());
    assert_no_session("heartbeat after expiry", coordinator.heartbeat(NodeId(1)));
}

#[test]
fn fail_node_ends_the_session_at_once_and_frees_the_controller_seat() {
    let (coordinator, _clock) = manual();
    let (a, b) = (NodeId(1), NodeId(2));
    coordinator
        .register_node(a, Duration::from_secs(60))
        .unwrap();
    coordinator
        .register_node(b, Duration::from_secs(60))
        .unwrap();
    assert_eq!(
        coordinator.try_become_controller(a).unwrap(),
        Some(ControllerEpoch(1))
    );
    let events = coordinator.subscribe(b).unwrap();

    coordinator.fail_node(a);
    // Announced synchronously, before fail_node returns.
    assert_eq!(
        queued(&events),
        vec![
            CoordinatorEvent::NodesChanged { live: vec![b] },
            CoordinatorEvent::ControllerChanged {
                controller: None,
                epoch: ControllerEpoch(1)
            },
        ]
    );
    assert_eq!(coordinator.live_nodes().unwrap(), vec![b]);
    assert_no_session("heartbeat after fail_node", coordinator.heartbeat(a));
    assert_eq!(
        coordinator.try_become_controller(b).unwrap(),
        Some(ControllerEpoch(2))
    );
    // Failing a node without a session is a no-op.
    coordinator.fail_node(NodeId(9));
    assert_eq!(coordinator.live_nodes().unwrap(), vec![b]);
}

#[test]
fn tick_evaluates_expiry_against_the_manual_clock() {
    let (coordinator, clock) = manual();
    let node = NodeId(4);
    coordinator
        .register_node(node, Duration::from_secs(5))
        .unwrap();
    let events = coordinator.subscribe(NodeId(1)).unwrap();

    clock.advance(Duration::from_secs(5));
    coordinator.tick();
    assert!(
        queued(&events).is_empty(),
        "live while now - last <= timeout"
    );

    clock.advance(Duration::from_millis(1));
    coordinator.tick();
    assert_eq!(
        queued(&events),
        vec![CoordinatorEvent::NodesChanged { live: vec![] }]
    );
    coordinator.tick();
    assert!(queued(&events).is_empty(), "an expiry is announced once");
}

/// The subscriber stops reading, its queue of 2 fills and later events are
/// dropped; once it has read its queue, the expiry thread hands it a
/// `Resync` without any further change being made.
#[test]
fn resync_arrives_once_there_is_room_without_new_events() {
    let coordinator =
        MemoryCoordinator::with_subscriber_events_max(Arc::new(ManualClock::default()), 2);
    let events = coordinator.subscribe(NodeId(1)).unwrap();
    let mut state = coordinator.create_log(LogId(1), vec![NodeId(1)]).unwrap();
    for _ in 0..3 {
        state = match coordinator
            .compare_and_set(
                LogId(1),
                state.leader_epoch,
                state.version,
                LogUpdate::in_sync_replicas(&state, vec![NodeId(1)], 1),
            )
            .unwrap()
        {
            CasOutcome::Applied(state) => state,
            CasOutcome::Stale(state) => panic!("no one else writes, got Stale({state:?})"),
        };
    }
    // Exactly the two queued events: once the first is read there is
    // room, and the expiry thread may queue the Resync before a drain of
    // the queue would end (seen once under load, draining with
    // `try_iter`).
    let first_two: Vec<u64> = (0..2)
        .map(|_| match events.try_recv() {
            Ok(CoordinatorEvent::LogChanged(state)) => state.version,
            other => panic!("expected LogChanged, got {other:?}"),
        })
        .collect();
    assert_eq!(first_two, vec![0, 1]);

    assert_eq!(
        events.recv_timeout(Duration::from_secs(2)),
        Ok(CoordinatorEvent::Resync)
    );
    assert_eq!(
        events.recv_timeout(Duration::from_millis(50)),
        Err(RecvTimeoutError::Timeout),
        "one Resync covers every dropped event, and the stream stays open"
    );
    assert_eq!(coordinator.subscriber_count(), 1);
    drop(events);
    coordinator
        .compare_and_set(
            LogId(1),
            state.leader_epoch,
            state.version,
            LogUpdate::in_sync_replicas(&state, vec![NodeId(1)], 1),
        )
        .unwrap();
    assert_eq!(
        coordinator.subscriber_count(),
        0,
        "a dropped receiver is forgotten at the next event"
    );
}

/// SPEC 3.7, seen from the coordinator: the leader of a log is cut off from
/// the coordinator alone. It can change nothing, its session runs out, the
/// others elect a replacement; once back, it is told to re-read (`Resync`)
/// and finds itself deposed, its old compare-and-set key now stale.
#[test]
fn cut_off_leader_cannot_change_the_isr_while_the_others_elect_a_replacement() {
    let (coordinator, clock) = manual();
    let (n1, n2, n3) = (NodeId(1), NodeId(2), NodeId(3));
    let [view1, view2, view3] = [n1, n2, n3].map(|node| coordinator.for_node(node));
    let session = Duration::from_secs(6);
    for (view, node) in [(&view1, n1), (&view2, n2), (&view3, n3)] {
        view.register_node(node, session).unwrap();
    }
    let initial = view2.create_log(LogId(1), vec![n1, n2, n3]).unwrap();
    let events1 = view1.subscribe(n1).unwrap();
    let events2 = view2.subscribe(n2).unwrap();
    queued(&events1);
    queued(&events2);

    coordinator.set_node_unavailable(n1, true);
    let shrink = LogUpdate::in_sync_replicas(&initial, vec![n1], 1);
    assert_unavailable(
        "the cut-off leader's ISR shrink",
        view1.compare_and_set(LogId(1), LeaderEpoch(0), 0, shrink.clone()),
    );
    assert_unavailable("the cut-off leader's heartbeat", view1.heartbeat(n1));
    assert_eq!(view2.log_state(LogId(1)).unwrap(), Some(initial.clone()));

    for _ in 0..2 {
        clock.advance(Duration::from_secs(4));
        view2.heartbeat(n2).unwrap();
        view3.heartbeat(n3).unwrap();
    }
    coordinator.tick();
    assert_eq!(view2.live_nodes().unwrap(), vec![n2, n3]);
    let replacement = LogUpdate {
        leader: Some(n2),
        leader_epoch: LeaderEpoch(1),
        in_sync_replicas: vec![n2, n3],
        eligible_leader_replicas: Vec::new(),
        unclean_report: None,
        assignment: None,
    };
    let elected = match view2
        .compare_and_set(LogId(1), LeaderEpoch(0), 0, replacement)
        .unwrap()
    {
        CasOutcome::Applied(state) => state,
        CasOutcome::Stale(state) => panic!("nobody else wrote, got Stale({state:?})"),
    };
    assert!(queued(&events2).contains(&CoordinatorEvent::LogChanged(elected.clone())));
    assert!(queued(&events1).is_empty(), "a cut-off node hears nothing");

    coordinator.set_node_unavailable(n1, false);
    coordinator.tick();
    assert_eq!(queued(&events1), vec![CoordinatorEvent::Resync]);
    assert_eq!(view1.log_state(LogId(1)).unwrap(), Some(elected.clone()));
    assert_eq!(
        view1
            .compare_and_set(LogId(1), LeaderEpoch(0), 0, shrink)
            .unwrap(),
        CasOutcome::Stale(elected)
    );
    assert_no_session(
        "heartbeat once reachable again (its session expired meanwhile)",
        view1.heartbeat(n1),
    );
}
