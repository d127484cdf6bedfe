//! The TCP server's bounds against hostile or broken peers: the shared
//! budget for bytes of partly received frames, the rule that picks which
//! connection gets a slot, and the counters that show each bound at work.
//!
//! This module owns the arithmetic of those bounds. It does not own sockets
//! or threads (`server.rs` applies the rules to its connections, `io.rs`
//! reads frames under a deadline), nor what a request means.
//!
//! - **Frame budget.** A body larger than [`SMALL_BODY_BYTES`] is read only
//!   after its whole length is reserved from one budget shared by every
//!   connection of a server (`TcpConfig::frame_buffer_bytes_max`). A reader
//!   that finds the budget spent stops reading its socket until bytes are
//!   freed or its frame deadline passes: Kafka's `queued.max.request.bytes`,
//!   which mutes sockets while its memory pool is empty. The bytes are given
//!   back once the request has been answered (or refused): Kafka gives them
//!   back once the body is parsed, except for produce requests, which keep
//!   them until handled; here every large request keeps them, because a
//!   decoded fetch naming many logs takes more memory than its frame, and a
//!   queue of such requests would otherwise escape the budget. Small bodies skip the
//!   budget: each connection holds at most one, so together they are bounded
//!   by `server_connections_max × SMALL_BODY_BYTES`, and a replica's small
//!   fetch request is never stuck behind an attacker's large stalled frame.
//! - **Connection slots.** A new connection is refused when its address
//!   already holds `connections_per_address_max` (Kafka's
//!   `max.connections.per.ip`). When every slot is taken, the oldest
//!   connection that has not yet sent a valid request frame is closed to make
//!   room, as Kafka's KIP-402 closes the least recently used connection of
//!   another listener so that the inter-broker listener always gets in; only
//!   if every connection has proven itself is the new one refused.
//! - **Warnings.** [`RateLimitedWarnings`] lets the first warning of a kind
//!   through each interval and counts the rest, so a flood of refused
//!   connections costs a few log lines, each saying how many it stands for.
//!   The node's request handler uses it too, for requests it refuses.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::sync::{Arc, AtomicU64, Condvar, Mutex, Ordering};

/// Bodies up to this size are read without a reservation from the frame
/// budget (see the module doc): every request a replica sends in normal
/// operation (a fetch naming up to about two thousand logs) fits.
pub(crate) const SMALL_BODY_BYTES: usize = 64 * 1024;

/// Longest a reader waiting for the frame budget sleeps before it looks
/// again at whether its connection was closed meanwhile.
const BUDGET_WAIT_SLICE: Duration = Duration::from_millis(100);

/// Counters of a [`TcpServer`](super::TcpServer)'s limits at work, read with
/// [`TcpServer::stats`](super::TcpServer::stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpServerStats {
    /// Connections open now.
    pub connections: usize,
    /// Bytes reserved now for large frame bodies being received, or for
    /// requests from them not yet answered (at most
    /// `TcpConfig::frame_buffer_bytes_max`).
    pub buffered_frame_bytes: usize,
    /// The most `buffered_frame_bytes` has been since the server started.
    pub buffered_frame_bytes_peak: usize,
    /// Frame bodies that had to wait for the frame budget before being read.
    pub frames_waited_for_budget: u64,
    /// New connections refused: over `connections_per_address_max`, or every
    /// slot taken by connections that have sent valid frames.
    pub connections_refused: u64,
    /// Connections closed to make room for a new one because they had not
    /// sent a valid request frame yet.
    pub connections_evicted: u64,
    /// Connections closed because no valid request frame arrived within
    /// `handshake_timeout` of the connection being accepted.
    pub handshake_timeouts: u64,
    /// Connections closed because a frame was not whole within
    /// `frame_read_timeout` of its first byte.
    pub frame_timeouts: u64,
    /// Connections closed because a response was not written within
    /// `write_timeout` (waiting for the connection's writer included): a
    /// peer that stopped reading, or reads too slowly.
    pub write_timeouts: u64,
    /// Times a connection's reader stopped reading because
    /// `requests_in_flight_max` of its requests were unanswered.
    pub reads_paused_for_in_flight: u64,
}

/// The counters a server bumps as its limits act; see [`TcpServerStats`].
#[derive(Debug)]
pub(crate) struct LimitCounters {
    pub(crate) connections_refused: AtomicU64,
    pub(crate) connections_evicted: AtomicU64,
    pub(crate) handshake_timeouts: AtomicU64,
    pub(crate) frame_timeouts: AtomicU64,
    pub(crate) write_timeouts: AtomicU64,
    pub(crate) reads_paused_for_in_flight: AtomicU64,
}

impl LimitCounters {
    /// All counters at zero. (Not `Default`: loom's atomics have none.)
    pub(crate) fn new() -> LimitCounters {
        LimitCounters {
            connections_refused: AtomicU64::new(0),
            connections_evicted: AtomicU64::new(0),
            handshake_timeouts: AtomicU64::new(0),
            frame_timeouts: AtomicU64::new(0),
            write_timeouts: AtomicU64::new(0),
            reads_paused_for_in_flight: AtomicU64::new(0),
        }
    }

    /// Adds one to `counter`.
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The bytes a server may hold in frame bodies it is receiving, shared by all
/// its connections.
#[derive(Debug)]
pub(crate) struct FrameBudget {
    limit: usize,
    state: Mutex<BudgetState>,
    freed: Condvar,
}

#[derive(Debug, Default)]
struct BudgetState {
    /// Invariant: `reserved <= limit` and `reserved <= peak`.
    reserved: usize,
    peak: usize,
    waited: u64,
}

/// Bytes held from a [`FrameBudget`]; given back on drop.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Option<Arc<FrameBudget>>,
    bytes: usize,
}

/// Why a reservation was not made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BudgetRefusal {
    /// The deadline passed while the budget stayed spent.
    DeadlinePassed,
    /// The caller's `give_up` said to stop waiting (the connection closed).
    GaveUp,
}

impl FrameBudget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: usize) -> FrameBudget {
        FrameBudget {
            limit,
            state: Mutex::new(BudgetState::default()),
            freed: Condvar::new(),
        }
    }

    /// Reserves `bytes` for a frame body, waiting while the budget is spent
    /// until `deadline` or until `give_up()` says so. Bodies of at most
    /// [`SMALL_BODY_BYTES`] get an empty reservation at once.
    pub(crate) fn reserve(
        self: &Arc<Self>,
        bytes: usize,
        deadline: Instant,
        give_up: impl Fn() -> bool,
    ) -> Result<Reservation, BudgetRefusal> {
        if bytes <= SMALL_BODY_BYTES {
            return Ok(Reservation {
                budget: None,
                bytes: 0,
            });
        }
        // Config validation keeps every frame within the budget, so a lone
        // frame always fits once the others are gone.
        debug_assert!(bytes <= self.limit, "frame of {bytes} B over the budget");
        let mut state = self.state.lock();
        let mut waited = false;
        while state.reserved + bytes > self.limit {
            if !waited {
                waited = true;
                state.waited += 1;
            }
            if give_up() {
                return Err(BudgetRefusal::GaveUp);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(BudgetRefusal::DeadlinePassed);
            }
            let wake = deadline.min(now + BUDGET_WAIT_SLICE);
            let _ = self.freed.wait_until(&mut state, wake);
        }
        state.reserved += bytes;
        state.peak = state.peak.max(state.reserved);
        state.check_invariants(self.limit);
        Ok(Reservation {
            budget: Some(Arc::clone(self)),
            bytes,
        })
    }

    /// Bytes reserved now, the most ever reserved at once, and how many
    /// reservations had to wait.
    pub(crate) fn usage(&self) -> (usize, usize, u64) {
        let state = self.state.lock();
        (state.reserved, state.peak, state.waited)
    }

    fn release(&self, bytes: usize) {
        let mut state = self.state.lock();
        debug_assert!(state.reserved >= bytes, "released more than reserved");
        state.reserved = state.reserved.saturating_sub(bytes);
        state.check_invariants(self.limit);
        drop(state);
        self.freed.notify_all();
    }
}

impl BudgetState {
    fn check_invariants(&self, limit: usize) {
        debug_assert!(self.reserved <= limit, "{} > {limit}", self.reserved);
        debug_assert!(self.reserved <= self.peak);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(budget) = self.budget.take() {
            budget.release(self.bytes);
        }
    }
}

/// What the connection table looks like to the slot rule: one entry per open
/// connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotView {
    /// The connection's id in the server's table.
    pub(crate) id: u64,
    /// The peer's address.
    pub(crate) ip: IpAddr,
    /// When it was accepted.
    pub(crate) accepted_at: Instant,
    /// Whether it has sent a valid request frame.
    pub(crate) proven: bool,
}

/// What to do with a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotDecision {
    /// Take a free slot.
    Admit,
    /// Take the slot of connection `id`, which must be closed first.
    Evict(u64),
    /// Its address already holds the most connections one address may.
    RefuseAddress,
    /// Every slot is held by a connection that has sent valid frames.
    RefuseFull,
}

/// The slot rule (see the module doc) for a new connection from `ip`, given
/// the connections open now.
pub(crate) fn decide_slot(
    open: &[SlotView],
    ip: IpAddr,
    connections_max: usize,
    per_address_max: usize,
) -> SlotDecision {
    if open.iter().filter(|slot| slot.ip == ip).count() >= per_address_max {
        return SlotDecision::RefuseAddress;
    }
    if open.len() < connections_max {
        return SlotDecision::Admit;
    }
    match open
        .iter()
        .filter(|slot| !slot.proven)
        .min_by_key(|slot| (slot.accepted_at, slot.id))
    {
        Some(oldest) => SlotDecision::Evict(oldest.id),
        None => SlotDecision::RefuseFull,
    }
}

/// The kinds of warning a peer can provoke at will, each rate-limited on
/// its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Warning {
    /// A new connection was refused.
    ConnectionRefused,
    /// An unproven connection was closed to make room.
    ConnectionEvicted,
    /// A connection sent no valid frame before the handshake deadline.
    HandshakeTimeout,
    /// A connection was closed for a bad, late or oversized frame.
    BadFrame,
    /// A request found the handler queue full.
    QueueFull,
    /// A node refused a request as invalid (see `node.rs`).
    InvalidRequest,
    /// A response was not written within the write deadline.
    WriteTimeout,
    /// `accept` on the listener failed (out of file descriptors, ...).
    AcceptFailed,
    /// An accepted connection could not be set up (socket options, TLS
    /// session).
    ConnectionSetup,
    /// A response was over `frame_bytes_max` and replaced by an error.
    ResponseTooLarge,
    /// A client read a malformed response from a server.
    MalformedResponse,
    /// A node refused a fetch that was not from its sender's current
    /// incarnation (see `node.rs`).
    StaleIncarnation,
}

const WARNING_KINDS: usize = 12;

impl Warning {
    fn index(self) -> usize {
        match self {
            Warning::ConnectionRefused => 0,
            Warning::ConnectionEvicted => 1,
            Warning::HandshakeTimeout => 2,
            Warning::BadFrame => 3,
            Warning::QueueFull => 4,
            Warning::InvalidRequest => 5,
            Warning::WriteTimeout => 6,
            Warning::AcceptFailed => 7,
            Warning::ConnectionSetup => 8,
            Warning::ResponseTooLarge => 9,
            Warning::MalformedResponse => 10,
            Warning::StaleIncarnation => 11,
        }
    }
}

/// Lets the first warning of each kind through per interval and counts the
/// others, which the next warning let through reports as `suppressed`.
#[derive(Debug)]
pub(crate) struct RateLimitedWarnings {
    interval: Duration,
    windows: Mutex<[Window; WARNING_KINDS]>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Window {
    /// When the last warning of this kind was let through.
    logged_at: Option<Instant>,
    /// Warnings of this kind held back since then.
    suppressed: u64,
}

impl RateLimitedWarnings {
    /// Lets one warning of a kind through per `interval` (zero: all).
    pub(crate) fn new(interval: Duration) -> RateLimitedWarnings {
        RateLimitedWarnings {
            interval,
            windows: Mutex::new([Window::default(); WARNING_KINDS]),
        }
    }

    /// Whether to log a warning of `kind` now: `Some(n)` if it should be
    /// logged, `n` being how many of its kind were held back since the last
    /// one logged; `None` if it is held back.
    pub(crate) fn admit(&self, kind: Warning) -> Option<u64> {
        self.admit_at(kind, Instant::now())
    }

    fn admit_at(&self, kind: Warning, now: Instant) -> Option<u64> {
        let mut windows = self.windows.lock();
        let window = &mut windows[kind.index()];
        let due = window
            .logged_at
            .is_none_or(|at| now.saturating_duration_since(at) >= self.interval);
        if due {
            let suppressed = window.suppressed;
            *window = Window {
                logged_at: Some(now),
                suppressed: 0,
            };
            Some(suppressed)
        } else {
            window.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    #[test]
    fn slot_rule_table() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let slot = |id, last, ms, proven| SlotView {
            id,
            ip: ip(last),
            accepted_at: at(ms),
            proven,
        };
        // (open connections, new peer, max, per address max, decision)
        let cases = [
            (vec![], ip(1), 2, 2, SlotDecision::Admit),
            (vec![slot(1, 1, 0, false)], ip(1), 2, 2, SlotDecision::Admit),
            (
                vec![slot(1, 1, 0, true), slot(2, 1, 1, false)],
                ip(1),
                4,
                2,
                SlotDecision::RefuseAddress,
            ),
            // Full: the oldest unproven connection makes room, whatever its
            // address.
            (
                vec![
                    slot(1, 1, 0, true),
                    slot(2, 2, 5, false),
                    slot(3, 3, 3, false),
                ],
                ip(4),
                3,
                3,
                SlotDecision::Evict(3),
            ),
            (
                vec![slot(1, 1, 0, true), slot(2, 2, 5, true)],
                ip(4),
                2,
                2,
                SlotDecision::RefuseFull,
            ),
            // The per-address rule comes first: a full address is refused
            // even when an eviction would make room.
            (
                vec![slot(1, 1, 0, false), slot(2, 1, 1, false)],
                ip(1),
                2,
                2,
                SlotDecision::RefuseAddress,
            ),
        ];
        for (index, (open, new, max, per_address, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                decide_slot(&open, new, max, per_address),
                want,
                "case {index}"
            );
        }
    }

    #[test]
    fn warnings_pass_once_per_interval_and_count_the_rest() {
        let warnings = RateLimitedWarnings::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        // (kind, seconds after t0, expected)
        let cases = [
            (Warning::ConnectionRefused, 0, Some(0)),
            (Warning::ConnectionRefused, 1, None),
            (Warning::ConnectionRefused, 9, None),
            // Another kind has its own window.
            (Warning::BadFrame, 9, Some(0)),
            (Warning::ConnectionRefused, 10, Some(2)),
            (Warning::ConnectionRefused, 11, None),
            (Warning::ConnectionRefused, 30, Some(1)),
            (Warning::ConnectionRefused, 41, Some(0)),
        ];
        for (kind, seconds, want) in cases {
            assert_eq!(
                warnings.admit_at(kind, at(seconds)),
                want,
                "{kind:?} at {seconds} s"
            );
        }
    }

    #[test]
    fn budget_holds_large_bodies_to_its_limit_and_waits_for_freed_bytes() {
        let budget = Arc::new(FrameBudget::new(3 * SMALL_BODY_BYTES));
        let large = 2 * SMALL_BODY_BYTES;
        let soon = || Instant::now() + Duration::from_millis(20);
        let small = budget
            .reserve(SMALL_BODY_BYTES, soon(), || false)
            .expect("small");
        assert_eq!(budget.usage().0, 0, "small bodies are not counted");
        let first = budget.reserve(large, soon(), || false).expect("fits");
        assert_eq!(
            budget.reserve(large, soon(), || false).unwrap_err(),
            BudgetRefusal::DeadlinePassed
        );
        assert_eq!(
            budget
                .reserve(large, Instant::now() + Duration::from_secs(60), || true)
                .unwrap_err(),
            BudgetRefusal::GaveUp
        );
        drop(first);
        let second = budget.reserve(large, soon(), || false).expect("freed");
        assert_eq!(budget.usage(), (large, large, 2));
        drop(second);
        drop(small);
        assert_eq!(budget.usage().0, 0);
    }
}
