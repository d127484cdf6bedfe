//! [`MemoryCoordinator`]: a [`Coordinator`] held in one process's memory and
//! shared by all the nodes of that process (tests, simulations, a
//! single-process deployment). It owns the metadata, the sessions with their
//! expiry thread, the controller seat and the event queues; it does not
//! persist anything, so it dies with the process.
//!
//! Every call first expires the sessions whose timeout has passed on the
//! injected [`Clock`], so answers are consistent with the clock even between
//! two passes of the expiry thread; the thread exists so that an expiry is
//! noticed, and announced, when nobody calls in (ZooKeeper's ephemeral nodes
//! vanish on their own too). A deterministic simulation builds it without
//! the thread ([`MemoryCoordinator::without_expiry_thread`]) and calls
//! [`MemoryCoordinator::tick`] itself, at
//! [`MemoryCoordinator::next_session_expiry`] on its clock.

use std::collections::{BTreeMap, BTreeSet};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use super::{CasOutcome, ControllerEpoch, Coordinator, CoordinatorEvent, LogState, LogUpdate};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::sync::{Arc, Condvar, Mutex, MutexGuard};
use crate::types::{ClusterId, DirectoryId, Incarnation, LeaderEpoch, LogId, NodeId, ProducerId};

/// Default capacity of each subscriber's event queue.
const SUBSCRIBER_EVENTS_MAX: usize = 1024;

/// The expiry thread checks at least this often, so a session timeout far
/// longer than real time (a [`crate::ManualClock`] moved by hours) is still
/// noticed promptly once the clock has moved.
const REAPER_INTERVAL_MAX: Duration = Duration::from_millis(100);
/// The expiry thread never spins faster than this.
const REAPER_INTERVAL_MIN: Duration = Duration::from_millis(1);
/// How often the expiry thread retries handing a `Resync` to a subscriber
/// whose queue was full.
const RESYNC_RETRY_INTERVAL: Duration = Duration::from_millis(5);
/// The check interval is this fraction of the shortest session timeout, so
/// an expiry is announced within a tenth of a timeout of happening.
const REAPER_INTERVAL_DIVISOR: u32 = 10;

/// An in-process coordinator. Cloning shares it: give every node of the
/// process a clone, preferably its own [`MemoryCoordinator::for_node`] view
/// so that tests can cut that node off alone. When the last clone is
/// dropped, its expiry thread stops.
#[derive(Clone, Debug)]
pub struct MemoryCoordinator {
    handle: Arc<Handle>,
    /// The node calling through this clone, if it is a per-node view: its
    /// calls fail while that node is cut off.
    caller: Option<NodeId>,
}

/// Owns the expiry thread. The thread holds only `Arc<Shared>`, never a
/// `Handle`, so dropping the last `MemoryCoordinator` drops the `Handle`,
/// which stops and joins the thread (never from the thread itself).
#[derive(Debug)]
struct Handle {
    shared: Arc<Shared>,
    reaper: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    /// Wakes the expiry thread early: on shutdown, when a shorter session
    /// appears, or when a `Resync` is owed.
    reaper_wake: Condvar,
    subscriber_events_max: usize,
}

#[derive(Debug)]
struct State {
    logs: BTreeMap<LogId, LogState>,
    sessions: BTreeMap<NodeId, Session>,
    /// The earliest of the sessions' expiries ([`Session::expires_at`]),
    /// and whether some session's expiry is past what an `Instant` holds;
    /// asked on every call, so kept rather than computed each time.
    ///
    /// Invariant: as [`SessionExpiries::of`] gives for `sessions`
    /// (refreshed wherever a session is added, heartbeated or removed).
    session_expiries: SessionExpiries,
    /// Invariant: the controller, if any, has a session.
    controller: Option<NodeId>,
    /// The epoch of the last controller elected (0 before the first).
    controller_epoch: ControllerEpoch,
    next_producer_id: i64,
    /// The incarnation the next registration gets: one counter for every
    /// node, as ZooKeeper's zxid (whose czxid Kafka uses) is.
    next_incarnation: u64,
    /// Chosen at construction (SPEC 2.8).
    cluster_id: ClusterId,
    /// Per node, the directory each of its replicas was placed on.
    replica_directories: BTreeMap<NodeId, BTreeMap<LogId, DirectoryId>>,
    subscribers: Vec<Subscriber>,
    /// Fault injection: every call fails while set.
    unavailable: bool,
    /// Fault injection: calls through these nodes' views fail, and events
    /// for their subscribers are withheld (to be replaced by a `Resync`).
    unreachable_nodes: BTreeSet<NodeId>,
    /// Fault injection: per node, how many more compare-and-set answers to
    /// its views are lost, and whether each call is lost before it takes
    /// effect (`true`) or only its answer after.
    lost_replies: BTreeMap<NodeId, (usize, bool)>,
    /// Set by whatever wants the expiry thread to re-plan before its next
    /// wake-up; cleared when the thread is woken.
    reaper_wake_wanted: bool,
    /// Set once, when the last clone is dropped.
    stopped: bool,
}

#[derive(Debug)]
struct Session {
    session_timeout: Duration,
    last_heartbeat: Instant,
    /// This registration's incarnation.
    incarnation: Incarnation,
}

impl Session {
    /// The instant after which the session has expired, unless heartbeated
    /// (`None`: past what an `Instant` holds, so never). `now` is past it
    /// exactly when more than the timeout passed since the last heartbeat.
    fn expires_at(&self) -> Option<Instant> {
        self.last_heartbeat.checked_add(self.session_timeout)
    }
}

/// See [`State::session_expiries`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct SessionExpiries {
    earliest: Option<Instant>,
    some_unrepresentable: bool,
}

impl SessionExpiries {
    fn of(sessions: &BTreeMap<NodeId, Session>) -> SessionExpiries {
        let mut expiries = SessionExpiries::default();
        for session in sessions.values() {
            match session.expires_at() {
                Some(at) => {
                    expiries.earliest =
                        Some(expiries.earliest.map_or(at, |earliest| earliest.min(at)));
                }
                None => expiries.some_unrepresentable = true,
            }
        }
        expiries
    }
}

#[derive(Debug)]
struct Subscriber {
    node: NodeId,
    /// Gets `LogChanged` for every log, not only those `node` hosts
    /// ([`Coordinator::subscribe_all`]).
    every_log: bool,
    sender: Sender<CoordinatorEvent>,
    /// An event was dropped (the queue was full) or withheld (the node was
    /// cut off) and the subscriber has not yet been sent the `Resync` that
    /// says so.
    missed_events: bool,
}

impl MemoryCoordinator {
    /// A coordinator reading time from `clock`, with event queues of 1024
    /// events.
    pub fn new(clock: Arc<dyn Clock>) -> MemoryCoordinator {
        MemoryCoordinator::with_subscriber_events_max(clock, SUBSCRIBER_EVENTS_MAX)
    }

    /// A coordinator whose subscribers' queues hold `subscriber_events_max`
    /// events (at least 1) before further events are replaced by a `Resync`.
    pub fn with_subscriber_events_max(
        clock: Arc<dyn Clock>,
        subscriber_events_max: usize,
    ) -> MemoryCoordinator {
        MemoryCoordinator::build(clock, subscriber_events_max, ExpiryThread::Run)
    }

    /// A coordinator as [`MemoryCoordinator::new`] makes, but with no
    /// expiry thread: a session expires when a call comes in after its
    /// timeout or when [`MemoryCoordinator::tick`] runs, and only then is
    /// the expiry announced, and an owed `Resync` is retried only then.
    /// For a deterministic simulation, which moves its clock and ticks on
    /// its one thread (a thread of the coordinator's own would run outside
    /// the simulation's schedule).
    pub fn without_expiry_thread(clock: Arc<dyn Clock>) -> MemoryCoordinator {
        MemoryCoordinator::build(clock, SUBSCRIBER_EVENTS_MAX, ExpiryThread::None)
    }

    fn build(
        clock: Arc<dyn Clock>,
        subscriber_events_max: usize,
        expiry_thread: ExpiryThread,
    ) -> MemoryCoordinator {
        let shared = Arc::new(Shared {
            clock,
            state: Mutex::new(State {
                logs: BTreeMap::new(),
                sessions: BTreeMap::new(),
                session_expiries: SessionExpiries::default(),
                controller: None,
                controller_epoch: ControllerEpoch::default(),
                next_producer_id: 0,
                next_incarnation: 1,
                cluster_id: ClusterId::random(),
                replica_directories: BTreeMap::new(),
                subscribers: Vec::new(),
                unavailable: false,
                lost_replies: BTreeMap::new(),
                unreachable_nodes: BTreeSet::new(),
                reaper_wake_wanted: false,
                stopped: false,
            }),
            reaper_wake: Condvar::new(),
            subscriber_events_max: subscriber_events_max.max(1),
        });
        let reaper = match expiry_thread {
            ExpiryThread::Run => start_reaper(&shared),
            ExpiryThread::None => None,
        };
        MemoryCoordinator {
            handle: Arc::new(Handle { shared, reaper }),
            caller: None,
        }
    }

    /// A view of this coordinator for `node`'s own calls: the same service,
    /// except that its calls fail while `node` is cut off by
    /// [`MemoryCoordinator::set_node_unavailable`].
    pub fn for_node(&self, node: NodeId) -> MemoryCoordinator {
        MemoryCoordinator {
            handle: Arc::clone(&self.handle),
            caller: Some(node),
        }
    }

    /// Expires every session whose timeout has passed on the clock and
    /// retries owed `Resync` events, now, on the calling thread. Tests that
    /// move a [`crate::ManualClock`] call this to make expiry deterministic
    /// instead of waiting for the expiry thread.
    pub fn tick(&self) {
        let shared = &self.handle.shared;
        let mut state = shared.state.lock();
        shared.expire(&mut state);
        shared.finish(state);
    }

    /// What [`Coordinator::log_state`] returns, lent to `look` instead of
    /// copied, under the same lock (which expires the sessions due, as
    /// every call does). The simulator looks at the log's state after
    /// every step and copies it only when it changed: a copy (and its
    /// drop) every time was over 1% of a debug simulator run.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn look_at_log_state<T>(
        &self,
        log: LogId,
        look: impl FnOnce(&LogState) -> T,
    ) -> Result<Option<T>> {
        Ok(self.lock()?.logs.get(&log).map(look))
    }

    /// When, on the coordinator's clock, the next session expires if its
    /// node does not heartbeat before (`None` with no session): a
    /// coordinator without an expiry thread is ticked then. A session
    /// expires once its timeout has passed strictly, so a tick at this
    /// instant ends it only if the clock has moved past it.
    pub fn next_session_expiry(&self) -> Option<Instant> {
        let state = self.handle.shared.state.lock();
        if !state.session_expiries.some_unrepresentable {
            return state.session_expiries.earliest;
        }
        state
            .sessions
            .values()
            .map(|session| session.last_heartbeat + session.session_timeout)
            .min()
    }

    /// Ends `node`'s session at once, as when ZooKeeper notices a crashed
    /// node: it leaves the live set (announced with `NodesChanged`) and
    /// loses the controller seat. Works while the coordinator is
    /// unavailable, since it models the node, not the service.
    pub fn fail_node(&self, node: NodeId) {
        let shared = &self.handle.shared;
        let mut state = shared.state.lock();
        state.expire_sessions(shared.clock.now());
        state.end_sessions(&[node]);
        shared.finish(state);
    }

    /// Fault injection: while `true`, every [`Coordinator`] call fails with
    /// `Error::Coordinator { reason: "unavailable" }` and changes nothing,
    /// and events are withheld; each subscriber that missed one gets a
    /// `Resync` once the coordinator is back. Sessions keep expiring
    /// meanwhile, as they would on a ZooKeeper ensemble its clients cannot
    /// reach (their heartbeats fail).
    pub fn set_unavailable(&self, unavailable: bool) {
        let shared = &self.handle.shared;
        let mut state = shared.state.lock();
        state.unavailable = unavailable;
        state.reaper_wake_wanted = true;
        shared.finish(state);
    }

    /// Fault injection: cuts `node` off from the coordinator (or reconnects
    /// it). While cut off, calls through its [`MemoryCoordinator::for_node`]
    /// views fail as with [`MemoryCoordinator::set_unavailable`], its
    /// heartbeats therefore stop and its session expires, and events for its
    /// subscribers are withheld until it is back (then it gets a `Resync`).
    /// Everyone else carries on: this is a leader partitioned away from
    /// ZooKeeper while the controller elects a replacement (SPEC 3.7).
    pub fn set_node_unavailable(&self, node: NodeId, unavailable: bool) {
        let shared = &self.handle.shared;
        let mut state = shared.state.lock();
        if unavailable {
            state.unreachable_nodes.insert(node);
        } else {
            state.unreachable_nodes.remove(&node);
        }
        state.reaper_wake_wanted = true;
        shared.finish(state);
    }

    /// Fault injection: the next `count` compare-and-set calls (plain or as
    /// controller) through `node`'s [`MemoryCoordinator::for_node`] views
    /// take effect as usual — applied or stale — but their answer is lost:
    /// they fail with [`Error::CoordinatorOutcomeUnknown`], as a ZooKeeper
    /// write does when the connection drops after the server applied it
    /// (SPEC 3.4). As with that connection, `node` is then cut off (see
    /// [`MemoryCoordinator::set_node_unavailable`]; the event of the write
    /// is withheld from it too) until the test reconnects it. A call
    /// refused before it reached the log (a fenced controller, an invalid
    /// update) still answers. `count` 0 ends it.
    pub fn lose_compare_and_set_replies(&self, node: NodeId, count: usize) {
        self.lose_compare_and_set_calls(node, count, false);
    }

    /// Fault injection: as
    /// [`lose_compare_and_set_replies`](Self::lose_compare_and_set_replies),
    /// but with `before_effect` the calls are lost on their way, before
    /// they reach the log: nothing is written, yet the caller hears the
    /// same [`Error::CoordinatorOutcomeUnknown`] (SPEC 3.4: the caller
    /// cannot tell the two apart, and must read the state to learn which
    /// happened).
    pub fn lose_compare_and_set_calls(&self, node: NodeId, count: usize, before_effect: bool) {
        let shared = &self.handle.shared;
        let mut state = shared.state.lock();
        if count == 0 {
            state.lost_replies.remove(&node);
        } else {
            state.lost_replies.insert(node, (count, before_effect));
        }
        shared.finish(state);
    }

    /// Fault injection: whether calls through `node`'s views fail or may
    /// lose their answers now: it is cut off
    /// ([`MemoryCoordinator::set_node_unavailable`], or after a lost
    /// answer), or has answers still to lose
    /// ([`MemoryCoordinator::lose_compare_and_set_replies`]).
    pub fn is_node_faulty(&self, node: NodeId) -> bool {
        let state = self.handle.shared.state.lock();
        state.unreachable_nodes.contains(&node) || state.lost_replies.contains_key(&node)
    }

    /// The number of receivers still subscribed (dropped receivers are
    /// forgotten at the next event sent to them).
    pub fn subscriber_count(&self) -> usize {
        self.handle.shared.state.lock().subscribers.len()
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>> {
        self.handle.shared.lock(self.caller)
    }

    fn add_subscriber(&self, node: NodeId, every_log: bool) -> Result<Receiver<CoordinatorEvent>> {
        let mut state = self.lock()?;
        let (sender, receiver) =
            crossbeam_channel::bounded(self.handle.shared.subscriber_events_max);
        state.subscribers.push(Subscriber {
            node,
            every_log,
            sender,
            missed_events: false,
        });
        Ok(receiver)
    }
}

/// Whether a coordinator runs its own expiry thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ExpiryThread {
    Run,
    None,
}

/// Starts the expiry thread; `None` if it cannot be started, which only
/// loses the unprompted announcement of an expiry: every call still
/// expires sessions lazily, and `tick` works.
fn start_reaper(shared: &Arc<Shared>) -> Option<JoinHandle<()>> {
    let for_thread = Arc::clone(shared);
    crate::simulation::forbid_in_simulation("spawning the coordinator's reaper thread");
    let reaper = std::thread::Builder::new()
        .name("isrlog-coordinator-reaper".to_owned())
        .spawn(move || run_reaper(&for_thread));
    match reaper {
        Ok(join) => Some(join),
        Err(error) => {
            tracing::warn!(%error, "cannot start the coordinator's session expiry thread");
            None
        }
    }
}

impl Shared {
    /// Expires every session whose timeout has passed on the clock and
    /// retries owed `Resync` events: one pass of the expiry thread, or one
    /// [`MemoryCoordinator::tick`].
    fn expire(&self, state: &mut State) {
        state.expire_sessions(self.clock.now());
        state.flush_resyncs();
    }

    /// The state, with expired sessions already ended, or the unavailable
    /// error if the service or the calling node is cut off.
    fn lock(&self, caller: Option<NodeId>) -> Result<MutexGuard<'_, State>> {
        let mut state = self.state.lock();
        let cut_off = caller.is_some_and(|node| state.unreachable_nodes.contains(&node));
        if state.unavailable || cut_off {
            return Err(Error::Coordinator {
                reason: "unavailable".to_owned(),
            });
        }
        state.expire_sessions(self.clock.now());
        Ok(state)
    }

    /// Releases the state, waking the expiry thread if it must re-plan.
    fn finish(&self, mut state: MutexGuard<'_, State>) {
        if std::mem::take(&mut state.reaper_wake_wanted) {
            self.reaper_wake.notify_one();
        }
        debug_assert!({
            state.check_invariants();
            true
        });
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.state.lock().stopped = true;
        self.shared.reaper_wake.notify_all();
        if let Some(reaper) = self.reaper.take() {
            if reaper.join().is_err() {
                tracing::warn!("the coordinator's session expiry thread panicked");
            }
        }
    }
}

fn run_reaper(shared: &Shared) {
    let mut state = shared.state.lock();
    while !state.stopped {
        shared.expire(&mut state);
        state.reaper_wake_wanted = false;
        let interval = state.reaper_interval();
        crate::simulation::forbid_in_simulation("the reaper's condition variable wait");
        shared.reaper_wake.wait_for(&mut state, interval);
    }
}

impl State {
    /// Ends every session not heartbeated within its timeout.
    fn expire_sessions(&mut self, now: Instant) {
        // None has expired while `now` is not past the earliest expiry.
        if self
            .session_expiries
            .earliest
            .is_none_or(|earliest| now <= earliest)
        {
            return;
        }
        let expired: Vec<NodeId> = self
            .sessions
            .iter()
            .filter(|(_, session)| {
                now.saturating_duration_since(session.last_heartbeat) > session.session_timeout
            })
            .map(|(node, _)| *node)
            .collect();
        if !expired.is_empty() {
            tracing::info!(nodes = ?expired, "coordinator sessions expired");
            self.end_sessions(&expired);
        }
    }

    /// Removes the sessions of `nodes` (those that have one), frees the
    /// controller seat if its holder is among them, and announces both.
    fn end_sessions(&mut self, nodes: &[NodeId]) {
        let ended: Vec<NodeId> = nodes
            .iter()
            .copied()
            .filter(|node| self.sessions.remove(node).is_some())
            .collect();
        if ended.is_empty() {
            return;
        }
        self.session_expiries = SessionExpiries::of(&self.sessions);
        let live = self.live_nodes();
        self.notify_all(CoordinatorEvent::NodesChanged { live });
        if self
            .controller
            .is_some_and(|controller| ended.contains(&controller))
        {
            self.release_controller_seat("session ended");
        }
    }

    fn live_nodes(&self) -> Vec<NodeId> {
        self.sessions.keys().copied().collect()
    }

    /// The compare-and-set itself. The epoch and version are compared
    /// first: an update built from a stale read is answered `Stale`,
    /// whatever it contains, because the caller must re-read before its
    /// update can even be judged.
    fn compare_and_set(
        &mut self,
        log: LogId,
        expected_epoch: LeaderEpoch,
        expected_version: u64,
        update: LogUpdate,
    ) -> Result<CasOutcome> {
        let current = self.logs.get(&log).ok_or(Error::UnknownLog(log))?;
        if current.leader_epoch != expected_epoch || current.version != expected_version {
            return Ok(CasOutcome::Stale(current.clone()));
        }
        current.validate_update(&update)?;
        let next = current.with_update(update);
        // A replica a reassignment removed hears of it too (SPEC 3.10): it
        // stops, and deletes its copy, on this state.
        let removed: Vec<NodeId> = current
            .replicas
            .iter()
            .copied()
            .filter(|node| !next.replicas.contains(node))
            .collect();
        tracing::debug!(%log, leader = ?next.leader, epoch = %next.leader_epoch,
            isr = ?next.in_sync_replicas, version = next.version, "coordinator log state updated");
        self.logs.insert(log, next.clone());
        self.notify_log_changed(&next, &removed);
        Ok(CasOutcome::Applied(next))
    }

    /// [`State::compare_and_set`] for `caller`, whose answer may be lost
    /// (see [`MemoryCoordinator::lose_compare_and_set_calls`]): the
    /// caller is then cut off before the write, so that it does not hear of
    /// the write through an event either. Only an answer from the log
    /// itself (applied or stale) can be lost; an error still answers. A
    /// call lost before it took effect writes nothing; the caller is cut
    /// off all the same.
    fn compare_and_set_for(
        &mut self,
        caller: Option<NodeId>,
        log: LogId,
        expected_epoch: LeaderEpoch,
        expected_version: u64,
        update: LogUpdate,
    ) -> Result<CasOutcome> {
        let losing = caller.and_then(|node| Some((node, self.lost_replies.get(&node)?.1)));
        let Some((node, before_effect)) = losing else {
            return self.compare_and_set(log, expected_epoch, expected_version, update);
        };
        let was_cut_off = !self.unreachable_nodes.insert(node);
        let applied = if before_effect {
            false
        } else {
            let outcome = self.compare_and_set(log, expected_epoch, expected_version, update);
            if outcome.is_err() {
                if !was_cut_off {
                    self.unreachable_nodes.remove(&node);
                }
                return outcome;
            }
            matches!(outcome, Ok(CasOutcome::Applied(_)))
        };
        if let Some((left, _)) = self.lost_replies.get_mut(&node) {
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.lost_replies.remove(&node);
            }
        }
        tracing::info!(%node, %log, applied, before_effect, "fault injection: compare-and-set answer lost, node cut off");
        self.reaper_wake_wanted = true;
        Err(Error::CoordinatorOutcomeUnknown {
            operation: format!("update {log}"),
            reason: "the answer was lost (fault injection)".to_owned(),
        })
    }

    /// Empties the controller seat and announces it.
    fn release_controller_seat(&mut self, reason: &'static str) {
        if let Some(controller) = self.controller.take() {
            tracing::info!(%controller, epoch = %self.controller_epoch, reason, "controller seat released");
            self.notify_all(CoordinatorEvent::ControllerChanged {
                controller: None,
                epoch: self.controller_epoch,
            });
        }
    }

    fn notify_all(&mut self, event: CoordinatorEvent) {
        self.notify(|_| true, event);
    }

    /// Announces `state` to the subscribers of the nodes hosting it, of the
    /// nodes in `removed` (replicas the change took away) and to every
    /// subscriber of all logs.
    fn notify_log_changed(&mut self, state: &LogState, removed: &[NodeId]) {
        let hosts: Vec<NodeId> = state.replicas.iter().chain(removed).copied().collect();
        self.notify(
            |subscriber| subscriber.every_log || hosts.contains(&subscriber.node),
            CoordinatorEvent::LogChanged(state.clone()),
        );
    }

    /// Sends `event` to every subscriber that `wants` it, without
    /// blocking: a full queue loses the event and owes its subscriber a
    /// `Resync`. Sending happens under the state lock, which `try_send`
    /// never blocks, so every receiver sees events in the order the changes
    /// were made.
    fn notify(&mut self, wants: impl Fn(&Subscriber) -> bool, event: CoordinatorEvent) {
        let mut dropped = false;
        let unavailable = self.unavailable;
        let unreachable_nodes = &self.unreachable_nodes;
        self.subscribers.retain_mut(|subscriber| {
            if !wants(subscriber) {
                return true;
            }
            if unavailable || unreachable_nodes.contains(&subscriber.node) {
                // A node cut off hears nothing; it re-reads once back.
                subscriber.missed_events = true;
                return true;
            }
            if subscriber.missed_events {
                match subscriber.sender.try_send(CoordinatorEvent::Resync) {
                    Ok(()) => subscriber.missed_events = false,
                    // The owed Resync already covers this event.
                    Err(TrySendError::Full(_)) => return true,
                    Err(TrySendError::Disconnected(_)) => return false,
                }
            }
            match subscriber.sender.try_send(event.clone()) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    subscriber.missed_events = true;
                    dropped = true;
                    true
                }
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
        if dropped {
            self.reaper_wake_wanted = true;
        }
    }

    /// Hands owed `Resync` events to reachable subscribers whose queues
    /// have room.
    fn flush_resyncs(&mut self) {
        if self.unavailable {
            return;
        }
        let unreachable_nodes = &self.unreachable_nodes;
        self.subscribers.retain_mut(|subscriber| {
            if !subscriber.missed_events || unreachable_nodes.contains(&subscriber.node) {
                return true;
            }
            match subscriber.sender.try_send(CoordinatorEvent::Resync) {
                Ok(()) => {
                    subscriber.missed_events = false;
                    true
                }
                Err(TrySendError::Full(_)) => true,
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
    }

    /// How long the expiry thread may sleep: a fraction of the shortest
    /// session timeout, shorter while a `Resync` is owed.
    fn reaper_interval(&self) -> Duration {
        let resync_owed = !self.unavailable
            && self.subscribers.iter().any(|subscriber| {
                subscriber.missed_events && !self.unreachable_nodes.contains(&subscriber.node)
            });
        if resync_owed {
            return RESYNC_RETRY_INTERVAL;
        }
        self.sessions
            .values()
            .map(|session| session.session_timeout / REAPER_INTERVAL_DIVISOR)
            .min()
            .unwrap_or(REAPER_INTERVAL_MAX)
            .clamp(REAPER_INTERVAL_MIN, REAPER_INTERVAL_MAX)
    }

    fn check_invariants(&self) {
        // Every path that changes a session refreshes the cache: one that
        // did not would silently stop sessions expiring (review of
        // 9dc41f1, helper-91).
        assert_eq!(
            self.session_expiries,
            SessionExpiries::of(&self.sessions),
            "the earliest session expiry is stale"
        );
        for (log, state) in &self.logs {
            assert_eq!(*log, state.log, "log stored under the wrong id");
            state.check_invariants();
        }
        if let Some(controller) = self.controller {
            assert!(
                self.sessions.contains_key(&controller),
                "controller {controller} has no session"
            );
            assert!(
                self.controller_epoch > ControllerEpoch::default(),
                "a controller sits with epoch 0"
            );
        }
    }
}

impl Coordinator for MemoryCoordinator {
    fn create_log(&self, log: LogId, replicas: Vec<NodeId>) -> Result<LogState> {
        let mut state = self.lock()?;
        if state.logs.contains_key(&log) {
            return Err(Error::Coordinator {
                reason: format!("cannot create {log}: it already exists"),
            });
        }
        let created = LogState::initial(log, replicas)?;
        state.logs.insert(log, created.clone());
        state.notify_log_changed(&created, &[]);
        self.handle.shared.finish(state);
        Ok(created)
    }

    fn log_state(&self, log: LogId) -> Result<Option<LogState>> {
        Ok(self.lock()?.logs.get(&log).cloned())
    }

    fn logs(&self) -> Result<Vec<LogState>> {
        Ok(self.lock()?.logs.values().cloned().collect())
    }

    fn compare_and_set(
        &self,
        log: LogId,
        expected_epoch: LeaderEpoch,
        expected_version: u64,
        update: LogUpdate,
    ) -> Result<CasOutcome> {
        let mut state = self.lock()?;
        let outcome =
            state.compare_and_set_for(self.caller, log, expected_epoch, expected_version, update);
        self.handle.shared.finish(state);
        outcome
    }

    /// The seat check and the compare-and-set happen under one lock, so no
    /// controller change can fall between them.
    fn compare_and_set_as_controller(
        &self,
        controller: NodeId,
        controller_epoch: ControllerEpoch,
        log: LogId,
        expected_epoch: LeaderEpoch,
        expected_version: u64,
        update: LogUpdate,
    ) -> Result<CasOutcome> {
        let mut state = self.lock()?;
        // `lock` ended expired sessions, and with them their seat.
        if state.controller != Some(controller) || state.controller_epoch != controller_epoch {
            let holder = match state.controller {
                Some(holder) => format!(
                    "{holder} holds the seat with controller epoch {}",
                    state.controller_epoch
                ),
                None => format!(
                    "the seat is empty (last controller epoch {})",
                    state.controller_epoch
                ),
            };
            return Err(Error::Coordinator {
                reason: format!(
                    "write to {log} refused: {controller} is not the controller with controller epoch {controller_epoch} ({holder})"
                ),
            });
        }
        let outcome =
            state.compare_and_set_for(self.caller, log, expected_epoch, expected_version, update);
        self.handle.shared.finish(state);
        outcome
    }

    /// Every call is a new registration with a larger incarnation, also
    /// for a node that is still live: this coordinator is shared by every
    /// node of a test cluster and cannot tell a process renewing its session
    /// from a restarted one taking over an unexpired session (the case that
    /// must fence the old process's fetches).
    fn register_node(&self, node: NodeId, session_timeout: Duration) -> Result<Incarnation> {
        if session_timeout.is_zero() {
            return Err(Error::InvalidConfig {
                field: "session_timeout",
                value: format!("{session_timeout:?}"),
                reason: "a session must last longer than zero",
            });
        }
        let mut state = self.lock()?;
        let now = self.handle.shared.clock.now();
        let incarnation = Incarnation(state.next_incarnation);
        state.next_incarnation += 1;
        state.sessions.insert(
            node,
            Session {
                session_timeout,
                last_heartbeat: now,
                incarnation,
            },
        );
        state.session_expiries = SessionExpiries::of(&state.sessions);
        // Announced also when the set stays the same: the node's
        // incarnation changed, and its leaders must learn it.
        let live = state.live_nodes();
        state.notify_all(CoordinatorEvent::NodesChanged { live });
        // The new timeout may be the shortest: let the thread re-plan.
        state.reaper_wake_wanted = true;
        self.handle.shared.finish(state);
        Ok(incarnation)
    }

    fn heartbeat(&self, node: NodeId) -> Result<()> {
        let mut state = self.lock()?;
        let now = self.handle.shared.clock.now();
        match state.sessions.get_mut(&node) {
            Some(session) => {
                session.last_heartbeat = now;
                state.session_expiries = SessionExpiries::of(&state.sessions);
                Ok(())
            }
            None => Err(Error::Coordinator {
                reason: format!("{node} has no live session (it expired or was never opened)"),
            }),
        }
    }

    fn unregister_node(&self, node: NodeId) -> Result<()> {
        let mut state = self.lock()?;
        state.end_sessions(&[node]);
        self.handle.shared.finish(state);
        Ok(())
    }

    fn live_nodes(&self) -> Result<Vec<NodeId>> {
        Ok(self.lock()?.live_nodes())
    }

    fn live_node_incarnations(&self) -> Result<Vec<(NodeId, Incarnation)>> {
        Ok(self
            .lock()?
            .sessions
            .iter()
            .map(|(node, session)| (*node, session.incarnation))
            .collect())
    }

    fn subscribe(&self, node: NodeId) -> Result<Receiver<CoordinatorEvent>> {
        self.add_subscriber(node, false)
    }

    fn subscribe_all(&self, node: NodeId) -> Result<Receiver<CoordinatorEvent>> {
        self.add_subscriber(node, true)
    }

    fn try_become_controller(&self, node: NodeId) -> Result<Option<ControllerEpoch>> {
        let mut state = self.lock()?;
        if !state.sessions.contains_key(&node) {
            return Err(Error::Coordinator {
                reason: format!("{node} cannot become controller: it has no live session"),
            });
        }
        // Expired holders were removed by `lock`, so a holder is live.
        match state.controller {
            Some(holder) if holder == node => Ok(Some(state.controller_epoch)),
            Some(_) => Ok(None),
            None => {
                let epoch = state.controller_epoch.next();
                state.controller_epoch = epoch;
                state.controller = Some(node);
                tracing::info!(controller = %node, %epoch, "controller elected");
                state.notify_all(CoordinatorEvent::ControllerChanged {
                    controller: Some(node),
                    epoch,
                });
                self.handle.shared.finish(state);
                Ok(Some(epoch))
            }
        }
    }

    fn resign_controller(&self, node: NodeId) -> Result<()> {
        let mut state = self.lock()?;
        if state.controller == Some(node) {
            state.release_controller_seat("resigned");
        }
        self.handle.shared.finish(state);
        Ok(())
    }

    fn controller(&self) -> Result<Option<(NodeId, ControllerEpoch)>> {
        let state = self.lock()?;
        Ok(state
            .controller
            .map(|controller| (controller, state.controller_epoch)))
    }

    fn cluster_id(&self) -> Result<ClusterId> {
        Ok(self.lock()?.cluster_id)
    }

    fn replica_directories(&self, node: NodeId) -> Result<Vec<(LogId, DirectoryId)>> {
        Ok(self
            .lock()?
            .replica_directories
            .get(&node)
            .map(|logs| logs.iter().map(|(log, dir)| (*log, *dir)).collect())
            .unwrap_or_default())
    }

    fn record_replica_directories(
        &self,
        node: NodeId,
        directory: DirectoryId,
        logs: &[LogId],
    ) -> Result<()> {
        let mut state = self.lock()?;
        let recorded = state.replica_directories.entry(node).or_default();
        for log in logs {
            recorded.insert(*log, directory);
        }
        Ok(())
    }

    fn allocate_producer_id(&self) -> Result<ProducerId> {
        let mut state = self.lock()?;
        let id = ProducerId(state.next_producer_id);
        state.next_producer_id =
            state
                .next_producer_id
                .checked_add(1)
                .ok_or_else(|| Error::Coordinator {
                    reason: "producer ids exhausted".to_owned(),
                })?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, SystemClock};

    fn manual() -> (MemoryCoordinator, ManualClock) {
        let clock = ManualClock::default();
        (MemoryCoordinator::new(Arc::new(clock.clone())), clock)
    }

    /// SPEC 3.4: a compare-and-set lost before it took effect and one
    /// whose answer was lost after look the same to the caller (an unknown
    /// outcome, and it is cut off); only a read, once reconnected, tells
    /// them apart: the first wrote nothing, the second its update.
    #[test]
    fn a_call_lost_before_it_takes_effect_writes_nothing_and_looks_like_a_lost_answer() {
        let (coordinator, _clock) = manual();
        let node = NodeId(1);
        let view = coordinator.for_node(node);
        let log = LogId(7);
        let before = coordinator
            .create_log(log, vec![NodeId(1), NodeId(2), NodeId(3)])
            .unwrap();
        let shrink =
            |state: &LogState| LogUpdate::in_sync_replicas(state, vec![NodeId(1), NodeId(2)], 1);
        for before_effect in [true, false] {
            let current = coordinator.log_state(log).unwrap().unwrap();
            coordinator.lose_compare_and_set_calls(node, 1, before_effect);
            let outcome =
                view.compare_and_set(log, current.leader_epoch, current.version, shrink(&current));
            assert!(
                matches!(outcome, Err(Error::CoordinatorOutcomeUnknown { .. })),
                "before_effect {before_effect}: {outcome:?}"
            );
            assert!(coordinator.is_node_faulty(node), "the caller is cut off");
            coordinator.set_node_unavailable(node, false);
            assert!(!coordinator.is_node_faulty(node), "one call was to be lost");
            let after = view.log_state(log).unwrap().unwrap();
            if before_effect {
                assert_eq!(after, current, "a call lost on its way wrote nothing");
            } else {
                assert!(after.is_result_of(&current, &shrink(&current)));
                assert_eq!(after.version, before.version + 1);
            }
        }
    }

    #[test]
    fn expiry_thread_exits_when_the_last_clone_is_dropped() {
        let coordinator = MemoryCoordinator::new(Arc::new(SystemClock));
        let other = coordinator.clone();
        let shared = Arc::clone(&coordinator.handle.shared);
        drop(coordinator);
        assert!(
            !shared.state.lock().stopped,
            "a clone is still alive, the thread must run"
        );
        drop(other);
        assert!(shared.state.lock().stopped);
        // The thread held the only other reference; it has been joined.
        assert_eq!(Arc::strong_count(&shared), 1);
    }

    /// Without the expiry thread nothing expires or is announced until a
    /// call or a tick; a tick after the clock passed the expiry the
    /// coordinator names ends the session and announces it.
    #[test]
    fn without_the_expiry_thread_a_tick_expires_and_announces() {
        let clock = ManualClock::default();
        let coordinator = MemoryCoordinator::without_expiry_thread(Arc::new(clock.clone()));
        assert!(coordinator.handle.reaper.is_none());
        assert_eq!(Arc::strong_count(&coordinator.handle.shared), 1);
        assert_eq!(coordinator.next_session_expiry(), None);
        let timeout = Duration::from_secs(3);
        coordinator.register_node(NodeId(1), timeout).unwrap();
        coordinator.register_node(NodeId(2), timeout * 2).unwrap();
        assert_eq!(
            coordinator.next_session_expiry(),
            Some(clock.now() + timeout)
        );
        let events = coordinator.subscribe(NodeId(2)).unwrap();
        clock.advance(timeout + Duration::from_nanos(1));
        assert!(events.try_recv().is_err(), "nothing runs between ticks");
        assert_eq!(
            coordinator.shared_state_sessions(),
            vec![NodeId(1), NodeId(2)]
        );
        coordinator.tick();
        assert_eq!(coordinator.shared_state_sessions(), vec![NodeId(2)]);
        assert!(matches!(
            events.try_recv(),
            Ok(CoordinatorEvent::NodesChanged { .. })
        ));
        assert_eq!(
            coordinator.next_session_expiry(),
            Some(clock.now() + timeout - Duration::from_nanos(1))
        );
    }

    /// Inside a simulation the coordinator with a reaper thread cannot be
    /// built (the spawn is refused by name), the thread-less one can, and
    /// its cluster id comes from the simulation's seed.
    #[test]
    fn a_simulation_builds_only_the_thread_less_coordinator_with_a_seeded_cluster_id() {
        let cluster_id = |seed| {
            let _simulation = crate::simulation::SimulationGuard::enter(seed);
            let clock = Arc::new(ManualClock::default());
            let refused = std::panic::catch_unwind(|| MemoryCoordinator::new(clock.clone()));
            let message = refused.expect_err("the reaper spawn must be refused");
            let text = message
                .downcast_ref::<String>()
                .expect("a formatted message");
            assert!(text.contains("reaper thread"), "{text}");
            MemoryCoordinator::without_expiry_thread(clock)
                .cluster_id()
                .unwrap()
        };
        assert_eq!(cluster_id(5), cluster_id(5));
        assert_ne!(cluster_id(5), cluster_id(6));
    }

    #[test]
    fn producer_ids_count_from_zero() {
        let (coordinator, _clock) = manual();
        let ids: Vec<ProducerId> = (0..3)
            .map(|_| coordinator.allocate_producer_id().unwrap())
            .collect();
        assert_eq!(ids, vec![ProducerId(0), ProducerId(1), ProducerId(2)]);
    }

    #[test]
    fn tick_expires_at_the_exact_boundary() {
        let (coordinator, clock) = manual();
        coordinator
            .register_node(NodeId(1), Duration::from_secs(3))
            .unwrap();
        clock.advance(Duration::from_secs(3));
        coordinator.tick();
        assert_eq!(coordinator.shared_state_sessions(), vec![NodeId(1)]);
        clock.advance(Duration::from_nanos(1));
        coordinator.tick();
        assert!(coordinator.shared_state_sessions().is_empty());
    }

    #[test]
    fn reaper_interval_follows_the_shortest_session() {
        let (coordinator, _clock) = manual();
        let state = || coordinator.handle.shared.state.lock().reaper_interval();
        assert_eq!(state(), REAPER_INTERVAL_MAX);
        coordinator
            .register_node(NodeId(1), Duration::from_millis(200))
            .unwrap();
        assert_eq!(state(), Duration::from_millis(20));
        coordinator
            .register_node(NodeId(2), Duration::from_millis(5))
            .unwrap();
        assert_eq!(state(), REAPER_INTERVAL_MIN);
    }

    /// The calls added for controller fencing and hand-over obey fault
    /// injection like every other: refused, nothing changed.
    #[test]
    fn controller_calls_fail_while_unavailable_and_change_nothing() {
        let (coordinator, _clock) = manual();
        let node = NodeId(1);
        coordinator
            .register_node(node, Duration::from_secs(60))
            .unwrap();
        let created = coordinator.create_log(LogId(1), vec![node]).unwrap();
        let epoch = coordinator.try_become_controller(node).unwrap().unwrap();
        coordinator.set_unavailable(true);
        let update = LogUpdate::in_sync_replicas(&created, vec![node], 1);
        let refused = [
            coordinator
                .compare_and_set_as_controller(node, epoch, LogId(1), LeaderEpoch::ZERO, 0, update)
                .map(drop),
            coordinator.resign_controller(node),
            coordinator.subscribe_all(node).map(drop),
        ];
        for outcome in refused {
            assert!(
                matches!(&outcome, Err(Error::Coordinator { reason }) if reason == "unavailable"),
                "{outcome:?}"
            );
        }
        coordinator.set_unavailable(false);
        assert_eq!(coordinator.controller().unwrap(), Some((node, epoch)));
        assert_eq!(coordinator.log_state(LogId(1)).unwrap(), Some(created));
    }

    impl MemoryCoordinator {
        fn shared_state_sessions(&self) -> Vec<NodeId> {
            self.handle.shared.state.lock().live_nodes()
        }
    }
}
