//! `Node`: one process's share of the cluster. It hosts the replicas
//! assigned to it, answers other nodes' requests (fetch, epoch queries),
//! runs one fetcher thread per leader it follows, and one control thread
//! that follows the coordinator: role changes, ISR changes, heartbeats.
//! Two more threads serve pipelined appends: a deadline timer
//! (`isrlog-deadlines-<node>`) that fails them with `Timeout` on time
//! whatever the coordinator is doing, and the completion thread
//! (`isrlog-completions-<node>`) that runs their callbacks and wakers, so
//! that the application's code never runs on a thread replication,
//! heartbeats or timeouts depend on.
//!
//! The node does no replication logic of its own; it routes events to
//! [`Replica`] and the state machines behind it.
//!
//! Each thread is a thin driver of a step that never waits (issue 28):
//! the control thread of [`ControlCore`], the deadline timer of
//! [`NodeShared::expire_deadlines`], the completion thread of
//! [`CompletionRunner::run_pending`], a fetch answer's long poll of
//! [`NodeShared::serve_fetch`]. A simulator drives the same steps in one
//! thread (`SteppedNode`, tests only).
//!
//! The node's decisions move, step by step, into [`NodeCore`] (`core.rs`),
//! which takes inputs and returns actions and has no thread, clock or I/O
//! of its own; [`NodeShared::drive`] carries its actions out. So far it
//! holds the session with the coordinator (heartbeats, registering again,
//! the incarnations), a leader's ISR changes, its resignation, the role
//! choice, the reports after an unclean stop, the directory records, a
//! leader's reassignment and stuck-application hand-overs, and a leader's
//! answer to a fetch (see its module doc for the list).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, Receiver, Sender};

mod core;

use self::core::{
    controlled_shutdown_steps, placed_steps, replica_tick, unknown_log, Action, Answer,
    CleanMarker, Continuation, ControlTimers, ControlledShutdownStep, CoordinatorCall, FetchBudget,
    FetchLook, Input, LocalReplica, NodeCore, OpenDue, PlacedStep, ReplicaTick, RoleChange,
    ShutdownPass, ShutdownWait, TimerIntervals, EPOCH_BUMP_ATTEMPTS,
};

use crate::clock::Clock;
use crate::config::NodeConfig;
use crate::coordinator::{
    cancel_reassignment, reassign_log, replace_node, AddingReplica, Controller, ControllerConfig,
    Coordinator, CoordinatorEvent, LogEnd, LogState, ReassignmentProgress,
};
use crate::error::{Error, Result};
use crate::replication::CompletionRunner;
#[cfg(any(test, feature = "testing"))]
use crate::replication::FetchSession;
use crate::replication::{BelowLeaderStart, FetchArrival, Fetcher, Replica, Role, Watch};
use crate::storage::{
    create_dir_durably, take_clean_shutdown_marker, write_clean_shutdown_marker, BackgroundWork,
    DamageAboveRecoveryPoint, DirectoryIdentity, DirectoryLock, Disk, Log, PreviousShutdown,
    RollFlushThread, RollFlusher, StdDisk,
};
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering, RwLock};
use crate::transport::{
    EpochAnswer, EpochEndOffsetsResponse, ErrorCode, FetchRequest, FetchedLog, RateLimitedWarnings,
    Request, RequestHandler, Response, SnapshotResponse, Transport, Warning,
};
use crate::types::{DirectoryId, Incarnation, LeaderEpoch, LogId, NodeId, Offset};

/// How often a node retries the unclean-shutdown reports it could not
/// record yet ([`Node::pending_unclean_reports`]), besides on every change
/// of those logs' documents: a retry that failed on a transient error
/// would otherwise wait for a change that may never come.
pub const UNCLEAN_REPORT_RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// The longest pause between two attempts to open a replica that keeps
/// failing to open ([`Node::logs_not_opened`]). The first retry comes
/// [`UNCLEAN_REPORT_RETRY_INTERVAL`] after the first failure and each
/// further failure doubles the pause up to this. An attempt recovers the
/// log (after an unclean stop, it scans and checks every batch above the
/// recovery point), so retrying a full or failing disk every second, and
/// again on every change of the log's state, could keep the disk busy for
/// longer than the time between attempts (simulator seed 60135209: 0.9 s
/// of disk time per attempt, several attempts a second, one node 21 s
/// behind its own disk). Kafka does not retry: a failed log directory
/// stays offline until the broker restarts.
pub const OPEN_RETRY_BACKOFF_MAX: Duration = Duration::from_secs(8);
/// Controlled shutdown: how often to look for a caught-up successor.
const HAND_OVER_POLL: Duration = Duration::from_millis(1);
/// Controlled shutdown: the most threads handing logs over (or leaving
/// in-sync replica sets) at once. Each log's coordinator calls run on one
/// of them, so a slow coordinator costs the shutdown one call's time per
/// step, not one per step and log.
const SHUTDOWN_WORKERS_MAX: usize = 128;
/// Controlled shutdown: how long ending the session may take once the
/// deadline has passed. Ending it at once lets the controller elect new
/// leaders of the logs not handed over now rather than at session expiry,
/// and is usually one quick call; a slow one is not waited for.
const UNREGISTER_AFTER_DEADLINE: Duration = Duration::from_millis(200);
/// How long a stopping node waits for its completion thread to run the
/// callbacks still queued (the `Shutdown` outcomes of its pending appends)
/// before it leaves the thread to finish on its own.
const COMPLETION_DRAIN_MAX: Duration = Duration::from_secs(2);

/// Work for the control thread from other threads.
#[derive(Debug)]
pub(crate) enum Command {
    /// A leader's fetch path produced an ISR proposal for this log.
    IsrProposal(LogId),
    /// A fetch named an incarnation this node could not verify: read the
    /// live nodes' incarnations again (rate-limited by the sender).
    RefreshIncarnations,
}

/// State shared by a node's threads.
pub(crate) struct NodeShared {
    /// The file system the data directory lives on.
    disk: Arc<dyn Disk>,
    pub(crate) config: NodeConfig,
    transport: Arc<dyn Transport>,
    coordinator: Arc<dyn Coordinator>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The hosted replicas. Ordered by log id, so that every pass over
    /// them (the control pass, deadlines, stops) acts on the logs in one
    /// order a seeded simulation replays (issue 28); a node hosts few logs,
    /// and a B-tree of a few entries looks up as fast as a hash map.
    replicas: RwLock<BTreeMap<LogId, Arc<Replica>>>,
    /// Set once for a node opened without threads ([`SteppedNode`]): its
    /// fetchers start without threads too, for the simulator to drive,
    /// and its steps never wait ([`is_threadless`](Self::is_threadless)).
    /// Never set without `testing`.
    threadless: AtomicBool,
    fetchers: Mutex<HashMap<NodeId, Fetcher>>,
    /// Bumped, under `fetchers`' lock, whenever a fetcher joins or leaves
    /// `fetchers`: a simulator that drives the fetchers' sessions takes
    /// the list again only then.
    fetchers_version: AtomicU64,
    /// Fetchers told to stop but maybe still inside a transport call (up to
    /// its deadline): joined once finished, never on the control thread
    /// while they run, so heartbeats and role changes are not held up.
    retired_fetchers: Mutex<Vec<Fetcher>>,
    /// Bumped after every leader append: parked long-poll fetches wait on it.
    pub(crate) data_arrived: Arc<Watch>,
    /// Runs the flush each roll needs, off the appending threads (issue 27).
    roll_flusher: Arc<RollFlushThread>,
    commands: Sender<Command>,
    /// How this node's previous run ended, as its data directory told at
    /// start.
    previous_shutdown: PreviousShutdown,
    /// The id of this node's data directory (SPEC 2.8).
    directory_id: DirectoryId,
    /// Logs whose replica here the coordinator knows is on this directory:
    /// a replica serves (leads or fetches) only once it is in this set,
    /// so that the coordinator can tell when its data is lost.
    placed: Mutex<HashSet<LogId>>,
    /// One lock per log, held while its replica is opened and put in
    /// `replicas` ([`host`](Self::host)), and while it is taken out and
    /// its directory deleted ([`remove_replica`](Self::remove_replica)):
    /// reconciles of one log on two threads (the coordinator's events,
    /// the control thread) never open its directory twice, and a removal
    /// never deletes the files of a replica re-hosted meanwhile (review
    /// of 3898024). Never held while the core is driven.
    lifecycles: Mutex<HashMap<LogId, Arc<Mutex<()>>>>,
    /// Replicas whose data this start found lost (SPEC 2.8): opened as
    /// restarted replicas, so a leadership they still hold moves to a new
    /// epoch before they lead.
    lost_replicas: HashSet<LogId>,
    /// Set once this start's unclean-shutdown report is stored (before
    /// that, [`NodeCore::is_unreported`] is not yet filled in). Until
    /// then, and for a log whose report is still pending, no replica is
    /// opened with `DamageAboveRecoveryPoint::CutAfterReportedUncleanStop`: a cut of
    /// records that may have been committed must not reach the disk before
    /// the coordinator holds this replica's report as a lost one. Cut
    /// first, the next start would find a consistent log, report its end
    /// after the cut, and stay the last ISR member with records missing,
    /// had this start died or failed before its report (review of
    /// 0379721, finding 1).
    unclean_stop_reported: AtomicBool,
    /// Set once the node stops (shutdown, halt, crash) and never cleared:
    /// its threads wind down, and appends through its handles fail with
    /// `Error::Shutdown` from then on, as does an `acks=all` append still
    /// waiting (nothing can replicate a stopped node's log any more).
    /// Shared with the node's replicas (`Replica::set_node_stop`), which
    /// read it on every pipelined append; raised too when this is dropped.
    stop: Arc<AtomicBool>,
    /// Set when a controlled shutdown begins: the control thread then makes
    /// no coordinator call of its own (heartbeats, ISR proposals, the
    /// incarnation view, resyncs, report retries), so that none is still
    /// running when the shutdown's deadline passes and the thread is
    /// joined. It still follows the coordinator's notifications (a log
    /// handed over makes this node a follower). Its session ends with the
    /// shutdown anyway.
    /// Shared with the core, which sets it under its hand-overs' lock
    /// (`NodeCore::wind_down`).
    winding_down: Arc<AtomicBool>,
    /// Where the next fetch answer starts among the logs it names, so that
    /// when the response budget runs out it is not always the same logs that
    /// go without data (Kafka's fetcher moves each fetched partition to the
    /// end of its list for the same reason).
    fetch_rotation: AtomicU64,
    /// Requests refused as invalid are logged at most once per interval.
    warnings: RateLimitedWarnings,
    /// Runs pipelined appends' callbacks and wakers on the node's
    /// completion thread.
    pub(crate) completions: Arc<CompletionRunner>,
    /// The node's decisions without threads, clock or I/O (issue 28); so
    /// far its session with the coordinator (its own incarnation and its
    /// view of the live nodes', SPEC 3.2), the leaders' ISR changes
    /// (SPEC 3.4) and the rest its module doc lists, among them the
    /// leaders' hand-overs (SPEC 3.9, 3.10) and the map of them, under
    /// whose lock a controlled shutdown begins (`NodeCore::wind_down`).
    /// [`drive`](Self::drive) carries out what it asks for.
    core: NodeCore,
}

/// Interval of the node's rate-limited warnings about invalid requests.
const WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// Why a request naming logs is refused as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LogListRefusal {
    /// It names more logs than the node hosts.
    TooMany { named: usize, hosted: usize },
    /// It names one log twice.
    Duplicate(LogId),
}

impl std::fmt::Display for LogListRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogListRefusal::TooMany { named, hosted } => {
                write!(f, "names {named} logs, but this node hosts {hosted}")
            }
            LogListRefusal::Duplicate(log) => write!(f, "names {log} more than once"),
        }
    }
}

/// A request may name each log at most once, and no more logs than the node
/// hosts: a fetch naming one log a hundred thousand times in a 2.9 MB frame
/// would otherwise have the node read and answer it a hundred thousand
/// times. (Kafka keys a fetch's partitions by name, so a duplicate cannot
/// ask twice.) The count is checked first, so the duplicate check costs at
/// most the number of hosted logs.
fn check_log_list(
    logs: impl ExactSizeIterator<Item = LogId>,
    hosted: usize,
) -> std::result::Result<(), LogListRefusal> {
    let named = logs.len();
    if named > hosted {
        return Err(LogListRefusal::TooMany { named, hosted });
    }
    let mut seen = std::collections::HashSet::with_capacity(named);
    for log in logs {
        if !seen.insert(log) {
            return Err(LogListRefusal::Duplicate(log));
        }
    }
    Ok(())
}

impl std::fmt::Debug for NodeShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeShared")
            .field("node", &self.config.node_id)
            .field("logs", &self.replicas.read().len())
            .field("stopped", &self.stop.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

/// One node of an isrlog cluster. Dropping it (or [`Node::shutdown`]) stops
/// its threads and closes its logs cleanly.
#[derive(Debug)]
pub struct Node {
    shared: Arc<NodeShared>,
    control: Option<JoinHandle<()>>,
    /// The deadline timer of pipelined appends.
    deadlines: Option<JoinHandle<()>>,
    /// The thread running pipelined appends' callbacks and wakers.
    completions: Option<JoinHandle<()>>,
    controller: Option<Controller>,
    /// The data directory's exclusive lock (SPEC 2.8), held by the node,
    /// not by [`NodeShared`]: a halted node's handler may outlive it in the
    /// network, and must not keep the directory from its next start.
    /// Released last, when the node is dropped.
    #[allow(dead_code)]
    directory_lock: Option<DirectoryLock>,
    /// Opened without threads (`SteppedNode`) and not stopped yet: a
    /// drop then stops it as it would a started node.
    stepped: bool,
}

/// A node registered but not yet running: what
/// [`Node::open_registered`] hands to the thread start or to a
/// `SteppedNode`.
struct Opened {
    node: Node,
    events: Receiver<CoordinatorEvent>,
    commands: Receiver<Command>,
    controller_config: Option<ControllerConfig>,
}

/// One log's replica on this node and the node's runtime hosting it: all
/// that the public per-log handle is built from ([`Node::log_parts`]). The
/// runtime hands these out and never names the handle, so that the public
/// face sits above the runtime and not beside it.
#[derive(Debug)]
pub(crate) struct LogParts {
    pub(crate) replica: Arc<Replica>,
    pub(crate) node: Arc<NodeShared>,
}

/// The [`RequestHandler`] of a node: register it with the network.
#[derive(Debug, Clone)]
pub struct NodeHandler {
    shared: Arc<NodeShared>,
}

impl Node {
    /// Starts a node: registers it with the coordinator, opens (and
    /// recovers) the logs assigned to it, and starts its threads. Register
    /// [`Node::handler`] with the network so other nodes can reach it.
    ///
    /// In this order (SPEC 2.8, 3.5):
    /// 1. Every setting, the controller's included, is checked before
    ///    anything starts or is written.
    /// 2. The data directory's identity file, if there is one, must name
    ///    the coordinator's cluster id and this node's id: otherwise the
    ///    start fails with [`Error::DirectoryIdentityMismatch`] naming both
    ///    ids, and nothing is written.
    /// 3. The node takes the directory's exclusive lock for its life; a
    ///    second node on the same directory fails here with
    ///    [`Error::DirectoryLocked`].
    /// 4. A node whose data directory holds data but no clean-shutdown
    ///    marker (its last run crashed), or which lost the data of a
    ///    replica the coordinator placed on it (an empty, missing or
    ///    replaced directory, a deleted log: [`PreviousShutdown::LostData`])
    ///    tells the coordinator with
    ///    [`Coordinator::report_unclean_shutdown`] (a lost replica with an
    ///    empty log end) before it registers, so it is never live while
    ///    still counted as holding every committed record of a log; if that
    ///    call fails, so does the start (and the next start reports again).
    /// 5. It writes the identity file if there was none and records its
    ///    directory id for its replicas in the coordinator, then registers
    ///    and starts its threads.
    ///
    /// A start that fails after it registered or started a thread stops
    /// and joins everything it started and ends its session; the next
    /// start then reports an unclean shutdown. A start after a clean stop
    /// that fails before it registers (a coordinator out of reach, say)
    /// puts the clean-shutdown marker back, so the next start is still
    /// clean.
    pub fn start(
        config: NodeConfig,
        transport: Arc<dyn Transport>,
        coordinator: Arc<dyn Coordinator>,
        clock: Arc<dyn Clock>,
    ) -> Result<Node> {
        Node::start_on_disk(StdDisk::shared(), config, transport, coordinator, clock)
    }

    /// [`start`](Self::start) with the data directory on `disk` (the real
    /// file system, or a simulated one in tests).
    pub(crate) fn start_on_disk(
        disk: Arc<dyn Disk>,
        config: NodeConfig,
        transport: Arc<dyn Transport>,
        coordinator: Arc<dyn Coordinator>,
        clock: Arc<dyn Clock>,
    ) -> Result<Node> {
        let Opened {
            mut node,
            events,
            commands,
            controller_config,
        } = Node::open_registered(disk, config, transport, coordinator, clock)?;
        // From here on a failure must undo what started: `abort_start`.
        let started = node
            .reconcile_every_log()
            .and_then(|()| node.start_threads(events, commands, controller_config));
        if let Err(error) = started {
            node.abort_start(&error);
            return Err(error);
        }
        tracing::info!(node = %node.id(), "node started");
        Ok(node)
    }

    /// The first half of [`start`](Self::start): every step up to and
    /// including the registration (see there), with no log reconciled and
    /// no thread started. On error nothing needs undoing: the node is not
    /// registered (unless a registration's reply was lost, when its
    /// session expires), and a clean-shutdown marker taken is put back
    /// where that is safe (`MarkerTaken`).
    fn open_registered(
        disk: Arc<dyn Disk>,
        config: NodeConfig,
        transport: Arc<dyn Transport>,
        coordinator: Arc<dyn Coordinator>,
        clock: Arc<dyn Clock>,
    ) -> Result<Opened> {
        config.validate()?;
        // The controller decides the ELR with the same minimum as this
        // node's leaders. Checked here, before anything starts: a start
        // that failed on it used to leave the control thread running.
        let controller_config = controller_config(&config);
        if let Some(controller_config) = &controller_config {
            controller_config.validate()?;
        }
        let me = config.node_id;
        let data_dir = config.data_dir.clone();
        let cluster_id = coordinator.cluster_id()?;
        // Checked before the directory is created or locked, so that a
        // wrong directory is refused with nothing written to it; checked
        // again under the lock, in case another process wrote it meanwhile.
        if let Some(identity) = DirectoryIdentity::load(&*disk, &data_dir)? {
            identity.check(&data_dir, cluster_id, me)?;
        }
        create_dir_durably(&*disk, &data_dir)?;
        let directory_lock = DirectoryLock::acquire(&*disk, &data_dir)?;
        let identity = DirectoryIdentity::load(&*disk, &data_dir)?;
        if let Some(identity) = &identity {
            identity.check(&data_dir, cluster_id, me)?;
        }
        let mut previous_shutdown = take_clean_shutdown_marker(&*disk, &data_dir)?;
        // Until this start registers, nothing it does changes what the
        // marker vouched for (no log is opened before `start` reconciles),
        // so a start that fails here, a coordinator out of reach say, puts
        // the marker back: the next start is still clean. Kafka's broker
        // waits for its controller instead of failing its start; a start
        // here fails and is retried, and without this each failed attempt
        // would cost the node its place in the ISR and ELR.
        let mut marker_taken = MarkerTaken {
            disk: &*disk,
            data_dir: &data_dir,
            restore_on_drop: previous_shutdown == PreviousShutdown::Clean,
        };
        let directory_id = identity
            .map(|identity| identity.directory_id)
            .unwrap_or_else(DirectoryId::random_for_directory);
        let mut states = coordinator.logs()?;
        // Unassigns that failed here, retried by the core once it runs.
        let mut failed_unassigns: Vec<LogId> = Vec::new();
        // SPEC 3.10: a replica that a reassignment removed while this node
        // was down (or before it got to delete it) is a stray: the
        // coordinator knows the log and no longer lists this node. Its copy
        // is deleted before anything opens or reports it, as Kafka deletes
        // stray replicas at startup (KAFKA-14616). A directory of a log the
        // coordinator does not know is left alone.
        //
        // `logs()` may be served stale (a ZooKeeper server behind the
        // leader): before a copy goes, its log is read again with
        // `log_state`, which is up to date, and a replica that read lists
        // is kept and hosted.
        for state in states
            .iter_mut()
            .filter(|state| !state.replicas.contains(&me))
        {
            let dir = log_dir(&data_dir, state.log);
            if !disk.exists(&dir) {
                continue;
            }
            match coordinator.log_state(state.log)? {
                Some(fresh) if fresh.replicas.contains(&me) => {
                    tracing::info!(log = %state.log, node = %me,
                        "the log list was stale: this replica is listed again; keeping its copy");
                    *state = fresh;
                }
                Some(_) | None => {
                    // A deletion cut short (EIO) leaves a directory no
                    // clean stop left: the marker must not vouch for it.
                    marker_taken.restore_on_drop = false;
                    disk.remove_dir_all(&dir)
                        .map_err(|e| Error::io(&dir, "delete a removed replica", e))?;
                    tracing::info!(log = %state.log, node = %me, dir = %dir.display(),
                        "deleted the copy of a replica that a reassignment removed");
                    if !unassign_directory(&*coordinator, me, state.log) {
                        failed_unassigns.push(state.log);
                    }
                }
            }
        }
        let mut hosted: Vec<LogId> = states
            .iter()
            .filter(|state| state.replicas.contains(&me))
            .map(|state| state.log)
            .collect();
        let recorded: HashMap<LogId, DirectoryId> =
            coordinator.replica_directories(me)?.into_iter().collect();
        // A replica deleted before this start (by a reassignment, or as a
        // stray above) whose unassign failed is still on record as placed
        // on this directory: written now, while no list names this node
        // (read up to date, as above), so that a move adding it back
        // before it is created does not make a later start count it as
        // lost (helper-151's review, finding 3). One that the up-to-date
        // read lists is hosted (the list was stale), and counted as lost
        // below, having no copy here (helper-157's review). A log the
        // coordinator does not know is left alone.
        let mut left_placed: Vec<LogId> = recorded
            .iter()
            .filter(|(log, placed)| {
                **placed == directory_id
                    && !hosted.contains(log)
                    && !failed_unassigns.contains(log)
                    && states.iter().any(|state| state.log == **log)
                    && !disk.exists(&log_dir(&data_dir, **log))
            })
            .map(|(log, _)| *log)
            .collect();
        left_placed.sort();
        for log in left_placed {
            match coordinator.log_state(log)? {
                Some(fresh) if fresh.replicas.contains(&me) => {
                    tracing::info!(%log, node = %me,
                        "the log list was stale: this replica is listed again");
                    hosted.push(log);
                }
                Some(_) if !unassign_directory(&*coordinator, me, log) => {
                    failed_unassigns.push(log);
                }
                Some(_) | None => {}
            }
        }
        let lost = lost_replicas(&hosted, &recorded, directory_id, |log| {
            disk.exists(&log_dir(&data_dir, log))
        });
        if !lost.is_empty() {
            previous_shutdown = PreviousShutdown::LostData;
            marker_taken.restore_on_drop = false;
        }
        let events = coordinator.subscribe(me)?;
        let (commands, command_rx) = bounded(1024);
        let stop = Arc::new(AtomicBool::new(false));
        let winding_down = Arc::new(AtomicBool::new(false));
        let core = NodeCore::new(
            me,
            config.session_timeout,
            config.replication.min_insync_replicas,
            config.replication.fetch_wait_max,
            Arc::clone(&stop),
            Arc::clone(&winding_down),
        );
        for log in failed_unassigns {
            core.note_failed_unassign(log);
        }
        let shared = Arc::new(NodeShared {
            disk: Arc::clone(&disk),
            config,
            transport,
            coordinator,
            clock,
            replicas: RwLock::new(BTreeMap::new()),
            threadless: AtomicBool::new(false),
            fetchers: Mutex::new(HashMap::new()),
            fetchers_version: AtomicU64::new(0),
            retired_fetchers: Mutex::new(Vec::new()),
            data_arrived: Arc::new(Watch::new(0)),
            roll_flusher: Arc::new(RollFlushThread::new(format!("isrlog-roll-flush-{}", me.0))),
            commands,
            previous_shutdown,
            directory_id,
            placed: Mutex::new(HashSet::new()),
            lifecycles: Mutex::new(HashMap::new()),
            lost_replicas: lost.clone(),
            unclean_stop_reported: AtomicBool::new(false),
            stop,
            winding_down,
            fetch_rotation: AtomicU64::new(0),
            warnings: RateLimitedWarnings::new(WARNING_INTERVAL),
            completions: CompletionRunner::new(),
            core,
        });
        if previous_shutdown.is_reported_unclean() {
            let mut log_ends = shared.recovered_log_ends()?;
            // A lost replica's log says nothing: whatever a foreign
            // directory holds of it is not what this replica acknowledged.
            for (log, end) in &mut log_ends {
                if lost.contains(log) {
                    *end = Some(LogEnd::default());
                    shared.core.forget_reported_unopened(*log);
                }
            }
            let changed = shared.coordinator.report_unclean_shutdown(me, &log_ends)?;
            let checked = recorded.keys().copied().chain(hosted.iter().copied());
            let unreported = shared.unreported_logs(checked, &log_ends, &recorded)?;
            if !unreported.is_empty() {
                tracing::warn!(node = %me, logs = ?unreported.keys().collect::<Vec<_>>(),
                    "cannot record this node's unclean shutdown in these logs' coordinator documents (written by a newer version or unreadable): it takes no part in them until it can");
            }
            shared.core.set_unreported(unreported);
            // From here on a replica whose report is stored may be opened
            // with the cut (`open_replica`).
            shared.unclean_stop_reported.store(true, Ordering::SeqCst);
            if previous_shutdown == PreviousShutdown::LostData {
                let mut lost: Vec<LogId> = lost.iter().copied().collect();
                lost.sort();
                tracing::warn!(node = %me, directory = %data_dir.display(), %directory_id, lost_logs = ?lost,
                    logs_changed = changed.len(),
                    "the data directory does not hold replicas the coordinator placed on it (empty, replaced or deleted): they left the ISR and ELR and fetch their logs again");
            } else {
                tracing::warn!(node = %me, logs_changed = changed.len(),
                    "no clean-shutdown marker: unflushed records may be lost, so this node left the ISR and ELR of its logs");
            }
        }
        if identity.is_none() {
            // A failed write (an fsync error) leaves the directory in a
            // state no clean stop vouched for.
            marker_taken.restore_on_drop = false;
            DirectoryIdentity {
                cluster_id,
                node_id: me,
                directory_id,
            }
            .store(&*disk, &data_dir)?;
            tracing::info!(node = %me, directory = %data_dir.display(), %cluster_id, %directory_id, "wrote the data directory's identity");
        }
        let unplaced: Vec<LogId> = hosted
            .iter()
            .copied()
            .filter(|log| recorded.get(log) != Some(&directory_id))
            .collect();
        if !unplaced.is_empty() {
            shared
                .coordinator
                .record_replica_directories(me, directory_id, &unplaced)?;
        }
        shared.placed.lock().extend(hosted);
        let incarnation = match shared
            .coordinator
            .register_node(me, shared.config.session_timeout)
        {
            Ok(incarnation) => incarnation,
            Err(error) => {
                // Registered perhaps, its reply lost: a session of this
                // node may live on until it expires, so this start is not
                // one that changed nothing (under KIP-966 a registration
                // that took effect bumps the broker epoch, and the next
                // start counts as unclean).
                if matches!(error, Error::CoordinatorOutcomeUnknown { .. }) {
                    marker_taken.restore_on_drop = false;
                }
                return Err(error);
            }
        };
        shared.core.registered(incarnation);
        tracing::info!(node = %me, %incarnation, "registered with the coordinator");
        marker_taken.restore_on_drop = false;
        drop(marker_taken);
        Ok(Opened {
            node: Node {
                shared,
                control: None,
                deadlines: None,
                completions: None,
                controller: None,
                directory_lock: Some(directory_lock),
                stepped: false,
            },
            events,
            commands: command_rx,
            controller_config,
        })
    }

    /// Reads the live nodes' incarnations, then reconciles every log the
    /// coordinator knows: this node opens its replicas and takes its roles
    /// (a follower starts fetching).
    fn reconcile_every_log(&self) -> Result<()> {
        // Before this node leads anything: fetches count only from the
        // incarnations it has read (SPEC 3.2).
        self.shared.drive_core(NodeCore::refresh_incarnations);
        for state in self.shared.coordinator.logs()? {
            self.shared.reconcile(&state);
        }
        Ok(())
    }

    /// The second half of [`Node::start`]: starts the control, completion
    /// and deadline threads and the controller.
    fn start_threads(
        &mut self,
        events: Receiver<CoordinatorEvent>,
        command_rx: Receiver<Command>,
        controller_config: Option<ControllerConfig>,
    ) -> Result<()> {
        let thread_shared = Arc::clone(&self.shared);
        crate::simulation::forbid_in_simulation("starting a node's threads");
        let control = std::thread::Builder::new()
            .name(format!("isrlog-control-{}", self.shared.config.node_id.0))
            .spawn(move || control_loop(&thread_shared, &events, &command_rx))
            .map_err(|e| Error::io(PathBuf::from("<thread>"), "spawn control thread", e))?;
        self.control = Some(control);
        let runner = Arc::clone(&self.shared.completions);
        let completions = std::thread::Builder::new()
            .name(format!(
                "isrlog-completions-{}",
                self.shared.config.node_id.0
            ))
            .spawn(move || runner.run());
        match completions {
            Ok(thread) => self.completions = Some(thread),
            Err(e) => {
                // Nothing runs the queue: whatever is queued runs here.
                self.shared.completions.run_inline();
                return Err(Error::io(
                    PathBuf::from("<thread>"),
                    "spawn completion thread",
                    e,
                ));
            }
        }
        let thread_shared = Arc::clone(&self.shared);
        let deadlines = std::thread::Builder::new()
            .name(format!("isrlog-deadlines-{}", self.shared.config.node_id.0))
            .spawn(move || deadline_loop(&thread_shared))
            .map_err(|e| Error::io(PathBuf::from("<thread>"), "spawn deadline thread", e))?;
        self.deadlines = Some(deadlines);
        if let Some(config) = controller_config {
            self.controller = Some(Controller::start(
                self.shared.config.node_id,
                Arc::clone(&self.shared.coordinator),
                config,
            )?);
        }
        Ok(())
    }

    /// A start failed after the node registered: stops and joins every
    /// thread it started (fetchers, control thread, controller), ends its
    /// session and lets go of its replicas. No clean-shutdown marker is
    /// written, so the next start reports an unclean shutdown, which is
    /// safe whatever this one did.
    fn abort_start(&mut self, error: &Error) {
        tracing::error!(node = %self.shared.config.node_id, %error, "node start failed; stopping what it started");
        self.stop_threads(Stop::Clean);
        // Without a control handle, dropping the node does nothing more.
        self.control = None;
        if let Err(error) = self
            .shared
            .coordinator
            .unregister_node(self.shared.config.node_id)
        {
            tracing::warn!(node = %self.shared.config.node_id, %error, "cannot end the session of a node whose start failed; it expires");
        }
        let replicas = self.shared.take_replicas();
        for replica in replicas {
            replica.take_offline();
        }
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.shared.config.node_id
    }

    /// Creates `log` in the coordinator with `replicas` (the first is its
    /// preferred leader), as any node or an admin tool may: the nodes
    /// hosting it open their replicas when they hear of it. Fails with a
    /// coordinator error if it exists already. No trait import needed.
    pub fn create_log(&self, log: LogId, replicas: Vec<NodeId>) -> Result<LogState> {
        self.shared.coordinator.create_log(log, replicas)
    }

    /// Reassigns `log` to the replicas `target`, in assignment order (SPEC
    /// 3.10, Kafka's KIP-455), as any node or an admin tool may, and
    /// returns the stored state. It returns once the move is recorded; the
    /// added replicas then fetch from the leader, join the ISR by rule 3.4,
    /// and the controller completes the move (replicas = `target`, the
    /// others removed, the leadership handed to a target replica if its
    /// leader is removed) once every target replica is in the ISR. A second
    /// call for the same log replaces the first; a `target` equal to the
    /// current replicas changes nothing.
    ///
    /// Errs, naming the field and value, if `target` is empty, names a
    /// node twice, has fewer replicas than this node's
    /// `min_insync_replicas`, or adds a node without a live session; with
    /// [`Error::UnknownLog`] for a log that does not exist.
    pub fn reassign_log(&self, log: LogId, target: Vec<NodeId>) -> Result<LogState> {
        reassign_log(
            &*self.shared.coordinator,
            log,
            &target,
            self.shared.config.replication.min_insync_replicas,
        )
    }

    /// Cancels `log`'s reassignment, if one runs, and returns the stored
    /// state: back to the original replicas, whose data the move never
    /// touched (the added replicas leave and delete their copies). As
    /// Kafka's KRaft controller reverts a move, they keep the order they had
    /// during it (the move's target first), so the preferred leader may
    /// differ from the one before the move.
    ///
    /// A move that completed before the cancel arrived (or none at all)
    /// is not an error: nothing changes and the stored state is returned,
    /// with the target's replicas if the move won. Unlike Kafka's
    /// `NO_REASSIGNMENT_IN_PROGRESS`, this keeps a retried cancel whose
    /// first answer was lost (SPEC 3.4) from reporting a failure; compare
    /// the returned replicas with the target to tell the two apart. Errs,
    /// changing nothing, when going back would drop every replica that
    /// holds the log's committed records (a leaderless log whose original
    /// replicas are gone), as Kafka refuses a revert that needs an unclean
    /// election.
    pub fn cancel_reassignment(&self, log: LogId) -> Result<LogState> {
        cancel_reassignment(
            &*self.shared.coordinator,
            log,
            self.shared.config.replication.min_insync_replicas,
        )
    }

    /// Replaces a node that is gone for good: every log with `dead` among
    /// its (target) replicas is reassigned to the same replicas with
    /// `replacement` in `dead`'s place ([`Node::reassign_log`]). Returns
    /// the stored states of the logs reassigned. `replacement` must be
    /// live. A log that already has `replacement` among its replicas just
    /// loses `dead` (one replica fewer); one whose reassignment fails does
    /// not stop the others: the call moves them, then errs naming each log
    /// it could not move and why.
    pub fn replace_node(&self, dead: NodeId, replacement: NodeId) -> Result<Vec<LogState>> {
        replace_node(
            &*self.shared.coordinator,
            dead,
            replacement,
            self.shared.config.replication.min_insync_replicas,
        )
    }

    /// The reassignments in progress of the logs this node leads, each
    /// with its added replicas' lag as the leader sees it: what an
    /// application exports as metrics. Logs led elsewhere are reported by
    /// their leaders.
    pub fn reassignments(&self) -> Result<Vec<ReassignmentProgress>> {
        let me = self.id();
        let mut progress = Vec::new();
        for state in self.shared.coordinator.logs()? {
            if !state.is_reassigning() || state.leader != Some(me) {
                continue;
            }
            let replica = self.shared.replica(state.log);
            let adding_replicas = state
                .adding_replicas
                .iter()
                .map(|node| AddingReplica {
                    node: *node,
                    in_sync: state.is_in_sync(*node),
                    lag_records: replica
                        .as_ref()
                        .and_then(|replica| replica.follower_lag(*node))
                        .map(|(records, _)| records)
                        .filter(|records| *records != u64::MAX),
                })
                .collect();
            progress.push(ReassignmentProgress {
                log: state.log,
                target_replicas: state.target_replicas(),
                adding_replicas,
                removing_replicas: state.removing_replicas.clone(),
            });
        }
        Ok(progress)
    }

    /// The coordinator's record of `log` (replicas, leader, epoch, ISR),
    /// `None` if it does not exist.
    pub fn log_state(&self, log: LogId) -> Result<Option<LogState>> {
        self.shared.coordinator.log_state(log)
    }

    /// Waits up to `timeout` until the coordinator names a leader of `log`
    /// and returns it; if this node hosts a replica, also until that
    /// replica knows of that leader's epoch (so an append here is answered
    /// by the leader or with a `NotLeader` naming it).
    pub fn wait_for_leader(&self, log: LogId, timeout: Duration) -> Result<NodeId> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(state) = self.shared.coordinator.log_state(log)? {
                if let Some(leader) = state.leader {
                    let known_here = match self.shared.replica(log) {
                        Some(replica) => replica.role().1 >= state.leader_epoch,
                        None => !state.replicas.contains(&self.id()),
                    };
                    if known_here {
                        return Ok(leader);
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    waited: timeout,
                    waiting_for: "the log to have a leader",
                });
            }
            crate::simulation::forbid_in_simulation("a sleep waiting for a leader");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The incarnation of `peer` whose fetches this node counts, as it last
    /// read them from the coordinator (SPEC 3.2); `None` if it knows no
    /// live registration of `peer`.
    pub fn peer_incarnation(&self, peer: NodeId) -> Option<Incarnation> {
        self.shared.core.peer_incarnations().get(peer)
    }

    /// This node's current incarnation: what its latest registration with
    /// the coordinator handed out, and what its fetches carry (SPEC 3.2).
    pub fn incarnation(&self) -> Incarnation {
        self.shared.core.incarnation()
    }

    /// The logs in which this node's unclean shutdown (or lost data) is
    /// not recorded yet, with the log end it will report (`None`: not known
    /// while the replica cannot be opened), sorted by log: it
    /// takes no part in them (neither leads nor fetches, SPEC 3.5) until the
    /// report is written, retried on every change of the log's document and
    /// every [`UNCLEAN_REPORT_RETRY_INTERVAL`]. Non-empty only while a
    /// document cannot be read or changed by this version (a newer node
    /// wrote it) or the coordinator cannot be reached; worth exporting as a
    /// metric and alerting on.
    pub fn pending_unclean_reports(&self) -> Vec<(LogId, Option<LogEnd>)> {
        self.shared.core.pending_unclean_reports()
    }

    /// How this node's previous run ended, as its data directory told at
    /// start ([`PreviousShutdown::Unclean`]: it was reported to the
    /// coordinator).
    pub fn previous_shutdown(&self) -> PreviousShutdown {
        self.shared.previous_shutdown
    }

    /// The logs whose replica the next start of a node on this data
    /// directory would count as having lost its data, were the node to
    /// stop now ([`lost_replicas`], as the coordinator `coordinator` has
    /// them placed): a replica lost with its disk and not placed here
    /// since, which a clean stop does not bring back.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn replicas_lost_at_next_start(
        &self,
        coordinator: &dyn Coordinator,
    ) -> Result<Vec<LogId>> {
        let shared = &self.shared;
        let me = shared.local();
        let hosted: Vec<LogId> = coordinator
            .logs()?
            .into_iter()
            .filter(|state| state.replicas.contains(&me))
            .map(|state| state.log)
            .collect();
        let recorded: HashMap<LogId, DirectoryId> =
            coordinator.replica_directories(me)?.into_iter().collect();
        let mut lost: Vec<LogId> = lost_replicas(&hosted, &recorded, shared.directory_id, |log| {
            shared.disk.exists(&log_dir(&shared.config.data_dir, log))
        })
        .into_iter()
        .collect();
        lost.sort();
        Ok(lost)
    }

    /// The handler to register with the network.
    pub fn handler(&self) -> Arc<dyn RequestHandler> {
        Arc::new(NodeHandler {
            shared: Arc::clone(&self.shared),
        })
    }

    /// What the public face needs to serve `log` on this node (its
    /// `Node::log` builds the log's handle from it), or
    /// `Error::UnknownLog` if this node does not host it (yet: the
    /// coordinator's notification may still be on its way). The replica
    /// learns here which node hosts it, so that its pipelined appends fail
    /// with `Shutdown` once the node stops.
    #[inline]
    pub(crate) fn log_parts(&self, log: LogId) -> Result<LogParts> {
        let replica = self.shared.replica(log).ok_or(Error::UnknownLog(log))?;
        replica.set_node_stop(&self.shared.stop);
        Ok(LogParts {
            replica,
            node: Arc::clone(&self.shared),
        })
    }

    /// The logs this node is a replica of but could not open, in log
    /// order, each with a text that gives the last error (a damaged log
    /// that refuses to open, a full disk), when the node tries again and
    /// how many attempts failed in a row, for example `"<error>; next
    /// attempt in 3.2s (3 failed attempts)"` (or `"...; next attempt on
    /// the next retry (...)"` once the pause is over). They take no part
    /// in replication until they open. Retried
    /// [`UNCLEAN_REPORT_RETRY_INTERVAL`] after the first failure, then
    /// after a pause that doubles per failure up to
    /// [`OPEN_RETRY_BACKOFF_MAX`], by the node's clock; an application
    /// can export the count as a metric and alert on it. The text is for
    /// people: its wording may change.
    pub fn logs_not_opened(&self) -> Vec<(LogId, String)> {
        self.shared.core.logs_not_opened(self.shared.clock.now())
    }

    /// The logs this node hosts.
    pub fn logs(&self) -> Vec<LogId> {
        let mut logs: Vec<LogId> = self.shared.replicas.read().keys().copied().collect();
        logs.sort();
        logs
    }

    /// Number of fetcher threads running (one per leader node followed).
    pub fn fetcher_thread_count(&self) -> usize {
        self.shared.fetchers.lock().len()
    }

    /// Stops the node cleanly, as Kafka's controlled shutdown does: first
    /// every log it leads moves to another in-sync replica, then its
    /// threads stop, it leaves the in-sync replica sets it is in and the
    /// coordinator's live set, and its logs are flushed and closed. If every
    /// log closed, it writes the clean-shutdown marker last, so the next
    /// start trusts its data (SPEC 3.5).
    ///
    /// The steps that call the coordinator (handing over, leaving the
    /// ISRs, ending the session) spend at most
    /// [`NodeConfig::controlled_shutdown_timeout`] in all: logs hand over
    /// concurrently, and a call still running at the deadline is not
    /// waited for (see that setting for what happens to its log). Stopping
    /// the threads waits at most for the coordinator call the control
    /// thread is in.
    pub fn shutdown(self) -> Result<()> {
        self.shutdown_marked().map(|_marked| ())
    }

    /// [`shutdown`](Self::shutdown), and whether it wrote the
    /// clean-shutdown marker (not while this start's unclean report is
    /// unrecorded somewhere).
    pub(crate) fn shutdown_marked(mut self) -> Result<bool> {
        let timeout = self.shared.config.controlled_shutdown_timeout;
        let deadline = Instant::now() + timeout;
        let hands_over = !timeout.is_zero();
        let me = self.shared.config.node_id;
        let mut leading = Vec::new();
        // The session's end, once started on a worker, and when.
        let mut unregistering: Option<(Finished, Instant)> = None;
        let mut closed = Ok(false);
        // The order is the core's, the same as a stepped node's
        // (`controlled_shutdown_steps`); how each step is done is this
        // driver's.
        for step in controlled_shutdown_steps(hands_over) {
            match step {
                ControlledShutdownStep::WindDown => {
                    // Under the hand-overs' lock: none gives back appends
                    // after this (see `NodeCore::wind_down`).
                    self.shared.core.wind_down();
                    // A candidate not holding the controller seat is not
                    // needed any more: its thread ends meanwhile (a seated
                    // controller goes on electing while the logs hand
                    // over).
                    if let Some(controller) = self.controller.as_mut() {
                        if !controller.is_active() {
                            controller.signal_stop();
                        }
                    }
                }
                ControlledShutdownStep::StopAppends => {
                    leading = self.shared.stop_appends_for_shutdown();
                }
                ControlledShutdownStep::HandOver => NodeShared::hand_over_leadership(
                    &self.shared,
                    std::mem::take(&mut leading),
                    deadline,
                ),
                ControlledShutdownStep::RaiseStop => {
                    self.shared.stop.store(true, Ordering::SeqCst);
                    if let Some(controller) = self.controller.as_mut() {
                        controller.signal_stop();
                    }
                }
                ControlledShutdownStep::EndSession if hands_over => {
                    // The session ends while the threads stop, so that
                    // waiting for the call the control thread is in does
                    // not add to it.
                    let started = NodeShared::spawn_bounded(
                        &self.shared,
                        "end the session",
                        vec![me],
                        |shared, _node| shared.drive_core(|core, out| core.end_session(true, out)),
                    );
                    unregistering = Some((started, Instant::now()));
                }
                ControlledShutdownStep::EndSession => {
                    self.shared
                        .drive_core(|core, out| core.end_session(false, out));
                }
                ControlledShutdownStep::StopThreads => {
                    // Ending the session frees the controller seat: no
                    // resignation, and no waiting past the deadline for a
                    // controller thread in a slow coordinator call.
                    if unregistering.is_some() {
                        if let Some(controller) = self.controller.as_mut() {
                            controller.stop_by(deadline);
                        }
                    }
                    self.stop_threads(Stop::Clean);
                }
                ControlledShutdownStep::LeaveIsrs => {
                    NodeShared::leave_in_sync_replicas(&self.shared, deadline);
                }
                ControlledShutdownStep::CloseLogs => {
                    if let Some((unregistering, started)) = unregistering.take() {
                        // Past the deadline, ending the session still gets
                        // a moment: a session left to expire delays the
                        // election of every log not handed over by a whole
                        // session timeout.
                        let until = deadline.max(started + UNREGISTER_AFTER_DEADLINE);
                        if wait_finished(unregistering, until) < 1 {
                            tracing::warn!(node = %me, "controlled shutdown: ending the session took past the deadline; not waiting (it ends when the call completes, or expires)");
                        }
                    }
                    closed = self.close_logs_and_mark_clean(Some(deadline));
                }
            }
        }
        closed
    }

    /// A stop's last step, once its threads stopped: tries once more to
    /// open the replicas of an unclean start that never opened
    /// ([`NodeShared::open_unopened_before_marker`]), flushes and closes
    /// every log and, if every one closed, writes the clean-shutdown
    /// marker (SPEC 3.5) unless this start's unclean report is not yet
    /// recorded everywhere or a replica of this unclean start never opened
    /// ([`NodeShared::may_mark_clean_shutdown`]).
    /// Whether it wrote the marker.
    fn close_logs_and_mark_clean(&self, deadline: Option<Instant>) -> Result<bool> {
        self.shared.open_unopened_before_marker(deadline);
        let replicas = self.shared.take_replicas();
        if let Some((_, error)) = close_replicas(replicas).into_iter().next() {
            return Err(error);
        }
        if !self.shared.may_mark_clean_shutdown() {
            return Ok(false);
        }
        write_clean_shutdown_marker(&*self.shared.disk, &self.shared.config.data_dir)?;
        Ok(true)
    }

    /// Stops the node's threads without closing anything: what a crash
    /// looks like to the rest of the cluster (the test harness uses it).
    pub fn halt(mut self) {
        self.stop_threads(Stop::Crash);
        self.release_replicas();
    }

    /// After a halt: the node lets go of its replicas (and their open
    /// files), though the network may still hold its handler, which then
    /// only answers `Shutdown`.
    fn release_replicas(&self) {
        self.shared.replicas.write().clear();
    }

    /// Test harness only: the instant of a simulated process crash. From
    /// here on the node's threads only wind down (a dead process opens no
    /// new coordinator session, answers no request); `halt_for_crash` then
    /// stops them.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn mark_crashed(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }

    /// Test harness only: a process crash. Stops the threads as
    /// [`halt`](Self::halt) does, then halts every hosted log's files (no
    /// thread still holding a handle can write them any more) and returns
    /// each segment data file with the length its last successful fsync
    /// covered, for a power-loss simulation.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn halt_for_crash(mut self) -> Vec<(PathBuf, u64)> {
        // A dead process runs none of its queued roll flushes: the logs
        // refuse work before the threads are joined, so the roll flusher's
        // jobs fail at once instead of fsyncing whole segments (or, as in
        // the hang f1b0117 fixed, waiting on a log end) while the crash
        // waits to join it. It also makes the power-loss simulation honest:
        // a sealed segment whose background flush had not run is torn with
        // the next one's batches on disk, which recovery after the
        // reported unclean stop cuts (`DamageAboveRecoveryPoint::CutAfterReportedUncleanStop`).
        // The stop flag goes first: from here on the threads only wind
        // down, so a poisoned leader does not resign through the
        // coordinator as a live one would.
        self.shared.stop.store(true, Ordering::SeqCst);
        let replicas = self.shared.replicas_in_log_order();
        for replica in &replicas {
            replica
                .log()
                .poison("the process was halted (simulated crash)");
        }
        self.stop_threads(Stop::Crash);
        let durable = replicas
            .iter()
            .flat_map(|replica| replica.log().halt_for_crash())
            .collect();
        self.release_replicas();
        durable
    }

    /// This node's controller candidate, if it runs one.
    pub fn controller(&self) -> Option<&Controller> {
        self.controller.as_ref()
    }

    fn stop_threads(&mut self, how: Stop) {
        self.stepped = false;
        if let Some(controller) = self.controller.as_mut() {
            match how {
                // A clean stop hands the controller seat over at once.
                Stop::Clean => controller.stop(),
                // A crash keeps it until the session expires, as a real
                // one would.
                Stop::Crash => controller.halt_for_crash(),
            }
        }
        self.shared.stop.store(true, Ordering::SeqCst);
        let replicas = self.shared.replicas_in_log_order();
        replicas.iter().for_each(|replica| replica.stop_pipelined());
        self.shared.data_arrived.close();
        if let Some(control) = self.control.take() {
            if control.join().is_err() {
                tracing::error!(node = %self.shared.config.node_id, "control thread panicked");
            }
        }
        // Stopped in the order of their leaders' ids, not the map's.
        let mut fetchers: Vec<(NodeId, Fetcher)> = {
            let mut fetchers = self.shared.fetchers.lock();
            self.shared.fetchers_version.fetch_add(1, Ordering::SeqCst);
            fetchers.drain().collect()
        };
        fetchers.sort_by_key(|(leader, _)| *leader);
        let mut fetchers: Vec<Fetcher> = fetchers.into_iter().map(|(_, f)| f).collect();
        fetchers.append(&mut self.shared.retired_fetchers.lock());
        for fetcher in &mut fetchers {
            fetcher.stop();
        }
        if let Some(deadlines) = self.deadlines.take() {
            if deadlines.join().is_err() {
                tracing::error!(node = %self.shared.config.node_id, "deadline thread panicked");
            }
        }
        // Before the logs close: a roll's flush finishing after a close
        // would write its checkpoint over the clean one.
        self.shared.roll_flusher.stop();
        self.stop_completions();
    }

    /// Lets the completion thread run what is queued (the `Shutdown`
    /// outcomes of the pending appends), then exit. A callback that stops
    /// its own node runs on that thread: it is not waited for then.
    fn stop_completions(&mut self) {
        self.shared.completions.stop();
        let Some(completions) = self.completions.take() else {
            // No thread (a stepped node): what the thread would run on its
            // way out runs here, and the callbacks of outcomes decided
            // later (appends failed by the stop) on the resolving thread.
            self.shared.completions.run_inline();
            return;
        };
        if completions.thread().id() == std::thread::current().id() {
            return;
        }
        if self
            .shared
            .completions
            .wait_stopped(Instant::now() + COMPLETION_DRAIN_MAX)
        {
            if completions.join().is_err() {
                tracing::error!(node = %self.shared.config.node_id, "completion thread panicked");
            }
        } else {
            tracing::warn!(node = %self.shared.config.node_id, waited = ?COMPLETION_DRAIN_MAX,
                "a pipelined append's callback is still running; the completion thread finishes on its own");
        }
    }
}

/// The most events and commands one [`SteppedNode::step_control`] call
/// handles.
#[cfg(any(test, feature = "testing"))]
const STEP_CONTROL_INPUTS_MAX: usize = 1024;

/// A node opened without any thread of its own, for a simulator that
/// drives it in one thread on simulated time (issue 28): what the node's
/// threads would do, it does when told. [`step_control`](Self::step_control)
/// is the control thread's pass, [`expire_deadlines`](Self::expire_deadlines)
/// the deadline thread's, [`run_completions`](Self::run_completions) the
/// completion thread's. No controller runs (a configured one is ignored).
///
/// A controlled shutdown (SPEC 3.5) runs in steps too:
/// [`begin_controlled_shutdown`](Self::begin_controlled_shutdown),
/// [`step_controlled_shutdown`](Self::step_controlled_shutdown) until its
/// hand-overs are over, then
/// [`finish_controlled_shutdown`](Self::finish_controlled_shutdown);
/// `Node::shutdown` with a controlled-shutdown timeout would hand the logs
/// over on threads.
// Only this crate's tests use it until the simulator comes.
#[cfg(any(test, feature = "testing"))]
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Debug)]
pub(crate) struct SteppedNode {
    node: Node,
    events: Receiver<CoordinatorEvent>,
    commands: Receiver<Command>,
    control: ControlCore,
    /// The controlled shutdown under way, once begun.
    shutdown: Option<SteppedShutdown>,
}

/// A stepped node's controlled shutdown under way: the logs it led when
/// it began ([`SteppedHandOver`]), still to hand over until `deadline`
/// (the node's clock), and how many
/// its hand-overs named a successor for so far. `wound_down` is false for
/// a zero [`NodeConfig::controlled_shutdown_timeout`], which, as in
/// [`Node::shutdown`], skips the winding down, the hand-overs and leaving
/// the in-sync replica sets.
#[cfg(any(test, feature = "testing"))]
#[derive(Debug)]
struct SteppedShutdown {
    deadline: Instant,
    leading: Vec<SteppedHandOver>,
    handed_over: usize,
    wound_down: bool,
}

/// A log a stepped controlled shutdown still has to hand over.
#[cfg(any(test, feature = "testing"))]
#[derive(Clone, Copy, Debug)]
struct SteppedHandOver {
    /// The log.
    log: LogId,
    /// The leader epoch in which its appends stopped.
    epoch: LeaderEpoch,
    /// The log end at which they stopped.
    end: Offset,
    /// The attempt to begin on the next step (see
    /// [`NodeCore::begin_shutdown_hand_over`]).
    attempt: u32,
}

#[cfg_attr(not(test), allow(dead_code))]
impl Node {
    /// Opens a node as [`start_on_disk`](Self::start_on_disk) does (checks,
    /// directory, unclean-shutdown report, registration, every log
    /// reconciled) but starts no thread: a simulator drives it through the
    /// returned [`SteppedNode`]. The control core's clock starts at the
    /// node's clock's `now`.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn open_on_disk(
        disk: Arc<dyn Disk>,
        config: NodeConfig,
        transport: Arc<dyn Transport>,
        coordinator: Arc<dyn Coordinator>,
        clock: Arc<dyn Clock>,
    ) -> Result<SteppedNode> {
        let Opened {
            mut node,
            events,
            commands,
            controller_config: _,
        } = Node::open_registered(disk, config, transport, coordinator, clock)?;
        node.stepped = true;
        node.shared.threadless.store(true, Ordering::SeqCst);
        // Rolls' background flushes wait for the simulator's turn.
        node.shared.roll_flusher.hold_jobs();
        if let Err(error) = node.reconcile_every_log() {
            node.abort_start(&error);
            return Err(error);
        }
        let control = ControlCore::new(&node.shared, node.shared.clock.now());
        tracing::info!(node = %node.id(), "node opened without threads");
        Ok(SteppedNode {
            node,
            events,
            commands,
            control,
            shutdown: None,
        })
    }
}

#[cfg(any(test, feature = "testing"))]
#[cfg_attr(not(test), allow(dead_code))]
impl SteppedNode {
    /// The node: its handler, its logs, its stop.
    pub(crate) fn node(&self) -> &Node {
        &self.node
    }

    /// The node, to stop it (`shutdown`, `halt`) or keep it; no step runs
    /// any more.
    pub(crate) fn into_node(self) -> Node {
        self.node
    }

    /// The control thread's wake-ups at `now` (the node's clock), as many
    /// as arrived work asks for: each handles one coordinator event (or,
    /// with none, one command) and then the timed duties, as the thread
    /// does after each `select`; with nothing arrived, one wake-up of the
    /// timed duties alone. Returns how many events and commands it
    /// handled. It waits for nothing itself, but a duty may call the
    /// coordinator. At most [`STEP_CONTROL_INPUTS_MAX`] inputs a call: a
    /// node that keeps notifying itself (each coordinator write it makes
    /// is an event for it) would otherwise keep one call going for ever;
    /// bounded, the driver sees it busy round after round and can report a
    /// livelock instead of hanging.
    pub(crate) fn step_control(&mut self, now: Instant) -> usize {
        let shared = &self.node.shared;
        let mut handled = 0;
        while !shared.is_stopped() && handled < STEP_CONTROL_INPUTS_MAX {
            if let Ok(event) = self.events.try_recv() {
                self.control.on_event(shared, event);
            } else if let Ok(command) = self.commands.try_recv() {
                self.control.on_command(shared, command);
            } else {
                break;
            }
            handled += 1;
            self.control.on_tick(shared, now);
        }
        if handled == 0 {
            self.control.on_tick(shared, now);
        }
        handled
    }

    /// When the control core wants its next [`step_control`](Self::step_control),
    /// on the node's clock (sooner if an event or command arrives).
    pub(crate) fn next_wake(&self) -> Instant {
        self.control.next_wake()
    }

    /// Whether the control thread would wake at `now`: a coordinator event
    /// or a command waits, or [`next_wake`](Self::next_wake) has come. A
    /// driver that steps the control only then steps it as the thread
    /// runs. (An ended event stream also wakes the thread; it is not seen
    /// here: the memory coordinator a simulator uses never ends one.)
    pub(crate) fn is_control_due(&self, now: Instant) -> bool {
        now >= self.control.next_wake() || !self.events.is_empty() || !self.commands.is_empty()
    }

    /// The deadline thread's pass: the core's deadline timer fires
    /// ([`NodeCore::deadlines_due`], which asks for
    /// [`NodeShared::expire_deadlines`]).
    ///
    /// Carried out directly, not through [`NodeShared::drive_core`]: the
    /// timer asks for that one action and nothing else, whatever the core's
    /// state (`the_deadline_timer_asks_for_the_expiry_pass_alone_well_within_a_timeout`),
    /// and the driver carries it out by this same call, so both ways do the
    /// same. The simulator calls this for every node in every settle round:
    /// the action list allocated and driven each time was about 5% of a
    /// simulated run (issue 28).
    pub(crate) fn expire_deadlines(&self) {
        self.node.shared.expire_deadlines();
    }

    /// The roll flusher thread's work: runs the background log work
    /// (rolled segments' flushes, log start moves) held so far; how many
    /// jobs ran.
    pub(crate) fn run_background_work(&self) -> usize {
        self.node.shared.roll_flusher.run_held()
    }

    /// A value that changes whenever the fetchers (and so
    /// [`fetch_sessions`](Self::fetch_sessions)) change.
    pub(crate) fn fetchers_version(&self) -> u64 {
        self.node.shared.fetchers_version.load(Ordering::SeqCst)
    }

    /// The sessions of this node's fetchers, by leader: a simulator asks
    /// each for its next fetch and hands it the answer.
    pub(crate) fn fetch_sessions(&self) -> Vec<FetchSession> {
        let mut sessions: Vec<FetchSession> = self
            .node
            .shared
            .fetchers
            .lock()
            .values()
            .map(Fetcher::session)
            .collect();
        sessions.sort_by_key(FetchSession::leader);
        sessions
    }

    /// A follower's fetch arriving, as this node's handler takes it: the
    /// refusals (a stopping node, a bad list of logs, then the core's: a
    /// stale incarnation) and then the first look
    /// ([`NodeShared::serve_fetch`]), with the wait already over if
    /// `expired`.
    pub(crate) fn receive_fetch(
        &self,
        from: NodeId,
        request: &FetchRequest,
        expired: bool,
    ) -> FetchPoll {
        let shared = &self.node.shared;
        if let Some(refusal) = shared.refuse_listed(from, request.logs.iter().map(|l| l.log)) {
            return FetchPoll::Answer(refusal);
        }
        let mut actions = Vec::new();
        shared.core.handle(
            Input::FetchArrived {
                from,
                incarnation: request.incarnation,
                now: shared.clock.now(),
            },
            &mut actions,
        );
        shared.serve_fetch(from, request, actions, || expired)
    }

    /// How long a fetch `request` parked on this node waits for data at
    /// most before it is answered with what there is
    /// ([`NodeShared::fetch_wait`], the threaded handler's rule).
    pub(crate) fn fetch_wait(&self, request: &FetchRequest) -> Duration {
        self.node.shared.fetch_wait(request)
    }

    /// Whether data arrived (the leader's data watch moved) since `seen`,
    /// as returned by a parked [`FetchPoll`]: a parked fetch is looked at
    /// again then.
    pub(crate) fn data_arrived_since(&self, seen: u64) -> bool {
        self.node.shared.data_arrived.get() > seen
    }

    /// One look at a follower's fetch as this node's handler would take it
    /// after a park ([`Input::FetchRecheck`], then
    /// [`NodeShared::serve_fetch`]), without the incarnation check and
    /// without waiting: `expired` says the fetch's wait is over.
    pub(crate) fn poll_fetch(
        &self,
        from: NodeId,
        request: &FetchRequest,
        arrival: FetchArrival,
        expired: bool,
    ) -> FetchPoll {
        let shared = &self.node.shared;
        let mut actions = Vec::new();
        shared
            .core
            .handle(Input::FetchRecheck { arrival }, &mut actions);
        shared.serve_fetch(from, request, actions, || expired)
    }

    /// The completion thread's pass ([`CompletionRunner::run_pending`]):
    /// runs the callbacks and wakers queued so far; how many.
    pub(crate) fn run_completions(&self) -> usize {
        self.node.shared.completions.run_pending()
    }

    /// Whether callbacks or wakers wait for
    /// [`run_completions`](Self::run_completions): the completion thread
    /// would wake.
    pub(crate) fn has_pending_completions(&self) -> bool {
        self.node.shared.completions.has_pending()
    }

    /// Begins a controlled shutdown at `now` as [`Node::shutdown`] does
    /// (SPEC 3.5): the node winds down (its control makes no coordinator
    /// call of its own from here on, but still follows the coordinator)
    /// and every log it leads stops taking appends, to be handed over by
    /// [`step_controlled_shutdown`](Self::step_controlled_shutdown) until
    /// [`NodeConfig::controlled_shutdown_timeout`] from now. Everything
    /// else goes on being stepped meanwhile: the followers' fetches that
    /// bring a successor up to the stopped end, the node's own fetchers.
    /// Returns how many logs it leads. Only the first call counts. With a
    /// zero timeout nothing of this happens, as in [`Node::shutdown`]: the
    /// shutdown only stops the node and closes its logs, and returns 0.
    pub(crate) fn begin_controlled_shutdown(&mut self, now: Instant) -> usize {
        if self.shutdown.is_some() {
            return 0;
        }
        let shared = Arc::clone(&self.node.shared);
        let timeout = shared.config.controlled_shutdown_timeout;
        let hands_over = !timeout.is_zero();
        let (before, _) = around_hand_over(controlled_shutdown_steps(hands_over));
        let mut leading = Vec::new();
        for step in before {
            // Nothing before the hand-over closes the logs.
            let _closed = self
                .node
                .stepped_shutdown_step(*step, hands_over, &mut leading);
        }
        let count = leading.len();
        if hands_over {
            tracing::info!(node = %shared.local(), logs = count, "controlled shutdown begins (stepped)");
        }
        self.shutdown = Some(SteppedShutdown {
            deadline: now + timeout,
            leading,
            handed_over: 0,
            wound_down: hands_over,
        });
        count
    }

    /// One attempt at `now` to hand over each log the controlled shutdown
    /// still has to ([`NodeShared::hand_over_step`]), never waiting. Once
    /// the hand-overs are over (each handed over, or left to the
    /// controller: someone else moved it, nobody to take it, a failed
    /// coordinator call, or the deadline passed), how many logs this
    /// shutdown's own hand-overs named a successor for; `None` while one
    /// still waits. `Some(0)` without a shutdown begun.
    pub(crate) fn step_controlled_shutdown(&mut self, now: Instant) -> Option<usize> {
        let shared = &self.node.shared;
        let Some(shutdown) = self.shutdown.as_mut() else {
            return Some(0);
        };
        if !shutdown.leading.is_empty() && now >= shutdown.deadline {
            tracing::warn!(node = %shared.local(), logs = shutdown.leading.len(),
                "controlled shutdown: the deadline passed with logs not handed over; they are left to the controller");
            shutdown.leading.clear();
        }
        let mut handed_over = 0;
        shutdown.leading.retain_mut(|hand_over| {
            let step = shared
                .replica(hand_over.log)
                .map_or(HandOverStep::Over, |replica| {
                    shared.hand_over_step(&replica, hand_over)
                });
            handed_over += usize::from(step == HandOverStep::HandedOver);
            match step {
                HandOverStep::Waiting { attempt } => {
                    hand_over.attempt = attempt;
                    true
                }
                HandOverStep::HandedOver | HandOverStep::Over => false,
            }
        });
        shutdown.handed_over += handed_over;
        shutdown.leading.is_empty().then_some(shutdown.handed_over)
    }

    /// Ends a controlled shutdown as [`Node::shutdown`] does once its
    /// hand-overs are over, one step after the other on this thread: ends
    /// the node's session, stops its work, leaves the in-sync replica sets
    /// of the logs it follows, and closes its logs with the clean-shutdown
    /// marker. Whether it wrote the marker (not while this start's unclean
    /// report is unrecorded somewhere).
    pub(crate) fn finish_controlled_shutdown(self) -> Result<bool> {
        let hands_over = match &self.shutdown {
            Some(shutdown) => shutdown.wound_down,
            None => !self
                .node
                .shared
                .config
                .controlled_shutdown_timeout
                .is_zero(),
        };
        let mut node = self.node;
        let (_, after) = around_hand_over(controlled_shutdown_steps(hands_over));
        let mut closed = Ok(false);
        for step in after {
            if let Some(result) = node.stepped_shutdown_step(*step, hands_over, &mut Vec::new()) {
                closed = result;
            }
        }
        closed
    }
}

/// The steps of a controlled shutdown before its hand-over and after it
/// (all after it when there is none): a stepped node carries out the
/// first when the shutdown begins and the others when it finishes, the
/// hand-over being stepped in between.
#[cfg(any(test, feature = "testing"))]
fn around_hand_over(
    steps: &'static [ControlledShutdownStep],
) -> (
    &'static [ControlledShutdownStep],
    &'static [ControlledShutdownStep],
) {
    match steps
        .iter()
        .position(|step| *step == ControlledShutdownStep::HandOver)
    {
        Some(at) => (&steps[..at], &steps[at + 1..]),
        None => (&[], steps),
    }
}

#[cfg(any(test, feature = "testing"))]
impl Node {
    /// Carries out `step` of a stepped node's controlled shutdown (see
    /// [`SteppedNode::begin_controlled_shutdown`]) as [`Node::shutdown`]
    /// does, one step after the other on this thread, with no deadline:
    /// the coordinator calls of a simulation return at once, so the
    /// deadline, which bounds the threaded path's slow calls, has no call
    /// to cut short here. `hands_over`: the timeout is not zero.
    /// [`StopAppends`](ControlledShutdownStep::StopAppends) fills
    /// `leading`; [`HandOver`](ControlledShutdownStep::HandOver) is
    /// stepped by the caller. What closing the logs returned, once they
    /// are.
    fn stepped_shutdown_step(
        &mut self,
        step: ControlledShutdownStep,
        hands_over: bool,
        leading: &mut Vec<SteppedHandOver>,
    ) -> Option<Result<bool>> {
        let shared = Arc::clone(&self.shared);
        match step {
            ControlledShutdownStep::WindDown => shared.core.wind_down(),
            ControlledShutdownStep::StopAppends => {
                *leading = shared
                    .stop_appends_for_shutdown()
                    .into_iter()
                    .map(|(replica, epoch, end)| SteppedHandOver {
                        log: replica.log_id(),
                        epoch,
                        end,
                        attempt: 0,
                    })
                    .collect();
            }
            ControlledShutdownStep::HandOver => {}
            ControlledShutdownStep::RaiseStop => shared.stop.store(true, Ordering::SeqCst),
            ControlledShutdownStep::EndSession => {
                shared.drive_core(|core, out| core.end_session(hands_over, out));
            }
            ControlledShutdownStep::StopThreads => self.stop_threads(Stop::Clean),
            ControlledShutdownStep::LeaveIsrs => {
                for replica in shared.replicas_in_log_order() {
                    shared.leave_in_sync_replica(replica.log_id(), &ShutdownStep::default());
                }
            }
            ControlledShutdownStep::CloseLogs => return Some(self.close_logs_and_mark_clean(None)),
        }
        None
    }
}

/// The clean-shutdown marker a start took, put back when the start fails
/// before it registers (see `Node::open_registered`).
struct MarkerTaken<'a> {
    disk: &'a dyn Disk,
    data_dir: &'a Path,
    restore_on_drop: bool,
}

impl Drop for MarkerTaken<'_> {
    fn drop(&mut self) {
        // A panic is a broken invariant: nothing is vouched for then.
        if !self.restore_on_drop || std::thread::panicking() {
            return;
        }
        match write_clean_shutdown_marker(self.disk, self.data_dir) {
            Ok(()) => tracing::info!(directory = %self.data_dir.display(),
                "the start failed before registering: put the clean-shutdown marker back"),
            Err(error) => tracing::warn!(directory = %self.data_dir.display(), %error,
                "the start failed before registering and cannot put the clean-shutdown marker back: the next start is unclean"),
        }
    }
}

/// What one step of a stepped controlled shutdown's hand-over left
/// ([`ShutdownStep`]).
#[cfg(any(test, feature = "testing"))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum HandOverStep {
    /// Nobody has caught up yet, or a compare-and-set lost a race: begin
    /// `attempt` on the next step.
    Waiting {
        /// The attempt to begin.
        attempt: u32,
    },
    /// This step named a successor.
    HandedOver,
    /// Moved by someone else, or left to the controller.
    #[default]
    Over,
}

/// The configuration of the controller a node with `config` runs, if it
/// runs one: the node's own replication settings, which the controller's
/// decisions must agree with, override the controller's copies.
pub(crate) fn controller_config(config: &NodeConfig) -> Option<ControllerConfig> {
    config.controller.as_ref().map(|c| ControllerConfig {
        min_insync_replicas: config.replication.min_insync_replicas,
        replica_lag_time_max: config.replication.replica_lag_time_max,
        ..c.clone()
    })
}

/// The work started by [`NodeShared::spawn_bounded`]: one message per
/// item finished.
struct Finished {
    count: usize,
    finished: Receiver<()>,
}

/// How many items of `work` finished by `deadline` (returning as soon as
/// all have).
fn wait_finished(work: Finished, deadline: Instant) -> usize {
    let mut finished = 0;
    while finished < work.count && work.finished.try_recv().is_ok() {
        finished += 1;
    }
    if finished < work.count {
        crate::simulation::forbid_in_simulation("a wait for shutdown workers");
    }
    while finished < work.count && work.finished.recv_deadline(deadline).is_ok() {
        finished += 1;
    }
    finished
}

/// How many threads a stopping node closes its logs with. Closing a log
/// takes several fsyncs; one after the other, a hundred logs took 3 s on a
/// test machine, longer than the coordinator steps of a controlled
/// shutdown. Kafka likewise closes logs on a pool of
/// `num.recovery.threads.per.data.dir` threads at shutdown.
const CLOSE_THREADS_MAX: usize = 8;

/// Takes every replica offline and flushes and closes its log, on up to
/// [`CLOSE_THREADS_MAX`] threads (here, if none can be started); returns
/// the logs that failed to close, with their errors. The caller has
/// stopped every thread that could still write them.
fn close_replicas(replicas: Vec<Arc<Replica>>) -> Vec<(LogId, Error)> {
    let count = replicas.len();
    let queue = Mutex::new(replicas.into_iter());
    let failed = Mutex::new(Vec::new());
    let close_next = || {
        while let Some(replica) = {
            let next = queue.lock().next();
            next
        } {
            replica.take_offline();
            replica.store_applied_positions();
            if let Err(error) = replica.log().close_in_place() {
                failed.lock().push((replica.log_id(), error));
            }
        }
    };
    // Inside a deterministic simulation the one stepping thread closes
    // every log itself, in order: a thread would run outside its schedule.
    let threads = if crate::simulation::simulating() {
        0
    } else {
        count.min(CLOSE_THREADS_MAX)
    };
    std::thread::scope(|scope| {
        for index in 0..threads {
            let spawned = std::thread::Builder::new()
                .name(format!("isrlog-close-{index}"))
                .spawn_scoped(scope, close_next);
            if spawned.is_err() {
                break;
            }
        }
        // Whatever no thread took (or all of it, if none started).
        close_next();
    });
    failed.into_inner()
}

/// Carries out a role change of the core ([`Action::ChangeRole`]) on its
/// replica: `become_leader`, which records the new epoch in the log's
/// leader-epoch checkpoint and may fail, or `become_follower`, which
/// cannot. Its result goes back to the core as [`Input::RoleChanged`].
fn change_role(change: &RoleChange) -> Result<()> {
    match change {
        RoleChange::Lead { replica, state } => replica.get().become_leader(
            state.leader_epoch,
            state.replicas.clone(),
            state.in_sync_replicas.clone(),
            state.version,
        ),
        RoleChange::Follow { replica, state } => {
            replica.get().become_follower(
                state.leader,
                state.leader_epoch,
                state.replicas.clone(),
                state.in_sync_replicas.clone(),
                state.version,
            );
            Ok(())
        }
    }
}

/// Where `replica`'s log ends, as reported to the coordinator, with its
/// line epoch ([`Log::line_epoch`](crate::Log::line_epoch)), log start and
/// newest epoch cache entries, which unclean recovery compares
/// ([`LogState::longest_line`]), all read at one instant. Not known
/// (`None`, with a warning) while its stored line epoch is unusable.
fn replica_log_end(replica: &Replica) -> Option<LogEnd> {
    match replica.log().end_report(LogEnd::EPOCHS_REPORTED) {
        Ok(report) => Some(LogEnd {
            last_epoch: report.last_batch_epoch,
            log_end_offset: report.log_end_offset,
            log_start_offset: report.log_start_offset,
            high_watermark: report.high_watermark,
            line_epoch: report.line_epoch,
            epochs: report.epochs,
            start_line: report.start_line,
        }),
        Err(reason) => {
            tracing::warn!(log = %replica.log_id(), %reason,
                "this replica's line epoch is not known: reporting its log end as not known");
            None
        }
    }
}

/// Records that `node`'s replica of `log`, whose copy it just deleted, is
/// placed on no directory ([`DirectoryId::UNASSIGNED`]), so that a later
/// start does not take it for a replica that lost its data. `false` if it
/// failed: the old placement stays on record (a start before the replica
/// is created again counts it as lost, the cautious side) until the
/// node's core retries it ([`NodeCore::retry_unassigns`]).
fn unassign_directory(coordinator: &dyn Coordinator, node: NodeId, log: LogId) -> bool {
    match coordinator.record_replica_directories(node, DirectoryId::UNASSIGNED, &[log]) {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(%log, %node, %error, "cannot record that the deleted replica is placed on no directory; retried on the report timer");
            false
        }
    }
}

/// The logs among `hosted` whose replica on the data directory
/// `directory_id` lost its data (SPEC 2.8), as a start counts them
/// ([`PreviousShutdown::LostData`]); `holds(log)` says whether the
/// directory holds the log's directory.
///
/// A replica lost its data when the coordinator placed it on a directory
/// (`recorded`: so it may have held records) and this directory is another
/// one (a new, emptied or swapped disk has a new or another id) or no
/// longer holds its log. A replica never placed on any directory never held
/// a record (it is placed before it serves, see `record_directory`), so it
/// has nothing to lose: counting it as lost would leave a log created
/// before its nodes first started with every replica "unclean" and nobody
/// to lead it. KIP-858 likewise leaves a new replica's directory
/// unassigned until its broker places it. A replica whose copy this node
/// deleted is placed nowhere (`DirectoryId::UNASSIGNED`): added back later,
/// it holds nothing until it is placed again (simulator seed 20005277: a
/// replica removed, added back, and not yet created when the node stopped
/// cleanly made its next start count as one that lost data, and leave the
/// ISR and ELR of every log).
pub(crate) fn lost_replicas(
    hosted: &[LogId],
    recorded: &HashMap<LogId, DirectoryId>,
    directory_id: DirectoryId,
    holds: impl Fn(LogId) -> bool,
) -> HashSet<LogId> {
    hosted
        .iter()
        .copied()
        .filter(|log| match recorded.get(log) {
            Some(placed) if *placed == DirectoryId::UNASSIGNED => false,
            Some(placed) => *placed != directory_id || !holds(*log),
            None => false,
        })
        .collect()
}

/// The directory of `log`'s replica inside a node's data directory.
fn log_dir(data_dir: &Path, log: LogId) -> PathBuf {
    data_dir.join(format!("log-{}", log.0))
}

/// Controlled shutdown: whether a hand-over may still change this node.
/// Once the deadline passes, the node stops its threads and closes its
/// logs; a hand-over thread whose coordinator call returns after that
/// must not make the replica follow (start a fetcher, write its log).
/// Closing waits for any such change under way, and refuses every later
/// one.
#[derive(Debug)]
struct ShutdownGate {
    open: RwLock<bool>,
}

impl Default for ShutdownGate {
    fn default() -> ShutdownGate {
        ShutdownGate {
            open: RwLock::new(true),
        }
    }
}

impl ShutdownGate {
    /// Runs `change` if the gate is still open, holding it open meanwhile.
    fn act<R>(&self, change: impl FnOnce() -> R) -> Option<R> {
        let open = self.open.read();
        if !*open {
            return None;
        }
        Some(change())
    }

    /// Whether changes are still allowed.
    fn is_open(&self) -> bool {
        *self.open.read()
    }

    /// Refuses every change from now on, once those under way finished.
    fn close(&self) {
        *self.open.write() = false;
    }
}

/// How a driver carries out a controlled shutdown's actions in
/// [`NodeShared::drive_with`]: the threaded runtime's shutdown workers
/// ([`ShutdownWorker`]) and the stepped node ([`ShutdownStep`]) differ
/// only here (the core's machine is the same, `node/core/shutdown.rs`).
trait ShutdownRun {
    /// Whether the call `then` is for must not start: the shutdown's
    /// deadline bounds it ([`Continuation::is_bounded_by_shutdown_deadline`])
    /// and has passed.
    fn late(&self, shared: &NodeShared, then: &Continuation) -> bool;

    /// Carries out `wait` of `pass`'s hand-over; the input to hand back
    /// now, or `None`: the attempt ends here (the stepped node begins it
    /// again on its next step).
    fn wait(&self, shared: &NodeShared, pass: ShutdownPass, wait: ShutdownWait) -> Option<Input>;

    /// A hand-over named `successor` leader of `log` in `state`: follows
    /// it.
    fn handed_over(&self, shared: &NodeShared, log: LogId, successor: NodeId, state: &LogState);
}

/// [`NodeShared::drive`]'s: no controlled shutdown under way (the core
/// asks for a shutdown's actions only from the shutdown's own steps,
/// which run with one of the others). Never late, never waits, follows a
/// handed-over state.
struct NoShutdown;

impl ShutdownRun for NoShutdown {
    fn late(&self, _shared: &NodeShared, _then: &Continuation) -> bool {
        false
    }

    fn wait(
        &self,
        _shared: &NodeShared,
        _pass: ShutdownPass,
        _wait: ShutdownWait,
    ) -> Option<Input> {
        // Only a controlled shutdown's pass asks for a wait, and it is
        // driven by its own run: one reaching plain `drive` would end the
        // hand-over silently (review of a7cb8ca, helper-92).
        debug_assert!(false, "a shutdown wait reached a driver with no shutdown");
        None
    }

    fn handed_over(&self, shared: &NodeShared, _log: LogId, _successor: NodeId, state: &LogState) {
        shared.reconcile(state);
    }
}

/// A threaded controlled shutdown's worker ([`Node::shutdown`]): starts no
/// call of the shutdown's past `deadline` or once `gate` (the hand-overs')
/// closed, waits for the high watermark until `deadline` and for a
/// successor one [`HAND_OVER_POLL`] at a time, and follows a handed-over
/// state only through `gate`.
struct ShutdownWorker<'a> {
    /// The shutdown's deadline, on the real clock.
    deadline: Instant,
    /// The hand-overs' gate; `None` for leaving the ISRs, which changes
    /// nothing on this node.
    gate: Option<&'a ShutdownGate>,
}

impl ShutdownRun for ShutdownWorker<'_> {
    fn late(&self, shared: &NodeShared, then: &Continuation) -> bool {
        let late = Instant::now() >= self.deadline || self.gate.is_some_and(|gate| !gate.is_open());
        if late {
            if let Continuation::ShutdownHandOver { pass, .. } = then {
                tracing::warn!(log = %pass.log(), node = %shared.local(), "controlled shutdown: out of time; leaving the log to the controller");
            }
        }
        late
    }

    fn wait(&self, shared: &NodeShared, pass: ShutdownPass, wait: ShutdownWait) -> Option<Input> {
        let expired = match &wait {
            ShutdownWait::HighWatermark { above, .. } => {
                let _ = pass
                    .replica()
                    .wait_for_high_watermark_above(*above, self.deadline);
                false
            }
            ShutdownWait::Successor { .. } => {
                let expired = Instant::now() >= self.deadline || shared.is_stopped();
                if !expired {
                    crate::simulation::forbid_in_simulation(
                        "a sleep waiting for a hand-over successor",
                    );
                    std::thread::sleep(HAND_OVER_POLL);
                }
                expired
            }
            ShutdownWait::NextAttempt => false,
        };
        Some(Input::ShutdownWaited {
            pass,
            wait,
            expired,
        })
    }

    fn handed_over(&self, shared: &NodeShared, log: LogId, successor: NodeId, state: &LogState) {
        let followed = match self.gate {
            Some(gate) => gate.act(|| shared.reconcile(state)).is_some(),
            None => {
                shared.reconcile(state);
                true
            }
        };
        tracing::info!(%log, node = %shared.local(), leader = %successor, epoch = %state.leader_epoch,
            followed, "controlled shutdown: leadership handed over");
    }
}

/// A stepped controlled shutdown's ([`SteppedNode`]): no deadline inside a
/// step (the step checks it first), no wait for the high watermark (its
/// caller steps the fetches that move it), and a hand-over that waits
/// for a successor or its next attempt ends its step, to begin that
/// attempt again on the next; `outcome` says what the step left.
#[cfg(any(test, feature = "testing"))]
#[derive(Default)]
struct ShutdownStep {
    /// What the hand-over's step left (`Over` until it waits or names a
    /// successor).
    outcome: std::cell::Cell<HandOverStep>,
}

#[cfg(any(test, feature = "testing"))]
impl ShutdownRun for ShutdownStep {
    fn late(&self, _shared: &NodeShared, _then: &Continuation) -> bool {
        false
    }

    fn wait(&self, _shared: &NodeShared, pass: ShutdownPass, wait: ShutdownWait) -> Option<Input> {
        match wait {
            ShutdownWait::HighWatermark { .. } => Some(Input::ShutdownWaited {
                pass,
                wait,
                expired: false,
            }),
            ShutdownWait::Successor { .. } | ShutdownWait::NextAttempt => {
                self.outcome.set(HandOverStep::Waiting {
                    attempt: pass.attempt(),
                });
                None
            }
        }
    }

    fn handed_over(&self, shared: &NodeShared, log: LogId, successor: NodeId, state: &LogState) {
        shared.reconcile(state);
        tracing::info!(%log, node = %shared.local(), leader = %successor, epoch = %state.leader_epoch,
            "controlled shutdown: leadership handed over");
        self.outcome.set(HandOverStep::HandedOver);
    }
}

/// How a node's threads are stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Clean,
    Crash,
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.control.is_some() || self.stepped {
            self.stop_threads(Stop::Clean);
            self.shared
                .drive_core(|core, out| core.end_session(false, out));
            let replicas = self.shared.replicas_in_log_order();
            let failed = close_replicas(replicas);
            for (log, error) in &failed {
                tracing::warn!(%log, %error, "flush on drop failed");
            }
            if failed.is_empty() && self.shared.may_mark_clean_shutdown() {
                if let Err(error) =
                    write_clean_shutdown_marker(&*self.shared.disk, &self.shared.config.data_dir)
                {
                    tracing::warn!(node = %self.shared.config.node_id, %error,
                        "cannot write the clean-shutdown marker; the next start reports an unclean shutdown");
                }
            }
        }
    }
}

impl NodeShared {
    /// Whether the node has stopped (shut down, halted or crashed).
    pub(crate) fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Whether the node was opened without threads (`SteppedNode`): its
    /// steps must return instead of waiting, since the caller steps
    /// whatever they would wait for. Always false without `testing`.
    fn is_threadless(&self) -> bool {
        self.threadless.load(Ordering::SeqCst)
    }
}

impl Drop for NodeShared {
    /// A replica outliving its node reads it as stopped, as it would read
    /// a stopped one (`Replica::set_node_stop`).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl NodeShared {
    pub(crate) fn replica(&self, log: LogId) -> Option<Arc<Replica>> {
        self.replicas.read().get(&log).cloned()
    }

    /// Every hosted replica, in the order of their log ids (the map's
    /// order), taken out of the lock.
    pub(crate) fn replicas_in_log_order(&self) -> Vec<Arc<Replica>> {
        self.replicas.read().values().cloned().collect()
    }

    /// Takes every replica out of the node, in the order of their log ids.
    fn take_replicas(&self) -> Vec<Arc<Replica>> {
        std::mem::take(&mut *self.replicas.write())
            .into_values()
            .collect()
    }

    fn local(&self) -> NodeId {
        self.config.node_id
    }

    /// After an unclean shutdown: opens (and so recovers) the local replica
    /// of every log the coordinator assigns to this node, and returns where
    /// each log ends now, for [`Coordinator::report_unclean_shutdown`]. A
    /// replica that cannot be opened reports its end as not known (`None`):
    /// it cannot lead now, the report must not claim records it cannot
    /// serve, and it may still hold records no other replica has.
    fn recovered_log_ends(&self) -> Result<Vec<(LogId, Option<LogEnd>)>> {
        let mut ends = Vec::new();
        for state in self.coordinator.logs()? {
            if !state.replicas.contains(&self.local()) {
                continue;
            }
            // No replica opens with the cut yet (`unclean_stop_reported`
            // is not set): one whose recovery would cut records that may
            // have been committed fails to open here and is reported
            // with its end not known, and opens with the cut once the
            // report is stored.
            let end = self.open_to_report(state.log);
            ends.push((state.log, end));
        }
        Ok(ends)
    }

    /// The logs among `logs` whose stored state still counts this node as
    /// eligible after its unclean-shutdown report (SPEC 3.5), with the log
    /// end to report for each: those the report had to skip because their
    /// document cannot be read or changed by this version. Errs only if the
    /// coordinator cannot be asked (the start fails, as any start that
    /// cannot reach it).
    fn unreported_logs(
        &self,
        logs: impl Iterator<Item = LogId>,
        log_ends: &[(LogId, Option<LogEnd>)],
        recorded: &HashMap<LogId, DirectoryId>,
    ) -> Result<HashMap<LogId, Option<LogEnd>>> {
        let me = self.local();
        let mut unreported = HashMap::new();
        // Asked in log order (the caller's logs come out of a hash map)
        // and each once.
        for log in logs.collect::<BTreeSet<LogId>>() {
            let reported = log_ends
                .iter()
                .find(|(reported, _)| *reported == log)
                .map(|(_, end)| end.clone());
            let pending = match self.coordinator.log_state(log) {
                Ok(Some(state)) => {
                    let end = reported.clone().unwrap_or(Some(LogEnd::default()));
                    state.replicas.contains(&me) && state.unclean_shutdown_update(me, end).is_some()
                }
                Ok(None) => false,
                Err(Error::CoordinatorDocument { .. }) => true,
                Err(error) => return Err(error),
            };
            if pending {
                let end = match reported {
                    Some(end) => end,
                    None => self.unreadable_log_end(log, recorded),
                };
                unreported.insert(log, end);
            }
        }
        Ok(unreported)
    }

    /// The log end to report for `log`, whose document this version could
    /// not read when the unclean-shutdown report was made (so
    /// [`recovered_log_ends`](Self::recovered_log_ends) did not see it):
    /// what its replica on this directory holds, so that unclean recovery
    /// (SPEC 3.5) does not pass over the replica with the most records once
    /// the document is readable again. Empty if the coordinator placed the
    /// replica on another directory or its directory is gone (it lost its
    /// data, as in `Node::start`); not known (`None`) if it cannot be
    /// opened.
    fn unreadable_log_end(
        &self,
        log: LogId,
        recorded: &HashMap<LogId, DirectoryId>,
    ) -> Option<LogEnd> {
        let placed_here = recorded.get(&log) == Some(&self.directory_id)
            && self.disk.exists(&log_dir(&self.config.data_dir, log));
        if !placed_here {
            return Some(LogEnd::default());
        }
        // Its report is pending (it is not yet in `unreported` while the
        // start fills that in): the replica opens without the cut, and one
        // that needs it is reported with its end not known.
        self.open_to_report(log)
    }

    /// Opens `log`'s replica here (never with the cut, see
    /// [`NodeShared::unclean_stop_reported`]) and gives the log end to
    /// report for it after an unclean stop: not known (`None`) if it cannot
    /// be opened, in which case it is noted
    /// ([`NodeCore::note_reported_unopened`]) and its end is reported once
    /// it opens.
    fn open_to_report(&self, log: LogId) -> Option<LogEnd> {
        match self.host(log) {
            Ok(replica) => self.log_end_to_report(&replica),
            Err(error) => {
                tracing::warn!(%log, node = %self.local(), %error,
                    "cannot open the replica to report its log end after an unclean shutdown (or only by cutting records that may have been committed); reporting its end as not known until it opens");
                self.core.note_reported_unopened(log);
                None
            }
        }
    }

    /// The log end this node reports for `replica` after an unclean stop
    /// (SPEC 3.5): where its log ends, or not known (`None`) if its
    /// recovery cut records that may have been committed. The coordinator
    /// keeps a reporting replica that is the last ISR or ELR member with a
    /// non-empty log end: it would lead with the cut log and truncate
    /// replicas outside the ISR that still hold the records; one whose end
    /// is not known always leaves, and the log waits for unclean recovery,
    /// which compares the others' ends with this one's once it is written
    /// ([`NodeCore::report_end_after_open`]; review of
    /// c6bd2e8, finding 1). Opens during the report never cut (see
    /// [`NodeShared::unclean_stop_reported`]), so this is the guard for a
    /// replica opened earlier.
    fn log_end_to_report(&self, replica: &Replica) -> Option<LogEnd> {
        if let Some(from) = replica.log().recovery_report().dropped_possibly_committed {
            tracing::warn!(log = %replica.log_id(), node = %self.local(), %from,
                "recovery cut records that may have been committed: reporting this replica's log end as not known");
            return None;
        }
        replica_log_end(replica)
    }

    /// Whether this stop may write the clean-shutdown marker: the core's
    /// decision ([`NodeCore::clean_marker`]), with a warning when it may
    /// not.
    fn may_mark_clean_shutdown(&self) -> bool {
        match self
            .core
            .clean_marker(self.previous_shutdown.is_reported_unclean())
        {
            CleanMarker::Write => true,
            CleanMarker::Unopened(logs) => {
                tracing::warn!(node = %self.local(), ?logs,
                    "not writing the clean-shutdown marker: replicas of this unclean start never opened, so the next start recovers them as after an unclean stop");
                false
            }
            CleanMarker::Unreported(logs) => {
                tracing::warn!(node = %self.local(), ?logs,
                    "not writing the clean-shutdown marker: this node's unclean shutdown is still unrecorded in these logs, so the next start reports it again");
                false
            }
        }
    }

    /// Sends the flush of each of `replica`'s rolls (issue 27), and the file
    /// work of its follower's log start moves (issue 25), to the node's
    /// roll flush thread instead of the appending or fetching thread: the
    /// log's hook asks the core ([`NodeCore::background_wanted`]) and
    /// carries out its [`Action::Background`] by queueing a job there,
    /// which runs the work if the replica still lives and hands its end to
    /// the core ([`NodeCore::background_done`]). The hook takes no node
    /// lock; it answers whether the work was taken.
    fn flush_rolls_in_background(&self, replica: &Arc<Replica>) {
        let flusher = Arc::clone(&self.roll_flusher);
        let weak = Arc::downgrade(replica);
        let log_id = replica.log_id();
        replica
            .log()
            .set_roll_flusher(RollFlusher(Box::new(move |work| {
                let mut actions = Vec::new();
                NodeCore::background_wanted(log_id, work, &mut actions);
                let mut taken = true;
                for action in actions {
                    let Action::Background { log, work } = action else {
                        debug_assert!(false, "{action:?} asked for by a log's hand-off");
                        continue;
                    };
                    let weak = weak.clone();
                    taken &= flusher.submit(Box::new(move || {
                        if let Some(replica) = weak.upgrade() {
                            let result = match work {
                                BackgroundWork::FlushRoll => replica.log().flush(),
                                BackgroundWork::FinishLogStartMoves => {
                                    replica.log().finish_log_start_moves()
                                }
                            };
                            NodeCore::background_done(log, work, result);
                        }
                    }));
                }
                taken
            })));
    }

    /// A controlled stop's last try, once its threads stopped and before
    /// it decides on the clean-shutdown marker, to open each replica of
    /// this unclean start that never opened, pause or not (review of the
    /// open's backoff, finding 3): without it, a stop that came during
    /// the pause after a failed attempt (up to [`OPEN_RETRY_BACKOFF_MAX`])
    /// never tried again, wrote no marker
    /// ([`may_mark_clean_shutdown`](Self::may_mark_clean_shutdown)) and
    /// left the next start unclean again, even when the replica could
    /// open by then. One that opens is recovered as any open after this
    /// unclean start is ([`open_may_cut`](Self::open_may_cut)), then
    /// flushed and closed with the others; opened after the threads
    /// stopped, it takes no role, fetches nothing and takes no append
    /// ([`host`](Self::host): winding down). Nothing is opened when the
    /// marker is withheld anyway (a report still pending) or was never in
    /// question (a clean start).
    ///
    /// Past the stop's `deadline` (the threaded stop's; the stepped one
    /// has none) no attempt is made: each is a whole recovery of the
    /// replica, and a replica that fails for good would hold every stop
    /// past its deadline (review of 3f8a3c1).
    fn open_unopened_before_marker(&self, deadline: Option<Instant>) {
        if !self.previous_shutdown.is_reported_unclean()
            || !self.core.pending_unclean_reports().is_empty()
        {
            return;
        }
        for log in self.core.unopened_logs() {
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                tracing::warn!(%log, node = %self.local(),
                    "controlled shutdown: past its deadline, not trying again to open the replica that could not be opened");
                continue;
            }
            match self.host_heeding_pause(log, false) {
                Ok(_) => {
                    tracing::info!(%log, node = %self.local(),
                        "controlled shutdown: the replica that could not be opened opened at the last try; it is closed with the others");
                }
                Err(error) => {
                    tracing::warn!(%log, node = %self.local(), %error,
                        "controlled shutdown: the replica still cannot be opened");
                }
            }
        }
    }

    /// Opens the local replica of `log` if needed, when the core says it
    /// may ([`NodeCore::open_due`]: not before the pause after its last
    /// failed attempt is over; until then it is
    /// [`Error::ReplicaOpenDeferred`]), and tells the core how the attempt
    /// ended ([`NodeCore::open_attempted`]).
    fn host(&self, log: LogId) -> Result<Arc<Replica>> {
        self.host_heeding_pause(log, true)
    }

    /// [`host`](Self::host), which heeds the pause after failed attempts
    /// only if `heed_pause` (a controlled stop's last try does not,
    /// [`open_unopened_before_marker`](Self::open_unopened_before_marker)).
    fn host_heeding_pause(&self, log: LogId, heed_pause: bool) -> Result<Arc<Replica>> {
        if let Some(replica) = self.replica(log) {
            return Ok(replica);
        }
        let lifecycle = self.lifecycle(log);
        let _hosting = lifecycle.lock();
        // Another thread may have hosted it while this one waited.
        if let Some(replica) = self.replica(log) {
            return Ok(replica);
        }
        let now = self.clock.now();
        // An open that may cut what one refused to (the node's unclean-stop
        // report for the log is now stored) is a new attempt, not a retry.
        let may_cut = self.open_may_cut(log);
        if let OpenDue::Deferred {
            last_error,
            retry_in,
        } = self.core.open_due(log, may_cut, now)
        {
            if heed_pause {
                return Err(Error::ReplicaOpenDeferred {
                    log,
                    last_error,
                    retry_in,
                });
            }
        }
        let hosted = self.open_replica(log, may_cut);
        self.core
            .open_attempted(log, may_cut, now, hosted.as_ref().err());
        if let Ok(replica) = &hosted {
            // Opened after a controlled shutdown began (after it stopped
            // the replicas it found, or too late to be found): it takes no
            // append either (SPEC 3.5).
            if self.winding_down.load(Ordering::SeqCst) {
                replica.stop_appends_for_shutdown();
            }
        }
        hosted
    }

    /// Whether an open of `log`'s replica now may cut damage above the
    /// recovery point even where valid batches follow it
    /// ([`open_replica`](Self::open_replica)).
    fn open_may_cut(&self, log: LogId) -> bool {
        self.previous_shutdown.is_reported_unclean()
            && self.unclean_stop_reported.load(Ordering::SeqCst)
            && !self.core.is_unreported(log)
    }

    /// Opens the local replica of `log` ([`host`](Self::host)'s work);
    /// `may_cut` is [`open_may_cut`](Self::open_may_cut) as `host` read it,
    /// so the attempt and the failure it may record agree on it.
    fn open_replica(&self, log: LogId, may_cut: bool) -> Result<Arc<Replica>> {
        let dir = log_dir(&self.config.data_dir, log);
        let restarted = self.disk.exists(&dir) || self.lost_replicas.contains(&log);
        // After an unclean stop this node reported before it registered
        // (SPEC 3.5): its replicas may have lost data anyway, so recovery
        // cuts damage above the recovery point even where valid batches
        // follow it (a power loss during a roll's background flush) rather
        // than refusing the log; the replica then fetches the rest.
        // Only once the report is stored for this log: a cut that reached
        // the disk first would outlive a start that fails before its report
        // (`unclean_stop_reported`).
        let damage = if may_cut {
            DamageAboveRecoveryPoint::CutAfterReportedUncleanStop
        } else {
            DamageAboveRecoveryPoint::RefuseReplica
        };
        let storage = Log::open_recovering(
            Arc::clone(&self.disk),
            &dir,
            self.config.log.clone(),
            Arc::clone(&self.clock),
            damage,
        )?;
        let report = storage.recovery_report();
        // Only the open after a reported unclean stop cuts such records
        // (recovery logs the cut, `recovered_log_ends` the report).
        debug_assert!(may_cut || report.dropped_possibly_committed.is_none());
        if !report.is_clean() {
            tracing::warn!(%log, node = %self.local(), report = ?report, "log recovered after an unclean stop");
        }
        // SPEC 3.9: a follower below its leader's log start installs a
        // snapshot when the application keeps them; without, it reports
        // that it needs one when the application needs every record
        // (`retain_until_applied`, the default), and restarts there
        // otherwise (Kafka).
        let below_leader_start = match (
            &self.config.snapshots,
            self.config.replication.retain_until_applied,
        ) {
            (Some(_), _) => BelowLeaderStart::InstallSnapshot,
            (None, true) => BelowLeaderStart::Report,
            (None, false) => BelowLeaderStart::Restart,
        };
        let replica = Arc::new(
            Replica::new(
                log,
                self.local(),
                storage,
                self.config.replication.clone(),
                Arc::clone(&self.clock),
                Arc::clone(&self.data_arrived),
                restarted,
            )
            .with_below_leader_start(below_leader_start)
            .with_snapshots(self.config.snapshots.clone())
            .with_completions(Arc::clone(&self.completions)),
        );
        self.flush_rolls_in_background(&replica);
        let mut replicas = self.replicas.write();
        Ok(Arc::clone(replicas.entry(log).or_insert(replica)))
    }

    /// Brings the local replica in line with the coordinator's state of its
    /// log (SPEC 3.5): become leader, follower, or offline.
    fn reconcile(&self, state: &LogState) {
        self.reconcile_with(state, Some(EPOCH_BUMP_ATTEMPTS));
    }

    /// [`reconcile`](Self::reconcile), with up to `epoch_bumps` attempts to
    /// move a restarted leader to a new epoch (`None`: this state is the
    /// result of such a move, lead in it). The core decides
    /// ([`NodeCore::reconcile`]) from what this node knows: whether it
    /// stopped, and its hosted replica's role.
    fn reconcile_with(&self, state: &LogState, epoch_bumps: Option<u32>) {
        let local = LocalReplica {
            stopped: self.is_stopped(),
            hosted: self.replica(state.log).map(|replica| replica.role()),
        };
        self.drive_core(|core, out| core.reconcile(state, epoch_bumps, local, out));
    }

    /// Hosts this node's replica of `state`'s log once `state` holds
    /// whatever unclean-shutdown report this node owed its log
    /// ([`Action::HostReplica`]), then hands it to the core: one that
    /// cannot be opened to [`NodeCore::replica_unopened`], a hosted one to
    /// [`NodeCore::record_directory`], which records its directory and
    /// follows `state` on ([`Action::ReconcilePlaced`]).
    fn host_replica(&self, state: &LogState, epoch_bumps: Option<u32>) {
        // SPEC 3.5: past here the log's stored state no longer counts this
        // node eligible with records it lost in an unclean stop.
        debug_assert!(!self.core.is_unreported(state.log));
        let replica = match self.host(state.log) {
            Ok(replica) => replica,
            Err(error) => {
                crate::simulation::note_handled_error(&error);
                let lost = self.lost_replicas.contains(&state.log);
                self.drive_core(|core, out| core.replica_unopened(state, &error, lost, out));
                return;
            }
        };
        // `placed` is read after the replica is hosted, and its lock is
        // released before the record is made (the core is never entered
        // with it held), as inline: a removal on another thread unassigns
        // the replica under that lock, and only while it is not hosted
        // (`remove_replica`), so a re-host's record lands after the
        // unassign, never under it (SPEC 3.10).
        let placed = self.placed.lock().contains(&state.log);
        self.drive_core(|core, out| {
            core.record_directory(
                &replica,
                state,
                epoch_bumps,
                (self.directory_id, placed),
                out,
            )
        });
    }

    /// Follows `state` with `replica`, hosted and placed on this node's
    /// data directory ([`Action::ReconcilePlaced`]): takes the steps the
    /// core gives ([`placed_steps`]: reports to the log's unclean recovery,
    /// then the role), one at a time, each driven to its end before the
    /// next and each with where the log ends when its turn comes, as when
    /// the reports were made inline.
    fn reconcile_placed(&self, replica: &Arc<Replica>, state: &LogState, epoch_bumps: Option<u32>) {
        let (role, epoch) = replica.role();
        let lost = self.lost_replicas.contains(&state.log);
        for step in placed_steps(state, self.local(), epoch, lost) {
            match step {
                PlacedStep::ReportRecoveryCandidateEnd => self.drive_core(|core, out| {
                    core.report_recovery_candidate_end(state, replica_log_end(replica), out)
                }),
                PlacedStep::ReportEndAfterOpen => self.drive_core(|core, out| {
                    // Still not known: nothing to replace the report with.
                    if let Some(end) = replica_log_end(replica) {
                        core.report_end_after_open(state, end, out);
                    }
                }),
                PlacedStep::TakeRole => self.drive_core(|core, out| {
                    core.take_role(replica, state, (role, epoch), epoch_bumps, out)
                }),
            }
        }
    }

    /// Stops and deletes this node's replica of `log`, which the stored
    /// state no longer lists (SPEC 3.10: a reassignment completed or was
    /// cancelled without it). Its fetcher stops, the replica goes offline
    /// (appends and waiters fail with `NotLeader`, follower I/O ends) and
    /// leaves the node's map, then its directory is deleted and, once
    /// deleted, recorded as placed on no directory
    /// ([`NodeCore::replica_removed`]). Kafka's `StopReplica(delete =
    /// true)`. A replica that never opened (damaged files, EIO) has its
    /// directory deleted and unassigned all the same: left behind, its
    /// damaged copy would be opened again, and fail again, if a later move
    /// added the replica back, and the record of an earlier start would
    /// keep naming this node's directory for a log it is not in.
    fn remove_replica(&self, log: LogId) {
        let me = self.local();
        let lifecycle = self.lifecycle(log);
        let removing = lifecycle.lock();
        self.stop_fetching(log);
        let removed = self.replicas.write().remove(&log);
        if let Some(replica) = removed {
            self.core.forget_hand_over(log);
            replica.take_offline();
            if let Err(error) = replica.log().close_in_place() {
                tracing::warn!(%log, node = %me, %error, "closing a removed replica failed; deleting it anyway");
            }
            replica.retire("the replica was removed by a reassignment and its directory deleted");
        }
        self.core.forget_unopened(log);
        self.core.forget_unreported(log);
        let dir = log_dir(&self.config.data_dir, log);
        let deleted = match self.disk.remove_dir_all(&dir) {
            Ok(()) => {
                tracing::info!(%log, node = %me, dir = %dir.display(), "replica removed by a reassignment: stopped and deleted");
                true
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => true,
            Err(error) => {
                tracing::error!(%log, node = %me, dir = %dir.display(), %error, "cannot delete a removed replica's directory");
                false
            }
        };
        drop(removing);
        self.drive_core(|core, out| core.replica_removed(log, deleted, out));
    }

    /// `log`'s lock of [`lifecycles`](Self::lifecycles).
    fn lifecycle(&self, log: LogId) -> Arc<Mutex<()>> {
        Arc::clone(self.lifecycles.lock().entry(log).or_default())
    }

    fn stop_fetching(&self, log: LogId) {
        let mut fetchers = self.fetchers.lock();
        for fetcher in fetchers.values() {
            fetcher.remove(log);
        }
        // A fetcher with nothing left to fetch is stopped, as in Kafka's
        // shutdownIdleFetcherThreads.
        let mut idle: Vec<NodeId> = fetchers
            .iter()
            .filter(|(_, f)| f.log_count() == 0)
            .map(|(leader, _)| *leader)
            .collect();
        idle.sort();
        let stopped: Vec<Fetcher> = idle.iter().filter_map(|l| fetchers.remove(l)).collect();
        if !stopped.is_empty() {
            self.fetchers_version.fetch_add(1, Ordering::SeqCst);
        }
        drop(fetchers);
        for fetcher in &stopped {
            fetcher.signal_stop();
        }
        self.retired_fetchers.lock().extend(stopped);
    }

    fn start_fetching(
        &self,
        leader: NodeId,
        replica: Arc<Replica>,
        epoch: crate::types::LeaderEpoch,
    ) {
        let mut fetchers = self.fetchers.lock();
        if !fetchers.contains_key(&leader) {
            // A fetcher joins below (or none, if it cannot be started).
            self.fetchers_version.fetch_add(1, Ordering::SeqCst);
        }
        let fetcher = match fetchers.entry(leader) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            #[cfg(any(test, feature = "testing"))]
            std::collections::hash_map::Entry::Vacant(entry)
                if self.threadless.load(Ordering::SeqCst) =>
            {
                entry.insert(Fetcher::stepped(
                    self.local(),
                    self.core.incarnation_cell(),
                    leader,
                    Arc::clone(&self.transport),
                    self.config.replication.clone(),
                    self.config.snapshots.clone(),
                ))
            }
            std::collections::hash_map::Entry::Vacant(entry) => match Fetcher::start(
                self.local(),
                self.core.incarnation_cell(),
                leader,
                Arc::clone(&self.transport),
                self.config.replication.clone(),
                self.config.snapshots.clone(),
            ) {
                Ok(fetcher) => entry.insert(fetcher),
                Err(error) => {
                    tracing::error!(node = %self.local(), %leader, %error, "cannot start a fetcher thread");
                    return;
                }
            },
        };
        fetcher.add(replica, epoch);
    }

    /// Controlled shutdown, [`ControlledShutdownStep::StopAppends`]: every
    /// log this node leads stops taking appends
    /// ([`Replica::stop_appends_for_shutdown`]), in log order; each with
    /// the epoch and the log end at which they stopped.
    fn stop_appends_for_shutdown(&self) -> Vec<(Arc<Replica>, LeaderEpoch, Offset)> {
        self.replicas_in_log_order()
            .into_iter()
            .filter_map(|replica| {
                let (epoch, end) = replica.stop_appends_for_shutdown()?;
                Some((replica, epoch, end))
            })
            .collect()
    }

    /// Controlled shutdown, [`ControlledShutdownStep::HandOver`] (Kafka's
    /// `controlled.shutdown.enable`): every log of `leading`, which this
    /// node leads and whose appends stopped, waits until its
    /// in-sync followers hold everything it has (so appends in flight are
    /// committed and acknowledged), and names the first live in-sync
    /// follower, in assignment order, leader in a new epoch, without this
    /// node in the ISR (Kafka's `ControlledShutdownLeaderSelector`). The
    /// write is a compare-and-set on the log's epoch and version, like any
    /// leader's, so it loses cleanly to a concurrent change. A log whose
    /// followers are not caught up by `deadline`, that has no live in-sync
    /// follower, or whose coordinator calls do not finish by then, is left
    /// to the controller, as after a crash.
    ///
    /// The logs hand over concurrently (each on one of up to
    /// [`SHUTDOWN_WORKERS_MAX`] threads), and this returns by `deadline`
    /// whatever the coordinator does: a hand-over still in a coordinator
    /// call then is abandoned. Its call may still take effect (a
    /// compare-and-set naming a caught-up successor, which is as good as
    /// one made in time), but from then on it changes nothing on this node:
    /// the [`ShutdownGate`] is closed before this returns. The decisions
    /// and calls of each log are the core's
    /// ([`NodeCore::begin_shutdown_hand_over`]); its waits, the deadline
    /// and the gate are this driver's ([`ShutdownWorker`]).
    fn hand_over_leadership(
        shared: &Arc<NodeShared>,
        leading: Vec<(Arc<Replica>, LeaderEpoch, Offset)>,
        deadline: Instant,
    ) {
        let count = leading.len();
        let gate = Arc::new(ShutdownGate::default());
        let worker_gate = Arc::clone(&gate);
        let finished = NodeShared::run_bounded(
            shared,
            "hand over",
            leading,
            deadline,
            move |shared, (replica, epoch, end)| {
                shared.hand_over(&replica, epoch, end, deadline, &worker_gate);
            },
        );
        gate.close();
        if finished < count {
            tracing::warn!(node = %shared.local(), logs = count, finished, ?deadline,
                "controlled shutdown: the deadline passed with hand-overs still waiting for the coordinator; their logs are left to the controller");
        }
    }

    /// Names a successor for one log this node leads in `epoch`; see
    /// [`hand_over_leadership`](Self::hand_over_leadership).
    /// `end` is the log end at which appends stopped: the high watermark
    /// must pass it before anyone can take over. No coordinator call starts
    /// at or after `deadline`, and what this node does with an answer goes
    /// through `gate`.
    fn hand_over(
        &self,
        replica: &Arc<Replica>,
        epoch: LeaderEpoch,
        end: Offset,
        deadline: Instant,
        gate: &ShutdownGate,
    ) {
        let mut actions = Vec::new();
        self.core
            .begin_shutdown_hand_over(replica, epoch, end, 0, &mut actions);
        self.drive_with(
            actions,
            &ShutdownWorker {
                deadline,
                gate: Some(gate),
            },
        );
    }

    /// One step of a stepped controlled shutdown's hand-over of
    /// `replica`'s log, led in `hand_over.epoch` with appends stopped at
    /// `hand_over.end`: the attempt `hand_over.attempt` of the machine
    /// [`hand_over`](Self::hand_over) runs on its thread
    /// ([`NodeCore::begin_shutdown_hand_over`]), without its waits (the
    /// caller steps the fetches they wait for, and calls again). Over when
    /// someone else moved the leadership, when no other in-sync replica is
    /// live, when a coordinator call fails or no attempt is left (each
    /// leaves the log to the controller), or once a caught-up successor is
    /// named; waiting while no live in-sync follower has fetched up to the
    /// stopped end (the same attempt begins again), or after a lost race
    /// (the next attempt).
    #[cfg(any(test, feature = "testing"))]
    fn hand_over_step(&self, replica: &Arc<Replica>, hand_over: &SteppedHandOver) -> HandOverStep {
        let step = ShutdownStep::default();
        let mut actions = Vec::new();
        self.core.begin_shutdown_hand_over(
            replica,
            hand_over.epoch,
            hand_over.end,
            hand_over.attempt,
            &mut actions,
        );
        self.drive_with(actions, &step);
        step.outcome.get()
    }

    /// Controlled shutdown, step 2, once this node's fetchers stopped: it
    /// leaves the ISR of every log it follows, so their leaders' `acks=all`
    /// appends and high watermarks stop waiting for it now rather than
    /// when the controller sees its session end (or, without a
    /// controller, after `replica_lag_time_max`). As Kafka's controller
    /// does for a broker in controlled shutdown. A compare-and-set on the
    /// log's epoch and version; a failure is only logged. Concurrent over
    /// the logs and bounded by `deadline` as
    /// [`hand_over_leadership`](Self::hand_over_leadership) is; it changes
    /// nothing on this node, so an abandoned call needs no gate.
    fn leave_in_sync_replicas(shared: &Arc<NodeShared>, deadline: Instant) {
        let logs: Vec<LogId> = shared
            .replicas_in_log_order()
            .iter()
            .map(|replica| replica.log_id())
            .collect();
        let count = logs.len();
        let finished = NodeShared::run_bounded(
            shared,
            "leave the ISR",
            logs,
            deadline,
            move |shared, log| {
                shared.leave_in_sync_replica(
                    log,
                    &ShutdownWorker {
                        deadline,
                        gate: None,
                    },
                )
            },
        );
        if finished < count {
            tracing::warn!(node = %shared.local(), logs = count, finished,
                "controlled shutdown: the deadline passed before this node left every ISR; the controller or the leaders remove it");
        }
    }

    /// [`leave_in_sync_replicas`](Self::leave_in_sync_replicas) for one
    /// log ([`NodeCore::leave_in_sync_replica`]), carried out by `run`.
    fn leave_in_sync_replica(&self, log: LogId, run: &dyn ShutdownRun) {
        let mut actions = Vec::new();
        self.core.leave_in_sync_replica(log, &mut actions);
        self.drive_with(actions, run);
    }

    /// Runs `work` on every item, on up to [`SHUTDOWN_WORKERS_MAX`] threads
    /// at once, and returns how many items finished, once all have or
    /// `deadline` passed, whichever comes first. Work still running then
    /// is not waited for: its thread ends on its own once its coordinator
    /// call returns. `work` itself must not start a call past the deadline.
    fn run_bounded<T, F>(
        shared: &Arc<NodeShared>,
        what: &'static str,
        items: Vec<T>,
        deadline: Instant,
        work: F,
    ) -> usize
    where
        T: Send + 'static,
        F: Fn(&NodeShared, T) + Send + Sync + 'static,
    {
        wait_finished(
            NodeShared::spawn_bounded(shared, what, items, work),
            deadline,
        )
    }

    /// The first half of [`run_bounded`](Self::run_bounded): starts the
    /// work and returns what [`wait_finished`] waits on. If no thread can
    /// be started, the items run here, one after the other.
    fn spawn_bounded<T, F>(
        shared: &Arc<NodeShared>,
        what: &'static str,
        items: Vec<T>,
        work: F,
    ) -> Finished
    where
        T: Send + 'static,
        F: Fn(&NodeShared, T) + Send + Sync + 'static,
    {
        let count = items.len();
        let (done, finished) = crossbeam_channel::unbounded::<()>();
        if count == 0 {
            return Finished { count, finished };
        }
        let (queue, jobs) = crossbeam_channel::unbounded();
        for item in items {
            // Cannot fail: `jobs` is alive.
            let _ = queue.send(item);
        }
        drop(queue);
        let work = Arc::new(work);
        let mut started = 0;
        // Inside a deterministic simulation the items run here, in order,
        // as when no thread can be started.
        let workers = if crate::simulation::simulating() {
            0
        } else {
            count.min(SHUTDOWN_WORKERS_MAX)
        };
        for index in 0..workers {
            let jobs = jobs.clone();
            let done = done.clone();
            let work = Arc::clone(&work);
            let worker_shared = Arc::clone(shared);
            let spawned = std::thread::Builder::new()
                .name(format!("isrlog-shutdown-{}-{index}", shared.local().0))
                .spawn(move || {
                    while let Ok(item) = jobs.recv() {
                        work(&worker_shared, item);
                        let _ = done.send(());
                    }
                });
            match spawned {
                // Detached: a worker still in a call at the deadline ends
                // on its own.
                Ok(_detached) => started += 1,
                Err(error) => {
                    tracing::warn!(node = %shared.local(), %error, what, "controlled shutdown: cannot start a worker thread");
                    break;
                }
            }
        }
        if started == 0 {
            while let Ok(item) = jobs.try_recv() {
                work(shared, item);
                let _ = done.send(());
            }
        }
        Finished { count, finished }
    }

    /// Runs one step of the core and [`drive`](Self::drive)s what it
    /// asks for.
    fn drive_core(&self, step: impl FnOnce(&NodeCore, &mut Vec<Action>)) {
        let mut actions = Vec::new();
        step(&self.core, &mut actions);
        self.drive(actions);
    }

    /// The threaded runtime's driver of the core, which the simulator's
    /// stepped node uses too: carries out `actions` on the calling thread,
    /// depth-first in the order they came. A coordinator call is made at
    /// once and its answer handed straight back to the core, whose actions
    /// are carried out before the next of `actions`: every call happens in
    /// the same order and on the same thread as when the code made it
    /// inline, which keeps production and the simulator's traces as they
    /// were (issue 28). The caller holds no node lock: the core may be
    /// entered again.
    fn drive(&self, actions: Vec<Action>) {
        self.drive_with(actions, &NoShutdown);
    }

    /// [`drive`](Self::drive) with a controlled shutdown's actions carried
    /// out by `run` (the threaded workers' or the stepped node's): a call
    /// of a continuation the shutdown's deadline bounds
    /// ([`Continuation::is_bounded_by_shutdown_deadline`]) is not made
    /// once `run` says it is late, which ends its chain (its log is left
    /// to the controller); its waits and what a hand-over that named a
    /// successor does are `run`'s. Every other action is carried out as
    /// `drive` does.
    fn drive_with(&self, actions: Vec<Action>, run: &dyn ShutdownRun) {
        // A stack of what is still to do, the next action on top.
        // (Reversed in place: the simulator drives the core after every
        // step, and a copy per pass was a few per cent of its time.)
        let mut to_do = actions;
        to_do.reverse();
        while let Some(action) = to_do.pop() {
            match action {
                Action::Call { call, then } => {
                    if then.is_bounded_by_shutdown_deadline() && run.late(self, &then) {
                        continue;
                    }
                    let answer = self.call_coordinator(call);
                    let mut next = Vec::new();
                    self.core
                        .handle(Input::Answered { then, answer }, &mut next);
                    to_do.extend(next.into_iter().rev());
                }
                Action::HostReplica { state, epoch_bumps } => {
                    self.host_replica(&state, epoch_bumps)
                }
                Action::RemoveReplica(log) => self.remove_replica(log),
                Action::RemoveRoleless(log) => {
                    // Decided on a read made while the replica had no
                    // role: one that took a role since (a move added it
                    // back, another thread's reconcile) is left to the
                    // next notification, which has the epoch check a
                    // hosted replica's removal needs (helper-154's review).
                    if self
                        .replica(log)
                        .is_some_and(|replica| core::has_taken_no_role(replica.role()))
                    {
                        self.remove_replica(log);
                    }
                }
                Action::RemoveUnopened(log) => {
                    // Decided on a read made while the replica was not
                    // open: one that opened since (another thread's
                    // reconcile) is left to the next notification, which
                    // has the epoch check a hosted replica's removal needs
                    // (review of 72edcf2).
                    if self.replica(log).is_none() && self.core.is_unopened(log) {
                        self.remove_replica(log);
                    }
                }
                Action::MarkPlaced(log) => {
                    self.placed.lock().insert(log);
                }
                Action::Unplace { log, unassign } => {
                    // Under `placed`'s lock, and only while the replica is
                    // not hosted again: a reconcile that adds it back (on
                    // another thread) hosts it before it records its
                    // directory, and checks `placed` first, so its record
                    // lands after this one, never under it (helper-67's
                    // review of 3c31faa). The core is entered only once
                    // the lock is released (it is not reentrant).
                    let mut placed = self.placed.lock();
                    placed.remove(&log);
                    let answered = match unassign {
                        Some((call, then)) if !self.replicas.read().contains_key(&log) => {
                            Some((then, self.call_coordinator(call)))
                        }
                        _ => None,
                    };
                    drop(placed);
                    if let Some((then, answer)) = answered {
                        let mut next = Vec::new();
                        self.core
                            .handle(Input::Answered { then, answer }, &mut next);
                        to_do.extend(next.into_iter().rev());
                    }
                }
                Action::RetryUnassign { log, call, then } => {
                    // As `Unplace`'s unassign: under `placed`'s lock, and
                    // only while the replica is neither hosted nor placed
                    // again (its own record then supersedes this one).
                    let placed = self.placed.lock();
                    let answer = (!placed.contains(&log)
                        && !self.replicas.read().contains_key(&log))
                    .then(|| self.call_coordinator(call));
                    drop(placed);
                    match answer {
                        Some(answer) => {
                            let mut next = Vec::new();
                            self.core
                                .handle(Input::Answered { then, answer }, &mut next);
                            to_do.extend(next.into_iter().rev());
                        }
                        None => self.core.forget_unassign_failures(log),
                    }
                }
                Action::ReconcilePlaced {
                    replica,
                    state,
                    epoch_bumps,
                } => self.reconcile_placed(replica.shared(), &state, epoch_bumps),
                Action::Reconcile { state, epoch_bumps } => {
                    self.reconcile_with(&state, epoch_bumps)
                }
                Action::StopFetching { log, then } => {
                    // The fetchers' lock is released before the core is
                    // entered again (it is not reentrant).
                    self.stop_fetching(log);
                    let mut next = Vec::new();
                    self.core.handle(Input::FetchingStopped(then), &mut next);
                    to_do.extend(next.into_iter().rev());
                }
                Action::ChangeRole(change) => {
                    let result = change_role(&change);
                    // The time of the change, for a failed leader's
                    // resignation rate limit: the core reads no clock.
                    let now = self.clock.now();
                    let mut next = Vec::new();
                    self.core.handle(
                        Input::RoleChanged {
                            change,
                            result,
                            now,
                        },
                        &mut next,
                    );
                    to_do.extend(next.into_iter().rev());
                }
                Action::StartFetching {
                    leader,
                    replica,
                    epoch,
                } => self.start_fetching(leader, Arc::clone(replica.shared()), epoch),
                Action::WaitHighWatermark { above, until, then } => {
                    // A real wait, on real time; a node without threads
                    // does not wait (its caller steps the fetches that move
                    // the high watermark, and steps the hand-over again on
                    // its next wake-up).
                    if !self.is_threadless() {
                        let _ = then
                            .replica()
                            .get()
                            .wait_for_high_watermark_above(above, Instant::now() + until);
                    }
                    let mut next = Vec::new();
                    self.core
                        .handle(Input::HighWatermarkWaited(then), &mut next);
                    to_do.extend(next.into_iter().rev());
                }
                Action::ShutdownWait { pass, wait } => {
                    if let Some(waited) = run.wait(self, pass, wait) {
                        let mut next = Vec::new();
                        self.core.handle(waited, &mut next);
                        to_do.extend(next.into_iter().rev());
                    }
                }
                Action::ShutdownHandedOver {
                    log,
                    successor,
                    state,
                } => run.handed_over(self, log, successor, &state),
                Action::RetryUnopened => {
                    let mut next = Vec::new();
                    self.core.retry_unopened(&mut next);
                    to_do.extend(next.into_iter().rev());
                }
                Action::RetryRecoveryReports => {
                    let mut next = Vec::new();
                    self.core.retry_recovery_reports(&mut next);
                    to_do.extend(next.into_iter().rev());
                }
                Action::ControlDuties {
                    idle_flush,
                    retention,
                } => self.run_control_duties(idle_flush, retention),
                Action::ExpireDeadlines => self.expire_deadlines(),
                Action::QueueIsrProposal(log) => {
                    let _ = self.commands.try_send(Command::IsrProposal(log));
                }
                Action::QueueIncarnationRefresh => {
                    let _ = self.commands.try_send(Command::RefreshIncarnations);
                }
                Action::NoteStaleFetch {
                    from,
                    incarnation,
                    check,
                } => {
                    if let Some(suppressed) = self.warnings.admit(Warning::StaleIncarnation) {
                        tracing::warn!(node = %self.local(), %from, %incarnation,
                            current = ?self.core.peer_incarnations().get(from), ?check, suppressed,
                            "refusing a fetch that is not from its sender's current incarnation");
                    }
                }
                Action::Background { .. } => {
                    // Only a log's hand-off asks for it, and its hook
                    // carries it out itself (`flush_rolls_in_background`),
                    // telling the log whether the work was taken.
                    debug_assert!(false, "{action:?} reached drive: a log's hand-off left it");
                }
                Action::LookAtFetch { .. } | Action::Respond(_) | Action::Park { .. } => {
                    // Only a fetch's serving asks for these, and it carries
                    // them out itself (`serve_fetch`), knowing the fetch.
                    debug_assert!(false, "{action:?} reached drive: a fetch's serving left it");
                }
            }
        }
    }

    /// Makes one coordinator call of the core for this node.
    fn call_coordinator(&self, call: CoordinatorCall) -> Answer {
        match call {
            CoordinatorCall::Heartbeat => Answer::Done(self.coordinator.heartbeat(self.local())),
            CoordinatorCall::RegisterNode { session_timeout } => Answer::Registered(
                self.coordinator
                    .register_node(self.local(), session_timeout),
            ),
            CoordinatorCall::LiveNodeIncarnations => {
                Answer::Incarnations(self.coordinator.live_node_incarnations())
            }
            CoordinatorCall::UnregisterNode => {
                Answer::Done(self.coordinator.unregister_node(self.local()))
            }
            CoordinatorCall::LiveNodes => Answer::LiveNodes(self.coordinator.live_nodes()),
            CoordinatorCall::LogState(log) => Answer::LogState(self.coordinator.log_state(log)),
            CoordinatorCall::RecordReplicaDirectories { directory, logs } => Answer::Done(
                self.coordinator
                    .record_replica_directories(self.local(), directory, &logs),
            ),
            CoordinatorCall::CompareAndSet {
                log,
                epoch,
                version,
                update,
            } => Answer::Cas(
                self.coordinator
                    .compare_and_set(log, epoch, version, update),
            ),
        }
    }

    fn resync(&self) {
        match self.coordinator.logs() {
            Ok(states) => {
                for state in states {
                    self.reconcile(&state);
                }
            }
            Err(error) => {
                tracing::warn!(node = %self.local(), %error, "cannot re-read coordinator state")
            }
        }
    }

    /// A leader's answer to a follower's fetch: the core's
    /// ([`Input::FetchArrived`]; refused if not from the sender's current
    /// incarnation), served by [`serve_fetch`](Self::serve_fetch) until it
    /// answers, parked on the data watch in between (the long poll), for
    /// at most the request's `wait_max` (capped by `request_timeout`).
    fn handle_fetch(&self, from: NodeId, request: &FetchRequest) -> Response {
        let mut actions = Vec::new();
        self.core.handle(
            Input::FetchArrived {
                from,
                incarnation: request.incarnation,
                now: self.clock.now(),
            },
            &mut actions,
        );
        let deadline = Instant::now() + self.fetch_wait(request);
        loop {
            let (arrival, seen, crowded) =
                match self.serve_fetch(from, request, actions, || Instant::now() >= deadline) {
                    FetchPoll::Answer(response) => return response,
                    FetchPoll::Park {
                        arrival,
                        seen,
                        crowded,
                    } => (arrival, seen, crowded),
                };
            // Spin only while few producers wait on these logs: with
            // dozens of threads blocked in `append`, the cores have other
            // work, and every yield of the spin is a context switch (as
            // costly as parking) that only delays them.
            let spin = if crowded {
                Duration::ZERO
            } else {
                self.config.replication.spin_before_park
            };
            let _ = self.data_arrived.wait_at_least(seen + 1, deadline, spin);
            actions = Vec::new();
            self.core
                .handle(Input::FetchRecheck { arrival }, &mut actions);
        }
    }

    /// How long a parked fetch waits for data at most (the long poll):
    /// the request's `wait_max`, capped by `request_timeout`, so that the
    /// follower's call, which ends by its own timeout, gets an answer
    /// first. The rule of both drivers: this handler's, and a
    /// simulator's, through [`SteppedNode::fetch_wait`] (issue 28).
    fn fetch_wait(&self, request: &FetchRequest) -> Duration {
        request
            .wait_max
            .min(self.config.replication.request_timeout)
    }

    /// Carries out the core's `actions` for `from`'s fetch `request`,
    /// depth-first as [`drive`](Self::drive) does, until the core answers
    /// it or parks it: a look ([`Action::LookAtFetch`]) reads the logs
    /// ([`look_at_fetch`](Self::look_at_fetch)) and hands the look back to
    /// the core, with `expired()` (asked after the look) saying whether the
    /// fetch's wait is over. Other actions go to `drive`. Never waits: the
    /// threaded handler parks on the data watch; a simulator looks again
    /// when it likes (issue 28).
    fn serve_fetch(
        &self,
        from: NodeId,
        request: &FetchRequest,
        actions: Vec<Action>,
        expired: impl Fn() -> bool,
    ) -> FetchPoll {
        // A stack of what is still to do, the next action on top.
        // (Reversed in place: the simulator drives the core after every
        // step, and a copy per pass was a few per cent of its time.)
        let mut to_do = actions;
        to_do.reverse();
        while let Some(action) = to_do.pop() {
            match action {
                Action::LookAtFetch { arrival } => {
                    let look = self.look_at_fetch(from, request, arrival);
                    let expired = expired();
                    let mut next = Vec::new();
                    self.core.handle(
                        Input::FetchLooked {
                            arrival,
                            look,
                            expired,
                        },
                        &mut next,
                    );
                    to_do.extend(next.into_iter().rev());
                }
                Action::Respond(response) => {
                    debug_assert!(to_do.is_empty(), "actions after a fetch's answer");
                    return FetchPoll::Answer(response);
                }
                Action::Park {
                    arrival,
                    seen,
                    crowded,
                } => {
                    debug_assert!(to_do.is_empty(), "actions after a fetch's park");
                    return FetchPoll::Park {
                        arrival,
                        seen,
                        crowded,
                    };
                }
                other => self.drive(vec![other]),
            }
        }
        // Every fetch input ends in an answer, a park or another look
        // (`NodeCore::fetch_arrived`, `fetch_looked`, `Input::FetchRecheck`).
        panic!("the core left a fetch neither answered nor parked")
    }

    /// The refusal of any request a stopping node, or its list of logs,
    /// rules out before it reaches a log; `None` to go on.
    fn refuse_request(&self, from: NodeId, request: &Request) -> Option<Response> {
        match request {
            Request::Fetch(fetch) => self.refuse_listed(from, fetch.logs.iter().map(|l| l.log)),
            Request::EpochEndOffsets(query) => {
                self.refuse_listed(from, query.logs.iter().map(|q| q.log))
            }
            Request::Snapshot(_) => self.refuse_listed(from, std::iter::empty()),
        }
    }

    /// [`refuse_request`](Self::refuse_request) for a request naming `logs`.
    fn refuse_listed(
        &self,
        from: NodeId,
        logs: impl ExactSizeIterator<Item = LogId>,
    ) -> Option<Response> {
        if self.stop.load(Ordering::SeqCst) {
            return Some(Response::Error(ErrorCode::Shutdown));
        }
        let hosted = self.replicas.read().len();
        let refusal = check_log_list(logs, hosted).err()?;
        if let Some(suppressed) = self.warnings.admit(Warning::InvalidRequest) {
            tracing::warn!(node = %self.local(), %from, %refusal, suppressed, "refusing a request: {refusal}");
        }
        Some(Response::Error(ErrorCode::InvalidRequest))
    }

    /// One look at `from`'s fetch `request`, dated by `arrival`, without
    /// blocking ([`Action::LookAtFetch`]): each log's answer
    /// (`Replica::answer_fetch`, which records the follower's progress),
    /// starting at the next log of a rotation so that no log is always
    /// last in the budget ([`FetchBudget`]), then whether the node is
    /// stopping.
    fn look_at_fetch(
        &self,
        from: NodeId,
        request: &FetchRequest,
        arrival: FetchArrival,
    ) -> FetchLook {
        let incarnation = request.incarnation;
        let count = request.logs.len();
        let seen = self.data_arrived.get();
        let mut budget = FetchBudget::new(
            request.bytes_max,
            self.config.replication.fetch_response_bytes_max,
        );
        let mut proposals = false;
        let mut crowded = false;
        let mut off_line = false;
        let mut answers: Vec<Option<FetchedLog>> = vec![None; count];
        let start = match count {
            0 => 0,
            _ => (self.fetch_rotation.fetch_add(1, Ordering::Relaxed) % count as u64) as usize,
        };
        for index in (start..count).chain(0..start) {
            let fetch = &request.logs[index];
            let answer = match self.replica(fetch.log) {
                Some(replica) => {
                    let answer = replica.answer_fetch(
                        from,
                        fetch,
                        budget.bytes_max(),
                        budget.min_one_batch(),
                        arrival,
                        incarnation,
                    );
                    proposals |= replica.has_isr_proposal();
                    crowded |= replica.producers_crowded();
                    // Accepted, so its epoch is the leader's.
                    off_line |=
                        answer.error.is_none() && !fetch.is_on_line_of(fetch.current_leader_epoch);
                    answer
                }
                None => unknown_log(fetch.log),
            };
            budget.spend(&answer);
            answers[index] = Some(answer);
        }
        // Every index of 0..count was visited once above.
        let logs: Vec<FetchedLog> = answers.into_iter().flatten().collect();
        debug_assert_eq!(logs.len(), count);
        FetchLook {
            logs,
            seen,
            crowded,
            proposals,
            stopped: self.stop.load(Ordering::SeqCst),
            off_line,
        }
    }
}

/// Where a fetch's serving ([`NodeShared::serve_fetch`]) stands.
#[derive(Debug)]
pub(crate) enum FetchPoll {
    /// The response to send now.
    Answer(Response),
    /// Nothing to answer yet: look again with `arrival` once the data
    /// watch moves past `seen` (or the fetch's wait is over). `crowded`:
    /// many producers wait on these logs, so a waiting thread should not
    /// spin.
    Park {
        arrival: FetchArrival,
        seen: u64,
        crowded: bool,
    },
}

impl RequestHandler for NodeHandler {
    fn handle(&self, from: NodeId, request: Request) -> Response {
        let shared = &self.shared;
        if let Some(refusal) = shared.refuse_request(from, &request) {
            return refusal;
        }
        match request {
            Request::Fetch(fetch) => shared.handle_fetch(from, &fetch),
            Request::Snapshot(snapshot) => Response::Snapshot(match shared.replica(snapshot.log) {
                // A request must come from the replica it names (a
                // transport that knows its peer says so in `from`).
                Some(_) if from != snapshot.replica => SnapshotResponse {
                    log: snapshot.log,
                    error: ErrorCode::InvalidRequest,
                    snapshot_offset: Offset::ZERO,
                    snapshot_epoch: None,
                    snapshot_bytes: 0,
                    position: snapshot.position,
                    crc32: 0,
                    data: bytes::Bytes::new(),
                },
                Some(replica) => replica
                    .answer_snapshot(&snapshot, shared.config.snapshots.as_ref().map(|s| &*s.0)),
                None => SnapshotResponse {
                    log: snapshot.log,
                    error: ErrorCode::UnknownLog,
                    snapshot_offset: Offset::ZERO,
                    snapshot_epoch: None,
                    snapshot_bytes: 0,
                    position: snapshot.position,
                    crc32: 0,
                    data: bytes::Bytes::new(),
                },
            }),
            Request::EpochEndOffsets(query) => {
                let logs = query
                    .logs
                    .iter()
                    .map(|q| match shared.replica(q.log) {
                        Some(replica) => {
                            let (error, end) =
                                replica.epoch_end_offset(q.current_leader_epoch, q.epoch);
                            EpochAnswer {
                                log: q.log,
                                error,
                                end,
                            }
                        }
                        None => EpochAnswer {
                            log: q.log,
                            error: ErrorCode::UnknownLog,
                            end: None,
                        },
                    })
                    .collect();
                Response::EpochEndOffsets(EpochEndOffsetsResponse { logs })
            }
        }
    }
}

/// The deadline timer: every [`NodeCore::deadline_tick`], the core's
/// [`NodeCore::deadlines_due`] (which fails the pipelined appends past
/// their deadline). It never calls the coordinator, so a coordinator that
/// hangs does not make timeouts late (the control loop, which does, could
/// not promise that).
fn deadline_loop(shared: &NodeShared) {
    while !shared.stop.load(Ordering::SeqCst) {
        std::thread::sleep(shared.core.deadline_tick());
        shared.drive_core(NodeCore::deadlines_due);
    }
}

impl NodeShared {
    /// One pass of the deadline timer: fails every pipelined append past
    /// its deadline with `Timeout`. It never blocks and never calls the
    /// coordinator; the core asks for it ([`Action::ExpireDeadlines`])
    /// when its deadline timer fires: on the deadline thread every
    /// [`NodeCore::deadline_tick`], on a stepped node whenever its driver
    /// likes (issue 28).
    pub(crate) fn expire_deadlines(&self) {
        for replica in self.replicas.read().values() {
            replica.expire_pipelined();
        }
    }
}

/// The control thread: a thin driver of [`ControlCore`]. It waits for a
/// coordinator event, a command or the core's tick, hands what came to the
/// core, then lets the core run its timed duties, until the node stops.
/// Time is the node's clock; only the wait itself is real time.
fn control_loop(
    shared: &NodeShared,
    events: &Receiver<CoordinatorEvent>,
    commands: &Receiver<Command>,
) {
    let mut core = ControlCore::new(shared, shared.clock.now());
    while !shared.stop.load(Ordering::SeqCst) {
        select! {
            recv(events) -> event => match event {
                Ok(event) => core.on_event(shared, event),
                Err(_) => {
                    tracing::warn!(node = %shared.local(), "coordinator subscription closed");
                    std::thread::sleep(core.tick());
                }
            },
            recv(commands) -> command => {
                if let Ok(command) = command {
                    core.on_command(shared, command);
                }
            },
            default(core.tick()) => {}
        }
        core.on_tick(shared, shared.clock.now());
    }
}

/// The node's control duties without a thread of their own: what the
/// control thread ([`control_loop`]) does between two waits, so that a
/// simulator can do the same in one thread on simulated time (issue 28).
/// A driver hands each coordinator event to [`on_event`](Self::on_event)
/// and each command to [`on_command`](Self::on_command), and after every
/// wake-up (an event, a command, or [`next_wake`](Self::next_wake)
/// reached) calls [`on_tick`](Self::on_tick) with the node's clock's time.
/// It holds only the timers, which the core keeps and fires
/// ([`ControlTimers`], [`NodeCore::control_tick`]); everything else lives
/// in [`NodeShared`].
#[derive(Debug)]
pub(crate) struct ControlCore {
    /// The control pass's timers.
    timers: ControlTimers,
}

impl ControlCore {
    /// The core of a node starting at `now` (its clock's time): the first
    /// heartbeat is due at once, the other duties one interval later.
    pub(crate) fn new(shared: &NodeShared, now: Instant) -> ControlCore {
        ControlCore {
            timers: ControlTimers::new(TimerIntervals::of(&shared.config), now),
        }
    }

    /// The longest a driver waits between two [`on_tick`](Self::on_tick)s.
    pub(crate) fn tick(&self) -> Duration {
        self.timers.tick()
    }

    /// When the next [`on_tick`](Self::on_tick) is due, on the node's
    /// clock: the earliest timed duty, and at most one tick after the last.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn next_wake(&self) -> Instant {
        self.timers.next_wake()
    }

    /// Follows one coordinator notification. A winding-down node follows
    /// role changes but makes no coordinator call of its own.
    pub(crate) fn on_event(&self, shared: &NodeShared, event: CoordinatorEvent) {
        let winding_down = shared.winding_down.load(Ordering::SeqCst);
        match event {
            CoordinatorEvent::LogChanged(state) => shared.reconcile(&state),
            CoordinatorEvent::Resync if !winding_down => {
                shared.drive_core(NodeCore::refresh_incarnations);
                shared.resync();
            }
            // A node came, went, or registered again: its incarnation may
            // have changed.
            CoordinatorEvent::NodesChanged { .. } if !winding_down => {
                shared.drive_core(NodeCore::refresh_incarnations)
            }
            _ => {}
        }
    }

    /// Carries out one command of the node's other threads (none while
    /// winding down: each is a coordinator call).
    pub(crate) fn on_command(&self, shared: &NodeShared, command: Command) {
        if shared.winding_down.load(Ordering::SeqCst) {
            return;
        }
        match command {
            Command::IsrProposal(log) => {
                if let Some(replica) = shared.replica(log) {
                    if let Some(proposal) = replica.take_isr_proposal() {
                        shared.drive_core(|core, out| core.submit_isr(&replica, proposal, out));
                    }
                }
            }
            Command::RefreshIncarnations => shared.drive_core(NodeCore::refresh_incarnations),
        }
    }

    /// The timed duties due at `now` (the node's clock), in this order:
    /// report retries, heartbeat (or registering again), the periodic
    /// flush, joining retired fetchers, retention, then each replica's
    /// tick (pipelined appends, a failed leader's resignation, settling or
    /// submitting ISR changes, hand-overs). The core decides which are due
    /// ([`NodeCore::control_tick`]). A stopped or winding-down node does
    /// none of them.
    pub(crate) fn on_tick(&mut self, shared: &NodeShared, now: Instant) {
        let timers = &mut self.timers;
        shared.drive_core(|core, out| core.control_tick(timers, now, out));
    }
}

impl NodeShared {
    /// The driver's part of a control pass ([`Action::ControlDuties`]):
    /// the idle flush if it fired, joining the fetchers that finished,
    /// retention if it fired, then each replica's tick.
    fn run_control_duties(&self, idle_flush: bool, retention: bool) {
        if idle_flush {
            self.flush_idle_logs();
        }
        // Join fetchers that have finished since they were told to stop.
        self.retired_fetchers.lock().retain(|f| !f.is_finished());
        let replicas: Vec<Arc<Replica>> = self.replicas.read().values().cloned().collect();
        if retention {
            for replica in &replicas {
                replica.apply_retention();
                // Producer ids idle past `producer_id_expiration` are
                // forgotten on a timer too, not only at segment roll.
                let expired = replica.log().remove_expired_producers();
                if expired > 0 {
                    tracing::debug!(log = %replica.log_id(), expired, "expired idle producer ids");
                }
            }
        }
        for replica in replicas {
            // Each step below may call the coordinator: a stopping node's
            // control thread ends after the call it is in, not after one
            // call per log.
            if self.is_stopped() {
                break;
            }
            self.tick_replica(&replica);
        }
    }
}

impl NodeShared {
    /// The periodic flush of `FlushPolicy::Every`: flushes every log with
    /// unflushed records (an idle log is not flushed by its appends).
    fn flush_idle_logs(&self) {
        for replica in self.replicas.read().values() {
            if replica.log().flushed_offset() < replica.log().log_end_offset() {
                if let Err(error) = replica.log().flush() {
                    tracing::error!(log = %replica.log_id(), %error, "periodic flush failed");
                }
            }
        }
    }

    /// One replica's share of a control pass: the pipelined appends' tick,
    /// then what the core decides comes first ([`replica_tick`]): a
    /// failed leader's resignation, or settling an ISR change in flight,
    /// or the hand-overs and the ISR's own tick. Each step's actions are
    /// carried out before the next step reads the replica.
    fn tick_replica(&self, replica: &Arc<Replica>) {
        replica.tick_pipelined();
        let failed_leader = (replica.role().0 == Role::Leader && replica.log().is_poisoned())
            || replica.leadership_failed();
        // Read only when it decides something: not for a failed leader.
        let unsettled = !failed_leader && replica.unsettled_isr_change().is_some();
        // The hand-overs' and the resignation's timers are on the node's
        // clock, so that a simulator moves them (issue 28).
        match replica_tick(failed_leader, unsettled) {
            ReplicaTick::Resign => {
                let now = self.clock.now();
                self.drive_core(|core, out| core.resign_failed_leader_when_due(replica, now, out));
            }
            ReplicaTick::SettleIsrChange => {
                self.drive_core(|core, out| core.settle_isr(replica, out));
                self.core
                    .end_overdue_hand_over_while_unsettled(replica, self.clock.now());
            }
            ReplicaTick::HandOversAndIsr => {
                self.core.hand_over_from_a_stuck_application(replica);
                let now = self.clock.now();
                self.drive_core(|core, out| core.progress_hand_over(replica, now, out));
                let proposal = replica.take_isr_proposal().or_else(|| replica.tick());
                if let Some(proposal) = proposal {
                    self.drive_core(|core, out| core.submit_isr(replica, proposal, out));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_lost_its_data_only_if_placed_on_another_directory_or_gone() {
        let here = DirectoryId(7);
        let hosted = [LogId(1), LogId(2), LogId(3), LogId(4), LogId(5)];
        let recorded: HashMap<LogId, DirectoryId> = [
            (LogId(1), here),                    // placed here, held: kept
            (LogId(2), DirectoryId(8)),          // placed on another disk: lost
            (LogId(3), here),                    // placed here, its directory gone: lost
            (LogId(4), DirectoryId::UNASSIGNED), // its copy deleted: nothing to lose
        ]
        .into_iter()
        .collect(); // LogId(5): never placed, never held a record
        let lost = lost_replicas(&hosted, &recorded, here, |log| log != LogId(3));
        let mut lost: Vec<LogId> = lost.into_iter().collect();
        lost.sort();
        assert_eq!(lost, [LogId(2), LogId(3)]);
    }

    #[test]
    fn log_list_rule_table() {
        let ids = |ids: &[u32]| ids.iter().map(|id| LogId(*id)).collect::<Vec<_>>();
        // (logs named, logs hosted, verdict)
        let cases = [
            (ids(&[]), 0, Ok(())),
            (ids(&[1]), 1, Ok(())),
            (ids(&[1, 2, 3]), 5, Ok(())),
            (
                ids(&[1]),
                0,
                Err(LogListRefusal::TooMany {
                    named: 1,
                    hosted: 0,
                }),
            ),
            (
                ids(&[1, 2, 3]),
                2,
                Err(LogListRefusal::TooMany {
                    named: 3,
                    hosted: 2,
                }),
            ),
            (ids(&[1, 2, 1]), 5, Err(LogListRefusal::Duplicate(LogId(1)))),
            (ids(&[4, 4]), 2, Err(LogListRefusal::Duplicate(LogId(4)))),
        ];
        for (named, hosted, want) in cases {
            assert_eq!(
                check_log_list(named.iter().copied(), hosted),
                want,
                "{named:?} with {hosted} hosted"
            );
        }
    }
}
