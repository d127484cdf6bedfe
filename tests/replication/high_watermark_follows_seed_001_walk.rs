//! Seed 001 §4.2.3 (SPEC 3.2, 3.3): the high watermark is the minimum log
//! end offset over the ISR and reaches a follower one fetch later. The
//! follower here is driven by hand through the leader's request handler, so
//! every intermediate state can be observed.

use std::sync::Arc;
use std::time::Duration;

use isrlog::transport::{ErrorCode, FetchLog, FetchRequest, FetchedLog, Request, Response};
use isrlog::{
    Acks, Coordinator, Incarnation, LeaderEpoch, LogId, ManualClock, MemoryCoordinator,
    MemoryNetwork, Node, NodeConfig, NodeId, Offset,
};

fn fetch(
    handler: &Arc<dyn isrlog::RequestHandler>,
    (follower, incarnation): (NodeId, Incarnation),
    log: LogId,
    offset: Offset,
) -> FetchedLog {
    let request = Request::Fetch(FetchRequest {
        replica: follower,
        incarnation,
        wait_max: Duration::from_millis(5),
        bytes_max: 1 << 20,
        logs: vec![FetchLog {
            log,
            current_leader_epoch: LeaderEpoch(0),
            fetch_offset: offset,
            last_fetched_epoch: if offset == Offset(0) {
                None
            } else {
                Some(LeaderEpoch(0))
            },
            line_epoch: Some(LeaderEpoch(0)),
            log_start_offset: Offset(0),
            bytes_max: 1 << 20,
            applied_offset: None,
        }],
    });
    match handler.handle(follower, request) {
        Response::Fetch(mut response) => response.logs.remove(0),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn high_watermark_reaches_the_follower_one_fetch_after_its_log_end_offset() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let coordinator = MemoryCoordinator::new(Arc::new(clock.clone()));
    let network = MemoryNetwork::new(1);
    let (leader_id, follower_id, log) = (NodeId(0), NodeId(1), LogId(7));
    coordinator
        .create_log(log, vec![leader_id, follower_id])
        .unwrap();
    // The hand-driven follower registers (the leader counts fetches only
    // from a registered incarnation) with a session the manual clock never
    // ends. No controller: nothing here is about elections.
    let follower_incarnation = coordinator
        .register_node(follower_id, Duration::from_secs(1 << 30))
        .unwrap();
    let follower = (follower_id, follower_incarnation);
    let mut config = NodeConfig::new(leader_id, dir.path());
    config.controller = None;
    let node = Node::start(
        config,
        Arc::new(network.transport(leader_id)),
        Arc::new(coordinator.clone()),
        Arc::new(clock),
    )
    .unwrap();
    let handler = node.handler();
    let leader = node.wait_for_log(log, Duration::from_secs(5)).unwrap();
    leader.wait_until_leader(Duration::from_secs(5)).unwrap();

    // The producer writes one record: leader LEO 1, HW 0 (the follower,
    // in the ISR, has not acknowledged anything yet).
    leader.append_values(&[b"m0"], Acks::Leader).unwrap();
    assert_eq!(leader.log_end_offset(), Offset(1));
    assert_eq!(leader.high_watermark(), Offset(0));

    // First fetch (offset 0): the follower gets the record; both HWs are 0.
    let answer = fetch(&handler, follower, log, Offset(0));
    assert_eq!(answer.error, ErrorCode::None);
    assert!(!answer.records.is_empty());
    assert_eq!(answer.high_watermark, Offset(0));
    let follower_log_end = Offset(1); // after appending the one record
    let follower_hw = answer.high_watermark.min(follower_log_end);
    assert_eq!(
        (leader.log_end_offset(), follower_log_end),
        (Offset(1), Offset(1))
    );
    assert_eq!(
        (leader.high_watermark(), follower_hw),
        (Offset(0), Offset(0))
    );

    // Second fetch (offset 1) acknowledges offset 0: both HWs become 1.
    let answer = fetch(&handler, follower, log, follower_log_end);
    assert_eq!(answer.error, ErrorCode::None);
    assert!(answer.records.is_empty());
    assert_eq!(leader.high_watermark(), Offset(1));
    let follower_hw = answer.high_watermark.min(follower_log_end);
    assert_eq!(follower_hw, Offset(1));
    node.shutdown().unwrap();
}
