//! A [`Coordinator`] wrapper whose calls can be made slow, or hang, while
//! a test watches what the node still does on time: timeouts of pending
//! appends, a controlled shutdown's deadline. It owns no coordinator state
//! of its own; every call goes to the wrapped coordinator once its delay
//! has passed.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::coordinator::{
    CasOutcome, ControllerEpoch, Coordinator, CoordinatorEvent, LogState, LogUpdate,
};
use crate::error::{Error, Result};
use crate::sync::{Arc, AtomicU64, Condvar, Mutex, Ordering};
use crate::types::{ClusterId, DirectoryId, Incarnation, LeaderEpoch, LogId, NodeId, ProducerId};

/// How long a "hanging" call blocks at most: longer than any test runs,
/// yet still a deadline.
const HANG_MAX: Duration = Duration::from_secs(3600);

#[derive(Debug, Default)]
struct DelayState {
    /// How long each call takes, at least.
    delay: Mutex<Duration>,
    /// Signalled when the delay changes, so a call blocked by an older,
    /// longer delay re-checks (a release ends a hang at once).
    changed: Condvar,
    /// Calls that waited (their delay was not zero).
    delayed_calls: AtomicU64,
    /// Logs whose documents this node's coordinator pretends it cannot
    /// read or change, as one written by a newer version.
    refused: Mutex<HashSet<LogId>>,
    /// The answer of the next `logs()` call, once, instead of the wrapped
    /// coordinator's: a list served by a ZooKeeper server behind the
    /// ensemble's leader.
    stale_logs: Mutex<Option<Vec<LogState>>>,
    /// Kinds of call that block until released ([`CoordinatorDelay::hold`]).
    held: Mutex<HashSet<HeldCall>>,
    /// Signalled when `held` changes.
    held_changed: Condvar,
    /// Calls blocked by `held` right now.
    held_waiting: AtomicU64,
    /// How many of the next unassigns ([`Coordinator::record_replica_directories`]
    /// with [`DirectoryId::UNASSIGNED`]) fail.
    unassigns_to_fail: AtomicU64,
}

/// A kind of coordinator call that [`CoordinatorDelay::hold`] can block on
/// its own, while every other call goes through: to stop a node between
/// the checks it makes and the write it builds on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeldCall {
    /// [`Coordinator::compare_and_set`] (not the controller's).
    CompareAndSet,
    /// [`Coordinator::register_node`].
    RegisterNode,
}

/// The knob of a [`SlowCoordinator`], shared with the test: every call
/// through the wrapper takes at least the current delay (measured from the
/// call's start, re-read whenever it changes).
#[derive(Clone, Debug, Default)]
pub struct CoordinatorDelay {
    state: Arc<DelayState>,
}

impl CoordinatorDelay {
    /// A knob with no delay.
    pub fn new() -> CoordinatorDelay {
        CoordinatorDelay::default()
    }

    /// Every call from now on (and every call still waiting) takes at least
    /// `delay`.
    pub fn set(&self, delay: Duration) {
        *self.state.delay.lock() = delay;
        self.state.changed.notify_all();
    }

    /// Every call blocks until [`release`](Self::release) (or an hour).
    pub fn hang(&self) {
        self.set(HANG_MAX);
    }

    /// Calls go through at once again, and those blocked return now.
    pub fn release(&self) {
        self.set(Duration::ZERO);
    }

    /// Calls that were delayed so far.
    pub fn delayed_calls(&self) -> u64 {
        self.state.delayed_calls.load(Ordering::SeqCst)
    }

    /// From now on this node's coordinator cannot read or change `log`'s
    /// document, as if a newer version had written it: reading it is an
    /// [`Error::CoordinatorDocument`], listing all logs leaves it out,
    /// writing it is refused, and an unclean-shutdown report skips it. The
    /// wrapped coordinator and the other nodes see it as it is.
    pub fn refuse_document(&self, log: LogId) {
        self.state.refused.lock().insert(log);
    }

    /// Undoes [`refuse_document`](Self::refuse_document), as an upgraded
    /// node would (here without changing the document, so nothing
    /// notifies).
    pub fn accept_document(&self, log: LogId) {
        self.state.refused.lock().remove(&log);
    }

    /// The next call listing all logs (`logs()`) answers `states`, an
    /// older view, once, as a lagging ZooKeeper server may: `logs()` does
    /// not sync. Every other call, and the ones after, see the wrapped
    /// coordinator as it is.
    pub fn serve_stale_log_list(&self, states: Vec<LogState>) {
        *self.state.stale_logs.lock() = Some(states);
    }

    /// Calls of kind `call` block, from now on, until
    /// [`release_held`](Self::release_held) (or an hour); the others go
    /// through.
    pub fn hold(&self, call: HeldCall) {
        self.state.held.lock().insert(call);
        self.state.held_changed.notify_all();
    }

    /// Calls of kind `call` go through again, and those blocked return now.
    pub fn release_held(&self, call: HeldCall) {
        self.state.held.lock().remove(&call);
        self.state.held_changed.notify_all();
    }

    /// The next `count` calls recording replicas as placed on no
    /// directory ([`DirectoryId::UNASSIGNED`]) fail with
    /// [`Error::Coordinator`], without reaching the wrapped coordinator:
    /// a deleted replica's unassign that did not get through.
    pub fn fail_unassigns(&self, count: u64) {
        self.state.unassigns_to_fail.store(count, Ordering::SeqCst);
    }

    /// How many of the unassigns [`fail_unassigns`](Self::fail_unassigns)
    /// asked to fail are still to come.
    pub fn unassigns_to_fail(&self) -> u64 {
        self.state.unassigns_to_fail.load(Ordering::SeqCst)
    }

    /// How many calls [`hold`](Self::hold) blocks right now.
    pub fn held_waiting(&self) -> u64 {
        self.state.held_waiting.load(Ordering::SeqCst)
    }

    fn wait_if_held(&self, call: HeldCall) {
        let mut held = self.state.held.lock();
        if !held.contains(&call) {
            return;
        }
        self.state.held_waiting.fetch_add(1, Ordering::SeqCst);
        let until = Instant::now() + HANG_MAX;
        while held.contains(&call) && Instant::now() < until {
            let _timed_out = self.state.held_changed.wait_until(&mut held, until);
        }
        self.state.held_waiting.fetch_sub(1, Ordering::SeqCst);
    }

    fn refusal(&self, log: LogId) -> Result<()> {
        if self.state.refused.lock().contains(&log) {
            return Err(Error::CoordinatorDocument {
                path: format!("/logs/{}", log.0),
                reason: "refused by the test (as a document with format 2)".to_owned(),
            });
        }
        Ok(())
    }

    fn is_refused(&self, log: LogId) -> bool {
        self.state.refused.lock().contains(&log)
    }

    fn before_call(&self) {
        let started = Instant::now();
        let mut delay = self.state.delay.lock();
        if delay.is_zero() {
            return;
        }
        self.state.delayed_calls.fetch_add(1, Ordering::SeqCst);
        loop {
            let until = started + *delay;
            if delay.is_zero() || Instant::now() >= until {
                return;
            }
            let _timed_out = self.state.changed.wait_until(&mut delay, until);
        }
    }
}

/// A coordinator whose calls wait for a [`CoordinatorDelay`] first.
pub struct SlowCoordinator {
    inner: Arc<dyn Coordinator>,
    delay: CoordinatorDelay,
}

impl std::fmt::Debug for SlowCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlowCoordinator")
            .field("delay", &*self.delay.state.delay.lock())
            .finish()
    }
}

impl SlowCoordinator {
    /// Wraps `inner`; `delay` decides how slow each call is.
    pub fn new(inner: Arc<dyn Coordinator>, delay: CoordinatorDelay) -> SlowCoordinator {
        SlowCoordinator { inner, delay }
    }
}

impl Coordinator for SlowCoordinator {
    fn cluster_id(&self) -> Result<ClusterId> {
        self.delay.before_call();
        self.inner.cluster_id()
    }

    fn replica_directories(&self, node: NodeId) -> Result<Vec<(LogId, DirectoryId)>> {
        self.delay.before_call();
        self.inner.replica_directories(node)
    }

    fn record_replica_directories(
        &self,
        node: NodeId,
        directory: DirectoryId,
        logs: &[LogId],
    ) -> Result<()> {
        self.delay.before_call();
        if directory == DirectoryId::UNASSIGNED
            && self
                .delay
                .state
                .unassigns_to_fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                    left.checked_sub(1)
                })
                .is_ok()
        {
            return Err(Error::Coordinator {
                reason: "an unassign failed by the test".to_owned(),
            });
        }
        self.inner.record_replica_directories(node, directory, logs)
    }

    fn create_log(&self, log: LogId, replicas: Vec<NodeId>) -> Result<LogState> {
        self.delay.before_call();
        self.inner.create_log(log, replicas)
    }

    fn log_state(&self, log: LogId) -> Result<Option<LogState>> {
        self.delay.before_call();
        self.delay.refusal(log)?;
        self.inner.log_state(log)
    }

    fn logs(&self) -> Result<Vec<LogState>> {
        self.delay.before_call();
        if let Some(stale) = self.delay.state.stale_logs.lock().take() {
            return Ok(stale);
        }
        let mut logs = self.inner.logs()?;
        logs.retain(|state| !self.delay.is_refused(state.log));
        Ok(logs)
    }

    fn compare_and_set(
        &self,
        log: LogId,
        expected_epoch: LeaderEpoch,
        expected_version: u64,
        update: LogUpdate,
    ) -> Result<CasOutcome> {
        self.delay.before_call();
        self.delay.wait_if_held(HeldCall::CompareAndSet);
        self.delay.refusal(log)?;
        self.inner
            .compare_and_set(log, expected_epoch, expected_version, update)
    }

    fn compare_and_set_as_controller(
        &self,
        controller: NodeId,
        controller_epoch: ControllerEpoch,
        log: LogId,
        expected_epoch: LeaderEpoch,
        expected_version: u64,
        update: LogUpdate,
    ) -> Result<CasOutcome> {
        self.delay.before_call();
        self.delay.refusal(log)?;
        self.inner.compare_and_set_as_controller(
            controller,
            controller_epoch,
            log,
            expected_epoch,
            expected_version,
            update,
        )
    }

    fn register_node(&self, node: NodeId, session_timeout: Duration) -> Result<Incarnation> {
        self.delay.before_call();
        self.delay.wait_if_held(HeldCall::RegisterNode);
        self.inner.register_node(node, session_timeout)
    }

    // `report_unclean_shutdown` is the provided one, so that it goes
    // through this wrapper's calls (and so skips refused documents).

    fn heartbeat(&self, node: NodeId) -> Result<()> {
        self.delay.before_call();
        self.inner.heartbeat(node)
    }

    fn unregister_node(&self, node: NodeId) -> Result<()> {
        self.delay.before_call();
        self.inner.unregister_node(node)
    }

    // Forwarded, not the provided one: the wrapped coordinator may end a
    // registration that its `unregister_node` cannot (ZooKeeper).
    fn unregister_previous_process(&self, node: NodeId) -> Result<()> {
        self.delay.before_call();
        self.inner.unregister_previous_process(node)
    }

    fn live_nodes(&self) -> Result<Vec<NodeId>> {
        self.delay.before_call();
        self.inner.live_nodes()
    }

    fn live_node_incarnations(&self) -> Result<Vec<(NodeId, Incarnation)>> {
        self.delay.before_call();
        self.inner.live_node_incarnations()
    }

    fn subscribe(&self, node: NodeId) -> Result<Receiver<CoordinatorEvent>> {
        self.delay.before_call();
        self.inner.subscribe(node)
    }

    fn subscribe_all(&self, node: NodeId) -> Result<Receiver<CoordinatorEvent>> {
        self.delay.before_call();
        self.inner.subscribe_all(node)
    }

    fn try_become_controller(&self, node: NodeId) -> Result<Option<ControllerEpoch>> {
        self.delay.before_call();
        self.inner.try_become_controller(node)
    }

    fn resign_controller(&self, node: NodeId) -> Result<()> {
        self.delay.before_call();
        self.inner.resign_controller(node)
    }

    fn controller(&self) -> Result<Option<(NodeId, ControllerEpoch)>> {
        self.delay.before_call();
        self.inner.controller()
    }

    fn allocate_producer_id(&self) -> Result<ProducerId> {
        self.delay.before_call();
        self.inner.allocate_producer_id()
    }
}
