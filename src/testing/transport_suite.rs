//! The conformance suite every [`Transport`] must pass: the memory transport
//! now, the TCP transport later, an application's own network whenever it
//! brings one.
//!
//! The suite owns only what is observable through the traits: a request
//! arrives equal to what was sent, with the right sender; a response comes
//! back equal to what the handler returned, to the caller that asked; calls
//! fail with a [`TransportError`] (never a panic or a hang) when they cannot
//! be delivered; deadlines bound every call; long polls do not stall other
//! nodes. It knows nothing of a transport's internals, and fault injection is
//! tested per transport, not here.
//!
//! Usage, from a test:
//! ```ignore
//! isrlog::testing::transport_suite::run(MemoryTransportFactory::new(7));
//! ```
//! Each check is also a public function, so a failing one can be run alone.

use std::thread;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::{
    echo_response, sample_epoch_request, sample_fetch_request, single_record_batch, EchoHandler,
    FnHandler, LongPollHandler, RecordingHandler,
};
use crate::record::RecordBatchBuilder;
use crate::sync::{Arc, Mutex};
use crate::transport::{
    EpochAnswer, EpochEndOffset, EpochEndOffsetsRequest, EpochEndOffsetsResponse, EpochQuery,
    ErrorCode, FetchLog, FetchRequest, FetchResponse, FetchedLog, MemoryNetwork, Request,
    RequestHandler, Response, Transport, TransportError,
};
use crate::types::{Incarnation, LeaderEpoch, LogId, NodeId, Offset};

/// Scheduling slack allowed on every timing bound. Generous on purpose: the
/// suite runs on loaded CI machines, and what it must catch is a hang or a
/// deadline ignored by a wide margin, not a few milliseconds.
const SLACK: Duration = Duration::from_secs(1);

/// Deadline far enough away that only a broken transport reaches it.
const GENEROUS: Duration = Duration::from_secs(10);

/// Builds networks for the suite. Each check builds its own network and
/// drops its transports at the end.
pub trait TransportFactory {
    /// Builds a network of these nodes, each answering with its handler, and
    /// returns one client transport per node, in the same order. Node ids not
    /// in `nodes` must be unreachable on this network.
    fn build(&mut self, nodes: &[(NodeId, Arc<dyn RequestHandler>)]) -> Vec<Arc<dyn Transport>>;

    /// Whether a call's deadline can end the call while the callee's handler
    /// is still running. True for a network transport (the client stops
    /// reading at the deadline); false for a direct-call transport such as
    /// [`MemoryNetwork`], where the handler runs in the caller's thread and
    /// the call can only time out once the handler returns.
    fn deadline_preempts_handler(&self) -> bool {
        true
    }

    /// Called after each check, once its transports were dropped: a factory
    /// that started listeners stops them here.
    fn teardown(&mut self) {}
}

/// Builds [`MemoryNetwork`]s, one per check, with faults off.
#[derive(Debug)]
pub struct MemoryTransportFactory {
    seed: u64,
}

impl MemoryTransportFactory {
    /// A factory whose networks use `seed` (faults are off, so it only
    /// matters if a check turns them on).
    pub fn new(seed: u64) -> MemoryTransportFactory {
        MemoryTransportFactory { seed }
    }
}

impl TransportFactory for MemoryTransportFactory {
    fn build(&mut self, nodes: &[(NodeId, Arc<dyn RequestHandler>)]) -> Vec<Arc<dyn Transport>> {
        let network = MemoryNetwork::new(self.seed);
        for (node, handler) in nodes {
            network.register(*node, Arc::clone(handler));
        }
        nodes
            .iter()
            .map(|(node, _)| Arc::new(network.transport(*node)) as Arc<dyn Transport>)
            .collect()
    }

    fn deadline_preempts_handler(&self) -> bool {
        false
    }
}

/// Runs every check of the suite against networks built by `factory`.
pub fn run<F: TransportFactory>(mut factory: F) {
    round_trip_every_message_type(&mut factory);
    round_trip_every_error_code(&mut factory);
    call_to_node_without_handler_fails(&mut factory);
    deadline_is_honoured_when_handler_blocks(&mut factory);
    expired_deadline_fails_without_blocking(&mut factory);
    concurrent_calls_get_their_own_responses(&mut factory);
    long_poll_does_not_block_other_callers(&mut factory);
}

/// A handler that records what it receives and answers with whatever
/// response the check put in its slot.
fn scripted_handler() -> (Arc<RecordingHandler>, Arc<Mutex<Response>>) {
    let slot = Arc::new(Mutex::new(Response::Error(ErrorCode::Unknown)));
    let answer = Arc::clone(&slot);
    let handler = Arc::new(RecordingHandler::new(Arc::new(FnHandler::new(
        move |_from, _request| answer.lock().clone(),
    ))));
    (handler, slot)
}

/// Two record batches back to back, the second with several keyed records,
/// as a leader's fetch answer carries them.
fn sample_records() -> Bytes {
    let mut builder = RecordBatchBuilder::new(1_700_000_000_123);
    builder
        .push_keyed(b"key-1", b"value one")
        .push_keyed(b"key-2", &[0u8, 255, 1, 254])
        .push(b"");
    let second = builder
        .build()
        .expect("a three-record test batch is always valid")
        .into_bytes();
    let mut records = BytesMut::new();
    records.extend_from_slice(&single_record_batch(b"first batch"));
    records.extend_from_slice(&second);
    records.freeze()
}

/// Sends `request` from `transports[caller]` to `callee`, expecting the
/// scripted `response`, and checks the callee saw exactly `request` from
/// `caller_id`.
fn expect_round_trip(
    transport: &Arc<dyn Transport>,
    caller: NodeId,
    callee: NodeId,
    recorder: &RecordingHandler,
    slot: &Mutex<Response>,
    request: Request,
    response: Response,
) {
    *slot.lock() = response.clone();
    let seen_before = recorder.received_count();
    let got = transport
        .call(callee, request.clone(), Instant::now() + GENEROUS)
        .unwrap_or_else(|error| panic!("call {caller} -> {callee} failed: {error}"));
    assert_eq!(got, response, "response changed in transit");
    let received = recorder.received();
    assert_eq!(
        received.len(),
        seen_before + 1,
        "the handler must run exactly once per call"
    );
    assert_eq!(
        received.last(),
        Some(&(caller, request)),
        "request or sender changed in transit"
    );
}

/// Every message type, with every field set to a distinctive value
/// (including extremes, `None` and `Some`, empty and non-empty lists and
/// records), arrives field for field, with the right sender, both ways.
pub fn round_trip_every_message_type<F: TransportFactory>(factory: &mut F) {
    let (a, b) = (NodeId(1), NodeId(u32::MAX));
    let (recorder_a, slot_a) = scripted_handler();
    let (recorder_b, slot_b) = scripted_handler();
    let transports = factory.build(&[
        (a, recorder_a.clone() as Arc<dyn RequestHandler>),
        (b, recorder_b.clone() as Arc<dyn RequestHandler>),
    ]);

    let fetch = Request::Fetch(FetchRequest {
        replica: a,
        incarnation: Incarnation(u64::MAX),
        wait_max: Duration::from_millis(1234),
        bytes_max: u32::MAX,
        logs: vec![
            FetchLog {
                log: LogId(0),
                current_leader_epoch: LeaderEpoch(7),
                fetch_offset: Offset(42),
                last_fetched_epoch: Some(LeaderEpoch(6)),
                line_epoch: Some(LeaderEpoch(7)),
                log_start_offset: Offset(3),
                bytes_max: 1 << 20,
                applied_offset: Some(Offset(17)),
            },
            FetchLog {
                log: LogId(u32::MAX),
                current_leader_epoch: LeaderEpoch(u32::MAX),
                fetch_offset: Offset(u64::MAX),
                last_fetched_epoch: None,
                line_epoch: None,
                log_start_offset: Offset(u64::MAX),
                bytes_max: 0,
                applied_offset: None,
            },
        ],
    });
    let fetched = Response::Fetch(FetchResponse {
        logs: vec![
            FetchedLog {
                log: LogId(0),
                error: ErrorCode::None,
                high_watermark: Offset(40),
                log_start_offset: Offset(3),
                log_end_offset: Offset(46),
                log_start_epoch: None,
                log_end_epoch: None,
                diverging: None,
                records: sample_records(),
                applied_offsets: vec![(NodeId(1), Offset(3)), (NodeId(u32::MAX), Offset(u64::MAX))],
            },
            FetchedLog {
                log: LogId(u32::MAX),
                error: ErrorCode::None,
                high_watermark: Offset(u64::MAX),
                log_start_offset: Offset(0),
                log_end_offset: Offset(u64::MAX),
                log_start_epoch: Some(LeaderEpoch(u32::MAX)),
                log_end_epoch: Some(LeaderEpoch(u32::MAX - 1)),
                diverging: Some(EpochEndOffset {
                    epoch: LeaderEpoch(u32::MAX),
                    end_offset: Offset(u64::MAX),
                }),
                records: Bytes::new(),
                applied_offsets: Vec::new(),
            },
        ],
    });
    expect_round_trip(&transports[0], a, b, &recorder_b, &slot_b, fetch, fetched);

    let empty_fetch = Request::Fetch(FetchRequest {
        replica: b,
        incarnation: Incarnation(0),
        wait_max: Duration::ZERO,
        bytes_max: 0,
        logs: Vec::new(),
    });
    let empty_fetched = Response::Fetch(FetchResponse { logs: Vec::new() });
    expect_round_trip(
        &transports[1],
        b,
        a,
        &recorder_a,
        &slot_a,
        empty_fetch,
        empty_fetched,
    );

    let epochs = Request::EpochEndOffsets(EpochEndOffsetsRequest {
        replica: b,
        logs: vec![
            EpochQuery {
                log: LogId(9),
                current_leader_epoch: LeaderEpoch(4),
                epoch: LeaderEpoch(1),
            },
            EpochQuery {
                log: LogId(u32::MAX),
                current_leader_epoch: LeaderEpoch(u32::MAX),
                epoch: LeaderEpoch(0),
            },
        ],
    });
    let epoch_answers = Response::EpochEndOffsets(EpochEndOffsetsResponse {
        logs: vec![
            EpochAnswer {
                log: LogId(9),
                error: ErrorCode::None,
                end: Some(EpochEndOffset {
                    epoch: LeaderEpoch(0),
                    end_offset: Offset(13),
                }),
            },
            EpochAnswer {
                log: LogId(u32::MAX),
                error: ErrorCode::None,
                end: None,
            },
        ],
    });
    expect_round_trip(
        &transports[1],
        b,
        a,
        &recorder_a,
        &slot_a,
        epochs,
        epoch_answers,
    );

    let empty_epochs = Request::EpochEndOffsets(EpochEndOffsetsRequest {
        replica: a,
        logs: Vec::new(),
    });
    let empty_answers = Response::EpochEndOffsets(EpochEndOffsetsResponse { logs: Vec::new() });
    expect_round_trip(
        &transports[0],
        a,
        b,
        &recorder_b,
        &slot_b,
        empty_epochs,
        empty_answers,
    );

    drop(transports);
    factory.teardown();
}

/// Every [`ErrorCode`] survives the trip: as a whole-request error, as a
/// per-log fetch error and as a per-log epoch error.
pub fn round_trip_every_error_code<F: TransportFactory>(factory: &mut F) {
    let (a, b) = (NodeId(10), NodeId(11));
    let (recorder, slot) = scripted_handler();
    let transports = factory.build(&[
        (a, Arc::new(EchoHandler::new(a)) as Arc<dyn RequestHandler>),
        (b, recorder.clone() as Arc<dyn RequestHandler>),
    ]);
    let client = &transports[0];

    for code in ErrorCode::ALL {
        expect_round_trip(
            client,
            a,
            b,
            &recorder,
            &slot,
            sample_epoch_request(a, u32::from(code.as_u16())),
            Response::Error(code),
        );
    }

    let per_log_fetch = Response::Fetch(FetchResponse {
        logs: ErrorCode::ALL
            .into_iter()
            .enumerate()
            .map(|(index, error)| FetchedLog {
                log: LogId(index as u32),
                error,
                high_watermark: Offset(index as u64),
                log_start_offset: Offset(0),
                log_end_offset: Offset(2 * index as u64),
                log_start_epoch: None,
                log_end_epoch: None,
                diverging: None,
                records: Bytes::new(),
                applied_offsets: Vec::new(),
            })
            .collect(),
    });
    expect_round_trip(
        client,
        a,
        b,
        &recorder,
        &slot,
        sample_fetch_request(a, 1),
        per_log_fetch,
    );

    let per_log_epochs = Response::EpochEndOffsets(EpochEndOffsetsResponse {
        logs: ErrorCode::ALL
            .into_iter()
            .enumerate()
            .map(|(index, error)| EpochAnswer {
                log: LogId(index as u32),
                error,
                end: None,
            })
            .collect(),
    });
    expect_round_trip(
        client,
        a,
        b,
        &recorder,
        &slot,
        sample_epoch_request(a, 2),
        per_log_epochs,
    );

    drop(transports);
    factory.teardown();
}

/// A call to a node that is not on the network fails with a
/// `TransportError` (naming that node when the error names one), promptly,
/// and the transport keeps working afterwards.
pub fn call_to_node_without_handler_fails<F: TransportFactory>(factory: &mut F) {
    let (a, b, stranger) = (NodeId(20), NodeId(21), NodeId(29));
    let transports = factory.build(&[
        (a, Arc::new(EchoHandler::new(a)) as Arc<dyn RequestHandler>),
        (b, Arc::new(EchoHandler::new(b)) as Arc<dyn RequestHandler>),
    ]);
    let deadline_after = Duration::from_millis(200);
    let started = Instant::now();
    let result = transports[0].call(
        stranger,
        sample_fetch_request(a, 5),
        started + deadline_after,
    );
    let elapsed = started.elapsed();
    match result {
        Ok(response) => panic!("call to {stranger}, which has no handler, answered {response:?}"),
        Err(
            TransportError::Unreachable { to, .. }
            | TransportError::Timeout { to }
            | TransportError::Malformed { to, .. },
        ) => {
            assert_eq!(to, stranger, "the error must name the node called");
        }
        Err(TransportError::Shutdown) => {
            panic!("call to {stranger} says the transport is shut down; it is not")
        }
    }
    assert!(
        elapsed <= deadline_after + SLACK,
        "call to {stranger} took {elapsed:?}, deadline was {deadline_after:?}"
    );

    let request = sample_epoch_request(a, 77);
    let got = transports[0]
        .call(b, request.clone(), Instant::now() + GENEROUS)
        .unwrap_or_else(|error| panic!("call after a failed call failed: {error}"));
    assert_eq!(got, echo_response(b, a, &request));

    drop(transports);
    factory.teardown();
}

/// A call whose handler holds the request past the caller's deadline
/// returns `Timeout` naming the callee: by the deadline (plus slack) on a
/// transport that can preempt the handler, and as soon as the handler
/// returns on a direct-call one (whose handlers the suite keeps short for
/// that reason). A response that arrives late is never handed to a later
/// call.
pub fn deadline_is_honoured_when_handler_blocks<F: TransportFactory>(factory: &mut F) {
    let (a, b) = (NodeId(30), NodeId(31));
    let holder = Arc::new(LongPollHandler::new(b));
    let transports = factory.build(&[
        (a, Arc::new(EchoHandler::new(a)) as Arc<dyn RequestHandler>),
        (b, holder.clone() as Arc<dyn RequestHandler>),
    ]);
    let preempts = factory.deadline_preempts_handler();
    let deadline_after = Duration::from_millis(100);
    // A preemptible transport faces a handler that would hold for far longer
    // than the deadline; a direct-call one, a handler that overruns the
    // deadline by a little (it cannot return before the handler does).
    let hold = if preempts {
        GENEROUS
    } else {
        Duration::from_millis(300)
    };
    let mut held_fetch = sample_fetch_request(a, 8);
    if let Request::Fetch(fetch) = &mut held_fetch {
        fetch.wait_max = hold;
    }

    let started = Instant::now();
    let result = transports[0].call(b, held_fetch, started + deadline_after);
    let elapsed = started.elapsed();
    holder.release();
    match result {
        Err(TransportError::Timeout { to }) => assert_eq!(to, b),
        other => panic!("a call held past its deadline must time out, got {other:?}"),
    }
    let bound = if preempts { deadline_after } else { hold } + SLACK;
    assert!(
        elapsed <= bound,
        "timed-out call returned after {elapsed:?}, bound {bound:?}"
    );

    // The held fetch's answer may still be on its way; the next call must get
    // its own answer, not that one.
    for id in 0..3 {
        let request = sample_epoch_request(a, 300 + id);
        let got = transports[0]
            .call(b, request.clone(), Instant::now() + GENEROUS)
            .unwrap_or_else(|error| panic!("call after a timeout failed: {error}"));
        assert_eq!(got, echo_response(b, a, &request));
    }

    drop(transports);
    factory.teardown();
}

/// A call made when its deadline has already passed fails with an error at
/// once instead of blocking or answering.
pub fn expired_deadline_fails_without_blocking<F: TransportFactory>(factory: &mut F) {
    let (a, b) = (NodeId(40), NodeId(41));
    let transports = factory.build(&[
        (a, Arc::new(EchoHandler::new(a)) as Arc<dyn RequestHandler>),
        (b, Arc::new(EchoHandler::new(b)) as Arc<dyn RequestHandler>),
    ]);
    let started = Instant::now();
    let result = transports[0].call(b, sample_fetch_request(a, 4), started);
    let elapsed = started.elapsed();
    match result {
        Err(TransportError::Timeout { to }) => assert_eq!(to, b),
        other => panic!("a call with an expired deadline must time out, got {other:?}"),
    }
    assert!(elapsed <= SLACK, "expired call took {elapsed:?}");

    drop(transports);
    factory.teardown();
}

/// Many threads on every node, several sharing one transport, call the
/// other nodes at once; each gets the answer to its own request (the
/// request carries a unique id that the echo handler puts in the answer,
/// along with the callee and the caller).
pub fn concurrent_calls_get_their_own_responses<F: TransportFactory>(factory: &mut F) {
    const NODES: u32 = 3;
    const THREADS_PER_NODE: u64 = 4;
    const CALLS_PER_THREAD: u64 = 25;
    let nodes: Vec<(NodeId, Arc<dyn RequestHandler>)> = (0..NODES)
        .map(|index| {
            let node = NodeId(50 + index);
            (
                node,
                Arc::new(EchoHandler::new(node)) as Arc<dyn RequestHandler>,
            )
        })
        .collect();
    let transports = factory.build(&nodes);

    thread::scope(|scope| {
        for (index, transport) in transports.iter().enumerate() {
            let me = nodes[index].0;
            for thread_index in 0..THREADS_PER_NODE {
                let others: Vec<NodeId> = nodes
                    .iter()
                    .map(|(node, _)| *node)
                    .filter(|node| *node != me)
                    .collect();
                scope.spawn(move || {
                    for call in 0..CALLS_PER_THREAD {
                        let id = (u64::from(me.0) << 32) | (thread_index << 16) | call;
                        let to = others[(call as usize) % others.len()];
                        let request = if call % 2 == 0 {
                            sample_fetch_request(me, id)
                        } else {
                            sample_epoch_request(me, id as u32)
                        };
                        let got = transport
                            .call(to, request.clone(), Instant::now() + GENEROUS)
                            .unwrap_or_else(|error| {
                                panic!("concurrent call {me} -> {to} #{id} failed: {error}")
                            });
                        assert_eq!(
                            got,
                            echo_response(to, me, &request),
                            "call {me} -> {to} #{id} got someone else's answer"
                        );
                    }
                });
            }
        }
    });

    drop(transports);
    factory.teardown();
}

/// While one node's fetch is held in a long poll on node `c`, other nodes'
/// calls to `c` (an epoch query, and a fetch with no wait) are answered at
/// once. The held fetch is answered when released.
pub fn long_poll_does_not_block_other_callers<F: TransportFactory>(factory: &mut F) {
    let (a, b, c) = (NodeId(60), NodeId(61), NodeId(62));
    let poller = Arc::new(LongPollHandler::new(c));
    let transports = factory.build(&[
        (a, Arc::new(EchoHandler::new(a)) as Arc<dyn RequestHandler>),
        (b, Arc::new(EchoHandler::new(b)) as Arc<dyn RequestHandler>),
        (c, poller.clone() as Arc<dyn RequestHandler>),
    ]);
    let mut long_fetch = sample_fetch_request(a, 600);
    if let Request::Fetch(fetch) = &mut long_fetch {
        fetch.wait_max = GENEROUS;
    }

    thread::scope(|scope| {
        let client_a = &transports[0];
        let expected_long = echo_response(c, a, &long_fetch);
        let long_poll =
            scope.spawn(move || client_a.call(c, long_fetch, Instant::now() + GENEROUS + SLACK));
        // Releases the poll if an assertion below fails, so the scope can end.
        struct ReleaseOnDrop<'a>(&'a LongPollHandler);
        impl Drop for ReleaseOnDrop<'_> {
            fn drop(&mut self) {
                self.0.release();
            }
        }
        let release_guard = ReleaseOnDrop(&poller);
        assert!(
            poller.wait_until_holding(1, Instant::now() + GENEROUS),
            "{a}'s long poll never reached {c}'s handler"
        );

        let started = Instant::now();
        let query = sample_epoch_request(b, 601);
        let got = transports[1]
            .call(c, query.clone(), started + GENEROUS)
            .unwrap_or_else(|error| panic!("epoch query during a long poll failed: {error}"));
        assert_eq!(got, echo_response(c, b, &query));
        let quick_fetch = sample_fetch_request(b, 602);
        let got = transports[1]
            .call(c, quick_fetch.clone(), started + GENEROUS)
            .unwrap_or_else(|error| panic!("fetch during a long poll failed: {error}"));
        assert_eq!(got, echo_response(c, b, &quick_fetch));
        let elapsed = started.elapsed();
        assert!(
            elapsed <= SLACK,
            "calls from {b} waited {elapsed:?} behind {a}'s long poll"
        );
        assert_eq!(
            poller.holding(),
            1,
            "{a}'s long poll ended before it was released"
        );

        drop(release_guard);
        let answered = long_poll
            .join()
            .expect("long-poll thread panicked")
            .unwrap_or_else(|error| panic!("released long poll failed: {error}"));
        assert_eq!(answered, expected_long);
    });

    drop(transports);
    factory.teardown();
}
