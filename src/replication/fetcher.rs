//! The follower's fetch loop: one thread per (this node, leader node) pair,
//! multiplexing every log this node follows from that leader into one
//! `Fetch` request, like Kafka's replica fetcher threads (SPEC 3.2).
//!
//! The thread only moves bytes and calls into [`Replica`]; what to do with
//! an answer (truncate, append, move the high watermark) is decided there
//! and in the pure follower state machine. Its loop is a thin driver of the
//! fetch session's two steps, `next_request(now)` and `on_response(answer,
//! now)`, which never block; the thread does the blocking call and the
//! waits. What an answer leads to is decided by pure functions
//! (`answer_step` for the answer as a whole, `after_log_answer` for each
//! log's part once applied); `on_response` carries it out.

use std::collections::BTreeMap;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::replica::{BelowLeaderStart, Replica};
#[cfg(any(test, feature = "testing"))]
use super::snapshot_download::install_downloaded;
use super::snapshot_transfer::Transfer;
#[cfg(any(test, feature = "testing"))]
use super::stepped_snapshot::ChunkStep;
use super::stepped_snapshot::SteppedTransfer;
use super::watch::Watch;
use crate::config::ReplicationConfig;
use crate::snapshot::Snapshots;
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering};
use crate::transport::{
    ErrorCode, FetchRequest, FetchResponse, Request, Response, Transport, TransportError,
};
use crate::types::{Incarnation, LeaderEpoch, LogId, NodeId};

#[derive(Debug)]
struct Target {
    replica: Arc<Replica>,
    leader_epoch: LeaderEpoch,
    /// After an error, the log sits out until then (bounded backoff).
    paused_until: Option<Instant>,
    /// A snapshot transfer running for this log (SPEC 3.9): the log is not
    /// fetched meanwhile.
    transfer: Option<RunningTransfer>,
    /// The same, in a fetcher without threads (a simulator steps it).
    stepped_transfer: Option<SteppedTransfer>,
}

#[derive(Debug)]
struct RunningTransfer {
    thread: JoinHandle<()>,
    cancel: Arc<AtomicBool>,
}

impl RunningTransfer {
    fn cancel_and_join(self) {
        self.cancel.store(true, Ordering::SeqCst);
        if self.thread.join().is_err() {
            tracing::error!("snapshot transfer thread panicked");
        }
    }
}

struct Shared {
    local: NodeId,
    /// This node's current incarnation, set by the node at every
    /// registration; every fetch carries it (SPEC 3.2).
    incarnation: Arc<AtomicU64>,
    leader: NodeId,
    transport: Arc<dyn Transport>,
    config: ReplicationConfig,
    snapshots: Option<Snapshots>,
    targets: Mutex<BTreeMap<LogId, Target>>,
    /// Transfers cancelled when their log was removed or replaced, still
    /// ending (at their next chunk): joined by the fetch loop once
    /// finished and by `stop`, so that no transfer thread outlives the
    /// fetcher (and with it the node, whose logs it would still touch).
    retired_transfers: Mutex<Vec<RunningTransfer>>,
    /// Bumped when targets change or on shutdown, to wake an idle loop.
    changed: Watch,
    stop: AtomicBool,
    /// A fetcher without threads (`Fetcher::stepped`): its snapshot
    /// transfers are stepped by the simulator, not run on threads.
    stepped: bool,
}

impl Shared {
    /// A fetcher's state with no targets yet.
    fn new(
        local: NodeId,
        incarnation: Arc<AtomicU64>,
        leader: NodeId,
        transport: Arc<dyn Transport>,
        config: ReplicationConfig,
        snapshots: Option<Snapshots>,
        stepped: bool,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            local,
            incarnation,
            leader,
            transport,
            config,
            snapshots,
            targets: Mutex::new(BTreeMap::new()),
            retired_transfers: Mutex::new(Vec::new()),
            changed: Watch::new(0),
            stop: AtomicBool::new(false),
            stepped,
        })
    }

    /// Cancels `transfer` and keeps it to be joined once it has ended.
    fn retire(&self, transfer: RunningTransfer) {
        transfer.cancel.store(true, Ordering::SeqCst);
        self.retired_transfers.lock().push(transfer);
    }

    /// Joins the retired transfers that have ended.
    fn join_retired_transfers(&self) {
        let ended: Vec<RunningTransfer> = {
            let mut retired = self.retired_transfers.lock();
            let (ended, running): (Vec<_>, Vec<_>) =
                retired.drain(..).partition(|r| r.thread.is_finished());
            *retired = running;
            ended
        };
        for transfer in ended {
            transfer.cancel_and_join();
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("local", &self.local)
            .field("leader", &self.leader)
            .finish_non_exhaustive()
    }
}

/// A running fetcher thread for one leader.
#[derive(Debug)]
pub(crate) struct Fetcher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Fetcher {
    /// The fetcher of `local` for `leader` without a thread, for a node a
    /// simulator steps (issue 28): the simulator drives its
    /// [`FetchSession`] and carries the requests itself.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn stepped(
        local: NodeId,
        incarnation: Arc<AtomicU64>,
        leader: NodeId,
        transport: Arc<dyn Transport>,
        config: ReplicationConfig,
        snapshots: Option<Snapshots>,
    ) -> Fetcher {
        Fetcher {
            shared: Shared::new(
                local,
                incarnation,
                leader,
                transport,
                config,
                snapshots,
                true,
            ),
            thread: None,
        }
    }

    /// This fetcher's session, for a simulator to drive.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn session(&self) -> FetchSession {
        FetchSession(Arc::clone(&self.shared))
    }

    /// Starts the fetcher thread of `local` for `leader`.
    pub(crate) fn start(
        local: NodeId,
        incarnation: Arc<AtomicU64>,
        leader: NodeId,
        transport: Arc<dyn Transport>,
        config: ReplicationConfig,
        snapshots: Option<Snapshots>,
    ) -> std::io::Result<Fetcher> {
        let shared = Shared::new(
            local,
            incarnation,
            leader,
            transport,
            config,
            snapshots,
            false,
        );
        let thread_shared = Arc::clone(&shared);
        crate::simulation::forbid_in_simulation("spawning a fetcher thread");
        let thread = std::thread::Builder::new()
            .name(format!("isrlog-fetch-{}-from-{}", local.0, leader.0))
            .spawn(move || run(&thread_shared))?;
        Ok(Fetcher {
            shared,
            thread: Some(thread),
        })
    }

    /// Starts (or updates) fetching `replica`'s log in `leader_epoch`.
    pub(crate) fn add(&self, replica: Arc<Replica>, leader_epoch: LeaderEpoch) {
        let log = replica.log_id();
        let replaced = self.shared.targets.lock().insert(
            log,
            Target {
                replica,
                leader_epoch,
                paused_until: None,
                transfer: None,
                stepped_transfer: None,
            },
        );
        // A transfer of the old epoch cannot install (the replica checks),
        // and is not waited for here: it ends at its next chunk, and is
        // joined later.
        if let Some(transfer) = replaced.and_then(|t| t.transfer) {
            self.shared.retire(transfer);
        }
        self.shared.changed.publish(self.shared.changed.get() + 1);
    }

    /// Stops fetching `log`. A fetch in flight may still be applied; the
    /// replica rejects it if its role changed meanwhile. A snapshot
    /// transfer of the log is cancelled (it ends at its next chunk, and
    /// is joined by the fetch loop or by `stop`).
    pub(crate) fn remove(&self, log: LogId) -> bool {
        let Some(mut removed) = self.shared.targets.lock().remove(&log) else {
            return false;
        };
        if let Some(transfer) = removed.transfer.take() {
            self.shared.retire(transfer);
        }
        true
    }

    /// Number of logs fetched by this thread.
    pub(crate) fn log_count(&self) -> usize {
        self.shared.targets.lock().len()
    }

    /// Tells the thread to stop without waiting for it: a call in flight
    /// ends at its own deadline.
    pub(crate) fn signal_stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.close();
    }

    /// Whether the thread and every snapshot transfer it started have
    /// exited (dropping the fetcher then waits for nothing).
    pub(crate) fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
            && self
                .shared
                .targets
                .lock()
                .values()
                .all(|t| t.transfer.as_ref().is_none_or(|r| r.thread.is_finished()))
            && self
                .shared
                .retired_transfers
                .lock()
                .iter()
                .all(|r| r.thread.is_finished())
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(&mut self) {
        self.signal_stop();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!(leader = %self.shared.leader, "fetcher thread panicked");
            }
        }
        let mut transfers: Vec<RunningTransfer> = self
            .shared
            .targets
            .lock()
            .values_mut()
            .filter_map(|t| t.transfer.take())
            .collect();
        transfers.append(&mut self.shared.retired_transfers.lock());
        // Cancel them all first, then wait: each ends at its next chunk
        // (a call bounded by `request_timeout`), so they end together.
        for transfer in &transfers {
            transfer.cancel.store(true, Ordering::SeqCst);
        }
        for transfer in transfers {
            transfer.cancel_and_join();
        }
    }
}

impl Drop for Fetcher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The fetcher thread: a thin driver of the fetch session
/// ([`Shared::next_request`], [`Shared::on_response`]). It sends each
/// request with a blocking call and waits, when idle or backing off, until
/// the session's time or a change of its targets.
fn run(shared: &Arc<Shared>) {
    let config = &shared.config;
    while !shared.stop.load(Ordering::SeqCst) {
        let (request, in_flight) = match shared.next_request(Instant::now()) {
            NextFetch::Send(request, in_flight) => (request, in_flight),
            NextFetch::Idle { until, seen } => {
                // Idle: wait for a new target (or shutdown), bounded.
                let _ = shared
                    .changed
                    .wait_at_least(seen + 1, until, Duration::ZERO);
                continue;
            }
        };
        let deadline = Instant::now() + config.fetch_wait_max + config.request_timeout;
        let answer = shared
            .transport
            .call(shared.leader, Request::Fetch(request), deadline);
        let seen = in_flight.seen;
        if let Some(until) = shared.on_response(in_flight, answer, Instant::now()) {
            let _ = shared
                .changed
                .wait_at_least(seen + 1, until, Duration::ZERO);
        }
    }
}

/// A fetch sent to the leader: what its answer is applied to.
#[derive(Debug)]
pub(crate) struct InFlight {
    /// The replica and the leader epoch each fetched log was asked in.
    epochs: Vec<(Arc<Replica>, LeaderEpoch)>,
    /// The targets' change count when the fetch was built: a back-off
    /// after it ends early when the targets change.
    seen: u64,
}

/// What the fetch session wants next.
#[derive(Debug)]
pub(crate) enum NextFetch {
    /// Send this fetch; its answer goes to
    /// [`on_response`](Shared::on_response) with the [`InFlight`].
    Send(FetchRequest, InFlight),
    /// Nothing to fetch before `until`, or before the targets change from
    /// `seen`.
    Idle { until: Instant, seen: u64 },
}

impl InFlight {
    /// The targets' change count when the fetch was built.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn seen(&self) -> u64 {
        self.seen
    }
}

impl Shared {
    /// The fetch session's next step at `now`, without blocking: joins
    /// ended snapshot transfers, then builds one fetch of every log that is
    /// neither paused nor transferring and has a fetch to make. With none,
    /// the session is `Idle` until the earliest pause ends (at most
    /// `fetch_wait_max` from `now`). The session is this thread's state
    /// (targets, pauses, transfers); a simulator would drive the same two
    /// calls with its own time and network (issue 28).
    fn next_request(&self, now: Instant) -> NextFetch {
        let config = &self.config;
        self.join_retired_transfers();
        let seen = self.changed.get();
        let mut logs = Vec::new();
        let mut epochs = Vec::new();
        let mut next_wake = now + config.fetch_wait_max;
        {
            let mut targets = self.targets.lock();
            for target in targets.values_mut() {
                // A stepped transfer's chunks go out through
                // `FetchSession::next_snapshot_request`.
                if target.stepped_transfer.is_some() {
                    continue;
                }
                if let Some(transfer) = &target.transfer {
                    if !transfer.thread.is_finished() {
                        continue;
                    }
                    if let Some(done) = target.transfer.take() {
                        done.cancel_and_join();
                    }
                    // Failed or not, the log fetches again: after an
                    // install from the snapshot's offset, otherwise to
                    // learn again that it needs one.
                }
                if let Some(until) = target.paused_until {
                    if until > now {
                        next_wake = next_wake.min(until);
                        continue;
                    }
                }
                if let Some(fetch) = target.replica.next_fetch(
                    self.leader,
                    target.leader_epoch,
                    config.fetch_bytes_max,
                ) {
                    epochs.push((Arc::clone(&target.replica), target.leader_epoch));
                    logs.push(fetch);
                }
            }
        }
        if logs.is_empty() {
            return NextFetch::Idle {
                until: next_wake,
                seen,
            };
        }
        NextFetch::Send(
            FetchRequest {
                replica: self.local,
                incarnation: Incarnation(self.incarnation.load(Ordering::SeqCst)),
                wait_max: config.fetch_wait_max,
                bytes_max: config.fetch_response_bytes_max,
                logs,
            },
            InFlight { epochs, seen },
        )
    }

    /// Applies the leader's `answer` to the fetch `in_flight` at `now`: each log's part
    /// goes to its replica (a log answered with an error sits out until
    /// `fetch_backoff` from `now`; one behind the leader's log start may
    /// start a snapshot transfer). A failed or refused fetch as a whole
    /// returns the time until which the session backs off (sooner if the
    /// targets change).
    fn on_response(
        self: &Arc<Self>,
        in_flight: InFlight,
        answer: Result<Response, TransportError>,
        now: Instant,
    ) -> Option<Instant> {
        let config = &self.config;
        match answer_step(answer) {
            AnswerStep::Apply(response) => {
                for answer in response.logs {
                    let Some((replica, epoch)) = in_flight
                        .epochs
                        .iter()
                        .find(|(r, _)| r.log_id() == answer.log)
                    else {
                        continue;
                    };
                    let log = answer.log;
                    let code = match replica.apply_fetched(self.leader, *epoch, answer) {
                        Ok(code) => code,
                        Err(error) => {
                            tracing::error!(%log, leader = %self.leader, %error, "applying a fetch answer failed");
                            crate::simulation::note_handled_error(&error);
                            ErrorCode::Unknown
                        }
                    };
                    let after = after_log_answer(code, || replica.needs_snapshot());
                    if after.start_transfer {
                        start_transfer(self, replica, *epoch);
                    }
                    if after.back_off {
                        // NotLeader / FencedLeaderEpoch: our metadata is old and
                        // the control loop will move us; UnknownLeaderEpoch:
                        // the leader has not caught up with the coordinator
                        // yet. Either way, back off this log only.
                        tracing::debug!(%log, leader = %self.leader, ?code, "fetch answered with an error; backing off");
                        if let Some(target) = self.targets.lock().get_mut(&log) {
                            target.paused_until = Some(now + config.fetch_backoff);
                        }
                    }
                }
                None
            }
            AnswerStep::BackOff(cause) => {
                match cause {
                    BackOffCause::StaleIncarnation => {
                        // The leader has not read this node's newest
                        // registration yet (it will, the coordinator
                        // announces it), or this node registered again since
                        // the fetch left: ask again later.
                        tracing::debug!(leader = %self.leader, "fetch refused: the leader does not know this node's current incarnation yet; backing off");
                    }
                    BackOffCause::Unexpected(other) => {
                        tracing::debug!(leader = %self.leader, response = ?other, "unexpected fetch response; backing off");
                    }
                    BackOffCause::Failed(error) => {
                        tracing::debug!(leader = %self.leader, %error, "fetch failed; backing off");
                    }
                }
                Some(now + config.fetch_backoff)
            }
        }
    }
}

/// What a fetch session does with the answer to its fetch as a whole
/// (SPEC 3.2): [`answer_step`].
#[derive(Debug)]
enum AnswerStep {
    /// The leader answered: each log's part goes to the replica it was
    /// asked for, and [`after_log_answer`] says what follows.
    Apply(FetchResponse),
    /// The fetch was refused or failed as a whole: the session backs off
    /// for `fetch_backoff` (sooner if its targets change).
    BackOff(BackOffCause),
}

/// Why a fetch session backs off as a whole.
#[derive(Debug)]
enum BackOffCause {
    /// The leader did not take this node's incarnation (SPEC 3.2).
    StaleIncarnation,
    /// The leader answered something other than a fetch's answer.
    Unexpected(Response),
    /// The call failed (unreachable, timed out, dropped).
    Failed(TransportError),
}

/// Decides what a fetch session does with `answer`, the leader's answer
/// to its fetch or the call's failure.
fn answer_step(answer: Result<Response, TransportError>) -> AnswerStep {
    match answer {
        Ok(Response::Fetch(response)) => AnswerStep::Apply(response),
        Ok(Response::Error(ErrorCode::StaleIncarnation)) => {
            AnswerStep::BackOff(BackOffCause::StaleIncarnation)
        }
        Ok(other) => AnswerStep::BackOff(BackOffCause::Unexpected(other)),
        Err(error) => AnswerStep::BackOff(BackOffCause::Failed(error)),
    }
}

/// What a fetch session does once one log's part of an answer was applied
/// ([`after_log_answer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AfterLogAnswer {
    /// Start the download of the leader's snapshot (SPEC 3.9; the replica
    /// still checks whether it installs one, and a running transfer is
    /// not started again).
    start_transfer: bool,
    /// The log sits out for `fetch_backoff` (the others go on).
    back_off: bool,
}

/// Decides what follows a log's part applied with `code`: a log whose
/// fetch offset is below the leader's log start and whose application
/// `needs_snapshot` (asked only then) starts a snapshot transfer; a log
/// answered with any error backs off alone (an old leader epoch is the
/// control pass's to mend, a newer one the leader's).
fn after_log_answer(code: ErrorCode, needs_snapshot: impl FnOnce() -> bool) -> AfterLogAnswer {
    AfterLogAnswer {
        start_transfer: code == ErrorCode::OffsetOutOfRange && needs_snapshot(),
        back_off: !code.is_none(),
    }
}

/// A fetcher's session without its thread: the two steps the thread takes
/// ([`Shared::next_request`], [`Shared::on_response`]), for a simulator
/// that carries the requests over its own network at its own time
/// (issue 28). One fetch at a time, as the thread does: the next request
/// is asked for only once the last one's answer (or failure) was applied.
#[cfg(any(test, feature = "testing"))]
#[derive(Clone, Debug)]
pub(crate) struct FetchSession(Arc<Shared>);

#[cfg(any(test, feature = "testing"))]
impl FetchSession {
    /// The leader this session fetches from.
    pub(crate) fn leader(&self) -> NodeId {
        self.0.leader
    }

    /// Whether its fetcher was stopped: the session asks for nothing more,
    /// and an answer to it is dropped, as a stopped thread's would be.
    pub(crate) fn is_stopped(&self) -> bool {
        self.0.stop.load(Ordering::SeqCst)
    }

    /// Whether `other` is this very session (not one that replaced it for
    /// the same leader).
    pub(crate) fn is(&self, other: &FetchSession) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether its targets changed since `seen` (an idle or backing-off
    /// session asks again early then, as the thread's wait ends).
    pub(crate) fn changed_since(&self, seen: u64) -> bool {
        self.0.changed.get() > seen
    }

    /// The next step at `now` ([`Shared::next_request`]).
    pub(crate) fn next_request(&self, now: Instant) -> NextFetch {
        self.0.next_request(now)
    }

    /// Applies the answer to `in_flight` at `now` ([`Shared::on_response`]);
    /// `Some(until)`: back off until then (or a change of targets).
    pub(crate) fn on_response(
        &self,
        in_flight: InFlight,
        answer: Result<Response, TransportError>,
        now: Instant,
    ) -> Option<Instant> {
        self.0.on_response(in_flight, answer, now)
    }

    /// The next chunk request of a stepped snapshot transfer that has none
    /// out (SPEC 3.9), made under the driver's `token`; its answer goes to
    /// [`on_snapshot_answer`](Self::on_snapshot_answer) with the same
    /// token.
    pub(crate) fn next_snapshot_request(
        &self,
        token: u64,
    ) -> Option<crate::transport::SnapshotRequest> {
        let shared = &self.0;
        let mut targets = shared.targets.lock();
        targets.iter_mut().find_map(|(log, target)| {
            target.stepped_transfer.as_mut()?.next_request(
                token,
                shared.local,
                *log,
                shared.config.fetch_bytes_max,
            )
        })
    }

    /// Takes the answer (or the call's failure) to the chunk request of
    /// `log` made under `token` at `now`. A complete snapshot is installed
    /// here, as the transfer thread would: checked against the replica's
    /// log start, handed to the application's store, and the log restarts
    /// at its offset. Returns `Some(Ok(offset))` once installed,
    /// `Some(Err(why))` when the transfer ended without (the log fetches
    /// again after `fetch_backoff`, and learns again that it needs one),
    /// `None` while it goes on (or for an answer it no longer waits for).
    pub(crate) fn on_snapshot_answer(
        &self,
        log: LogId,
        token: u64,
        answer: Result<Response, TransportError>,
        now: Instant,
    ) -> Option<Result<crate::types::Offset, String>> {
        let shared = &self.0;
        let (replica, epoch, step) = {
            let mut targets = shared.targets.lock();
            let target = targets.get_mut(&log)?;
            let transfer = target.stepped_transfer.as_mut()?;
            let epoch = transfer.epoch();
            let step = transfer.on_answer(token, log, answer);
            if matches!(step, ChunkStep::Failed(_) | ChunkStep::Complete(..)) {
                target.stepped_transfer = None;
            }
            if matches!(step, ChunkStep::Failed(_)) {
                target.paused_until = Some(now + shared.config.fetch_backoff);
            }
            (Arc::clone(&target.replica), epoch, step)
        };
        let outcome = match step {
            ChunkStep::More | ChunkStep::Stale => return None,
            ChunkStep::Failed(why) => Err(why),
            ChunkStep::Complete(info, bytes) => {
                shared.install_stepped(&replica, epoch, info, &bytes)
            }
        };
        if let Err(error) = &outcome {
            tracing::warn!(%log, leader = %shared.leader, %error, "snapshot transfer failed; trying again later");
        }
        // The log fetches again.
        shared.changed.publish(shared.changed.get() + 1);
        Some(outcome)
    }
}

#[cfg(any(test, feature = "testing"))]
impl Shared {
    /// Installs a stepped transfer's snapshot with the install the
    /// threaded transfer calls once its download is whole
    /// ([`install_downloaded`]), from the bytes held in memory.
    fn install_stepped(
        &self,
        replica: &Replica,
        epoch: LeaderEpoch,
        info: super::snapshot_download::SnapshotId,
        bytes: &[u8],
    ) -> Result<crate::types::Offset, String> {
        let Some(snapshots) = self.snapshots.as_ref() else {
            return Err("no snapshot store".to_owned());
        };
        let mut data = bytes;
        install_downloaded(replica, &*snapshots.0, self.leader, epoch, info, &mut data)?;
        tracing::info!(log = %replica.log_id(), leader = %self.leader, snapshot_offset = %info.offset, bytes = info.size_bytes, "snapshot transfer complete (stepped)");
        Ok(info.offset)
    }
}

/// Starts the download of the leader's snapshot for `replica`, unless one
/// runs or the node has no store (then the replica only reports that it
/// needs one).
fn start_transfer(shared: &Arc<Shared>, replica: &Arc<Replica>, epoch: LeaderEpoch) {
    if replica.below_leader_start() != BelowLeaderStart::InstallSnapshot {
        return;
    }
    let Some(snapshots) = shared.snapshots.clone() else {
        return;
    };
    let log = replica.log_id();
    let mut targets = shared.targets.lock();
    let Some(target) = targets.get_mut(&log) else {
        return;
    };
    if target.transfer.is_some() || target.leader_epoch != epoch {
        return;
    }
    // Without threads the simulator steps the transfer (issue 28).
    if shared.stepped {
        if target.stepped_transfer.is_none() {
            tracing::info!(%log, leader = %shared.leader, "snapshot transfer begins (stepped)");
            target.stepped_transfer = Some(SteppedTransfer::new(epoch));
        }
        return;
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let thread_cancel = Arc::clone(&cancel);
    let thread_shared = Arc::clone(shared);
    let thread_replica = Arc::clone(replica);
    crate::simulation::forbid_in_simulation("spawning a snapshot transfer thread");
    let spawned = std::thread::Builder::new()
        .name(format!("isrlog-snapshot-{}", log.0))
        .spawn(move || {
            let transfer = Transfer {
                replica: &thread_replica,
                store: &*snapshots.0,
                transport: &*thread_shared.transport,
                local: thread_shared.local,
                leader: thread_shared.leader,
                epoch,
                config: &thread_shared.config,
                cancel: &thread_cancel,
            };
            if let Err(error) = transfer.run() {
                tracing::warn!(%log, leader = %thread_shared.leader, %error, "snapshot transfer failed; trying again later");
            }
            // Wake the fetch loop: the log fetches again.
            thread_shared
                .changed
                .publish(thread_shared.changed.get() + 1);
        });
    match spawned {
        Ok(thread) => target.transfer = Some(RunningTransfer { thread, cancel }),
        Err(error) => tracing::error!(%log, %error, "cannot start a snapshot transfer thread"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::FetchedLog;
    use crate::types::Offset;

    #[test]
    fn an_answer_is_applied_and_anything_else_backs_the_session_off() {
        let logs = vec![FetchedLog {
            log: LogId(1),
            error: ErrorCode::None,
            high_watermark: Offset(3),
            log_start_offset: Offset::ZERO,
            log_end_offset: Offset(3),
            log_start_epoch: None,
            log_end_epoch: None,
            diverging: None,
            records: bytes::Bytes::new(),
            applied_offsets: Vec::new(),
        }];
        let step = answer_step(Ok(Response::Fetch(FetchResponse { logs: logs.clone() })));
        assert!(matches!(step, AnswerStep::Apply(response) if response.logs == logs));
        assert!(matches!(
            answer_step(Ok(Response::Error(ErrorCode::StaleIncarnation))),
            AnswerStep::BackOff(BackOffCause::StaleIncarnation)
        ));
        assert!(matches!(
            answer_step(Ok(Response::Error(ErrorCode::Shutdown))),
            AnswerStep::BackOff(BackOffCause::Unexpected(Response::Error(
                ErrorCode::Shutdown
            )))
        ));
        let unreachable = TransportError::Unreachable {
            to: NodeId(2),
            reason: "no process".to_owned(),
        };
        assert!(matches!(
            answer_step(Err(unreachable)),
            AnswerStep::BackOff(BackOffCause::Failed(TransportError::Unreachable { .. }))
        ));
    }

    #[test]
    fn a_log_answered_with_an_error_backs_off_and_one_below_the_start_may_transfer() {
        // (code, needs a snapshot, start a transfer, back off)
        let rows = [
            (ErrorCode::None, true, false, false),
            (ErrorCode::NotLeader, false, false, true),
            (ErrorCode::FencedLeaderEpoch, true, false, true),
            (ErrorCode::UnknownLeaderEpoch, false, false, true),
            (ErrorCode::OffsetOutOfRange, false, false, true),
            (ErrorCode::OffsetOutOfRange, true, true, true),
            (ErrorCode::Unknown, true, false, true),
        ];
        for (row, (code, needs, start_transfer, back_off)) in rows.into_iter().enumerate() {
            assert_eq!(
                after_log_answer(code, || needs),
                AfterLogAnswer {
                    start_transfer,
                    back_off
                },
                "row {row}"
            );
        }
        // The replica is asked whether it needs a snapshot only when the
        // log's fetch offset was out of range.
        let asked = std::cell::Cell::new(false);
        after_log_answer(ErrorCode::NotLeader, || {
            asked.set(true);
            true
        });
        assert!(!asked.get());
    }
}
