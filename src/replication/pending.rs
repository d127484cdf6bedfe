//! The leader's queue of pipelined appends waiting for their outcome
//! (`ReplicatedLog::append_pipelined`), and the rule that decides each
//! one's outcome from what the replica knows.
//!
//! An append is in the queue from the moment its offsets are assigned
//! until its outcome is decided: `acks=all` ones until the high watermark
//! passes their last offset, `acks=1` ones until the pipeline wrote them;
//! either fails earlier on a role change, a failed write, a node stop, an
//! ISR below `min.insync.replicas`, or its deadline. The decision
//! ([`verdict`]) is the one `Replica::wait_committed` and
//! `Replica::wait_written` make for a blocked caller, so a pipelined
//! append's outcome is exactly a blocking one's.
//!
//! The queue also bounds the bytes in flight (Kafka's `buffer.memory` /
//! `max.block.ms`): [`PendingAppends::reserve`] blocks while the appends
//! not resolved yet hold `ReplicationConfig::pipelined_bytes_max` bytes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::completion::{Completion, CompletionRunner, Wakeups};
use crate::append::AppendOutcome;
use crate::error::{Error, Result};
use crate::sync::{Arc, AtomicBool, AtomicUsize, Condvar, Mutex, Ordering};
use crate::types::{LogId, Offset};

/// One pipelined append waiting for its outcome.
#[derive(Debug)]
pub(crate) struct PendingAppend {
    /// What a success returns.
    pub(crate) outcome: AppendOutcome,
    /// The log end offset once the batch is written (`acks=1` waits for
    /// the pipeline's written mark to reach it).
    pub(crate) end: Offset,
    /// `acks=all` (waits for the high watermark) or `acks=1`.
    pub(crate) acks_all: bool,
    /// The replica's generation when the batch was appended.
    pub(crate) generation: u64,
    /// When it fails with `Timeout`: `request_timeout` after the first
    /// clock reading of a scan that found it queued ([`PendingAppends::scan`]
    /// with a `now`, read under the queues' lock), so never before
    /// `request_timeout` has passed since the append, and at most one
    /// deadline timer tick later than that (the timer scans every 10 ms).
    /// `None` until then. Appending reads no clock: a clock read per
    /// pipelined append was 3% of the CPU of 256 async clients appending
    /// 100 B records, and most appends are resolved by a fetch before the
    /// next deadline scan ever sees them.
    pub(crate) deadline: Option<Instant>,
    /// Put in its queue ahead of an append whose deadline was set (a
    /// retried batch answered as a duplicate takes its original, lower
    /// offsets): its deadline may be later than those behind it, so a
    /// scan that stops at the first append still waiting passes it. Set
    /// when queued ([`PendingAppends::queue`]).
    pub(crate) ahead: bool,
    /// Bytes it holds of the in-flight bound.
    pub(crate) bytes: usize,
    /// Where the outcome goes.
    pub(crate) cell: Arc<Completion>,
    /// Whether `resolve` ran (else dropping it resolves it with `Shutdown`).
    pub(crate) resolved: bool,
}

impl PendingAppend {
    /// Hands the append its outcome.
    #[cfg(test)]
    pub(crate) fn resolve(mut self, outcome: Result<AppendOutcome>) {
        self.resolved = true;
        self.cell.resolve(outcome);
    }

    /// Hands the append its outcome, leaving the waker or callback it owes
    /// in `wakeups` (handed to the completion thread with the others of
    /// the same pass).
    pub(crate) fn resolve_into(mut self, outcome: Result<AppendOutcome>, wakeups: &mut Wakeups) {
        self.resolved = true;
        self.cell.resolve_into(outcome, wakeups);
    }
}

impl Drop for PendingAppend {
    /// A safety net: every path that ends a pending append resolves it,
    /// but should one be dropped unresolved, its owner gets `Shutdown`
    /// rather than waiting forever. (Those its queue holds when the queue
    /// is dropped, its replica dropped without the node's stop, are
    /// resolved by the queue's `Drop`, whose pass sends their callbacks to
    /// the node's completion thread; one dropped here, outside a pass, runs
    /// its callback on the dropping thread.)
    fn drop(&mut self) {
        if !self.resolved {
            self.resolved = true;
            self.cell.resolve(Err(Error::Shutdown));
        }
    }
}

/// What the replica knows when it decides pending appends' outcomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// The replica's current generation.
    pub(crate) generation: u64,
    /// The published high watermark.
    pub(crate) high_watermark: u64,
    /// The pipeline's written mark.
    pub(crate) written: u64,
    /// Whether a pipeline write failed (the log is poisoned).
    pub(crate) failed: bool,
    /// Whether the node stopped.
    pub(crate) stopped: bool,
    /// `Some((in_sync, min))` when the leader's ISR is below
    /// `min.insync.replicas` (checked only on full scans).
    pub(crate) isr_short: Option<(usize, usize)>,
    /// Now, for deadlines (`None` on fast paths: deadlines are checked on
    /// full scans and the deadline timer's only). Read under the queues'
    /// lock: a scan stamps the appends it finds without a deadline with it
    /// (see `PendingAppend::deadline`), which must not be earlier than
    /// their append.
    pub(crate) now: Option<Instant>,
}

/// The decided outcome of one pending append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Not decided yet.
    Wait,
    /// Success.
    Ok,
    /// The role changed before the batch was committed (`NotLeader`, or
    /// `Shutdown` if the node stopped).
    RoleChanged,
    /// The pipeline's write failed (`Poisoned`).
    Failed,
    /// The node stopped (`Shutdown`).
    Stopped,
    /// `NotEnoughReplicasAfterAppend`.
    IsrShort {
        /// ISR size.
        in_sync: usize,
        /// `min.insync.replicas`.
        min_insync_replicas: usize,
    },
    /// `Timeout`.
    TimedOut,
}

/// Decides one pending append, in the order `Replica::wait_committed`
/// (`acks=all`) and `Replica::wait_written` (`acks=1`) check things.
pub(crate) fn verdict(append: &PendingAppend, known: &Snapshot) -> Verdict {
    verdict_of(
        append.acks_all,
        append.generation,
        append.outcome.last_offset,
        append.end,
        append.deadline,
        known,
    )
}

fn verdict_of(
    acks_all: bool,
    generation: u64,
    last_offset: Offset,
    end: Offset,
    deadline: Option<Instant>,
    known: &Snapshot,
) -> Verdict {
    let timed_out = known
        .now
        .zip(deadline)
        .is_some_and(|(now, deadline)| now >= deadline);
    if acks_all {
        // A role change fails the wait even if the high watermark later
        // passes the offset: the records there may not be ours any more.
        if known.generation != generation {
            return Verdict::RoleChanged;
        }
        if known.high_watermark > last_offset.0 {
            return Verdict::Ok;
        }
        if known.failed {
            return Verdict::Failed;
        }
        if known.stopped {
            return Verdict::Stopped;
        }
        // SPEC 3.1: committed before the ISR shrank is a success (above);
        // the error is for an ISR that shrank before the commit.
        if let Some((in_sync, min_insync_replicas)) = known.isr_short {
            return Verdict::IsrShort {
                in_sync,
                min_insync_replicas,
            };
        }
        if timed_out {
            return Verdict::TimedOut;
        }
        return Verdict::Wait;
    }
    // acks=1. A role change happens only once everything pending was
    // written (the pipeline's invariant) or the write failed: without a
    // failure, the batch is in the log.
    if known.written >= end.0 || known.generation != generation {
        return if known.failed && known.generation != generation {
            Verdict::Failed
        } else {
            Verdict::Ok
        };
    }
    if known.failed {
        return Verdict::Failed;
    }
    if known.stopped {
        return Verdict::Stopped;
    }
    if timed_out {
        return Verdict::TimedOut;
    }
    Verdict::Wait
}

#[derive(Debug, Default)]
struct PendingState {
    /// `acks=all` appends, in increasing last offset.
    all: VecDeque<PendingAppend>,
    /// `acks=1` appends, in increasing end offset.
    leader: VecDeque<PendingAppend>,
    /// How many appends of `all` and of `leader` have no deadline yet.
    /// They were queued after the last scan that read the clock, so are
    /// found walking each queue from its back (appends are queued in
    /// offset order but for appenders racing by microseconds).
    ///
    /// Invariant: `unstamped[0]` and `unstamped[1]` count the appends of
    /// `all` and `leader` whose `deadline` is `None`.
    unstamped: [usize; 2],
    /// The callers of `reserve` that found no room (or others waiting), by
    /// ticket, first come first: only the front one takes room
    /// (`PendingAppends::reserve`).
    ///
    /// Invariant: its length is `InFlight::waiting`, changed under the
    /// queues' lock.
    waiting: VecDeque<u64>,
    /// The ticket the next waiting reserver takes.
    next_ticket: u64,
}

impl PendingState {
    /// Checks the `unstamped` counts (debug builds: a walk of both queues).
    fn check_invariants(&self) {
        if cfg!(debug_assertions) {
            let unstamped = |queue: &VecDeque<PendingAppend>| {
                queue.iter().filter(|a| a.deadline.is_none()).count()
            };
            debug_assert_eq!(
                self.unstamped,
                [unstamped(&self.all), unstamped(&self.leader)],
                "appends without a deadline miscounted"
            );
            for queue in [&self.all, &self.leader] {
                debug_assert!(
                    deadlines_in_order(queue),
                    "deadlines out of queue order in an append not put in ahead"
                );
            }
        }
    }
}

/// Whether no append of `queue` but those put in ahead
/// ([`PendingAppend::ahead`]) has a later deadline than one behind it (an
/// append with no deadline yet will get a later one than any given).
fn deadlines_in_order(queue: &VecDeque<PendingAppend>) -> bool {
    let mut earliest_behind: Option<Instant> = None;
    for append in queue.iter().rev().filter(|append| !append.ahead) {
        if let Some(behind) = earliest_behind {
            if append.deadline.is_none_or(|deadline| deadline > behind) {
                return false;
            }
        }
        if let Some(deadline) = append.deadline {
            earliest_behind = Some(earliest_behind.map_or(deadline, |b| b.min(deadline)));
        }
    }
    true
}

/// Gives the `unstamped` appends of `queue` that have no deadline yet the
/// deadline `deadline`. They were queued since the last stamping, so sit
/// at the back of the queue (but for one inserted a few places before an
/// append of a racing appender): the walk from the back ends with them.
fn stamp_deadlines(queue: &mut VecDeque<PendingAppend>, unstamped: &mut usize, deadline: Instant) {
    for append in queue.iter_mut().rev() {
        if *unstamped == 0 {
            break;
        }
        if append.deadline.is_none() {
            append.deadline = Some(deadline);
            *unstamped -= 1;
        }
    }
    debug_assert_eq!(*unstamped, 0, "an append without a deadline left unstamped");
}

/// The in-flight bound's counters, kept apart from the queues' lock: a
/// reservation with room is one compare-exchange, not a lock pair on a
/// lock every fetch's resolution pass takes too.
#[derive(Debug, Default)]
struct InFlight {
    /// Bytes held by appends not resolved yet (including those reserved
    /// but not appended yet). Raised by reservations (with or without the
    /// queues' lock), lowered only under it, so that a reserver that found
    /// no room and waits under the lock is woken by the next release.
    bytes: AtomicUsize,
    /// The most `bytes` ever was.
    bytes_peak: AtomicUsize,
    /// Reservers waiting in line (`PendingState::waiting`), read without
    /// the lock by the fast path: while any waits, a newcomer queues
    /// behind them rather than take room they are waiting for.
    waiting: AtomicUsize,
    /// The node stopped: every append fails with `Shutdown`. Raised under
    /// the queues' lock, never lowered, so that a reader holding the lock
    /// sees it settled; read without the lock on the reservation's fast
    /// path.
    stopped: AtomicBool,
}

/// A reserver's place in the line for room (`PendingAppends::reserve`),
/// holding the queues' lock: taken on joining, given up on drop, so that a
/// wait that ends any way, a panic included, leaves no ticket at the front
/// holding everyone behind it, and no raised `InFlight::waiting` sending
/// every later reservation off the fast path.
struct PlaceInLine<'a> {
    pending: &'a PendingAppends,
    state: crate::sync::MutexGuard<'a, PendingState>,
    ticket: u64,
}

impl<'a> PlaceInLine<'a> {
    /// Takes the queues' lock and the next ticket, at the back of the line.
    fn join(pending: &'a PendingAppends) -> PlaceInLine<'a> {
        let mut state = pending.state.lock();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.waiting.push_back(ticket);
        pending.in_flight.waiting.fetch_add(1, Ordering::SeqCst);
        PlaceInLine {
            pending,
            state,
            ticket,
        }
    }
}

impl Drop for PlaceInLine<'_> {
    fn drop(&mut self) {
        // Under loom, a panic inside the shim's `Condvar::wait` (loom's
        // report of a deadlock) leaves its guard taken out: leaving the line
        // would panic again and abort, losing loom's report of the
        // schedule. The model is over by then anyway.
        #[cfg(loom)]
        if std::thread::panicking() {
            return;
        }
        let ticket = self.ticket;
        let place = self
            .state
            .waiting
            .iter()
            .position(|waiting| *waiting == ticket);
        debug_assert!(place.is_some(), "a waiting reserver's ticket is in line");
        if let Some(place) = place {
            self.state.waiting.remove(place);
        }
        self.pending
            .in_flight
            .waiting
            .fetch_sub(1, Ordering::SeqCst);
        debug_assert_eq!(
            self.state.waiting.len(),
            self.pending.in_flight.waiting.load(Ordering::SeqCst)
        );
        // The next in line may fit in what is left, or was waiting for this
        // one to give up.
        if !self.state.waiting.is_empty() {
            self.pending.space.notify_all();
        }
    }
}

/// How a reserver's wait in line ended (`PendingAppends::wait_in_line`).
enum Line {
    /// Its bytes are reserved.
    Reserved,
    /// `block_max` passed first, with this many bytes in flight.
    TimedOut {
        bytes_in_flight: usize,
        started: Instant,
    },
    /// The node stopped.
    Stopped,
}

/// The queue of pipelined appends of one replica; see the module docs.
/// Public only for the loom models (`testing::loom_models`).
#[derive(Debug)]
pub struct PendingAppends {
    /// Appends queued (read without the lock, so the hot paths of
    /// replication pay one atomic load when nothing is pipelined).
    queued: AtomicUsize,
    /// Set when a role change or a failed write needs every queued append
    /// looked at, not only the fronts.
    full_scan_due: AtomicBool,
    state: Mutex<PendingState>,
    /// Signalled when bytes are released and somebody is blocked.
    space: Condvar,
    in_flight: InFlight,
    /// The runner of the node hosting the replica, where the callbacks and
    /// wakers of its appends run (see `Completion::new_pair_on_pass_runner`);
    /// `None` (a queue of no node's) runs them on the resolving thread.
    completions: Option<Arc<CompletionRunner>>,
    /// How long after its deadline's stamp an append fails with `Timeout`
    /// (the replica's `request_timeout`).
    request_timeout: Duration,
}

impl Default for PendingAppends {
    /// An empty queue with the default `request_timeout` of
    /// [`ReplicationConfig`](crate::ReplicationConfig) (30 s): a zero one
    /// would time every append out at its first scan (review of 9255a8f).
    fn default() -> PendingAppends {
        PendingAppends::new(Duration::from_secs(30))
    }
}

impl Drop for PendingAppends {
    /// Appends still queued when the queue goes (its replica dropped
    /// without the node's stop) fail with `Shutdown`, their callbacks and
    /// wakers sent to the node's completion thread, as every other
    /// resolution of them is.
    fn drop(&mut self) {
        let state = self.state.get_mut();
        let queued: Vec<PendingAppend> =
            state.all.drain(..).chain(state.leader.drain(..)).collect();
        if queued.is_empty() {
            return;
        }
        let mut wakeups = self.wakeups();
        for append in queued {
            append.resolve_into(Err(Error::Shutdown), &mut wakeups);
        }
        wakeups.hand_over();
    }
}

/// Appends decided by one scan, to resolve once no lock is held.
pub(crate) type Decided = Vec<(PendingAppend, Verdict)>;

impl PendingAppends {
    /// An empty queue whose appends fail with `Timeout` after
    /// `request_timeout` (counted as `PendingAppend::deadline` says).
    pub(crate) fn new(request_timeout: Duration) -> PendingAppends {
        PendingAppends {
            queued: AtomicUsize::default(),
            full_scan_due: AtomicBool::default(),
            state: Mutex::default(),
            space: Condvar::default(),
            in_flight: InFlight::default(),
            completions: None,
            request_timeout,
        }
    }

    /// Sends the callbacks and wakers of the appends queued here to
    /// `runner` (the hosting node's).
    pub(crate) fn set_completions(&mut self, runner: Arc<CompletionRunner>) {
        self.completions = Some(runner);
    }

    /// An empty pass of resolutions of this queue's appends: their
    /// callbacks and wakers go to the hosting node's runner.
    pub(crate) fn wakeups(&self) -> Wakeups {
        Wakeups::on(self.completions.clone())
    }

    /// Whether nothing is queued (a hint: read without the lock).
    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        self.queued.load(Ordering::SeqCst) == 0 && !self.full_scan_due.load(Ordering::SeqCst)
    }

    /// Asks the next scan to look at every queued append.
    pub(crate) fn request_full_scan(&self) {
        self.full_scan_due.store(true, Ordering::SeqCst);
    }

    /// Takes the full-scan request, if one was made.
    pub(crate) fn take_full_scan(&self) -> bool {
        self.full_scan_due.swap(false, Ordering::SeqCst)
    }

    /// Reserves `bytes` of the in-flight bound `bytes_max`, blocking up to
    /// `block_max` while other appends hold it (Kafka's `max.block.ms`).
    pub fn reserve(
        &self,
        log: LogId,
        bytes: usize,
        bytes_max: usize,
        block_max: Duration,
    ) -> Result<()> {
        let full = |bytes_in_flight: usize, started: Option<Instant>| Error::PipelineFull {
            log,
            batch_bytes: bytes,
            bytes_in_flight,
            bytes_max,
            waited: started.map_or(Duration::ZERO, |started| started.elapsed()),
        };
        if bytes > bytes_max {
            // It could never fit (Kafka: RecordTooLargeException).
            return Err(full(0, None));
        }
        // With room and nobody waiting for it, as on every append of a
        // pipeline that keeps up, a reservation takes no lock and reads no
        // clock (a clock read was 1.6% of the CPU of 256 async clients
        // appending 100 B records).
        if self.in_flight.waiting.load(Ordering::SeqCst) == 0
            && self.try_reserve(bytes, bytes_max)?
        {
            return Ok(());
        }
        // Otherwise it waits in line, first come first served, as tokio's
        // fair `Semaphore` gives out permits: a large reservation at the
        // front holds back smaller ones behind it even when they would
        // fit, or the small ones, each taking the room a release freed,
        // could keep it waiting until its `block_max` ran out. (Kafka's
        // `BufferPool` lets its first waiter gather freed memory piece by
        // piece to the same end.)
        let mut place = PlaceInLine::join(self);
        let ticket = place.ticket;
        let outcome = self.wait_in_line(&mut place.state, ticket, bytes, bytes_max, block_max);
        // Leaving the line, however the wait ended (a panic included).
        drop(place);
        match outcome {
            Line::Reserved => Ok(()),
            Line::TimedOut {
                bytes_in_flight,
                started,
            } => Err(full(bytes_in_flight, Some(started))),
            Line::Stopped => Err(Error::Shutdown),
        }
    }

    /// Waits, with the queues' lock held (`state`), until `ticket` is at
    /// the front of the line and `bytes` fit, until `block_max` has passed,
    /// or until the node stops.
    fn wait_in_line(
        &self,
        state: &mut crate::sync::MutexGuard<'_, PendingState>,
        ticket: u64,
        bytes: usize,
        bytes_max: usize,
        block_max: Duration,
    ) -> Line {
        let mut started: Option<Instant> = None;
        // Releases lower the count under this lock and then wake the ones
        // waiting: the front one, finding no room here, is woken by the
        // next.
        loop {
            if state.waiting.front() == Some(&ticket) {
                match self.try_reserve(bytes, bytes_max) {
                    Ok(true) => return Line::Reserved,
                    Ok(false) => {}
                    Err(_) => return Line::Stopped,
                }
            } else if self.in_flight.stopped.load(Ordering::SeqCst) {
                return Line::Stopped;
            }
            let started = *started.get_or_insert_with(Instant::now);
            let deadline = started + block_max;
            if Instant::now() >= deadline {
                return Line::TimedOut {
                    bytes_in_flight: self.in_flight.bytes.load(Ordering::SeqCst),
                    started,
                };
            }
            crate::simulation::forbid_in_simulation("a wait for room among pending appends");
            let _timed_out = self.space.wait_until(state, deadline);
        }
    }

    /// Reserves `bytes` if they fit under `bytes_max`: `Ok(false)` if they
    /// do not, `Shutdown` once the node stopped.
    fn try_reserve(&self, bytes: usize, bytes_max: usize) -> Result<bool> {
        let in_flight = &self.in_flight;
        let mut held = in_flight.bytes.load(Ordering::SeqCst);
        loop {
            if in_flight.stopped.load(Ordering::SeqCst) {
                return Err(Error::Shutdown);
            }
            if held + bytes > bytes_max {
                return Ok(false);
            }
            match in_flight.bytes.compare_exchange_weak(
                held,
                held + bytes,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => break,
                Err(actual) => held = actual,
            }
        }
        let now_held = held + bytes;
        debug_assert!(now_held <= bytes_max);
        // The peak rarely moves once the pipeline runs: a load first.
        if in_flight.bytes_peak.load(Ordering::Relaxed) < now_held {
            in_flight.bytes_peak.fetch_max(now_held, Ordering::Relaxed);
        }
        Ok(true)
    }

    /// Gives back bytes reserved for an append that was not queued.
    pub fn release(&self, bytes: usize) {
        let state = self.state.lock();
        self.release_locked(&state, bytes);
    }

    /// Gives back `bytes`, with the queues' lock held (`state`), and wakes
    /// blocked reservers.
    fn release_locked(&self, state: &PendingState, bytes: usize) {
        let before = self
            .in_flight
            .bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
                Some(held.saturating_sub(bytes))
            })
            .unwrap_or_else(|held| held);
        debug_assert!(before >= bytes);
        if !state.waiting.is_empty() {
            self.space.notify_all();
        }
    }

    /// Bytes held by appends not resolved yet, and the most ever held.
    pub fn bytes_in_flight(&self) -> (usize, usize) {
        (
            self.in_flight.bytes.load(Ordering::SeqCst),
            self.in_flight.bytes_peak.load(Ordering::SeqCst),
        )
    }

    /// Appends queued and not resolved yet.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Queues `append` (its bytes are reserved already) unless `decide`,
    /// called under the queue's lock with whether the node stopped,
    /// settles it at once; returns it then, with its verdict, for the
    /// caller to resolve. Deciding under the lock closes the race with a
    /// role change or a stop that scanned the queue just before.
    pub(crate) fn queue(
        &self,
        append: PendingAppend,
        decide: impl FnOnce(&PendingAppend, bool) -> Verdict,
    ) -> Option<(PendingAppend, Verdict)> {
        let mut state = self.state.lock();
        let stopped = self.in_flight.stopped.load(Ordering::SeqCst);
        match decide(&append, stopped) {
            Verdict::Wait => {}
            verdict => {
                self.release_locked(&state, append.bytes);
                return Some((append, verdict));
            }
        }
        Self::insert_locked(&mut state, &self.queued, append);
        None
    }

    /// [`queue`](Self::queue) for an append that `decide` finds still
    /// waiting; one it would settle at once is handed back untouched
    /// (its bytes still reserved), for the caller to `queue` once it
    /// holds what orders the hand-over of outcomes.
    pub(crate) fn queue_if_waiting(
        &self,
        append: PendingAppend,
        decide: impl FnOnce(&PendingAppend, bool) -> Verdict,
    ) -> Option<PendingAppend> {
        let mut state = self.state.lock();
        let stopped = self.in_flight.stopped.load(Ordering::SeqCst);
        if decide(&append, stopped) != Verdict::Wait {
            return Some(append);
        }
        Self::insert_locked(&mut state, &self.queued, append);
        None
    }

    /// Puts `append` in its queue, in offset order.
    fn insert_locked(state: &mut PendingState, queued: &AtomicUsize, append: PendingAppend) {
        let (queue, unstamped) = if append.acks_all {
            (&mut state.all, &mut state.unstamped[0])
        } else {
            (&mut state.leader, &mut state.unstamped[1])
        };
        if append.deadline.is_none() {
            *unstamped += 1;
        }
        let key = |a: &PendingAppend| {
            if a.acks_all {
                a.outcome.last_offset
            } else {
                a.end
            }
        };
        let at = key(&append);
        // Almost always the last: offsets are handed out in order, and
        // appenders queue right after. Checked first, since a binary search
        // of a long queue misses the cache on every step.
        let mut append = append;
        let index = if queue.back().is_none_or(|last| key(last) <= at) {
            queue.len()
        } else {
            queue.partition_point(|queued| key(queued) <= at)
        };
        // Ahead of an append whose deadline is set (a duplicate at its
        // original offsets; rarely, an appender that raced one queued
        // across a deadline tick). Almost always at the back: no walk.
        append.ahead = queue.range(index..).any(|queued| queued.deadline.is_some());
        if let Some(deadline) = append.deadline {
            // Queued with a deadline already (tests): those before it not
            // put in ahead, whose deadline is later or not set yet, are
            // ahead of it now.
            for queued in queue.range_mut(..index).rev() {
                if queued.ahead {
                    continue;
                }
                if queued.deadline.is_some_and(|queued| queued <= deadline) {
                    break;
                }
                queued.ahead = true;
            }
        }
        queue.insert(index, append);
        queued.fetch_add(1, Ordering::SeqCst);
    }

    /// Decides queued appends from `known`: with `full`, every one; else
    /// only from the front of each queue while they succeed (the common
    /// case: the high watermark or written mark moved). Returns what was
    /// decided, out of the queue and its bytes released.
    pub(crate) fn scan(&self, known: impl FnOnce(bool) -> Snapshot, full: bool) -> Decided {
        let mut decided = Vec::new();
        let mut guard = self.state.lock();
        let known = known(self.in_flight.stopped.load(Ordering::SeqCst));
        let mut released = 0;
        let PendingState {
            all,
            leader,
            unstamped: [unstamped_all, unstamped_leader],
            ..
        } = &mut *guard;
        for (queue, unstamped) in [(all, unstamped_all), (leader, unstamped_leader)] {
            if let Some(now) = known.now {
                // Read under this lock, after every append here was queued.
                stamp_deadlines(queue, unstamped, now + self.request_timeout);
            }
            let mut take = |append: PendingAppend, verdict: Verdict| {
                if append.deadline.is_none() {
                    *unstamped -= 1;
                }
                released += append.bytes;
                decided.push((append, verdict));
            };
            if full {
                let mut kept = VecDeque::with_capacity(queue.len());
                for append in queue.drain(..) {
                    match verdict(&append, &known) {
                        Verdict::Wait => kept.push_back(append),
                        verdict => take(append, verdict),
                    }
                }
                *queue = kept;
            } else {
                // Up to the first append still waiting that was not put
                // in ahead: those behind it are no more due than it
                // (offsets and, but for appends put in ahead, deadlines
                // grow front to back). One put in ahead may wait while an
                // append behind it is due (simulator seed 60713163: five
                // retried duplicates ahead of r810 held its `Timeout` past
                // SPEC 3.1's 100 ms), so a walk that reads the clock passes
                // it. One that does not decides by offsets alone, which
                // grow front to back: it stops there.
                let mut at = 0;
                while let Some(append) = queue.get(at) {
                    match verdict(append, &known) {
                        Verdict::Wait if append.ahead && known.now.is_some() => at += 1,
                        Verdict::Wait => break,
                        verdict => {
                            if let Some(append) = queue.remove(at) {
                                take(append, verdict);
                            }
                        }
                    }
                }
            }
        }
        if !decided.is_empty() {
            self.queued.fetch_sub(decided.len(), Ordering::SeqCst);
            self.release_locked(&guard, released);
        }
        debug_assert_eq!(
            self.queued.load(Ordering::SeqCst),
            guard.all.len() + guard.leader.len()
        );
        guard.check_invariants();
        decided
    }

    /// Whether the node stopped.
    pub(crate) fn is_stopped(&self) -> bool {
        self.in_flight.stopped.load(Ordering::SeqCst)
    }

    /// The node stopped: every later `queue` and `reserve` fails, and
    /// blocked reservers wake.
    pub fn stop(&self) {
        let _state = self.state.lock();
        self.in_flight.stopped.store(true, Ordering::SeqCst);
        self.space.notify_all();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn known(generation: u64, hw: u64, written: u64) -> Snapshot {
        Snapshot {
            generation,
            high_watermark: hw,
            written,
            failed: false,
            stopped: false,
            isr_short: None,
            now: None,
        }
    }

    #[test]
    fn verdicts_follow_the_blocking_waits() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(10);
        // (acks_all, generation, last_offset, end, known, expected)
        let base = known(1, 0, 0);
        let cases: Vec<(&str, bool, u64, u64, Snapshot, Verdict)> = vec![
            (
                "all: hw not past",
                true,
                1,
                5,
                Snapshot {
                    high_watermark: 5,
                    ..base
                },
                Verdict::Wait,
            ),
            (
                "all: hw past last",
                true,
                1,
                5,
                Snapshot {
                    high_watermark: 6,
                    ..base
                },
                Verdict::Ok,
            ),
            (
                "all: role change beats a later hw",
                true,
                1,
                5,
                Snapshot {
                    high_watermark: 9,
                    generation: 2,
                    ..base
                },
                Verdict::RoleChanged,
            ),
            (
                "all: committed before the failure is a success",
                true,
                1,
                5,
                Snapshot {
                    high_watermark: 6,
                    failed: true,
                    ..base
                },
                Verdict::Ok,
            ),
            (
                "all: failed",
                true,
                1,
                5,
                Snapshot {
                    failed: true,
                    ..base
                },
                Verdict::Failed,
            ),
            (
                "all: stopped",
                true,
                1,
                5,
                Snapshot {
                    stopped: true,
                    ..base
                },
                Verdict::Stopped,
            ),
            (
                "all: committed before the ISR shrank",
                true,
                1,
                5,
                Snapshot {
                    high_watermark: 6,
                    isr_short: Some((1, 2)),
                    ..base
                },
                Verdict::Ok,
            ),
            (
                "all: ISR shrank first",
                true,
                1,
                5,
                Snapshot {
                    isr_short: Some((1, 2)),
                    ..base
                },
                Verdict::IsrShort {
                    in_sync: 1,
                    min_insync_replicas: 2,
                },
            ),
            (
                "all: deadline",
                true,
                1,
                5,
                Snapshot {
                    now: Some(later),
                    ..base
                },
                Verdict::TimedOut,
            ),
            (
                "all: before deadline",
                true,
                1,
                5,
                Snapshot {
                    now: Some(t0),
                    ..base
                },
                Verdict::Wait,
            ),
            (
                "one: not written",
                false,
                1,
                6,
                Snapshot { written: 5, ..base },
                Verdict::Wait,
            ),
            (
                "one: written",
                false,
                1,
                6,
                Snapshot { written: 6, ..base },
                Verdict::Ok,
            ),
            (
                "one: role change without failure means written",
                false,
                1,
                6,
                Snapshot {
                    generation: 2,
                    ..base
                },
                Verdict::Ok,
            ),
            (
                "one: role change after a failure",
                false,
                1,
                6,
                Snapshot {
                    generation: 2,
                    failed: true,
                    ..base
                },
                Verdict::Failed,
            ),
            (
                "one: failed",
                false,
                1,
                6,
                Snapshot {
                    failed: true,
                    ..base
                },
                Verdict::Failed,
            ),
            (
                "one: written before the failure",
                false,
                1,
                6,
                Snapshot {
                    written: 6,
                    failed: true,
                    ..base
                },
                Verdict::Ok,
            ),
            (
                "one: stopped",
                false,
                1,
                6,
                Snapshot {
                    stopped: true,
                    ..base
                },
                Verdict::Stopped,
            ),
            (
                "one: deadline",
                false,
                1,
                6,
                Snapshot {
                    now: Some(later),
                    ..base
                },
                Verdict::TimedOut,
            ),
        ];
        for (name, acks_all, generation, last, known, expected) in cases {
            let end = Offset(6);
            let got = verdict_of(
                acks_all,
                generation,
                Offset(last),
                end,
                Some(t0 + Duration::from_secs(1)),
                &known,
            );
            assert_eq!(got, expected, "{name}");
        }
    }

    fn pending(last: u64, acks_all: bool, bytes: usize) -> PendingAppend {
        let (cell, _handle) = Completion::new_pair();
        PendingAppend {
            outcome: AppendOutcome {
                base_offset: Offset(last),
                last_offset: Offset(last),
                leader_epoch: crate::types::LeaderEpoch(1),
                duplicate: false,
            },
            end: Offset(last + 1),
            acks_all,
            generation: 1,
            deadline: Some(Instant::now() + Duration::from_secs(60)),
            ahead: false,
            bytes,
            cell,
            resolved: false,
        }
    }

    /// Queues an `acks=all` append at `last` as appending does: with no
    /// deadline, for the first scan that reads the clock to stamp.
    fn queue_unstamped(queue: &PendingAppends, last: u64) {
        queue.reserve(LogId(0), 10, 100, Duration::ZERO).unwrap();
        let mut append = pending(last, true, 10);
        append.deadline = None;
        assert!(queue.queue(append, |_, _| Verdict::Wait).is_none());
    }

    /// What a scan reading the clock at `now` knows of a log whose high
    /// watermark is 1.
    fn at(now: Instant) -> Snapshot {
        Snapshot {
            now: Some(now),
            ..known(1, 0, 0)
        }
    }

    /// An append at `last` whose handle's callback is to run on the pass
    /// runner (as every pipelined append's), and where that callback puts
    /// the outcome, with the thread it ran on.
    #[allow(clippy::type_complexity)]
    fn pending_with_callback(
        last: u64,
    ) -> (
        PendingAppend,
        Arc<Mutex<Option<(Result<AppendOutcome>, std::thread::ThreadId)>>>,
    ) {
        let (cell, handle) = Completion::new_pair_on_pass_runner();
        let ran = Arc::new(Mutex::new(None));
        let into = Arc::clone(&ran);
        handle.on_complete(move |outcome| {
            *into.lock() = Some((outcome, std::thread::current().id()));
        });
        let mut append = pending(last, true, 10);
        append.cell = cell;
        (append, ran)
    }

    /// A queue sending its callbacks to a runner of its own, holding one
    /// waiting append at 0 (from [`pending_with_callback`]).
    #[allow(clippy::type_complexity)]
    fn one_append_queued_on_a_runner() -> (
        Arc<CompletionRunner>,
        PendingAppends,
        Arc<Mutex<Option<(Result<AppendOutcome>, std::thread::ThreadId)>>>,
    ) {
        let runner = CompletionRunner::new();
        let mut queue = PendingAppends::default();
        queue.set_completions(Arc::clone(&runner));
        let (append, ran) = pending_with_callback(0);
        queue.reserve(LogId(0), 10, 100, Duration::ZERO).unwrap();
        assert!(queue.queue(append, |_, _| Verdict::Wait).is_none());
        (runner, queue, ran)
    }

    /// A resolution pass sends the callbacks of the appends it resolves to
    /// the node's runner: none runs on the resolving thread (a fetch's,
    /// the deadline timer's), every one on the runner's pass (bb282f7).
    #[test]
    fn a_pass_sends_its_callbacks_to_the_nodes_runner() {
        let (runner, queue, ran) = one_append_queued_on_a_runner();
        let decided = queue.scan(|_| known(1, 1, 1), false);
        assert_eq!(decided.len(), 1);
        let mut wakeups = queue.wakeups();
        for (append, verdict) in decided {
            assert_eq!(verdict, Verdict::Ok);
            let outcome = append.outcome;
            append.resolve_into(Ok(outcome), &mut wakeups);
        }
        wakeups.hand_over();
        assert!(ran.lock().is_none(), "ran on the resolving thread");
        let on_runner = std::thread::spawn(move || {
            assert_eq!(runner.run_pending(), 1);
            std::thread::current().id()
        })
        .join()
        .unwrap();
        let (outcome, thread) = ran.lock().take().expect("the runner ran it");
        assert_eq!(outcome.unwrap().last_offset, Offset(0));
        assert_eq!(thread, on_runner);
    }

    /// Appends still queued when their queue is dropped (a replica dropped
    /// without its node's stop) fail with `Shutdown`, their callbacks run
    /// by the node's runner, not by the dropping thread.
    #[test]
    fn a_dropped_queue_fails_its_appends_on_the_nodes_runner() {
        let (runner, queue, ran) = one_append_queued_on_a_runner();
        drop(queue);
        assert!(ran.lock().is_none(), "ran on the dropping thread");
        assert_eq!(runner.run_pending(), 1);
        let (outcome, _) = ran.lock().take().expect("the runner ran it");
        assert!(matches!(outcome, Err(Error::Shutdown)), "{outcome:?}");
    }

    #[test]
    fn a_fast_scan_takes_the_committed_front_and_releases_its_bytes() {
        let queue = PendingAppends::default();
        for offset in [0, 2, 1, 3] {
            queue.reserve(LogId(0), 10, 100, Duration::ZERO).unwrap();
            assert!(queue
                .queue(pending(offset, true, 10), |_, _| Verdict::Wait)
                .is_none());
        }
        assert_eq!(queue.bytes_in_flight().0, 40);
        let decided = queue.scan(|_| known(1, 2, 0), false);
        let offsets: Vec<u64> = decided
            .iter()
            .map(|(a, _)| a.outcome.last_offset.0)
            .collect();
        assert_eq!(
            offsets,
            vec![0, 1],
            "queued out of order, decided in offset order"
        );
        assert_eq!(queue.bytes_in_flight(), (20, 40));
        assert_eq!(queue.queued(), 2);
        let decided = queue.scan(|_| known(2, 2, 0), true);
        assert!(decided.iter().all(|(_, v)| *v == Verdict::RoleChanged));
        assert_eq!(queue.bytes_in_flight().0, 0);
        assert!(queue.is_idle());
    }

    /// Appending reads no clock: an append is queued without a deadline,
    /// and the first scan that reads the clock (under the queues' lock,
    /// so after the append) stamps it `request_timeout` after that
    /// reading. It never times out before `request_timeout` has passed
    /// since that reading, and an append queued later gets a later stamp.
    #[test]
    fn a_scan_reading_the_clock_stamps_deadlines_of_appends_queued_before() {
        let request_timeout = Duration::from_secs(1);
        let queue = PendingAppends::new(request_timeout);
        // 1 is queued after 2, as by a racing appender.
        for last in [0, 2, 1] {
            queue_unstamped(&queue, last);
        }
        let t0 = Instant::now();
        assert!(queue.scan(|_| known(1, 0, 0), false).is_empty());
        assert!(queue.scan(|_| at(t0), false).is_empty(), "stamped t0 + 1 s");
        let just_before = t0 + request_timeout - Duration::from_millis(1);
        assert!(queue.scan(|_| at(just_before), true).is_empty());
        queue_unstamped(&queue, 3);
        let decided = queue.scan(|_| at(t0 + request_timeout), true);
        let timed_out: Vec<u64> = decided
            .iter()
            .map(|(append, verdict)| {
                assert_eq!(*verdict, Verdict::TimedOut);
                append.outcome.last_offset.0
            })
            .collect();
        assert_eq!(timed_out, vec![0, 1, 2], "3 was stamped at t0 + 1 s");
        assert_eq!(queue.queued(), 1);
        let later = t0 + 2 * request_timeout;
        assert!(queue
            .scan(|_| at(later - Duration::from_millis(1)), false)
            .is_empty());
        let decided = queue.scan(|_| at(later), false);
        assert_eq!(decided.len(), 1);
        assert_eq!(decided[0].1, Verdict::TimedOut);
        assert!(queue.is_idle());
    }

    /// SPEC 3.1 (simulator seed 60713163): an append put in ahead of
    /// stamped ones, as a retried idempotent batch answered as a duplicate
    /// is (its original, lower offsets, and a fresh deadline), does not
    /// hold back the `Timeout` of the appends behind it: a scan that stops
    /// at the first append still waiting found none of them due.
    #[test]
    fn an_append_put_in_ahead_does_not_hold_back_the_timeouts_behind_it() {
        let request_timeout = Duration::from_secs(1);
        let queue = PendingAppends::new(request_timeout);
        let t0 = Instant::now();
        queue_unstamped(&queue, 10);
        assert!(
            queue.scan(|_| at(t0), false).is_empty(),
            "10 due at t0 + 1 s"
        );
        // The duplicate of a batch at 5, 0.5 s later: due at t0 + 1.5 s.
        queue_unstamped(&queue, 5);
        let half = Duration::from_millis(500);
        assert!(queue.scan(|_| at(t0 + half), false).is_empty());
        let decided = queue.scan(|_| at(t0 + request_timeout), false);
        let timed_out: Vec<(u64, Verdict)> = decided
            .iter()
            .map(|(append, verdict)| (append.outcome.last_offset.0, *verdict))
            .collect();
        assert_eq!(
            timed_out,
            vec![(10, Verdict::TimedOut)],
            "10 is due, 5 is not"
        );
        assert_eq!(queue.queued(), 1);
        let decided = queue.scan(|_| at(t0 + request_timeout + half), false);
        assert_eq!(decided.len(), 1);
        assert_eq!(decided[0].1, Verdict::TimedOut);
        assert!(queue.is_idle());
    }

    /// An append queued with a deadline of its own earlier than that of
    /// the one before it (tests queue so) puts that one ahead of it: its
    /// `Timeout` is not held back either.
    #[test]
    fn an_earlier_deadline_queued_behind_puts_the_later_one_ahead() {
        let queue = PendingAppends::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let mut first = pending(5, true, 10);
        first.deadline = None;
        let mut second = pending(10, true, 10);
        second.deadline = Some(t0);
        for append in [first, second] {
            queue.reserve(LogId(0), 10, 100, Duration::ZERO).unwrap();
            assert!(queue.queue(append, |_, _| Verdict::Wait).is_none());
        }
        let decided = queue.scan(|_| at(t0), false);
        let timed_out: Vec<u64> = decided
            .iter()
            .map(|(append, _)| append.outcome.last_offset.0)
            .collect();
        assert_eq!(timed_out, vec![10], "5 is stamped at t0 + 1 s");
    }

    #[test]
    fn a_pending_append_dropped_unresolved_fails_with_shutdown() {
        let (cell, handle) = Completion::new_pair();
        let mut append = pending(0, true, 1);
        append.cell = cell;
        drop(append);
        assert!(matches!(handle.wait(), Err(Error::Shutdown)));
        let (cell, handle) = Completion::new_pair();
        let mut append = pending(0, true, 1);
        append.cell = cell;
        let outcome = append.outcome;
        append.resolve(Ok(outcome));
        assert_eq!(
            handle.wait().unwrap(),
            outcome,
            "resolved once, not again by the drop"
        );
    }

    #[test]
    fn reserve_refuses_past_the_bound_naming_it() {
        let queue = PendingAppends::default();
        queue.reserve(LogId(3), 60, 100, Duration::ZERO).unwrap();
        match queue.reserve(LogId(3), 60, 100, Duration::from_millis(1)) {
            Err(Error::PipelineFull {
                bytes_in_flight: 60,
                bytes_max: 100,
                batch_bytes: 60,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        match queue.reserve(LogId(3), 101, 100, Duration::ZERO) {
            Err(Error::PipelineFull {
                bytes_max: 100,
                batch_bytes: 101,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        queue.release(60);
        queue.reserve(LogId(3), 100, 100, Duration::ZERO).unwrap();
        queue.stop();
        queue.release(100);
        assert!(matches!(
            queue.reserve(LogId(3), 1, 100, Duration::ZERO),
            Err(Error::Shutdown)
        ));
    }

    /// Reservations with room take no lock, releases lower the count
    /// under the queues' lock: a reserver blocked for room must still be
    /// woken by the next release (and by a stop), not wait out its
    /// `block_max`.
    #[test]
    fn a_blocked_reservation_wakes_on_release_and_on_stop() {
        let queue = std::sync::Arc::new(PendingAppends::default());
        queue.reserve(LogId(3), 100, 100, Duration::ZERO).unwrap();
        let blocked = {
            let queue = std::sync::Arc::clone(&queue);
            std::thread::spawn(move || {
                let started = Instant::now();
                let reserved = queue.reserve(LogId(3), 40, 100, Duration::from_secs(60));
                (reserved, started.elapsed())
            })
        };
        while queue.state.lock().waiting.is_empty() {
            std::thread::yield_now();
        }
        queue.release(50);
        let (reserved, waited) = blocked.join().unwrap();
        reserved.unwrap();
        assert!(waited < Duration::from_secs(30), "waited {waited:?}");
        assert_eq!(queue.bytes_in_flight(), (90, 100));

        let blocked = {
            let queue = std::sync::Arc::clone(&queue);
            std::thread::spawn(move || queue.reserve(LogId(3), 40, 100, Duration::from_secs(60)))
        };
        while queue.state.lock().waiting.is_empty() {
            std::thread::yield_now();
        }
        queue.stop();
        assert!(matches!(blocked.join().unwrap(), Err(Error::Shutdown)));
    }

    /// A reservation waiting for room is not overtaken by smaller ones
    /// that would fit (before, each took the room a release freed, and a
    /// large one could wait out its `block_max`): they queue behind it,
    /// first come first served, and get room once it has its own.
    #[test]
    fn a_waiting_reservation_is_served_before_later_smaller_ones() {
        let queue = std::sync::Arc::new(PendingAppends::default());
        queue.reserve(LogId(3), 60, 100, Duration::ZERO).unwrap();
        let large = {
            let queue = std::sync::Arc::clone(&queue);
            std::thread::spawn(move || queue.reserve(LogId(3), 50, 100, Duration::from_secs(60)))
        };
        while queue.state.lock().waiting.is_empty() {
            std::thread::yield_now();
        }
        // 10 bytes fit beside the 60, but the 50 came first.
        match queue.reserve(LogId(3), 10, 100, Duration::ZERO) {
            Err(Error::PipelineFull {
                bytes_in_flight: 60,
                batch_bytes: 10,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        let small = {
            let queue = std::sync::Arc::clone(&queue);
            std::thread::spawn(move || queue.reserve(LogId(3), 10, 100, Duration::from_secs(60)))
        };
        while queue.state.lock().waiting.len() < 2 {
            std::thread::yield_now();
        }
        assert_eq!(queue.bytes_in_flight().0, 60, "the small one waits too");
        queue.release(60);
        large.join().unwrap().unwrap();
        small.join().unwrap().unwrap();
        assert_eq!(queue.bytes_in_flight().0, 60);
        assert!(queue.state.lock().waiting.is_empty());
        assert_eq!(queue.in_flight.waiting.load(Ordering::SeqCst), 0);
    }

    /// A reserver whose wait in line ends in a panic (here the simulation's
    /// guard against blocking the thread that steps it) leaves the line:
    /// its ticket would otherwise stay at the front and hold every later
    /// reserver until its `block_max` ran out, and the raised waiting count
    /// would keep every reservation off the fast path.
    #[test]
    fn a_reserver_that_panics_in_line_leaves_it() {
        let queue = PendingAppends::default();
        queue.reserve(LogId(3), 60, 100, Duration::ZERO).unwrap();
        let panicked = {
            let _simulation = crate::simulation::SimulationGuard::enter(1);
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                queue.reserve(LogId(3), 50, 100, Duration::from_secs(60))
            }))
        };
        assert!(panicked.is_err(), "a wait inside a simulation panics");
        assert!(queue.state.lock().waiting.is_empty());
        assert_eq!(queue.in_flight.waiting.load(Ordering::SeqCst), 0);
        queue.release(60);
        queue
            .reserve(LogId(3), 50, 100, Duration::from_millis(50))
            .expect("nobody is left in line ahead of it");
        assert_eq!(queue.bytes_in_flight().0, 50);
    }
}
