//! The in-process network: [`MemoryNetwork`] connects the nodes of one test
//! (or one embedded deployment) and injects faults; [`MemoryTransport`] is
//! one node's client on it.
//!
//! This module owns message delivery and its failures (partitions, lost
//! requests, lost responses, latency, nodes going down). It does not own what
//! a handler does with a request, and it never copies or encodes a message:
//! the request value moves into the handler and the response value moves
//! back.
//!
//! It is a *direct-call* network: [`Transport::call`] runs the destination's
//! handler in the caller's thread, with no thread hop, so a round trip costs a
//! function call. The price is that a handler's long poll blocks the caller
//! for as long as the handler holds the request (bounded by the request's
//! `wait_max`), and the caller's deadline cannot cut a running handler short:
//! a response that comes back after the deadline is thrown away and the call
//! returns [`TransportError::Timeout`], as a real client that stopped waiting
//! would.
//!
//! Faults are deterministic for a seed: each directed link `(from, to)` has
//! its own random stream derived from the network seed and the two node ids,
//! and every call on the link consumes exactly two draws (request lost?,
//! response lost?) whatever the probabilities are. The outcomes on one link
//! are therefore a function of the seed and the number of earlier calls *on
//! that link*, independent of how threads on other links interleave.
//!
//! Messages can also arrive late or twice (issue 28's simulated network):
//! a request held back in the network (its caller times out as for a lost
//! one) and handed to the handler later, or delivered and handed to the
//! handler again later, possibly while the first delivery still runs
//! ([`MemoryNetwork::set_late_delivery`]). Which calls that happens to
//! comes from a second stream per link (three draws per call while it is
//! on, none while it is off), so that
//! turning it on does not change the drops of a seed; whether a late
//! request is still delivered also depends on the global bound on those in
//! flight and on what the nodes and links are when it arrives. Their
//! responses reach nobody; a late request is handed to the handler
//! registered for its destination when it arrives (a restarted node's new
//! one), unless a node is down or the link blocked by then.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use crate::sync::{Arc, AtomicU64, Mutex, Ordering};
use crate::types::NodeId;

use super::{Request, RequestHandler, Response, Transport, TransportError};
use crate::rng::{mix64, SplitMix64};

/// At most this many late or duplicate requests are on their way at once;
/// more are simply lost (each waits on a thread of its own).
const LATE_IN_FLIGHT_MAX: u64 = 64;

/// Salt of the per-link streams that decide late and duplicate delivery.
const LATE_STREAM_SALT: u64 = 0x6C61_7465_2064_7570; // "late dup"

/// How long a caller whose request or response was lost waits before it gets
/// `Timeout`, unless its deadline comes first. A real lost packet is only
/// noticed at the deadline; waiting the whole deadline would make every
/// fault test slow, and returning at once would make a retry loop spin.
const LOST_MESSAGE_WAIT_MAX_DEFAULT: Duration = Duration::from_millis(20);

/// The hub connecting every node of one in-process network, and the place
/// faults are injected. Cloning is cheap and shares the same network.
#[derive(Clone)]
pub struct MemoryNetwork {
    hub: Arc<Hub>,
}

/// One node's client on a [`MemoryNetwork`]: calls made *by* that node.
#[derive(Clone)]
pub struct MemoryTransport {
    hub: Arc<Hub>,
    me: NodeId,
}

struct Hub {
    seed: u64,
    state: Mutex<HubState>,
    /// Every call made, whatever its outcome.
    calls: AtomicU64,
    /// Calls whose request or response was lost (by probability, by a
    /// one-shot drop, or by a blocked link).
    dropped: AtomicU64,
    /// Requests delivered late or a second time so far.
    late_delivered: AtomicU64,
    /// Late or duplicate requests on their way now (bounded by
    /// [`LATE_IN_FLIGHT_MAX`]).
    late_in_flight: AtomicU64,
}

struct HubState {
    handlers: HashMap<NodeId, Arc<dyn RequestHandler>>,
    /// Directed links `(from, to)` on which messages are lost.
    blocked: HashSet<(NodeId, NodeId)>,
    /// Nodes that neither send nor receive anything.
    down: HashSet<NodeId>,
    /// Invariant: within `[0, 1]`.
    request_drop_probability: f64,
    /// Invariant: within `[0, 1]`.
    response_drop_probability: f64,
    /// Pending one-shot response drops per link `(caller, callee)`.
    drop_next_response: HashMap<(NodeId, NodeId), u32>,
    latency: Duration,
    lost_message_wait_max: Duration,
    /// One random stream per directed link, created on the link's first call.
    link_rngs: HashMap<(NodeId, NodeId), SplitMix64>,
    /// Invariant: within `[0, 1]`.
    late_probability: f64,
    /// Invariant: within `[0, 1]`.
    duplicate_probability: f64,
    /// A late or duplicate request arrives between half this and this long
    /// after its call.
    late_delay_max: Duration,
    /// The streams of late and duplicate delivery, one per directed link.
    late_rngs: HashMap<(NodeId, NodeId), SplitMix64>,
}

impl HubState {
    /// Panics if the fault settings are inconsistent. Called after every
    /// change in debug builds.
    fn check_invariants(&self) {
        assert!((0.0..=1.0).contains(&self.request_drop_probability));
        assert!((0.0..=1.0).contains(&self.response_drop_probability));
        assert!((0.0..=1.0).contains(&self.late_probability));
        assert!((0.0..=1.0).contains(&self.duplicate_probability));
        assert!(self.drop_next_response.values().all(|&count| count > 0));
    }

    fn is_down(&self, node: NodeId) -> bool {
        self.down.contains(&node)
    }

    fn is_blocked(&self, from: NodeId, to: NodeId) -> bool {
        self.blocked.contains(&(from, to))
    }
}

/// What the hub decided about a call before the handler runs; taken under the
/// lock and used after it is released.
struct Dispatch {
    handler: Arc<dyn RequestHandler>,
    request_lost: bool,
    response_lost_by_chance: bool,
    latency: Duration,
    lost_message_wait_max: Duration,
    /// Held back by the network: handed to the handler after this delay,
    /// and the caller times out.
    late: Option<Duration>,
    /// Delivered, and again after this delay.
    duplicate: Option<Duration>,
}

impl MemoryNetwork {
    /// An empty network whose random faults are fixed by `seed`.
    pub fn new(seed: u64) -> MemoryNetwork {
        MemoryNetwork {
            hub: Arc::new(Hub {
                seed,
                state: Mutex::new(HubState {
                    handlers: HashMap::new(),
                    blocked: HashSet::new(),
                    down: HashSet::new(),
                    request_drop_probability: 0.0,
                    response_drop_probability: 0.0,
                    drop_next_response: HashMap::new(),
                    latency: Duration::ZERO,
                    lost_message_wait_max: LOST_MESSAGE_WAIT_MAX_DEFAULT,
                    link_rngs: HashMap::new(),
                    late_probability: 0.0,
                    duplicate_probability: 0.0,
                    late_delay_max: Duration::ZERO,
                    late_rngs: HashMap::new(),
                }),
                calls: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                late_delivered: AtomicU64::new(0),
                late_in_flight: AtomicU64::new(0),
            }),
        }
    }

    /// The seed the network's random faults derive from.
    pub fn seed(&self) -> u64 {
        self.hub.seed
    }

    /// Makes `node` answer calls with `handler`, replacing any earlier
    /// handler (a restarted node registers again).
    pub fn register(&self, node: NodeId, handler: Arc<dyn RequestHandler>) {
        self.hub.state.lock().handlers.insert(node, handler);
    }

    /// Removes `node`'s handler: later calls to it fail as `Unreachable`.
    /// Calls already inside the handler finish normally.
    pub fn unregister(&self, node: NodeId) {
        self.hub.state.lock().handlers.remove(&node);
    }

    /// The client for calls made by `node`. It may be taken before `node`
    /// registers a handler (a node is built with its transport, then
    /// registered).
    pub fn transport(&self, node: NodeId) -> MemoryTransport {
        MemoryTransport {
            hub: Arc::clone(&self.hub),
            me: node,
        }
    }

    /// Cuts every link between a node of `side_a` and a node of `side_b`, in
    /// both directions. Links within one side keep working.
    pub fn partition(&self, side_a: &[NodeId], side_b: &[NodeId]) {
        let mut state = self.hub.state.lock();
        for &a in side_a {
            for &b in side_b {
                state.blocked.insert((a, b));
                state.blocked.insert((b, a));
            }
        }
        tracing::debug!(?side_a, ?side_b, "memory network: partition");
    }

    /// Cuts the one direction `from -> to`. Requests `from` sends to `to`
    /// are lost, and so are responses `from` sends back to calls made by
    /// `to` (a handler on `from` runs, but `to` never hears back).
    pub fn block(&self, from: NodeId, to: NodeId) {
        self.hub.state.lock().blocked.insert((from, to));
        tracing::debug!(%from, %to, "memory network: block");
    }

    /// Removes every partition and block. Does not bring nodes up and does
    /// not reset drop probabilities or latency.
    pub fn heal(&self) {
        self.hub.state.lock().blocked.clear();
        tracing::debug!("memory network: heal");
    }

    /// Each request is lost before its handler runs with this probability;
    /// the caller gets `Timeout`.
    ///
    /// # Panics
    /// If `probability` is not within `[0, 1]`: that is a bug in the test.
    pub fn set_request_drop_probability(&self, probability: f64) {
        assert!(
            (0.0..=1.0).contains(&probability),
            "drop probability {probability} is not within [0, 1]"
        );
        self.hub.state.lock().request_drop_probability = probability;
    }

    /// Each response is lost after its handler ran with this probability; the
    /// caller gets `Timeout` although the request took effect (what an
    /// idempotent producer's retry must cope with).
    ///
    /// # Panics
    /// If `probability` is not within `[0, 1]`: that is a bug in the test.
    pub fn set_response_drop_probability(&self, probability: f64) {
        assert!(
            (0.0..=1.0).contains(&probability),
            "drop probability {probability} is not within [0, 1]"
        );
        self.hub.state.lock().response_drop_probability = probability;
    }

    /// The next call `from` makes to `to` runs `to`'s handler, and its
    /// response is then lost: the caller gets `Timeout`. Calling this `n`
    /// times loses the next `n` responses on that link. Calls whose request
    /// never reaches the handler do not use up a drop.
    pub fn drop_next_response(&self, from: NodeId, to: NodeId) {
        let mut state = self.hub.state.lock();
        *state.drop_next_response.entry((from, to)).or_insert(0) += 1;
        if cfg!(debug_assertions) {
            state.check_invariants();
        }
    }

    /// Messages that arrive late or twice: each request is, with
    /// `late_probability`, held back by the network (its caller gets
    /// `Timeout` as for a lost request) and handed to the handler between
    /// half of `delay_max` and `delay_max` later; and, with
    /// `duplicate_probability`, delivered normally and handed to the
    /// handler once more as late. Responses to those deliveries reach nobody. What a real
    /// network does to a retransmitted or long-queued packet: a fetch from
    /// a follower that has since restarted, or moved on, reaches its leader
    /// after newer ones. Both 0 (the default) turn it off.
    ///
    /// # Panics
    /// If a probability is not within `[0, 1]`: that is a bug in the test.
    pub fn set_late_delivery(
        &self,
        late_probability: f64,
        duplicate_probability: f64,
        delay_max: Duration,
    ) {
        for probability in [late_probability, duplicate_probability] {
            assert!(
                (0.0..=1.0).contains(&probability),
                "late or duplicate delivery probability {probability} is not within [0, 1]"
            );
        }
        let mut state = self.hub.state.lock();
        state.late_probability = late_probability;
        state.duplicate_probability = duplicate_probability;
        state.late_delay_max = delay_max;
    }

    /// Number of requests handed to a handler late or a second time so far
    /// ([`MemoryNetwork::set_late_delivery`]).
    pub fn late_delivered(&self) -> u64 {
        self.hub.late_delivered.load(Ordering::Relaxed)
    }

    /// Delay added to every call before the handler runs.
    pub fn set_latency(&self, latency: Duration) {
        self.hub.state.lock().latency = latency;
    }

    /// How long a caller whose message was lost waits before `Timeout` when
    /// its deadline is further away (default 20 ms).
    pub fn set_lost_message_wait_max(&self, wait_max: Duration) {
        self.hub.state.lock().lost_message_wait_max = wait_max;
    }

    /// Takes `node` off the network: every call to or from it fails at once
    /// as `Unreachable`, and a response it owes is not delivered. Its handler
    /// stays registered for [`MemoryNetwork::node_up`].
    pub fn node_down(&self, node: NodeId) {
        self.hub.state.lock().down.insert(node);
        tracing::debug!(%node, "memory network: node down");
    }

    /// Puts `node` back on the network.
    pub fn node_up(&self, node: NodeId) {
        self.hub.state.lock().down.remove(&node);
        tracing::debug!(%node, "memory network: node up");
    }

    /// Number of calls made so far, whatever their outcome.
    pub fn calls(&self) -> u64 {
        self.hub.calls.load(Ordering::Relaxed)
    }

    /// Number of calls whose request or response was lost (by probability,
    /// one-shot drop or blocked link). Calls to a down or unknown node fail
    /// as `Unreachable` and are not counted here.
    pub fn dropped(&self) -> u64 {
        self.hub.dropped.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for MemoryNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.hub.state.lock();
        let mut nodes: Vec<NodeId> = state.handlers.keys().copied().collect();
        nodes.sort();
        f.debug_struct("MemoryNetwork")
            .field("seed", &self.hub.seed)
            .field("nodes", &nodes)
            .field("blocked_links", &state.blocked.len())
            .field("down", &state.down)
            .field("calls", &self.calls())
            .field("dropped", &self.dropped())
            .finish()
    }
}

impl MemoryTransport {
    /// The node this client calls from.
    pub fn node(&self) -> NodeId {
        self.me
    }

    /// Decides, under the hub's lock, whether and how the call is delivered.
    fn dispatch(&self, to: NodeId) -> Result<Dispatch, TransportError> {
        let from = self.me;
        let mut state = self.hub.state.lock();
        if state.is_down(from) || state.is_down(to) {
            let down = if state.is_down(from) { from } else { to };
            return Err(TransportError::Unreachable {
                to,
                reason: format!("{down} is down"),
            });
        }
        let Some(handler) = state.handlers.get(&to).map(Arc::clone) else {
            return Err(TransportError::Unreachable {
                to,
                reason: "no handler registered".into(),
            });
        };
        let seed = self.hub.seed;
        let request_drop_probability = state.request_drop_probability;
        let response_drop_probability = state.response_drop_probability;
        let rng = state
            .link_rngs
            .entry((from, to))
            .or_insert_with(|| SplitMix64::new(link_seed(seed, from, to)));
        // Both draws happen on every call so that a link's outcomes do not
        // depend on which probabilities were set for earlier calls.
        let lost_by_chance = rng.chance(request_drop_probability);
        let response_lost_by_chance = rng.chance(response_drop_probability);
        // Off (the default, and every benchmark): no lookup and no draw on
        // the call path. On: three draws per call, whatever the
        // probabilities, from the link's own stream.
        let (late, duplicate) =
            if state.late_probability > 0.0 || state.duplicate_probability > 0.0 {
                let (late_probability, duplicate_probability) =
                    (state.late_probability, state.duplicate_probability);
                let delay_max = state.late_delay_max;
                let late_rng = state.late_rngs.entry((from, to)).or_insert_with(|| {
                    SplitMix64::new(link_seed(seed ^ LATE_STREAM_SALT, from, to))
                });
                let late = late_rng.chance(late_probability);
                let duplicate = late_rng.chance(duplicate_probability);
                let delay = delay_max.mul_f64(0.5 + 0.5 * late_rng.next_f64());
                (late.then_some(delay), (duplicate && !late).then_some(delay))
            } else {
                (None, None)
            };
        Ok(Dispatch {
            handler,
            request_lost: lost_by_chance || state.is_blocked(from, to),
            response_lost_by_chance,
            latency: state.latency,
            lost_message_wait_max: state.lost_message_wait_max,
            late,
            duplicate,
        })
    }

    /// Decides, under the hub's lock and after the handler ran, whether the
    /// response reaches the caller. Faults injected while the handler ran
    /// (a partition during a long poll) apply to the response.
    fn deliver(&self, to: NodeId, response_lost_by_chance: bool) -> Result<(), Lost> {
        let from = self.me;
        let mut state = self.hub.state.lock();
        if state.is_down(from) || state.is_down(to) {
            let down = if state.is_down(from) { from } else { to };
            return Err(Lost::Unreachable(format!(
                "{down} went down before the response was delivered"
            )));
        }
        let one_shot = match state.drop_next_response.get_mut(&(from, to)) {
            Some(count) => {
                *count -= 1;
                if *count == 0 {
                    state.drop_next_response.remove(&(from, to));
                }
                true
            }
            None => false,
        };
        let blocked = state.is_blocked(to, from);
        if cfg!(debug_assertions) {
            state.check_invariants();
        }
        if one_shot || blocked || response_lost_by_chance {
            Err(Lost::Response)
        } else {
            Ok(())
        }
    }

    /// Hands `request` to `to`'s handler after `delay`, on a thread of its
    /// own, unless [`LATE_IN_FLIGHT_MAX`] are on their way already (then it
    /// is lost). At arrival the handler registered then is called, unless
    /// either node is down or the link blocked; its response is dropped.
    fn deliver_later(&self, to: NodeId, request: Request, delay: Duration) {
        let hub = &self.hub;
        let before = hub.late_in_flight.fetch_add(1, Ordering::SeqCst);
        if before >= LATE_IN_FLIGHT_MAX {
            hub.late_in_flight.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        let hub = Arc::clone(hub);
        let from = self.me;
        crate::simulation::forbid_in_simulation("spawning a late delivery thread");
        let spawned = thread::Builder::new()
            .name("isrlog-memory-late".into())
            .spawn(move || {
                // Frees the slot however the delivery ends, a panicking
                // handler included.
                let _slot = InFlight(&hub.late_in_flight);
                thread::sleep(delay);
                let handler = {
                    let state = hub.state.lock();
                    let cut =
                        state.is_down(from) || state.is_down(to) || state.is_blocked(from, to);
                    if cut {
                        None
                    } else {
                        state.handlers.get(&to).map(Arc::clone)
                    }
                };
                if let Some(handler) = handler {
                    tracing::debug!(%from, %to, ?delay, "memory network: a request arrives late");
                    hub.late_delivered.fetch_add(1, Ordering::Relaxed);
                    let _ = handler.handle(from, request);
                }
            });
        if spawned.is_err() {
            self.hub.late_in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// A lost message looks like silence: wait a little (never past the
    /// deadline), then time out.
    fn lose(
        &self,
        to: NodeId,
        what: &str,
        wait_max: Duration,
        deadline: Instant,
    ) -> TransportError {
        self.hub.dropped.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(from = %self.me, %to, "memory network: {what} lost");
        sleep_until(deadline.min(Instant::now() + wait_max));
        TransportError::Timeout { to }
    }
}

enum Lost {
    Unreachable(String),
    Response,
}

/// One late delivery counted in [`Hub::late_in_flight`], until dropped.
struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        // Each slot is taken once (`deliver_later`) and freed once, here.
        // (The count may pass the bound for a moment while a caller over it
        // backs out, so only its floor is checked.)
        let before = self.0.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(before > 0, "a late delivery freed a slot nobody took");
    }
}

impl fmt::Debug for MemoryTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryTransport")
            .field("node", &self.me)
            .finish_non_exhaustive()
    }
}

impl Transport for MemoryTransport {
    fn call(
        &self,
        to: NodeId,
        request: Request,
        deadline: Instant,
    ) -> Result<Response, TransportError> {
        self.hub.calls.fetch_add(1, Ordering::Relaxed);
        let dispatch = self.dispatch(to)?;
        if Instant::now() >= deadline {
            return Err(TransportError::Timeout { to });
        }
        if !dispatch.latency.is_zero() {
            let arrival = Instant::now() + dispatch.latency;
            if arrival >= deadline {
                sleep_until(deadline);
                return Err(TransportError::Timeout { to });
            }
            sleep_until(arrival);
        }
        if dispatch.request_lost {
            return Err(self.lose(to, "request", dispatch.lost_message_wait_max, deadline));
        }
        if let Some(delay) = dispatch.late {
            self.deliver_later(to, request, delay);
            return Err(self.lose(
                to,
                "request (late)",
                dispatch.lost_message_wait_max,
                deadline,
            ));
        }
        if let Some(delay) = dispatch.duplicate {
            self.deliver_later(to, request.clone(), delay);
        }
        // The hub's lock is not held here: handlers block (long poll) and
        // call back into the network.
        let response = dispatch.handler.handle(self.me, request);
        match self.deliver(to, dispatch.response_lost_by_chance) {
            Ok(()) => {}
            Err(Lost::Unreachable(reason)) => {
                return Err(TransportError::Unreachable { to, reason });
            }
            Err(Lost::Response) => {
                return Err(self.lose(to, "response", dispatch.lost_message_wait_max, deadline));
            }
        }
        if Instant::now() > deadline {
            // The handler ran past the caller's deadline; a real client would
            // have stopped waiting, so the late response is discarded.
            tracing::debug!(from = %self.me, %to, "memory network: response arrived after the deadline");
            return Err(TransportError::Timeout { to });
        }
        Ok(response)
    }
}

/// The seed of link `(from, to)`'s random stream: independent for each
/// directed link, and fixed by the network seed.
fn link_seed(seed: u64, from: NodeId, to: NodeId) -> u64 {
    let link = (u64::from(from.0) << 32) | u64::from(to.0);
    mix64(seed ^ mix64(link))
}

#[track_caller]
fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        crate::simulation::forbid_in_simulation("a simulated network delay");
        thread::sleep(deadline - now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::transport_suite::{self, MemoryTransportFactory};
    use crate::testing::EchoHandler;

    #[test]
    fn memory_transport_passes_the_conformance_suite() {
        transport_suite::run(MemoryTransportFactory::new(7));
    }

    #[test]
    fn link_seeds_differ_per_direction_and_per_network_seed() {
        let (a, b) = (NodeId(1), NodeId(2));
        assert_ne!(link_seed(1, a, b), link_seed(1, b, a));
        assert_ne!(link_seed(1, a, b), link_seed(2, a, b));
        assert_eq!(link_seed(1, a, b), link_seed(1, a, b));
    }

    #[test]
    fn handler_may_call_back_into_the_network_without_deadlock() {
        let network = MemoryNetwork::new(1);
        let (a, b, c) = (NodeId(1), NodeId(2), NodeId(3));
        network.register(c, Arc::new(EchoHandler::new(c)));
        // b's handler forwards every request to c through the same network,
        // which must not be locked while b's handler runs.
        let forward = network.transport(b);
        network.register(
            b,
            Arc::new(crate::testing::FnHandler::new(move |_from, request| {
                let deadline = Instant::now() + Duration::from_secs(5);
                match forward.call(c, request, deadline) {
                    Ok(response) => response,
                    Err(_) => Response::Error(super::super::ErrorCode::Unknown),
                }
            })),
        );
        let request = crate::testing::sample_epoch_request(a, 9);
        let expected = crate::testing::echo_response(c, b, &request);
        let got = network
            .transport(a)
            .call(b, request, Instant::now() + Duration::from_secs(5))
            .expect("forwarded call succeeds");
        assert_eq!(got, expected);
        assert_eq!(network.calls(), 2);
    }

    /// Records what reaches a handler, and when.
    fn recording_handler(
        network: &MemoryNetwork,
        node: NodeId,
    ) -> Arc<std::sync::Mutex<Vec<(Request, Instant)>>> {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        network.register(
            node,
            Arc::new(crate::testing::FnHandler::new(move |from, request| {
                let response = crate::testing::echo_response(node, from, &request);
                record.lock().unwrap().push((request, Instant::now()));
                response
            })),
        );
        seen
    }

    fn wait_for(seen: &std::sync::Mutex<Vec<(Request, Instant)>>, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while seen.lock().unwrap().len() < count {
            assert!(Instant::now() < deadline, "only {:?}", seen.lock().unwrap());
            thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_late_request_times_out_for_its_caller_and_reaches_the_handler_later() {
        let network = MemoryNetwork::new(3);
        let (a, b) = (NodeId(1), NodeId(2));
        let seen = recording_handler(&network, b);
        network.set_late_delivery(1.0, 0.0, Duration::from_millis(50));
        let request = crate::testing::sample_epoch_request(a, 9);
        let called = Instant::now();
        let got = network
            .transport(a)
            .call(b, request.clone(), called + Duration::from_secs(5));
        assert_eq!(got, Err(TransportError::Timeout { to: b }));
        wait_for(&seen, 1);
        assert_eq!(seen.lock().unwrap()[0].0, request);
        assert_eq!(network.late_delivered(), 1);
        // Off again: the next call is answered at once, and nothing more
        // arrives.
        network.set_late_delivery(0.0, 0.0, Duration::ZERO);
        let second = crate::testing::sample_epoch_request(a, 10);
        let got =
            network
                .transport(a)
                .call(b, second.clone(), Instant::now() + Duration::from_secs(5));
        assert!(got.is_ok(), "{got:?}");
        thread::sleep(Duration::from_millis(100));
        assert_eq!(seen.lock().unwrap().len(), 2);
        assert_eq!(seen.lock().unwrap()[1].0, second);
    }

    #[test]
    fn a_duplicate_request_is_answered_and_reaches_the_handler_again() {
        let network = MemoryNetwork::new(4);
        let (a, b) = (NodeId(1), NodeId(2));
        let seen = recording_handler(&network, b);
        network.set_late_delivery(0.0, 1.0, Duration::from_millis(20));
        let request = crate::testing::sample_epoch_request(a, 9);
        let got =
            network
                .transport(a)
                .call(b, request.clone(), Instant::now() + Duration::from_secs(5));
        assert_eq!(got, Ok(crate::testing::echo_response(b, a, &request)));
        wait_for(&seen, 2);
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0].0, request);
        assert_eq!(seen[1].0, request);
        assert!(seen[1].1 >= seen[0].1);
    }

    #[test]
    fn a_late_request_to_a_node_gone_down_is_lost() {
        let network = MemoryNetwork::new(5);
        let (a, b) = (NodeId(1), NodeId(2));
        let seen = recording_handler(&network, b);
        network.set_late_delivery(1.0, 0.0, Duration::from_millis(400));
        let request = crate::testing::sample_epoch_request(a, 9);
        let got = network
            .transport(a)
            .call(b, request, Instant::now() + Duration::from_millis(10));
        assert_eq!(got, Err(TransportError::Timeout { to: b }));
        network.node_down(b);
        thread::sleep(Duration::from_millis(500));
        assert!(seen.lock().unwrap().is_empty());
        assert_eq!(network.late_delivered(), 0);
    }

    #[test]
    fn late_delivery_draws_leave_the_drops_of_a_seed_unchanged() {
        // The same seed loses the same calls with late delivery on or off.
        let outcomes = |late: bool| {
            let network = MemoryNetwork::new(11);
            let (a, b) = (NodeId(1), NodeId(2));
            network.register(b, Arc::new(EchoHandler::new(b)));
            network.set_lost_message_wait_max(Duration::ZERO);
            network.set_request_drop_probability(0.3);
            if late {
                network.set_late_delivery(0.0, 0.5, Duration::from_millis(1));
            }
            (0..40)
                .map(|i| {
                    let request = crate::testing::sample_epoch_request(a, i);
                    network
                        .transport(a)
                        .call(b, request, Instant::now() + Duration::from_secs(5))
                        .is_ok()
                })
                .collect::<Vec<bool>>()
        };
        assert_eq!(outcomes(false), outcomes(true));
    }
}
