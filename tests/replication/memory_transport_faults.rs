//! Fault injection on the in-process network: partitions (symmetric and
//! one-way), heal, probabilistic and one-shot message loss (deterministic per
//! seed), latency, and nodes going down and up.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use isrlog::testing::{
    echo_response, sample_epoch_request, sample_fetch_request, EchoHandler, LongPollHandler,
    RecordingHandler,
};
use isrlog::transport::{Request, TransportError};
use isrlog::{MemoryNetwork, NodeId, RequestHandler, Transport};

const A: NodeId = NodeId(1);
const B: NodeId = NodeId(2);
const C: NodeId = NodeId(3);

/// What a call came to, stripped of the payload, for comparing runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Answered,
    TimedOut,
    Unreachable,
}

/// A network of `nodes`, each answering with an echo handler wrapped in a
/// recorder (returned in the same order). Lost messages cost no waiting.
fn network(seed: u64, nodes: &[NodeId]) -> (MemoryNetwork, Vec<Arc<RecordingHandler>>) {
    let network = MemoryNetwork::new(seed);
    network.set_lost_message_wait_max(Duration::ZERO);
    let recorders = nodes
        .iter()
        .map(|&node| {
            let recorder = Arc::new(RecordingHandler::new(Arc::new(EchoHandler::new(node))));
            network.register(node, recorder.clone() as Arc<dyn RequestHandler>);
            recorder
        })
        .collect();
    (network, recorders)
}

/// Calls `to` from `from` with a fresh request; checks an answer is the right
/// one and that failures name `to`.
fn call(network: &MemoryNetwork, from: NodeId, to: NodeId, id: u32) -> Outcome {
    let request = sample_epoch_request(from, id);
    let result =
        network
            .transport(from)
            .call(to, request.clone(), Instant::now() + Duration::from_secs(5));
    match result {
        Ok(response) => {
            assert_eq!(response, echo_response(to, from, &request));
            Outcome::Answered
        }
        Err(TransportError::Timeout { to: named }) => {
            assert_eq!(named, to);
            Outcome::TimedOut
        }
        Err(TransportError::Unreachable { to: named, .. }) => {
            assert_eq!(named, to);
            Outcome::Unreachable
        }
        Err(other) => panic!("unexpected error from the memory network: {other}"),
    }
}

#[test]
fn symmetric_partition_cuts_both_directions_and_spares_links_within_a_side() {
    let (network, recorders) = network(1, &[A, B, C]);
    network.partition(&[A], &[B, C]);

    assert_eq!(call(&network, A, B, 1), Outcome::TimedOut);
    assert_eq!(call(&network, A, C, 2), Outcome::TimedOut);
    assert_eq!(call(&network, B, A, 3), Outcome::TimedOut);
    assert_eq!(call(&network, C, A, 4), Outcome::TimedOut);
    assert_eq!(call(&network, B, C, 5), Outcome::Answered);
    assert_eq!(call(&network, C, B, 6), Outcome::Answered);

    // Requests across the cut never reached a handler.
    assert_eq!(recorders[0].received_count(), 0);
    assert_eq!(recorders[1].received_count(), 1);
    assert_eq!(recorders[2].received_count(), 1);
    assert_eq!(network.calls(), 6);
    assert_eq!(network.dropped(), 4);
}

#[test]
fn one_way_block_loses_requests_one_way_and_responses_the_other() {
    let (network, recorders) = network(2, &[A, B]);
    network.block(A, B);

    // A's request to B is lost before B's handler runs.
    assert_eq!(call(&network, A, B, 1), Outcome::TimedOut);
    assert_eq!(recorders[1].received_count(), 0);

    // B's request reaches A and A's handler runs, but A's answer travels
    // A -> B, which is blocked: B times out although A did the work.
    assert_eq!(call(&network, B, A, 2), Outcome::TimedOut);
    assert_eq!(recorders[0].received_count(), 1);
    assert_eq!(recorders[0].received()[0].0, B);
    assert_eq!(network.dropped(), 2);
}

#[test]
fn heal_restores_every_cut_link_but_not_down_nodes() {
    let (network, _) = network(3, &[A, B, C]);
    network.partition(&[A], &[B]);
    network.block(C, A);
    network.node_down(C);
    network.heal();

    assert_eq!(call(&network, A, B, 1), Outcome::Answered);
    assert_eq!(call(&network, B, A, 2), Outcome::Answered);
    assert_eq!(call(&network, A, C, 3), Outcome::Unreachable);
    network.node_up(C);
    assert_eq!(call(&network, C, A, 4), Outcome::Answered);
    assert_eq!(call(&network, A, C, 5), Outcome::Answered);
}

/// Runs `calls` calls A -> B with `configure` applied, returning the
/// outcomes, how many requests reached B's handler, and the drop counter.
fn lossy_run(
    seed: u64,
    calls: u32,
    configure: impl Fn(&MemoryNetwork),
) -> (Vec<Outcome>, usize, u64) {
    let (network, recorders) = network(seed, &[A, B]);
    configure(&network);
    let outcomes = (0..calls).map(|id| call(&network, A, B, id)).collect();
    (outcomes, recorders[1].received_count(), network.dropped())
}

#[test]
fn request_drops_are_deterministic_per_seed_and_skip_the_handler() {
    let lossy = |network: &MemoryNetwork| network.set_request_drop_probability(0.5);
    let (first, handled, dropped) = lossy_run(7, 200, lossy);
    let (again, _, _) = lossy_run(7, 200, lossy);
    let (other_seed, _, _) = lossy_run(8, 200, lossy);

    assert_eq!(first, again, "same seed must give the same outcomes");
    assert_ne!(first, other_seed, "another seed should give other outcomes");
    let answered = first.iter().filter(|o| **o == Outcome::Answered).count();
    let timed_out = first.iter().filter(|o| **o == Outcome::TimedOut).count();
    assert_eq!(answered + timed_out, 200);
    assert!(
        (60..=140).contains(&answered),
        "{answered} of 200 answered at p=0.5"
    );
    // A lost request never reaches the handler.
    assert_eq!(handled, answered);
    assert_eq!(dropped, timed_out as u64);
}

#[test]
fn response_drops_are_deterministic_per_seed_and_run_the_handler() {
    let lossy = |network: &MemoryNetwork| network.set_response_drop_probability(0.3);
    let (first, handled, dropped) = lossy_run(11, 200, lossy);
    let (again, _, _) = lossy_run(11, 200, lossy);
    let (other_seed, _, _) = lossy_run(12, 200, lossy);

    assert_eq!(first, again, "same seed must give the same outcomes");
    assert_ne!(first, other_seed, "another seed should give other outcomes");
    let timed_out = first.iter().filter(|o| **o == Outcome::TimedOut).count();
    assert!(
        (30..=90).contains(&timed_out),
        "{timed_out} of 200 lost at p=0.3"
    );
    // Every request was handled, even those whose answer was lost: what an
    // idempotent producer's retry has to cope with.
    assert_eq!(handled, 200);
    assert_eq!(dropped, timed_out as u64);
}

#[test]
fn drop_probabilities_zero_and_one_are_exact() {
    let (never, handled, dropped) = lossy_run(5, 50, |network| {
        network.set_request_drop_probability(0.0);
        network.set_response_drop_probability(0.0);
    });
    assert!(never.iter().all(|o| *o == Outcome::Answered));
    assert_eq!((handled, dropped), (50, 0));

    let (always, handled, dropped) =
        lossy_run(5, 50, |network| network.set_request_drop_probability(1.0));
    assert!(always.iter().all(|o| *o == Outcome::TimedOut));
    assert_eq!((handled, dropped), (0, 50));
}

#[test]
#[should_panic(expected = "not within [0, 1]")]
fn drop_probability_above_one_is_a_bug() {
    MemoryNetwork::new(0).set_response_drop_probability(1.5);
}

/// Regression guard for the design choice that each link draws from its own
/// stream: traffic on A -> C must not change which A -> B calls are lost,
/// or a simulation would stop replaying from its seed as soon as thread
/// timing changed.
#[test]
fn outcomes_on_one_link_do_not_depend_on_traffic_on_other_links() {
    let lossy = |network: &MemoryNetwork| {
        network.set_request_drop_probability(0.4);
        network.set_response_drop_probability(0.2);
    };
    let (quiet, _) = network(21, &[A, B, C]);
    lossy(&quiet);
    let alone: Vec<Outcome> = (0..100).map(|id| call(&quiet, A, B, id)).collect();

    let (busy, _) = network(21, &[A, B, C]);
    lossy(&busy);
    let interleaved: Vec<Outcome> = (0..100)
        .map(|id| {
            for extra in 0..(id % 3) {
                call(&busy, A, C, 1000 + extra);
                call(&busy, B, A, 2000 + extra);
            }
            call(&busy, A, B, id)
        })
        .collect();
    assert_eq!(alone, interleaved);
}

#[test]
fn drop_next_response_runs_the_handler_but_loses_the_reply_once() {
    let (network, recorders) = network(4, &[A, B]);
    network.drop_next_response(A, B);

    // The link in the other direction is unaffected.
    assert_eq!(call(&network, B, A, 1), Outcome::Answered);
    assert_eq!(call(&network, A, B, 2), Outcome::TimedOut);
    assert_eq!(recorders[1].received_count(), 1, "B's handler ran");
    assert_eq!(call(&network, A, B, 3), Outcome::Answered);
    assert_eq!(network.dropped(), 1);

    // Stacked drops lose that many replies, and a lost request does not use
    // one up (the handler never ran, so there was no reply to lose).
    network.drop_next_response(A, B);
    network.drop_next_response(A, B);
    network.block(A, B);
    assert_eq!(call(&network, A, B, 4), Outcome::TimedOut);
    network.heal();
    assert_eq!(call(&network, A, B, 5), Outcome::TimedOut);
    assert_eq!(call(&network, A, B, 6), Outcome::TimedOut);
    assert_eq!(call(&network, A, B, 7), Outcome::Answered);
    assert_eq!(recorders[1].received_count(), 5);
}

#[test]
fn node_down_fails_traffic_both_ways_as_unreachable_until_node_up() {
    let (network, recorders) = network(6, &[A, B, C]);
    network.node_down(B);

    assert_eq!(call(&network, A, B, 1), Outcome::Unreachable);
    assert_eq!(call(&network, B, A, 2), Outcome::Unreachable);
    assert_eq!(call(&network, A, C, 3), Outcome::Answered);
    assert_eq!(recorders[0].received_count(), 0);
    assert_eq!(recorders[1].received_count(), 0);
    // Failing fast is not a lost message.
    assert_eq!(network.dropped(), 0);

    network.node_up(B);
    assert_eq!(call(&network, A, B, 4), Outcome::Answered);
    assert_eq!(call(&network, B, A, 5), Outcome::Answered);
}

#[test]
fn calls_to_a_node_without_handler_are_unreachable_and_a_transport_works_before_registration() {
    let network = MemoryNetwork::new(9);
    let early = network.transport(A);
    network.register(B, Arc::new(EchoHandler::new(B)));

    let request = sample_fetch_request(A, 1);
    match early.call(C, request.clone(), Instant::now() + Duration::from_secs(5)) {
        Err(TransportError::Unreachable { to, .. }) => assert_eq!(to, C),
        other => panic!("expected Unreachable, got {other:?}"),
    }
    // A has no handler of its own yet, but can already call.
    let got = early
        .call(B, request.clone(), Instant::now() + Duration::from_secs(5))
        .expect("B answers");
    assert_eq!(got, echo_response(B, A, &request));

    network.unregister(B);
    assert!(matches!(
        early.call(B, request, Instant::now() + Duration::from_secs(5)),
        Err(TransportError::Unreachable { .. })
    ));
}

#[test]
fn latency_delays_each_call_and_a_deadline_inside_it_times_out() {
    let (network, recorders) = network(10, &[A, B]);
    let latency = Duration::from_millis(30);
    network.set_latency(latency);

    let started = Instant::now();
    assert_eq!(call(&network, A, B, 1), Outcome::Answered);
    assert!(started.elapsed() >= latency, "{:?}", started.elapsed());

    // A deadline inside the latency: the call gives up at its deadline, not
    // after the whole latency. The latency is made long so that a loaded
    // machine's scheduling delays cannot blur the difference.
    let long_latency = Duration::from_secs(3);
    network.set_latency(long_latency);
    let started = Instant::now();
    let result = network.transport(A).call(
        B,
        sample_epoch_request(A, 2),
        started + Duration::from_millis(5),
    );
    assert!(matches!(result, Err(TransportError::Timeout { to }) if to == B));
    assert!(
        started.elapsed() < long_latency / 2,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        recorders[1].received_count(),
        1,
        "the late request never arrived"
    );
}

#[test]
fn a_lost_message_waits_at_most_its_bound_and_never_past_the_deadline() {
    let network = MemoryNetwork::new(13);
    network.register(B, Arc::new(EchoHandler::new(B)));
    network.set_request_drop_probability(1.0);
    let client = network.transport(A);

    network.set_lost_message_wait_max(Duration::from_millis(40));
    let started = Instant::now();
    let result = client.call(
        B,
        sample_epoch_request(A, 1),
        started + Duration::from_secs(5),
    );
    let elapsed = started.elapsed();
    assert!(matches!(result, Err(TransportError::Timeout { .. })));
    assert!(elapsed >= Duration::from_millis(40), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");

    network.set_lost_message_wait_max(Duration::from_secs(5));
    let started = Instant::now();
    let result = client.call(
        B,
        sample_epoch_request(A, 2),
        started + Duration::from_millis(30),
    );
    let elapsed = started.elapsed();
    assert!(matches!(result, Err(TransportError::Timeout { .. })));
    assert!(elapsed >= Duration::from_millis(30), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

/// A partition that starts while a follower's fetch is held in a long poll
/// loses the answer: the fault is applied when the response travels, not
/// only when the request did.
#[test]
fn partition_during_a_long_poll_loses_the_response() {
    let network = MemoryNetwork::new(14);
    network.set_lost_message_wait_max(Duration::ZERO);
    let leader = Arc::new(LongPollHandler::new(B));
    network.register(B, leader.clone() as Arc<dyn RequestHandler>);
    let follower = network.transport(A);

    let mut fetch = sample_fetch_request(A, 1);
    if let Request::Fetch(request) = &mut fetch {
        request.wait_max = Duration::from_secs(5);
    }
    let poll =
        thread::spawn(move || follower.call(B, fetch, Instant::now() + Duration::from_secs(10)));
    assert!(leader.wait_until_holding(1, Instant::now() + Duration::from_secs(5)));
    network.partition(&[A], &[B]);
    leader.release();

    let result = poll.join().expect("poll thread panicked");
    assert!(
        matches!(result, Err(TransportError::Timeout { to }) if to == B),
        "{result:?}"
    );
    assert_eq!(network.dropped(), 1);
}

#[test]
fn node_going_down_during_a_call_fails_it_as_unreachable() {
    let network = MemoryNetwork::new(15);
    let leader = Arc::new(LongPollHandler::new(B));
    network.register(B, leader.clone() as Arc<dyn RequestHandler>);
    let follower = network.transport(A);

    let mut fetch = sample_fetch_request(A, 1);
    if let Request::Fetch(request) = &mut fetch {
        request.wait_max = Duration::from_secs(5);
    }
    let poll =
        thread::spawn(move || follower.call(B, fetch, Instant::now() + Duration::from_secs(10)));
    assert!(leader.wait_until_holding(1, Instant::now() + Duration::from_secs(5)));
    network.node_down(B);
    leader.release();

    let result = poll.join().expect("poll thread panicked");
    assert!(
        matches!(result, Err(TransportError::Unreachable { to, .. }) if to == B),
        "{result:?}"
    );
}
