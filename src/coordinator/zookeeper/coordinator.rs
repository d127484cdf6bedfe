//! [`ZkCoordinator`]: the [`Coordinator`] on Apache ZooKeeper.
//!
//! It owns the ZooKeeper sessions of one process — its own (reads, the
//! watch, writes not made for one node) and one per node registered through
//! it — the watcher task that turns ZooKeeper's notifications into
//! [`CoordinatorEvent`]s, and the mapping of every trait method onto znodes
//! (layout in `document.rs`). The API is synchronous: each call runs as a
//! job on the coordinator's private executor and waits for it up to
//! [`ZkCoordinatorConfig::call_timeout`].
//!
//! Liveness. A node is live while its ZooKeeper session is: registering
//! opens a session with the node's timeout and creates its ephemeral znode.
//! The client library pings ZooKeeper by itself, so a process that stopped
//! working but not pinging would stay live forever; the node's own
//! heartbeats are therefore a lease on top: when `register_node`'s timeout
//! passes without a `heartbeat`, the coordinator closes the node's session,
//! which removes its znode and any controller seat it held. A node that is
//! inside a coordinator call is not hung, however long the call waits for
//! ZooKeeper: the lease does not lapse while the thread that heartbeats the
//! node is in a call through this coordinator, and the end of that call
//! renews it. Nor does it lapse while the node's session is disconnected
//! (the reconnection renews it): a brief outage of ZooKeeper must not make
//! a node's own coordinator end its session (connection loss is not session
//! loss).
//!
//! A node cut off from ZooKeeper loses its session when ZooKeeper expires
//! it, about one session timeout after it last heard from the client. The
//! client library would only declare the session expired 7/5 of a timeout
//! after it last heard from the server, so the coordinator does not wait
//! for it: once a node's session has been disconnected for a whole session
//! timeout, the coordinator treats it as ended (as Apache Curator's
//! `ConnectionState.LOST` does): the node's heartbeats and calls fail, its
//! subscribers are told it left the live set, and its client is closed.
//! The coordinator thus knows (and tells the node's next heartbeat) one
//! timeout after the client noticed the lost connection — no earlier than
//! ZooKeeper expires the session. The client notices at once when the
//! connection is closed or refused; when the network drops packets
//! silently, only once it has heard nothing for 2/5 of a timeout, and then
//! this comes no sooner than the client library's own 7/5.
//!
//! Connection loss is not session loss: a call made while the client is
//! reconnecting waits for it (bounded by the call timeout) or fails with a
//! retriable error; a write whose connection dropped before ZooKeeper
//! answered fails with an error saying its outcome is unknown. Nothing is
//! reported applied unless ZooKeeper answered that it was.
//!
//! Events. The watcher holds one persistent recursive watch on the chroot
//! (ZooKeeper 3.6+): it never needs re-arming after it fires, so no change
//! can fall between a notification and the next watch. After a
//! disconnection it adds the watch again (the client library does not
//! restore persistent watches on reconnection, and ZooKeeper does not
//! replay what one missed meanwhile), and after a session expiry it opens a
//! new session and watch; either way it then re-reads everything it
//! watches and sends every subscriber a `Resync`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use futures::future::{self, Either};
use futures::FutureExt;
use zookeeper_client as zk;

use super::config::ZkCoordinatorConfig;
use super::document::{
    self, Subject, CLUSTER_ID, CONTROLLER, CONTROLLER_EPOCH, DIRECTORIES, LOGS, NODES,
    OLD_CONTROLLER_SEAT, PRODUCER_IDS, PRODUCER_IDS_HIGH_MARK,
};
use super::events::Dispatcher;
use super::executor::{Effect, Executor};
use crate::coordinator::{
    CasOutcome, ControllerEpoch, Coordinator, CoordinatorEvent, LogState, LogUpdate,
};
use crate::error::{Error, Result};
use crate::sync::{Arc, AtomicBool, Mutex, Ordering};
use crate::types::{ClusterId, DirectoryId, Incarnation, LeaderEpoch, LogId, NodeId, ProducerId};

/// Pause between two attempts of a read whose connection dropped, and
/// between polls for a condition that has no notification.
const RETRY_PAUSE: Duration = Duration::from_millis(20);
/// How long dropping the coordinator waits for its sessions to close
/// cleanly (so their ephemeral znodes go at once, not at expiry).
const CLOSE_WAIT_MAX: Duration = Duration::from_secs(2);
/// Bounds of the watcher's tick, which checks the nodes' leases and hands
/// out owed `Resync` events: a tenth of the shortest lease, within these.
const TICK_MIN: Duration = Duration::from_millis(5);
const TICK_MAX: Duration = Duration::from_millis(100);
/// How long the watcher waits between attempts to open a new session after
/// its session expired.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);
/// How long opening a coordinator waits between attempts to connect and
/// create the store's layout, until its call timeout.
const OPEN_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How many times moving an earlier version's controller record is tried
/// when the store changes under the transaction (another node moving it,
/// an earlier-version node electing meanwhile) before the call gives up
/// for now; every election tries again.
const MOVE_ATTEMPTS_MAX: u32 = 8;

/// Pause between two attempts to resume a suspended node session.
const RESUME_PAUSE: Duration = Duration::from_millis(50);

/// The shortest an attempt to resume a suspended node session may take
/// (each is bounded by half the session timeout, and at least this).
const RESUME_ATTEMPT_MIN: Duration = Duration::from_millis(500);
/// Notifications handled per wake-up of the watcher: the rest wait for the
/// next round, so a flood cannot starve its tick.
const EVENTS_PER_ROUND_MAX: usize = 256;

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
}

/// What the ZooKeeper client answers.
type ZkResult<T> = std::result::Result<T, zk::Error>;

fn coordinator_error(reason: String) -> Error {
    Error::Coordinator { reason }
}

/// A ZooKeeper error answered to `what`.
fn zk_error(what: &str, error: zk::Error) -> Error {
    coordinator_error(format!("ZooKeeper failed to {what}: {error}"))
}

/// A write whose connection dropped before ZooKeeper answered: it may or
/// may not have been applied, and the caller must not assume either.
fn unknown_if_lost<T>(outcome: ZkResult<T>, what: &str) -> Result<ZkResult<T>> {
    match outcome {
        Err(error) if is_connection_error(&error) => Err(lost(what)),
        outcome => Ok(outcome),
    }
}

/// Whether `error` is the connection failing (the request may or may not
/// have reached ZooKeeper) rather than ZooKeeper's answer. In-flight
/// requests fail with the connection's own error (a reset, a timeout), not
/// always with `ConnectionLoss`: zookeeper-client fails every request
/// already sent with `UnexpectedError` or `UnmarshalError` when it cannot
/// decode the reply stream (helper-33 finding 7: such a write was reported
/// as not applied). `ClientClosed` is not one: the coordinator closes its
/// clients only when it stops or replaces a session, and retrying on it
/// would hold a stopping node's calls until their deadline.
fn is_connection_error(error: &zk::Error) -> bool {
    matches!(
        error,
        zk::Error::ConnectionLoss
            | zk::Error::Timeout
            | zk::Error::Custom(_)
            | zk::Error::UnexpectedError(_)
            | zk::Error::UnmarshalError { .. }
    )
}

/// The error of a write whose connection dropped before ZooKeeper answered
/// (SPEC 3.4: its outcome is unknown).
fn lost(what: &str) -> Error {
    Error::CoordinatorOutcomeUnknown {
        operation: what.to_owned(),
        reason: "the connection to ZooKeeper was lost before it answered: the write may or may \
                 not have been applied; re-read before retrying"
            .to_owned(),
    }
}

/// The ZooKeeper version of a znode as a [`LogState`] version.
fn log_version(log: LogId, stat: &zk::Stat) -> Result<u64> {
    u64::try_from(stat.version).map_err(|_| {
        coordinator_error(format!(
            "znode {} has version {}",
            document::log_path(log),
            stat.version
        ))
    })
}

/// Waits until `deadline` or until `future` ends, whichever is first.
async fn before<T>(deadline: Instant, future: impl std::future::Future<Output = T>) -> Option<T> {
    let future = std::pin::pin!(future);
    match future::select(future, async_io::Timer::at(deadline)).await {
        Either::Left((value, _)) => Some(value),
        Either::Right(_) => None,
    }
}

/// Waits until `client` is connected, up to `deadline`: the client
/// reconnects by itself after a connection loss, and a call made meanwhile
/// must neither fail at once nor be sent into a dead connection.
async fn connected(client: &zk::Client, deadline: Instant, what: &str) -> Result<()> {
    let mut states = client.state_watcher();
    loop {
        match client.state() {
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => return Ok(()),
            state if state.is_terminated() => {
                return Err(coordinator_error(format!(
                    "cannot {what}: the ZooKeeper session ended ({state})"
                )))
            }
            _ => {}
        }
        if before(deadline, states.changed()).await.is_none() {
            return Err(coordinator_error(format!(
                "cannot {what}: not connected to ZooKeeper (reconnecting); nothing was sent, retry later"
            )));
        }
    }
}

/// What the controller epoch record and the seat say, read in one
/// multi-read.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ControllerView {
    /// The last controller epoch.
    epoch: ControllerEpoch,
    /// The node that won `epoch`, if any election happened.
    winner: Option<NodeId>,
    /// The record's ZooKeeper version (`epoch` minus `epoch_base`).
    record_version: i32,
    /// The epoch at the record's version 0.
    epoch_base: u64,
    /// Fields of the record this version does not know, written back.
    unknown: document::Extra,
    /// The session owning the seat, if it is taken by the election that
    /// wrote the record (a seat created in any other way, by hand, say, is
    /// nobody's).
    seat_owner: Option<i64>,
    /// An earlier version's persistent `/controller` record is where the
    /// seat goes: it must be retired before anyone can be elected. (With
    /// `/controller_epoch` missing, the view's epoch is that record's.)
    old_record: bool,
    /// An ephemeral `/controller` that the election which last wrote the
    /// record did not create (`/controller_epoch` restored, or the seat
    /// created, by hand): nobody's seat, yet no election can take its
    /// place until it goes.
    stray_seat: bool,
    /// The zxid of the last change to the record or the seat.
    zxid: i64,
}

impl ControllerView {
    /// The sitting controller.
    fn controller(&self) -> Option<NodeId> {
        self.seat_owner.and(self.winner)
    }

    /// What a refused controller write says about the seat.
    fn describe_holder(&self) -> String {
        match self.controller() {
            Some(holder) => format!(
                "{holder} holds the seat with controller epoch {}",
                self.epoch
            ),
            None => format!("the seat is empty (last controller epoch {})", self.epoch),
        }
    }
}

/// What one node's session connection went through, kept up to date by a
/// task watching the client's state ([`track_session`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Link {
    /// When the client lost its connection, if it has not got it back since.
    disconnected_since: Option<Instant>,
    /// When the client last got its connection back.
    reconnected_at: Option<Instant>,
}

/// Whether a node's session still counts as live, and if not, why.
///
/// Quorum loss is not session loss (issue 24, item 4). ZooKeeper expires a
/// session only while it has a quorum, and gives every session a fresh
/// timeout when a new ZooKeeper leader takes over, so a node that cannot
/// reach ZooKeeper does not know whether its session is over. As Kafka's
/// brokers (whose Java client reconnects with the same session for as long
/// as it takes) and Curator do, a node session then goes through two
/// states, after Curator's `SUSPENDED` and `LOST`:
///
/// - [`Verdict::Suspended`]: disconnected for a whole session timeout.
///   ZooKeeper may have expired the session (if it had a quorum), so the
///   node must stop acting on it as it did when this coordinator gave the
///   session up: its heartbeats and the calls made for it fail, its
///   subscribers are told it left, and `live_nodes` leaves it out. But the
///   session is kept, and the client keeps reconnecting with the same
///   session id (zookeeper-client 0.11 declares a session expired by
///   itself 7/5 of a timeout after it last heard from the server; the
///   coordinator then re-establishes it with the same id and password).
///   If ZooKeeper still has it (it lost its quorum, and got it back), the
///   session resumes: the node's znode and any controller seat it held
///   were never released, no log changes leader, and the node is
///   announced live again.
/// - [`Verdict::Ended`]: ZooKeeper itself says the session is over
///   (`SessionExpired` on reconnecting, or closed): the node registers
///   again with a new session, at once, as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Alive,
    /// No heartbeat, call or reconnection within the session timeout: the
    /// process is hung; the coordinator closes the session.
    LeaseLapsed,
    /// Disconnected for a whole session timeout: ZooKeeper may have expired
    /// the session, or may be without a quorum and keep it; the node is
    /// fenced locally until one of the two is known.
    Suspended,
    /// ZooKeeper ended the session (expired, closed, auth failed).
    Ended,
}

/// The liveness rule of a node's session, at `now`. `busy`: the thread that
/// heartbeats the node is inside a coordinator call.
fn judge(
    now: Instant,
    session_timeout: Duration,
    last_heartbeat: Instant,
    link: Link,
    busy: bool,
    terminated: bool,
) -> Verdict {
    if terminated {
        return Verdict::Ended;
    }
    if let Some(since) = link.disconnected_since {
        // ZooKeeper expires a session about one timeout after it last heard
        // from the client, which was no later than the disconnection. Until
        // then the lease stands still: a hung process keeps its connection
        // (the client pings by itself), so a disconnection says nothing of
        // the process, and a call waiting for the reconnection is no hang.
        return if now.saturating_duration_since(since) >= session_timeout {
            Verdict::Suspended
        } else {
            Verdict::Alive
        };
    }
    if busy {
        return Verdict::Alive;
    }
    let renewed = link
        .reconnected_at
        .map_or(last_heartbeat, |at| at.max(last_heartbeat));
    if now.saturating_duration_since(renewed) <= session_timeout {
        Verdict::Alive
    } else {
        Verdict::LeaseLapsed
    }
}

/// A node session's client and what its connection went through, shared
/// with the session's [`track_session`] task.
#[derive(Debug)]
struct SessionLink {
    /// The client of the session: replaced (same session id) when the
    /// session is re-established after the client library gave it up.
    client: zk::Client,
    link: Link,
    /// ZooKeeper ended the session: it said it expired, or it was closed.
    /// The client library giving up on its own is not this.
    ended: bool,
}

/// One node's session, opened by `register_node`.
#[derive(Debug)]
struct NodeSession {
    session_timeout: Duration,
    last_heartbeat: Instant,
    /// The thread that last heartbeated the node (its control loop): while
    /// it is inside a coordinator call, the node is not hung.
    heartbeat_thread: Option<ThreadId>,
    /// Written by the session's [`track_session`] task.
    link: Arc<Mutex<SessionLink>>,
    /// The czxid of the node's ephemeral znode, made by this session.
    incarnation: Incarnation,
    /// Announced suspended ([`Verdict::Suspended`]), not yet resumed.
    suspended: bool,
    /// Suspended since the node last asked for the controller seat: a
    /// controller pass that began before (whose view of the live nodes
    /// may have left this node out, or be older than the outage) must not
    /// write (see `compare_and_set_as_controller`).
    suspended_since_seat_check: bool,
    /// Dropped with the session, which stops its [`track_session`] task.
    _stop_tracking: oneshot::Sender<()>,
}

impl NodeSession {
    /// The session's current client.
    fn client(&self) -> zk::Client {
        self.link.lock().client.clone()
    }

    /// Whether the session still counts as live; `calls` are the calls in
    /// flight per thread.
    fn verdict(&self, now: Instant, calls: &HashMap<ThreadId, usize>) -> Verdict {
        let busy = self
            .heartbeat_thread
            .is_some_and(|thread| calls.get(&thread).is_some_and(|&n| n > 0));
        let (link, ended) = {
            let shared = self.link.lock();
            (shared.link, shared.ended)
        };
        judge(
            now,
            self.session_timeout,
            self.last_heartbeat,
            link,
            busy,
            ended,
        )
    }
}

/// Follows the connection state of a node's session into `shared` until
/// ZooKeeper ends the session or `stop` fires (its sender is dropped with
/// the session). When the client library gives the session up by itself
/// (it says `Expired` 7/5 of a timeout after it last heard from a server,
/// whether or not ZooKeeper expired it), re-establishes the same session
/// (id and password) until a server either takes it back or says it
/// expired: see [`Verdict`].
async fn track_session(
    connect: String,
    shared: Arc<Mutex<SessionLink>>,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        let client = shared.lock().client.clone();
        let mut states = client.state_watcher();
        let mut state = states.state();
        loop {
            {
                let now = Instant::now();
                let mut shared = shared.lock();
                match state {
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly
                        if shared.link.disconnected_since.take().is_some() =>
                    {
                        shared.link.reconnected_at = Some(now);
                    }
                    zk::SessionState::Disconnected => {
                        shared.link.disconnected_since.get_or_insert(now);
                    }
                    _ => {}
                }
            }
            if state.is_terminated() {
                break;
            }
            match future::select(&mut stop, std::pin::pin!(states.changed())).await {
                Either::Left(_) => return,
                Either::Right((next, _)) => state = next,
            }
        }
        if state != zk::SessionState::Expired {
            // Closed or refused: over for good.
            shared.lock().ended = true;
            return;
        }
        let info = client.session().clone();
        let timeout = client.session_timeout();
        drop(client);
        let session = info.id();
        let attempt_max = (timeout / 2).max(RESUME_ATTEMPT_MIN);
        loop {
            // Each attempt is bounded and the next starts afresh: within
            // one, the library's back-off between passes over the servers
            // doubles up to a whole timeout, which could outlast the fresh
            // timeout a session gets when ZooKeeper gets its quorum back.
            // (Not `with_fail_eagerly`: the resumed client keeps its
            // options, and would take its next disconnection for the end.)
            let attempt = before(
                Instant::now() + attempt_max,
                zk::Client::connector()
                    .with_session(info.clone())
                    .with_session_timeout(timeout)
                    .connect(&connect),
            );
            let outcome = match future::select(&mut stop, std::pin::pin!(attempt)).await {
                Either::Left(_) => return,
                Either::Right((None, _)) => Err(zk::Error::Timeout),
                Either::Right((Some(outcome), _)) => outcome,
            };
            match outcome {
                // A client with another id owns no znode of this node: its
                // session is over as far as the node goes (checked in
                // release builds too).
                Ok(resumed) if resumed.session_id() != session => {
                    tracing::warn!(%session, other = %resumed.session_id(), "resuming the suspended session gave another one; the node's session is over");
                    shared.lock().ended = true;
                    return;
                }
                Ok(resumed) => {
                    tracing::info!(%session, "ZooKeeper session resumed after a suspension");
                    let mut shared = shared.lock();
                    shared.client = resumed;
                    shared.link.disconnected_since = None;
                    shared.link.reconnected_at = Some(Instant::now());
                    break;
                }
                Err(zk::Error::SessionExpired | zk::Error::AuthFailed) => {
                    tracing::info!(%session, "ZooKeeper says the suspended session is over");
                    shared.lock().ended = true;
                    return;
                }
                Err(error) => {
                    tracing::debug!(%session, %error, "cannot resume the session yet");
                }
            }
            let pause = async_io::Timer::after(RESUME_PAUSE);
            if let Either::Left(_) = future::select(&mut stop, pause).await {
                return;
            }
        }
    }
}

/// Counts a call in flight on the calling thread while it lives; when the
/// thread's last call ends, renews the lease of the nodes it heartbeats
/// (a thread that made a call is not hung).
struct InFlight<'a> {
    shared: &'a Shared,
    thread: ThreadId,
}

impl<'a> InFlight<'a> {
    fn enter(shared: &'a Shared) -> InFlight<'a> {
        let thread = std::thread::current().id();
        *shared.calls.lock().entry(thread).or_insert(0) += 1;
        InFlight { shared, thread }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        // Renew first, then leave: a tick in between must not find the
        // thread idle with a lease that lapsed while the call waited.
        // Lock order: sessions, then calls.
        let mut sessions = self.shared.sessions.lock();
        let mut calls = self.shared.calls.lock();
        let remaining = calls.get(&self.thread).copied().unwrap_or(0);
        debug_assert!(remaining > 0, "a call left that never entered");
        if remaining <= 1 {
            let now = Instant::now();
            for session in sessions.values_mut() {
                if session.heartbeat_thread == Some(self.thread)
                    && session.verdict(now, &calls) == Verdict::Alive
                {
                    session.last_heartbeat = now;
                }
            }
            calls.remove(&self.thread);
        } else {
            calls.insert(self.thread, remaining - 1);
        }
        drop(calls);
        drop(sessions);
    }
}

/// The producer ids this coordinator reserved and has not handed out yet.
#[derive(Debug, Default)]
struct ProducerIdBlock {
    next: i64,
    end: i64,
}

/// State shared by the calls and the watcher task.
#[derive(Debug)]
struct Shared {
    config: ZkCoordinatorConfig,
    /// The coordinator's own session, chrooted; `None` while the watcher
    /// opens a new one after an expiry.
    main: Mutex<Option<zk::Client>>,
    sessions: Mutex<BTreeMap<NodeId, NodeSession>>,
    /// Calls in flight through this coordinator, per calling thread. Lock
    /// order: `sessions` before `calls`.
    calls: Mutex<HashMap<ThreadId, usize>>,
    /// Held while a session is being opened, so that two registrations of
    /// one node cannot race each other into two sessions.
    registering: Mutex<()>,
    dispatcher: Mutex<Dispatcher>,
    producer_ids: Mutex<ProducerIdBlock>,
    /// Nodes whose session this coordinator ended (lapsed lease, or
    /// ZooKeeper said it ended) and announced as gone, until
    /// ZooKeeper stops listing them or they register again: reads of the
    /// live set leave them out, so `live_nodes` agrees with the
    /// `NodesChanged` already sent (ZooKeeper deletes the ephemeral znode
    /// only once the close reaches it, or the session expires). Lock
    /// order: `dispatcher` before `ended_locally`.
    ended_locally: Mutex<BTreeSet<NodeId>>,
    /// Nodes whose sessions are suspended ([`Verdict::Suspended`]) and
    /// were announced as gone: left out of the live set as `ended_locally`
    /// ones are, until the session resumes or ends. Lock order:
    /// `dispatcher` before `suspended`.
    suspended: Mutex<BTreeSet<NodeId>>,
    /// The znodes that bulk reads skipped, with the reason last logged: a
    /// warning is logged once per znode and reason, not at every pass.
    /// Bounded by the number of znodes in the layout.
    unreadable: Mutex<HashMap<String, String>>,
    /// Nodes unregistered through this coordinator whose given-up session
    /// (its id) may still own the node's znode: an unregistration whose
    /// outcome was unknown, until a later call settles it or the node
    /// registers again. Bounded by the number of nodes.
    unregistering: Mutex<BTreeMap<NodeId, i64>>,
    /// Set when the coordinator is being dropped: calls still running on
    /// the executor give up instead of waiting for a session.
    stopping: AtomicBool,
    /// A suspended session was found resumed outside the tick: the watcher
    /// re-reads the membership to announce the node live again.
    membership_stale: AtomicBool,
    /// The coordinator's own sessions that the watcher gave up (they
    /// expired, or their watch could not be added again) and that have not
    /// ended yet, by session id, with a watcher of their state. A write
    /// still queued in such a client (zookeeper-client sends what is queued
    /// when it reconnects, before it closes) could land after a settling
    /// read on the new session that did not see it (helper review, finding
    /// 1c): settling reads wait until every session here has ended
    /// ([`Shared::await_abandoned`]). An entry goes once its session ends,
    /// which the client guarantees within 7/5 of the session timeout after
    /// it last heard from ZooKeeper, or as soon as the last call holding its
    /// client ends (calls are bounded by the call timeout) and its close is
    /// answered. Bounded by the replacements within that time.
    abandoned: Mutex<Vec<(i64, zk::StateWatcher)>>,
    /// Tests: the watcher gives its session up at its next round, exactly
    /// as when it cannot add its watch again after a reconnection.
    #[cfg(test)]
    give_up_main_session: AtomicBool,
}

/// Owns the executor; the watcher task holds only `Arc<Shared>`, so
/// dropping the last [`ZkCoordinator`] drops this, which stops everything.
#[derive(Debug)]
struct Handle {
    shared: Arc<Shared>,
    executor: Executor,
    /// Dropped to stop the watcher.
    stop_watcher: Mutex<Option<oneshot::Sender<()>>>,
}

/// A [`Coordinator`] on an Apache ZooKeeper ensemble (3.6 or later), for
/// nodes on several machines: every process opens its own `ZkCoordinator` on
/// the same ensemble and chroot. Cloning shares it. Dropping the last clone
/// closes its sessions (its nodes leave the live set at once) and stops its
/// thread.
#[derive(Clone, Debug)]
pub struct ZkCoordinator {
    handle: Arc<Handle>,
}

impl ZkCoordinator {
    /// Connects to the ensemble, creates the layout under the chroot if it
    /// is missing, and starts watching it. Errs if the configuration is
    /// invalid or ZooKeeper cannot be reached within the call timeout.
    pub fn connect(config: ZkCoordinatorConfig) -> Result<ZkCoordinator> {
        config.validate()?;
        let executor = Executor::start("isrlog-zookeeper")?;
        let shared = Arc::new(Shared {
            main: Mutex::new(None),
            sessions: Mutex::new(BTreeMap::new()),
            calls: Mutex::new(HashMap::new()),
            registering: Mutex::new(()),
            dispatcher: Mutex::new(Dispatcher::new(config.subscriber_events_max)),
            producer_ids: Mutex::new(ProducerIdBlock::default()),
            ended_locally: Mutex::new(BTreeSet::new()),
            suspended: Mutex::new(BTreeSet::new()),
            unreadable: Mutex::new(HashMap::new()),
            unregistering: Mutex::new(BTreeMap::new()),
            stopping: AtomicBool::new(false),
            membership_stale: AtomicBool::new(false),
            abandoned: Mutex::new(Vec::new()),
            #[cfg(test)]
            give_up_main_session: AtomicBool::new(false),
            config,
        });
        let deadline = Instant::now() + shared.config.call_timeout;
        let what = format!(
            "connect to ZooKeeper at {} (chroot {})",
            shared.config.connect, shared.config.chroot
        );
        let config = shared.config.clone();
        // Opening may create the store's znodes, each only if missing: a
        // retry of a connection that timed out settles them, so a time-out
        // here is a plain failure to connect. A failed attempt (a server
        // that did not answer within the client's connection timeout, a
        // fraction of the session timeout, is common on a loaded machine)
        // is retried until the call's deadline, as ZooKeeper's own clients
        // keep reconnecting until their connection timeout; the last error
        // is the one returned.
        let (client, watcher) = executor.call(&what, Effect::Read, deadline, async move {
            loop {
                let error = match open_main_session(&config).await {
                    Ok(opened) => return Ok(opened),
                    Err(error) => error,
                };
                if Instant::now() + OPEN_RETRY_PAUSE >= deadline {
                    return Err(error);
                }
                tracing::warn!(%error, "cannot open the ZooKeeper session yet; retrying");
                async_io::Timer::after(OPEN_RETRY_PAUSE).await;
            }
        })?;
        *shared.main.lock() = Some(client.clone());
        // The logs' replicas, known before the watch announces any change
        // (`Dispatcher::know_log`). Best effort: without them a removed
        // replica hears of its removal at the next reconnect's re-read.
        let reader = Arc::clone(&shared);
        let read = executor.call("read the logs", Effect::Read, deadline, async move {
            reader.read_logs(deadline).await
        });
        match read {
            Ok(logs) => {
                let mut dispatcher = shared.dispatcher.lock();
                for (state, zxid) in &logs {
                    dispatcher.know_log(*zxid, state);
                }
            }
            Err(error) => tracing::warn!(%error,
                "cannot read the logs at connect: a replica removed before this process hears of a change to its log hears of it at the next reconnect"),
        }
        let (stop_watcher, stopped) = oneshot::channel();
        executor.spawn(run_watcher(Arc::clone(&shared), client, watcher, stopped))?;
        tracing::info!(connect = %shared.config.connect, chroot = %shared.config.chroot,
            "connected to ZooKeeper");
        Ok(ZkCoordinator {
            handle: Arc::new(Handle {
                shared,
                executor,
                stop_watcher: Mutex::new(Some(stop_watcher)),
            }),
        })
    }

    /// The configuration this coordinator runs with.
    pub fn config(&self) -> &ZkCoordinatorConfig {
        &self.handle.shared.config
    }

    /// The number of receivers still subscribed (dropped receivers are
    /// forgotten at the next event sent to them).
    pub fn subscriber_count(&self) -> usize {
        self.handle.shared.dispatcher.lock().subscriber_count()
    }

    /// The ZooKeeper session id of `node`'s session opened through this
    /// coordinator, if it has one (for operators and tests).
    pub fn session_id(&self, node: NodeId) -> Option<i64> {
        self.handle
            .shared
            .sessions
            .lock()
            .get(&node)
            .map(|session| session.client().session_id().0)
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.handle.shared.config.call_timeout
    }

    /// Runs `job` with the shared state on the executor, up to the call
    /// timeout. For jobs that write nothing, or whose every wait is bounded
    /// by the deadline (a time-out is then a plain failure).
    fn run<T, F, Fut>(&self, what: String, job: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Shared>, Instant, String) -> Fut,
        Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        self.run_as(Effect::Read, what, job)
    }

    /// [`ZkCoordinator::run`] for a job that sends a write and waits for
    /// its answer: a time-out then leaves the outcome unknown
    /// ([`Error::CoordinatorOutcomeUnknown`], SPEC 3.4).
    fn run_write<T, F, Fut>(&self, what: String, job: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Shared>, Instant, String) -> Fut,
        Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        self.run_as(Effect::Write, what, job)
    }

    fn run_as<T, F, Fut>(&self, effect: Effect, what: String, job: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Shared>, Instant, String) -> Fut,
        Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        let _in_flight = InFlight::enter(&self.handle.shared);
        let deadline = self.deadline();
        let shared = Arc::clone(&self.handle.shared);
        let future = job(shared, deadline, what.clone());
        self.handle.executor.call(&what, effect, deadline, future)
    }

    /// Settles a registration of `node` whose outcome is unknown (`error`)
    /// before it is answered (issue 24 review): a node whose start fails
    /// does not register again, so nobody else would. The create of the
    /// node's znode may have been applied, owned by `abandoned`, the
    /// session opened for it (given up with the job: it closes, or
    /// expires). Syncs, reads `/nodes/<node>` and, if that session owns it,
    /// deletes it unless a registration came since the read
    /// ([`Shared::delete_registration`]); the answer is then a plain failure
    /// (not registered, nothing left behind). It stays outcome-unknown only
    /// when that cannot be read or done.
    ///
    /// A create that was delayed rather than lost can still land after the
    /// read; its znode belongs to a session nobody uses and goes when that
    /// session expires, as a crashed node's does. Settling is a call of its
    /// own, with its own call timeout: a registration whose reply was lost
    /// answers within twice the call timeout.
    fn settle_lost_registration(
        &self,
        node: NodeId,
        abandoned: Option<i64>,
        error: Error,
    ) -> Error {
        let Some(session) = abandoned else {
            // No session was opened, so no create was sent.
            return coordinator_error(format!(
                "cannot register {node}: {error}; no ZooKeeper session was opened for it, so \
                 nothing was created: register again"
            ));
        };
        let settled = self.run_write(
            format!("settle the registration of {node}"),
            move |shared, deadline, what| async move {
                let path = document::node_path(node);
                match shared
                    .delete_registration(deadline, node, Some(session), &what)
                    .await?
                {
                    Removal::Deleted => Ok(format!(
                        "{path}, which its create left under that session, was deleted"
                    )),
                    Removal::NotOwned => {
                        Ok(format!("ZooKeeper does not list {path} under that session"))
                    }
                }
            },
        );
        match settled {
            Ok(how) => {
                tracing::warn!(%node, session = format_args!("{session:#x}"), %error,
                    "a registration's answer was lost; settled: {how}");
                coordinator_error(format!(
                    "cannot register {node}: {error}; settled since: {how}, so {node} is not \
                     registered; register again"
                ))
            }
            Err(settle_error) => Error::CoordinatorOutcomeUnknown {
                operation: format!("register {node}"),
                reason: format!(
                    "{error}; settling it (whether ZooKeeper session {session:#x} owns \
                     {}) failed too: {settle_error}; the znode, if there, goes when that \
                     session expires",
                    document::node_path(node)
                ),
            },
        }
    }
}

fn no_session(node: NodeId, what: &str) -> Error {
    coordinator_error(format!(
        "{node} cannot {what}: it has no live session (it expired or was never opened)"
    ))
}

/// The error of a call for `node` whose session the coordinator just ended.
fn session_ended(node: NodeId, what: &str, verdict: Verdict) -> Error {
    let why = match verdict {
        Verdict::Suspended => {
            "it has been cut off from ZooKeeper for a whole session timeout, so its session is \
             suspended (ZooKeeper may have expired it; it resumes if ZooKeeper still has it once \
             reached again)"
        }
        Verdict::LeaseLapsed => {
            "no heartbeat within its session timeout, so its session was closed"
        }
        Verdict::Ended | Verdict::Alive => "ZooKeeper ended its session",
    };
    coordinator_error(format!("{node} cannot {what}: {why}; register it again"))
}

impl Drop for Handle {
    /// Stops the watcher, closes every session (waiting a bounded time for
    /// ZooKeeper to confirm, so ephemeral znodes vanish now rather than at
    /// expiry) and joins the executor thread.
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        drop(self.stop_watcher.lock().take());
        let mut states: Vec<zk::StateWatcher> = Vec::new();
        let sessions = std::mem::take(&mut *self.shared.sessions.lock());
        for (_, session) in sessions {
            states.push(session.client().state_watcher());
        }
        if let Some(main) = self.shared.main.lock().take() {
            states.push(main.state_watcher());
        }
        let deadline = Instant::now() + CLOSE_WAIT_MAX;
        let closed = self.executor.call(
            "close the ZooKeeper sessions",
            Effect::Read,
            deadline,
            async move {
                for mut state in states {
                    while !state.peek_state().is_terminated() {
                        if before(deadline, state.changed()).await.is_none() {
                            return Ok(());
                        }
                    }
                }
                Ok(())
            },
        );
        if let Err(error) = closed {
            tracing::debug!(%error, "ZooKeeper sessions not confirmed closed");
        }
        self.executor.stop();
    }
}

/// Opens the coordinator's own session: connects, syncs, creates the chroot
/// and the layout under it if missing, and adds the persistent recursive
/// watch.
///
/// The sync comes first (helper review, finding 1b): a brand-new session
/// may be attached to a follower that lags the ensemble's leader, and
/// nothing this session reads (here, and once published, every call's
/// reads) may be older than what ZooKeeper had applied before it opened —
/// writes of the session it replaces included.
async fn open_main_session(
    config: &ZkCoordinatorConfig,
) -> Result<(zk::Client, zk::PersistentWatcher)> {
    let connect_failed = |error: zk::Error| {
        coordinator_error(format!(
            "cannot connect to ZooKeeper at {}: {error}",
            config.connect
        ))
    };
    let root = zk::Client::connector()
        .with_session_timeout(config.session_timeout)
        .connect(&config.connect)
        .await
        .map_err(connect_failed)?;
    root.sync("/")
        .await
        .map_err(|e| zk_error("sync a new session", e))?;
    root.mkdir(&config.chroot, &persistent())
        .await
        .map_err(|e| zk_error(&format!("create the chroot {}", config.chroot), e))?;
    let client = root
        .chroot(config.chroot.clone())
        .map_err(|_| coordinator_error(format!("{} is not a valid chroot", config.chroot)))?;
    for path in [NODES, LOGS, DIRECTORIES] {
        match client.create(path, &[], &persistent()).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(zk_error(&format!("create {}{path}", config.chroot), e)),
        }
    }
    create_cluster(&client, &config.chroot).await?;
    // An earlier version's record that cannot be moved now (unreadable, or
    // changing under every attempt) must not stop this node from opening
    // (its logs go on being served): every election tries the move again
    // and says what is wrong.
    if let Err(error) = retire_old_controller_record(&client, &mut || {}).await {
        tracing::error!(znode = CONTROLLER, %error,
            "cannot move an earlier version's controller record now; every election tries again");
    }
    // A missing counter does not stop a node from opening either; what
    // needs it fails, saying what to do.
    if stat_of(&client, &config.chroot, CONTROLLER_EPOCH)
        .await?
        .is_none()
    {
        let old = stat_of(&client, &config.chroot, CONTROLLER).await?;
        if old.is_some_and(|stat| stat.ephemeral_owner == 0) {
            tracing::warn!(
                znode = CONTROLLER_EPOCH,
                "{CONTROLLER_EPOCH} is missing and an earlier version's {CONTROLLER} record is \
                 still there: the next election moves its epoch over"
            );
        } else {
            tracing::error!(
                znode = CONTROLLER_EPOCH,
                "{}",
                controller_epoch_missing("open the coordinator")
            );
        }
    }
    if stat_of(&client, &config.chroot, PRODUCER_IDS)
        .await?
        .is_none()
    {
        tracing::error!(
            znode = PRODUCER_IDS,
            "{}",
            producer_ids_missing("open the coordinator")
        );
    }
    let watcher = client
        .watch("/", zk::AddWatchMode::PersistentRecursive)
        .await
        .map_err(|e| {
            zk_error(
                &format!("watch {} (ZooKeeper 3.6 or later is needed)", config.chroot),
                e,
            )
        })?;
    Ok((client, watcher))
}

/// The stat of `path`, or `None` if it is missing.
async fn stat_of(client: &zk::Client, chroot: &str, path: &str) -> Result<Option<zk::Stat>> {
    client
        .check_stat(path)
        .await
        .map_err(|e| zk_error(&format!("check {chroot}{path}"), e))
}

/// Creates the cluster if the store has none: the cluster id and the two
/// counters (controller epoch, producer ids) at 0, in one transaction, so
/// that the counters exist exactly when the cluster does. The first
/// process to connect to an empty store chooses the cluster id; everyone
/// after finds it, as Kafka brokers do with `/cluster/id`.
///
/// The counters are never created anywhere else (but see
/// [`complete_half_created_cluster`]): recreating a deleted one would
/// restart it (issue 24, item 3), handing out producer ids twice or
/// letting a stale controller's version-conditional write pass. A store
/// set up by a version without a cluster id (it has logs, or counters of
/// its own) gets only the id.
async fn create_cluster(client: &zk::Client, chroot: &str) -> Result<()> {
    let what = format!("create the cluster under {chroot}");
    match client.check_stat(CLUSTER_ID).await {
        Ok(Some(_)) => return complete_half_created_cluster(client, chroot).await,
        Ok(None) => {}
        Err(e) => return Err(zk_error(&what, e)),
    }
    let cluster_id = document::encode_cluster_id(ClusterId::random());
    let logs = client
        .list_children(LOGS)
        .await
        .map_err(|e| zk_error(&format!("list {chroot}{LOGS}"), e))?;
    if logs.is_empty() {
        let none = document::Extra::new();
        let ops = [
            (CLUSTER_ID, cluster_id.clone()),
            (
                CONTROLLER_EPOCH,
                document::encode_controller(ControllerEpoch(0), None, 0, &none),
            ),
            (PRODUCER_IDS, document::encode_producer_ids(0, &none)),
        ];
        match creating_all(client, &ops, &what)?.commit().await {
            Ok(_) => {
                tracing::info!(chroot, "created a new cluster");
                return Ok(());
            }
            // Another process created it meanwhile (index 0), or a counter
            // of an earlier version's store is there: only the id is
            // missing.
            Err(zk::MultiWriteError::OperationFailed {
                source: zk::Error::NodeExists,
                ..
            }) => {}
            Err(error) => return Err(zk_error(&what, error.into())),
        }
    }
    match client.create(CLUSTER_ID, &cluster_id, &persistent()).await {
        Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
        Err(e) => Err(zk_error(&format!("create {chroot}{CLUSTER_ID}"), e)),
    }
}

/// Completes a cluster an earlier version began and never finished (issue
/// 24 review): that version created `/cluster_id` and the counters in
/// separate steps, so a process that stopped in between left an id and no
/// counters, which [`create_cluster`] would never complete (no election,
/// no producer id, for good). Only a store that provably handed nothing out
/// is completed: no child was ever created under `/logs` (its `cversion`
/// is 0), and no counter, earlier-version `/controller` record or producer
/// id high mark exists or ever existed. The chroot's `cversion` counts
/// every creation and deletion of a child, so a chroot whose `cversion` is
/// at most its number of children never lost one: had a counter existed,
/// it would still be there. (Without that, a store whose counters an
/// operator deleted before any log was created would get its producer
/// ids from 0 again, handing out ids its producers still hold.) Both
/// counters are created in one transaction (one process wins; the others
/// find them). The controller epoch starts at
/// [`document::controller_epoch_floor`] of the chroot's `pzxid` rather
/// than 0, which is sound even if the rule above were ever too lenient;
/// producer ids start at 0.
async fn complete_half_created_cluster(client: &zk::Client, chroot: &str) -> Result<()> {
    let what = format!("complete the half-created cluster under {chroot}");
    let (_, logs) = client
        .get_data(LOGS)
        .await
        .map_err(|e| zk_error(&what, e))?;
    if logs.cversion != 0 {
        return Ok(());
    }
    let (children, root) = client
        .get_children("/")
        .await
        .map_err(|e| zk_error(&what, e))?;
    let counters = [
        CONTROLLER,
        CONTROLLER_EPOCH,
        PRODUCER_IDS,
        PRODUCER_IDS_HIGH_MARK,
    ];
    let never_lost_a_child = usize::try_from(root.cversion).is_ok_and(|n| n <= children.len());
    let has_a_counter = children
        .iter()
        .any(|child| counters.iter().any(|path| path[1..] == **child));
    if has_a_counter || !never_lost_a_child {
        return Ok(());
    }
    let floor = document::controller_epoch_floor(root.pzxid.max(root.mzxid));
    let none = document::Extra::new();
    let ops = [
        (
            CONTROLLER_EPOCH,
            document::encode_controller(ControllerEpoch(floor), None, floor, &none),
        ),
        (PRODUCER_IDS, document::encode_producer_ids(0, &none)),
    ];
    match creating_all(client, &ops, &what)?.commit().await {
        Ok(_) => {
            tracing::warn!(chroot, controller_epoch = floor,
                "completed a cluster an earlier version created without its counters: created {CONTROLLER_EPOCH} and {PRODUCER_IDS}");
            Ok(())
        }
        // Another process completed it meanwhile.
        Err(zk::MultiWriteError::OperationFailed {
            source: zk::Error::NodeExists,
            ..
        }) => Ok(()),
        Err(error) => Err(zk_error(&what, error.into())),
    }
}

/// Moves the controller epoch out of an earlier version's persistent
/// `/controller` record into `/controller_epoch`, once, in one transaction
/// conditional on the old record's version: the old record and its seat
/// are deleted (the sitting controller of the earlier version is deposed;
/// the next election gets a larger epoch) and `/controller_epoch` is
/// created at the old epoch — or, if it exists already (an earlier-version
/// node recreated the old record), moved above both. Nothing to do when
/// `/controller` is missing or is the ephemeral seat.
///
/// A transaction that fails because the store changed meanwhile (another
/// node moved it, an earlier-version node elected a controller) is read
/// and tried again, up to [`MOVE_ATTEMPTS_MAX`] times: taking it for
/// success left the old record in place, and with `/controller_epoch`
/// missing no election could ever run (issue 24 review). `before_commit`
/// runs just before each commit (tests change the store there).
async fn retire_old_controller_record(
    client: &zk::Client,
    before_commit: &mut (dyn FnMut() + Send),
) -> Result<()> {
    let what = format!("move the controller epoch from {CONTROLLER} to {CONTROLLER_EPOCH}");
    for attempt in 1..=MOVE_ATTEMPTS_MAX {
        let (data, stat) = match client.get_data(CONTROLLER).await {
            Ok(read) => read,
            Err(zk::Error::NoNode) => return Ok(()),
            Err(e) => return Err(zk_error(&what, e)),
        };
        if stat.ephemeral_owner != 0 {
            return Ok(());
        }
        let current = match client.get_data(CONTROLLER_EPOCH).await {
            Ok((data, stat)) => Some((data, stat.version)),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(zk_error(&what, e)),
        };
        let old = document::decode_controller(CONTROLLER, &data, stat.version)
            .map_err(|error| not_an_old_record(&error, current.is_some()))?;
        let current = match current {
            Some((data, version)) => Some((
                document::decode_controller(CONTROLLER_EPOCH, &data, version)?,
                version,
            )),
            None => None,
        };
        let seat = client
            .check_stat(OLD_CONTROLLER_SEAT)
            .await
            .map_err(|e| zk_error(&what, e))?;
        let mut writer = client.new_multi_writer();
        if seat.is_some() {
            writer
                .add_delete(OLD_CONTROLLER_SEAT, None)
                .map_err(|e| zk_error(&what, e))?;
        }
        writer
            .add_delete(CONTROLLER, Some(stat.version))
            .map_err(|e| zk_error(&what, e))?;
        let epoch = match &current {
            None => {
                let record =
                    document::encode_controller(old.epoch, None, old.epoch.0, &old.unknown);
                writer
                    .add_create(CONTROLLER_EPOCH, &record, &persistent())
                    .map_err(|e| zk_error(&what, e))?;
                old.epoch
            }
            Some((record, version)) => {
                let next_version = u64::try_from(*version).unwrap_or(0) + 1;
                let epoch = ControllerEpoch(record.epoch.0.max(old.epoch.0) + 1);
                let data = document::encode_controller(
                    epoch,
                    None,
                    epoch.0 - next_version,
                    &record.unknown,
                );
                writer
                    .add_set_data(CONTROLLER_EPOCH, &data, Some(*version))
                    .map_err(|e| zk_error(&what, e))?;
                epoch
            }
        };
        before_commit();
        match writer.commit().await {
            Ok(_) => {
                tracing::warn!(znode = CONTROLLER, %epoch,
                    "moved the controller epoch of an earlier version's {CONTROLLER} to {CONTROLLER_EPOCH}");
                return Ok(());
            }
            // Someone else moved it, or it changed meanwhile: read again.
            Err(zk::MultiWriteError::OperationFailed { source, .. }) => {
                tracing::debug!(%source, attempt, "{what}: the store changed meanwhile; reading again");
            }
            Err(zk::MultiWriteError::RequestFailed { source }) if is_connection_error(&source) => {
                return Err(lost(&what))
            }
            Err(zk::MultiWriteError::RequestFailed { source }) => {
                return Err(zk_error(&what, source))
            }
        }
        async_io::Timer::after(RETRY_PAUSE).await;
    }
    Err(coordinator_error(format!(
        "cannot {what}: {CONTROLLER} or {CONTROLLER_EPOCH} changed under each of \
         {MOVE_ATTEMPTS_MAX} attempts (are nodes of an earlier version still electing \
         controllers?); the next election tries again"
    )))
}

/// The error for a persistent `/controller` that does not decode as an
/// earlier version's controller record (an operator's `create /controller
/// ""`, say), given `error`, the decoder's, and whether `/controller_epoch`
/// exists.
fn not_an_old_record(error: &Error, epoch_exists: bool) -> Error {
    let reason = match error {
        Error::CoordinatorDocument { reason, .. } => reason.clone(),
        other => other.to_string(),
    };
    let remedy = if epoch_exists {
        format!(
            "an operator deletes it (`deleteall {CONTROLLER}`; the controller epoch lives in \
             {CONTROLLER_EPOCH}, which that leaves alone)"
        )
    } else {
        format!(
            "an operator restores the epoch, since {CONTROLLER_EPOCH} is missing too and there \
             is no record to move it from: {}",
            restore_controller_epoch()
        )
    };
    Error::CoordinatorDocument {
        path: CONTROLLER.to_owned(),
        reason: format!(
            "{reason}; it is persistent, so it is not the controller seat (ephemeral), and it is \
             not an earlier version's controller record either: it holds the seat's place, and \
             no controller is elected until {remedy}"
        ),
    }
}

/// What to do when `/controller_epoch` is missing from a store in use.
fn controller_epoch_missing(what: &str) -> String {
    format!(
        "cannot {what}: {CONTROLLER_EPOCH} is missing: it is created once, with the cluster, \
         and never recreated, since a recreated record would start its version again at 0 and \
         could let a deposed controller's writes through or controller epochs go back; no \
         controller is elected until an operator restores it: {}",
        restore_controller_epoch()
    )
}

/// How an operator restores `/controller_epoch`.
fn restore_controller_epoch() -> String {
    format!(
        "create {CONTROLLER_EPOCH} with \
         {{\"format\":1,\"epoch\":E,\"controller\":null,\"epoch_base\":E}}, E above every \
         controller epoch handed out (the ensemble's last zxid, as `srvr` shows it, is one), \
         then delete {CONTROLLER} if it exists (`deleteall {CONTROLLER}`): a seat taken before \
         the restore was not won at the restored record, so nobody holds it, and no election \
         can take its place while it is there"
    )
}

/// The error of an election that finds the seat taken, but not by the
/// election that last wrote the record (see [`ControllerView::stray_seat`]).
fn stray_seat(what: &str, view: &ControllerView) -> Error {
    Error::CoordinatorDocument {
        path: CONTROLLER.to_owned(),
        reason: format!(
            "cannot {what}: the seat {CONTROLLER} is taken, but not by the election that wrote \
             {CONTROLLER_EPOCH} (last controller epoch {}): {CONTROLLER_EPOCH} was restored, or \
             {CONTROLLER} created, by hand; nobody is controller, and no election can take the \
             seat until an operator deletes {CONTROLLER} (`deleteall {CONTROLLER}`; the epoch in \
             {CONTROLLER_EPOCH} is kept) or the session holding it ends",
            view.epoch
        ),
    }
}

/// A transaction that creates every `(path, data)` of `ops` as a persistent
/// znode, all or none, ready to commit.
fn creating_all<'a>(
    client: &'a zk::Client,
    ops: &[(&str, Vec<u8>)],
    what: &str,
) -> Result<zk::MultiWriter<'a>> {
    let mut writer = client.new_multi_writer();
    for (path, data) in ops {
        writer
            .add_create(path, data, &persistent())
            .map_err(|e| zk_error(what, e))?;
    }
    Ok(writer)
}

/// What to do when `/producer_ids` is missing from a store in use.
fn producer_ids_missing(what: &str) -> String {
    format!(
        "cannot {what}: {PRODUCER_IDS} is missing: it is created once, with the cluster, and \
         never recreated, since starting again at 0 would hand out producer ids twice; create \
         {PRODUCER_IDS} with {{\"format\":1,\"next_block_start\":N}}, N above every producer \
         id handed out (for instance the largest in any log plus a block, and at least the \
         next_block_start of {PRODUCER_IDS_HIGH_MARK} if an earlier version left one: it is \
         kept equal to the counter while it exists)"
    )
}

impl Shared {
    /// The coordinator's own session, waiting (up to `deadline`) while the
    /// watcher replaces an expired one.
    async fn main_client(&self, deadline: Instant, what: &str) -> Result<zk::Client> {
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return Err(Error::Shutdown);
            }
            let current = self.main.lock().clone();
            if let Some(client) = current {
                if !client.state().is_terminated() {
                    return Ok(client);
                }
            }
            if Instant::now() + RETRY_PAUSE >= deadline {
                return Err(coordinator_error(format!(
                    "cannot {what}: the coordinator's ZooKeeper session expired and a new one is not open yet"
                )));
            }
            async_io::Timer::after(RETRY_PAUSE).await;
        }
    }

    /// Runs the read `op` on the coordinator's session, retrying it while
    /// connections drop or the session is being replaced after it
    /// expired, until `deadline`. The inner result is ZooKeeper's
    /// answer, for the caller to interpret (a missing znode is often an
    /// answer, not an error). It may miss what other sessions wrote
    /// lately (its server may lag the ensemble's leader): see
    /// [`Shared::read_synced`].
    async fn read<T, F, Fut>(&self, deadline: Instant, what: &str, op: F) -> Result<ZkResult<T>>
    where
        F: Fn(zk::Client) -> Fut,
        Fut: std::future::Future<Output = ZkResult<T>>,
    {
        self.read_with(deadline, what, Freshness::AsServed, op)
            .await
    }

    /// [`Shared::read`] that reflects every write ZooKeeper applied before
    /// it began, and every write this coordinator's sessions still hold
    /// (SPEC 3.4: the read that settles a write whose outcome is unknown).
    /// The sync and the read go to one client, one after the other: within
    /// a session ZooKeeper answers requests in order, so the read sees
    /// what the sync made visible and every write queued in that session
    /// before it. When either fails with the connection or the session,
    /// both are made again (helper review, finding 1a: the sync used to
    /// run on one client and the read fetched the client again, which
    /// after a session replacement was a new, unsynced one). A write queued
    /// in an earlier session of the coordinator is covered by waiting until
    /// that session ended ([`Shared::await_abandoned`]), after fetching the
    /// client: every session given up before this one was published is
    /// then over, and a session given up later is the one the read runs on.
    async fn read_synced<T, F, Fut>(
        &self,
        deadline: Instant,
        what: &str,
        op: F,
    ) -> Result<ZkResult<T>>
    where
        F: Fn(zk::Client) -> Fut,
        Fut: std::future::Future<Output = ZkResult<T>>,
    {
        self.read_with(deadline, what, Freshness::Synced, op).await
    }

    async fn read_with<T, F, Fut>(
        &self,
        deadline: Instant,
        what: &str,
        freshness: Freshness,
        op: F,
    ) -> Result<ZkResult<T>>
    where
        F: Fn(zk::Client) -> Fut,
        Fut: std::future::Future<Output = ZkResult<T>>,
    {
        loop {
            let client = self.main_client(deadline, what).await?;
            if let Err(error) = connected(&client, deadline, what).await {
                // The session expired between the two checks: a read can
                // wait for the watcher to open a new one.
                if client.state().is_terminated() && Instant::now() + RETRY_PAUSE < deadline {
                    async_io::Timer::after(RETRY_PAUSE).await;
                    continue;
                }
                return Err(error);
            }
            if freshness == Freshness::Synced {
                self.await_abandoned(deadline, what).await?;
                let Some(synced) = before(deadline, client.sync("/")).await else {
                    return Err(coordinator_error(format!(
                        "cannot sync before trying to {what}: no answer within the call timeout \
                         (not connected to ZooKeeper: reconnecting); retry later"
                    )));
                };
                match synced {
                    Ok(()) => {}
                    Err(error)
                        if (is_connection_error(&error) || error == zk::Error::SessionExpired)
                            && Instant::now() + RETRY_PAUSE < deadline =>
                    {
                        async_io::Timer::after(RETRY_PAUSE).await;
                        continue;
                    }
                    Err(error) => {
                        return Err(zk_error(&format!("sync before trying to {what}"), error))
                    }
                }
            }
            // A request made just as the connection dropped waits in the
            // client for the reconnection, with no deadline of its own.
            let Some(outcome) = before(deadline, op(client)).await else {
                return Err(coordinator_error(format!(
                    "cannot {what}: no answer within the call timeout (not connected to ZooKeeper: \
                     reconnecting); retry later"
                )));
            };
            match outcome {
                Err(error)
                    if (is_connection_error(&error) || error == zk::Error::SessionExpired)
                        && Instant::now() + RETRY_PAUSE < deadline =>
                {
                    async_io::Timer::after(RETRY_PAUSE).await;
                }
                outcome => return Ok(outcome),
            }
        }
    }

    /// Waits, up to `deadline`, until every session of the coordinator that
    /// the watcher gave up has ended (see [`Shared::abandoned`]); errs
    /// (retriable) if one has not by then.
    async fn await_abandoned(&self, deadline: Instant, what: &str) -> Result<()> {
        loop {
            let pending: Vec<(i64, zk::StateWatcher)> = {
                let mut abandoned = self.abandoned.lock();
                abandoned.retain(|(_, state)| !state.peek_state().is_terminated());
                abandoned.clone()
            };
            let Some((session, mut state)) = pending.into_iter().next() else {
                return Ok(());
            };
            // A clone remembers the last state its original consumed:
            // consume the current one, or `changed` would answer at once
            // (and this would spin) until the session ended.
            if state.state().is_terminated() {
                continue;
            }
            if before(deadline, state.changed()).await.is_none() {
                return Err(coordinator_error(format!(
                    "cannot {what} yet: ZooKeeper session {session:#x}, which this coordinator \
                     gave up, has not ended, and a write it still holds could land after this \
                     read; retry later"
                )));
            }
        }
    }

    /// Gives the coordinator's session `client` up: it is no longer handed
    /// out, and until it ended settling reads wait for it. Dropping the
    /// last handle of a client closes its session (zookeeper-client 0.11
    /// has no other close): what it still holds is sent first, then the
    /// close, so once the session ended nothing of it can land any more.
    fn abandon_main(&self, client: zk::Client) {
        let mut main = self.main.lock();
        if main
            .as_ref()
            .is_some_and(|current| current.session_id() == client.session_id())
        {
            main.take();
        }
        drop(main);
        if !client.state().is_terminated() {
            self.abandoned
                .lock()
                .push((client.session_id().0, client.state_watcher()));
        }
    }

    /// The stored state of `log` and the zxid of its last change, or `None`.
    /// A document it cannot read is an error naming the znode and why.
    async fn read_log(
        &self,
        deadline: Instant,
        log: LogId,
        freshness: Freshness,
    ) -> Result<Option<(LogState, i64)>> {
        Ok(self
            .read_log_document(deadline, log, freshness)
            .await?
            .map(|(state, zxid, _)| (state, zxid)))
    }

    /// [`Shared::read_log`] with the fields of the document this version
    /// does not know.
    async fn read_log_document(
        &self,
        deadline: Instant,
        log: LogId,
        freshness: Freshness,
    ) -> Result<Option<(LogState, i64, document::UnknownFields)>> {
        let path = document::log_path(log);
        let what = format!("read {path}");
        let outcome = self
            .read_with(deadline, &what, freshness, |client| {
                let path = path.clone();
                async move { client.get_data(&path).await }
            })
            .await?;
        match outcome {
            Ok((data, stat)) => {
                let (state, unknown) = document::decode_log(log, &data, stat.version)?;
                Ok(Some((state, stat.mzxid, unknown)))
            }
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(zk_error(&what, e)),
        }
    }

    /// Logs a warning that a bulk read skipped `path` because of `reason`,
    /// once per znode and reason (a controller pass every tick must not
    /// flood the log with the same complaint).
    fn skip_unreadable(&self, path: &str, reason: &str) {
        let mut unreadable = self.unreadable.lock();
        if unreadable.get(path).map(String::as_str) != Some(reason) {
            tracing::warn!(
                znode = path,
                reason,
                "skipping a znode the coordinator cannot read; \
                everything else goes on, operations on it fail until it is fixed"
            );
            unreadable.insert(path.to_owned(), reason.to_owned());
        }
    }

    /// The ids among the child `names` of `parent`, sorted; a name that is
    /// not an id (a znode someone else put there) is skipped with a warning.
    fn parse_children(&self, parent: &str, names: &[String]) -> Vec<u32> {
        let mut ids: Vec<u32> = names
            .iter()
            .filter_map(|name| match document::parse_id(parent, name) {
                Ok(id) => Some(id),
                Err(error) => {
                    self.skip_unreadable(&format!("{parent}/{name}"), &error.to_string());
                    None
                }
            })
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The sorted ids of the children of `/nodes` (see
    /// [`Shared::parse_children`]).
    fn parse_nodes(&self, names: &[String]) -> Vec<NodeId> {
        self.parse_children(NODES, names)
            .into_iter()
            .map(NodeId)
            .collect()
    }

    /// Every readable log's state and last change, sorted by id. One child
    /// znode that is not a log id, or a document that cannot be decoded,
    /// is skipped with a warning, not an error: it must not stop every
    /// controller pass, unclean-shutdown report and node start of the
    /// cluster. Reading or writing that one log fails with the reason.
    async fn read_logs(&self, deadline: Instant) -> Result<Vec<(LogState, i64)>> {
        let what = format!("list {LOGS}");
        let names = match self
            .read(deadline, &what, |client| async move {
                client.list_children(LOGS).await
            })
            .await?
        {
            Ok(names) => names,
            Err(e) => return Err(zk_error(&what, e)),
        };
        let ids: Vec<LogId> = self
            .parse_children(LOGS, &names)
            .into_iter()
            .map(LogId)
            .collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let what = format!("read the {} logs", ids.len());
        let results = self
            .read(deadline, &what, |client| {
                let paths: Vec<String> = ids.iter().map(|log| document::log_path(*log)).collect();
                async move {
                    let mut reader = client.new_multi_reader();
                    for path in &paths {
                        reader.add_get_data(path)?;
                    }
                    reader.commit().await
                }
            })
            .await?
            .map_err(|e| zk_error(&what, e))?;
        let mut logs = Vec::with_capacity(ids.len());
        for (log, result) in ids.into_iter().zip(results) {
            match result {
                zk::MultiReadResult::Data { data, stat } => {
                    match document::decode_log(log, &data, stat.version) {
                        Ok((state, _)) => logs.push((state, stat.mzxid)),
                        Err(error) => {
                            self.skip_unreadable(&document::log_path(log), &error.to_string())
                        }
                    }
                }
                // Deleted between the listing and the read: not ours to
                // report (isrlog never deletes a log).
                zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                } => {}
                other => {
                    return Err(coordinator_error(format!(
                        "unexpected answer reading {}: {other:?}",
                        document::log_path(log)
                    )))
                }
            }
        }
        Ok(logs)
    }

    /// The live nodes, sorted, and the zxid of the last change to the set.
    async fn read_nodes(&self, deadline: Instant) -> Result<(Vec<NodeId>, i64)> {
        let what = format!("list {NODES}");
        let (names, stat) = self
            .read(deadline, &what, |client| async move {
                client.get_children(NODES).await
            })
            .await?
            .map_err(|e| zk_error(&what, e))?;
        let live = self.visible_nodes(self.parse_nodes(&names));
        Ok((live, stat.pzxid))
    }

    /// The live nodes (sorted), each with the czxid of its ephemeral znode
    /// as its incarnation. Two reads: the children, then their stats in one
    /// multi-read; a node whose znode went in between is not live.
    async fn read_node_incarnations(
        &self,
        deadline: Instant,
    ) -> Result<Vec<(NodeId, Incarnation)>> {
        let (live, _) = self.read_nodes(deadline).await?;
        if live.is_empty() {
            return Ok(Vec::new());
        }
        let what = format!("read the znodes under {NODES}");
        let paths: Vec<String> = live.iter().map(|node| document::node_path(*node)).collect();
        let paths = &paths;
        let results = self
            .read(deadline, &what, |client| async move {
                let mut reader = client.new_multi_reader();
                for path in paths {
                    reader.add_get_data(path)?;
                }
                reader.commit().await
            })
            .await?
            .map_err(|e| zk_error(&what, e))?;
        let mut incarnations = Vec::with_capacity(live.len());
        for (node, result) in live.into_iter().zip(results) {
            match result {
                zk::MultiReadResult::Data { stat, .. } => {
                    incarnations.push((node, incarnation_of(stat.czxid)));
                }
                zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                } => {}
                other => return Err(unexpected(&what, &Some(other))),
            }
        }
        Ok(incarnations)
    }

    /// `listed`, the nodes ZooKeeper lists, without those whose session
    /// this coordinator ended itself (and announced gone) while ZooKeeper
    /// may still list them: what `live_nodes` answers and `NodesChanged`
    /// announces, so that the two agree (issue 24, item 5). A node
    /// ZooKeeper no longer lists is forgotten here.
    fn visible_nodes(&self, mut listed: Vec<NodeId>) -> Vec<NodeId> {
        let mut ended = self.ended_locally.lock();
        ended.retain(|node| listed.contains(node));
        let suspended = self.suspended.lock();
        listed.retain(|node| !ended.contains(node) && !suspended.contains(node));
        listed
    }

    /// The controller epoch record and the seat, read atomically.
    async fn read_controller(
        &self,
        deadline: Instant,
        freshness: Freshness,
    ) -> Result<ControllerView> {
        let what = format!("read {CONTROLLER_EPOCH} and {CONTROLLER}");
        let results = self
            .read_with(deadline, &what, freshness, |client| async move {
                let mut reader = client.new_multi_reader();
                add_controller_reads(&mut reader)?;
                reader.commit().await
            })
            .await?
            .map_err(|e| zk_error(&what, e))?;
        parse_controller(&mut results.into_iter())
    }

    /// The live nodes (sorted) with the zxid of the last change to the set,
    /// and the controller, in one atomic multi-read: a session's end
    /// removes its node and the seat it held in one transaction, and one
    /// snapshot shows both or neither. The live nodes do not depend on the
    /// controller's znodes: one that cannot be read (a missing
    /// `/controller_epoch`) is an error for the controller alone.
    async fn read_membership(
        &self,
        deadline: Instant,
    ) -> Result<(Vec<NodeId>, i64, Result<ControllerView>)> {
        let what = format!("read {NODES} and {CONTROLLER_EPOCH}");
        let results = self
            .read(deadline, &what, |client| async move {
                let mut reader = client.new_multi_reader();
                reader.add_get_children(NODES)?;
                reader.add_get_data(NODES)?;
                add_controller_reads(&mut reader)?;
                reader.commit().await
            })
            .await?
            .map_err(|e| zk_error(&what, e))?;
        let mut results = results.into_iter();
        let live = match results.next() {
            Some(zk::MultiReadResult::Children { children }) => self.parse_nodes(&children),
            other => return Err(unexpected(&what, &other)),
        };
        let zxid = match results.next() {
            Some(zk::MultiReadResult::Data { stat, .. }) => stat.pzxid,
            other => return Err(unexpected(&what, &other)),
        };
        let controller = parse_controller(&mut results);
        Ok((live, zxid, controller))
    }

    /// Makes what other sessions of this process wrote visible to reads on
    /// the coordinator's session, which may be served by another server of
    /// the ensemble. Best effort: a failure only means a later read may be
    /// briefly stale, as ZooKeeper allows.
    async fn sync(&self, deadline: Instant) {
        if let Ok(client) = self.main_client(deadline, "sync").await {
            if let Some(Err(error)) = before(deadline, client.sync("/")).await {
                tracing::debug!(%error, "ZooKeeper sync failed");
            }
        }
    }

    /// Re-reads the live nodes and the controller and announces what
    /// changed, the nodes first (as the memory coordinator does when a
    /// session ends).
    async fn refresh_membership(&self, deadline: Instant) -> Result<()> {
        let (listed, nodes_zxid, controller) = self.read_membership(deadline).await?;
        // Filtered under the dispatcher's lock, which `end_session` holds
        // while it marks a node ended and announces it gone: a read that
        // began before then cannot announce the node live again after.
        let mut dispatcher = self.dispatcher.lock();
        dispatcher.nodes_changed(nodes_zxid, self.visible_nodes(listed));
        match controller {
            Ok(view) => dispatcher.controller_changed(view.zxid, view.controller(), view.epoch),
            Err(error) => {
                drop(dispatcher);
                self.skip_unreadable(CONTROLLER_EPOCH, &error.to_string());
            }
        }
        Ok(())
    }

    /// Re-reads one log and announces it. A document that does not decode
    /// is skipped with a warning, as in [`Shared::read_logs`]: a full
    /// resync of every subscriber would read the same thing.
    async fn refresh_log(&self, deadline: Instant, log: LogId) -> Result<()> {
        let path = document::log_path(log);
        let what = format!("read {path}");
        let outcome = self
            .read(deadline, &what, |client| {
                let path = path.clone();
                async move { client.get_data(&path).await }
            })
            .await?;
        match outcome {
            Ok((data, stat)) => match document::decode_log(log, &data, stat.version) {
                Ok((state, _)) => self.dispatcher.lock().log_changed(stat.mzxid, &state),
                Err(error) => self.skip_unreadable(&path, &error.to_string()),
            },
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(zk_error(&what, e)),
        }
        Ok(())
    }

    /// Re-reads everything the watch covers and announces what changed.
    async fn refresh_everything(&self, deadline: Instant) -> Result<()> {
        self.refresh_membership(deadline).await?;
        let logs = self.read_logs(deadline).await?;
        let mut dispatcher = self.dispatcher.lock();
        for (state, zxid) in logs {
            dispatcher.log_changed(zxid, &state);
        }
        Ok(())
    }

    /// Re-reads `subject` after a notification and announces it.
    async fn refresh(&self, deadline: Instant, subject: Subject) -> Result<()> {
        match subject {
            Subject::Membership => self.refresh_membership(deadline).await,
            Subject::Log(log) => self.refresh_log(deadline, log).await,
        }
    }

    /// Runs `f` on `node`'s session if it still counts as live; otherwise
    /// ends it and errs saying why `what` cannot be done.
    fn with_live_session<T>(
        &self,
        node: NodeId,
        what: &str,
        f: impl FnOnce(&mut NodeSession, Instant) -> T,
    ) -> Result<T> {
        let now = Instant::now();
        let mut sessions = self.sessions.lock();
        let Some(session) = sessions.get_mut(&node) else {
            return Err(no_session(node, what));
        };
        let verdict = session.verdict(now, &self.calls.lock());
        if verdict == Verdict::Alive {
            // Resumed: visible again before the caller acts on it (a
            // controller pass reads the live nodes next).
            let resumed = std::mem::take(&mut session.suspended);
            let result = f(session, now);
            drop(sessions);
            if resumed {
                self.resume(node);
                self.membership_stale.store(true, Ordering::SeqCst);
            }
            return Ok(result);
        }
        if verdict == Verdict::Suspended {
            // Kept: it may resume (see `Verdict`). Announced here too, not
            // only by the tick: the watcher does not tick while it opens a
            // new session of its own.
            let newly = !std::mem::replace(&mut session.suspended, true);
            session.suspended_since_seat_check = true;
            let timeout = session.session_timeout;
            drop(sessions);
            if newly {
                self.suspend(node, timeout);
            }
            return Err(session_ended(node, what, verdict));
        }
        let ended = sessions.remove(&node);
        drop(sessions);
        if let Some(session) = ended {
            self.end_session(node, session, verdict);
        }
        Err(session_ended(node, what, verdict))
    }

    /// Ends `node`'s session, which the coordinator judged no longer live,
    /// and tells this coordinator's subscribers that the node left.
    fn end_session(&self, node: NodeId, session: NodeSession, verdict: Verdict) {
        debug_assert_ne!(verdict, Verdict::Alive, "ending a live session");
        let timeout = session.session_timeout;
        debug_assert_ne!(verdict, Verdict::Suspended, "ending a suspended session");
        match verdict {
            Verdict::LeaseLapsed => tracing::info!(%node, ?timeout,
                "no heartbeat within the session timeout: closing the node's ZooKeeper session"),
            Verdict::Ended | Verdict::Alive | Verdict::Suspended => tracing::warn!(%node,
                state = %session.client().state(), "ZooKeeper ended the node's session"),
        }
        // Dropping the last handle closes the session (at once, or when the
        // client reaches ZooKeeper again, if ZooKeeper has not expired it
        // by then), which deletes the node's ephemeral znode and any
        // controller seat it held.
        drop(session);
        // The node's own process learns it from its heartbeat, and its
        // subscribers from this, even while ZooKeeper cannot be read. Both
        // under the dispatcher's lock (see `refresh_membership`).
        let mut dispatcher = self.dispatcher.lock();
        self.ended_locally.lock().insert(node);
        self.suspended.lock().remove(&node);
        dispatcher.node_left(node);
    }

    /// Errs if `node` has a session here that is suspended, or was since
    /// it last asked for the controller seat.
    fn refuse_if_suspended(&self, node: NodeId, what: &str) -> Result<()> {
        let now = Instant::now();
        let sessions = self.sessions.lock();
        let Some(session) = sessions.get(&node) else {
            return Ok(());
        };
        let verdict = session.verdict(now, &self.calls.lock());
        if verdict == Verdict::Suspended {
            return Err(session_ended(node, what, Verdict::Suspended));
        }
        if session.suspended_since_seat_check {
            return Err(coordinator_error(format!(
                "{node} cannot {what}: its session was suspended (cut off from ZooKeeper for a \
                 session timeout) since this controller pass began; the next pass decides again"
            )));
        }
        Ok(())
    }

    /// The id of `controller`'s session here if it may write as the
    /// controller now, else why not; with `expected`, only if it is still
    /// that session. See [`Shared::acting_controller_session_in`].
    fn acting_controller_session(
        &self,
        controller: NodeId,
        expected: Option<i64>,
    ) -> std::result::Result<i64, String> {
        let sessions = self.sessions.lock();
        self.acting_controller_session_in(&sessions, controller, expected)
    }

    /// [`Shared::acting_controller_session`] with the sessions' lock held.
    ///
    /// A controller writes only through the session that won its seat, and
    /// only while this coordinator counts that session live (review finding
    /// 5): once it ended the session itself (lease lapsed, ZooKeeper said
    /// it ended, the node unregistered or registered again) its
    /// subscribers were told the node left, yet ZooKeeper keeps the seat
    /// until the close reaches it or the session expires, and would let the
    /// write through. Kafka's controller likewise resigns as soon as it
    /// learns its ZooKeeper session expired, before it registers again.
    /// Every controller seat is won through a session registered here
    /// (`try_become_controller`), so a controller without one here has none
    /// left to act with.
    fn acting_controller_session_in(
        &self,
        sessions: &BTreeMap<NodeId, NodeSession>,
        controller: NodeId,
        expected: Option<i64>,
    ) -> std::result::Result<i64, String> {
        let Some(session) = sessions.get(&controller) else {
            return Err(
                "it has no live session through this coordinator (this coordinator ended it, \
                 it unregistered, or it never registered here), so it holds no seat here"
                    .to_owned(),
            );
        };
        let id = session.client().session_id().0;
        if let Some(expected) = expected.filter(|&expected| expected != id) {
            return Err(format!(
                "its session {expected:#x}, which holds the seat, was replaced here by session \
                 {id:#x} (it registered again) since the write was checked"
            ));
        }
        let verdict = session.verdict(Instant::now(), &self.calls.lock());
        if verdict != Verdict::Alive {
            return Err(format!(
                "its session {id:#x} here is no longer live ({verdict:?}), so this coordinator \
                 ends or suspends it"
            ));
        }
        if session.suspended || session.suspended_since_seat_check {
            return Err(format!(
                "its session {id:#x} was suspended (cut off from ZooKeeper for a session \
                 timeout) since this controller pass began; the next pass decides again"
            ));
        }
        Ok(id)
    }

    /// `node`'s session was disconnected for a whole session timeout: its
    /// subscribers are told it left, and the live set leaves it out, until
    /// it resumes or ends (see [`Verdict`]). Its session stays open.
    fn suspend(&self, node: NodeId, timeout: Duration) {
        tracing::warn!(%node, ?timeout,
            "disconnected from ZooKeeper for a whole session timeout: the node is fenced until \
             ZooKeeper says whether its session lives (it keeps it through a loss of quorum)");
        let mut dispatcher = self.dispatcher.lock();
        self.suspended.lock().insert(node);
        dispatcher.node_left(node);
    }

    /// `node`'s suspended session resumed: it is live again (announced by
    /// the next read of the membership, which the caller does).
    fn resume(&self, node: NodeId) {
        tracing::info!(%node, "the node's ZooKeeper session resumed: the node is live again");
        let _dispatcher = self.dispatcher.lock();
        self.suspended.lock().remove(&node);
    }

    /// Ends the sessions that no longer count as live, suspends and
    /// resumes those whose connection says so (see [`Verdict`]), and hands
    /// out owed `Resync` events. Returns when to tick next, and whether a
    /// session resumed (the caller re-reads the membership to announce it).
    fn tick(&self) -> (Duration, bool) {
        let now = Instant::now();
        let mut suspended = Vec::new();
        let mut resumed = Vec::new();
        let ended: Vec<(NodeId, NodeSession, Verdict)> = {
            let mut sessions = self.sessions.lock();
            let calls = self.calls.lock();
            let mut dead: Vec<(NodeId, Verdict)> = Vec::new();
            for (node, session) in sessions.iter_mut() {
                match session.verdict(now, &calls) {
                    Verdict::Alive => {
                        if std::mem::take(&mut session.suspended) {
                            resumed.push(*node);
                        }
                    }
                    Verdict::Suspended => {
                        session.suspended_since_seat_check = true;
                        if !std::mem::replace(&mut session.suspended, true) {
                            suspended.push((*node, session.session_timeout));
                        }
                    }
                    verdict @ (Verdict::LeaseLapsed | Verdict::Ended) => {
                        dead.push((*node, verdict));
                    }
                }
            }
            drop(calls);
            dead.into_iter()
                .filter_map(|(node, verdict)| {
                    sessions
                        .remove(&node)
                        .map(|session| (node, session, verdict))
                })
                .collect()
        };
        for (node, timeout) in suspended {
            self.suspend(node, timeout);
        }
        for &node in &resumed {
            self.resume(node);
        }
        for (node, session, verdict) in ended {
            self.end_session(node, session, verdict);
        }
        let mut dispatcher = self.dispatcher.lock();
        dispatcher.flush_resyncs();
        if dispatcher.resync_owed() {
            let stale = self.membership_stale.swap(false, Ordering::SeqCst);
            return (TICK_MIN, stale || !resumed.is_empty());
        }
        drop(dispatcher);
        let next = self
            .sessions
            .lock()
            .values()
            .map(|session| session.session_timeout / 10)
            .min()
            .unwrap_or(TICK_MAX)
            .clamp(TICK_MIN, TICK_MAX);
        let stale = self.membership_stale.swap(false, Ordering::SeqCst);
        (next, stale || !resumed.is_empty())
    }

    /// The compare-and-set behind both trait methods; with `fence`, the
    /// write is also conditional on that controller sitting with that epoch.
    async fn compare_and_set(
        &self,
        deadline: Instant,
        log: LogId,
        expected_epoch: LeaderEpoch,
        expected_version: u64,
        update: LogUpdate,
        fence: Option<(NodeId, ControllerEpoch)>,
    ) -> Result<CasOutcome> {
        let fence = match fence {
            Some((controller, controller_epoch)) => {
                let session = self
                    .acting_controller_session(controller, None)
                    .map_err(|why| fenced_here(log, controller, controller_epoch, &why))?;
                let view = self.read_controller(deadline, Freshness::AsServed).await?;
                // The seat must be held by the winner of that epoch, with
                // that very session: a node that registered again since it
                // won has a new session, and its old one's seat is not its.
                if view.controller() != Some(controller) || view.epoch != controller_epoch {
                    return Err(fenced(log, controller, controller_epoch, &view));
                }
                if view.seat_owner != Some(session) {
                    return Err(fenced_here(
                        log,
                        controller,
                        controller_epoch,
                        &format!(
                            "the seat belongs to ZooKeeper session {:#x}, not to its session \
                             here ({session:#x}): an earlier session this coordinator gave up \
                             (it registered again since), or another process's",
                            view.seat_owner.unwrap_or(0)
                        ),
                    ));
                }
                Some(Fence {
                    controller,
                    controller_epoch,
                    record_version: view.record_version,
                    session,
                })
            }
            None => None,
        };
        let Some((current, _, unknown)) = self
            .read_log_document(deadline, log, Freshness::AsServed)
            .await?
        else {
            return Err(Error::UnknownLog(log));
        };
        if current.leader_epoch != expected_epoch || current.version != expected_version {
            return Ok(CasOutcome::Stale(current));
        }
        current.validate_update(&update)?;
        document::refuse_unknown_fields(
            &document::log_path(log),
            &unknown,
            &format!("update {log}"),
        )?;
        let next = current.with_update(update);
        self.write_log(deadline, &current, next, fence).await
    }

    /// Writes `next` over `current` (as read) if the znode is still at
    /// `current`'s version and, with `fence`, if that controller still sits
    /// with that epoch — all in one ZooKeeper `multi`, so a controller
    /// deposed after any advisory check changes nothing.
    async fn write_log(
        &self,
        deadline: Instant,
        current: &LogState,
        next: LogState,
        fence: Option<Fence>,
    ) -> Result<CasOutcome> {
        let log = current.log;
        let path = document::log_path(log);
        let data = document::encode_log(&next);
        let zk_version = i32::try_from(current.version).map_err(|_| {
            coordinator_error(format!(
                "{path} is at version {}, beyond ZooKeeper's",
                current.version
            ))
        })?;
        let what = format!("write {path} at version {}", current.version);
        let client = self.main_client(deadline, &what).await?;
        connected(&client, deadline, &what).await?;
        let written = match fence {
            None => {
                match unknown_if_lost(client.set_data(&path, &data, Some(zk_version)).await, &what)?
                {
                    Ok(stat) => Ok(stat),
                    Err(error) => Err((2, error)),
                }
            }
            Some(fence) => {
                let mut writer = client.new_multi_writer();
                // The record at the version the controller won, and a
                // seat: only an election creates the seat, in the
                // transaction that moves the record's version on (and the
                // record is never recreated, so no version comes back).
                writer
                    .add_check_version(CONTROLLER_EPOCH, fence.record_version)
                    .map_err(|e| zk_error(&what, e))?;
                writer
                    .add_check_version(CONTROLLER, -1)
                    .map_err(|e| zk_error(&what, e))?;
                writer
                    .add_set_data(&path, &data, Some(zk_version))
                    .map_err(|e| zk_error(&what, e))?;
                // Sent only while the session that won the seat is still
                // the controller's live session here, checked under the
                // sessions' lock, which every local end of a session takes
                // to remove it: `commit` queues the request before it
                // returns, so a session this coordinator ends (or
                // suspends, or replaces) after the check ends after the
                // write was sent, and no write is sent after it ended
                // (review finding 5). ZooKeeper's own fence above cannot
                // tell: the seat stays until the close reaches ZooKeeper,
                // or the session expires.
                let commit = {
                    let sessions = self.sessions.lock();
                    self.acting_controller_session_in(
                        &sessions,
                        fence.controller,
                        Some(fence.session),
                    )
                    .map_err(|why| {
                        fenced_here(log, fence.controller, fence.controller_epoch, &why)
                    })?;
                    writer.commit()
                };
                match commit.await {
                    Ok(results) => match results.into_iter().nth(2) {
                        Some(zk::MultiWriteResult::SetData { stat }) => Ok(stat),
                        other => {
                            return Err(coordinator_error(format!(
                                "unexpected answer to {what}: {other:?}"
                            )))
                        }
                    },
                    Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                        Err((index, source))
                    }
                    Err(zk::MultiWriteError::RequestFailed { source })
                        if is_connection_error(&source) =>
                    {
                        return Err(lost(&what))
                    }
                    Err(zk::MultiWriteError::RequestFailed { source }) => {
                        return Err(zk_error(&what, source))
                    }
                }
            }
        };
        match written {
            Ok(stat) => {
                let stored = LogState {
                    version: log_version(log, &stat)?,
                    ..next
                };
                if stored.version != next.version {
                    return Err(coordinator_error(format!(
                        "{path} went from version {} to {}, not {}: was it written outside isrlog?",
                        current.version, stored.version, next.version
                    )));
                }
                tracing::debug!(%log, leader = ?stored.leader, epoch = %stored.leader_epoch,
                    isr = ?stored.in_sync_replicas, version = stored.version, "coordinator log state updated");
                self.dispatcher.lock().log_changed(stat.mzxid, &stored);
                Ok(CasOutcome::Applied(stored))
            }
            // The controller epoch record or seat changed since the check above:
            // another controller was elected, or this one's session ended.
            Err((0 | 1, error)) => match fence {
                Some(fence) => {
                    let view = self.read_controller(deadline, Freshness::AsServed).await?;
                    Err(fenced(log, fence.controller, fence.controller_epoch, &view))
                }
                None => Err(zk_error(&what, error)),
            },
            // ZooKeeper answered the write after applying what beat it on
            // this session's server, so this read sees at least that.
            Err((_, zk::Error::BadVersion)) => {
                match self.read_log(deadline, log, Freshness::AsServed).await? {
                    Some((current, _)) => Ok(CasOutcome::Stale(current)),
                    None => Err(Error::UnknownLog(log)),
                }
            }
            Err((_, zk::Error::NoNode)) => Err(Error::UnknownLog(log)),
            Err((_, error)) => Err(zk_error(&what, error)),
        }
    }

    /// One attempt of `node` (whose session's client is `client`) to take
    /// the controller seat: reads the record and the seat, moves an
    /// earlier version's record out of the way, and if the seat is free
    /// writes the next epoch and creates the seat in one `multi`.
    async fn try_seat(
        &self,
        client: &zk::Client,
        node: NodeId,
        deadline: Instant,
        what: &str,
    ) -> Result<SeatAttempt> {
        let view = self.read_controller(deadline, Freshness::AsServed).await?;
        if view.old_record {
            // An earlier version's record holds the seat's place: move
            // its epoch over, then read again.
            connected(client, deadline, what).await?;
            retire_old_controller_record(client, &mut || {}).await?;
            return Ok(SeatAttempt::Raced);
        }
        if let Some(holder) = view.controller() {
            let ours = holder == node && view.seat_owner == Some(client.session_id().0);
            return Ok(SeatAttempt::Decided(ours.then_some(view.epoch)));
        }
        if view.stray_seat {
            // Warned (once per reason), not only returned: the controller
            // thread logs a failed election at debug level, and with no
            // controller at all the operator must hear what to do.
            let error = stray_seat(what, &view);
            if let Error::CoordinatorDocument { reason, .. } = &error {
                self.skip_unreadable(CONTROLLER, reason);
            }
            return Err(error);
        }
        let epoch = view.epoch.next();
        let record = document::encode_controller(epoch, Some(node), view.epoch_base, &view.unknown);
        let seat = document::encode_controller(
            epoch,
            Some(node),
            view.epoch_base,
            &document::Extra::new(),
        );
        connected(client, deadline, what).await?;
        let mut writer = client.new_multi_writer();
        writer
            .add_set_data(CONTROLLER_EPOCH, &record, Some(view.record_version))
            .map_err(|e| zk_error(what, e))?;
        writer
            .add_create(CONTROLLER, &seat, &ephemeral())
            .map_err(|e| zk_error(what, e))?;
        match writer.commit().await {
            Ok(results) => {
                let zxid = match results.first() {
                    Some(zk::MultiWriteResult::SetData { stat }) => stat.mzxid,
                    _ => i64::MIN,
                };
                tracing::info!(controller = %node, %epoch, "controller elected");
                self.dispatcher
                    .lock()
                    .controller_changed(zxid, Some(node), epoch);
                self.sync(deadline).await;
                Ok(SeatAttempt::Decided(Some(epoch)))
            }
            // Someone else changed the record or took the seat: read again
            // and see who.
            Err(zk::MultiWriteError::OperationFailed {
                source: zk::Error::BadVersion | zk::Error::NodeExists,
                ..
            }) => Ok(SeatAttempt::Raced),
            // Unknown whether the seat is ours: the next read's seat owner
            // tells.
            Err(zk::MultiWriteError::RequestFailed { source }) if is_connection_error(&source) => {
                Ok(SeatAttempt::Unanswered)
            }
            Err(error) => Err(zk_error(what, error.into())),
        }
    }
}

impl Shared {
    /// Deletes `node`'s registration znode if ZooKeeper session `owner`
    /// (one this coordinator gave up) still owns it, and never a later
    /// registration's: what settling a lost registration or an unheard
    /// close needs. With `owner` `None`, whichever session owns the znode
    /// read (a crashed process's, for
    /// [`Coordinator::unregister_previous_process`]), still never a
    /// registration made after that read.
    ///
    /// A delete at the version read is not enough (review finding 6): every
    /// registration's znode is at version 0, so when the given-up session
    /// ended between the read and the delete and the node registered again
    /// (a restarted process retries its create every few milliseconds
    /// while the old znode is there), the delete removed the new
    /// registration and the live node vanished from the live set.
    /// ZooKeeper cannot make a delete conditional on a znode's owner, so
    /// every registration moves `/nodes`'s data version in the transaction
    /// that creates its znode (see `register_node`), and the delete is
    /// conditional on that version too, in one `multi`: it fails if anyone
    /// registered since the read, and is then decided again from a new read.
    async fn delete_registration(
        &self,
        deadline: Instant,
        node: NodeId,
        owner: Option<i64>,
        what: &str,
    ) -> Result<Removal> {
        let path = document::node_path(node);
        loop {
            let read = self
                .read_synced(deadline, what, |client| {
                    let path = path.clone();
                    async move {
                        let mut reader = client.new_multi_reader();
                        reader.add_get_data(NODES)?;
                        reader.add_get_data(&path)?;
                        reader.commit().await
                    }
                })
                .await?
                .map_err(|e| zk_error(&format!("read {NODES} and {path}"), e))?;
            let mut read = read.into_iter();
            let registrations = match read.next() {
                Some(zk::MultiReadResult::Data { stat, .. }) => stat.version,
                other => return Err(unexpected(&format!("read {NODES}"), &other)),
            };
            let version = match read.next() {
                Some(zk::MultiReadResult::Data { stat, .. })
                    if owner.is_none_or(|owner| stat.ephemeral_owner == owner) =>
                {
                    stat.version
                }
                Some(zk::MultiReadResult::Data { .. }) => return Ok(Removal::NotOwned),
                Some(zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                }) => return Ok(Removal::NotOwned),
                other => return Err(unexpected(&format!("read {path}"), &other)),
            };
            let client = self.main_client(deadline, what).await?;
            connected(&client, deadline, what).await?;
            let mut writer = client.new_multi_writer();
            writer
                .add_check_version(NODES, registrations)
                .map_err(|e| zk_error(what, e))?;
            writer
                .add_delete(&path, Some(version))
                .map_err(|e| zk_error(what, e))?;
            match writer.commit().await {
                Ok(_) => return Ok(Removal::Deleted),
                // A registration since the read (of this node or another),
                // or the znode changed: nothing was deleted; read again.
                Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                    tracing::debug!(%node, index, %source,
                        "{what}: the registrations changed since the read; reading again");
                }
                Err(zk::MultiWriteError::RequestFailed { source })
                    if is_connection_error(&source) =>
                {
                    return Err(lost(what))
                }
                Err(zk::MultiWriteError::RequestFailed { source }) => {
                    return Err(zk_error(&format!("delete {path}"), source))
                }
            }
            if Instant::now() + RETRY_PAUSE >= deadline {
                // Every attempt was refused by a check: nothing was deleted,
                // and that is known (not a lost answer).
                return Err(coordinator_error(format!(
                    "{what}: registrations kept changing until the deadline; {path} was not deleted"
                )));
            }
            async_io::Timer::after(RETRY_PAUSE).await;
        }
    }
}

/// What [`Shared::delete_registration`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Removal {
    /// The given-up session's znode was deleted.
    Deleted,
    /// ZooKeeper does not list the node under that session (any more):
    /// the znode is gone, or is a later registration's.
    NotOwned,
}

/// How fresh a read of the coordinator's session must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Freshness {
    /// As the session's server has it, which may lag the ensemble's
    /// leader (never behind what this session saw or wrote): enough where
    /// a stale answer only costs a retry (a compare-and-set's pre-check,
    /// whose write is conditional on the version anyway).
    AsServed,
    /// Synced first ([`Shared::read_synced`]): reflects every write applied
    /// before the read began and every write the coordinator's sessions
    /// still hold.
    Synced,
}

/// What one attempt to take the controller seat found.
#[derive(Clone, Copy, Debug)]
enum SeatAttempt {
    /// The seat's holder is known: this node with that epoch, or another.
    Decided(Option<ControllerEpoch>),
    /// The record or the seat changed meanwhile: read again.
    Raced,
    /// The write went without an answer: read again, and the seat's owner
    /// tells whether it was applied.
    Unanswered,
}

/// What a controller's log write is conditional on: the controller epoch
/// record still at `record_version` (the version at which `controller` won
/// `controller_epoch`, read and checked just before, with the seat's
/// owner) and the seat taken, in ZooKeeper; and here, `session` (the
/// seat's owner) still `controller`'s live session when the write is sent.
#[derive(Clone, Copy, Debug)]
struct Fence {
    controller: NodeId,
    controller_epoch: ControllerEpoch,
    record_version: i32,
    session: i64,
}

/// The refusal of a write by a node that is not the controller it claims.
fn fenced(
    log: LogId,
    controller: NodeId,
    controller_epoch: ControllerEpoch,
    view: &ControllerView,
) -> Error {
    coordinator_error(format!(
        "write to {log} refused: {controller} is not the controller with controller epoch {controller_epoch} ({})",
        view.describe_holder()
    ))
}

/// The refusal of a write by a controller whose session here may no
/// longer act for it (`why`).
fn fenced_here(
    log: LogId,
    controller: NodeId,
    controller_epoch: ControllerEpoch,
    why: &str,
) -> Error {
    coordinator_error(format!(
        "write to {log} refused: {controller} cannot write as the controller with controller \
         epoch {controller_epoch}: {why}"
    ))
}

/// Adds the reads [`parse_controller`] takes, in its order: the epoch
/// record, the seat and the chroot (whose `pzxid` tells when the seat was
/// last created or deleted).
fn add_controller_reads(reader: &mut zk::MultiReader<'_>) -> ZkResult<()> {
    reader.add_get_data(CONTROLLER_EPOCH)?;
    reader.add_get_data(CONTROLLER)?;
    reader.add_get_data("/")
}

/// The controller view from the reads [`add_controller_reads`] added.
///
/// With `/controller_epoch` missing, a persistent `/controller` is an
/// earlier version's record whose move did not happen yet (it failed at
/// open, say): the view then carries that record's epoch with
/// `old_record` set, so that the next election moves it (issue 24
/// review). Only without such a record is the missing `/controller_epoch`
/// an error, saying how to restore it.
fn parse_controller(
    results: &mut impl Iterator<Item = zk::MultiReadResult>,
) -> Result<ControllerView> {
    let (record, seat, root) = (results.next(), results.next(), results.next());
    let seat_zxid = match root {
        Some(zk::MultiReadResult::Data { stat, .. }) => stat.pzxid,
        other => return Err(unexpected("read the chroot", &other)),
    };
    let (record, record_version, record_zxid) = match record {
        Some(zk::MultiReadResult::Data { data, stat }) => {
            let record = document::decode_controller(CONTROLLER_EPOCH, &data, stat.version)?;
            (record, stat.version, stat.mzxid)
        }
        Some(zk::MultiReadResult::Error {
            err: zk::Error::NoNode,
        }) => {
            return match seat {
                Some(zk::MultiReadResult::Data { data, stat }) if stat.ephemeral_owner == 0 => {
                    let old = document::decode_controller(CONTROLLER, &data, stat.version)
                        .map_err(|error| not_an_old_record(&error, false))?;
                    Ok(ControllerView {
                        epoch: old.epoch,
                        winner: old.controller,
                        record_version: stat.version,
                        epoch_base: old.epoch_base,
                        unknown: old.unknown,
                        seat_owner: None,
                        old_record: true,
                        stray_seat: false,
                        zxid: stat.mzxid.max(seat_zxid),
                    })
                }
                _ => Err(Error::CoordinatorDocument {
                    path: CONTROLLER_EPOCH.to_owned(),
                    reason: controller_epoch_missing("read the controller epoch"),
                }),
            };
        }
        other => return Err(unexpected(&format!("read {CONTROLLER_EPOCH}"), &other)),
    };
    let (seat_owner, old_record, stray_seat) = match seat {
        // Created in the transaction that wrote the record: the winner's.
        Some(zk::MultiReadResult::Data { stat, .. })
            if stat.ephemeral_owner != 0 && stat.czxid == record_zxid =>
        {
            (Some(stat.ephemeral_owner), false, false)
        }
        Some(zk::MultiReadResult::Data { stat, .. }) => {
            (None, stat.ephemeral_owner == 0, stat.ephemeral_owner != 0)
        }
        Some(zk::MultiReadResult::Error {
            err: zk::Error::NoNode,
        }) => (None, false, false),
        other => return Err(unexpected(&format!("read {CONTROLLER}"), &other)),
    };
    Ok(ControllerView {
        epoch: record.epoch,
        winner: record.controller,
        record_version,
        epoch_base: record.epoch_base,
        unknown: record.unknown,
        seat_owner,
        old_record,
        stray_seat,
        zxid: record_zxid.max(seat_zxid),
    })
}

/// A znode's czxid as an incarnation: zxids are positive and grow with
/// every write to the ensemble, so a later znode has a larger one.
fn incarnation_of(czxid: i64) -> Incarnation {
    Incarnation(u64::try_from(czxid).unwrap_or(0))
}

fn unexpected(what: &str, answer: &Option<zk::MultiReadResult>) -> Error {
    coordinator_error(format!("unexpected answer to {what}: {answer:?}"))
}

/// The watcher task: turns notifications into events, checks leases, and
/// replaces the coordinator's session when it expires. Runs until `stop`
/// fires (its sender is dropped).
async fn run_watcher(
    shared: Arc<Shared>,
    mut client: zk::Client,
    mut watcher: zk::PersistentWatcher,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        let session_ended = watch_session(&shared, &client, &mut watcher, &mut stop).await;
        if !session_ended {
            return;
        }
        tracing::warn!("the coordinator's ZooKeeper session ended; opening a new one");
        // Never left to itself while it may still send (helper review,
        // finding 1c): a session given up whose connection merely failed
        // would send the writes it holds when it reconnects, after a
        // settling read on the new session missed them. Dropping the last
        // handle closes it; settling reads wait until it ended, and so does
        // the watcher, for a bounded time, so that they rarely have to.
        let state = client.state_watcher();
        shared.abandon_main(client);
        drop(watcher);
        if !state.peek_state().is_terminated() {
            let closed = close_wait(state, Instant::now() + CLOSE_WAIT_MAX);
            if let Either::Left(_) = future::select(&mut stop, std::pin::pin!(closed)).await {
                return;
            }
        }
        loop {
            // Sessions go on lapsing, suspending and resuming meanwhile (a
            // resumed one is announced by the resync below).
            shared.tick();
            let deadline = Instant::now() + shared.config.call_timeout;
            let opened = before(deadline, open_main_session(&shared.config)).await;
            match opened {
                Some(Ok((new_client, new_watcher))) => {
                    client = new_client;
                    watcher = new_watcher;
                    *shared.main.lock() = Some(client.clone());
                    break;
                }
                Some(Err(error)) => tracing::warn!(%error, "cannot open a new ZooKeeper session"),
                None => tracing::warn!("cannot open a new ZooKeeper session: timed out"),
            }
            let pause = async_io::Timer::after(RECONNECT_PAUSE);
            if let Either::Left(_) = future::select(&mut stop, pause).await {
                return;
            }
        }
        // Everything may have changed while no session watched.
        resync(&shared).await;
    }
}

/// Waits until the session `state` follows has ended, or until `deadline`.
async fn close_wait(mut state: zk::StateWatcher, deadline: Instant) {
    while !state.peek_state().is_terminated() {
        if before(deadline, state.changed()).await.is_none() {
            tracing::warn!(
                "the coordinator's given-up ZooKeeper session has not ended yet; settling reads \
                 wait for it"
            );
            return;
        }
    }
}

/// Re-reads everything and tells every subscriber to resync.
async fn resync(shared: &Shared) {
    let deadline = Instant::now() + shared.config.call_timeout;
    if let Err(error) = shared.refresh_everything(deadline).await {
        tracing::warn!(%error, "re-reading the coordinator's state failed");
    }
    shared.dispatcher.lock().resync_all();
}

/// What woke the watcher.
enum Wake {
    Stop,
    Tick,
    Notified(Vec<zk::WatchedEvent>),
}

/// Serves one session of the coordinator. Returns `true` when the session
/// ended (the caller opens a new one), `false` on stop.
async fn watch_session(
    shared: &Shared,
    client: &zk::Client,
    watcher: &mut zk::PersistentWatcher,
    stop: &mut oneshot::Receiver<()>,
) -> bool {
    // One absolute deadline, not a countdown restarted each round: under a
    // steady stream of notifications a countdown would never run out, and
    // leases would never lapse.
    let mut next_tick_at = Instant::now();
    let mut disconnected = false;
    loop {
        #[cfg(test)]
        if shared.give_up_main_session.swap(false, Ordering::SeqCst) {
            return true;
        }
        let now = Instant::now();
        if now >= next_tick_at {
            let (next, resumed) = shared.tick();
            next_tick_at = now + next;
            if resumed {
                let deadline = Instant::now() + shared.config.call_timeout;
                if let Err(error) = shared.refresh_membership(deadline).await {
                    tracing::warn!(%error, "re-reading the live nodes after a session resumed failed");
                    shared.dispatcher.lock().resync_all();
                }
            }
        }
        let wake = {
            let notified = std::pin::pin!(watcher.changed().map(|event| vec![event]));
            let tick = async_io::Timer::at(next_tick_at);
            let either = future::select(notified, tick);
            match future::select(&mut *stop, either).await {
                Either::Left(_) => Wake::Stop,
                Either::Right((Either::Left((events, _)), _)) => Wake::Notified(events),
                Either::Right((Either::Right(_), _)) => Wake::Tick,
            }
        };
        let mut events = match wake {
            Wake::Stop => return false,
            // The tick runs at the top of the loop.
            Wake::Tick => continue,
            Wake::Notified(events) => events,
        };
        // Take what else is already queued, up to a session event (after a
        // terminal one the watcher must not be polled again).
        while events.len() < EVENTS_PER_ROUND_MAX
            && events
                .last()
                .is_some_and(|event| event.event_type != zk::EventType::Session)
        {
            match watcher.changed().now_or_never() {
                Some(event) => events.push(event),
                None => break,
            }
        }
        let mut subjects = BTreeSet::new();
        let mut session_state = None;
        for event in events {
            if event.event_type == zk::EventType::Session {
                session_state = Some(event.session_state);
            } else if let Some(subject) = document::subject_of(&event.path) {
                subjects.insert(subject);
            }
        }
        let deadline = Instant::now() + shared.config.call_timeout;
        for subject in subjects {
            if let Err(error) = shared.refresh(deadline, subject).await {
                // The change is not announced: every subscriber must
                // re-read instead.
                tracing::warn!(%error, ?subject, "re-reading after a notification failed");
                shared.dispatcher.lock().resync_all();
            }
        }
        match session_state {
            None => {}
            Some(zk::SessionState::Disconnected) => {
                tracing::info!("the coordinator lost its ZooKeeper connection; reconnecting");
                disconnected = true;
            }
            Some(zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly)
                if disconnected =>
            {
                disconnected = false;
                tracing::info!("the coordinator reconnected to ZooKeeper; resyncing");
                // zookeeper-client 0.11 does not restore persistent watches
                // when it reconnects a session (its SetWatches request
                // leaves them out), so the watch is added again, before the
                // re-read, so that no change falls between the two. The old
                // watcher goes after the new one exists: its removal then
                // leaves the server's watch in place.
                let deadline = Instant::now() + shared.config.call_timeout;
                match before(
                    deadline,
                    client.watch("/", zk::AddWatchMode::PersistentRecursive),
                )
                .await
                {
                    Some(Ok(fresh)) => drop(std::mem::replace(watcher, fresh)),
                    Some(Err(error)) => {
                        tracing::warn!(%error, "cannot watch ZooKeeper again after reconnecting; opening a new session");
                        return true;
                    }
                    None => {
                        tracing::warn!("cannot watch ZooKeeper again after reconnecting (timed out); opening a new session");
                        return true;
                    }
                }
                resync(shared).await;
            }
            Some(state) if state.is_terminated() => return true,
            Some(_) => {}
        }
    }
}

impl Coordinator for ZkCoordinator {
    fn create_log(&self, log: LogId, replicas: Vec<NodeId>) -> Result<LogState> {
        let created = LogState::initial(log, replicas)?;
        let data = document::encode_log(&created);
        let path = document::log_path(log);
        self.run_write(
            format!("create {path}"),
            move |shared, deadline, what| async move {
                let client = shared.main_client(deadline, &what).await?;
                connected(&client, deadline, &what).await?;
                match unknown_if_lost(client.create(&path, &data, &persistent()).await, &what)? {
                    Ok((stat, _)) => {
                        let stored = LogState {
                            version: log_version(log, &stat)?,
                            ..created
                        };
                        shared.dispatcher.lock().log_changed(stat.mzxid, &stored);
                        Ok(stored)
                    }
                    Err(zk::Error::NodeExists) => Err(coordinator_error(format!(
                        "cannot create {log}: it already exists"
                    ))),
                    Err(error) => Err(zk_error(&what, error)),
                }
            },
        )
    }

    /// Syncs first (the trait's promise): a write whose answer was lost
    /// may have been applied on the ensemble's leader while this session's
    /// server has not seen it yet, and this read must settle it.
    fn log_state(&self, log: LogId) -> Result<Option<LogState>> {
        self.run(
            format!("read {log}"),
            move |shared, deadline, _| async move {
                Ok(shared
                    .read_log(deadline, log, Freshness::Synced)
                    .await?
                    .map(|(state, _)| state))
            },
        )
    }

    fn logs(&self) -> Result<Vec<LogState>> {
        self.run(
            "read every log".to_owned(),
            move |shared, deadline, _| async move {
                Ok(shared
                    .read_logs(deadline)
                    .await?
                    .into_iter()
                    .map(|(state, _)| state)
                    .collect())
            },
        )
    }

    fn compare_and_set(
        &self,
        log: LogId,
        expected_epoch: LeaderEpoch,
        expected_version: u64,
        update: LogUpdate,
    ) -> Result<CasOutcome> {
        self.run_write(
            format!("update {log}"),
            move |shared, deadline, _| async move {
                shared
                    .compare_and_set(
                        deadline,
                        log,
                        expected_epoch,
                        expected_version,
                        update,
                        None,
                    )
                    .await
            },
        )
    }

    /// One ZooKeeper `multi`: `/controller_epoch`'s version must still be
    /// the one `controller_epoch` was won at and the seat must exist (only
    /// an election creates it, in the transaction that moves the version
    /// on, and the record is never recreated, so together they mean the
    /// seat is held by the winner of that epoch; the pre-read also checks
    /// the seat's owner session), and the log's znode must be at
    /// `expected_version` — or nothing is written. It is sent only while
    /// the session that holds the seat is `controller`'s live session
    /// here: a session this coordinator ended writes nothing more, even
    /// while ZooKeeper, which has not heard the close, still seats it.
    fn compare_and_set_as_controller(
        &self,
        controller: NodeId,
        controller_epoch: ControllerEpoch,
        log: LogId,
        expected_epoch: LeaderEpoch,
        expected_version: u64,
        update: LogUpdate,
    ) -> Result<CasOutcome> {
        let what = format!(
            "update {log} as controller {controller} (controller epoch {controller_epoch})"
        );
        // Curator's SUSPENDED: a controller whose session is suspended, or
        // was since its pass began, stops acting even though ZooKeeper may
        // still seat it: its view of the live nodes left its own node out
        // (or predates the outage), and acting on it would move leadership
        // off a node whose session lives (see `Verdict`). A controller
        // without a live session here is refused as well (see
        // `Shared::acting_controller_session_in`).
        self.handle.shared.refuse_if_suspended(controller, &what)?;
        self.run_write(what, move |shared, deadline, _| async move {
            shared
                .compare_and_set(
                    deadline,
                    log,
                    expected_epoch,
                    expected_version,
                    update,
                    Some((controller, controller_epoch)),
                )
                .await
        })
    }

    /// Opens a ZooKeeper session with `session_timeout` for `node` and
    /// creates its ephemeral znode. If the znode still belongs to an earlier
    /// session (a previous incarnation not yet expired, or another process
    /// using the same id), waits for it to go, up to the call timeout. If
    /// `node`'s session is suspended (cut off for a session timeout), waits
    /// up to the call timeout for ZooKeeper to say whether it lives: a
    /// resumed session is kept, an expired one replaced; no second session
    /// is opened while the first may still hold the node's znode.
    /// The incarnation is the czxid of the node's ephemeral znode, as
    /// Kafka's broker epoch is: a later znode, made by a later session, has
    /// a larger one. Renewing a live session keeps it. A registration whose
    /// answer was lost is settled before this returns (the znode the
    /// abandoned session may own is deleted, and the answer is a plain
    /// failure); it is outcome-unknown only if ZooKeeper cannot be read or
    /// written to settle it.
    fn register_node(&self, node: NodeId, session_timeout: Duration) -> Result<Incarnation> {
        if session_timeout.is_zero() {
            return Err(Error::InvalidConfig {
                field: "session_timeout",
                value: format!("{session_timeout:?}"),
                reason: "a session must last longer than zero",
            });
        }
        let shared = Arc::clone(&self.handle.shared);
        // Another registration through this coordinator may take up to a
        // few call timeouts (waiting out a suspended session, the write,
        // settling a lost answer): wait for it no longer than one call may
        // take, rather than queueing behind it past this call's own bound.
        let Some(_registering) = shared.registering.try_lock_for(shared.config.call_timeout) else {
            return Err(coordinator_error(format!(
                "cannot register {node}: another registration through this coordinator did not end within the call timeout ({:?}); nothing was sent: register again",
                shared.config.call_timeout
            )));
        };
        let renewed = shared.with_live_session(node, "register again", |session, now| {
            session.last_heartbeat = now;
            session.session_timeout = session_timeout;
            session.incarnation
        });
        if let Ok(incarnation) = renewed {
            return Ok(incarnation);
        }
        let waited_until = Instant::now() + shared.config.call_timeout;
        loop {
            let now = Instant::now();
            let suspended = {
                let sessions = shared.sessions.lock();
                let calls = shared.calls.lock();
                sessions
                    .get(&node)
                    .is_some_and(|session| session.verdict(now, &calls) == Verdict::Suspended)
            };
            if !suspended {
                break;
            }
            if now >= waited_until {
                return Err(coordinator_error(format!(
                    "cannot register {node} again: its session is suspended (cut off from \
                     ZooKeeper for a session timeout) and ZooKeeper has not said yet whether it \
                     still lives; retry once ZooKeeper is reachable"
                )));
            }
            std::thread::sleep(RETRY_PAUSE);
        }
        let renewed = shared.with_live_session(node, "register again", |session, now| {
            session.last_heartbeat = now;
            session.session_timeout = session_timeout;
            session.incarnation
        });
        if let Ok(incarnation) = renewed {
            return Ok(incarnation);
        }
        let connect = format!("{}{}", shared.config.connect, shared.config.chroot);
        let resume_connect = connect.clone();
        // A write: once the create of the node's znode was sent without an
        // answer, the znode may exist (owned by the session opened here,
        // which closes when this job is dropped, or expires). Such a
        // failure is settled below, before returning: a node whose start
        // fails gets no second chance to settle it (issue 24 review).
        let opened: Arc<Mutex<Option<i64>>> = Arc::new(Mutex::new(None));
        let opened_by_job = Arc::clone(&opened);
        let registered = self.run_write(
            format!("register {node}"),
            move |shared, deadline, what| async move {
                let client = before(
                    deadline,
                    zk::Client::connector()
                        .with_session_timeout(session_timeout)
                        .connect(&connect),
                )
                .await
                .ok_or_else(|| {
                    coordinator_error(format!(
                        "cannot {what}: no ZooKeeper session within the call timeout"
                    ))
                })?
                .map_err(|e| zk_error(&format!("open a session to {what}"), e))?;
                // Known before any create is sent: what a failure leaves
                // behind can only be this session's.
                *opened_by_job.lock() = Some(client.session_id().0);
                // ZooKeeper clamps a session's timeout to its
                // [minSessionTimeout, maxSessionTimeout]; a node whose
                // session outlives (or undercuts) its configured timeout
                // would be fenced later (or sooner) than it believes.
                let granted = client.session_timeout();
                if granted.as_millis() != session_timeout.as_millis() {
                    return Err(Error::InvalidConfig {
                        field: "session_timeout",
                        value: format!(
                            "{session_timeout:?} requested for node {node}, \
                             but ZooKeeper granted {granted:?}"
                        ),
                        reason: "ZooKeeper clamps session timeouts to \
                                 [minSessionTimeout, maxSessionTimeout] (by default 2 and 20 \
                                 times its tickTime); configure the server or the node so \
                                 the node's session timeout lies within",
                    });
                }
                let path = document::node_path(node);
                let data = document::encode_node(session_timeout);
                // Whether a create went without an answer: from then on a
                // failure leaves the outcome unknown.
                let mut unanswered = false;
                let settle = |unanswered: bool, error: Error| {
                    if unanswered {
                        lost(&what)
                    } else {
                        error
                    }
                };
                let created = loop {
                    connected(&client, deadline, &what)
                        .await
                        .map_err(|error| settle(unanswered, error))?;
                    // The create moves `/nodes`'s data version in the same
                    // transaction, so that a delete of an earlier
                    // registration's znode can be made conditional on no
                    // registration since (see `delete_registration`). Both
                    // ops share the transaction's zxid: the set's mzxid is
                    // the znode's czxid (a create's own stat in a `multi`
                    // may be invalid, ZOOKEEPER-4026).
                    let mut writer = client.new_multi_writer();
                    writer
                        .add_create(&path, &data, &ephemeral())
                        .map_err(|e| settle(unanswered, zk_error(&what, e)))?;
                    writer
                        .add_set_data(NODES, &[], None)
                        .map_err(|e| settle(unanswered, zk_error(&what, e)))?;
                    let owner = match writer.commit().await {
                        Ok(results) => match results.get(1) {
                            Some(zk::MultiWriteResult::SetData { stat }) => break stat.mzxid,
                            other => {
                                return Err(settle(
                                    true,
                                    coordinator_error(format!(
                                        "unexpected answer to {what}: {other:?}"
                                    )),
                                ))
                            }
                        },
                        // Unknown whether it was created: the next attempt
                        // finds out.
                        Err(zk::MultiWriteError::RequestFailed { source })
                            if is_connection_error(&source) =>
                        {
                            unanswered = true;
                            None
                        }
                        Err(zk::MultiWriteError::OperationFailed {
                            index: 0,
                            source: zk::Error::NodeExists,
                        }) => match client.check_stat(&path).await {
                            Ok(Some(stat)) => Some((stat.ephemeral_owner, stat.czxid)),
                            Ok(None) => None,
                            Err(error) if is_connection_error(&error) => None,
                            Err(error) => return Err(settle(unanswered, zk_error(&what, error))),
                        },
                        Err(error) => {
                            return Err(settle(unanswered, zk_error(&what, error.into())))
                        }
                    };
                    if let Some((owner, czxid)) = owner {
                        if owner == client.session_id().0 {
                            break czxid;
                        }
                    }
                    let owner = owner.map(|(owner, _)| owner);
                    if Instant::now() + RETRY_PAUSE >= deadline {
                        if unanswered {
                            return Err(lost(&what));
                        }
                        return Err(coordinator_error(format!(
                            "cannot {what}: {path} still belongs to ZooKeeper session {:#x} \
                             (an earlier incarnation of the node whose session has not ended yet, \
                             or another process using the same node id)",
                            owner.unwrap_or(0)
                        )));
                    }
                    async_io::Timer::after(RETRY_PAUSE).await;
                };
                shared.sync(deadline).await;
                Ok((client, created))
            },
        );
        let (client, created) = match registered {
            Ok(registered) => registered,
            Err(error) if error.is_outcome_unknown() => {
                let abandoned = *opened.lock();
                return Err(self.settle_lost_registration(node, abandoned, error));
            }
            Err(error) => return Err(error),
        };
        let incarnation = incarnation_of(created);
        shared.ended_locally.lock().remove(&node);
        // The node's znode belongs to the new session: an unregistration
        // left unsettled has nothing left to settle.
        shared.unregistering.lock().remove(&node);
        // A node unregistered while suspended and registered again is live
        // again, not hidden (review of issue 24).
        shared.suspended.lock().remove(&node);
        tracing::info!(%node, session = %client.session_id(), timeout = ?session_timeout,
            %incarnation, "node registered with ZooKeeper");
        let link = Arc::new(Mutex::new(SessionLink {
            client,
            link: Link::default(),
            ended: false,
        }));
        let (stop_tracking, stop) = oneshot::channel();
        self.handle
            .executor
            .spawn(track_session(resume_connect, Arc::clone(&link), stop))?;
        shared.sessions.lock().insert(
            node,
            NodeSession {
                session_timeout,
                last_heartbeat: Instant::now(),
                heartbeat_thread: None,
                link,
                suspended: false,
                suspended_since_seat_check: false,
                _stop_tracking: stop_tracking,
                incarnation,
            },
        );
        Ok(incarnation)
    }

    /// Renews `node`'s lease; no round trip to ZooKeeper (the client pings
    /// by itself). Fails once the lease ran out, ZooKeeper ended the
    /// session, or while the session is suspended (disconnected for a whole
    /// session timeout: ZooKeeper may have expired it), but not while the
    /// client is merely reconnecting. The calling thread becomes the node's heartbeat
    /// thread: while it is in a call through this coordinator, the lease
    /// does not lapse.
    fn heartbeat(&self, node: NodeId) -> Result<()> {
        let thread = std::thread::current().id();
        self.handle
            .shared
            .with_live_session(node, "heartbeat", |session, now| {
                session.last_heartbeat = now;
                session.heartbeat_thread = Some(thread);
            })
    }

    /// Closes `node`'s session and waits (up to the call timeout) for
    /// ZooKeeper to confirm, which deletes its ephemeral znode and any
    /// controller seat it held in the same step. A write: the client may
    /// give a session up without ZooKeeper having heard the close (the
    /// connection was lost), so the call then checks whether the node's
    /// znode still belongs to that session, and if it does deletes it — that
    /// znode only, never a later registration's
    /// (`Shared::delete_registration`); if that cannot be checked or done
    /// in time, the outcome is unknown (the znode goes at the latest when
    /// the session expires). The given-up session is remembered until a check
    /// settles it: calling again re-runs the check (the promise of
    /// [`Coordinator::unregister_node`]) rather than answer that a node
    /// without a session here is not registered.
    fn unregister_node(&self, node: NodeId) -> Result<()> {
        let shared = &self.handle.shared;
        let session = shared.sessions.lock().remove(&node);
        shared.suspended.lock().remove(&node);
        let (session_id, state) = match session {
            Some(session) => {
                let client = session.client();
                let session_id = client.session_id().0;
                let state = client.state_watcher();
                // Before the close: a call that fails from here on leaves
                // something to settle.
                shared.unregistering.lock().insert(node, session_id);
                drop(client);
                drop(session);
                (session_id, Some(state))
            }
            None => match shared.unregistering.lock().get(&node) {
                Some(&session_id) => (session_id, None),
                None => return Ok(()),
            },
        };
        let outcome = self.run_write(
            format!("unregister {node}"),
            move |shared, deadline, what| async move {
                if let Some(mut state) = state {
                    while !state.peek_state().is_terminated() {
                        if before(deadline, state.changed()).await.is_none() {
                            return Err(lost(&what));
                        }
                    }
                }
                // If ZooKeeper did not hear the close, delete the znode the
                // given-up session still owns, so that the node does not stay
                // live until that session expires (as `settle_lost_registration`
                // does for a start) — and only that znode, never a later
                // registration's. Until that is settled, the outcome is
                // unknown: calling again settles it.
                match shared
                    .delete_registration(deadline, node, Some(session_id), &what)
                    .await
                {
                    Ok(Removal::Deleted | Removal::NotOwned) => Ok(()),
                    Err(error) if error.is_outcome_unknown() => Err(error),
                    Err(error) => Err(Error::CoordinatorOutcomeUnknown {
                        reason: format!(
                            "ZooKeeper may not have heard the close of session {session_id:#x}, \
                             and whether that session still owns {} could not be settled: \
                             {error}; unregister again to settle it",
                            document::node_path(node)
                        ),
                        operation: what,
                    }),
                }
            },
        );
        if outcome.is_ok() {
            let mut unregistering = shared.unregistering.lock();
            if unregistering.get(&node) == Some(&session_id) {
                unregistering.remove(&node);
            }
        }
        outcome
    }

    /// Ends a session of `node` held here as [`Coordinator::unregister_node`]
    /// does, then deletes `node`'s registration znode whichever session
    /// owns it: a crashed process's session lives on in ZooKeeper until it
    /// expires, and only this delete ends its registration sooner (any
    /// client may delete another session's ephemeral znode). The delete is
    /// conditional, as every settling delete here, on no registration
    /// having been made since the read (`Shared::delete_registration`).
    fn unregister_previous_process(&self, node: NodeId) -> Result<()> {
        self.unregister_node(node)?;
        self.run_write(
            format!("end the previous registration of {node}"),
            move |shared, deadline, what| async move {
                match shared.delete_registration(deadline, node, None, &what).await? {
                    Removal::Deleted => {
                        tracing::info!(%node, "ended the registration a previous process of this node left behind");
                    }
                    Removal::NotOwned => {}
                }
                Ok(())
            },
        )
    }

    fn live_nodes(&self) -> Result<Vec<NodeId>> {
        self.run(
            "list the live nodes".to_owned(),
            move |shared, deadline, _| async move { Ok(shared.read_nodes(deadline).await?.0) },
        )
    }

    fn live_node_incarnations(&self) -> Result<Vec<(NodeId, Incarnation)>> {
        self.run(
            "read the live nodes' incarnations".to_owned(),
            move |shared, deadline, _| async move { shared.read_node_incarnations(deadline).await },
        )
    }

    fn subscribe(&self, node: NodeId) -> Result<crossbeam_channel::Receiver<CoordinatorEvent>> {
        Ok(self.handle.shared.dispatcher.lock().subscribe(node, false))
    }

    fn subscribe_all(&self, node: NodeId) -> Result<crossbeam_channel::Receiver<CoordinatorEvent>> {
        Ok(self.handle.shared.dispatcher.lock().subscribe(node, true))
    }

    /// Takes the seat with one `multi` on `node`'s own session: the record
    /// gets epoch + 1 and `node` (conditional on the version read), and the
    /// seat is created as an ephemeral znode of that session, so it goes
    /// when the session does.
    fn try_become_controller(&self, node: NodeId) -> Result<Option<ControllerEpoch>> {
        // A pass starts here: from now on its controller writes may go
        // through, unless the session is suspended again.
        let client =
            self.handle
                .shared
                .with_live_session(node, "become controller", |session, _| {
                    session.suspended_since_seat_check = false;
                    session.client()
                })?;
        self.run_write(
            format!("seat {node} as controller"),
            move |shared, deadline, what| async move {
                // Whether an attempt went without an answer: from then on
                // a failure leaves the outcome unknown (SPEC 3.4), since
                // the seat may be ours.
                let mut unanswered = false;
                loop {
                    match shared.try_seat(&client, node, deadline, &what).await {
                        Ok(SeatAttempt::Decided(epoch)) => return Ok(epoch),
                        Ok(SeatAttempt::Raced) => {}
                        Ok(SeatAttempt::Unanswered) => unanswered = true,
                        Err(error) if unanswered => {
                            return Err(Error::CoordinatorOutcomeUnknown {
                                operation: what,
                                reason: format!(
                                    "an attempt went unanswered (the seat may be this node's), \
                                     then: {error}; ask again or read the controller to settle it"
                                ),
                            })
                        }
                        Err(error) => return Err(error),
                    }
                    if Instant::now() + RETRY_PAUSE >= deadline {
                        if unanswered {
                            return Err(lost(&what));
                        }
                        return Err(coordinator_error(format!(
                            "cannot {what}: the seat kept changing; retry later"
                        )));
                    }
                    // Someone else changed the record or took the seat (or
                    // the answer was lost): the next read tells who, once
                    // the winner's transaction is visible; without a pause
                    // the candidates would spin on ZooKeeper.
                    async_io::Timer::after(RETRY_PAUSE).await;
                }
            },
        )
    }

    /// Deletes the seat in one `multi` conditional on the record's version,
    /// so only the seat `node` won is deleted.
    fn resign_controller(&self, node: NodeId) -> Result<()> {
        self.run_write(
            format!("resign {node} as controller"),
            move |shared, deadline, what| async move {
                // Synced (helper review, finding 2): a stale view that
                // showed the seat empty or someone else's would answer
                // "resigned" while this node still holds the seat.
                let view = shared.read_controller(deadline, Freshness::Synced).await?;
                if view.controller() != Some(node) {
                    return Ok(());
                }
                let client = shared.main_client(deadline, &what).await?;
                connected(&client, deadline, &what).await?;
                let mut writer = client.new_multi_writer();
                writer
                    .add_check_version(CONTROLLER_EPOCH, view.record_version)
                    .map_err(|e| zk_error(&what, e))?;
                writer
                    .add_delete(CONTROLLER, None)
                    .map_err(|e| zk_error(&what, e))?;
                match writer.commit().await {
                    Ok(_) => {
                        tracing::info!(controller = %node, epoch = %view.epoch, "controller resigned");
                        Ok(())
                    }
                    // The seat changed hands or emptied meanwhile: not ours.
                    Err(zk::MultiWriteError::OperationFailed { .. }) => Ok(()),
                    Err(zk::MultiWriteError::RequestFailed { source })
                        if is_connection_error(&source) =>
                    {
                        Err(lost(&what))
                    }
                    Err(zk::MultiWriteError::RequestFailed { source }) => {
                        Err(zk_error(&what, source))
                    }
                }
            },
        )
    }

    fn controller(&self) -> Result<Option<(NodeId, ControllerEpoch)>> {
        self.run(
            "read the controller".to_owned(),
            move |shared, deadline, _| async move {
                let view = shared
                    .read_controller(deadline, Freshness::AsServed)
                    .await?;
                Ok(view.controller().map(|node| (node, view.epoch)))
            },
        )
    }

    /// Hands out ids from a block reserved by compare-and-set on the shared
    /// counter, reserving the next block when this one is used up. An
    /// earlier version's `/producer_ids_high_mark`, while it exists, moves
    /// with the counter in the same transaction (conditional on its
    /// version), so that an earlier-version node of a rolling upgrade that
    /// recreates a missing counter from it never goes below an id handed
    /// out. (Deleting it instead would not last: such a node recreates it
    /// from the counter whenever it opens, and would again find it stale.)
    fn allocate_producer_id(&self) -> Result<ProducerId> {
        let shared = Arc::clone(&self.handle.shared);
        // The lock is held across a reservation's round trip: a caller
        // behind one that waits for ZooKeeper gives up at its own call
        // timeout instead of queueing past it.
        let Some(mut block) = shared.producer_ids.try_lock_for(shared.config.call_timeout) else {
            return Err(coordinator_error(format!(
                "cannot allocate a producer id: another reservation of a block through this coordinator did not end within the call timeout ({:?}); nothing was reserved: try again",
                shared.config.call_timeout
            )));
        };
        if block.next < block.end {
            let id = ProducerId(block.next);
            block.next += 1;
            return Ok(id);
        }
        let size = i64::from(shared.config.producer_id_block_size);
        let reserved = self.run_write(
            "reserve a block of producer ids".to_owned(),
            move |shared, deadline, what| async move {
                let missing = |what: &str| Error::CoordinatorDocument {
                    path: PRODUCER_IDS.to_owned(),
                    reason: producer_ids_missing(what),
                };
                loop {
                    let read = shared
                        .read(deadline, &what, |client| async move {
                            let mut reader = client.new_multi_reader();
                            reader.add_get_data(PRODUCER_IDS)?;
                            reader.add_get_data(PRODUCER_IDS_HIGH_MARK)?;
                            reader.commit().await
                        })
                        .await?
                        .map_err(|e| zk_error(&what, e))?;
                    let mut read = read.into_iter();
                    let (data, stat) = match read.next() {
                        Some(zk::MultiReadResult::Data { data, stat }) => (data, stat),
                        Some(zk::MultiReadResult::Error {
                            err: zk::Error::NoNode,
                        }) => return Err(missing(&what)),
                        other => return Err(unexpected(&what, &other)),
                    };
                    let mark = match read.next() {
                        Some(zk::MultiReadResult::Data { data, stat }) => {
                            // Only ever raised: an unreadable mark is
                            // overwritten with the counter.
                            let value = document::decode_producer_ids(&data)
                                .map(|(value, _)| value)
                                .unwrap_or(0);
                            Some((value, stat.version))
                        }
                        Some(zk::MultiReadResult::Error {
                            err: zk::Error::NoNode,
                        }) => None,
                        other => return Err(unexpected(&what, &other)),
                    };
                    let (counter_start, unknown) = document::decode_producer_ids(&data)?;
                    // Never below the mark: a counter restored by hand
                    // below it would otherwise hand out ids again.
                    let start = mark.map_or(counter_start, |(value, _)| counter_start.max(value));
                    let end = start
                        .checked_add(size)
                        .ok_or_else(|| coordinator_error("producer ids exhausted".to_owned()))?;
                    let client = shared.main_client(deadline, &what).await?;
                    connected(&client, deadline, &what).await?;
                    let counter = document::encode_producer_ids(end, &unknown);
                    let mut writer = client.new_multi_writer();
                    writer
                        .add_set_data(PRODUCER_IDS, &counter, Some(stat.version))
                        .map_err(|e| zk_error(&what, e))?;
                    let raised;
                    if let Some((value, version)) = mark {
                        raised =
                            document::encode_producer_ids(value.max(end), &document::Extra::new());
                        writer
                            .add_set_data(PRODUCER_IDS_HIGH_MARK, &raised, Some(version))
                            .map_err(|e| zk_error(&what, e))?;
                    }
                    match writer.commit().await {
                        Ok(_) => return Ok((start, end)),
                        Err(zk::MultiWriteError::OperationFailed {
                            index: 0,
                            source: zk::Error::NoNode,
                        }) => return Err(missing(&what)),
                        // The counter, or the mark, changed (or the mark
                        // went) meanwhile: read both again.
                        Err(zk::MultiWriteError::OperationFailed {
                            source: zk::Error::BadVersion | zk::Error::NoNode,
                            ..
                        }) => {}
                        Err(zk::MultiWriteError::RequestFailed { source })
                            if is_connection_error(&source) =>
                        {
                            return Err(lost(&what))
                        }
                        Err(error) => return Err(zk_error(&what, error.into())),
                    }
                    if Instant::now() + RETRY_PAUSE >= deadline {
                        return Err(coordinator_error(format!(
                            "cannot {what}: the counter kept changing; retry later"
                        )));
                    }
                }
            },
        )?;
        let (start, end) = reserved;
        block.next = start + 1;
        block.end = end;
        Ok(ProducerId(start))
    }

    fn cluster_id(&self) -> Result<ClusterId> {
        self.run(
            format!("read {CLUSTER_ID}"),
            move |shared, deadline, what| async move {
                let (data, _) = shared
                    .read(deadline, &what, |client| async move {
                        client.get_data(CLUSTER_ID).await
                    })
                    .await?
                    .map_err(|e| zk_error(&what, e))?;
                document::decode_cluster_id(&data)
            },
        )
    }

    fn replica_directories(&self, node: NodeId) -> Result<Vec<(LogId, DirectoryId)>> {
        let path = document::directories_path(node);
        self.run(
            format!("read {path}"),
            move |shared, deadline, what| async move {
                // Synced (helper review, finding 2): a node reads this as it
                // starts, and a stale answer missing an entry would say a
                // replica that holds records was never placed anywhere.
                let read = shared
                    .read_synced(deadline, &what, |client| {
                        let path = path.clone();
                        async move { client.get_data(&path).await }
                    })
                    .await?;
                match read {
                    Ok((data, _)) => Ok(document::decode_directories(node, &data)?.0),
                    Err(zk::Error::NoNode) => Ok(Vec::new()),
                    Err(error) => Err(zk_error(&what, error)),
                }
            },
        )
    }

    /// Read-modify-write of the node's directories document, with the
    /// znode version as compare-and-set key (only the node itself writes
    /// it, so a lost race is rare: a retry after a call whose outcome was
    /// unknown).
    fn record_replica_directories(
        &self,
        node: NodeId,
        directory: DirectoryId,
        logs: &[LogId],
    ) -> Result<()> {
        let path = document::directories_path(node);
        let logs = logs.to_vec();
        self.run_write(
            format!("write {path}"),
            move |shared, deadline, what| async move {
                loop {
                    let read = shared
                        .read(deadline, &what, |client| {
                            let path = path.clone();
                            async move { client.get_data(&path).await }
                        })
                        .await?;
                    let (mut recorded, version) = match read {
                        Ok((data, stat)) => {
                            let (recorded, unknown) = document::decode_directories(node, &data)?;
                            document::refuse_unknown_fields(&path, &unknown, &what)?;
                            (recorded, Some(stat.version))
                        }
                        Err(zk::Error::NoNode) => (Vec::new(), None),
                        Err(error) => return Err(zk_error(&what, error)),
                    };
                    recorded.retain(|(log, _)| !logs.contains(log));
                    recorded.extend(logs.iter().map(|log| (*log, directory)));
                    recorded.sort();
                    let data = document::encode_directories(&recorded);
                    let client = shared.main_client(deadline, &what).await?;
                    connected(&client, deadline, &what).await?;
                    let written = match version {
                        Some(version) => client
                            .set_data(&path, &data, Some(version))
                            .await
                            .map(|_| ()),
                        None => client.create(&path, &data, &persistent()).await.map(|_| ()),
                    };
                    match unknown_if_lost(written, &what)? {
                        Ok(()) => return Ok(()),
                        Err(zk::Error::BadVersion | zk::Error::NodeExists) => {}
                        Err(error) => return Err(zk_error(&what, error)),
                    }
                    if Instant::now() + RETRY_PAUSE >= deadline {
                        return Err(coordinator_error(format!(
                            "cannot {what}: the document kept changing; retry later"
                        )));
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::zookeeper::{ZkProxy, ZkServer, ZkShell};

    /// A coordinator under `chroot` on `server`, its configuration changed
    /// by `tweak`.
    fn on(
        server: &ZkServer,
        chroot: &str,
        tweak: impl FnOnce(&mut ZkCoordinatorConfig),
    ) -> ZkCoordinator {
        let mut config = ZkCoordinatorConfig::new(server.connect_string());
        config.chroot = chroot.to_owned();
        tweak(&mut config);
        ZkCoordinator::connect(config).unwrap_or_else(|e| panic!("cannot connect: {e}"))
    }

    /// A coordinator under `chroot` that reaches `server` through `proxy`.
    fn through(proxy: &ZkProxy, chroot: &str) -> ZkCoordinator {
        let mut config = ZkCoordinatorConfig::new(proxy.connect_string());
        config.chroot = chroot.to_owned();
        config.call_timeout = Duration::from_secs(1);
        // The client gives a silent connection up after 2/5 of this (6 s),
        // well after the settling read below would have answered.
        config.session_timeout = Duration::from_secs(15);
        ZkCoordinator::connect(config).unwrap_or_else(|e| panic!("cannot connect: {e}"))
    }

    /// Helper review, finding 1c: when the watcher gave up a session that
    /// had not ended (its watch could not be added again after a
    /// reconnection), it dropped it without waiting for it to end, and a
    /// write that session still held could land after a settling read on
    /// the new session had reported it not applied. Here the write is held
    /// in the network (as a slow link does), its caller gets
    /// `CoordinatorOutcomeUnknown`, the watcher gives the session up, and
    /// the settling read runs on the new one; then the network delivers
    /// the write. Before the fix the settling read said "not applied" at
    /// once and the write then landed. Now settling reads wait until every
    /// given-up session ended, after which nothing of it can land: the
    /// store agrees with the settling read.
    #[test]
    fn a_write_held_by_a_given_up_session_never_lands_after_a_settling_read() {
        let server = ZkServer::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
        let proxy = ZkProxy::start(&server.connect_string()).expect("proxy");
        let chroot = "/given-up";
        let c = through(&proxy, chroot);
        let log = LogId(1);
        let created = c.create_log(log, vec![NodeId(1), NodeId(2)]).unwrap();

        proxy.hold_requests_from_next_write("/logs/1");
        let update = LogUpdate::in_sync_replicas(&created, vec![NodeId(1)], 1);
        match c.compare_and_set(log, created.leader_epoch, created.version, update) {
            Err(error) if error.is_outcome_unknown() => {}
            other => panic!("a write without an answer must be unknown: {other:?}"),
        }
        // As when the watch cannot be added again after a reconnection.
        c.handle
            .shared
            .give_up_main_session
            .store(true, Ordering::SeqCst);

        let deadline = Instant::now() + Duration::from_secs(40);
        let settled = loop {
            match c.log_state(log) {
                Ok(Some(state)) => break state,
                Ok(None) => panic!("the log vanished"),
                Err(error) => {
                    assert!(Instant::now() < deadline, "never settled: {error}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        proxy.release_held_requests();
        let shell = ZkShell::connect(&server.connect_string(), chroot).unwrap();
        // Time for a released write to be applied.
        std::thread::sleep(Duration::from_secs(2));
        let (_, version) = shell.get(&document::log_path(log)).unwrap();
        assert_eq!(
            u64::try_from(version).unwrap(),
            settled.version,
            "the settling read answered version {} (so the write was not applied), and the \
             write landed later",
            settled.version
        );
    }

    /// Helper review, finding 1b: a new session of the coordinator (the
    /// first, and each that replaces one) was published without a sync,
    /// and a brand-new session may be attached to a server that lags the
    /// ensemble's leader. Now the first request of every such session is
    /// a sync.
    #[test]
    fn every_new_coordinator_session_syncs_first() {
        let server = ZkServer::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
        let proxy = ZkProxy::start(&server.connect_string()).expect("proxy");
        let c = through(&proxy, "/synced-first");
        const SYNC: i32 = 9;
        assert_eq!(proxy.first_requests(), vec![SYNC]);
        c.handle
            .shared
            .give_up_main_session
            .store(true, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(20);
        while proxy.first_requests().len() < 2 {
            assert!(Instant::now() < deadline, "no new session");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(proxy.first_requests(), vec![SYNC, SYNC]);
        assert!(c.logs().unwrap().is_empty());
    }

    #[test]
    fn liveness_of_a_node_session() {
        let t0 = Instant::now();
        let timeout = Duration::from_secs(2);
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let connected = Link::default();
        let cut_at = |at: Duration| Link {
            disconnected_since: Some(t0 + at),
            reconnected_at: None,
        };
        let back_at = |at: Duration| Link {
            disconnected_since: None,
            reconnected_at: Some(t0 + at),
        };
        // (case, now, link, heartbeat thread in a call, terminated, verdict);
        // the last heartbeat was at t0.
        let cases: Vec<(&str, Duration, Link, bool, bool, Verdict)> = vec![
            ("fresh lease", s(1), connected, false, false, Verdict::Alive),
            (
                "lease at its end",
                s(2),
                connected,
                false,
                false,
                Verdict::Alive,
            ),
            (
                "lease lapsed",
                s(2) + ms(1),
                connected,
                false,
                false,
                Verdict::LeaseLapsed,
            ),
            (
                "a call in flight holds the lease",
                s(9),
                connected,
                true,
                false,
                Verdict::Alive,
            ),
            (
                "disconnected holds the lease",
                s(3),
                cut_at(s(1) + ms(500)),
                false,
                false,
                Verdict::Alive,
            ),
            (
                "disconnected a whole timeout",
                s(3),
                cut_at(s(1)),
                false,
                false,
                Verdict::Suspended,
            ),
            (
                "disconnected a timeout, in a call",
                s(3),
                cut_at(s(1)),
                true,
                false,
                Verdict::Suspended,
            ),
            (
                "the reconnection renews",
                s(3),
                back_at(s(1) + ms(500)),
                false,
                false,
                Verdict::Alive,
            ),
            (
                "lapsed after the reconnection",
                s(4),
                back_at(s(1)),
                false,
                false,
                Verdict::LeaseLapsed,
            ),
            (
                "ended by ZooKeeper",
                s(1),
                connected,
                true,
                true,
                Verdict::Ended,
            ),
        ];
        for (case, now, link, busy, terminated, expected) in cases {
            assert_eq!(
                judge(t0 + now, timeout, t0, link, busy, terminated),
                expected,
                "{case}"
            );
        }
    }

    /// The advisory pre-read in `compare_and_set` refuses a deposed
    /// controller first, so this calls the write itself with a fence that
    /// was true when read and is stale now: the `multi` must refuse it.
    #[test]
    fn a_controller_deposed_after_its_check_writes_nothing() {
        let server = ZkServer::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
        let c = on(&server, "/fenced-multi", |_| {});
        let (first, second) = (NodeId(1), NodeId(2));
        c.register_node(first, Duration::from_secs(20)).unwrap();
        c.register_node(second, Duration::from_secs(20)).unwrap();
        let created = c.create_log(LogId(1), vec![first, second]).unwrap();
        let first_epoch = c
            .try_become_controller(first)
            .unwrap()
            .expect("the seat is free");
        let write_as = |controller: NodeId, epoch: ControllerEpoch| {
            let session = c.session_id(controller).expect("a live session");
            let current = created.clone();
            let next = created.with_update(LogUpdate::in_sync_replicas(&created, vec![first], 1));
            c.run(
                "write as a controller".to_owned(),
                move |shared, deadline, _| async move {
                    shared
                        .write_log(
                            deadline,
                            &current,
                            next,
                            Some(Fence {
                                controller,
                                controller_epoch: epoch,
                                record_version: i32::try_from(epoch.0).unwrap(),
                                session,
                            }),
                        )
                        .await
                },
            )
        };
        let refused = |outcome: Result<CasOutcome>, holder: &str| match outcome {
            Err(error @ Error::Coordinator { .. }) => {
                let reason = error.to_string();
                assert!(
                    reason.contains("refused") && reason.contains(holder),
                    "the refusal must say who holds the seat ({holder}): {reason}"
                );
            }
            other => panic!("a deposed controller's write was not refused: {other:?}"),
        };

        // Deposed by resigning: the record is unchanged, the seat is gone.
        c.resign_controller(first).unwrap();
        refused(write_as(first, first_epoch), "the seat is empty");
        assert_eq!(c.log_state(LogId(1)).unwrap(), Some(created.clone()));

        // Deposed by a newer controller.
        let second_epoch = c
            .try_become_controller(second)
            .unwrap()
            .expect("the seat is free");
        assert!(second_epoch > first_epoch);
        refused(write_as(first, first_epoch), &second.to_string());
        assert_eq!(c.log_state(LogId(1)).unwrap(), Some(created.clone()));

        // The same write by the sitting controller is applied: the
        // refusals above were the fence's doing.
        match write_as(second, second_epoch) {
            Ok(CasOutcome::Applied(state)) => {
                assert_eq!(state.version, created.version + 1);
                assert_eq!(state.in_sync_replicas, vec![first]);
            }
            other => panic!("the sitting controller's write failed: {other:?}"),
        }
    }

    /// Review of the ZooKeeper coordinator, finding 8: a call behind
    /// another that holds the producer-id block or the registration lock
    /// (waiting for ZooKeeper) gives up at its own call timeout instead of
    /// queueing past it; the lock held here stands in for such a call.
    #[test]
    fn a_call_behind_a_held_lock_gives_up_at_its_call_timeout() {
        let server = ZkServer::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
        let c = on(&server, "/held-locks", |config| {
            config.call_timeout = Duration::from_millis(500);
        });
        let first = c.allocate_producer_id().unwrap();

        let held = c.handle.shared.producer_ids.lock();
        let started = Instant::now();
        let error = c.allocate_producer_id().unwrap_err();
        let waited = started.elapsed();
        drop(held);
        assert!(error.to_string().contains("call timeout"), "{error}");
        assert!(
            waited >= Duration::from_millis(500) && waited < Duration::from_secs(3),
            "waited {waited:?}"
        );
        assert!(c.allocate_producer_id().unwrap() > first);

        let held = c.handle.shared.registering.lock();
        let started = Instant::now();
        let error = c
            .register_node(NodeId(1), Duration::from_secs(20))
            .unwrap_err();
        let waited = started.elapsed();
        drop(held);
        assert!(error.to_string().contains("call timeout"), "{error}");
        assert!(!error.is_outcome_unknown(), "{error}");
        assert!(waited < Duration::from_secs(3), "waited {waited:?}");
        c.register_node(NodeId(1), Duration::from_secs(20)).unwrap();
    }

    /// Review finding 5: a controller went on writing after this
    /// coordinator had ended its node's session (here, its lease lapsed):
    /// the session's seat stays in ZooKeeper until the close reaches it (or
    /// the session expires), so ZooKeeper's fence let the write through,
    /// and with no session here the pre-read checked no owner. Here the
    /// close is kept from ZooKeeper by keeping a handle of the session's
    /// client open. Now a controller writes only through the live session
    /// here that holds the seat, checked again when the write is sent: the
    /// write is refused, and so is the same write sent with a fence checked
    /// before the session ended, and after the node registered again.
    #[test]
    fn a_controller_whose_session_ended_here_writes_nothing() {
        let server = ZkServer::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
        let c = on(&server, "/ended-here", |_| {});
        let (controller, other) = (NodeId(1), NodeId(2));
        c.register_node(controller, Duration::from_secs(2)).unwrap();
        c.register_node(other, Duration::from_secs(20)).unwrap();
        let log = LogId(1);
        let created = c.create_log(log, vec![controller, other]).unwrap();
        let epoch = c
            .try_become_controller(controller)
            .unwrap()
            .expect("the seat is free");
        let won_with = c.session_id(controller).expect("a session");
        // As a close ZooKeeper has not heard yet: the session lives on there.
        let unheard = c.handle.shared.sessions.lock()[&controller].client();

        // No heartbeat: the lease lapses and the coordinator ends the
        // session here.
        let deadline = Instant::now() + Duration::from_secs(20);
        while c.session_id(controller).is_some() {
            assert!(Instant::now() < deadline, "the lease never lapsed");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(c.heartbeat(controller).is_err());
        assert_eq!(
            c.controller().unwrap(),
            Some((controller, epoch)),
            "ZooKeeper still seats the ended session"
        );

        let update = || LogUpdate::in_sync_replicas(&created, vec![controller], 1);
        let refused = |what: &str, outcome: Result<CasOutcome>| match outcome {
            Err(Error::Coordinator { reason }) => assert!(
                reason.contains(&format!("controller epoch {epoch}")),
                "{what}: the refusal must name the controller epoch: {reason}"
            ),
            other => panic!("{what}: a controller write from an ended session: {other:?}"),
        };
        let write_with_fence_checked_before = || {
            let current = created.clone();
            let next = created.with_update(update());
            c.run(
                "write as a controller".to_owned(),
                move |shared, deadline, _| async move {
                    let fence = Fence {
                        controller,
                        controller_epoch: epoch,
                        record_version: i32::try_from(epoch.0).unwrap(),
                        session: won_with,
                    };
                    shared
                        .write_log(deadline, &current, next, Some(fence))
                        .await
                },
            )
        };
        refused(
            "ended here",
            c.compare_and_set_as_controller(
                controller,
                epoch,
                log,
                created.leader_epoch,
                created.version,
                update(),
            ),
        );
        refused("ended after the check", write_with_fence_checked_before());

        // Registered again: a new session, while ZooKeeper still seats the
        // old one (whose node znode went as when settling an unheard close
        // deletes it, which leaves the seat).
        ZkShell::connect(&server.connect_string(), "/ended-here")
            .unwrap()
            .delete_all("/nodes/1")
            .unwrap();
        c.register_node(controller, Duration::from_secs(20))
            .unwrap();
        assert_ne!(c.session_id(controller), Some(won_with));
        refused(
            "registered again",
            c.compare_and_set_as_controller(
                controller,
                epoch,
                log,
                created.leader_epoch,
                created.version,
                update(),
            ),
        );
        refused(
            "replaced after the check",
            write_with_fence_checked_before(),
        );
        assert_eq!(c.log_state(log).unwrap(), Some(created.clone()));
        drop(unheard);
    }

    /// Issue 24 review: moving an earlier version's controller record took
    /// a transaction that failed because the store changed meanwhile for
    /// success ("the caller reads again", and nothing did), leaving the old
    /// record in place and, with `/controller_epoch` missing, no controller
    /// ever. Here an earlier-version node elects (epoch 8) between the
    /// move's reads and its commit: the move must read again and move the
    /// new epoch.
    #[test]
    fn a_layout_move_that_loses_a_race_reads_again_and_moves() {
        let server = ZkServer::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
        let chroot = "/move-race";
        let c = on(&server, chroot, |_| {});
        let raw = Arc::new(ZkShell::connect(&server.connect_string(), chroot).unwrap());
        // The earlier layout: epoch 7 (base 5, version 2) in a persistent
        // /controller, its seat as a child, no /controller_epoch.
        raw.delete_all(CONTROLLER_EPOCH).unwrap();
        let record = |epoch: u64, controller: &str| {
            format!(r#"{{"format":1,"epoch":{epoch},"controller":{controller},"epoch_base":5}}"#)
        };
        raw.create(CONTROLLER, record(5, "null").as_bytes())
            .unwrap();
        raw.set(CONTROLLER, record(6, "1").as_bytes()).unwrap();
        raw.set(CONTROLLER, record(7, "2").as_bytes()).unwrap();
        raw.create(OLD_CONTROLLER_SEAT, b"").unwrap();

        let shell = Arc::clone(&raw);
        let elected_meanwhile = record(8, "1");
        let moved = c.run(
            "move the earlier layout".to_owned(),
            move |shared, deadline, what| async move {
                let client = shared.main_client(deadline, &what).await?;
                let mut raced = false;
                let mut hook = move || {
                    if !std::mem::replace(&mut raced, true) {
                        shell
                            .set(CONTROLLER, elected_meanwhile.as_bytes())
                            .unwrap_or_else(|e| panic!("the earlier-version election: {e}"));
                    }
                };
                retire_old_controller_record(&client, &mut hook).await
            },
        );
        moved.unwrap_or_else(|e| panic!("the move failed: {e}"));
        let (data, version) = raw
            .get(CONTROLLER_EPOCH)
            .unwrap_or_else(|e| panic!("the race left the epoch unmoved: {e}"));
        let moved = document::decode_controller(CONTROLLER_EPOCH, &data, version).unwrap();
        assert_eq!(moved.epoch, ControllerEpoch(8), "the epoch won meanwhile");
        assert!(!raw.exists(CONTROLLER).unwrap(), "the old record stayed");
        c.register_node(NodeId(1), Duration::from_secs(20)).unwrap();
        let epoch = c.try_become_controller(NodeId(1)).unwrap();
        assert_eq!(epoch, Some(ControllerEpoch(9)));
    }
}
