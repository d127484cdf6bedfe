//! One simulated run: nodes opened without threads
//! ([`SteppedNode`](crate::node::SteppedNode)) on simulated disks, the
//! memory coordinator without its expiry thread, a [`ManualClock`] for
//! every clock, clients that append (plain, and through an idempotent
//! producer: [`ProducerClient`]), and faults, all stepped on the calling
//! thread from one seed.
//!
//! A run has three, four or five nodes ([`SimConfig::nodes`]) and
//! replicates one, two or three logs on them ([`SimConfig::logs`]), each
//! on three of the nodes (replication factor 3, drawn per log when there
//! are more nodes: [`initial_replicas`]), with its own clients and checks
//! ([`LogRun`]); a node that holds no replica of a log still runs (it may
//! lead another, hold the controller's seat, and be a reassignment's
//! target). The nodes' sessions, fetches (one carries every log a
//! follower fetches from that leader), controlled stops, background work
//! and faults are shared by a node's logs, as in production.
//!
//! The run owns the agenda and the checks: after every event every live
//! node handles what reached it (coordinator events, commands, its timers,
//! its deadline and completion passes) until nothing more happens, and the
//! clients collect the outcomes their appends got. What every node does on
//! each step is the node's own code, not a model of it.
//!
//! Followers fetch through their fetchers' sessions
//! ([`FetchSession`](crate::replication::FetchSession)); the run carries
//! each fetch over the simulated network ([`SimNetwork`]: loss, delay,
//! duplication, partitions) to the leader, which looks at it as its handler
//! would
//! ([`SteppedNode::receive_fetch`](crate::node::SteppedNode::receive_fetch))
//! and, with nothing to answer yet, parks it until data arrives or its
//! wait is over; a fetch that gets no
//! answer fails at its deadline, as a transport call would. Faults are
//! process crashes and power losses, half of them tearing unsynced writes
//! (with `FlushPolicy::Always`, so G1(b) holds an acknowledged record
//! through both; in half the runs `Never` or `Every`, and then only one
//! node, drawn, ever loses power or its disk: G1(a) and G1(c), see
//! [`FlushDraw`]), a lost disk, `EIO` from writes and syncs (in half the
//! runs, drawn apart, from any operation one time in two: opens, reads,
//! length changes, directory entries), full disks
//! (`ENOSPC` until an operator frees space), bit flips on one node's disk
//! (replaced at the calm if one is in a segment or checkpoint its reads
//! see), disk latency (a node's messages leave once its
//! disk work is done, see [`Run::busy_for`]), and network faults.
//!
//! In half the runs an operator also stops nodes cleanly now and then and
//! starts them again (controlled shutdowns, SPEC 3.5, stepped:
//! [`SteppedNode::step_controlled_shutdown`](crate::node::SteppedNode::step_controlled_shutdown));
//! its actions are drawn from a stream of their own, so that a run that
//! draws none is, event for
//! event, the run it was before. So are the applications of
//! [`application`] (SPEC 3.9: applied positions, deletion, snapshots).

use std::collections::{btree_map, BTreeMap};
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[path = "application.rs"]
mod application;

use self::application::{AppEvent, ApplicationCounts, Applications};
use super::blocking::{Began, BlockingClients};
use super::network::{NetworkFaults, SimNetwork, SlowMessages};
use super::producer::{ProducerClient, Sent};
use super::schedule::Schedule;
use super::trace::Trace;
use crate::config::ReplicationConfig;
use crate::coordinator::ControllerConfig;
use crate::node::FetchPoll;
use crate::record::RecordBatchBuilder;
use crate::replication::AppendHandle;
use crate::replication::{FetchArrival, FetchInFlight, FetchSession, NextFetch};
use crate::rng::{mix64, SplitMix64};
use crate::simulation::SimulationGuard;
use crate::storage::disk::{DiskOperation, EioPlan, FlippedBit, Latency, SimDisk};
use crate::sync::Arc;
use crate::testing::harness::{
    Disks, Harness, Loss, MemoryCoordination, NodeSettings, Stepped, SteppedProcess, SteppedWire,
};
use crate::testing::SessionEnd;
use crate::transport::{FetchRequest, Response, TransportError};
use crate::types::LeaderEpoch;
use crate::{
    Acks, Clock, Coordinator, Error, FlushPolicy, Isolation, LogConfig, LogId, ManualClock,
    MemoryCoordinator, NodeId, Offset, PreviousShutdown, ProducerConfig,
};

/// The id of a run's `log`-th log (from 0): 1, 2, 3.
fn log_id(log: usize) -> LogId {
    LogId(log as u32 + 1)
}

/// Salt of the draw of a run's number of logs ([`SimConfig::new`]): a
/// stream apart from the run's, so that a single-log run is, event for
/// event, the run it was before runs had several logs.
const LOGS_STREAM_SALT: u64 = 0x0_1065_C0DE;

/// Salt of the draw of a run's number of nodes ([`SimConfig::new`]): a
/// stream apart from the run's, so that a three-node run is, event for
/// event, the run it was before runs had more nodes.
const NODES_STREAM_SALT: u64 = 0x9_0DE5_C0DE;

/// The most nodes a run has (drawn, or asked for with `ISRLOG_SIM_NODES`).
const NODES_MAX: usize = 5;

/// Salt of the generator that places each log's replicas on three of a
/// run's nodes when it has more ([`initial_replicas`]; a three-node run
/// draws nothing from it).
const REPLICAS_STREAM_SALT: u64 = 0x0_2E91_1CA5;

/// How many replicas each log has (on the first ones of its nodes, when
/// a run has fewer): a real deployment's replication factor.
const REPLICATION_FACTOR: usize = 3;

/// The nodes' `min_insync_replicas`, whatever the number of nodes: an
/// `acks=all` append needs two copies of three.
const MIN_INSYNC_REPLICAS: usize = 2;

/// Salt of the generator that spreads the clients' appends, the
/// reassignments and the producer over the logs of a run with several (a
/// single-log run draws nothing from it).
const LOG_PICK_STREAM_SALT: u64 = 0x0_1065_91C4;

/// How many rounds of "every node handles what reached it" may follow one
/// event (in all, across [`Run::settle`]'s passes) before the run counts as
/// livelocked.
const SETTLE_ROUNDS_MAX: usize = 64;

/// The nodes' `request_timeout`: a fetch with no answer fails this long
/// after its wait.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// SPEC 3.1: a `Timeout` arrives within this much of its deadline.
const TIMEOUT_LATE_MAX: Duration = Duration::from_millis(100);

/// The nodes' `session_timeout`.
const SESSION_TIMEOUT: Duration = Duration::from_secs(1);

/// How soon a leader's controlled stop must have handed the leadership
/// over when nothing got in its way (see [`Run::end_controlled_stop`]), a
/// liveness rule of the simulator's, stricter than SPEC 3.5, which bounds
/// a stop only by its deadline:
/// one fetch round (a 100 ms long poll, a few ms of disk) is enough, and
/// the stopping node's session, which it no longer renews, expires no
/// sooner than its heartbeat interval (a third of [`SESSION_TIMEOUT`])
/// before that timeout after the begin, when the controller would elect
/// anyway.
const HAND_OVER_BOUND: Duration = Duration::from_millis(500);

/// How soon after a controlled stop begins the stopping node's session
/// may expire: it renews it no more (a winding-down node makes no
/// coordinator call of its own, `Node::shutdown` as well), and its last
/// renewal may be a heartbeat interval (a third of [`SESSION_TIMEOUT`])
/// old.
const SESSION_EXPIRES_AFTER_STOP: Duration =
    Duration::from_millis(SESSION_TIMEOUT.as_millis() as u64 * 2 / 3);

/// How long a fault or a lost message may still hold replication up: a
/// fetch lost just before fails only after its wait (100 ms) and
/// [`REQUEST_TIMEOUT`]. A controlled stop that begins sooner after one is
/// not held to SPEC 3.5 strictly (see [`Run::end_controlled_stop`]).
const DISTURBANCE_LINGERS: Duration = Duration::from_millis(1500);

/// When after the calm an operator stops the leader in a run with
/// controlled stops ([`Event::FinalLeaderStop`]).
const FINAL_LEADER_STOP_AFTER_CALM: Duration = Duration::from_secs(3);

/// How long after the calm every log must have settled (liveness).
const SETTLE_WITHIN: Duration = Duration::from_secs(20);

/// Mean simulated time between two coordinator faults (lost write
/// replies).
const COORDINATOR_FAULT_INTERVAL_MEAN: Duration = Duration::from_secs(10);

/// Mean simulated time between two disk faults.
const DISK_FAULT_INTERVAL_MEAN: Duration = Duration::from_secs(15);

/// Mean simulated time between two disks filling up.
const FULL_DISK_INTERVAL_MEAN: Duration = Duration::from_secs(20);

/// Mean simulated time a full disk stays full before an operator frees
/// space.
const FULL_DISK_FOR_MEAN: Duration = Duration::from_secs(3);

/// A full disk's budget is its usage when it fills plus up to this much:
/// a few dozen appends, or none, still fit (a roll, or a restart's reopen
/// of its active segment, which preallocate an index of
/// `index_bytes_max`, do not).
const FULL_DISK_SLACK_BYTES_MAX: u64 = 4 * 1024;

/// Mean simulated time between two bit flips on a run's flipped disk.
const BIT_FLIP_INTERVAL_MEAN: Duration = Duration::from_secs(10);

/// What one unit of [`SimDisk`]'s simulated time ([`Latency`]) is here.
const DISK_TIME_UNIT: Duration = Duration::from_micros(1);

/// How long a supervisor waits before it starts a node again (after its
/// storage failed, or its open failed).
const SUPERVISOR_RESTART_AFTER: Duration = Duration::from_secs(1);

/// Opens in a row that may fail after the calm before the run fails.
const OPEN_ATTEMPTS_MAX: usize = 10;

/// Mean simulated time between two reads of the reader.
const READ_INTERVAL_MEAN: Duration = Duration::from_millis(50);

/// Mean simulated time between two runs of a node's background log work
/// (its roll flusher thread's jobs).
const BACKGROUND_WORK_INTERVAL_MEAN: Duration = Duration::from_millis(100);

/// Mean simulated time between two controlled stops, in a run that has
/// them.
const CONTROLLED_STOP_INTERVAL_MEAN: Duration = Duration::from_secs(8);

/// Mean simulated time a node stopped cleanly stays down.
const CONTROLLED_STOP_DOWN_MEAN: Duration = Duration::from_millis(500);

/// The nodes' `controlled_shutdown_timeout` (the node's default): how long
/// a controlled stop may spend handing its logs over.
const CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Salt of the operator's generator of controlled stops: a stream apart
/// from the faults', so that a run that draws no operator action is the
/// run it was before they existed, event for event.
const OPERATOR_STREAM_SALT: u64 = 0x0_9E7A_7012;

/// Salt of the operator's generator of reassignments, a stream apart from
/// the controlled stops' for the same reason.
const REASSIGNMENT_STREAM_SALT: u64 = 0x0_2EA5_5160;

/// Salt of the blocking clients' generator ([`BlockingClients::new`]), a
/// stream apart from the others for the same reason.
const BLOCKING_STREAM_SALT: u64 = 0x0_B10C_C0A1;

/// Salt of the generator of the producer's blocking sends
/// ([`ProducerClient::new`]), a stream apart from the others for the same
/// reason.
const BLOCKING_SENDS_STREAM_SALT: u64 = 0x0_B10C_5E4D;

/// Salt of the draw of a run's flush policy and lossy node
/// ([`FlushDraw::new`]), a stream apart from the others for the same
/// reason.
const FLUSH_POLICY_STREAM_SALT: u64 = 0x0_F105_4B01;

/// Salt of the coin that loses a coordinator write before it takes effect
/// ([`SimConfig::lost_requests`]), a stream apart from the others for the
/// same reason.
const LOST_REQUESTS_STREAM_SALT: u64 = 0x0_1057_2E90;

/// Salt of the draws of power losses in the middle of a step
/// ([`SimConfig::mid_step_power_losses`]), a stream apart from the others
/// for the same reason.
const MID_STEP_POWER_LOSS_STREAM_SALT: u64 = 0x0_CB17_0FF5;

/// Salt of the draws of slow messages ([`SimConfig::slow_messages`]), a
/// stream apart from the others for the same reason.
const SLOW_MESSAGES_STREAM_SALT: u64 = 0x0_5104_3E55;

/// Salt of the draws of partitions' shapes
/// ([`SimConfig::partition_shapes`]), a stream apart from the others for
/// the same reason.
const PARTITION_SHAPES_STREAM_SALT: u64 = 0x0015_1A4D;

/// Salt of the coin that lets a disk fault strike any operation
/// ([`SimConfig::eio_anywhere`]), a stream apart from the others for the
/// same reason.
const EIO_ANYWHERE_STREAM_SALT: u64 = 0x0_E10A_4E2E;

/// Salt of the draws of the plain appends' `acks` ([`SimConfig::acks_mix`]),
/// a stream apart from the others for the same reason.
const ACKS_MIX_STREAM_SALT: u64 = 0x0_AC45_0001;

/// A power loss in the middle of a step cuts the power at one of this many
/// disk operations from when it is armed.
const MID_STEP_POWER_LOSS_OPERATIONS_MAX: u64 = 200;

/// Mean simulated time between two reassignments, in a run that has them.
const REASSIGNMENT_INTERVAL_MEAN: Duration = Duration::from_secs(10);

/// What a run is made of; everything else is drawn from `seed`.
#[derive(Clone, Debug)]
pub(crate) struct SimConfig {
    /// Fixes every choice of the run.
    pub(crate) seed: u64,
    /// Nodes (at least three): each log has three replicas among them
    /// ([`REPLICATION_FACTOR`], see [`initial_replicas`]); the others run
    /// all the same.
    pub(crate) nodes: usize,
    /// Logs, each replicated on three of the nodes (each with its own
    /// clients and checks; faults hit a node's or disk's logs all at
    /// once). A run with several has no applications (see
    /// [`SimConfig::applications`]).
    pub(crate) logs: usize,
    /// How the network treats messages until the calm.
    pub(crate) network: NetworkFaults,
    /// Mean simulated time between two partitions that cut one node off
    /// (`None`: none).
    pub(crate) partition_interval_mean: Option<Duration>,
    /// Simulated time the workload and faults last; the run then heals and
    /// checks that everything settles.
    pub(crate) simulated: Duration,
    /// Mean simulated time between two appends.
    pub(crate) append_interval_mean: Duration,
    /// Mean simulated time between two sends of the idempotent producer
    /// (`None`: no producer).
    pub(crate) produce_interval_mean: Option<Duration>,
    /// Mean simulated time between two crashes (`None`: no crash).
    pub(crate) crash_interval_mean: Option<Duration>,
    /// Probability that a crash also loses the machine's disk (it comes
    /// back empty, as a replaced disk would); at most one disk per run, so
    /// that another replica keeps every acknowledged record (G1(c)), and
    /// only the flipped disk in a run with bit flips.
    pub(crate) disk_loss: f64,
    /// Whether nodes lose coordinator write replies now and then, and half
    /// the partitions also cut a node off from the coordinator.
    pub(crate) coordinator_faults: bool,
    /// Whether disks fail writes and syncs with `EIO` now and then.
    pub(crate) disk_faults: bool,
    /// Whether, with [`SimConfig::disk_faults`], in half the runs (drawn
    /// apart) one disk fault in two strikes an operation of any kind:
    /// opening a file, reading, changing a file's length or a directory's
    /// entries (creating, renaming, removing, listing), as well as writing
    /// and syncing. A read that fails is the device's error, not damage
    /// (SPEC G5: a clear error, never a wrong record served).
    pub(crate) eio_anywhere: bool,
    /// Whether, in half the runs (drawn apart), the client's pipelined
    /// appends are made with `acks=1` one time in four and `acks=0` one
    /// time in eight, the rest with `acks=all`. Their acknowledgements
    /// promise nothing kept (G1 holds only `acks=all`), but name the
    /// offset the leader gave the record: a record the log ends up holding
    /// is there, and, after an `acks=1` one, the log holds nothing else
    /// at that offset in that epoch (SPEC 3.1); neither fails for a short
    /// ISR.
    pub(crate) acks_mix: bool,
    /// Whether disks fill up now and then: a node's space budget is set a
    /// little above what its files take, so that its writes soon fail with
    /// `ENOSPC`, and lifted a few seconds later (an operator frees space),
    /// at the calm at the latest.
    pub(crate) full_disks: bool,
    /// Whether half the runs flip bits in the stored files (segments,
    /// indexes, checkpoints, any file) of one node's disk now and then; the
    /// calm replaces that disk if a flip its reads still see is in a
    /// segment or checkpoint (see [`Run::replace_flipped_disk`]).
    pub(crate) bit_flips: bool,
    /// Whether disk operations take simulated time, drawn per run (see
    /// [`Run::draw_latencies`]): none, every disk fast, or one slow.
    pub(crate) disk_latency: bool,
    /// Whether half the runs stop a node cleanly now and then (a
    /// controlled shutdown, SPEC 3.5) and start it again a little later.
    pub(crate) controlled_stops: bool,
    /// Whether half the runs reassign the log now and then (SPEC 3.10):
    /// from three replicas to two and back, in an order drawn each time,
    /// and, with more than three nodes, onto a node that holds no copy
    /// (one replaced, or the third); now and then a move is cancelled.
    pub(crate) reassignments: bool,
    /// Whether two runs in three run an application on every node that
    /// applies the log, reports its position and takes snapshots, while
    /// the leader deletes records (see [`application`]). Only in a
    /// single-log run: the applications' settings (retention until
    /// applied, retention by size) are the nodes', so they would hold every
    /// log of a node, and per-log applications are left for later.
    pub(crate) applications: bool,
    /// Whether, in runs with applications, a cap and snapshot stores, an
    /// application now and then restores its state from scratch (the
    /// leader's one time in two: it must hand its leadership over).
    pub(crate) application_restores: bool,
    /// Whether half the runs have blocking clients (see
    /// [`BlockingClients`]).
    pub(crate) blocking_clients: bool,
    /// Whether, in half the runs with a producer, one of its sends in two
    /// is made with the blocking `send` (see [`ProducerClient`]).
    pub(crate) blocking_sends: bool,
    /// Whether half the runs give their nodes a flush policy other than
    /// `FlushPolicy::Always`: `Never` (the library's default) in a
    /// quarter, `Every` in a quarter (see [`FlushDraw`]). In such a run
    /// only one node, drawn, ever loses power or its disk, and it takes the
    /// bit flips too, so that a record committed on two replicas always
    /// keeps a copy no fault can drop: G1(a) and G1(c) are then checked as
    /// strictly as G1(b) is under `Always`.
    pub(crate) flush_policies: bool,
    /// Whether, with [`SimConfig::coordinator_faults`], in half the runs
    /// (drawn apart) a node's lost coordinator writes are, one time in
    /// two, lost before they take effect rather than only their answer
    /// after (SPEC 3.4: the node hears the same unknown outcome either
    /// way).
    pub(crate) lost_requests: bool,
    /// Whether, in runs under `FlushPolicy::Always`, one power loss in
    /// four (drawn apart) strikes in the middle of what the node does, at
    /// its disk's n-th operation from then (1 to
    /// [`MID_STEP_POWER_LOSS_OPERATIONS_MAX`]): between the writes, syncs
    /// and renames of a roll, a truncation, a checkpoint or a recovery,
    /// not only between two steps (see [`Run::cut_armed_power`]).
    pub(crate) mid_step_power_losses: bool,
    /// Whether, in half the runs (drawn apart), one message in 200 that
    /// arrives is slow: it travels 0.5 to 3 s, past its sender's request
    /// timeout, so that a fetch reaches a leader after its follower gave
    /// it up, restarted or moved on, and an answer a follower that asked
    /// long ago.
    pub(crate) slow_messages: bool,
    /// Whether, in half the runs (drawn apart), a partition takes one of
    /// several shapes: as before, one node cut off both ways, or one way
    /// only (it hears nothing, or nothing it sends arrives), or, with four
    /// or five nodes, two nodes cut off together.
    pub(crate) partition_shapes: bool,
    /// Trace lines kept for a failure's report.
    pub(crate) trace_lines: usize,
    /// Test only: the run panics at its first step at or after this much
    /// simulated time, as a failed assertion in a node would.
    #[cfg(test)]
    pub(crate) panic_at: Option<Duration>,
}

impl SimConfig {
    /// A run of `seed` with the default workload and faults: 60
    /// simulated seconds, an append every 20 ms, a crash every 5 s and a
    /// partition every 10 s on average; 1% of messages lost, 1% delivered
    /// twice, 0.1 to 2 ms in flight.
    ///
    /// The number of logs is drawn from a stream of its own (see
    /// [`LOGS_STREAM_SALT`]): one in half the runs, two in a quarter,
    /// three in a quarter. So is the number of nodes (see
    /// [`NODES_STREAM_SALT`]): three in three runs of four, four in an
    /// eighth, five in an eighth. (Four and five in a quarter each cost
    /// 15-17% of the seeds an hour: a run of more nodes steps and checks
    /// more of them, 10% more events in all. A seed that draws four or
    /// five nodes drew as many then.)
    pub(crate) fn new(seed: u64) -> SimConfig {
        let logs = match mix64(seed ^ LOGS_STREAM_SALT) % 4 {
            0 | 1 => 1,
            2 => 2,
            _ => 3,
        };
        let nodes = match mix64(seed ^ NODES_STREAM_SALT) % 8 {
            0..=5 => 3,
            6 => 4,
            _ => 5,
        };
        SimConfig {
            seed,
            nodes,
            logs,
            network: NetworkFaults {
                loss: 0.01,
                duplication: 0.01,
                delay_min: Duration::from_micros(100),
                delay_max: Duration::from_millis(2),
            },
            partition_interval_mean: Some(Duration::from_secs(10)),
            disk_loss: 0.2,
            disk_faults: true,
            full_disks: true,
            bit_flips: true,
            disk_latency: true,
            controlled_stops: true,
            reassignments: true,
            applications: true,
            application_restores: true,
            blocking_clients: true,
            blocking_sends: true,
            flush_policies: true,
            lost_requests: true,
            mid_step_power_losses: true,
            slow_messages: true,
            partition_shapes: true,
            eio_anywhere: true,
            acks_mix: true,
            coordinator_faults: true,
            simulated: Duration::from_secs(60),
            append_interval_mean: Duration::from_millis(20),
            produce_interval_mean: Some(Duration::from_millis(40)),
            crash_interval_mean: Some(Duration::from_secs(5)),
            trace_lines: 64,
            #[cfg(test)]
            panic_at: None,
        }
    }
}

impl SimConfig {
    /// This configuration with `logs` logs (at least one).
    pub(crate) fn with_logs(self, logs: usize) -> SimConfig {
        SimConfig {
            logs: logs.max(1),
            ..self
        }
    }

    /// This configuration with `nodes` nodes (at least
    /// [`REPLICATION_FACTOR`]).
    pub(crate) fn with_nodes(self, nodes: usize) -> SimConfig {
        SimConfig {
            nodes: nodes.clamp(REPLICATION_FACTOR, NODES_MAX),
            ..self
        }
    }
}

/// A run's flush policy and, under any policy but `Always`, its lossy
/// node: the only node whose machine loses power, whose disk is lost, and
/// whose disk has bits flipped (an index into the run's machines, one of
/// the nodes the logs are created on).
#[derive(Clone, Copy, Debug)]
struct FlushDraw {
    policy: FlushPolicy,
    lossy: Option<usize>,
}

impl FlushDraw {
    /// Drawn from a stream of its own ([`FLUSH_POLICY_STREAM_SALT`]), so
    /// that a run that draws `Always` is event for event the run it was
    /// before runs drew a policy: `Always` in half the runs (and in every
    /// run without [`SimConfig::flush_policies`]), `Never` in a quarter,
    /// `Every` with 1 to 8 records or 1 to 50 ms in a quarter.
    fn new(config: &SimConfig, replicas: &[Vec<NodeId>]) -> FlushDraw {
        let mut rng = SplitMix64::new(mix64(config.seed ^ FLUSH_POLICY_STREAM_SALT));
        let policy = match rng.next_u64() % 4 {
            _ if !config.flush_policies => FlushPolicy::Always,
            0 | 1 => FlushPolicy::Always,
            2 => FlushPolicy::Never,
            _ => FlushPolicy::Every {
                messages: 1 + rng.next_u64() % 8,
                interval: Duration::from_millis(1 + rng.next_u64() % 50),
            },
        };
        let lossy = (policy != FlushPolicy::Always).then(|| {
            let mut candidates: Vec<usize> =
                replicas.iter().flatten().map(|id| id.0 as usize).collect();
            candidates.sort_unstable();
            candidates.dedup();
            candidates[(rng.next_u64() % candidates.len() as u64) as usize]
        });
        FlushDraw { policy, lossy }
    }
}

/// The replicas each of a run's `logs` logs is created with: with
/// [`REPLICATION_FACTOR`] nodes or fewer, every node, in id order (no
/// draw: such a run is the run it was before runs had more nodes); with
/// more, three of them drawn per log, in a drawn order (the first is the
/// log's preferred leader), from a stream of their own
/// ([`REPLICAS_STREAM_SALT`]).
fn initial_replicas(seed: u64, nodes: usize, logs: usize) -> Vec<Vec<NodeId>> {
    let mut rng = SplitMix64::new(mix64(seed ^ REPLICAS_STREAM_SALT));
    (0..logs)
        .map(|_| {
            let mut ids: Vec<NodeId> = (0..nodes).map(|i| NodeId(i as u32)).collect();
            if nodes > REPLICATION_FACTOR {
                // The first REPLICATION_FACTOR places of a Fisher-Yates
                // shuffle.
                for place in 0..REPLICATION_FACTOR {
                    let from = place + (rng.next_u64() % (nodes - place) as u64) as usize;
                    ids.swap(place, from);
                }
                ids.truncate(REPLICATION_FACTOR);
            }
            ids
        })
        .collect()
}

/// What one log of a run that passed went through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LogCounts {
    /// Records acknowledged on the log.
    pub(crate) acknowledged: u64,
    /// Records the reader was served as committed on it.
    pub(crate) read: u64,
    /// Leaders the coordinator named for it, each (leader, epoch) once.
    pub(crate) leaders: u64,
}

/// What a run that passed did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SimReport {
    pub(crate) seed: u64,
    /// The trace hash: two runs of one seed must agree on it.
    pub(crate) trace_hash: u64,
    pub(crate) events: u64,
    pub(crate) appends: u64,
    /// Records acknowledged, the producer's included.
    pub(crate) acknowledged: u64,
    /// The idempotent producer's sends, its batches re-sent after they
    /// went in doubt, and its sends made with the blocking `send`.
    pub(crate) produced: (u64, u64, u64),
    /// The blocking clients' calls begun and acknowledged.
    pub(crate) blocking: (u64, u64),
    /// Records the reader was served as committed.
    pub(crate) read: u64,
    pub(crate) crashes: u64,
    pub(crate) power_losses: u64,
    pub(crate) disks_lost: u64,
    /// Disk faults planned (each fails one operation, if the node gets
    /// that far before its next crash).
    pub(crate) disk_faults: u64,
    /// Those of them that may strike an operation of any kind
    /// ([`SimConfig::eio_anywhere`]).
    pub(crate) eio_anywhere_faults: u64,
    /// Plain appends tried with `acks=1` and `acks=0` (taken or refused;
    /// [`SimConfig::acks_mix`]).
    pub(crate) unreplicated_appends: (u64, u64),
    /// Times a disk filled up (its space budget was set).
    pub(crate) full_disks: u64,
    /// Writes the full disks refused with `ENOSPC`.
    pub(crate) full_disk_refusals: u64,
    /// Bits flipped in stored files.
    pub(crate) bit_flips: u64,
    /// Distinct `Corrupt` errors the flipped disk's node gave (reads by the
    /// reader and the checks, opens, and those it handled itself: fetch
    /// answers, background work; one that repeats counts once).
    pub(crate) corrupt_errors: u64,
    /// Flipped disks the calm replaced.
    pub(crate) flipped_disks_replaced: u64,
    /// Flipped disks the calm kept: none of their flips that reads still
    /// see is in a segment or checkpoint (an index, a file since removed or
    /// rewritten), so their nodes must go on without an operator.
    pub(crate) flipped_disks_kept: u64,
    /// Whether the run ended at the calm because the flipped disk held
    /// the only copy of acknowledged records (see
    /// [`Run::replace_flipped_disk`]).
    pub(crate) only_copy_flipped: bool,
    /// The nodes' flush policy ([`FlushDraw`]).
    pub(crate) flush_policy: FlushPolicy,
    /// Times a node was set to lose its coordinator writes before they
    /// take effect ([`SimConfig::lost_requests`]).
    pub(crate) requests_lost: u64,
    /// Power losses that struck in the middle of a step
    /// ([`SimConfig::mid_step_power_losses`]), and those of them that struck
    /// while the node's process was down or starting.
    pub(crate) mid_step_power_cuts: (u64, u64),
    /// Slow messages ([`SimConfig::slow_messages`]), and partitions one
    /// way in, one way out and of two nodes
    /// ([`SimConfig::partition_shapes`]).
    pub(crate) network_shapes: [u64; 4],
    /// The fsync latency of the run's slowest disk (zero: disks take no
    /// time).
    pub(crate) sync_latency_max: Duration,
    /// Simulated time the nodes spent on disk operations, in all: each
    /// node's messages left that much later (see [`Run::busy_for`]).
    pub(crate) disk_time: Duration,
    /// Restarts of nodes whose storage failed.
    pub(crate) supervisor_restarts: u64,
    /// Leader elections the controllers wrote: (all, unclean).
    pub(crate) elections: (u64, u64),
    /// Background log jobs run (flushes of rolled segments and the like).
    pub(crate) background_jobs: u64,
    /// Controlled stops begun, and those of the log's leader.
    pub(crate) controlled_stops: (u64, u64),
    /// Controlled stops of the leader whose own hand-over named a
    /// successor, and those held to it strictly: nothing got in their way,
    /// so they must have within [`HAND_OVER_BOUND`] (SPEC 3.5; see
    /// [`Run::end_controlled_stop`]).
    pub(crate) leaderships_handed_over: (u64, u64),
    /// Reassignments started (or replaced), cancelled, and completed (the
    /// stored replicas became the operator's last word: the target, or the
    /// original replicas after a cancel).
    pub(crate) reassignments: (u64, u64, u64),
    /// Reassignments started that add a node that was no replica of the
    /// log before them nor when the run began (only in runs of more than
    /// three nodes): moves of the log's data onto a new node.
    pub(crate) moves_to_new_nodes: u64,
    /// What the applications did (all zero in a run without them).
    pub(crate) applications: ApplicationCounts,
    /// What each log went through, in the order of their ids.
    pub(crate) logs: Vec<LogCounts>,
}

/// A run that broke a rule: the seed, what broke, and the last lines of
/// its trace.
#[derive(Debug)]
pub(crate) struct SimFailure {
    pub(crate) seed: u64,
    /// The variables besides the seed the replay command must set to run
    /// this run again ([`replay_variables`]).
    pub(crate) replay_variables: String,
    pub(crate) at: Duration,
    pub(crate) message: String,
    pub(crate) last_lines: Vec<String>,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulation seed {} failed at {:?} of simulated time: {}",
            self.seed, self.at, self.message
        )?;
        writeln!(
            f,
            "replay: ISRLOG_SIM_SEED={} {}ISRLOG_SIM_TRACE_LINES=100000 cargo test --lib testing::sim::run::tests::simulated_runs -- --nocapture",
            self.seed, self.replay_variables
        )?;
        writeln!(f, "last events:")?;
        for line in &self.last_lines {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// What happens in a run.
#[derive(Debug)]
enum Event {
    /// A node's control core asked to be woken now.
    Wake(usize),
    /// A client appends one record to the leader of a log (drawn when the
    /// run has several).
    Append,
    /// Blocking client `n` calls `append` (see [`BlockingClients`]).
    BlockingCall(usize),
    /// The idempotent producer sends one record.
    Produce,
    /// The producer's retry round falls due (its pipeline is driven after
    /// every event).
    ProducerRetry,
    /// A reader reads what the leader of each log says is committed, from
    /// where it left off there.
    Read,
    /// A node's process dies; with `power_loss` its machine loses power too.
    Crash { node: usize, power_loss: bool },
    /// A crashed node's process starts again on its disk.
    Restart(usize),
    /// A node's disk fails one of its next writes or syncs (or, see
    /// [`SimConfig::eio_anywhere`], operations of any kind) with `EIO`.
    DiskFault(usize),
    /// A node's disk fills up: its space budget is set a little above what
    /// its files take.
    DiskFull(usize),
    /// An operator frees space on a node's disk: its budget is lifted.
    DiskFreed(usize),
    /// A bit of a stored file on the run's flipped disk flips.
    BitFlip,
    /// A node whose storage failed is restarted by its supervisor (an
    /// operator, systemd): the only way a poisoned log recovers.
    SupervisorRestart(usize),
    /// A node's background log work (rolled segments' flushes, log start
    /// moves) runs, as its roll flusher thread would have by now.
    BackgroundWork(usize),
    /// A follower's fetch reaches its leader (perhaps a second copy).
    FetchArrives {
        leader: usize,
        follower: usize,
        sequence: u64,
        request: FetchRequest,
    },
    /// A leader's answer reaches the follower.
    FetchAnswered {
        follower: usize,
        leader: NodeId,
        sequence: u64,
        response: Response,
    },
    /// A fetch's deadline: with no answer by now, the call fails.
    FetchTimedOut {
        follower: usize,
        leader: NodeId,
        sequence: u64,
    },
    /// A parked fetch's wait ends: it is answered with what there is.
    FetchWaitOver,
    /// A node's idle or backing-off fetch session may ask again (the
    /// sessions are driven after every event).
    FetchResume(usize),
    /// One node is cut off from the others.
    Partition(usize),
    /// Every link is restored, and every node reaches the coordinator.
    Heal,
    /// A node's next coordinator writes take effect but their replies are
    /// lost (SPEC 3.4's writes whose outcome is unknown), which also cuts
    /// it off from the coordinator until it reconnects.
    LoseReplies(usize),
    /// A node reaches the coordinator again.
    Reconnect(usize),
    /// The coordinator expires the sessions whose time has come.
    ExpireSessions,
    /// An operator stops a node cleanly (a controlled shutdown), to start
    /// it again a little later.
    ControlledStop(usize),
    /// An operator reassigns a log (drawn when the run has several), or
    /// cancels its reassignment.
    Reassign,
    /// In a run with controlled stops, an operator stops the leader once
    /// after the calm, when nothing fails any more, so that every such
    /// run holds at least one leader's stop to SPEC 3.5 strictly (before,
    /// 31 of 466 leader stops in 400 runs were: faults were everywhere).
    FinalLeaderStop,
    /// Something of the applications' happens.
    Application(AppEvent),
    /// The workload and faults end: nothing new is appended or broken.
    Calm,
}

/// One machine: its disk ([`Run::disk`]) outlives its processes
/// ([`Run::process`]), both the harness's.
struct Machine {
    id: NodeId,
    /// When its `Wake` is scheduled, so that one is not scheduled twice.
    wake_at: Option<Duration>,
    /// Its process's fetch sessions, by leader.
    sessions: Vec<Session>,
    /// Its process's fetchers' sessions as last taken, with the
    /// [`fetchers_version`](crate::node::SteppedNode::fetchers_version) then (taken
    /// again only once it changes; forgotten when a process starts).
    fetch_sessions_seen: Option<(u64, Vec<FetchSession>)>,
    /// Opens that failed in a row.
    failed_opens: usize,
    /// A restart after its storage failed is scheduled.
    restart_owed: bool,
    /// Bits flipped on its disk (since it was last replaced).
    flipped: u64,
    /// Its last process ended in a controlled stop that wrote the
    /// clean-shutdown marker, and no bit ever flipped on its disk: how its
    /// next open, if it succeeds, must find its previous stop (SPEC 3.5):
    /// clean, or, with a replica lost with an earlier disk and not placed
    /// on this one since, as one that lost data (SPEC 2.8).
    start_expected: Option<PreviousShutdown>,
    /// Whether, when the step began, its disk had a flip its reads saw in
    /// a segment or checkpoint (see [`Run::excusing_flips`]): a `Corrupt`
    /// error in the step is excused by one then or at its end (the step
    /// may have cut the flipped bytes off, as a recovery that refuses the
    /// replica does).
    excused_at_step_start: bool,
    /// The last `Corrupt` error it gave, traced once.
    last_corrupt: Option<String>,
    /// What each operation on its disk costs (a replacement disk too).
    latency: Latency,
    /// Its disk's simulated time already charged to the node.
    disk_time_charged: u64,
    /// Its process is busy with disk operations until then: what it sends
    /// leaves no earlier.
    busy_until: Duration,
    /// Its process's controlled stop under way, if one is.
    stopping: Option<ControlledStop>,
    /// Its disk is full (until an operator frees space).
    disk_full: bool,
    /// A power loss is armed on its disk
    /// ([`SimConfig::mid_step_power_losses`]): it strikes at an operation
    /// to come, or struck in this step.
    power_cut_armed: bool,
}

/// A controlled stop under way, as the run's check needs it.
#[derive(Clone, Copy, Debug)]
struct ControlledStop {
    /// Whether the node led a log when it began.
    led: bool,
    /// Whether, when it began, for each log the node led or the
    /// coordinator named it leader of, another replica that is in the
    /// ISR, live and healthy (see [`Run::healthy`]) could take the
    /// leadership over.
    successor_ready: bool,
    /// The logs the coordinator named the node leader of when it began:
    /// a stop held to SPEC 3.5 strictly hands over every one.
    named: usize,
    /// The run's fault count then.
    faults: u64,
    /// When it began.
    began_at: Duration,
    /// The disk time every node had spent by then ([`Run::disk_time`]).
    disk_time_at_begin: Duration,
    /// How long the busiest node's disk work then still held what it
    /// sends back.
    busy_at_begin: Duration,
}

/// The faults last seen, and when they last changed.
#[derive(Clone, Copy, Debug, Default)]
struct Disturbances {
    faults: u64,
    last_at: Option<Duration>,
}

/// How a partition cuts a node off ([`SimConfig::partition_shapes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PartitionShape {
    /// Both ways, from every other node.
    Alone,
    /// Nothing sent to it arrives; what it sends does.
    Deaf,
    /// Nothing it sends arrives; what is sent to it does.
    Mute,
    /// Both ways, together with this other node (by index): the two still
    /// reach each other.
    Pair(usize),
}

/// Where a replica's log stood when a check's read of it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LogShape {
    /// Where the read started.
    from: Offset,
    high_watermark: Offset,
    log_start: Offset,
    log_end: Offset,
    /// Bits flipped on its disk by then.
    flipped: u64,
}

/// A fetcher's session as the run drives it: one fetch at a time.
struct Session {
    fetch: FetchSession,
    /// The fetch sent and not answered yet, by its sequence number.
    outstanding: Option<(u64, FetchInFlight)>,
    /// Asked to wait (idle, or backing off) until this time, or until its
    /// targets change from this count.
    resume: Option<(Duration, u64)>,
}

/// A fetch a leader holds until data arrives or its wait is over.
struct Parked {
    leader: usize,
    follower: usize,
    sequence: u64,
    request: FetchRequest,
    arrival: FetchArrival,
    seen: u64,
    wait_over_at: Duration,
}

/// An append whose outcome the client does not know yet.
struct ClientAppend {
    value: Vec<u8>,
    /// Made with these `acks` ([`SimConfig::acks_mix`]).
    acks: Acks,
    handle: AppendHandle,
    /// The node it was made to (by index).
    node: usize,
    /// When it was made.
    began: Duration,
}

/// How far a check read one node's replica of a log.
#[derive(Clone, Copy, Debug, Default)]
struct ReplicaCheck {
    /// Its process's replica was checked against what was committed up
    /// to here (its high watermark then).
    checked_up_to: Offset,
    /// The log's shape when reading it from `checked_up_to` last failed (a
    /// corrupt batch, failed storage): the check reads again once it or
    /// the disk changes (a corrupt batch fails every read until the calm
    /// replaces its disk; reading it again after every event was a fifth
    /// of a run).
    check_failed_at: Option<LogShape>,
}

/// One log of a run: its clients' appends and what they were told, the
/// reader's position, and the checker's state for it (G1-G5, SPEC 3.4,
/// 3.8, 3.10), each log's apart from the others'.
struct LogRun {
    /// The log's id.
    id: LogId,
    /// How the trace and the failures name the log: `log` in a single-log
    /// run (whose trace stays as it was before runs had several logs),
    /// `log 2` otherwise.
    name: String,
    /// What the trace lines and failures about the log begin with: empty
    /// in a single-log run, `log 2: ` otherwise.
    tag: String,
    /// The log's leader, epoch, ISR and ELR the trace last recorded.
    log_state_seen: Option<LogStateSeen>,
    /// When each leader process was first seen leading in an epoch.
    leading_since: BTreeMap<(usize, LeaderEpoch), Duration>,
    /// When each replica was last seen leaving the ISR, or outside it
    /// in a new epoch, for SPEC 3.4's check of expansions.
    outside_isr_since: BTreeMap<NodeId, Duration>,
    /// The highest high watermark each leader (node, epoch) showed: G3
    /// says it never moves backwards.
    leader_high_watermarks: BTreeMap<(usize, LeaderEpoch), Offset>,
    /// The last offset acknowledged in each leader epoch (an append is
    /// acknowledged by the leader it was written by).
    acknowledged_by_epoch: BTreeMap<LeaderEpoch, Offset>,
    /// An epoch and the last offset acknowledged before it, as last
    /// computed from `acknowledged_by_epoch`; `None` once that changed
    /// (see [`Run::acknowledged_before`]).
    acknowledged_before: Option<(LeaderEpoch, Option<Offset>)>,
    /// Where the reader goes on reading.
    read_position: Offset,
    /// Every record served as committed so far, by the reader or by any
    /// replica below its high watermark, with its batch's leader epoch: a
    /// committed offset holds one record, everywhere and for good (G1, G2).
    committed_seen: BTreeMap<Offset, (LeaderEpoch, Vec<u8>)>,
    /// The client's appends whose outcome it does not know yet.
    in_flight: Vec<ClientAppend>,
    /// Acknowledged records by offset: what the clients were told is
    /// committed.
    acknowledged: BTreeMap<Offset, Vec<u8>>,
    /// The epoch each acknowledged record was written in.
    acknowledged_epochs: BTreeMap<Offset, LeaderEpoch>,
    /// Records acknowledged with `acks=1` or `acks=0`, by value: the
    /// offset and epoch the leader gave them, and the `acks` (no promise
    /// kept).
    acknowledged_unreplicated: BTreeMap<Vec<u8>, (Offset, LeaderEpoch, Acks)>,
    /// The replicas the log was created with.
    created_on: Vec<NodeId>,
    /// The replicas the log is to end with: the last reassignment's target,
    /// or the original replicas after a cancel (checked at the end).
    replicas_wanted: Vec<NodeId>,
    /// The log's replicas, adding and removing replicas the trace last
    /// recorded.
    replicas_seen: (Vec<NodeId>, Vec<NodeId>, Vec<NodeId>),
    /// Each machine's replica's check, by machine index.
    checks: Vec<ReplicaCheck>,
    /// Leaders (leader, epoch) the trace recorded, for the report.
    leaders: u64,
}

impl LogRun {
    /// Log `log` (from 0) of a run of `logs` logs on `nodes` nodes,
    /// created with `replicas`, before anything happened.
    fn new(log: usize, logs: usize, replicas: &[NodeId], nodes: usize) -> LogRun {
        let id = log_id(log);
        let (name, tag) = if logs == 1 {
            ("log".to_owned(), String::new())
        } else {
            (format!("log {}", id.0), format!("log {}: ", id.0))
        };
        LogRun {
            id,
            name,
            tag,
            log_state_seen: None,
            leading_since: BTreeMap::new(),
            outside_isr_since: BTreeMap::new(),
            leader_high_watermarks: BTreeMap::new(),
            acknowledged_by_epoch: BTreeMap::new(),
            acknowledged_before: None,
            read_position: Offset::ZERO,
            committed_seen: BTreeMap::new(),
            in_flight: Vec::new(),
            acknowledged: BTreeMap::new(),
            acknowledged_epochs: BTreeMap::new(),
            acknowledged_unreplicated: BTreeMap::new(),
            created_on: replicas.to_vec(),
            replicas_wanted: replicas.to_vec(),
            replicas_seen: (replicas.to_vec(), Vec::new(), Vec::new()),
            checks: vec![ReplicaCheck::default(); nodes],
            leaders: 0,
        }
    }

    /// What the log went through, for the report.
    fn counts(&self) -> LogCounts {
        LogCounts {
            acknowledged: self.acknowledged.len() as u64,
            read: self.committed_seen.len() as u64,
            leaders: self.leaders,
        }
    }
}

/// The log's leader, epoch, ISR and ELR, as the trace records them.
type LogStateSeen = (Option<NodeId>, LeaderEpoch, Vec<NodeId>, Vec<NodeId>);

/// Everything a run holds; see the module docs.
struct Run {
    /// The run's logs, by index (log `i` has id `i + 1`).
    logs: Vec<LogRun>,
    /// Draws which log an append, a reassignment or the producer goes to;
    /// see [`LOG_PICK_STREAM_SALT`].
    log_picker: SplitMix64,
    /// The log the idempotent producer sends to (drawn once per run).
    producer_log: usize,
    /// Each node's log handle during [`check_step`](Self::check_step),
    /// taken once for all its checks (kept for its allocation; empty
    /// between steps).
    step_logs: Vec<Option<crate::ReplicatedLog>>,
    /// When a fetch from a follower (second) last reached a leader's
    /// process (first), for SPEC 3.4's check.
    /// One fetch carries every log the follower fetches from that leader,
    /// so it vouches for each.
    fetch_arrivals: BTreeMap<(usize, usize), Duration>,
    config: SimConfig,
    /// The nodes' settings (a node whose disk is lost gets a new snapshot
    /// store there), the coordinator, the network that only hands out the
    /// nodes' transports (a stepped node's fetchers never call theirs: the
    /// run carries their fetches over `wire`), and the machines' disks.
    harness: SimHarness,
    rng: SplitMix64,
    schedule: Schedule<Event>,
    trace: Trace,
    clock: ManualClock,
    /// The clock's `now` at zero simulated time.
    epoch: Instant,
    wire: SimNetwork,
    machines: Vec<Machine>,
    parked: Vec<Parked>,
    next_sequence: u64,
    fetches: u64,
    expiry_at: Option<Duration>,
    /// The blocking clients and their calls under way.
    blocking: BlockingClients,
    /// The idempotent producer, if the run has one.
    producer: Option<ProducerClient>,
    /// When its `ProducerRetry` is scheduled.
    producer_retry_at: Option<Duration>,
    calm: bool,
    appends: u64,
    crashes: u64,
    power_losses: u64,
    disks_lost: u64,
    disk_faults: u64,
    /// Disk faults that may strike an operation of any kind.
    eio_anywhere_faults: u64,
    /// The coin of [`SimConfig::eio_anywhere`], in a run that draws it.
    eio_anywhere: Option<SplitMix64>,
    /// The draws of [`SimConfig::acks_mix`], in a run that has it.
    acks_mix: Option<SplitMix64>,
    /// Plain appends tried with `acks=1` and `acks=0`.
    unreplicated_appends: (u64, u64),
    full_disks: u64,
    /// The one node whose disk has bits flipped in this run, if any.
    flip_node: Option<usize>,
    /// The nodes' flush policy.
    flush_policy: FlushPolicy,
    /// Under a flush policy other than `Always`, the only node whose
    /// machine may lose power or its disk, and whose disk takes the bit
    /// flips (see [`FlushDraw`]); `None` under `Always`.
    lossy: Option<usize>,
    bit_flips: u64,
    corrupt_errors: u64,
    flipped_disks_replaced: u64,
    flipped_disks_kept: u64,
    only_copy_flipped: bool,
    sync_latency_max: Duration,
    disk_time: Duration,
    /// `ENOSPC` refusals of disks replaced since (lost with their machine).
    full_disk_refusals_of_lost_disks: u64,
    /// Planned disk errors that hit on disks since replaced.
    eio_failures_of_lost_disks: u64,
    supervisor_restarts: u64,
    /// Elections written by controllers whose process has ended.
    elections: (u64, u64),
    background_jobs: u64,
    /// Draws the operator's actions (controlled stops); see
    /// [`OPERATOR_STREAM_SALT`].
    operator: SplitMix64,
    /// Fault events so far (crashes, partitions, lost replies, disk
    /// faults, bit flips, restarts, controlled stops): a controlled stop
    /// that saw none while it ran is held to SPEC 3.5 strictly.
    faults: u64,
    /// A partition is in effect (until the network heals).
    partitioned: bool,
    controlled_stops: (u64, u64),
    leaderships_handed_over: (u64, u64),
    /// The run has controlled stops and its stop of the leader after the
    /// calm ([`Event::FinalLeaderStop`]) has not happened yet: it is not
    /// settled before.
    final_leader_stop_pending: bool,
    disturbances: Disturbances,
    /// When a message between two nodes (by index, the lower first) was
    /// last lost.
    lost_between: BTreeMap<(usize, usize), Duration>,
    /// Draws the reassignments; see [`REASSIGNMENT_STREAM_SALT`].
    reassigner: SplitMix64,
    /// The coin of [`SimConfig::lost_requests`], in a run that draws them.
    lost_requests: Option<SplitMix64>,
    /// The draws of [`SimConfig::mid_step_power_losses`], in a run that
    /// has them.
    mid_step_power_losses: Option<SplitMix64>,
    /// Power losses that struck in the middle of a step, and those of them
    /// that struck while the node's process was down or starting.
    mid_step_power_cuts: (u64, u64),
    /// The draws of [`SimConfig::partition_shapes`], in a run that has
    /// them.
    partition_shapes: Option<SplitMix64>,
    /// Messages that were slow ([`SimConfig::slow_messages`]), and
    /// partitions of each shape other than the first: one way in, one way
    /// out, two nodes.
    network_shapes: [u64; 4],
    /// Coordinator writes lost before they took effect.
    requests_lost: u64,
    reassignments: (u64, u64, u64),
    /// See [`SimReport::moves_to_new_nodes`].
    moves_to_new_nodes: u64,
    /// The run's applications, if it draws them.
    applications: Option<Applications>,
}

/// A log of `logs` drawn from `picker`; the first without a draw when
/// there is one.
fn pick_log(picker: &mut SplitMix64, logs: usize) -> usize {
    if logs <= 1 {
        0
    } else {
        (picker.next_u64() % logs as u64) as usize
    }
}

/// The message a panic carries, if it is text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)")
}

/// The features a run may have off, each with the variable that turns it
/// off (`=0`) to replay a seed as the simulator ran it before the feature
/// came; runs that draw none of a feature are unchanged by it. In the
/// order a replay command sets them.
const SWITCHES: [Switch; 9] = [
    // Blocking clients.
    ("ISRLOG_SIM_BLOCKING_CLIENTS", |c| &mut c.blocking_clients),
    // The producer's blocking sends.
    ("ISRLOG_SIM_BLOCKING_SENDS", |c| &mut c.blocking_sends),
    // A drawn flush policy (off: every run under `Always`; runs that drew
    // `Always` are unchanged).
    ("ISRLOG_SIM_FLUSH_POLICIES", |c| &mut c.flush_policies),
    // Coordinator writes lost before taking effect.
    ("ISRLOG_SIM_LOST_REQUESTS", |c| &mut c.lost_requests),
    // Power losses in the middle of a step.
    ("ISRLOG_SIM_MID_STEP_POWER_LOSSES", |c| {
        &mut c.mid_step_power_losses
    }),
    // Slow messages.
    ("ISRLOG_SIM_SLOW_MESSAGES", |c| &mut c.slow_messages),
    // Partitions of several shapes (one way only, two nodes together).
    ("ISRLOG_SIM_PARTITION_SHAPES", |c| &mut c.partition_shapes),
    // Disk faults on operations of every kind, not writes and syncs only.
    ("ISRLOG_SIM_EIO_ANYWHERE", |c| &mut c.eio_anywhere),
    // Pipelined appends with `acks=1` and `acks=0`.
    ("ISRLOG_SIM_ACKS_MIX", |c| &mut c.acks_mix),
];

/// A feature's variable, and its flag in a run's configuration.
type Switch = (&'static str, fn(&mut SimConfig) -> &mut bool);

/// The variables a replay of `config` sets besides its seed: those of the
/// overrides [`run_seeds`] reads that make it differ from
/// `SimConfig::new(seed)` (review of 33a8e22: a failure found with
/// `ISRLOG_SIM_LOGS=1` printed a command that replayed another run).
fn replay_variables(config: &SimConfig) -> String {
    let mut drawn = SimConfig::new(config.seed);
    let mut variables = String::new();
    if config.nodes != drawn.nodes {
        variables.push_str(&format!("ISRLOG_SIM_NODES={} ", config.nodes));
    }
    if config.logs != drawn.logs {
        variables.push_str(&format!("ISRLOG_SIM_LOGS={} ", config.logs));
    }
    // The accessors take a `&mut`: a copy of `config` gives one.
    let mut config = config.clone();
    for (name, flag) in SWITCHES {
        let on = *flag(&mut config);
        if on != *flag(&mut drawn) {
            variables.push_str(&format!("{name}={} ", u8::from(on)));
        }
    }
    variables
}

/// Runs `config`'s simulation to its end on the calling thread.
pub(crate) fn run(config: &SimConfig) -> Result<SimReport, SimFailure> {
    let _guard = SimulationGuard::enter(config.seed);
    let mut run = Run::new(config.clone());
    // The nodes stop inside the guard (a stop must not block either) and
    // inside the catch: a panic while they stop is the run's failure too,
    // with its trace (review of 33a8e22).
    let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let outcome = run.run();
        let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run.stop_all()));
        match (outcome, stopped) {
            // A check that failed is the run's failure, whatever the stop
            // then met (review of 490da45).
            (Err(message), _) => Err(message),
            (Ok(()), Err(panic)) => std::panic::resume_unwind(panic),
            (Ok(()), Ok(())) => Ok(()),
        }
    })) {
        Ok(outcome) => outcome,
        Err(panic) => {
            // An assertion of the nodes' (or the simulator's own) failed:
            // reported with the trace the run kept, as a failed check is.
            // The run is dropped as the panic left it, without `stop_all`;
            // a panic while dropping it (it meets whatever the first one
            // broke) must not take the report with it (review of 5f24ee1).
            let failure = SimFailure {
                seed: config.seed,
                replay_variables: replay_variables(config),
                at: run.schedule.now(),
                message: format!("panicked: {}", panic_message(&*panic)),
                last_lines: run.trace.last_lines().map(str::to_owned).collect(),
            };
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(run)));
            return Err(failure);
        }
    };
    let report = SimReport {
        seed: config.seed,
        trace_hash: run.trace.hash(),
        events: run.trace.events(),
        appends: run.appends,
        acknowledged: run
            .logs
            .iter()
            .map(|log| log.acknowledged.len() as u64)
            .sum(),
        produced: run.producer.as_ref().map_or((0, 0, 0), |producer| {
            let (sent, resent) = producer.counts();
            (sent, resent, producer.sent_blocking())
        }),
        blocking: run.blocking.counts(),
        read: run
            .logs
            .iter()
            .map(|log| log.committed_seen.len() as u64)
            .sum(),
        crashes: run.crashes,
        power_losses: run.power_losses,
        disks_lost: run.disks_lost,
        disk_faults: run.disk_faults,
        eio_anywhere_faults: run.eio_anywhere_faults,
        unreplicated_appends: run.unreplicated_appends,
        full_disks: run.full_disks,
        full_disk_refusals: run.full_disk_refusals_of_lost_disks
            + run
                .harness
                .nodes()
                .disks()
                .sims()
                .iter()
                .map(|disk| disk.stats().full_disk_failures)
                .sum::<u64>(),
        bit_flips: run.bit_flips,
        corrupt_errors: run.corrupt_errors,
        flipped_disks_replaced: run.flipped_disks_replaced,
        flipped_disks_kept: run.flipped_disks_kept,
        only_copy_flipped: run.only_copy_flipped,
        flush_policy: run.flush_policy,
        requests_lost: run.requests_lost,
        mid_step_power_cuts: run.mid_step_power_cuts,
        network_shapes: run.network_shapes,
        sync_latency_max: run.sync_latency_max,
        disk_time: run.disk_time,
        supervisor_restarts: run.supervisor_restarts,
        elections: run.elections,
        background_jobs: run.background_jobs,
        controlled_stops: run.controlled_stops,
        leaderships_handed_over: run.leaderships_handed_over,
        reassignments: run.reassignments,
        moves_to_new_nodes: run.moves_to_new_nodes,
        applications: run
            .applications
            .as_ref()
            .map_or_else(ApplicationCounts::default, Applications::counts),
        logs: run.logs.iter().map(LogRun::counts).collect(),
    };
    let failure = outcome.err().map(|message| SimFailure {
        seed: config.seed,
        replay_variables: replay_variables(config),
        at: run.schedule.now(),
        message,
        last_lines: run.trace.last_lines().map(str::to_owned).collect(),
    });
    match failure {
        Some(failure) => Err(failure),
        None => Ok(report),
    }
}

impl Run {
    fn new(config: SimConfig) -> Run {
        let config_seed = config.seed;
        let blocking_clients = config.blocking_clients;
        let applications = (config.applications && config.logs == 1)
            .then(|| Applications::draw(config.seed, config.nodes, config.application_restores))
            .flatten();
        let mut settings = sim_settings(config.nodes);
        if let Some(applications) = &applications {
            applications.configure_settings(&mut settings);
        }
        let replicas = initial_replicas(config.seed, config.nodes, config.logs);
        let flush = FlushDraw::new(&config, &replicas);
        settings.log.flush_policy = flush.policy;
        let clock = ManualClock::default();
        let epoch = clock.now();
        let coordinator = MemoryCoordinator::without_expiry_thread(Arc::new(clock.clone()));
        let disks = Disks::Sim {
            root: PathBuf::from("/sim"),
            disks: (0..config.nodes)
                .map(|i| SimDisk::new(mix64(config.seed ^ (0xD15C + i as u64))))
                .collect(),
        };
        let harness = Harness::new(
            Stepped,
            SteppedWire::new(config.seed),
            MemoryCoordination::new(coordinator, false),
            disks,
            settings,
            Arc::new(clock.clone()),
        );
        let machines = (0..config.nodes)
            .map(|i| Machine {
                id: NodeId(i as u32),
                wake_at: None,
                sessions: Vec::new(),
                fetch_sessions_seen: None,
                failed_opens: 0,
                restart_owed: false,
                start_expected: None,
                flipped: 0,
                excused_at_step_start: false,
                last_corrupt: None,
                latency: Latency::default(),
                disk_time_charged: 0,
                busy_until: Duration::ZERO,
                stopping: None,
                disk_full: false,
                power_cut_armed: false,
            })
            .collect();
        // Half the runs give each send a delivery timeout shorter than a
        // partition, so that batches go in doubt and are re-sent (SPEC 4's
        // hardest case); the others keep Kafka's 120 s.
        let producer_config = if mix64(config.seed ^ 0x9D0D).is_multiple_of(2) {
            ProducerConfig::default()
        } else {
            ProducerConfig {
                delivery_timeout: Duration::from_millis(1500),
                ..ProducerConfig::default()
            }
        };
        let mut log_picker = SplitMix64::new(mix64(config_seed ^ LOG_PICK_STREAM_SALT));
        let producer_log = pick_log(&mut log_picker, config.logs);
        let producer = config.produce_interval_mean.map(|_| {
            ProducerClient::new(
                log_id(producer_log),
                clock.clone(),
                producer_config,
                REQUEST_TIMEOUT,
                config
                    .blocking_sends
                    .then(|| mix64(config_seed ^ BLOCKING_SENDS_STREAM_SALT)),
            )
        });
        let mid_step_power_losses = (config.mid_step_power_losses
            && flush.policy == FlushPolicy::Always)
            .then(|| SplitMix64::new(mix64(config_seed ^ MID_STEP_POWER_LOSS_STREAM_SALT)));
        let partition_shapes = {
            let mut draws = SplitMix64::new(mix64(config_seed ^ PARTITION_SHAPES_STREAM_SALT));
            (config.partition_shapes && draws.chance(0.5)).then_some(draws)
        };
        let mut wire = SimNetwork::new(mix64(config.seed ^ 0x0E7), config.network.clone());
        {
            let mut draws = SplitMix64::new(mix64(config_seed ^ SLOW_MESSAGES_STREAM_SALT));
            if config.slow_messages && draws.chance(0.5) {
                wire.set_slow(Some(SlowMessages {
                    probability: 0.005,
                    delay_min: Duration::from_millis(500),
                    delay_max: Duration::from_secs(3),
                    rng: draws,
                }));
            }
        }
        let lost_requests = {
            let mut coin = SplitMix64::new(mix64(config_seed ^ LOST_REQUESTS_STREAM_SALT));
            (config.lost_requests && coin.chance(0.5)).then_some(coin)
        };
        let acks_mix = {
            let mut draws = SplitMix64::new(mix64(config_seed ^ ACKS_MIX_STREAM_SALT));
            (config.acks_mix && draws.chance(0.5)).then_some(draws)
        };
        let eio_anywhere = {
            let mut coin = SplitMix64::new(mix64(config_seed ^ EIO_ANYWHERE_STREAM_SALT));
            (config.disk_faults && config.eio_anywhere && coin.chance(0.5)).then_some(coin)
        };
        Run {
            logs: replicas
                .iter()
                .enumerate()
                .map(|(log, replicas)| LogRun::new(log, config.logs, replicas, config.nodes))
                .collect(),
            log_picker,
            producer_log,
            step_logs: Vec::new(),
            fetch_arrivals: BTreeMap::new(),
            rng: SplitMix64::new(mix64(config.seed)),
            trace: Trace::new(config.trace_lines),
            schedule: Schedule::default(),
            wire,
            parked: Vec::new(),
            next_sequence: 0,
            fetches: 0,
            config,
            harness,
            clock,
            epoch,
            machines,
            expiry_at: None,
            blocking: BlockingClients::new(
                mix64(config_seed ^ BLOCKING_STREAM_SALT),
                blocking_clients,
            ),
            producer,
            producer_retry_at: None,
            calm: false,
            appends: 0,
            crashes: 0,
            power_losses: 0,
            disks_lost: 0,
            disk_faults: 0,
            eio_anywhere_faults: 0,
            eio_anywhere,
            acks_mix,
            unreplicated_appends: (0, 0),
            full_disks: 0,
            flip_node: None,
            flush_policy: flush.policy,
            lossy: flush.lossy,
            bit_flips: 0,
            corrupt_errors: 0,
            flipped_disks_replaced: 0,
            flipped_disks_kept: 0,
            only_copy_flipped: false,
            sync_latency_max: Duration::ZERO,
            disk_time: Duration::ZERO,
            full_disk_refusals_of_lost_disks: 0,
            eio_failures_of_lost_disks: 0,
            supervisor_restarts: 0,
            elections: (0, 0),
            background_jobs: 0,
            operator: SplitMix64::new(mix64(config_seed ^ OPERATOR_STREAM_SALT)),
            faults: 0,
            partitioned: false,
            controlled_stops: (0, 0),
            leaderships_handed_over: (0, 0),
            final_leader_stop_pending: false,
            disturbances: Disturbances::default(),
            lost_between: BTreeMap::new(),
            reassigner: SplitMix64::new(mix64(config_seed ^ REASSIGNMENT_STREAM_SALT)),
            lost_requests,
            mid_step_power_losses,
            partition_shapes,
            network_shapes: [0; 4],
            mid_step_power_cuts: (0, 0),
            requests_lost: 0,
            reassignments: (0, 0, 0),
            moves_to_new_nodes: 0,
            applications,
        }
    }

    fn record(&mut self, what: fmt::Arguments<'_>) {
        self.trace.record(self.schedule.now(), what);
    }

    /// An exponentially distributed delay of mean `mean`, in whole
    /// microseconds (at least one).
    fn draw_interval(&mut self, mean: Duration) -> Duration {
        let uniform = 1.0 - self.rng.next_f64();
        let micros = -uniform.ln() * mean.as_micros() as f64;
        Duration::from_micros((micros as u64).max(1))
    }

    fn run(&mut self) -> Result<(), String> {
        for log in 0..self.logs.len() {
            let replicas = self.logs[log].replicas_wanted.clone();
            // Traced only where drawn: a three-node run's trace stays as it
            // was before runs had more nodes.
            if self.machines.len() > REPLICATION_FACTOR {
                let name = self.logs[log].name.clone();
                let ids: Vec<u32> = replicas.iter().map(|n| n.0).collect();
                self.record(format_args!("{name}: created on nodes {ids:?}"));
            }
            self.coordinator()
                .create_log(log_id(log), replicas)
                .map_err(|error| format!("creating log {}: {error}", log_id(log).0))?;
        }
        if self.config.disk_latency {
            self.draw_latencies();
        }
        for index in 0..self.machines.len() {
            self.open(index)?;
            let first = self.draw_interval(BACKGROUND_WORK_INTERVAL_MEAN);
            self.schedule.after(first, Event::BackgroundWork(index));
        }
        let first_append = self.draw_interval(self.config.append_interval_mean);
        self.schedule.after(first_append, Event::Append);
        for client in 0..self.blocking.count() {
            let first = self.blocking.draw_interval();
            self.schedule.after(first, Event::BlockingCall(client));
        }
        let first_read = self.draw_interval(READ_INTERVAL_MEAN);
        self.schedule.after(first_read, Event::Read);
        if let Some(mean) = self.config.produce_interval_mean {
            let first = self.draw_interval(mean);
            self.schedule.after(first, Event::Produce);
        }
        if let Some(mean) = self.config.crash_interval_mean {
            let first_crash = self.draw_interval(mean);
            self.schedule_crash(first_crash);
        }
        if let Some(mean) = self.config.partition_interval_mean {
            let first = self.draw_interval(mean);
            self.schedule_partition(first);
        }
        if self.config.coordinator_faults {
            let first = self.draw_interval(COORDINATOR_FAULT_INTERVAL_MEAN);
            let node = (self.rng.next_u64() % self.machines.len() as u64) as usize;
            self.schedule.after(first, Event::LoseReplies(node));
        }
        if self.config.disk_faults {
            let first = self.draw_interval(DISK_FAULT_INTERVAL_MEAN);
            let node = (self.rng.next_u64() % self.machines.len() as u64) as usize;
            self.schedule.after(first, Event::DiskFault(node));
        }
        if self.config.full_disks {
            let first = self.draw_interval(FULL_DISK_INTERVAL_MEAN);
            let node = (self.rng.next_u64() % self.machines.len() as u64) as usize;
            self.schedule.after(first, Event::DiskFull(node));
        }
        if self.config.bit_flips && self.rng.chance(0.5) {
            // Among the nodes the logs were created on (with three nodes,
            // all of them, drawn as before): a node that holds no replica
            // would take the run's only lost disk and its flips away from
            // every log (review of b33ad1c).
            let candidates = self.initial_replica_nodes();
            let node = candidates[(self.rng.next_u64() % candidates.len() as u64) as usize];
            // Under a policy other than `Always`, the lossy node's disk.
            let node = self.lossy.unwrap_or(node);
            self.flip_node = Some(node);
            let first = self.draw_interval(BIT_FLIP_INTERVAL_MEAN);
            self.schedule.after(first, Event::BitFlip);
        }
        if self.config.controlled_stops && self.operator.chance(0.5) {
            self.schedule_controlled_stop();
            self.final_leader_stop_pending = true;
        }
        if self.config.reassignments
            && self.reassigner.chance(0.5)
            && self
                .applications
                .as_ref()
                .is_none_or(Applications::allow_reassignments)
        {
            self.schedule_reassignment();
        }
        self.start_applications();
        self.schedule.at(self.config.simulated, Event::Calm);
        // After the calm, everything must settle within this much more
        // (liveness): elections, catching up, every append's outcome; with
        // 1 s timeouts a few seconds suffice.
        let settle_by = self.config.simulated + SETTLE_WITHIN;
        while let Some((at, event)) = self.schedule.next() {
            if at > settle_by {
                let in_flight: usize = self.logs.iter().map(|log| log.in_flight.len()).sum();
                let leaders: Vec<Option<usize>> = (0..self.logs.len())
                    .map(|log| self.leader(log).map(|(i, _)| i))
                    .collect();
                let leaders = match leaders.as_slice() {
                    [leader] => format!("leader {leader:?}"),
                    leaders => {
                        let mut unsettled = Vec::new();
                        for log in 0..self.logs.len() {
                            if !self.is_log_settled(log) {
                                unsettled.push(self.logs[log].id.0);
                            }
                        }
                        format!("leaders (by log) {leaders:?}, logs not settled {unsettled:?}")
                    }
                };
                return Err(format!(
                    "not settled {:?} after the calm: {} appends without an outcome, {leaders}",
                    settle_by - self.config.simulated,
                    in_flight + self.blocking.calling(),
                ));
            }
            self.advance_clock(at);
            #[cfg(test)]
            if self.config.panic_at.is_some_and(|panic_at| at >= panic_at) {
                panic!("planted panic at {at:?}");
            }
            if let Some(index) = self.flip_node {
                self.machines[index].excused_at_step_start = self.has_excusing_flip(index);
            }
            self.happen(event)?;
            if self.only_copy_flipped {
                return Ok(());
            }
            // Before the nodes: the producer's retries are sent as the
            // clients' appends are, and the answers the last step left are
            // taken in.
            self.drive_producer()?;
            self.drive_controlled_stops()?;
            self.settle()?;
            self.cut_armed_power()?;
            self.collect_outcomes()?;
            self.check_handled_corruption()?;
            self.check_step()?;
            self.check_applications()?;
            for index in 0..self.machines.len() {
                self.busy_for(index);
            }
            if self.calm && !self.final_leader_stop_pending && self.is_settled() {
                // What the step's checks themselves met, then the end's.
                self.check_handled_corruption()?;
                self.check_final()?;
                return self.check_handled_corruption();
            }
            self.schedule_wakes();
        }
        Err("the agenda ran dry before the run settled".to_owned())
    }

    fn advance_clock(&mut self, at: Duration) {
        let elapsed = self.clock.elapsed();
        debug_assert!(at >= elapsed, "simulated time went backwards");
        self.clock.advance(at - elapsed);
    }

    fn happen(&mut self, event: Event) -> Result<(), String> {
        match event {
            Event::Wake(index) => {
                self.machines[index].wake_at = None;
            }
            Event::Append => {
                let log = pick_log(&mut self.log_picker, self.logs.len());
                self.append(log)?;
                if !self.calm {
                    let next = self.draw_interval(self.config.append_interval_mean);
                    self.schedule.after(next, Event::Append);
                }
            }
            Event::BlockingCall(client) => {
                self.blocking_call(client)?;
                if !self.calm {
                    let next = self.blocking.draw_interval();
                    self.schedule.after(next, Event::BlockingCall(client));
                }
            }
            Event::Produce => {
                self.produce();
                if let (false, Some(mean)) = (self.calm, self.config.produce_interval_mean) {
                    let next = self.draw_interval(mean);
                    self.schedule.after(next, Event::Produce);
                }
            }
            Event::ProducerRetry => self.producer_retry_at = None,
            Event::Read => {
                for log in 0..self.logs.len() {
                    self.read(log)?;
                }
                if !self.calm {
                    let next = self.draw_interval(READ_INTERVAL_MEAN);
                    self.schedule.after(next, Event::Read);
                }
            }
            // A crash drawn before the calm that falls after it does not
            // happen: the calm is when faults stop.
            Event::Crash { .. } if self.calm => {}
            Event::Crash { node, power_loss } => {
                self.faults += 1;
                if !(power_loss && self.arm_power_cut(node)) {
                    self.crash(node, power_loss);
                }
                let down_for = self.draw_interval(Duration::from_millis(500));
                self.schedule.after(down_for, Event::Restart(node));
                if let (false, Some(mean)) = (self.calm, self.config.crash_interval_mean) {
                    let next = down_for + self.draw_interval(mean);
                    self.schedule_crash(next);
                }
            }
            Event::Restart(index) => self.open(index)?,
            Event::DiskFault(index) => {
                if !self.calm {
                    self.faults += 1;
                    let operation = 1 + self.rng.next_u64() % 50;
                    // The coin is drawn only in a run that has it, so a
                    // run without it is event for event what it was.
                    let anywhere = self
                        .eio_anywhere
                        .as_mut()
                        .is_some_and(|coin| coin.chance(0.5));
                    let kinds: &[DiskOperation] = if anywhere {
                        &[
                            DiskOperation::Open,
                            DiskOperation::Read,
                            DiskOperation::Write,
                            DiskOperation::SetLength,
                            DiskOperation::Sync,
                            DiskOperation::SyncDirectory,
                            DiskOperation::Directory,
                        ]
                    } else {
                        &[
                            DiskOperation::Write,
                            DiskOperation::Sync,
                            DiskOperation::SyncDirectory,
                        ]
                    };
                    self.disk(index)
                        .fail_with_eio(EioPlan::Nth(operation), kinds);
                    self.disk_faults += 1;
                    if anywhere {
                        self.eio_anywhere_faults += 1;
                        self.record(format_args!(
                            "node {index}'s disk fails its {operation}th operation of any kind"
                        ));
                    } else {
                        self.record(format_args!(
                            "node {index}'s disk fails its {operation}th write or sync"
                        ));
                    }
                    let next = self.draw_interval(DISK_FAULT_INTERVAL_MEAN);
                    let node = (self.rng.next_u64() % self.machines.len() as u64) as usize;
                    self.schedule.after(next, Event::DiskFault(node));
                }
            }
            Event::DiskFull(index) => {
                if !self.calm {
                    self.faults += 1;
                    self.machines[index].disk_full = true;
                    let used = self.disk(index).used_bytes();
                    let slack = self.rng.next_u64() % (FULL_DISK_SLACK_BYTES_MAX + 1);
                    self.disk(index).set_space_bytes_max(Some(used + slack));
                    self.full_disks += 1;
                    self.record(format_args!(
                        "node {index}'s disk is full: {used} bytes used, {slack} more fit"
                    ));
                    let freed_after = self.draw_interval(FULL_DISK_FOR_MEAN);
                    self.schedule.after(freed_after, Event::DiskFreed(index));
                    let next = freed_after + self.draw_interval(FULL_DISK_INTERVAL_MEAN);
                    let node = (self.rng.next_u64() % self.machines.len() as u64) as usize;
                    self.schedule.after(next, Event::DiskFull(node));
                }
            }
            // The calm frees every disk's space too; a disk lost since it
            // filled has no budget.
            Event::DiskFreed(index) => {
                self.machines[index].disk_full = false;
                self.disk(index).set_space_bytes_max(None);
                self.record(format_args!("node {index}'s disk has space again"));
            }
            Event::BitFlip => {
                if let (false, Some(index)) = (self.calm, self.flip_node) {
                    self.faults += 1;
                    // Mostly segments, where the records are; a file is
                    // drawn first, then a byte, and the few small files
                    // (identity, checkpoints) would otherwise take most
                    // flips, each stopping the node for the rest of the run.
                    let class = self.rng.next_u64() % 8;
                    let chosen = |path: &std::path::Path| {
                        let extension = path.extension().and_then(|e| e.to_str());
                        match class {
                            0..=5 => extension == Some("log"),
                            6 => extension == Some("index"),
                            _ => !matches!(extension, Some("log" | "index")),
                        }
                    };
                    let disk = self.disk(index);
                    let flipped = disk
                        .flip_random_bit(chosen)
                        .or_else(|| disk.flip_random_bit(|_| true));
                    match flipped {
                        Some((path, position, bit)) => {
                            self.bit_flips += 1;
                            self.machines[index].flipped += 1;
                            self.machines[index].start_expected = None;
                            self.record(format_args!(
                                "node {index}'s disk flips bit {bit} of byte {position} of {} ({:?})",
                                path.display(),
                                FileKind::of(&path)
                            ));
                        }
                        None => self.record(format_args!("node {index}'s disk has no file")),
                    }
                    let next = self.draw_interval(BIT_FLIP_INTERVAL_MEAN);
                    self.schedule.after(next, Event::BitFlip);
                }
            }
            // Owed no more if the process crashed meanwhile.
            Event::SupervisorRestart(index) => {
                if self.machines[index].restart_owed {
                    self.faults += 1;
                    self.crash(index, false);
                    self.schedule
                        .after(SUPERVISOR_RESTART_AFTER, Event::Restart(index));
                }
            }
            Event::BackgroundWork(index) => {
                if let Some(process) = self.process(index) {
                    let ran = process.node.run_background_work();
                    self.background_jobs += ran as u64;
                    if ran > 0 {
                        self.record(format_args!("node {index} runs {ran} background jobs"));
                    }
                }
                let next = self.draw_interval(BACKGROUND_WORK_INTERVAL_MEAN);
                self.schedule.after(next, Event::BackgroundWork(index));
            }
            Event::ExpireSessions => {
                self.expiry_at = None;
                self.coordinator().tick();
                self.record(format_args!("coordinator expires sessions"));
            }
            Event::FetchArrives {
                leader,
                follower,
                sequence,
                request,
            } => self.fetch_arrives(leader, follower, sequence, request),
            Event::FetchAnswered {
                follower,
                leader,
                sequence,
                response,
            } => self.fetch_answered(follower, leader, sequence, Ok(response)),
            Event::FetchTimedOut {
                follower,
                leader,
                sequence,
            } => self.fetch_answered(
                follower,
                leader,
                sequence,
                Err(TransportError::Timeout { to: leader }),
            ),
            // The parked fetches are looked at, and the sessions driven,
            // after every event.
            Event::FetchWaitOver | Event::FetchResume(_) => {}
            Event::Partition(index) => {
                if !self.calm {
                    self.faults += 1;
                    self.partitioned = true;
                    let shape = self.draw_partition_shape(index);
                    let mut alone = vec![self.machines[index].id];
                    if let PartitionShape::Pair(other) = shape {
                        alone.push(self.machines[other].id);
                    }
                    let others: Vec<NodeId> = self
                        .machines
                        .iter()
                        .map(|m| m.id)
                        .filter(|id| !alone.contains(id))
                        .collect();
                    match shape {
                        PartitionShape::Alone | PartitionShape::Pair(_) => {
                            self.wire.partition(&alone, &others);
                        }
                        PartitionShape::Deaf => {
                            for other in &others {
                                self.wire.cut_one_way(*other, alone[0]);
                            }
                        }
                        PartitionShape::Mute => {
                            for other in &others {
                                self.wire.cut_one_way(alone[0], *other);
                            }
                        }
                    }
                    // Half the partitions cut the node off from the
                    // coordinator too: its session ends while it may still
                    // lead (a zombie leader, SPEC 3.7). Both of a pair.
                    let from_coordinator = self.config.coordinator_faults && self.rng.chance(0.5);
                    if from_coordinator {
                        for id in &alone {
                            self.coordinator().set_node_unavailable(*id, true);
                        }
                    }
                    let how = match shape {
                        PartitionShape::Alone => String::new(),
                        PartitionShape::Deaf => " one way: it hears nothing".to_owned(),
                        PartitionShape::Mute => " one way: nothing it sends arrives".to_owned(),
                        PartitionShape::Pair(other) => format!(" together with node {other}"),
                    };
                    self.record(format_args!(
                        "node {index} is cut off{how}{}",
                        if from_coordinator {
                            ", from the coordinator too"
                        } else {
                            ""
                        }
                    ));
                    let heal_after = self.draw_interval(Duration::from_secs(2));
                    self.schedule.after(heal_after, Event::Heal);
                }
            }
            Event::Heal => {
                self.partitioned = false;
                self.wire.heal();
                for machine in &self.machines {
                    self.coordinator().set_node_unavailable(machine.id, false);
                }
                self.record(format_args!("network heals"));
                if let (false, Some(mean)) = (self.calm, self.config.partition_interval_mean) {
                    let next = self.draw_interval(mean);
                    self.schedule_partition(next);
                }
            }
            Event::LoseReplies(index) => {
                if !self.calm {
                    self.faults += 1;
                    let id = self.machines[index].id;
                    let count = 1 + (self.rng.next_u64() % 2) as usize;
                    let before_effect = self
                        .lost_requests
                        .as_mut()
                        .is_some_and(|coin| coin.chance(0.5));
                    self.coordinator()
                        .lose_compare_and_set_calls(id, count, before_effect);
                    if before_effect {
                        self.requests_lost += 1;
                        self.record(format_args!(
                            "node {index} will lose its next {count} coordinator writes before they take effect"
                        ));
                    } else {
                        self.record(format_args!(
                            "node {index} will lose the replies of its next {count} coordinator writes"
                        ));
                    }
                    let reconnect = self.draw_interval(Duration::from_secs(2));
                    self.schedule.after(reconnect, Event::Reconnect(index));
                    let next = self.draw_interval(COORDINATOR_FAULT_INTERVAL_MEAN);
                    let node = (self.rng.next_u64() % self.machines.len() as u64) as usize;
                    self.schedule.after(next, Event::LoseReplies(node));
                }
            }
            Event::Reconnect(index) => {
                let id = self.machines[index].id;
                self.coordinator().set_node_unavailable(id, false);
                self.record(format_args!("node {index} reconnects to the coordinator"));
            }
            Event::ControlledStop(index) => {
                if !self.calm {
                    self.begin_controlled_stop(index);
                    self.schedule_controlled_stop();
                }
            }
            Event::Reassign => {
                if !self.calm {
                    self.faults += 1;
                    let log = pick_log(&mut self.log_picker, self.logs.len());
                    self.reassign(log);
                    self.schedule_reassignment();
                }
            }
            Event::FinalLeaderStop => {
                self.final_leader_stop_pending = false;
                match self.leader(0) {
                    Some((index, _)) => {
                        self.record(format_args!("operator: stops the leader after the calm"));
                        self.begin_controlled_stop(index);
                    }
                    None => self.record(format_args!("operator: no leader to stop after the calm")),
                }
            }
            Event::Application(event) => self.application_event(event)?,
            Event::Calm => {
                self.calm = true;
                if self.final_leader_stop_pending {
                    // Past DISTURBANCE_LINGERS after the last fault, with
                    // time for the nodes that come back now to catch up.
                    self.schedule
                        .after(FINAL_LEADER_STOP_AFTER_CALM, Event::FinalLeaderStop);
                }
                self.partitioned = false;
                for machine in &mut self.machines {
                    machine.disk_full = false;
                }
                for machine in &self.machines {
                    self.coordinator()
                        .lose_compare_and_set_replies(machine.id, 0);
                    self.coordinator().set_node_unavailable(machine.id, false);
                }
                self.wire.heal();
                self.wire.set_faults(NetworkFaults::default());
                self.wire.set_slow(None);
                // Disk faults planned before the calm that did not hit yet
                // are called off too.
                // So are full disks: an operator frees their space.
                for disk in self.harness.nodes().disks().sims() {
                    disk.fail_with_eio(EioPlan::Never, &[]);
                    disk.set_space_bytes_max(None);
                }
                for index in 0..self.machines.len() {
                    self.disarm_power_cut(index);
                }
                self.record(format_args!("calm"));
                self.replace_flipped_disk();
                // Whoever is down comes back.
                for index in 0..self.machines.len() {
                    if self.process(index).is_none() {
                        self.open(index)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The shape of a partition of node `index`: always
    /// [`PartitionShape::Alone`] in a run without
    /// [`SimConfig::partition_shapes`]; in one with them, one way or the
    /// other a quarter of the time each, and, with four or five nodes, with
    /// another node a quarter of the time.
    fn draw_partition_shape(&mut self, index: usize) -> PartitionShape {
        let nodes = self.machines.len();
        let Some(draws) = self.partition_shapes.as_mut() else {
            return PartitionShape::Alone;
        };
        let shape = match draws.next_u64() % 4 {
            1 => PartitionShape::Deaf,
            2 => PartitionShape::Mute,
            3 if nodes > REPLICATION_FACTOR => {
                let other = (index + 1 + (draws.next_u64() % (nodes as u64 - 1)) as usize) % nodes;
                PartitionShape::Pair(other)
            }
            _ => PartitionShape::Alone,
        };
        match shape {
            PartitionShape::Alone => {}
            PartitionShape::Deaf => self.network_shapes[1] += 1,
            PartitionShape::Mute => self.network_shapes[2] += 1,
            PartitionShape::Pair(_) => self.network_shapes[3] += 1,
        }
        shape
    }

    fn schedule_partition(&mut self, after: Duration) {
        let node = (self.rng.next_u64() % self.machines.len() as u64) as usize;
        self.schedule.after(after, Event::Partition(node));
    }

    fn schedule_crash(&mut self, after: Duration) {
        let node = (self.rng.next_u64() % self.machines.len() as u64) as usize;
        let power_loss = self.rng.chance(0.5);
        self.schedule
            .after(after, Event::Crash { node, power_loss });
    }

    /// Opens node `index`'s process (the harness opens its controller
    /// candidate first, then the node, and registers the node's handler),
    /// unless it runs. A failed open is retried by the supervisor.
    fn open(&mut self, index: usize) -> Result<(), String> {
        if self.process(index).is_some() {
            return Ok(());
        }
        // A start removes the marker first and puts it back only if it
        // fails before registering, so a failed open may have used it up:
        // only the first open after the stop is held to finding it.
        let expected = self.machines[index].start_expected.take();
        let id = self.machines[index].id;
        match self.harness.start_node(id) {
            Ok(()) => {
                let previous = self
                    .process(index)
                    .expect("a node that just started runs")
                    .node
                    .node()
                    .previous_shutdown();
                if let Some(expected) = expected.filter(|expected| previous != *expected) {
                    return Err(format!(
                        "SPEC 3.5: node {index}'s last process stopped cleanly (its controlled shutdown wrote the clean-shutdown marker) and nothing touched its disk since, yet it opens as {previous:?}, not {expected:?}"
                    ));
                }
                self.machines[index].fetch_sessions_seen = None;
                self.machines[index].failed_opens = 0;
                for log in &mut self.logs {
                    log.checks[index] = ReplicaCheck::default();
                }
                self.record(format_args!("node {index} opens ({previous:?})"));
                Ok(())
            }
            // A disk fault may fail an open once (an `EIO` planned for the
            // n-th operation), a coordinator out of reach any open until it
            // is back; the supervisor tries again. Once faults stopped, an
            // open that keeps failing fails the run.
            Err(error) => {
                if matches!(error, Error::Corrupt { .. }) {
                    self.corrupt_error(index, &error)?;
                }
                // Before the calm a coordinator out of reach can fail any
                // number of opens; a supervisor keeps trying.
                if self.calm {
                    self.machines[index].failed_opens += 1;
                }
                if self.machines[index].failed_opens > OPEN_ATTEMPTS_MAX {
                    return Err(format!(
                        "node {index} cannot open after {OPEN_ATTEMPTS_MAX} attempts: {error}"
                    ));
                }
                self.record(format_args!("node {index} cannot open: {error}"));
                self.schedule
                    .after(SUPERVISOR_RESTART_AFTER, Event::Restart(index));
                Ok(())
            }
        }
    }

    fn crash(&mut self, index: usize, power_loss: bool) {
        if self.process(index).is_none() {
            return;
        }
        // A crashed process's controller resigns nothing (taken before the
        // harness halts the process, which would drop it uncounted).
        self.retire_controller(index);
        self.machines[index].restart_owed = false;
        self.machines[index].stopping = None;
        self.crashes += 1;
        let power_loss = power_loss && self.may_lose_power(index);
        let loss = if power_loss {
            self.power_losses += 1;
            // Half the power losses keep a random prefix of each file's
            // unsynced writes, the last maybe torn in its middle.
            Loss::Power {
                torn: self.rng.chance(0.5),
            }
        } else {
            Loss::Nothing
        };
        // The network drops its handler, the process halts, then its disk
        // loses what `loss` says; the coordinator hears of it only when its
        // session expires.
        self.harness
            .crash_with(self.machines[index].id, loss, SessionEnd::OnExpiry);
        // A planned fault that did not hit yet is called off: it was meant
        // for this process.
        self.disk(index).fail_with_eio(EioPlan::Never, &[]);
        self.disarm_power_cut(index);
        // Bit flips damage one disk, a lost disk another would leave a
        // committed record on one intact copy at most (G1(c) promises it
        // only with one replica from the ISR back with its disk; G5 a clear
        // error for a flipped byte, not the record): in a run with flips
        // only the flipped disk is lost. Nor is a disk lost that holds the
        // only copy of acknowledged records (seed 60027858: a reassignment
        // had removed the other replica that was in the ISR when they were
        // committed, and the one left in the ISR lost its disk; no replica
        // could come back with them, and unclean recovery rightly elected
        // the longest log left). Asked after the draw, so that the draws
        // stay those of the runs this never changes.
        let disk_lost = self.disks_lost == 0
            && self.flip_node.is_none_or(|flipped| flipped == index)
            && self.lossy.is_none_or(|lossy| lossy == index)
            && self.rng.chance(self.config.disk_loss)
            && self.acknowledged_held_only_by(index).is_none();
        if disk_lost {
            self.disks_lost += 1;
            self.new_disk(index);
        }
        self.process_ended(index);
        self.record(format_args!(
            "node {index} crashes{}{}",
            if power_loss {
                " with its machine's power"
            } else {
                ""
            },
            if disk_lost { ", its disk lost" } else { "" }
        ));
    }

    /// In a run with [`SimConfig::mid_step_power_losses`], one power loss
    /// in four of node `index`'s machine is armed instead of struck now:
    /// its disk loses power at its n-th operation from now, whenever the
    /// node (or its next process, starting) gets there, and
    /// [`cut_armed_power`](Self::cut_armed_power) ends the process after
    /// the step in which it struck. Returns whether it armed one.
    fn arm_power_cut(&mut self, index: usize) -> bool {
        let Some(draws) = self.mid_step_power_losses.as_mut() else {
            return false;
        };
        if !draws.chance(0.25) || self.machines[index].power_cut_armed {
            return false;
        }
        let operation = 1 + draws.next_u64() % MID_STEP_POWER_LOSS_OPERATIONS_MAX;
        self.disk(index).lose_power_at_operation(operation);
        self.machines[index].power_cut_armed = true;
        self.record(format_args!(
            "node {index}'s machine will lose power at its disk's {operation}th operation from now"
        ));
        true
    }

    /// Calls off a power loss armed on node `index`'s disk that has not
    /// struck.
    fn disarm_power_cut(&mut self, index: usize) {
        if self.machines[index].power_cut_armed && self.disk(index).power_loss_pending() {
            self.disk(index).cancel_power_loss();
            self.machines[index].power_cut_armed = false;
        }
    }

    /// Ends, after the step, the process of each node whose armed power
    /// loss struck in it ([`arm_power_cut`](Self::arm_power_cut)): the
    /// disk already dropped what was unsynced (torn, half the time, as any
    /// power loss) and fails every later operation on the handles the
    /// process holds, so the process dies as a crash does. A power loss
    /// that struck while the process was down or starting leaves its next
    /// start to find what the disk kept; one that struck after a
    /// controlled stop may have cut the stop's last writes, so its next
    /// start is no longer held to find the clean-shutdown marker.
    fn cut_armed_power(&mut self) -> Result<(), String> {
        for index in 0..self.machines.len() {
            if !self.machines[index].power_cut_armed || self.disk(index).power_loss_pending() {
                continue;
            }
            self.machines[index].power_cut_armed = false;
            self.power_losses += 1;
            self.mid_step_power_cuts.0 += 1;
            self.machines[index].start_expected = None;
            if self.process(index).is_none() {
                self.mid_step_power_cuts.1 += 1;
                self.record(format_args!(
                    "node {index}'s machine loses power while its process is down"
                ));
                continue;
            }
            // The coordinator writes the process made in the step (an ISR
            // expansion, say) are checked against what it saw, the
            // arrivals of its fetches, before its end forgets them
            // (seed 60656765); its disk, dead, is not read.
            for log in 0..self.logs.len() {
                if let Err(error) = self.trace_log_state(log) {
                    return Err(format!("{}{error}", self.logs[log].tag));
                }
            }
            self.retire_controller(index);
            self.machines[index].restart_owed = false;
            self.machines[index].stopping = None;
            self.crashes += 1;
            self.harness
                .crash_with(self.machines[index].id, Loss::Nothing, SessionEnd::OnExpiry);
            self.disk(index).fail_with_eio(EioPlan::Never, &[]);
            self.process_ended(index);
            self.record(format_args!(
                "node {index} crashes: its machine lost power in the middle of the step"
            ));
            let down_for = self.draw_interval(Duration::from_millis(500));
            self.schedule.after(down_for, Event::Restart(index));
        }
        Ok(())
    }

    /// Whether node `index`'s machine may lose power now. Under `Always`,
    /// any machine (G1(b)). Under another flush policy, only the lossy
    /// node's ([`FlushDraw`]), and not while its disk holds the only copy
    /// of an acknowledged record (as for a lost disk): the unsynced bytes
    /// a power loss drops may be that copy, and G1(c) promises the record
    /// only while another replica that was in the ISR or ELR when it was
    /// committed comes back with its disk. Every other node's crashes keep
    /// what the operating system was handed, as G1(a) has them.
    fn may_lose_power(&self, index: usize) -> bool {
        match self.lossy {
            None => true,
            Some(lossy) => lossy == index && self.acknowledged_held_only_by(index).is_none(),
        }
    }

    /// What ends with node `index`'s process, however it ended: its fetch
    /// sessions, its disk work, its tenures as leader, the fetches it held
    /// and the clients' calls to it.
    fn process_ended(&mut self, index: usize) {
        self.machines[index].sessions.clear();
        // The process's disk work ends with it.
        self.busy_for(index);
        self.machines[index].busy_until = self.schedule.now();
        // A new process is a new leader tenure, even in the same epoch.
        for log in &mut self.logs {
            log.leader_high_watermarks
                .retain(|(leader, _), _| *leader != index);
            log.leading_since.retain(|(leader, _), _| *leader != index);
            // The client's appends to a dead process get no answer: to the
            // client, their outcome stays unknown (SPEC 3.4). (Those to
            // another process stay in flight.)
            log.in_flight
                .retain(|append| append.node != index || append.handle.is_done());
        }
        self.fetch_arrivals
            .retain(|(leader, _), _| *leader != index);
        // A dead leader answers none of the fetches it held.
        self.parked.retain(|parked| parked.leader != index);
        for value in self.blocking.process_ended(index) {
            let name = String::from_utf8_lossy(&value).into_owned();
            self.record(format_args!("{name}: its process ended, outcome unknown"));
        }
        self.application_process_ended(index);
    }

    /// Schedules the next controlled stop, of a node drawn by the
    /// operator.
    fn schedule_controlled_stop(&mut self) {
        let uniform = 1.0 - self.operator.next_f64();
        let after = Duration::from_micros(
            ((-uniform.ln() * CONTROLLED_STOP_INTERVAL_MEAN.as_micros() as f64) as u64).max(1),
        );
        let node = (self.operator.next_u64() % self.machines.len() as u64) as usize;
        self.schedule.after(after, Event::ControlledStop(node));
    }

    /// The nodes (by index, in order) that some log was created on.
    fn initial_replica_nodes(&self) -> Vec<usize> {
        (0..self.machines.len())
            .filter(|&index| {
                let id = self.machines[index].id;
                self.logs.iter().any(|log| log.created_on.contains(&id))
            })
            .collect()
    }

    /// Schedules the next reassignment.
    fn schedule_reassignment(&mut self) {
        let uniform = 1.0 - self.reassigner.next_f64();
        let after = Duration::from_micros(
            ((-uniform.ln() * REASSIGNMENT_INTERVAL_MEAN.as_micros() as f64) as u64).max(1),
        );
        self.schedule.after(after, Event::Reassign);
    }

    /// An operator moves the log (SPEC 3.10) through the coordinator, as an
    /// admin tool would: with three target replicas, to two of them (one
    /// drawn leaves, the leader as likely as any), or, in a run with nodes
    /// that hold no copy, one time in two to another three, a node drawn
    /// from those taking the leaving one's place (a real data move: it
    /// fetches the log from its start); with two, back to three (a node
    /// outside the two, drawn when there are several, joins at a drawn
    /// place). One time in five, a move under way is cancelled instead.
    /// The controller and the nodes carry it out.
    ///
    /// A three-node run draws here what it drew before runs had more
    /// nodes: with none outside the target, nothing more is drawn.
    fn reassign(&mut self, log: usize) {
        let id = self.logs[log].id;
        let Ok(Some(state)) = self.coordinator().log_state(id) else {
            return;
        };
        let cancel = state.is_reassigning() && self.reassigner.chance(0.2);
        let outcome = if cancel {
            crate::coordinator::cancel_reassignment(self.coordinator(), id, MIN_INSYNC_REPLICAS)
        } else {
            let mut target = state.target_replicas();
            let outside: Vec<NodeId> = self
                .machines
                .iter()
                .map(|m| m.id)
                .filter(|id| !target.contains(id))
                .collect();
            let pick = |reassigner: &mut SplitMix64, nodes: &[NodeId]| match nodes {
                [] => None,
                [only] => Some(*only),
                nodes => Some(nodes[(reassigner.next_u64() % nodes.len() as u64) as usize]),
            };
            if target.len() >= REPLICATION_FACTOR {
                let leaving = (self.reassigner.next_u64() % target.len() as u64) as usize;
                let joining = if !outside.is_empty() && self.reassigner.chance(0.5) {
                    pick(&mut self.reassigner, &outside)
                } else {
                    None
                };
                match joining {
                    Some(joining) => target[leaving] = joining,
                    None => {
                        target.remove(leaving);
                    }
                }
            } else if let Some(joining) = pick(&mut self.reassigner, &outside) {
                let at = (self.reassigner.next_u64() % (target.len() as u64 + 1)) as usize;
                target.insert(at, joining);
            }
            crate::coordinator::reassign_log(self.coordinator(), id, &target, MIN_INSYNC_REPLICAS)
        };
        let what = if cancel { "cancel" } else { "reassign" };
        match outcome {
            Ok(state) => {
                if cancel {
                    self.reassignments.1 += 1;
                } else {
                    self.reassignments.0 += 1;
                    // A node added now that neither held a replica before
                    // the call nor was one at the start: data moves to it.
                    let created_on = &self.logs[log].created_on;
                    let before = &self.logs[log].replicas_seen.0;
                    self.moves_to_new_nodes += u64::from(
                        state
                            .adding_replicas
                            .iter()
                            .any(|node| !created_on.contains(node) && !before.contains(node)),
                    );
                }
                self.logs[log].replicas_wanted = state.target_replicas();
                let wanted: Vec<u32> = self.logs[log].replicas_wanted.iter().map(|n| n.0).collect();
                let name = if self.logs.len() == 1 {
                    "the log".to_owned()
                } else {
                    self.logs[log].name.clone()
                };
                self.record(format_args!("operator: {what} {name}, to {wanted:?}"));
            }
            // An added node not live, say: the operator tries again later.
            Err(error) => {
                let tag = self.logs[log].tag.clone();
                self.record(format_args!("operator: {tag}{what} refused: {error}"));
            }
        }
    }

    /// Whether node `index` runs and nothing the run did to it stands in
    /// the way of its replication: no partition in effect, its disk
    /// neither full nor flipped, its coordinator calls answered (not cut
    /// off, no answer to lose), no restart owed, not stopping, its replica
    /// of `log` open.
    fn healthy(&self, log: usize, index: usize) -> bool {
        let machine = &self.machines[index];
        !self.partitioned
            && !machine.disk_full
            && !self.coordinator().is_node_faulty(machine.id)
            && !machine.restart_owed
            && machine.flipped == 0
            && machine.stopping.is_none()
            && self.log_on(log, index).is_some()
    }

    /// Node `index` begins a controlled shutdown (SPEC 3.5), if it runs
    /// and is not stopping already; its hand-overs are stepped after
    /// every event ([`drive_controlled_stops`](Self::drive_controlled_stops)).
    /// A controller candidate not holding the seat ends with the begin,
    /// as `Node::shutdown` stops it; a seated one goes on electing until
    /// the node stops.
    fn begin_controlled_stop(&mut self, index: usize) {
        self.note_disturbances();
        let quiet = self
            .disturbances
            .last_at
            .is_none_or(|at| self.schedule.now() - at >= DISTURBANCE_LINGERS);
        self.faults += 1;
        if self.machines[index].stopping.is_some() {
            return;
        }
        let now = self.clock.now();
        let me = self.machines[index].id;
        let Some(process) = self.process(index) else {
            return;
        };
        let led = process.node.begin_controlled_shutdown(now) > 0;
        let seated = process
            .controller
            .as_ref()
            .is_some_and(|controller| controller.controller_epoch().is_some());
        if !seated {
            self.retire_controller(index);
        }
        let live = self.coordinator().live_nodes().unwrap_or_default();
        // A fetch lost shortly before is fetched again only after its
        // request timeout.
        let lingering = self.schedule.now().saturating_sub(DISTURBANCE_LINGERS);
        // Held strictly only if every log the node leads, or is named
        // leader of, has a successor ready.
        let mut named_count = 0;
        let mut successor_ready = quiet;
        for log in 0..self.logs.len() {
            let state = self
                .coordinator()
                .log_state(self.logs[log].id)
                .ok()
                .flatten();
            // A node that still believes it leads though the coordinator
            // named another (deposed, not yet told) has nothing to hand
            // over: the leadership already moved (seed 9000226).
            let named = state.as_ref().is_some_and(|state| state.leader == Some(me));
            let leads = self
                .log_on(log, index)
                .is_some_and(|replica| replica.is_leader());
            if !named && !leads && self.logs.len() > 1 {
                continue;
            }
            named_count += usize::from(named);
            let in_sync = state
                .map(|state| state.in_sync_replicas)
                .unwrap_or_default();
            let self_healthy = named && self.healthy(log, index);
            successor_ready = successor_ready
                && self_healthy
                && (0..self.machines.len()).any(|other| {
                    let id = self.machines[other].id;
                    other != index
                        && in_sync.contains(&id)
                        && live.contains(&id)
                        && self.healthy(log, other)
                        && !self.lost_since(index, other, lingering)
                });
        }
        let successor_ready = successor_ready && named_count > 0;
        self.controlled_stops.0 += 1;
        self.controlled_stops.1 += u64::from(led);
        self.machines[index].stopping = Some(ControlledStop {
            led,
            successor_ready,
            named: named_count,
            faults: self.fault_count(),
            began_at: self.schedule.now(),
            disk_time_at_begin: self.disk_time,
            busy_at_begin: self
                .machines
                .iter()
                .map(|machine| machine.busy_until.saturating_sub(self.schedule.now()))
                .max()
                .unwrap_or_default(),
        });
        self.record(format_args!(
            "node {index} ({me}) begins a controlled shutdown{}{}",
            if !led {
                ""
            } else if self.logs.len() == 1 {
                ", leading the log"
            } else {
                ", leading a log"
            },
            if successor_ready {
                ", a healthy in-sync replica is live"
            } else {
                ""
            }
        ));
    }

    /// Notes when faults last changed in number.
    fn note_disturbances(&mut self) {
        let faults = self.fault_count();
        if faults != self.disturbances.faults {
            self.disturbances = Disturbances {
                faults,
                last_at: Some(self.schedule.now()),
            };
        }
    }

    /// The faults so far: those the run drew (counted when drawn) and the
    /// planned disk errors that have hit (a write or sync fails up to 50
    /// operations after its plan, seconds later perhaps, on a node that
    /// may be a stop's successor by then: helper-57's review of 6c8bccb).
    fn fault_count(&self) -> u64 {
        self.faults
            + self.eio_failures_of_lost_disks
            + self
                .harness
                .nodes()
                .disks()
                .sims()
                .iter()
                .map(|disk| disk.stats().eio_failures)
                .sum::<u64>()
    }

    /// Notes a message between nodes `a` and `b` lost now.
    fn note_lost(&mut self, a: usize, b: usize) {
        let now = self.schedule.now();
        self.lost_between.insert((a.min(b), a.max(b)), now);
    }

    /// Notes a message between nodes `a` and `b` with these `arrivals`
    /// lost if it is lost or late (a slow message disturbs as a lost one
    /// does); returns what the trace says of a late one (nothing of the
    /// others, so that runs without slow messages trace what they did).
    fn note_lost_or_late(&mut self, a: usize, b: usize, arrivals: &[Duration]) -> &'static str {
        if !self.wire.is_lost_or_late(arrivals) {
            return "";
        }
        self.note_lost(a, b);
        if arrivals.is_empty() {
            return "";
        }
        self.network_shapes[0] += 1;
        ", slow"
    }

    /// Whether a message between nodes `a` and `b` was lost at or after
    /// `since`.
    fn lost_since(&self, a: usize, b: usize, since: Duration) -> bool {
        self.lost_between
            .get(&(a.min(b), a.max(b)))
            .is_some_and(|at| *at >= since)
    }

    /// Steps every controlled stop under way; a stop whose hand-overs are
    /// over is checked and ends.
    fn drive_controlled_stops(&mut self) -> Result<(), String> {
        self.note_disturbances();
        let now = self.clock.now();
        for index in 0..self.machines.len() {
            if self.machines[index].stopping.is_none() {
                continue;
            }
            let Some(process) = self.process(index) else {
                continue;
            };
            if let Some(handed_over) = process.node.step_controlled_shutdown(now) {
                self.end_controlled_stop(index, handed_over)?;
                continue;
            }
            let Some(stop) = self.machines[index].stopping else {
                continue;
            };
            let took = self.schedule.now() - stop.began_at;
            if took >= self.hand_over_bound(&stop) && self.is_undisturbed(index, &stop) {
                return Err(format!(
                    "SPEC 3.5: node {index}'s controlled shutdown has not handed the leadership over after {took:?}, though another in-sync replica was live and healthy and nothing failed meanwhile"
                ));
            }
        }
        Ok(())
    }

    /// How long `stop` may take to hand the leadership over when nothing
    /// gets in its way: [`HAND_OVER_BOUND`], plus the disk work that held
    /// the nodes' messages back: what was still pending when it began and
    /// what the nodes spent since, all nodes' summed (more than any one
    /// path needs).
    fn hand_over_bound(&self, stop: &ControlledStop) -> Duration {
        HAND_OVER_BOUND
            + stop.busy_at_begin
            + self.disk_time.saturating_sub(stop.disk_time_at_begin)
    }

    /// Whether node `index`'s `stop` is of the leader, began with a
    /// healthy successor at hand, and saw no fault and no message to or
    /// from the node lost since.
    ///
    /// Also only while the bound ends before the stopping node's session
    /// may expire ([`SESSION_EXPIRES_AFTER_STOP`]): from then on the
    /// controller may elect a successor first, as it may (seed 3957916697:
    /// a leader on a 20 ms-fsync disk with 23 pipelined appends still to
    /// write began a stop, its bound grew past 700 ms with the disk work,
    /// and its session expired at 700 ms, before its follower had fetched
    /// the stopped end).
    fn is_undisturbed(&self, index: usize, stop: &ControlledStop) -> bool {
        stop.led
            && stop.successor_ready
            && self.hand_over_bound(stop) <= SESSION_EXPIRES_AFTER_STOP
            && stop.faults == self.fault_count()
            && !(0..self.machines.len()).any(|other| self.lost_since(index, other, stop.began_at))
    }

    /// Node `index`'s controlled stop, its hand-overs over, ends: checked,
    /// then its process stops cleanly, to be started again a little later.
    ///
    /// The check (SPEC 3.5): a leader's controlled stop moves the
    /// leadership before the node stops when another in-sync replica is
    /// live. Held strictly only where nothing got in its way: the stop
    /// began at least [`DISTURBANCE_LINGERS`] after the last fault, with
    /// another replica in the ISR, live and healthy, no message between it
    /// and the stopping node lost within that time (seed 8: both
    /// followers' fetches were lost 0.4 s before a stop began, and they
    /// fetched again only after their request timeout, when the stopping
    /// leader's session had expired), and no fault (nor another stop)
    /// happened and no message to or from the stopping node was lost
    /// before it ended or
    /// [`HAND_OVER_BOUND`] passed. Then the stop's own hand-over
    /// (`handed_over`) must have moved it within that bound
    /// ([`drive_controlled_stops`](Self::drive_controlled_stops) fails a
    /// stop still waiting then): a stopping node heartbeats no more, so once
    /// its session expires the controller elects a successor anyway, which
    /// would hide a hand-over that never names one (checked: with
    /// `hand_over_step` never naming a successor, 40 seeds passed when the
    /// check looked only at who leads at the end, and 100 when it required
    /// no loss until the stop's end, which such a stop is long enough to
    /// see). Otherwise the stop may leave the log to the controller once
    /// its deadline passes, as SPEC 3.5 allows.
    ///
    /// With several logs, `handed_over` counts the logs the stop's own
    /// hand-overs named a successor for; one held strictly must have
    /// handed over every log the coordinator named the node leader of.
    fn end_controlled_stop(&mut self, index: usize, handed_over: usize) -> Result<(), String> {
        let Some(stop) = self.machines[index].stopping.take() else {
            return Ok(());
        };
        let me = self.machines[index].id;
        let leaders: Vec<Option<u32>> = self
            .logs
            .iter()
            .map(|log| {
                self.coordinator()
                    .log_state(log.id)
                    .ok()
                    .flatten()
                    .and_then(|state| state.leader)
                    .map(|n| n.0)
            })
            .collect();
        let leader = match leaders.as_slice() {
            [leader] => format!("{leader:?}"),
            leaders => format!("{leaders:?} (by log)"),
        };
        let took = self.schedule.now() - stop.began_at;
        if stop.led {
            if handed_over > 0 {
                self.leaderships_handed_over.0 += 1;
            }
            if took < self.hand_over_bound(&stop) && self.is_undisturbed(index, &stop) {
                self.leaderships_handed_over.1 += 1;
                if handed_over < stop.named {
                    return Err(format!(
                        "SPEC 3.5: node {index}'s controlled shutdown ends after {took:?}, the log's leader {leader}, having handed over {handed_over} of the {} logs it led, though another in-sync replica was live and healthy and nothing failed meanwhile",
                        stop.named
                    ));
                }
            }
        }
        if self.process(index).is_none() {
            return Ok(());
        }
        // Taken before the harness stops the process, which would drop it
        // uncounted.
        self.retire_controller(index);
        self.machines[index].restart_owed = false;
        // The harness finishes the controlled shutdown, then the network
        // drops the node's handler (nothing routes through it: the run
        // carries every fetch).
        // A replica lost with an earlier disk and not placed on this one
        // since (it never opened: a full or failing disk) is still lost
        // after a clean stop, and the next start says so (SPEC 2.8, seed
        // 60151104: LostData after a clean stop, right).
        // Only a replica the node does not host counts: one it hosts was
        // placed on this directory before it served (`record_directory`),
        // so a record that says otherwise is a bug the check must see.
        let coordinator = self.coordinator().clone();
        let lost_before_stop = self.process(index).map(|process| {
            let node = process.node.node();
            let hosted = node.logs();
            node.replicas_lost_at_next_start(&coordinator)
                .map(|lost| lost.into_iter().filter(|log| !hosted.contains(log)).count())
        });
        let stopped = self.harness.stop_node_marked(me);
        // A stop right after an unclean start whose report is not yet
        // recorded everywhere writes no marker (seed 143), on purpose. A
        // flip on the disk, even one before the stop, may have the next
        // start find the node other than clean (seed 8000062: a flip in
        // identity.properties, a directory it no longer knows: LostData).
        self.machines[index].start_expected = match lost_before_stop {
            Some(Ok(lost)) if matches!(stopped, Ok(true)) && self.machines[index].flipped == 0 => {
                Some(if lost == 0 {
                    PreviousShutdown::Clean
                } else {
                    PreviousShutdown::LostData
                })
            }
            _ => None,
        };
        // A planned disk fault that did not hit was meant for this process.
        self.disk(index).fail_with_eio(EioPlan::Never, &[]);
        self.process_ended(index);
        self.record(format_args!(
            "node {index} stops cleanly (leader then: {leader}){}",
            match &stopped {
                Ok(true) => String::new(),
                Ok(false) => ", without the clean-shutdown marker".to_owned(),
                Err(error) => format!(", closing failed: {error}"),
            }
        ));
        let uniform = 1.0 - self.operator.next_f64();
        let down_for = Duration::from_micros(
            ((-uniform.ln() * CONTROLLED_STOP_DOWN_MEAN.as_micros() as f64) as u64).max(1),
        );
        self.schedule.after(down_for, Event::Restart(index));
        Ok(())
    }

    /// Draws what disk operations cost in this run, in microseconds
    /// ([`DISK_TIME_UNIT`]): in 4 runs of 10 nothing, in 3 every disk is a
    /// fast SSD (fsync 0.1-1 ms), in 3 one node's disk is slow (fsync 1-20
    /// ms) and the others fast. Each operation also costs up to a tenth of
    /// the fsync more (jitter, drawn from the disk's own seed).
    fn draw_latencies(&mut self) {
        let profile = self.rng.next_u64() % 10;
        if profile < 4 {
            return;
        }
        let slow =
            (profile >= 7).then(|| (self.rng.next_u64() % self.machines.len() as u64) as usize);
        for index in 0..self.machines.len() {
            let sync_micros = if slow == Some(index) {
                1_000 + self.rng.next_u64() % 19_001
            } else {
                100 + self.rng.next_u64() % 900
            };
            let latency = Latency {
                per_operation: 1 + self.rng.next_u64() % 20,
                per_kib: 1 + self.rng.next_u64() % 10,
                per_sync: sync_micros,
                jitter: sync_micros / 10,
            };
            self.sync_latency_max = self.sync_latency_max.max(disk_time(sync_micros));
            self.machines[index].latency = latency;
            self.disk(index).set_latency(latency);
        }
        self.record(format_args!(
            "disk latencies: {:?}",
            self.machines
                .iter()
                .map(|m| m.latency.per_sync)
                .collect::<Vec<_>>()
        ));
    }

    /// How long from now node `index` stays busy with its disk.
    ///
    /// The model: a node's calls into its storage are synchronous, and
    /// [`SimDisk`] counts what each operation would have cost
    /// ([`Latency`]) instead of sleeping. Whatever the disk time a node
    /// spent since it was last charged, it spent it from the later of now
    /// and the end of its earlier disk work (the process does one thing at
    /// a time), and nothing it sends leaves before that: a follower's next
    /// fetch waits for the fsync of what it appended (its fetch offset
    /// acknowledges only flushed data, SPEC 2.5), and a leader's fetch
    /// answer for its reads and its own appends' fsyncs. So a slow disk
    /// slows what its node says to the others, and from there the high
    /// watermark, the ISR (a follower whose answers lag by more than
    /// `replica_lag_time_max` drops out), and the clients' outcomes. Not
    /// modelled: the node's own control pass and the clients' view of an
    /// append's outcome are not delayed (the node's core runs as soon as
    /// an event reaches it), and a crash ends the busy time (its process
    /// is gone). The whole world does not wait for one disk: the others
    /// run on.
    fn busy_for(&mut self, index: usize) -> Duration {
        let now = self.schedule.now();
        let elapsed = self.disk(index).elapsed();
        let machine = &mut self.machines[index];
        let spent = disk_time(elapsed.saturating_sub(machine.disk_time_charged));
        machine.disk_time_charged = elapsed;
        machine.busy_until = machine.busy_until.max(now) + spent;
        self.disk_time += spent;
        machine.busy_until - now
    }

    /// Gives machine `index` an empty disk (its process is down).
    fn new_disk(&mut self, index: usize) {
        let old = self.disk(index).stats();
        self.full_disk_refusals_of_lost_disks += old.full_disk_failures;
        // `fault_count` must never go down (helper-60).
        self.eio_failures_of_lost_disks += old.eio_failures;
        let seed = mix64(self.config.seed ^ self.crashes ^ 0xD15C_1057);
        let disk = SimDisk::new(seed);
        disk.set_latency(self.machines[index].latency);
        self.harness
            .disks_mut()
            .replace(self.machines[index].id, disk);
        self.machines[index].disk_time_charged = 0;
        self.machines[index].flipped = 0;
        self.machines[index].power_cut_armed = false;
        self.machines[index].start_expected = None;
        self.machines[index].excused_at_step_start = false;
        self.machines[index].last_corrupt = None;
        self.application_disk_lost(index);
    }

    /// At the calm, an operator replaces the flipped disk if a flip its
    /// reads still see is in a segment or checkpoint (see
    /// [`excusing_flips`](Self::excusing_flips)), and its node comes back
    /// on the empty disk as one that lost its data (SPEC 2.8) and
    /// refetches. A disk whose flips are all in indexes, or in bytes no
    /// file holds any more (a removed segment, a rewritten checkpoint), is
    /// kept: an index is derived data that recovery rebuilds when it is
    /// invalid and reads check (SPEC 2.3), so its node must recover on its
    /// own, as the liveness check then demands.
    ///
    /// SPEC promises for a flipped byte (G5, 2.3) a clear error or a clean
    /// recovery, and no wrong record or silent loss: the per-step checks
    /// hold the flipped node to that until the calm. It does not promise
    /// that the replica heals: a batch flipped below the recovery point is
    /// `Corrupt` on every read (a leader answers such fetches with an
    /// error, and a follower that needs them waits), and a log whose
    /// recovery finds damage below what may have been committed refuses to
    /// open (2.3). That is where an operator steps in, so the liveness
    /// check after the calm (every replica at the leader's log end within
    /// 20 s) is made of the other replicas' disks, which hold every
    /// committed record (at least one of the two ISR members a commit
    /// needs), and the flipped node's refetch.
    fn replace_flipped_disk(&mut self) {
        let Some(index) = self.flip_node else {
            return;
        };
        let flips = self.machines[index].flipped;
        if flips == 0 {
            return;
        }
        let excusing = self.excusing_flips(index);
        if excusing.is_empty() {
            self.flipped_disks_kept += 1;
            self.record(format_args!(
                "node {index}'s disk is kept: none of its {flips} flipped bits that reads still see is in a segment or checkpoint"
            ));
            return;
        }
        if let Some((log, from)) = self.acknowledged_held_only_by(index) {
            self.only_copy_flipped = true;
            let tag = self.logs[log].tag.clone();
            self.record(format_args!(
                "node {index}'s flipped disk holds the only copy of {tag}acknowledged records from {from} (every other replica's log ends there): G1 cannot hold for them, whether the disk is replaced or kept; the run ends at the calm"
            ));
            return;
        }
        // A crash here may lose the disk already; replacing it is the same.
        self.crash(index, false);
        if self.machines[index].flipped > 0 {
            self.new_disk(index);
        }
        self.flipped_disks_replaced += 1;
        self.record(format_args!(
            "an operator replaces node {index}'s disk ({flips} bits flipped on it, {} of them in a segment or checkpoint its reads see)",
            excusing.len()
        ));
    }

    /// A log and its first acknowledged offset that no replica of it but node
    /// `index` holds: none of the others' disks has a batch of the epoch it
    /// was acknowledged in there (a log end past it is not enough: seed
    /// 20027069's node 2 held a deposed leader's record there, which the
    /// replacement then had elected). `None` when the others hold every
    /// acknowledged record, or when it cannot be told (a disk that cannot
    /// be read).
    ///
    /// The replacement of a flipped disk assumes the other disks hold every
    /// committed record (at least one of the two ISR members a commit
    /// needs). After the others lost theirs (power losses, a reassignment
    /// that dropped a replica being added, unclean recovery electing the
    /// flipped node with the longest log), the flipped node may be the only
    /// holder (seed 20000545: the flip sat in the only copy of 326..426,
    /// acknowledged up to 390, so no follower could fetch past 326, and the
    /// replacement lost them). A bit flip in the last copy of a record is
    /// a loss no replication protocol repairs: G1 assumes a surviving copy.
    fn acknowledged_held_only_by(&self, index: usize) -> Option<(usize, Offset)> {
        (0..self.logs.len()).find_map(|log| {
            self.acknowledged_held_only_by_on(log, index)
                .map(|offset| (log, offset))
        })
    }

    /// [`acknowledged_held_only_by`](Self::acknowledged_held_only_by) for
    /// one log.
    fn acknowledged_held_only_by_on(&self, log: usize, index: usize) -> Option<Offset> {
        let log_run = &self.logs[log];
        if log_run.acknowledged.is_empty() {
            return None;
        }
        let replicas = self.coordinator().log_state(log_run.id).ok()??.replicas;
        // Each other replica's batches, `(base, last, epoch)` in offset
        // order, as its disk holds them (down or not, read without touching
        // the run).
        let mut others = Vec::new();
        for (other, machine) in self.machines.iter().enumerate() {
            if other == index || !replicas.contains(&machine.id) {
                continue;
            }
            let sim_disk = self.disk(other);
            let disk = sim_disk.shared();
            let dir =
                std::path::PathBuf::from(data_dir(other)).join(format!("log-{}", log_run.id.0));
            let batches: Vec<(Offset, Offset, LeaderEpoch)> = sim_disk.unobserved(|| {
                if !disk.exists(&dir) {
                    return Some(Vec::new());
                }
                let report = crate::storage::inspect::inspect_dir_on(&disk, &dir).ok()?;
                Some(
                    report
                        .segments
                        .iter()
                        .flat_map(|segment| &segment.batches)
                        .map(|batch| (batch.base_offset, batch.last_offset, batch.leader_epoch))
                        .collect(),
                )
            })?;
            others.push(batches);
        }
        // Held by `batches`: a batch of the acknowledged epoch covers it,
        // or it lies below the replica's first batch (deleted there by
        // retention or a restart at an offset: SPEC 3.9's applications hold
        // it, as `check_final` counts it).
        let holds = |batches: &[(Offset, Offset, LeaderEpoch)], offset: Offset, epoch| {
            let at = batches.partition_point(|(_, last, _)| *last < offset);
            batches.first().is_some_and(|(base, _, _)| offset < *base)
                || batches
                    .get(at)
                    .is_some_and(|(base, _, e)| *base <= offset && *e == epoch)
        };
        log_run
            .acknowledged_epochs
            .iter()
            .find(|(offset, epoch)| {
                others
                    .iter()
                    .all(|batches| !holds(batches, **offset, **epoch))
            })
            .map(|(offset, _)| *offset)
    }

    /// Asks every idle session of every live node for its next fetch, and
    /// sends it. A session waits for its answer (or deadline) before the
    /// next; one asked to wait does so until its time or a change of its
    /// targets.
    fn drive_fetchers(&mut self) {
        let now = self.schedule.now();
        let clock_now = self.clock.now();
        for follower in 0..self.machines.len() {
            let Some(process) = process_mut(&mut self.harness, follower) else {
                continue;
            };
            let node = &process.node;
            let version = node.fetchers_version();
            let taken = self.machines[follower]
                .fetch_sessions_seen
                .as_ref()
                .is_none_or(|(seen, _)| *seen != version)
                .then(|| node.fetch_sessions());
            let machine = &mut self.machines[follower];
            if let Some(current) = taken {
                machine.fetch_sessions_seen = Some((version, current));
            }
            let current: &[FetchSession] = machine
                .fetch_sessions_seen
                .as_ref()
                .map_or(&[], |(_, current)| current);
            // A retired fetcher's thread still applies the answer to the
            // fetch it has out (it checks its stop only before the next), so
            // a retired session stays until that answer or failure.
            machine.sessions.retain(|kept| {
                kept.outstanding.is_some() || current.iter().any(|c| c.is(&kept.fetch))
            });
            for fetch in current {
                if !machine.sessions.iter().any(|kept| kept.fetch.is(fetch)) {
                    machine.sessions.push(Session {
                        fetch: fetch.clone(),
                        outstanding: None,
                        resume: None,
                    });
                }
            }
            let mut sends = Vec::new();
            let mut wakes = Vec::new();
            for session in &mut machine.sessions {
                if session.outstanding.is_some() || session.fetch.is_stopped() {
                    continue;
                }
                if let Some((until, seen)) = session.resume {
                    if now < until && !session.fetch.changed_since(seen) {
                        continue;
                    }
                }
                session.resume = None;
                match session.fetch.next_request(clock_now) {
                    NextFetch::Send(request, in_flight) => {
                        let sequence = self.next_sequence;
                        self.next_sequence += 1;
                        session.outstanding = Some((sequence, in_flight));
                        sends.push((session.fetch.leader(), sequence, request));
                    }
                    NextFetch::Idle { until, seen } => {
                        let until = until.saturating_duration_since(self.epoch);
                        session.resume = Some((until, seen));
                        wakes.push(until);
                    }
                }
            }
            for until in wakes {
                self.schedule.at(until, Event::FetchResume(follower));
            }
            for (leader, sequence, request) in sends {
                self.send_fetch(follower, leader, sequence, request);
            }
        }
    }

    fn send_fetch(
        &mut self,
        follower: usize,
        leader: NodeId,
        sequence: u64,
        request: FetchRequest,
    ) {
        self.fetches += 1;
        let busy = self.busy_for(follower);
        let deadline = busy + request.wait_max + REQUEST_TIMEOUT;
        self.schedule.after(
            deadline,
            Event::FetchTimedOut {
                follower,
                leader,
                sequence,
            },
        );
        let from = self.machines[follower].id;
        let arrivals = self.wire.send(from, leader);
        let late = self.note_lost_or_late(follower, leader.0 as usize, &arrivals);
        self.record(format_args!(
            "fetch {sequence} {follower}->{leader} ({} copies){late}",
            arrivals.len()
        ));
        let leader_index = leader.0 as usize;
        for delay in arrivals {
            self.schedule.after(
                busy + delay,
                Event::FetchArrives {
                    leader: leader_index,
                    follower,
                    sequence,
                    request: request.clone(),
                },
            );
        }
    }

    fn fetch_arrives(
        &mut self,
        leader: usize,
        follower: usize,
        sequence: u64,
        request: FetchRequest,
    ) {
        let Some(process) = process_mut(&mut self.harness, leader) else {
            // Nobody listens: the call fails at once, as the memory and TCP
            // transports' calls to a dead node do.
            let to = self.machines[leader].id;
            self.fetch_answered(
                follower,
                to,
                sequence,
                Err(TransportError::Unreachable {
                    to,
                    reason: "no process".to_owned(),
                }),
            );
            return;
        };
        let from = self.machines[follower].id;
        // The threaded handler's cap on the wait (`request_timeout`).
        let wait = process.node.fetch_wait(&request);
        self.fetch_arrivals
            .insert((leader, follower), self.schedule.now());
        match process.node.receive_fetch(from, &request, wait.is_zero()) {
            FetchPoll::Answer(response) => self.answer_fetch(leader, follower, sequence, response),
            FetchPoll::Park { arrival, seen, .. } => {
                let wait_over_at = self.schedule.now() + wait;
                self.schedule.at(wait_over_at, Event::FetchWaitOver);
                self.parked.push(Parked {
                    leader,
                    follower,
                    sequence,
                    request,
                    arrival,
                    seen,
                    wait_over_at,
                });
            }
        }
    }

    /// Looks again at every parked fetch whose leader got data since, or
    /// whose wait is over, in the order they were parked.
    fn look_at_parked_fetches(&mut self) {
        let now = self.schedule.now();
        let parked = std::mem::take(&mut self.parked);
        let mut answers = Vec::new();
        for mut fetch in parked {
            let Some(process) = process_mut(&mut self.harness, fetch.leader) else {
                continue;
            };
            let node = &process.node;
            let over = now >= fetch.wait_over_at;
            if !over && !node.data_arrived_since(fetch.seen) {
                self.parked.push(fetch);
                continue;
            }
            let from = self.machines[fetch.follower].id;
            match node.poll_fetch(from, &fetch.request, fetch.arrival, over) {
                FetchPoll::Answer(response) => {
                    answers.push((fetch.leader, fetch.follower, fetch.sequence, response));
                }
                FetchPoll::Park { arrival, seen, .. } => {
                    fetch.arrival = arrival;
                    fetch.seen = seen;
                    self.parked.push(fetch);
                }
            }
        }
        for (leader, follower, sequence, response) in answers {
            self.answer_fetch(leader, follower, sequence, response);
        }
    }

    fn answer_fetch(&mut self, leader: usize, follower: usize, sequence: u64, response: Response) {
        let (from, to) = (self.machines[leader].id, self.machines[follower].id);
        let busy = self.busy_for(leader);
        let arrivals = self.wire.send(from, to);
        let late = self.note_lost_or_late(leader, follower, &arrivals);
        self.record(format_args!(
            "answer {sequence} {leader}->{follower} ({} copies){late}",
            arrivals.len()
        ));
        for delay in arrivals {
            self.schedule.after(
                busy + delay,
                Event::FetchAnswered {
                    follower,
                    leader: from,
                    sequence,
                    response: response.clone(),
                },
            );
        }
    }

    /// Hands a fetch's answer (or its failure) to the session that sent it,
    /// if that session still waits for it; a late copy, or an answer to a
    /// dead process or a stopped fetcher, is dropped.
    fn fetch_answered(
        &mut self,
        follower: usize,
        leader: NodeId,
        sequence: u64,
        answer: Result<Response, TransportError>,
    ) {
        let now = self.clock.now();
        let epoch = self.epoch;
        if process_mut(&mut self.harness, follower).is_none() {
            return;
        }
        let machine = &mut self.machines[follower];
        let Some(session) = machine.sessions.iter_mut().find(|s| {
            s.fetch.leader() == leader
                && s.outstanding.as_ref().is_some_and(|(q, _)| *q == sequence)
        }) else {
            return;
        };
        let Some((_, in_flight)) = session.outstanding.take() else {
            return;
        };
        let seen = in_flight.seen();
        let failed = answer.is_err();
        let mut wake = None;
        if let Some(until) = session.fetch.on_response(in_flight, answer, now) {
            let until = until.saturating_duration_since(epoch);
            session.resume = Some((until, seen));
            wake = Some(until);
        }
        // The back-off ends on time even if nothing else happens then.
        if let Some(until) = wake {
            self.schedule.at(until, Event::FetchResume(follower));
        }
        if failed {
            self.record(format_args!("fetch {sequence} {follower}<-{leader} failed"));
        }
    }

    /// Checks that hold after every step: every replica's records below
    /// its high watermark are the ones committed there (G1, G2; each record
    /// is compared once), a leader's high watermark never moves backwards
    /// within its epoch (G3) and never passes its log end, and a leader's
    /// committed end is above what earlier leaders acknowledged (SPEC 3.8).
    ///
    /// Each log is checked apart; a failure names its log.
    fn check_step(&mut self) -> Result<(), String> {
        for log in 0..self.logs.len() {
            if let Err(error) = self.check_step_of(log) {
                return Err(format!("{}{error}", self.logs[log].tag));
            }
        }
        Ok(())
    }

    /// [`check_step`](Self::check_step) for log `log`.
    fn check_step_of(&mut self, log: usize) -> Result<(), String> {
        self.trace_log_state(log)?;
        // Taken once for both passes: the checks change no node's
        // replicas (looking a replica up was a tenth of the checks).
        let id = self.logs[log].id;
        let mut handles = std::mem::take(&mut self.step_logs);
        for index in 0..self.machines.len() {
            let handle = process_mut(&mut self.harness, index)
                .and_then(|process| process.node.node().log(id).ok());
            handles.push(handle);
        }
        let checked = self.check_step_on(log, &handles);
        handles.clear();
        self.step_logs = handles;
        checked
    }

    /// [`check_step_of`](Self::check_step_of) log `log` with each node's
    /// handle of it, if it has the log.
    fn check_step_on(
        &mut self,
        log_index: usize,
        handles: &[Option<crate::ReplicatedLog>],
    ) -> Result<(), String> {
        for (index, log) in handles.iter().enumerate() {
            if let Some(log) = log {
                self.check_committed_on_log(log_index, index, log)?;
            }
        }
        for (index, log) in handles.iter().enumerate() {
            let Some(log) = log else {
                continue;
            };
            if log.is_storage_failed() && !self.machines[index].restart_owed {
                // A fault where it hits (a full disk's write fails when it
                // comes, not when the budget is set).
                self.faults += 1;
                self.machines[index].restart_owed = true;
                self.supervisor_restarts += 1;
                self.schedule
                    .after(SUPERVISOR_RESTART_AFTER, Event::SupervisorRestart(index));
            }
            let high_watermark = log.high_watermark();
            let end = log.log_end_offset();
            if high_watermark > end {
                return Err(format!(
                    "node {index}: high watermark {high_watermark} above its log end {end}"
                ));
            }
            if !log.is_leader() {
                continue;
            }
            // SPEC 3.8: a leader's committed end, once it says it knows it,
            // is above every offset an earlier leader acknowledged.
            let epoch = log.leader_epoch();
            if let Ok(committed_end) = log.committed_end() {
                let earlier = self.acknowledged_before(log_index, epoch);
                if let Some(acknowledged) = earlier.filter(|o| committed_end <= *o) {
                    return Err(format!(
                        "SPEC 3.8: node {index}, leader in epoch {epoch}, says the committed end is {committed_end}, but an earlier leader acknowledged {acknowledged}"
                    ));
                }
            }
            self.check_fetches_vouch_as_of_arrival(log_index, index, log)?;
            let shown = self.logs[log_index]
                .leader_high_watermarks
                .entry((index, log.leader_epoch()))
                .or_insert(high_watermark);
            if high_watermark < *shown {
                return Err(format!(
                    "G3: node {index}, leader in epoch {}, showed high watermark {} and now {high_watermark}",
                    log.leader_epoch(),
                    *shown
                ));
            }
            *shown = high_watermark;
        }
        Ok(())
    }

    /// The highest offset acknowledged in an epoch before `epoch`. Kept
    /// until an acknowledgement changes it: the leader's check after every
    /// step went through the epochs each time.
    fn acknowledged_before(&mut self, log: usize, epoch: LeaderEpoch) -> Option<Offset> {
        let log = &mut self.logs[log];
        match log.acknowledged_before {
            Some((before, earlier)) if before == epoch => earlier,
            _ => {
                let earlier = log
                    .acknowledged_by_epoch
                    .range(..epoch)
                    .map(|(_, o)| *o)
                    .max();
                log.acknowledged_before = Some((epoch, earlier));
                earlier
            }
        }
    }

    /// SPEC 3.4: a fetch vouches for its follower only as of its arrival,
    /// so a leader never counts a follower caught up later than the last
    /// fetch from it arrived (or, before any, than the leader began to
    /// lead). A fetch the leader holds in a long poll and looks at again
    /// when data arrives must not count as new then: that re-admitted a
    /// partitioned follower once (a4b6a3f), and held the high watermark of
    /// every `acks=all` append until the lag timeout.
    fn check_fetches_vouch_as_of_arrival(
        &mut self,
        log_index: usize,
        index: usize,
        log: &crate::ReplicatedLog,
    ) -> Result<(), String> {
        let now = self.schedule.now();
        let epoch = log.leader_epoch();
        let since = *self.logs[log_index]
            .leading_since
            .entry((index, epoch))
            .or_insert(now);
        for follower in 0..self.machines.len() {
            if follower == index {
                continue;
            }
            let Some((_, behind_for)) = log.follower_lag(self.machines[follower].id) else {
                continue;
            };
            let caught_up_at = now.saturating_sub(behind_for);
            let vouched = self
                .fetch_arrivals
                .get(&(index, follower))
                .copied()
                .map_or(since, |arrived| arrived.max(since));
            if caught_up_at > vouched {
                return Err(format!(
                    "SPEC 3.4: node {index}, leader in epoch {epoch}, counts node {follower} caught up at {caught_up_at:?}, after its last fetch arrived ({vouched:?})"
                ));
            }
        }
        Ok(())
    }

    /// Records the coordinator's leader, epoch, ISR and ELR of the log
    /// when they changed since the last step (a replay's trace then shows
    /// elections and ISR changes between the clients' lines), and checks
    /// the ISR expansions among the changes
    /// ([`check_expansions_vouched`](Self::check_expansions_vouched)).
    fn trace_log_state(&mut self, log: usize) -> Result<(), String> {
        // Compared where it is, and copied only when something changed:
        // most steps change nothing, and copying the state and its lists
        // to compare them was 4% of a `cargo test` simulator run.
        let log_run = &self.logs[log];
        let (replicas_seen, state_seen) = (&log_run.replicas_seen, &log_run.log_state_seen);
        let looked = self.coordinator().look_at_log_state(log_run.id, |state| {
            let (replicas, adding, removing) = replicas_seen;
            let replicas_changed = state.replicas != *replicas
                || state.adding_replicas != *adding
                || state.removing_replicas != *removing;
            let state_changed = !state_seen
                .as_ref()
                .is_some_and(|(leader, epoch, isr, elr)| {
                    *leader == state.leader
                        && *epoch == state.leader_epoch
                        && *isr == state.in_sync_replicas
                        && *elr == state.eligible_leader_replicas
                });
            (replicas_changed || state_changed)
                .then(|| (replicas_changed, state_changed, state.clone()))
        });
        let Ok(Some(Some((replicas_changed, state_changed, state)))) = looked else {
            return Ok(());
        };
        // Recorded only once they change, so that the traces of runs
        // without reassignments stay as they were.
        if replicas_changed {
            let replicas = (
                state.replicas.clone(),
                state.adding_replicas.clone(),
                state.removing_replicas.clone(),
            );
            let ids = |nodes: &[NodeId]| nodes.iter().map(|n| n.0).collect::<Vec<_>>();
            let name = self.logs[log].name.clone();
            self.record(format_args!(
                "{name}: replicas {:?} adding {:?} removing {:?}",
                ids(&replicas.0),
                ids(&replicas.1),
                ids(&replicas.2)
            ));
            let log_run = &mut self.logs[log];
            if log_run.replicas_seen.1.len() + log_run.replicas_seen.2.len() > 0
                && !state.is_reassigning()
                && state.replicas == log_run.replicas_wanted
            {
                self.reassignments.2 += 1;
            }
            // A node that left the log and comes back later starts from
            // an empty replica: check it from its start then. Reset again
            // when it is added back: a removed node cut off from the
            // coordinator keeps its old copy for a while, which the step
            // checks go on reading (review of b33ad1c).
            for (machine, check) in self.machines.iter().zip(&mut log_run.checks) {
                if !replicas.0.contains(&machine.id)
                    || !log_run.replicas_seen.0.contains(&machine.id)
                {
                    *check = ReplicaCheck::default();
                }
            }
            log_run.replicas_seen = replicas;
        }
        if !state_changed {
            return Ok(());
        }
        let seen = (
            state.leader,
            state.leader_epoch,
            state.in_sync_replicas,
            state.eligible_leader_replicas,
        );
        let name = self.logs[log].name.clone();
        self.record(format_args!(
            "{name}: leader {:?} epoch {} ISR {:?} ELR {:?}",
            seen.0.map(|n| n.0),
            seen.1,
            seen.2.iter().map(|n| n.0).collect::<Vec<_>>(),
            seen.3.iter().map(|n| n.0).collect::<Vec<_>>()
        ));
        let tenure = (seen.0, seen.1);
        let previous = self.logs[log].log_state_seen.replace(seen);
        let new_tenure = previous
            .as_ref()
            .is_none_or(|(leader, epoch, _, _)| (*leader, *epoch) != tenure);
        if tenure.0.is_some() && new_tenure {
            self.logs[log].leaders += 1;
        }
        self.check_expansions_vouched(log, previous)
    }

    /// SPEC 3.4: a fetch vouches for its follower only as of its arrival,
    /// so a follower its leader adds back to the ISR (same leader, same
    /// epoch) must have had a fetch reach that leader since it was last
    /// seen leaving the ISR (or outside it when the epoch began). A fetch
    /// held in a long poll since before the follower left must not
    /// re-admit it: the follower may have been cut off meanwhile, and
    /// every `acks=all` append would wait for it until the lag timeout.
    /// [`check_fetches_vouch_as_of_arrival`](Self::check_fetches_vouch_as_of_arrival)
    /// checks the catch-up time only. (A planted bug that proposes the
    /// expansion from the held fetch, keeping its catch-up time at the
    /// arrival, passed seeds 0-2999 with this check as without it: it
    /// needs the follower removed while its fetch is parked, which only the
    /// controller does that fast.)
    ///
    /// Sound only while a leader proposes an expansion on a fetch counted
    /// as new (`LeaderState::on_fetch`): such a fetch is looked at after
    /// the leader learned of the removal. Observed once per step: a
    /// removal is seen at the end of the step that made it (a removal and
    /// a re-admission within one step are not seen), and any fetch that
    /// reached the leader counts, even one it refused.
    fn check_expansions_vouched(
        &mut self,
        log: usize,
        previous: Option<LogStateSeen>,
    ) -> Result<(), String> {
        let Some((leader, epoch, isr, _)) = self.logs[log].log_state_seen.clone() else {
            return Ok(());
        };
        let now = self.schedule.now();
        let index_of =
            |machines: &[Machine], node: NodeId| machines.iter().position(|m| m.id == node);
        let same_tenure = previous
            .as_ref()
            .is_some_and(|(before, before_epoch, _, _)| {
                *before == leader && *before_epoch == epoch
            });
        if let (true, Some(leader), Some((_, _, before_isr, _))) = (same_tenure, leader, &previous)
        {
            let leader_index = index_of(&self.machines, leader);
            for &added in isr
                .iter()
                .filter(|n| **n != leader && !before_isr.contains(n))
            {
                let left_at = self.logs[log]
                    .outside_isr_since
                    .get(&added)
                    .copied()
                    .unwrap_or(Duration::ZERO);
                let arrived = leader_index
                    .zip(index_of(&self.machines, added))
                    .and_then(|key| self.fetch_arrivals.get(&key).copied());
                if arrived.is_none_or(|arrived| arrived < left_at) {
                    return Err(format!(
                        "SPEC 3.4: node {}, leader in epoch {epoch}, added node {} to the ISR at {now:?}, but no fetch from it reached the leader since it left the ISR at {left_at:?} (last arrival {arrived:?})",
                        leader.0, added.0
                    ));
                }
            }
        }
        let log_run = &mut self.logs[log];
        for machine in &self.machines {
            let outside = !isr.contains(&machine.id);
            let left = match &previous {
                Some((_, before_epoch, before_isr, _)) => {
                    *before_epoch != epoch || before_isr.contains(&machine.id)
                }
                None => true,
            };
            if outside && left {
                log_run.outside_isr_since.insert(machine.id, now);
            }
        }
        Ok(())
    }

    /// The node that leads log `log`, if one does. Asked after most events:
    /// through [`running_mut`](Harness::running_mut), without the lock.
    fn leader(&mut self, log: usize) -> Option<(usize, crate::ReplicatedLog)> {
        let log_id = self.logs[log].id;
        self.harness.running_mut().iter().find_map(|(id, running)| {
            let log = running.process.node.node().log(log_id).ok()?;
            log.is_leader().then_some((id.0 as usize, log))
        })
    }

    /// Reads from the reader's position what the leader serves as
    /// committed. What a reader saw committed must never change (G1 for
    /// readers: a record read as committed is never truncated) and never be
    /// at or above the leader's high watermark (G3); the end checks that
    /// every record read is in the final log.
    fn read(&mut self, log_index: usize) -> Result<(), String> {
        let Some((index, log)) = self.leader(log_index) else {
            return Ok(());
        };
        let tag = self.logs[log_index].tag.clone();
        let from = self.logs[log_index]
            .read_position
            .max(log.log_start_offset());
        let batches = match log.read(from, 64 * 1024, Isolation::Committed) {
            Ok(batches) => batches,
            Err(error @ Error::Corrupt { .. }) => {
                self.corrupt_error(index, &error)?;
                self.record(format_args!(
                    "{tag}read from node {index} at {from}: {error}"
                ));
                return Ok(());
            }
            Err(error) => {
                self.record(format_args!(
                    "{tag}read from node {index} at {from}: {error}"
                ));
                return Ok(());
            }
        };
        let log_run = &mut self.logs[log_index];
        let high_watermark = log.high_watermark();
        let mut read = 0;
        for batch in &batches {
            for record in batch.records() {
                let record =
                    record.map_err(|error| format!("{tag}read from node {index}: {error}"))?;
                if record.offset >= high_watermark {
                    return Err(format!(
                        "{tag}G3: node {index} served {} as committed at or above its high watermark {high_watermark}",
                        record.offset
                    ));
                }
                let seen = (batch.leader_epoch(), record.value.to_vec());
                if let Some(earlier) = log_run.committed_seen.get(&record.offset) {
                    if *earlier != seen {
                        return Err(format!(
                            "{tag}G1: node {index} served {:?} at {} as committed, where {:?} was read as committed before",
                            (seen.0, String::from_utf8_lossy(&seen.1)),
                            record.offset,
                            (earlier.0, String::from_utf8_lossy(&earlier.1))
                        ));
                    }
                }
                log_run.committed_seen.insert(record.offset, seen);
                read += 1;
            }
            log_run.read_position = batch.next_offset();
        }
        if read > 0 {
            let position = log_run.read_position;
            self.record(format_args!(
                "{tag}read {read} from node {index} up to {position}"
            ));
        }
        Ok(())
    }

    /// The client appends one record to the node that leads. Fails the
    /// run if a leader takes it while its controlled shutdown is under
    /// way: SPEC 3.5, the old leader stops taking appends when its
    /// shutdown begins (and never gives them back, as a reassignment's
    /// hand-over may).
    fn append(&mut self, log_index: usize) -> Result<(), String> {
        if self.calm {
            return Ok(());
        }
        let tag = self.logs[log_index].tag.clone();
        let Some((index, log)) = self.leader(log_index) else {
            self.record(format_args!("{tag}append: no leader"));
            return Ok(());
        };
        self.appends += 1;
        let number = self.appends;
        let value = format!("r{number}").into_bytes();
        let mut builder = RecordBatchBuilder::new(self.clock.wall_clock_ms());
        builder.push(&value);
        let batch = match builder.build() {
            Ok(batch) => batch,
            Err(error) => {
                self.record(format_args!("{tag}append: batch refused: {error}"));
                return Ok(());
            }
        };
        // Drawn only in a run that has them, so a run without is event
        // for event what it was.
        let acks = match self.acks_mix.as_mut().map(|draws| draws.next_u64() % 8) {
            Some(0 | 1) => Acks::Leader,
            Some(2) => Acks::None,
            _ => Acks::All,
        };
        let acks_text = match acks {
            Acks::All => "",
            Acks::Leader => " (acks=1)",
            Acks::None => " (acks=0)",
        };
        match acks {
            Acks::Leader => self.unreplicated_appends.0 += 1,
            Acks::None => self.unreplicated_appends.1 += 1,
            Acks::All => {}
        }
        match log.append_pipelined(&batch, acks) {
            Ok(handle) => {
                self.record(format_args!(
                    "{tag}append r{number} to node {index}{acks_text}"
                ));
                let began = self.schedule.now();
                self.logs[log_index].in_flight.push(ClientAppend {
                    value,
                    acks,
                    handle,
                    node: index,
                    began,
                });
                if self.machines[index].stopping.is_some() {
                    return Err(format!(
                        "{tag}SPEC 3.5: node {index} took append r{number} during its controlled shutdown"
                    ));
                }
            }
            Err(error) => {
                self.record(format_args!(
                    "{tag}append r{number}{acks_text} refused: {error}"
                ));
                if acks != Acks::All && matches!(error, Error::NotEnoughReplicas { .. }) {
                    return Err(format!(
                        "{tag}SPEC 3.1: append r{number}{acks_text} refused for a short ISR: {error}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Blocking client `client` calls `append` on the node that leads,
    /// unless it is still inside its last call (then it calls after its
    /// next think time). Fails the run, as [`append`](Self::append) does,
    /// if a leader takes it during its controlled shutdown. Client `n`
    /// appends to log `n` modulo the run's logs.
    fn blocking_call(&mut self, client: usize) -> Result<(), String> {
        if self.calm || self.blocking.is_calling(client) {
            return Ok(());
        }
        let log_index = self.blocking_log(client);
        let tag = self.logs[log_index].tag.clone();
        let Some((index, log)) = self.leader(log_index) else {
            self.record(format_args!("{tag}blocking append: no leader"));
            return Ok(());
        };
        let now = self.schedule.now();
        let wall_clock_ms = self.clock.wall_clock_ms();
        let (value, began) =
            self.blocking
                .call(client, index, log, now, REQUEST_TIMEOUT, wall_clock_ms);
        let name = String::from_utf8_lossy(&value).into_owned();
        match began {
            Began::Written => {
                self.record(format_args!("{tag}blocking append {name} to node {index}"));
                if self.machines[index].stopping.is_some() {
                    return Err(format!(
                        "{tag}SPEC 3.5: node {index} took blocking append {name} during its controlled shutdown"
                    ));
                }
            }
            Began::Refused(error) => {
                self.record(format_args!("{tag}blocking append {name} refused: {error}"));
            }
        }
        Ok(())
    }

    /// Steps everything due at this instant until nothing is: the nodes
    /// handle what reached them ([`settle_nodes`](Self::settle_nodes)),
    /// the fetch sessions send what they have (fetches, snapshot chunk
    /// requests), and the parked fetches whose leaders got data are
    /// answered; an answer may leave work for
    /// its leader (an ISR proposal, an incarnation refresh, completions),
    /// which is handled at once, as the node's threads would wake for it,
    /// not at the next event (up to a fetch wait, 50 ms on average, later).
    /// The rounds of every pass count against one bound,
    /// [`SETTLE_ROUNDS_MAX`], as a livelock guard.
    fn settle(&mut self) -> Result<(), String> {
        let now = self.clock.now();
        let mut rounds = 0;
        loop {
            self.settle_nodes(now, &mut rounds)?;
            self.drive_fetchers();
            self.drive_snapshot_transfers();
            self.look_at_parked_fetches();
            if !self
                .harness
                .running_mut()
                .values()
                .any(|running| running.process.has_work(now))
            {
                return Ok(());
            }
        }
    }

    /// Every live node handles what reached it, in node order, until a
    /// round changes nothing, counting its rounds in `rounds`. A node's
    /// control and its controller are stepped when their threads would
    /// wake: something arrived for them, or their own next wake-up has come
    /// (each has a `Wake` scheduled).
    fn settle_nodes(&mut self, now: Instant, rounds: &mut usize) -> Result<(), String> {
        while *rounds < SETTLE_ROUNDS_MAX {
            *rounds += 1;
            let mut handled = 0;
            for running in self.harness.running_mut().values_mut() {
                let process = &mut running.process;
                let node = &mut process.node;
                if node.is_control_due(now) {
                    handled += node.step_control(now);
                }
                node.expire_deadlines();
                handled += node.run_completions();
                if let Some(controller) = process.controller.as_mut() {
                    if controller.is_due(now) {
                        handled += controller.step(now);
                    }
                }
            }
            // A step may have left work for a node stepped before it in
            // this round (a coordinator write notifies every node).
            if handled == 0
                && !self
                    .harness
                    .running_mut()
                    .values()
                    .any(|running| running.process.is_due(now))
            {
                return Ok(());
            }
        }
        Err(format!(
            "nodes still busy after {SETTLE_ROUNDS_MAX} rounds at one instant (livelock)"
        ))
    }

    /// Takes the outcomes known now, in the order the appends were made.
    fn collect_outcomes(&mut self) -> Result<(), String> {
        if self.blocking.any_calling() {
            let now = self.schedule.now();
            for (client, value, outcome) in self.blocking.returned(now) {
                let log = self.blocking_log(client);
                self.client_learns(log, value, outcome)?;
            }
        }
        for log in 0..self.logs.len() {
            // Most steps decide no append: no new lists then.
            let in_flight = &mut self.logs[log].in_flight;
            if !in_flight.iter().any(|append| append.handle.is_done()) {
                continue;
            }
            let (done, waiting): (Vec<ClientAppend>, Vec<ClientAppend>) = std::mem::take(in_flight)
                .into_iter()
                .partition(|append| append.handle.is_done());
            *in_flight = waiting;
            for ClientAppend {
                value,
                acks,
                handle,
                ..
            } in done
            {
                if acks == Acks::All {
                    self.client_learns(log, value, handle.wait())?;
                } else {
                    self.client_learns_unreplicated(log, value, acks, handle.wait())?;
                }
            }
        }
        self.check_append_deadlines()
    }

    /// SPEC 3.1: an append's outcome comes by its deadline
    /// (`request_timeout` after the call) and a `Timeout` within 100 ms of
    /// it, whatever happened to the node's log meanwhile (it lost the
    /// leadership, stopped, was removed by a reassignment), as long as its
    /// process runs (to the client, the appends of a process that ended
    /// stay without an outcome: [`process_ended`](Self::process_ended)).
    fn check_append_deadlines(&self) -> Result<(), String> {
        let now = self.schedule.now();
        for log in &self.logs {
            for append in &log.in_flight {
                if now > append.began + REQUEST_TIMEOUT + TIMEOUT_LATE_MAX {
                    return Err(format!(
                        "{}SPEC 3.1: {} to node {}, made at {:?}, has no outcome {:?} later (request timeout {REQUEST_TIMEOUT:?})",
                        log.tag,
                        String::from_utf8_lossy(&append.value),
                        append.node,
                        append.began,
                        now - append.began
                    ));
                }
            }
        }
        Ok(())
    }

    /// The log blocking client `client` appends to.
    fn blocking_log(&self, client: usize) -> usize {
        client % self.logs.len()
    }

    /// A client learns its append's outcome: an acknowledgement is a
    /// promise G1 holds the run to, on log `log`.
    fn client_learns(
        &mut self,
        log: usize,
        value: Vec<u8>,
        outcome: crate::Result<crate::AppendOutcome>,
    ) -> Result<(), String> {
        let tag = self.logs[log].tag.clone();
        let name = String::from_utf8_lossy(&value).into_owned();
        match outcome {
            Ok(outcome) => {
                self.record(format_args!(
                    "{tag}ack {name} at {}{}",
                    outcome.base_offset,
                    if outcome.duplicate {
                        " (duplicate)"
                    } else {
                        ""
                    }
                ));
                let log_run = &mut self.logs[log];
                // A duplicate's epoch is the original batch's, not that of
                // the leader that acknowledged it now: counted under it,
                // the records looked acknowledged by the original epoch's
                // leader, and a deposed leader of a later epoch, which
                // never saw them committed, failed SPEC 3.8 (seeds
                // 60214414 and 60215859: the producer's batches written
                // in epoch 0 or 11, acknowledged as duplicates in a later
                // epoch than the zombie's). An acknowledgement of a
                // duplicate is held to G1 like any other below.
                if !outcome.duplicate {
                    let last = log_run
                        .acknowledged_by_epoch
                        .entry(outcome.leader_epoch)
                        .or_insert(outcome.last_offset);
                    *last = (*last).max(outcome.last_offset);
                }
                log_run
                    .acknowledged_epochs
                    .insert(outcome.base_offset, outcome.leader_epoch);
                log_run.acknowledged_before = None;
                match log_run.acknowledged.insert(outcome.base_offset, value) {
                    // The producer's batch in doubt, re-sent and answered
                    // as a duplicate of where it first landed.
                    Some(earlier) if earlier == name.as_bytes() => {}
                    Some(earlier) => {
                        return Err(format!(
                            "{tag}two acknowledged records at offset {}: {} and {name}",
                            outcome.base_offset,
                            String::from_utf8_lossy(&earlier)
                        ));
                    }
                    None => {}
                }
            }
            Err(error) => match error {
                Error::Shutdown => self.record(format_args!("{tag}{name} failed: shutdown")),
                Error::Timeout { .. } => {
                    self.record(format_args!("{tag}{name} failed: timeout"));
                }
                // Say which error: a full disk's must be a clear one.
                error => self.record(format_args!("{tag}{name} failed: {error}")),
            },
        }
        Ok(())
    }

    /// A client learns the outcome of an append made with `acks=1` or
    /// `acks=0`: an acknowledgement promises nothing kept, but names where
    /// the leader wrote (checked at the end, [`check_final_of`]), and
    /// neither fails for a short ISR (SPEC 3.1).
    ///
    /// [`check_final_of`]: Self::check_final_of
    fn client_learns_unreplicated(
        &mut self,
        log: usize,
        value: Vec<u8>,
        acks: Acks,
        outcome: crate::Result<crate::AppendOutcome>,
    ) -> Result<(), String> {
        debug_assert!(acks != Acks::All, "an acks=all append is held to G1");
        let tag = self.logs[log].tag.clone();
        let name = String::from_utf8_lossy(&value).into_owned();
        let acks_text = if acks == Acks::None {
            "acks=0"
        } else {
            "acks=1"
        };
        match outcome {
            Ok(outcome) => {
                self.record(format_args!(
                    "{tag}ack {name} ({acks_text}) at {} in epoch {}",
                    outcome.base_offset, outcome.leader_epoch.0
                ));
                self.logs[log]
                    .acknowledged_unreplicated
                    .insert(value, (outcome.base_offset, outcome.leader_epoch, acks));
            }
            Err(
                error @ (Error::NotEnoughReplicas { .. }
                | Error::NotEnoughReplicasAfterAppend { .. }),
            ) => {
                return Err(format!(
                    "{tag}SPEC 3.1: {name} ({acks_text}) failed for a short ISR: {error}"
                ));
            }
            Err(error) => self.record(format_args!("{tag}{name} ({acks_text}) failed: {error}")),
        }
        Ok(())
    }

    /// The idempotent producer sends its next record to whoever leads its
    /// log.
    fn produce(&mut self) {
        if self.calm {
            return;
        }
        let leader = self.leader(self.producer_log);
        let Some(producer) = self.producer.as_mut() else {
            return;
        };
        let to = leader.as_ref().map(|(index, _)| *index);
        producer.route_to(leader.map(|(_, log)| log));
        match producer.send() {
            Sent::Pipelined(value) => {
                let name = String::from_utf8_lossy(&value).into_owned();
                self.record(format_args!("produce {name} to node {to:?}"));
            }
            Sent::Blocking(value) => {
                let name = String::from_utf8_lossy(&value).into_owned();
                self.record(format_args!("produce {name} to node {to:?}, blocking"));
            }
            Sent::WouldWait => self.record(format_args!("produce: would wait, skipped")),
            Sent::InsideSend => {
                self.record(format_args!("produce: inside a blocking send, skipped"));
            }
        }
    }

    /// Drives the producer's pipeline (answers in, retries and batches in
    /// doubt out, to whoever leads now), takes the outcomes it knows, and
    /// schedules its next retry round.
    fn drive_producer(&mut self) -> Result<(), String> {
        let leader = self.leader(self.producer_log).map(|(_, log)| log);
        let Some(producer) = self.producer.as_mut() else {
            return Ok(());
        };
        producer.route_to(leader);
        let mut retry_at = producer.drive();
        let resent = producer.resend_in_doubt();
        if resent > 0 {
            retry_at = producer.drive();
        }
        let outcomes = producer.take_outcomes();
        if resent > 0 {
            self.record(format_args!("producer re-sends {resent} batches in doubt"));
        }
        for (value, outcome) in outcomes {
            self.client_learns(self.producer_log, value, outcome)?;
        }
        if let Some(at) = retry_at {
            let at = self.since_epoch(at);
            if self
                .producer_retry_at
                .is_none_or(|scheduled| at < scheduled)
            {
                self.producer_retry_at = Some(at);
                self.schedule.at(at, Event::ProducerRetry);
            }
        }
        Ok(())
    }

    /// Nothing left to happen but timers: every append has its outcome,
    /// every node runs, a controller holds the seat, and every log has a
    /// leader whose high watermark is its log end (a new leader's lags
    /// until its followers fetch), and every replica holds that much (see
    /// [`is_log_settled`](Self::is_log_settled)).
    fn is_settled(&mut self) -> bool {
        if self.logs.iter().any(|log| !log.in_flight.is_empty())
            || self.blocking.any_calling()
            || self
                .producer
                .as_ref()
                .is_some_and(|producer| !producer.is_idle())
            || self
                .machines
                .iter()
                .any(|m| m.restart_owed || m.stopping.is_some())
            || self.harness.nodes().running_count() < self.machines.len()
        {
            return false;
        }
        // A controller takes the seat on its next pass after it hears the
        // seat is free, or on its next poll after a failed one (a lost
        // write reply): as its thread would, not after every event.
        let seated = self.seated_controller_epoch().is_some();
        seated && (0..self.logs.len()).all(|log| self.is_log_settled(log))
    }

    /// [`is_settled`](Self::is_settled) for log `log`: it has a leader
    /// whose high watermark is its log end, no reassignment under way, and
    /// every replica holds that much.
    fn is_log_settled(&mut self, log: usize) -> bool {
        let Some((_, leader)) = self.leader(log) else {
            return false;
        };
        // A reassignment under way completes (liveness, SPEC 3.10).
        let Ok(Some(state)) = self.coordinator().log_state(self.logs[log].id) else {
            return false;
        };
        if state.is_reassigning() {
            return false;
        }
        // A node a reassignment removed has deleted its copy (SPEC 3.10,
        // what `check_final` holds it to): seed 1000745's node 1, cut off
        // while its removal completed, hears of it only with its owed
        // resync after the calm.
        let removed_copy_left = self.machines.iter().enumerate().any(|(index, machine)| {
            !state.replicas.contains(&machine.id) && self.log_on(log, index).is_some()
        });
        if removed_copy_left {
            return false;
        }
        let end = leader.log_end_offset();
        // The applications are of the first log only.
        leader.high_watermark() == end
            && (log > 0 || self.applications_settled(&leader))
            && self
                .machines
                .iter()
                .enumerate()
                .filter(|(_, machine)| state.replicas.contains(&machine.id))
                .all(|(index, _)| {
                    (log == 0 && self.excused_as_needing_a_snapshot(index, &leader))
                        || self
                            .log_on(log, index)
                            .is_some_and(|log| log.log_end_offset() == end)
                })
    }

    /// The end checks of every log ([`check_final_of`](Self::check_final_of));
    /// a failure names its log.
    fn check_final(&mut self) -> Result<(), String> {
        for log in 0..self.logs.len() {
            if let Err(error) = self.check_final_of(log) {
                return Err(format!("{}{error}", self.logs[log].tag));
            }
        }
        if self.seated_controller_epoch().is_none() {
            return Err("no controller holds the seat at the end".to_owned());
        }
        Ok(())
    }

    /// G1: every acknowledged record of log `log_index` is in the
    /// leader's committed log, at the offset it was acknowledged with.
    fn check_final_of(&mut self, log_index: usize) -> Result<(), String> {
        let Some((index, log)) = self.leader(log_index) else {
            return Err("no leader at the end".to_owned());
        };
        let committed = self
            .disk(index)
            .unobserved(|| committed_records(index, &log))?;
        // G4: offsets are dense from the log start.
        let start = log.log_start_offset();
        if let Some((at, offset)) = committed
            .keys()
            .enumerate()
            .find(|(at, offset)| offset.0 != start.0 + *at as u64)
        {
            return Err(format!(
                "G4: node {index}'s committed log holds offset {offset} at position {at} from its start {start}"
            ));
        }
        // G1 counts a record deleted below the log start as kept when the
        // applications hold it (SPEC 3.9).
        // The applications are of the first log only.
        let kept_by_applications = |run: &Run, offset: Offset, value: &[u8]| {
            log_index == 0 && run.kept_by_applications(offset, value)
        };
        let log_run = &self.logs[log_index];
        for (offset, value) in &log_run.acknowledged {
            if *offset < start && kept_by_applications(self, *offset, value) {
                continue;
            }
            let held = committed.get(offset).map(|(_, v)| v);
            if held != Some(value) {
                return Err(format!(
                    "G1: acknowledged {} at {offset} is not in node {index}'s committed log (it holds {:?})",
                    String::from_utf8_lossy(value),
                    held.map(|v| String::from_utf8_lossy(v).into_owned())
                ));
            }
        }
        // G4 and SPEC 4: each of the producer's records is in the log at
        // most once however often it was retried, and in the order sent.
        let mut produced: BTreeMap<u64, Offset> = BTreeMap::new();
        let mut last_produced: Option<(u64, Offset)> = None;
        for (offset, (_, value)) in &committed {
            let Some(number) = value
                .strip_prefix(b"p")
                .and_then(|n| std::str::from_utf8(n).ok()?.parse::<u64>().ok())
            else {
                continue;
            };
            if let Some(first) = produced.insert(number, *offset) {
                return Err(format!(
                    "G4: the producer's p{number} is in node {index}'s committed log twice, at {first} and {offset}"
                ));
            }
            if let Some((before, at)) = last_produced.filter(|(before, _)| *before > number) {
                return Err(format!(
                    "SPEC 4: the producer's p{before} at {at} comes before p{number} at {offset}, sent after it"
                ));
            }
            last_produced = Some((number, *offset));
        }
        // SPEC 3.1: a record acknowledged with `acks=1` or `acks=0` may be
        // gone, but one the log holds is at the offset the leader gave it.
        // An `acks=1` acknowledgement comes after the leader's write, so
        // the offset it names holds that record if it holds anything in
        // the acknowledgement's epoch (a leader writes an offset once in
        // its epoch). An `acks=0` one comes at the hand-off, and errors of
        // the write are not reported: one to a log whose storage failed
        // names offsets nothing was written at (simulator seed 60736899:
        // two at 652, then one at 650, in epoch 3, all after the log was
        // poisoned, where the leader had written the failed r1141).
        let mut unreplicated_at: BTreeMap<(Offset, LeaderEpoch), &[u8]> = BTreeMap::new();
        for (value, (offset, epoch, acks)) in &log_run.acknowledged_unreplicated {
            if *acks == Acks::Leader {
                unreplicated_at.insert((*offset, *epoch), value);
            }
        }
        for (offset, (epoch, value)) in &committed {
            if let Some((at, at_epoch, _)) = log_run.acknowledged_unreplicated.get(value) {
                if (at, at_epoch) != (offset, epoch) {
                    return Err(format!(
                        "SPEC 3.1: {} was acknowledged (acks=1 or 0) at {at} in epoch {}, node {index}'s committed log holds it at {offset} in epoch {}",
                        String::from_utf8_lossy(value),
                        at_epoch.0,
                        epoch.0
                    ));
                }
            }
            if let Some(acknowledged) = unreplicated_at.get(&(*offset, *epoch)) {
                if *acknowledged != value.as_slice() {
                    return Err(format!(
                        "SPEC 3.1: {} was acknowledged (acks=1) at {offset} in epoch {}, node {index}'s committed log holds {} there in that epoch",
                        String::from_utf8_lossy(acknowledged),
                        epoch.0,
                        String::from_utf8_lossy(value)
                    ));
                }
            }
        }
        for (offset, record) in &log_run.committed_seen {
            if *offset < start && kept_by_applications(self, *offset, &record.1) {
                continue;
            }
            let held = committed.get(offset);
            if held != Some(record) {
                return Err(format!(
                    "G1: {:?} was read as committed at {offset}, node {index}'s log ends up with {:?}",
                    (record.0, String::from_utf8_lossy(&record.1)),
                    held.map(|(epoch, v)| (epoch, String::from_utf8_lossy(v).into_owned()))
                ));
            }
        }
        if log_index == 0 {
            self.check_applications_final(index, &committed, start)?;
        }
        // G2 over whole logs once more: the step checks see each replica's
        // records once, so one rewritten below where its replica was
        // already checked would go unseen.
        for index in 0..self.machines.len() {
            self.logs[log_index].checks[index] = ReplicaCheck::default();
            self.check_committed_on(log_index, index)?;
        }
        // SPEC 3.10: the last reassignment (or cancel) took effect, and
        // completed: nothing being added or removed, the leader, the ISR
        // and the ELR within the replicas, and every running node that is
        // not a replica rid of its copy.
        let log_run = &self.logs[log_index];
        let Some(state) = self.coordinator().log_state(log_run.id).ok().flatten() else {
            return Err("SPEC 3.10: the log has no state at the end".to_owned());
        };
        if state.replicas != log_run.replicas_wanted {
            return Err(format!(
                "SPEC 3.10: the log ends with replicas {:?}, the operator's last word was {:?}",
                state.replicas, log_run.replicas_wanted
            ));
        }
        let outside = |nodes: &[NodeId]| {
            nodes
                .iter()
                .filter(|node| !state.replicas.contains(node))
                .copied()
                .collect::<Vec<_>>()
        };
        let stray_leader = state
            .leader
            .filter(|leader| !state.replicas.contains(leader));
        let stray_in_sync = outside(&state.in_sync_replicas);
        let stray_eligible = outside(&state.eligible_leader_replicas);
        if !state.adding_replicas.is_empty()
            || !state.removing_replicas.is_empty()
            || stray_leader.is_some()
            || !stray_in_sync.is_empty()
            || !stray_eligible.is_empty()
        {
            return Err(format!(
                "SPEC 3.10: at the end the log's state is not that of a completed move to {:?}: adding {:?}, removing {:?}, leader {:?}, ISR {:?}, ELR {:?}",
                state.replicas,
                state.adding_replicas,
                state.removing_replicas,
                state.leader,
                state.in_sync_replicas,
                state.eligible_leader_replicas
            ));
        }
        for (index, machine) in self.machines.iter().enumerate() {
            let hosts = self.log_on(log_index, index).is_some();
            if hosts && !state.replicas.contains(&machine.id) {
                return Err(format!(
                    "SPEC 3.10: node {} still holds a copy of the log at the end, though the replicas are {:?}",
                    machine.id, state.replicas
                ));
            }
        }
        let (tag, acknowledged) = (
            self.logs[log_index].tag.clone(),
            self.logs[log_index].acknowledged.len(),
        );
        self.record(format_args!(
            "{tag}end: {acknowledged} acknowledged, all committed on node {index}"
        ));
        Ok(())
    }

    /// Compares node `index`'s records of log `log` from where it was last checked up
    /// to its high watermark with what was committed (served below a high
    /// watermark anywhere) at those offsets.
    fn check_committed_on(&mut self, log: usize, index: usize) -> Result<(), String> {
        let Some(handle) = self.log_on(log, index) else {
            return Ok(());
        };
        self.check_committed_on_log(log, index, &handle)
    }

    /// [`check_committed_on`](Self::check_committed_on) with node
    /// `index`'s log handle.
    fn check_committed_on_log(
        &mut self,
        log_index: usize,
        index: usize,
        log: &crate::ReplicatedLog,
    ) -> Result<(), String> {
        let high_watermark = log.high_watermark();
        let mut from = self.logs[log_index].checks[index]
            .checked_up_to
            .max(log.log_start_offset());
        let flipped = self.machines[index].flipped;
        let shape = |from| LogShape {
            from,
            high_watermark,
            log_start: log.log_start_offset(),
            log_end: log.log_end_offset(),
            flipped,
        };
        let check = &mut self.logs[log_index].checks[index];
        if from < high_watermark && check.check_failed_at == Some(shape(from)) {
            return Ok(());
        }
        check.check_failed_at = None;
        while from < high_watermark {
            let read = self
                .disk(index)
                .unobserved(|| log.read(from, 64 * 1024, Isolation::Committed));
            let batches = match read {
                Ok(batches) if !batches.is_empty() => batches,
                Err(error @ Error::Corrupt { .. }) => {
                    self.logs[log_index].checks[index].check_failed_at = Some(shape(from));
                    self.corrupt_error(index, &error)?;
                    break;
                }
                // Failed storage (a supervisor restarts it) or nothing below
                // the high watermark after all: look again once the log
                // changes.
                _ => {
                    self.logs[log_index].checks[index].check_failed_at = Some(shape(from));
                    break;
                }
            };
            for batch in &batches {
                for record in batch.records() {
                    let record =
                        record.map_err(|error| format!("node {index}, a record: {error}"))?;
                    let epoch = batch.leader_epoch();
                    // Compared in place; only a record seen first is copied.
                    match self.logs[log_index].committed_seen.entry(record.offset) {
                        btree_map::Entry::Occupied(committed)
                            if committed.get().0 != epoch
                                || committed.get().1 != record.value[..] =>
                        {
                            let committed = committed.get();
                            return Err(format!(
                                "G2: node {index} holds {:?} at {} below its high watermark {high_watermark}, where {:?} was committed",
                                (epoch, String::from_utf8_lossy(&record.value)),
                                record.offset,
                                (committed.0, String::from_utf8_lossy(&committed.1))
                            ));
                        }
                        btree_map::Entry::Occupied(_) => {}
                        btree_map::Entry::Vacant(vacant) => {
                            vacant.insert((epoch, record.value.to_vec()));
                        }
                    }
                }
                from = batch.next_offset();
            }
        }
        self.logs[log_index].checks[index].checked_up_to = from;
        Ok(())
    }

    /// The `Corrupt` errors the nodes handled themselves during the step
    /// ([`note_handled_error`](crate::simulation::note_handled_error)): a
    /// leader's fetch answer (on the wire only `ErrorCode::Unknown`), a
    /// follower's fetch whose answer it could not apply, a log a running
    /// node could not open, background work, retention. Each is held to
    /// [`corrupt_error`](Self::corrupt_error) on the node whose files it
    /// names, as the run's own reads are; before this, only those reads and
    /// the nodes' opens were.
    fn check_handled_corruption(&mut self) -> Result<(), String> {
        for error in crate::simulation::take_handled_corruption() {
            let Error::Corrupt { path, .. } = &error else {
                continue;
            };
            let Some(index) =
                (0..self.machines.len()).find(|index| path.starts_with(data_dir(*index)))
            else {
                return Err(format!(
                    "G5: a node handled a corrupt-data error that names no node's files: {error}"
                ));
            };
            self.corrupt_error(index, &error)?;
        }
        Ok(())
    }

    /// A `Corrupt` error from node `index` (a read, an open, or one it
    /// handled itself, see [`check_handled_corruption`](Self::check_handled_corruption)):
    /// a clear error, as G5 asks for a flipped byte, when a flip its reads
    /// see is in one of its segments or checkpoints, now or when the step
    /// began (see [`excusing_flips`](Self::excusing_flips)); a bug
    /// otherwise: no other fault changes a byte a sync made durable,
    /// recovery cuts torn tails, and an index is derived data that
    /// recovery rebuilds and reads check (SPEC 2.3), so a flip in one, or
    /// in bytes no file holds any more, excuses nothing.
    fn corrupt_error(&mut self, index: usize, error: &Error) -> Result<(), String> {
        let machine = &self.machines[index];
        if machine.flipped == 0 {
            return Err(format!(
                "G5: node {index}, whose disk has no flipped bit, finds corrupt data: {error}"
            ));
        }
        if !machine.excused_at_step_start && !self.has_excusing_flip(index) {
            let seen: Vec<String> = self
                .disk(index)
                .flipped_bits()
                .iter()
                .map(|flip| format!("{} at {}", flip.path.display(), flip.position))
                .collect();
            return Err(format!(
                "G5: node {index} finds corrupt data, though none of the {} bits flipped on its disk is in a segment or checkpoint its reads see (flips reads see: {seen:?}): {error}",
                machine.flipped
            ));
        }
        let text = error.to_string();
        if self.machines[index].last_corrupt.as_ref() != Some(&text) {
            self.corrupt_errors += 1;
            self.record(format_args!("node {index}: {text}"));
            self.machines[index].last_corrupt = Some(text);
        }
        Ok(())
    }

    /// The flips on node `index`'s disk that may excuse a `Corrupt` error
    /// or a failed open (G5, SPEC 2.3: a clear error or a clean recovery):
    /// those its reads see now ([`SimDisk::flipped_bits`]: still in a file
    /// it has, not written over) in a segment or a checkpoint
    /// ([`FileKind::excuses_corruption`]).
    fn excusing_flips(&self, index: usize) -> Vec<FlippedBit> {
        let machine = &self.machines[index];
        if machine.flipped == 0 {
            return Vec::new();
        }
        let mut flips = self.disk(index).flipped_bits();
        flips.retain(|flip| FileKind::of(&flip.path).excuses_corruption());
        flips
    }

    /// Whether [`excusing_flips`](Self::excusing_flips) has any: asked
    /// after every step, so it stops at the first.
    fn has_excusing_flip(&self, index: usize) -> bool {
        let machine = &self.machines[index];
        machine.flipped > 0
            && self
                .disk(index)
                .any_flipped_bit(|path| FileKind::of(path).excuses_corruption())
    }

    /// Schedules each live node's next wake-up and the coordinator's next
    /// expiry, unless one is already scheduled as early.
    fn schedule_wakes(&mut self) {
        for index in 0..self.machines.len() {
            let Some(process) = process_mut(&mut self.harness, index) else {
                continue;
            };
            let node_wake = process.node.next_wake();
            let wake = process.controller.as_ref().map_or(node_wake, |controller| {
                controller.next_wake().min(node_wake)
            });
            let at = self.since_epoch(wake);
            if self.machines[index]
                .wake_at
                .is_none_or(|scheduled| at < scheduled)
            {
                self.machines[index].wake_at = Some(at);
                self.schedule.at(at, Event::Wake(index));
            }
        }
        if let Some(expiry) = self.coordinator().next_session_expiry() {
            // A session expires once its timeout has passed strictly.
            let at = self.since_epoch(expiry) + Duration::from_micros(1);
            if self.expiry_at.is_none_or(|scheduled| at < scheduled) {
                self.expiry_at = Some(at);
                self.schedule.at(at, Event::ExpireSessions);
            }
        }
    }

    /// The coordinator every node's view is of.
    fn coordinator(&self) -> &MemoryCoordinator {
        self.harness.coordination().coordinator()
    }

    /// Machine `index`'s disk.
    fn disk(&self, index: usize) -> &SimDisk {
        self.harness.nodes().disks().sim(NodeId(index as u32))
    }

    /// Node `index`'s running process, if it runs.
    fn process(&mut self, index: usize) -> Option<&mut SteppedProcess> {
        process_mut(&mut self.harness, index)
    }

    /// Node `index`'s handle of log `log`, if it runs and hosts it.
    fn log_on(&self, log: usize, index: usize) -> Option<crate::ReplicatedLog> {
        self.harness
            .nodes()
            .log(NodeId(index as u32), self.logs[log].id)
            .ok()
    }

    /// [`log_on`](Self::log_on) without the harness's lock, for the checks
    /// that ask every node after every event.
    fn log_unlocked(&mut self, log: usize, index: usize) -> Option<crate::ReplicatedLog> {
        let id = self.logs[log].id;
        process_mut(&mut self.harness, index)?
            .node
            .node()
            .log(id)
            .ok()
    }

    /// The highest controller epoch a running node's controller holds the
    /// seat in, if one does.
    fn seated_controller_epoch(&self) -> Option<crate::ControllerEpoch> {
        self.harness.nodes().with_each(|running| {
            running
                .values()
                .filter_map(|running| running.process.controller.as_ref()?.controller_epoch())
                .max()
        })
    }

    fn since_epoch(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.epoch)
    }

    /// Drops a machine's controller with its process, counting its
    /// elections.
    fn retire_controller(&mut self, index: usize) {
        let controller = self
            .process(index)
            .and_then(|process| process.controller.take());
        if let Some(controller) = controller {
            let (all, unclean) = controller.elections();
            self.elections.0 += all;
            self.elections.1 += unclean;
        }
    }

    /// Halts every node still running, as a crash does, once every
    /// controller's elections are counted. Dropping the harness then
    /// unregisters every handler: the network's handler holds the node,
    /// whose transport holds the network, and a node left registered is
    /// never freed (a run leaked its whole cluster, 5 MB, and every later
    /// run's memory was fresh pages to fault in).
    fn stop_all(&mut self) {
        for index in 0..self.machines.len() {
            self.retire_controller(index);
        }
        self.harness.halt_all();
    }
}

/// Node `index`'s running process in `harness`, if it runs: no lock, for
/// the run's steps, which go through every node after every event.
fn process_mut(harness: &mut SimHarness, index: usize) -> Option<&mut SteppedProcess> {
    harness
        .running_mut()
        .get_mut(NodeId(index as u32))
        .map(|running| &mut running.process)
}

/// The harness a run's nodes live in.
type SimHarness = Harness<SteppedWire, MemoryCoordination, Stepped>;

/// What a stored file is, as far as a bit flipped in it may excuse what
/// the node then does (see [`Run::corrupt_error`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileKind {
    /// A segment's data (`.log`): the records themselves.
    Segment,
    /// A segment's offset index (`.index`): derived data, which recovery
    /// rebuilds when it is missing or invalid and reads check (SPEC 2.3).
    Index,
    /// State written atomically that no other file holds: the log's
    /// checkpoints (`.checkpoint`), producer state snapshots
    /// (`.snapshot`), the applied positions, the node's identity.
    Checkpoint,
    /// Anything else (the clean-shutdown marker, whose bytes nothing
    /// reads).
    Other,
}

impl FileKind {
    fn of(path: &std::path::Path) -> FileKind {
        let (name, extension) = name_and_extension(path);
        match extension {
            Some("log") => FileKind::Segment,
            Some("index") => FileKind::Index,
            Some("checkpoint" | "snapshot") => FileKind::Checkpoint,
            // The names `replication::applied` and `storage::identity`
            // give these files.
            _ if matches!(name, "applied-positions" | "identity.properties") => {
                FileKind::Checkpoint
            }
            _ => FileKind::Other,
        }
    }

    /// Whether a flip in such a file may excuse a `Corrupt` error or a
    /// failed open: one in the records or in state nothing else holds;
    /// not one in derived data, nor one whose bytes nothing reads.
    fn excuses_corruption(self) -> bool {
        matches!(self, FileKind::Segment | FileKind::Checkpoint)
    }
}

/// What `path.file_name()` and `path.extension()` give, as `str` (the
/// name `""` when there is none), read off the bytes after the last `/`
/// when they are a plain name: parsing the path's components twice made
/// [`FileKind::of`], asked after every step of a run with a flipped disk,
/// 1.5% of a simulator run. Any other path goes through `Path`.
fn name_and_extension(path: &std::path::Path) -> (&str, Option<&str>) {
    let bytes = path.as_os_str().as_encoded_bytes();
    let last = bytes
        .iter()
        .rposition(|b| *b == b'/')
        .map_or(bytes, |slash| &bytes[slash + 1..]);
    if matches!(last, b"" | b"." | b"..") {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        return (name, path.extension().and_then(|e| e.to_str()));
    }
    // `last` is the whole file name: as `Path::extension` splits it, at
    // its last dot unless that is its first byte.
    let extension = match last.iter().rposition(|b| *b == b'.') {
        Some(dot) if dot > 0 => std::str::from_utf8(&last[dot + 1..]).ok(),
        _ => None,
    };
    (std::str::from_utf8(last).unwrap_or(""), extension)
}

/// The settings of a run's `nodes` nodes before its applications add
/// theirs: the timeouts of a test cluster (the threaded fault test's, a
/// little longer), so that failures are noticed within a simulated second,
/// and [`MIN_INSYNC_REPLICAS`] of each log's three replicas, however many
/// nodes there are.
fn sim_settings(nodes: usize) -> NodeSettings {
    NodeSettings {
        nodes,
        replication: ReplicationConfig {
            min_insync_replicas: MIN_INSYNC_REPLICAS,
            replica_lag_time_max: Duration::from_secs(1),
            fetch_wait_max: Duration::from_millis(100),
            request_timeout: REQUEST_TIMEOUT,
            // Kafka's behaviour, as when it was the default: a run without
            // applications reports no applied positions, and its seeds
            // (the pinned trace hashes among them) replay the runs they
            // always did. A run with applications waits for them
            // (`Applications::configure_settings`).
            retain_until_applied: false,
            ..ReplicationConfig::default()
        },
        log: LogConfig {
            flush_policy: FlushPolicy::Always,
            // Room for 8,192 entries, plenty for a run; the default 10 MiB
            // would make every restart's index check read 10 MiB.
            index_bytes_max: 64 * 1024,
            // Segments of a few hundred records: a run rolls, and its
            // background flushes race with crashes.
            segment_bytes_max: 16 * 1024,
            ..LogConfig::default()
        },
        session_timeout: SESSION_TIMEOUT,
        controller: Some(ControllerConfig::default()),
        snapshots: BTreeMap::new(),
        retention_check_interval: None,
        // A controlled stop hands logs over in steps
        // (`SteppedNode::step_controlled_shutdown`); `Node::shutdown` is
        // never called here.
        controlled_shutdown_timeout: Some(CONTROLLED_SHUTDOWN_TIMEOUT),
    }
}

/// Node `index`'s data directory on its disk: every file it writes is
/// below it.
fn data_dir(index: usize) -> String {
    format!("/sim/node-{index}")
}

/// `units` of [`SimDisk`]'s simulated time as a duration.
fn disk_time(units: u64) -> Duration {
    DISK_TIME_UNIT.saturating_mul(u32::try_from(units).unwrap_or(u32::MAX))
}

/// The records of `log` below its high watermark, from its log start, with
/// the leader epoch of each one's batch.
fn committed_records(
    index: usize,
    log: &crate::ReplicatedLog,
) -> Result<BTreeMap<Offset, (LeaderEpoch, Vec<u8>)>, String> {
    let mut committed = BTreeMap::new();
    let mut from = log.log_start_offset();
    loop {
        let batches = log
            .read(from, 1 << 20, Isolation::Committed)
            .map_err(|error| format!("reading node {index}'s log from {from}: {error}"))?;
        if batches.is_empty() {
            return Ok(committed);
        }
        for batch in &batches {
            for record in batch.records() {
                let record = record.map_err(|error| format!("node {index}, a record: {error}"))?;
                committed.insert(record.offset, (batch.leader_epoch(), record.value.to_vec()));
            }
            from = batch.next_offset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::Mutex;

    /// Which seeds [`simulated_runs`] runs, from the environment:
    /// `ISRLOG_SIM_SEED` one seed (a replay); otherwise from
    /// `ISRLOG_SIM_FIRST_SEED` (default 0), `ISRLOG_SIM_SEEDS` seeds
    /// (default [`DEFAULT_SEEDS`]), or as many as fit in
    /// `ISRLOG_SIM_SECONDS` of real time when that is set.
    struct Seeds {
        next: u64,
        last: Option<u64>,
        until: Option<Instant>,
    }

    /// Seeds a plain `cargo test` runs: as many as take the time 150 took
    /// before the simulator was made cheaper (issue 28; on two threads of
    /// the 2-core development machine, debug build, about 65 s).
    const DEFAULT_SEEDS: u64 = 210;

    fn variable(name: &str) -> Option<u64> {
        let value = std::env::var(name).ok()?;
        Some(
            value
                .parse()
                .unwrap_or_else(|_| panic!("{name}={value} is not a whole number")),
        )
    }

    impl Seeds {
        fn from_env() -> Seeds {
            if let Some(seed) = variable("ISRLOG_SIM_SEED") {
                return Seeds {
                    next: seed,
                    last: Some(seed),
                    until: None,
                };
            }
            let first = variable("ISRLOG_SIM_FIRST_SEED").unwrap_or(0);
            match variable("ISRLOG_SIM_SECONDS") {
                Some(seconds) => Seeds {
                    next: first,
                    last: None,
                    until: Some(Instant::now() + Duration::from_secs(seconds)),
                },
                None => {
                    let count = variable("ISRLOG_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS).max(1);
                    Seeds {
                        next: first,
                        last: Some(first + count - 1),
                        until: None,
                    }
                }
            }
        }
    }

    impl Iterator for Seeds {
        type Item = u64;

        fn next(&mut self) -> Option<u64> {
            let more = match (self.last, self.until) {
                (Some(last), _) => self.next <= last,
                (None, Some(until)) => Instant::now() < until,
                (None, None) => false,
            };
            more.then(|| {
                self.next += 1;
                self.next - 1
            })
        }
    }

    /// What the seeds one thread ran add up to.
    #[derive(Default)]
    struct Totals {
        seeds: u64,
        events: u64,
        simulated: Duration,
        /// Disk faults: EIO planned, full disks, ENOSPC refusals, bit
        /// flips, corrupt errors, flipped disks replaced, flipped disks
        /// kept, runs ended at the calm with the only copy flipped.
        disk: [u64; 8],
        /// Runs whose disks took time, those with a slow one (fsync of 1 ms
        /// or more), and the disk time in all.
        timed: u64,
        slow: u64,
        disk_time: Duration,
        /// Runs with controlled stops; controlled stops begun, those of the
        /// leader, those that handed the leadership over, and those held
        /// to it strictly (see [`SimReport::leaderships_handed_over`]).
        operator: [u64; 5],
        /// Runs with reassignments; reassignments started, cancelled,
        /// completed, and those started onto a new node.
        moves: [u64; 5],
        /// What the applications did, summed.
        apps: ApplicationCounts,
        /// Runs with one, two and three (or more) logs.
        logs: [u64; 3],
        /// Runs with three, four and five (or more) nodes.
        nodes: [u64; 3],
        /// Runs under `Always`, `Never` and `Every`, and the power losses
        /// of the runs under the last two.
        flush: [u64; 4],
        /// Times nodes were set to lose coordinator writes before they
        /// took effect.
        requests_lost: u64,
        /// Power losses in the middle of a step, and those while the
        /// process was down or starting.
        mid_step_power_cuts: [u64; 2],
        /// See [`SimReport::network_shapes`].
        network_shapes: [u64; 4],
        /// The producer's sends, its batches re-sent after doubt, its
        /// blocking sends and the runs with them; the blocking clients'
        /// calls begun and acknowledged.
        clients: [u64; 6],
        /// The lowest and highest seed run.
        range: Option<(u64, u64)>,
    }

    impl Totals {
        fn add(&mut self, config: &SimConfig, report: &SimReport) {
            self.seeds += 1;
            self.events += report.events;
            self.simulated += config.simulated;
            for (total, count) in self.disk.iter_mut().zip([
                report.disk_faults,
                report.full_disks,
                report.full_disk_refusals,
                report.bit_flips,
                report.corrupt_errors,
                report.flipped_disks_replaced,
                report.flipped_disks_kept,
                u64::from(report.only_copy_flipped),
            ]) {
                *total += count;
            }
            let (sent, resent, blocking_sends) = report.produced;
            let (calls, acknowledged) = report.blocking;
            for (total, count) in self.clients.iter_mut().zip([
                sent,
                resent,
                blocking_sends,
                u64::from(blocking_sends > 0),
                calls,
                acknowledged,
            ]) {
                *total += count;
            }
            self.timed += u64::from(!report.sync_latency_max.is_zero());
            self.slow += u64::from(report.sync_latency_max >= Duration::from_millis(1));
            self.disk_time += report.disk_time;
            for (total, count) in self.operator.iter_mut().zip([
                u64::from(report.controlled_stops.0 > 0),
                report.controlled_stops.0,
                report.controlled_stops.1,
                report.leaderships_handed_over.0,
                report.leaderships_handed_over.1,
            ]) {
                *total += count;
            }
            for (total, count) in self.moves.iter_mut().zip([
                u64::from(report.reassignments.0 > 0),
                report.reassignments.0,
                report.reassignments.1,
                report.reassignments.2,
                report.moves_to_new_nodes,
            ]) {
                *total += count;
            }
            self.apps.add(&report.applications);
            self.logs[report.logs.len().clamp(1, 3) - 1] += 1;
            self.nodes[config.nodes.clamp(REPLICATION_FACTOR, NODES_MAX) - REPLICATION_FACTOR] += 1;
            match report.flush_policy {
                FlushPolicy::Always => self.flush[0] += 1,
                FlushPolicy::Never => self.flush[1] += 1,
                FlushPolicy::Every { .. } => self.flush[2] += 1,
            }
            if report.flush_policy != FlushPolicy::Always {
                self.flush[3] += report.power_losses;
            }
            self.requests_lost += report.requests_lost;
            self.mid_step_power_cuts[0] += report.mid_step_power_cuts.0;
            self.mid_step_power_cuts[1] += report.mid_step_power_cuts.1;
            for (total, count) in self.network_shapes.iter_mut().zip(report.network_shapes) {
                *total += count;
            }
            self.widen(Some((config.seed, config.seed)));
        }

        fn widen(&mut self, range: Option<(u64, u64)>) {
            if let Some((low, high)) = range {
                self.range = Some(
                    self.range
                        .map_or((low, high), |(a, b)| (a.min(low), b.max(high))),
                );
            }
        }

        fn merge(&mut self, other: Totals) {
            self.seeds += other.seeds;
            self.events += other.events;
            self.simulated += other.simulated;
            for (total, count) in self.disk.iter_mut().zip(other.disk) {
                *total += count;
            }
            self.timed += other.timed;
            self.slow += other.slow;
            self.disk_time += other.disk_time;
            for (total, count) in self.operator.iter_mut().zip(other.operator) {
                *total += count;
            }
            for (total, count) in self.moves.iter_mut().zip(other.moves) {
                *total += count;
            }
            self.apps.add(&other.apps);
            for (total, count) in self.logs.iter_mut().zip(other.logs) {
                *total += count;
            }
            for (total, count) in self.clients.iter_mut().zip(other.clients) {
                *total += count;
            }
            for (total, count) in self.flush.iter_mut().zip(other.flush) {
                *total += count;
            }
            self.requests_lost += other.requests_lost;
            for (total, count) in self
                .mid_step_power_cuts
                .iter_mut()
                .zip(other.mid_step_power_cuts)
            {
                *total += count;
            }
            for (total, count) in self.network_shapes.iter_mut().zip(other.network_shapes) {
                *total += count;
            }
            for (total, count) in self.nodes.iter_mut().zip(other.nodes) {
                *total += count;
            }
            self.widen(other.range);
        }
    }

    /// The seeds still to hand out, and the lowest seed that failed so far
    /// with its report.
    struct Work {
        seeds: Seeds,
        failed: Option<(u64, String)>,
    }

    impl Work {
        /// The next seed to run, or none once the seeds ran out or one
        /// failed: seeds are handed out in order, so every seed below a
        /// failing one was handed out before it and runs to its end, and
        /// the lowest failing seed is reported whatever the threads' timing.
        fn next_seed(&mut self) -> Option<u64> {
            if self.failed.is_some() {
                return None;
            }
            self.seeds.next()
        }

        fn fail(&mut self, seed: u64, report: String) {
            if self
                .failed
                .as_ref()
                .is_none_or(|(lowest, _)| seed < *lowest)
            {
                self.failed = Some((seed, report));
            }
        }
    }

    /// Runs seeds taken from `work` until none is left; prints each one's
    /// summary with `verbose`.
    fn run_seeds(work: &Mutex<Work>, trace_lines: Option<usize>, verbose: bool) -> Totals {
        let mut totals = Totals::default();
        loop {
            let Some(seed) = work.lock().next_seed() else {
                return totals;
            };
            let mut config = SimConfig::new(seed);
            // `ISRLOG_SIM_LOGS=1` runs every seed with one log: as the
            // simulator ran it before runs had several (the single-log runs
            // are unchanged, the others are not).
            if let Some(logs) = variable("ISRLOG_SIM_LOGS") {
                config = config.with_logs(logs as usize);
            }
            // `ISRLOG_SIM_NODES=3` runs every seed on three nodes: as the
            // simulator ran it before runs had more (the three-node runs
            // are unchanged, the others are not).
            if let Some(nodes) = variable("ISRLOG_SIM_NODES") {
                config = config.with_nodes(nodes as usize);
            }
            if let Some(lines) = trace_lines {
                config.trace_lines = lines;
            }
            // Each feature switched off by its variable ([`SWITCHES`]).
            for (name, flag) in SWITCHES {
                *flag(&mut config) = variable(name) != Some(0);
            }
            // A node's assertion failing in a run is that seed's failure
            // too: reported with its seed, the other thread's seeds below
            // it still run.
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&config)));
            let report = match outcome {
                Ok(Ok(report)) => report,
                Ok(Err(failure)) => {
                    work.lock().fail(seed, failure.to_string());
                    continue;
                }
                Err(panic) => {
                    let message = panic_message(&*panic);
                    work.lock().fail(
                        seed,
                        format!(
                            "simulation seed {seed} panicked: {message}\nreplay: ISRLOG_SIM_SEED={seed} {}RUST_BACKTRACE=1 cargo test --lib testing::sim::run::tests::simulated_runs -- --nocapture",
                            replay_variables(&config)
                        ),
                    );
                    continue;
                }
            };
            totals.add(&config, &report);
            if !verbose {
                continue;
            }
            eprintln!(
                "seed {seed}: trace {:016x}, {} events, {} appends, {:?} produced (sent, re-sent, blocking), {:?} blocking appends (begun, acknowledged), {} acknowledged, {} read, {} crashes ({} power losses, {} disks lost, {} disk faults, {} full disks ({} ENOSPC), {} bit flips ({} corrupt errors, {} disks replaced, {} kept, only copy flipped: {}), {} supervisor restarts), disk time {:?} (slowest fsync {:?}), {:?} elections (all, unclean), {} background jobs, {:?} controlled stops (all, of the leader), {:?} leaderships handed over (all, held to it), {:?} reassignments (started, cancelled, completed), applications {:?}{}{}",
                report.trace_hash,
                report.events,
                report.appends,
                report.produced,
                report.blocking,
                report.acknowledged,
                report.read,
                report.crashes,
                report.power_losses,
                report.disks_lost,
                report.disk_faults,
                report.full_disks,
                report.full_disk_refusals,
                report.bit_flips,
                report.corrupt_errors,
                report.flipped_disks_replaced,
                report.flipped_disks_kept,
                report.only_copy_flipped,
                report.supervisor_restarts,
                report.disk_time,
                report.sync_latency_max,
                report.elections,
                report.background_jobs,
                report.controlled_stops,
                report.leaderships_handed_over,
                report.reassignments,
                report.applications,
                // Only for several logs: a single-log summary stays as it
                // was before runs had several.
                if report.logs.len() > 1 {
                    format!(", logs={}", report.logs.len())
                } else {
                    String::new()
                },
                // Only for more than three nodes, for the same reason.
                if config.nodes > REPLICATION_FACTOR {
                    format!(", nodes={}", config.nodes)
                } else {
                    String::new()
                }
            );
        }
    }

    /// Runs seeds (see [`Seeds`]) on `ISRLOG_SIM_THREADS` threads (default
    /// two, or one on a one-core machine), each run on one thread, and
    /// fails with the lowest failing seed's report; prints each seed's
    /// summary (when asked) and the rate.
    #[test]
    fn simulated_runs() {
        // `RUST_LOG=isrlog=info` shows what the nodes did on a replayed
        // seed, interleaved with nothing else: a replay is one run.
        if std::env::var("RUST_LOG").is_ok() {
            // Fails when another test installed one first: fine.
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
        let started = Instant::now();
        // Each seed's summary only when asked for (a replay, or a few seeds
        // to look at): CI runs thousands.
        let verbose = std::env::var_os("ISRLOG_SIM_SEED").is_some()
            || std::env::var_os("ISRLOG_SIM_VERBOSE").is_some();
        // A replay may keep more of the trace: ISRLOG_SIM_TRACE_LINES=N.
        let trace_lines = variable("ISRLOG_SIM_TRACE_LINES").map(|n| n as usize);
        let threads = variable("ISRLOG_SIM_THREADS").map_or_else(
            || {
                std::thread::available_parallelism()
                    .map_or(1, std::num::NonZeroUsize::get)
                    .min(2)
            },
            |n| (n as usize).max(1),
        );
        let work = Mutex::new(Work {
            seeds: Seeds::from_env(),
            failed: None,
        });
        let mut totals = Totals::default();
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|_| scope.spawn(|| run_seeds(&work, trace_lines, verbose)))
                .collect();
            for handle in handles {
                totals.merge(handle.join().expect("a simulator thread panicked"));
            }
        });
        if let Some((_, report)) = work.into_inner().failed {
            panic!("{report}");
        }
        let Totals {
            seeds,
            events,
            simulated,
            disk,
            timed,
            slow,
            disk_time,
            operator,
            moves,
            apps,
            logs,
            nodes,
            flush,
            requests_lost,
            mid_step_power_cuts,
            network_shapes,
            clients,
            range,
        } = totals;
        let elapsed = started.elapsed().as_secs_f64();
        eprintln!(
            "simulated {seeds} seeds {range:?} ({:.0} simulated s) in {elapsed:.2} s on {threads} threads: {:.1} seeds/s, {:.0} seeds/hour, {events} events",
            simulated.as_secs_f64(),
            seeds as f64 / elapsed,
            seeds as f64 / elapsed * 3600.0
        );
        let [eio, full, enospc, flips, corrupt, replaced, kept, only_copy] = disk;
        eprintln!(
            "disk faults: {eio} EIO planned, {full} full disks ({enospc} ENOSPC), {flips} bit flips ({corrupt} corrupt errors, {replaced} disks replaced, {kept} kept, {only_copy} runs ended at the calm with the only copy of acknowledged records flipped); {timed} runs with disk latency ({slow} with a fsync of 1 ms or more), {:.0} s of disk time",
            disk_time.as_secs_f64()
        );
        let [stop_runs, stops, leader_stops, handed_over, held] = operator;
        eprintln!(
            "operator: {stop_runs} runs with controlled stops, {stops} stops ({leader_stops} of the leader; {handed_over} handed the leadership over before stopping, {held} held to it)"
        );
        let [one_log, two_logs, three_logs] = logs;
        eprintln!("logs: {one_log} runs with one, {two_logs} with two, {three_logs} with three");
        let [sent, resent, blocking_sends, blocking_send_runs, calls, calls_acknowledged] = clients;
        eprintln!(
            "clients: the producer sent {sent} records ({resent} batches re-sent after doubt; {blocking_sends} blocking sends, in {blocking_send_runs} runs); blocking clients made {calls} calls ({calls_acknowledged} acknowledged)"
        );
        let [always, never, every, lossy_power_losses] = flush;
        eprintln!(
            "flush policies: {always} runs with Always, {never} with Never, {every} with Every ({lossy_power_losses} power losses in those, each of its lossy node)"
        );
        eprintln!(
            "coordinator: {requests_lost} times a node lost its writes before they took effect"
        );
        let [slow, deaf, mute, pairs] = network_shapes;
        eprintln!(
            "network: {slow} slow messages; partitions one way in {deaf}, one way out {mute}, of two nodes {pairs}"
        );
        let [cuts, cuts_while_down] = mid_step_power_cuts;
        eprintln!(
            "power losses in the middle of a step: {cuts} ({cuts_while_down} while the process was down or starting)"
        );
        let [three_nodes, four_nodes, five_nodes] = nodes;
        eprintln!(
            "nodes: {three_nodes} runs with three, {four_nodes} with four, {five_nodes} with five"
        );
        let [move_runs, started, cancelled, completed, to_new_nodes] = moves;
        eprintln!(
            "reassignments: {move_runs} runs with them, {started} started ({to_new_nodes} adding a node that was no replica of the log before it nor at the start), {cancelled} cancelled, {completed} completed"
        );
        eprintln!(
            "applications: {} runs with them ({} with snapshot stores, {} capped), {} records applied, {} set_applied calls, {} deletions ({} leader log start moves), {} snapshots installed, {:?} applications restored from scratch (leading, following), {} hand-overs for needs_snapshot, {} replicas left reporting needs_snapshot",
            apps.runs,
            apps.with_store,
            apps.capped,
            apps.applied,
            apps.set_applied,
            apps.deletions,
            apps.log_start_moves,
            apps.snapshots_installed,
            apps.restores,
            apps.needs_snapshot_hand_overs,
            apps.needs_snapshot_reported
        );
    }

    #[test]
    fn name_and_extension_agree_with_path() {
        for path in [
            "/n0/log-1/00000000000000000000.log",
            "/n0/log-1/00000000000000000000.index",
            "/n0/log-1/leader-epoch.checkpoint",
            "n0/identity.properties",
            "applied-positions",
            "/n0/.hidden",
            "/n0/.hidden.log",
            "/n0/trailing.",
            "/n0/a..b",
            "/n0/dir/",
            "/n0/dir/.",
            "/n0/..",
            "/n0/./x.snapshot",
            ".",
            "..",
            "/",
            "",
        ] {
            let path = std::path::Path::new(path);
            let expected = (
                path.file_name().and_then(|n| n.to_str()).unwrap_or(""),
                path.extension().and_then(|e| e.to_str()),
            );
            assert_eq!(name_and_extension(path), expected, "{}", path.display());
        }
    }

    /// Seed 710069 failed its end check ("no controller holds the seat at
    /// the end") a millisecond after the calm: the controller had lost its
    /// seat just before (node 2 lost its coordinator write replies at
    /// 58.9 s), and the log already looked settled. A run is settled only
    /// once a controller holds the seat again (f327a04, found with seed
    /// 900415), within the 20 s after the calm.
    #[test]
    fn seed_710069_settled_only_once_a_controller_holds_the_seat() {
        passes(710_069);
    }

    /// Seed 740121 failed G1 ("acknowledged p137 at 572 is not in node 0's
    /// committed log (it holds p113)"). Node 1's disk flipped a bit in the
    /// base offset of the batch at offset 29 (p11, sequence 10). Node 1's
    /// producer state was later rebuilt from its segments
    /// (`rebuild_producer_state`, after a truncation), which walks batch
    /// headers without reading the bodies and took the flipped base offset
    /// as data: the state stopped at sequence 10. Leading in epoch 5, node
    /// 1 refused producer-1 with "expected 11, got 112"; p113, written at
    /// 572 by node 0 in epoch 3, was reported failed, and node 0, leading
    /// again, answered p137 as a duplicate of the batch at 572. The rebuild
    /// now checks that each batch starts where the one before it ended and
    /// fails with `Corrupt` naming the file and position otherwise (as the
    /// epoch cache's rebuild does).
    #[test]
    fn seed_740121_a_flipped_base_offset_does_not_feed_the_producer_state() {
        passes(740_121);
    }

    /// Seed 60105060 failed G1 ("acknowledged p285 at 1152 is not in node
    /// 0's committed log (it holds None)"). Node 2's disk flipped bit 16 of
    /// the base sequence of the batch at 1152 (p246, sequence 245), below
    /// its recovery point. Rebuilding its producer state read headers only
    /// and took 65781 as the sequence; leading in epoch 8, node 2 refused
    /// p246's retry (and every later record) with "expected 65782, got
    /// 245". The producer released sequence 245, as a refusal from the
    /// newest leader proves, and sent p285 with it; node 0, leading in
    /// epoch 10, answered p285 as a duplicate of p246 at 1152. The rebuild
    /// now checks the CRC of each batch that names a producer.
    #[test]
    fn seed_60105060_a_flipped_sequence_does_not_feed_the_producer_state() {
        passes_with(single_log(60_105_060));
    }

    /// Seed 60512796 failed G1 ("acknowledged p183 at 965 is not in node
    /// 2's committed log (it holds None)"). Node 1, leading in epoch 6,
    /// wrote p137-p144 (sequences 136-143, the last five unanswered) at
    /// 917-972 and rolled a segment at 975; power failed before the
    /// roll's flush wrote its producer snapshot. Reopened, node 1 rebuilt
    /// its producers from the snapshot at 911 and the batches after it,
    /// and wrote no snapshot of them. Installing node 2's snapshot at 978
    /// moved its log start into the segment at 975: the segments below
    /// went, the snapshot at 911 stayed. After the next power loss the
    /// rebuild read the snapshot at 911 and the segment at 975 only, and
    /// leading in epoch 13 node 1 refused p140's retry with "expected
    /// 136, got 139"; the producer released sequence 139 and sent p183
    /// with it, and node 2, leading in epoch 15, answered it as a
    /// duplicate of p140 at 965. A rebuild now leaves a snapshot at each
    /// segment base it walks past to the next flush or log start move.
    #[test]
    fn seed_60512796_a_reopened_log_keeps_snapshots_of_the_segments_it_walked() {
        passes_with(as_found(60_512_796));
    }

    /// Seed 60134360: a flip at byte 4 of an index file moved an entry's
    /// position into the middle of a batch; a walk from it read no header
    /// there, and node 0 reported its intact data file corrupt (G5: the
    /// index is derived data, a flip in it excuses no error). Every walk
    /// from an index entry now falls back to the segment start when the
    /// data at the entry does not match it (`Segment::find_batch_via_index`).
    #[test]
    fn seed_60134360_a_flipped_index_position_blames_no_data_file() {
        passes_with(single_log(60_134_360));
    }

    /// Seed 60135209: node 0 (an 18 ms fsync) came back after a crash with
    /// a full disk; each attempt to open its replica recovered the log and
    /// then failed to write the checkpoint, 0.9 s of disk time, and it
    /// tried every second and again on every change of the log's state.
    /// Its disk fell 21 s behind, so the fetch it sent once the disk had
    /// space left after the run's end, and the log never settled. A
    /// replica that fails to open now waits a doubling pause, 1 s to
    /// `OPEN_RETRY_BACKOFF_MAX`, before its next attempt.
    #[test]
    fn seed_60135209_a_replica_that_cannot_open_does_not_bury_its_disk() {
        passes_with(single_log(60_135_209));
    }

    /// Seed 60151104: node 1 lost its disk, and on the new one its
    /// replica never opened (a full disk, then an `EIO`) before a
    /// controlled shutdown that wrote the clean-shutdown marker. The next
    /// start counted the replica as lost (placed on the old directory) and
    /// opened as `LostData`, which is right (SPEC 2.8); the simulator
    /// expected `Clean`. It now expects a clean start only if no replica
    /// would count as lost (`Node::replicas_lost_at_next_start`).
    #[test]
    fn seed_60151104_a_replica_lost_before_a_clean_stop_is_still_lost() {
        passes_with(single_log(60_151_104));
    }

    /// Seeds 60208586, 60219295 (one log) and 60238744 (log 1 of several),
    /// G2: unclean recovery elected a deposed leader's log, which ended in
    /// its own epoch's uncommitted appends (2334 in epoch 4; 1829 in epoch
    /// 5), over a log holding what later leaders had committed at the same
    /// offsets in older epochs, whose last batch was older (1744 in epoch
    /// 2, though it had led epoch 6; 1610 with no batch, though it had led
    /// epoch 11). Recovery now takes the newest line, then a longer log
    /// only if it holds that line's last batch (`LogState::longest_line`).
    #[test]
    fn seeds_60208586_60219295_60238744_a_deposed_leaders_tail_never_wins_unclean_recovery() {
        passes_with(single_log(60_208_586));
        passes_with(single_log(60_219_295));
        passes_with(as_found(60_238_744));
    }

    /// Seed 70100050 (log 2 of three), G2: r490, written at 150 in epoch 5
    /// by node 2 and committed there by node 1 as leader of epoch 7 on a
    /// fetch of node 2, was replaced by node 0's uncommitted r586 of epoch
    /// 6. Node 2 had sent that fetch before any answer of epoch 7 reached
    /// it, so its stored line stayed 5; node 1 (line 7) lost its disk, and
    /// unclean recovery took node 0's longer line 6 over node 2's line 5.
    /// A leader now counts a fetch towards its high watermark only once the
    /// fetch says the follower stored the leader's epoch as its line
    /// (`LeaderState::on_fetch_of_line`). Found with the defaults of
    /// 2026-12-07 (blocking sends on).
    #[test]
    fn seed_70100050_a_fetch_from_before_the_epochs_line_commits_nothing() {
        passes_with(SimConfig {
            flush_policies: false,
            lost_requests: false,
            mid_step_power_losses: false,
            slow_messages: false,
            partition_shapes: false,
            eio_anywhere: false,
            acks_mix: false,
            ..SimConfig::new(70_100_050)
        });
    }

    /// Seed 30, G5 (a panic): node 1's disk failed the removal of a
    /// producer snapshot with `EIO` while its follower restarted its log at
    /// the leader's start (`truncate_fully_and_start_at`), after the
    /// segments' removals. The log was poisoned with none of its segments
    /// in memory, and the follower's next look at its log end
    /// panicked ("a log always has an active segment"). The segments now
    /// stay until the new one exists. Found with the defaults of 2026-12-07
    /// (disk faults on any operation).
    #[test]
    fn seed_30_a_restart_cut_short_by_eio_keeps_an_active_segment() {
        passes_with(SimConfig {
            acks_mix: false,
            ..SimConfig::new(30)
        });
    }

    /// Seed 61015624, G1: node 0's start after a clean stop removed the
    /// clean-shutdown marker and failed at the directory's sync (`EIO`);
    /// its next start, finding the marker gone, went on as unclean without
    /// syncing; a power loss brought the marker back, the start after it
    /// was taken for clean, node 0 led without the records the power loss
    /// had taken, and r2371 and r2399 were both acknowledged at 567.
    /// `take_clean_shutdown_marker` now makes the marker's absence durable
    /// (its unit test shows the fix; this run changed with the refusal of
    /// appends to a poisoned log, made in the same commit). Found with the
    /// defaults of 2026-12-07 (disk faults on any operation, acks mix).
    #[test]
    fn seed_61015624_a_start_makes_the_marker_removal_durable() {
        passes_with(SimConfig::new(61_015_624));
    }

    /// Seed 60665275, liveness: node 1, restarted and named leader of
    /// epoch 13, lost its move to a new epoch before it took effect (SPEC
    /// 3.4, an unknown outcome) and never tried again: the write changed
    /// nothing, so no notification or resync came, and the log had no
    /// working leader 20 s after the calm. A failed move is now read again
    /// on the report timer (`NodeCore::epoch_bump_written`). Found with the
    /// defaults of 2026-12-07 (coordinator writes lost before they take
    /// effect).
    #[test]
    fn seed_60665275_a_restarted_leaders_lost_epoch_move_is_tried_again() {
        passes_with(SimConfig {
            eio_anywhere: false,
            acks_mix: false,
            ..SimConfig::new(60_665_275)
        });
    }

    /// Seed 60713163, SPEC 3.1: r810, appended to node 1 at 17.17 s, had
    /// no outcome 1.10 s later. The idempotent producer had retried five
    /// timed-out batches at 17.73 s; answered as duplicates, they were
    /// queued with their original offsets, ahead of r810, and fresh
    /// deadlines, and the deadline scan, which stops at the first append
    /// still waiting, never reached r810 (`PendingAppend::ahead`).
    /// Found with the defaults of 2026-12-07.
    #[test]
    fn seed_60713163_a_retried_duplicate_does_not_hold_back_later_timeouts() {
        passes_with(SimConfig {
            eio_anywhere: false,
            acks_mix: false,
            ..SimConfig::new(60_713_163)
        });
    }

    /// Seed 60713802, G2 and G5: node 1's disk took a flip of a batch's
    /// leader epoch (5 to 517 at offset 175, which the CRC does not cover)
    /// and another of its epoch cache file; recovery, rebuilding the
    /// cache from the batches, took the batch just below the recovery
    /// point on trust, and the follower held it below its high watermark.
    /// Its epoch is above the line epoch stored before any batch of a
    /// newer epoch is written: the log now refuses to open, naming file
    /// and position, and the disk is replaced. Found with the defaults of
    /// 2026-12-07 (seed 60716535, the same class, no longer meets the
    /// flips since the epoch cache's writes changed).
    #[test]
    fn seed_60713802_a_flipped_epoch_above_the_line_is_not_served() {
        passes_with(SimConfig {
            eio_anywhere: false,
            acks_mix: false,
            ..SimConfig::new(60_713_802)
        });
    }

    /// Seed 60656765, a check that failed wrongly: a leader whose machine
    /// lost power in the middle of a step (`Run::cut_armed_power`) had
    /// added a follower to the ISR in that step, on a fetch that arrived in
    /// it; the process's end forgot the fetch's arrival before the step's
    /// checks compared the expansion with it ("no fetch from it reached
    /// the leader"). The coordinator changes of a process that dies so are
    /// now checked before it ends. Found with the defaults of 2026-12-07
    /// (flush policies, lost requests and power losses in a step on), as
    /// were seeds 60658205 and 60658791 (the same failure).
    #[test]
    fn seed_60656765_a_leader_that_loses_power_in_a_step_has_its_isr_expansion_checked() {
        for seed in [60_656_765, 60_658_205, 60_658_791] {
            passes_with(SimConfig {
                slow_messages: false,
                partition_shapes: false,
                eio_anywhere: false,
                acks_mix: false,
                ..SimConfig::new(seed)
            });
        }
    }

    /// Seed 60267254 (one log), G1: r1509, acknowledged at 1467 in epoch
    /// 10, was lost. Node 0 lost its disk, installed node 1's snapshot at
    /// 1467 in epoch 12, fetched 1467, led epoch 13 alone (its high
    /// watermark frozen at 1467), and lost that one batch to flipped bits
    /// at its next, unclean, start. Node 1 had led epoch 12 and still held
    /// 1467, but unclean recovery kept node 0's empty log, of the newer
    /// line, over it. A log now notes an epoch whose leader's log held its
    /// records below its start (`Log::note_start_line`), and a longer log
    /// on that epoch's line, or holding a batch of it past the start, is
    /// taken over an empty one (`LogEnd::extends`). Without that rule,
    /// with the new file's reads and writes in place, the seed still
    /// fails.
    #[test]
    fn seed_60267254_an_empty_log_does_not_beat_the_leader_its_start_came_from() {
        passes_with(single_log(60_267_254));
    }

    /// Seed 60279870 (two logs), G5: "node 2, whose disk has no flipped
    /// bit, finds corrupt data" (a torn batch in segment 349 of log 1,
    /// below the recovery point). A reassignment removed node 2's replica
    /// of log 1 (closed, directory deleted) and added it back 95 ms later;
    /// the new replica fetched from 0, rolled at 175 and 349, and its
    /// next write failed (EIO). In between, the removed replica's rolled
    /// segment flush, queued in the background, still ran on the old log
    /// object and wrote its checkpoint, recovery point past 1000, into the
    /// new replica's directory; after a crash, recovery trusted it. A
    /// removed replica's log is now retired before its directory goes
    /// (`Log::retire`): every later call on it fails.
    #[test]
    fn seed_60279870_a_removed_replicas_queued_flush_never_writes_into_its_successor() {
        passes_with(as_found(60_279_870));
    }

    /// Seed 60357926, G1: the record acknowledged at 471 was lost. Node 0
    /// installed node 1's snapshot at 471 in epoch 8 (start line 8) and
    /// failed to write the fetched batch of epoch 3 at 471; node 2, on
    /// epoch 4's line, held it; unclean recovery took node 0's empty log,
    /// on the newer line, over node 2's. An empty log's first fetched
    /// batch at its start now sets its start line to the batch's epoch
    /// (`append_fetched`), so node 2's epoch-3 batch at 471 shows it holds
    /// the same records below.
    #[test]
    fn seed_60357926_an_empty_logs_first_fetched_batch_names_its_start_line() {
        passes_with(as_found(60_357_926));
    }

    /// Seed 60413293 (liveness; the simulator's own expectation was
    /// wrong): node 2 lost its disk, its application restarted at 0, and
    /// its log restarted at a deposed leader's start, 2 (told the logs
    /// agree only up to there); it said it needs a snapshot, in a run
    /// without stores. The next leader's log starts at 0, and the run
    /// held such a replica unsettled, and wrong at the end, because its
    /// application "can read on from the leader's log start", though it
    /// cannot from its own log. It waits for an operator, as SPEC 3.9
    /// has it (`waits_for_an_operator`).
    #[test]
    fn seed_60413293_an_application_below_its_own_log_start_waits_for_an_operator() {
        passes_with(as_found(60_413_293));
    }

    /// Seed 60349931: a debug assertion (no epoch entry past an empty
    /// log's start, `start_epoch_of_empty_log`) failed on a follower whose
    /// fetched write failed on a full disk: the epoch cache had learned the
    /// batches' epochs, up to 136, before the write; the poisoned log then
    /// reported its end at 0. Entries past the start are now ignored there.
    #[test]
    fn seed_60349931_a_failed_fetched_write_leaves_epochs_past_an_empty_log() {
        passes_with(as_found(60_349_931));
    }

    /// Seed 60336922 (log 3 of three), G1: the record acknowledged at
    /// 348 in epoch 9 (ISR [0, 1]) was lost. Node 0, the leader, found its
    /// disk full and resigned, leaving the ISR to node 1; node 1 lost 348
    /// to a power loss and, alone in the ISR, stayed in it at its unclean
    /// restart (the only replica known to hold the committed records) and
    /// led epoch 11 without it. A failed leader's resignation now lists it
    /// among the unclean replicas with its log end (`resignation`,
    /// `UncleanReplica::acknowledged_end`): node 1's restart, its log ending
    /// below what node 0 acknowledged, then leaves the ISR, and unclean recovery
    /// compares the two logs.
    #[test]
    fn seed_60336922_a_resigned_leaders_log_is_compared_before_the_isr_it_left_leads() {
        passes_with(as_found(60_336_922));
    }

    /// Seeds 60214414 and 60215859 (three logs each): false alarms of
    /// the simulator's SPEC 3.8 check, which counted a duplicate's
    /// acknowledgement under the original batch's epoch (see
    /// `client_learns`).
    #[test]
    fn seeds_60214414_and_60215859_a_duplicates_ack_is_not_an_earlier_epochs() {
        passes_with(as_found(60_214_414));
        passes_with(as_found(60_215_859));
    }

    /// Seed 510 failed its end check on a leader whose log a disk fault
    /// planned before the calm had poisoned after it (reading it at the end
    /// failed): the calm now calls off planned disk faults, and a run is
    /// settled only once no node waits for its supervisor's restart.
    #[test]
    fn seed_510_no_disk_fault_hits_after_the_calm() {
        passes(510);
    }

    /// Seed 46 acknowledged a producer record that was never written: a
    /// zombie leader (epoch 9) refused a batch the epoch 10 leader had
    /// placed as out of order, the producer released its sequence, and the
    /// next batch, given it, was answered by the epoch 10 leader as a
    /// duplicate, with the released batch's offsets (G1). The producer now
    /// retries a refusal from a leader older than one its batch reached.
    #[test]
    fn seed_46_a_stale_leaders_refusal_releases_no_sequence() {
        passes(46);
    }

    /// Seed 1000087: a bit flip at offset 182 of the last ISR member's
    /// segment, above its checkpointed high watermark (176) but committed
    /// (up to 252); after a power loss its recovery cut the log at 182,
    /// it reported that end as its own and led, truncating the records on
    /// the replica that held them (SPEC 3.8 then G1). A replica's corrupt
    /// batch with valid batches after it now counts as possibly committed
    /// wherever the checkpoint was (`DamageAboveRecoveryPoint::RefuseReplica`).
    #[test]
    fn seed_1000087_a_bit_flip_above_the_checkpointed_high_watermark_is_not_a_torn_tail() {
        passes(1_000_087);
    }

    /// Seed 2101480: a bit flip set the epoch of the batch just below a
    /// replica's recovery point to 16389; recovery took it on trust, cut
    /// everything after it, and reported that epoch as its log end's, which
    /// won an unclean recovery against a longer log (SPEC 3.8, G1). The
    /// batch before the scan is now checked against the epoch cache.
    #[test]
    fn seed_2101480_a_flipped_epoch_below_the_recovery_point_wins_no_election() {
        passes(2_101_480);
    }

    /// Seed 3000104 never ended: a restarted leader whose storage failed as
    /// it took the lead again (an EIO on its epoch checkpoint's fsync)
    /// moved the log to a new epoch on every notification, its own bump's
    /// included, for ever. A process now bumps a log's epoch once.
    #[test]
    fn seed_3000104_a_restarted_leader_bumps_the_epoch_once() {
        passes(3_000_104);
    }

    /// Seed 4009053 failed G2 ("node 2 holds (epoch 1048577, r192) at 134
    /// below its high watermark 135, where (epoch 1, r192) was
    /// committed"). Two flips on node 2's disk: one in its
    /// `leader-epoch.checkpoint` (so the next open rebuilt the epoch cache
    /// from the batches), one in the leader epoch field of the batch at
    /// 134, which the CRC does not cover (Kafka's batch format leaves it
    /// out too). Rebuilt from that batch, the cache agreed with it, and the
    /// flipped epoch won node 2 an unclean recovery (epoch 14) over node
    /// 0's log ending at 498. A reported log end whose last epoch is above
    /// the log's leader epoch now counts as not known. Not caught: a flip
    /// that leaves the epoch within the log's epochs (10 flipped to 11 in
    /// epoch 14 would still win).
    #[test]
    fn seed_4009053_a_log_end_in_an_epoch_never_reached_is_not_known() {
        passes(4_009_053);
    }

    /// Seed 268 (found by helper-59 on main) never settled: a bit flip in
    /// node 2's segment 587 made recovery cut its log to 642, below the
    /// leader's log start 881, after its application had applied past
    /// that start; with no snapshot store the follower reported
    /// needs_snapshot for ever. A follower whose application reaches the
    /// leader's start now restarts its log there (Kafka's rule). Seed 5006
    /// did not settle either (its node 2's application at 319 over a log
    /// of [66, 68]) and passes with the change.
    #[test]
    fn seed_268_a_follower_whose_application_is_past_the_leaders_start_restarts_there() {
        passes_as_before_blocking_clients(268);
        passes_as_before_blocking_clients(5006);
    }

    /// Seed 9000226 failed the strict hand-over check, a checker mistake:
    /// node 0 began a controlled stop believing it led (its appends
    /// stopped), but the coordinator had already named node 2; its
    /// hand-over found the leadership moved and ended at once. Only a stop
    /// of the node the coordinator names is held to handing over.
    #[test]
    fn seed_9000226_a_deposed_leaders_stop_has_nothing_to_hand_over() {
        passes_as_before_blocking_clients(9_000_226);
    }

    /// Seed 3957916697 (found by CI at ebe9033) failed the hand-over check
    /// at 700.47 ms, a checker mistake: the leader's disk took 20 ms per
    /// fsync and 23 pipelined appends were still to be written when its
    /// stop began, so its follower could fetch the stopped end only after
    /// the bound had grown past the moment the stopping node's session
    /// could expire, and it did, at 700 ms: the controller elected the
    /// follower, as SPEC 3.5 allows. A stop is held to the bound only
    /// while the bound ends before that moment.
    #[test]
    fn seed_3957916697_a_stop_slower_than_the_session_is_left_to_the_controller() {
        passes_as_before_blocking_clients(3_957_916_697);
    }

    /// Seed 20000545 (found by a sweep at ebe9033) failed SPEC 3.8 after
    /// the calm, a checker mistake: after power losses of every node,
    /// unclean recovery elected node 2, the longest log, and a bit flip on
    /// its disk sat in the only copy of records 326..426 (acknowledged up
    /// to 390); the replacement of its disk lost them. A flip in the last
    /// copy of a record is a loss no replication repairs; the run now ends
    /// at the calm there, counted.
    #[test]
    fn seed_20000545_a_flip_in_the_only_copy_ends_the_run_at_the_calm() {
        passes_as_before_blocking_clients(20_000_545);
        // The same with the other replica down at the calm (a sweep at
        // ebe9033; helper-65): node 2 ended at 592, acknowledged to 1617
        // on nodes 0 and 1; node 0's copy was deleted by a reassignment
        // after node 1's disk flipped under it.
        passes_as_before_blocking_clients(20_007_374);
        // And with the other replica's log longer, but holding a deposed
        // leader's records where the acknowledged ones were (a sweep at
        // ebe9033; helper-69).
        passes_as_before_blocking_clients(20_027_069);
    }

    /// Seed 1000745 (found by a sweep at ebe9033) failed SPEC 3.10 at the
    /// calm, a checker mistake: node 1, cut off from the coordinator while
    /// a reassignment removing it completed, still held its copy when the
    /// run counted as settled in the calm's own step; it learns of the
    /// removal with the resync it is owed once it reconnects. A run settles
    /// only once every removed replica's copy is gone.
    #[test]
    fn seed_1000745_a_removed_replica_cut_off_deletes_its_copy_after_the_calm() {
        passes_as_before_blocking_clients(1_000_745);
    }

    /// Seeds 20002921, 20000935, 20002213 and 20005116 (found by a sweep
    /// at ebe9033) never settled: a real liveness bug (SPEC 3.9). A leader
    /// back from an unclean stop (its high watermark the checkpoint's,
    /// below its application's latest snapshot) whose application then
    /// restored from scratch (applied 0) refused that snapshot to the
    /// followers below its log start, which were the only way its ISR and
    /// high watermark could grow. It now serves a snapshot anywhere up to
    /// its log end.
    #[test]
    fn seed_20002921_a_leader_with_a_lagging_high_watermark_serves_its_snapshot() {
        passes_as_before_blocking_clients(20_002_921);
    }

    /// Seed 20002248 (found by a sweep at ebe9033) never settled: a real
    /// liveness bug (SPEC 2.8, 3.5). A node that lost its disk could not
    /// open its replica (its disk full) when the log entered unclean
    /// recovery, reported its end as not known, and never reported again
    /// once it opened; recovery waited for it for ever. A replica the node
    /// knows it lost now reports an empty log, as at its start.
    #[test]
    fn seed_20002248_a_lost_replica_that_cannot_open_reports_an_empty_log() {
        passes_as_before_blocking_clients(20_002_248);
    }

    /// Seed 20005277 (found by a sweep at ebe9033) failed SPEC 3.5: node 2
    /// stopped cleanly and opened as `LostData`. A reassignment had removed
    /// its replica (copy deleted) and added it back; its disk full, it had
    /// not created it yet. The coordinator still had the replica placed on
    /// the directory, which no longer held it: lost. A node now records a
    /// deleted replica as placed nowhere (`DirectoryId::UNASSIGNED`).
    #[test]
    fn seed_20005277_a_replica_deleted_and_added_back_is_not_lost() {
        passes_as_before_blocking_clients(20_005_277);
    }

    /// Seed 20012215 (found by a sweep at ebe9033; root cause by
    /// helper-66) failed G2: a real safety bug (SPEC 3.6). Node 1, a
    /// deposed leader, had appended records of its epoch 15 at 1656..
    /// (never committed; p346 was committed at 1656 in epoch 16). Back
    /// after a clean stop, it fetched with last epoch 15 from a leader
    /// whose log start, 1743, had passed the start of epoch 16: its cache
    /// answered (15, 1743), the follower cut to 1743 only, and its records
    /// below stayed, hidden by a log start move not yet on disk; a crash
    /// brought them back under its high watermark. A leader now answers an
    /// epoch older than every epoch it knows as diverging at its log start,
    /// and a follower told so discards everything below that start.
    #[test]
    fn seed_20012215_a_follower_discards_what_it_holds_below_the_leaders_start() {
        passes_as_before_blocking_clients(20_012_215);
    }

    /// Seed 20020251 (found by a sweep at ebe9033; root cause by
    /// helper-68) failed SPEC 3.8 and lost acknowledged records, with the
    /// unclean switch off: a real bug. Node 0's log had restarted at 1107
    /// with a snapshot install (no batch since), and its unclean report,
    /// (no last epoch, 1107), counted as an empty log; with every report
    /// "empty", recovery elected node 1, fresh, at offset 0. Only a log
    /// ending at 0 counts as empty now.
    #[test]
    fn seed_20020251_a_log_restarted_at_an_offset_is_not_empty() {
        passes_as_before_blocking_clients(20_020_251);
    }

    /// Seed 20019365 (found by a sweep at ebe9033; root cause by
    /// helper-68) never settled: a real liveness bug (SPEC 3.10). The
    /// log's only unclean replica (node 2, its identity file flipped so it
    /// reported its log lost) was dropped by an operator's cancel, leaving
    /// no leader, ISR, ELR or unclean replica: nothing could be elected,
    /// though node 0 held every record. Such a move is refused now.
    #[test]
    fn seed_20019365_a_move_keeps_a_replica_of_the_unclean_recovery() {
        passes_as_before_blocking_clients(20_019_365);
    }

    /// Seed 20024806 (found by a sweep at ebe9033; root cause by
    /// helper-69) panicked in a debug build, `OffsetIndex::append`'s
    /// invariant, a real bug (SPEC 2.3): a flip in the top byte of an index
    /// entry's relative offset passed the remap's checks, which blamed the
    /// next, good entry for not following it; the flipped entry stayed
    /// last, above the next append's. An entry must name an offset below
    /// the segment's end now.
    #[test]
    fn seed_20024806_an_index_entry_past_the_segments_end_is_dropped() {
        passes_as_before_blocking_clients(20_024_806);
    }

    /// Seeds 20009429 and 20006026 (found by a sweep at ebe9033; root
    /// cause by helper-65) failed SPEC 3.5: a real bug. A leader's
    /// controlled shutdown had begun when an operator's reassignment
    /// completed, keeping it leader in a new epoch: its appends were
    /// stopped only in the old epoch, so it took appends again, and its
    /// hand-over took the new epoch for a move by someone else and gave
    /// the log up. A shutdown's stop now holds in every later epoch, and
    /// its hand-over goes on in a later epoch it still leads.
    #[test]
    fn seed_20009429_a_stopping_leader_kept_by_a_reassignment_takes_no_append() {
        passes_as_before_blocking_clients(20_009_429);
        passes_as_before_blocking_clients(20_006_026);
    }

    /// Seed 9000472 failed the end check of SPEC 3.9 at an instant, a
    /// checker mistake: after the operator's stop of the leader, node 0,
    /// whose application was at 0, below its log start 19, led and then
    /// node 1 did (epoch 26); the run counted as settled before node 0's first
    /// fetch answer, which makes a follower below its log start say it
    /// needs a snapshot. A run without stores now settles only once such
    /// a replica says so.
    #[test]
    fn seed_9000472_a_new_follower_below_its_log_start_is_waited_for() {
        passes_as_before_blocking_clients(9_000_472);
    }

    /// Seed 398 failed the simulator's own hand-over bound (a checker
    /// mistake, not a node bug): node 2's controlled stop had not handed
    /// the leadership over after 501.95 ms though nothing failed. Its
    /// in-sync follower, node 0, sent its fetches 245-380 ms apart, its
    /// last one 36 ms before the stop began, when disk work still held a
    /// node's messages back for 569 ms (measured). The bound now counts
    /// the disk work still pending when a stop begins and the disk time
    /// spent since (a node's messages leave once its disk work is done).
    #[test]
    fn seed_398_a_stop_is_given_the_disk_work_pending_when_it_began() {
        passes_as_before_blocking_clients(398);
    }

    /// Seed 3385296584 (found by CI at c9c7843) panicked in a debug build,
    /// `assertion failed: self.check_invariants()` in `Segment::append`:
    /// a bit flipped in the file of node 0's sealed segment 697's index (an
    /// entry's position grew by 2^30); a truncation to 798 made that
    /// segment active again and remapped its index, which read the flipped
    /// entry back unchecked, and the next fetched append found the index
    /// out of order. A remap now keeps only the entries that pass the
    /// checks an open makes.
    #[test]
    fn seed_3385296584_a_remapped_index_keeps_only_checked_entries() {
        passes(3_385_296_584);
    }

    /// Seed 49 (applications without snapshot stores) ended with node 0
    /// saying it needs a snapshot though its application, at 1907, could
    /// read on from the leader's log start 1575. Node 0 had restarted
    /// after an unclean stop with the applied position its log directory
    /// last stored (1473), older than the one its application had
    /// reported and the leader had deleted up to; the first fetch answer
    /// flagged it below the leader's start, and the flag stayed when the
    /// application reported 1907: `needs_snapshot()` said so until the
    /// next role change (and with a store, a needless snapshot would have
    /// replaced the application's newer state). `set_applied` now clears
    /// the flag once the position reaches the leader's start.
    #[test]
    fn seed_49_a_follower_whose_application_reports_past_the_log_start_needs_no_snapshot() {
        passes_with(single_log(49));
    }

    /// Seed 1122 (applications with snapshot stores, no cap) never
    /// settled: node 1, restarted after an unclean stop, led alone (ISR
    /// [1], `min_insync_replicas` 2) with its checkpointed high watermark
    /// 1669, below its application's latest snapshot 1714; node 2, back on
    /// a replaced disk, needed that snapshot and was refused it ("outside
    /// [log start, high watermark]") every 100 ms until the end, and
    /// without it could not join the ISR that would have moved the high
    /// watermark (SPEC 3.9, liveness). A leader now serves a snapshot up to
    /// its own application's applied position too (an application applies
    /// committed records only).
    #[test]
    fn seed_1122_a_leader_serves_the_snapshot_its_application_applied_past_a_stale_high_watermark()
    {
        // As found: before applications restored from scratch.
        passes_with(SimConfig {
            application_restores: false,
            ..single_log(1122)
        });
    }

    /// Seed 60004986 (found by a sweep at f19c9dd), a real bug: node 0's
    /// controlled shutdown began at 7 ms, before its control thread had
    /// read the other nodes' incarnations, and a winding-down control
    /// thread reads the coordinator no more, so every follower fetch was
    /// refused as unverified, nobody caught up and the hand-over waited
    /// out its bound. The hand-over's read of the live nodes now teaches
    /// the node their incarnations.
    #[test]
    fn seed_60004986_a_shutdown_begun_before_the_incarnations_were_read_hands_over() {
        passes_with(single_log(60_004_986));
    }

    /// Seed 60012908 (found by a sweep at 29a4640), a real bug, liveness:
    /// node 1, restarted empty at 1044 by a snapshot, led in epoch 19, its
    /// epoch cache starting there; node 0, whose log was empty, its start
    /// moved up to 1044, fetched naming its last epoch 11, older than every epoch
    /// the leader knows, and was answered diverging at the leader's start,
    /// which cut nothing from its empty log: it asked again for 20 s and
    /// never rejoined the ISR. It now restarts its log empty at its start.
    /// Seed 60016791 (the same sweep) is the same case.
    #[test]
    fn seed_60012908_an_empty_follower_of_an_unknown_epoch_restarts_and_catches_up() {
        passes_with(single_log(60_012_908));
        passes_with(single_log(60_016_791));
    }

    /// A disk that holds the only copy of acknowledged records is not lost
    /// (G1(c) assumes a replica from the ISR comes back with its disk):
    /// here a reassignment had removed the other one, and the loss made
    /// unclean recovery elect a log 146 records short. Seed 60040931 (the
    /// same sweep): the only copy was the flipped disk, which a run with
    /// flips may lose.
    #[test]
    fn seed_60027858_the_only_copy_of_acknowledged_records_keeps_its_disk() {
        passes_with(single_log(60_027_858));
        passes_with(single_log(60_040_931));
    }

    /// A follower told that its log and the leader's agree at most up to
    /// the leader's log start restarts its log empty at that start, not at
    /// its own: cut to its own start (297), it was elected from the ELR
    /// with its log ending there, below records committed up to 464.
    #[test]
    fn seed_60047659_a_follower_discarding_below_the_leaders_start_restarts_there() {
        passes_with(single_log(60_047_659));
    }

    /// A reassignment's cancellation may not drop a replica of the unclean
    /// list that may hold committed records when fewer than
    /// `min_insync_replicas` such holders stay: it dropped the one that
    /// held records acknowledged up to 559, and the ELR member kept had
    /// lost its disk; a replica ending at 461 was elected.
    #[test]
    fn seed_60044893_a_cancelled_move_keeps_the_unclean_holder_of_acknowledged_records() {
        passes_with(single_log(60_044_893));
    }

    /// Nor may a replica of the unclean list count among the holders a
    /// reassignment keeps: one that left at 927 let a cancellation drop
    /// the ISR member holding what was acknowledged up to 993, and the
    /// leader then lost its disk.
    #[test]
    fn seed_60050634_an_unclean_replica_is_no_holder_a_cancelled_move_keeps() {
        passes_with(single_log(60_050_634));
    }

    /// A follower takes its application's position above its log end: a
    /// flip cut node 2's log to [0, 0] with its application at 24, the
    /// leader's log start, and with every `set_applied(24)` refused it
    /// waited for a snapshot (no store) for ever instead of restarting its
    /// log at 24.
    #[test]
    fn seed_60060809_a_follower_behind_its_application_restarts_at_the_leaders_start() {
        passes_with(single_log(60_060_809));
    }

    /// Runs `seed`'s simulation with the default configuration as it was
    /// when the seed was found, without the operator's actions (controlled
    /// stops, reassignments), which came later: a run that draws none is event for event
    /// the run that found the bug; a failure panics with its report (the
    /// named regression seeds).
    fn passes(seed: u64) {
        passes_with(SimConfig {
            controlled_stops: false,
            reassignments: false,
            applications: false,
            ..single_log(seed)
        });
    }

    /// Runs `seed` as the simulator ran it before it had blocking clients
    /// (everything else on): the run a sweep found failing then.
    fn passes_as_before_blocking_clients(seed: u64) {
        passes_with(SimConfig {
            blocking_clients: false,
            ..single_log(seed)
        });
    }

    /// `seed`'s run with one log on three nodes, whatever
    /// [`SimConfig::new`] draws: the run the named regression seeds and the
    /// pinned hashes were taken from (before runs had several logs, or more
    /// than three nodes).
    fn single_log(seed: u64) -> SimConfig {
        as_found(seed).with_logs(1)
    }

    /// `seed`'s run with the logs [`SimConfig::new`] draws, on three
    /// nodes whatever it draws, with no blocking sends of the producer and
    /// every node under `FlushPolicy::Always`: the run a named regression
    /// seed found after runs had several logs, before they had more than
    /// three nodes, blocking sends or other flush policies.
    fn as_found(seed: u64) -> SimConfig {
        SimConfig {
            blocking_sends: false,
            flush_policies: false,
            lost_requests: false,
            mid_step_power_losses: false,
            slow_messages: false,
            partition_shapes: false,
            eio_anywhere: false,
            acks_mix: false,
            ..SimConfig::new(seed).with_nodes(3)
        }
    }

    /// Runs `config`'s simulation; a failure panics with its report.
    fn passes_with(config: SimConfig) {
        run(&config).unwrap_or_else(|failure| panic!("{failure}"));
    }

    /// A tripwire while the simulator moves onto the shared cluster
    /// harness (issue 28, "One cluster harness"): these seeds' trace
    /// hashes, taken on main 1bad5d5 before the move began, must not
    /// change. Retaken once, on purpose, when the producer state's rebuild
    /// began reading and checking the batches that name a producer (seed
    /// 60105060): those reads take simulated disk time. Retaken again, on
    /// purpose (6 of 12 changed), when a replica that fails to open began
    /// to wait a doubling pause before its next attempt (seed 60135209):
    /// fewer attempts, less simulated disk time. Retaken for seeds 0 and 13
    /// (bit flips in index files) when recovery began rebuilding an index
    /// it had walked around, with room for its entries, and a running
    /// segment's walks began starting at its start once one of its entries
    /// was found wrong. Retaken for seed 2 when a replica that a
    /// reassignment removed while it could not be opened began to be
    /// deleted and unassigned as a hosted one is (node 1's log 1 there),
    /// not only forgotten: a read, a deletion and a record more. Retaken
    /// for all twelve when replicas began storing their line epoch
    /// (`Log::line_epoch`, a durable write at each election and at a
    /// follower's first fetch in an epoch): simulated disk time. Retaken for
    /// all twelve when logs began keeping a start line file
    /// (`Log::note_start_line`): read at each open (alone, it changes six
    /// of them), written at each snapshot install and restart at a
    /// leader's start. Retaken for ten of them when `Error::Poisoned`'s
    /// message changed (traces hold failures' messages). Retaken for
    /// seed 45 when a failed leader's resignation began listing it among
    /// the unclean replicas (seed 60336922), and for seeds 0, 6, 10, 13
    /// and 23 when an empty log's first fetched batch began writing its
    /// start line (seed 60357926), and again for the same five when a
    /// snapshot's chunks and the fetch answers that restart a log at the
    /// leader's start began naming an epoch below that offset, which the
    /// restarted log notes as its start line (the start lines the logs
    /// write changed, and with them their disk writes). Retaken for
    /// seeds 0, 10, 23 and 35 when a log's rebuild of its producer state
    /// at open began leaving a snapshot at each segment base it walked
    /// past, written by the next flush or log start move (seed 60512796):
    /// simulated disk time; and for seed 23 when a log's restart began
    /// finishing a deferred log start move first. Retaken for all twelve
    /// when a leader began counting a follower's fetch towards its high
    /// watermark and the ISR only once the fetch says the follower stored
    /// the leader's epoch as its line, and answering such a fetch at once
    /// instead of parking it (seed 70100050): commits, catch-up times,
    /// ISR changes and fetch answers right after elections moved. Retaken
    /// for all twelve when a client's appends to one node began to stay in
    /// flight when another node's process ended (they were all dropped,
    /// their outcomes never learnt), and a restarted leader whose move to
    /// a new epoch failed began to read the log again on the report timer
    /// (seed 60665275): outcomes learnt, and coordinator reads, moved.
    /// Retaken for all but seed 45 when the deadline scan began walking a
    /// whole queue while a retried duplicate sat ahead of stamped appends
    /// (seed 60713163): their timeouts came when due.
    /// Retaken for seeds 0 and 35 (reassignments) when a leader's
    /// hand-over began stopping appends for a successor caught up lately
    /// (within twice `fetch_wait_max`) rather than at the log end, before
    /// and after its live nodes' call: when appends stop moved. Retaken
    /// for all twelve when appends stopped writing the epoch cache's file
    /// (issue 27: the next fsync round writes it, with the offset it
    /// covers, and every open writes it once): the disk writes, and with
    /// them simulated disk time, changed. Chosen to
    /// cover controlled stops (0, 2, 17, 23, 41, 55),
    /// applications with snapshot stores that lose their disk (0, 10, 13,
    /// 17, 23, 45), disk loss, bit flips (0, 2, 6, 13, 35, 41, 45),
    /// reassignments with a cancel (0, 35, 45), a run without power
    /// losses (6) and one without operator actions or flips (14). Each
    /// runs on three nodes ([`single_log`]), as when its hash was taken:
    /// the draw of more nodes left them as they were.
    #[test]
    fn trace_hashes_of_pinned_seeds_do_not_change() {
        let pinned: [(u64, u64); 12] = [
            (0, 0xe65f_96d2_351b_8eb2),
            (2, 0x49a3_eccc_17a5_8085),
            (6, 0x0cf8_5fc0_08e6_4593),
            (10, 0x9ec9_c974_dc2c_dc9f),
            (13, 0x10aa_4eef_af01_190c),
            (14, 0xfbd4_091e_6d0d_8c8f),
            (17, 0x575d_b81f_293f_78a6),
            (23, 0xb4c7_b6af_f7f6_4426),
            (35, 0x7624_13c7_52d1_50f1),
            (41, 0xaba9_b1c6_5b7f_a54e),
            (45, 0xaf7e_4e1f_c778_8559),
            (55, 0xfe5a_c8a7_b82d_a349),
        ];
        let changed: Vec<String> = pinned
            .iter()
            .filter_map(|&(seed, pinned_hash)| {
                let report = run(&single_log(seed)).unwrap_or_else(|failure| panic!("{failure}"));
                (report.trace_hash != pinned_hash).then(|| {
                    format!(
                        "seed {seed}: trace {:016x}, pinned {pinned_hash:016x}",
                        report.trace_hash
                    )
                })
            })
            .collect();
        assert!(changed.is_empty(), "runs changed: {changed:?}");
    }

    /// A run that panics (a node's own assertion) is reported as a failed
    /// check is: its seed, the replay command and the trace lines it kept.
    #[test]
    fn a_panicking_run_reports_its_last_events() {
        let failure = run(&SimConfig {
            panic_at: Some(Duration::from_secs(2)),
            ..SimConfig::new(7)
        })
        .expect_err("the run panicked");
        let report = failure.to_string();
        assert!(
            report.contains("simulation seed 7 failed at 2") && report.contains("planted panic"),
            "{report}"
        );
        assert!(report.contains("replay: ISRLOG_SIM_SEED=7"), "{report}");
        assert_eq!(failure.last_lines.len(), 64, "{report}");
        assert!(
            failure
                .last_lines
                .iter()
                .any(|line| line.contains("append")),
            "{report}"
        );
    }

    /// A failure found with the number of nodes or logs or the blocking
    /// clients overridden prints a replay command that sets them again;
    /// one of the drawn run sets nothing more.
    #[test]
    fn a_replay_command_sets_the_overrides_that_made_the_run() {
        let drawn = SimConfig::new(7);
        assert_eq!(replay_variables(&drawn), "");
        let logs = if drawn.logs == 1 { 2 } else { 1 };
        let nodes = if drawn.nodes == 3 { 5 } else { 3 };
        let overridden = SimConfig {
            blocking_clients: !drawn.blocking_clients,
            blocking_sends: !drawn.blocking_sends,
            flush_policies: !drawn.flush_policies,
            lost_requests: !drawn.lost_requests,
            mid_step_power_losses: !drawn.mid_step_power_losses,
            slow_messages: !drawn.slow_messages,
            partition_shapes: !drawn.partition_shapes,
            eio_anywhere: !drawn.eio_anywhere,
            acks_mix: !drawn.acks_mix,
            ..SimConfig::new(7).with_logs(logs).with_nodes(nodes)
        };
        assert_eq!(
            replay_variables(&overridden),
            format!(
                "ISRLOG_SIM_NODES={nodes} ISRLOG_SIM_LOGS={logs} ISRLOG_SIM_BLOCKING_CLIENTS={} ISRLOG_SIM_BLOCKING_SENDS={} ISRLOG_SIM_FLUSH_POLICIES={} ISRLOG_SIM_LOST_REQUESTS={} ISRLOG_SIM_MID_STEP_POWER_LOSSES={} ISRLOG_SIM_SLOW_MESSAGES={} ISRLOG_SIM_PARTITION_SHAPES={} ISRLOG_SIM_EIO_ANYWHERE={} ISRLOG_SIM_ACKS_MIX={} ",
                u8::from(!drawn.blocking_clients),
                u8::from(!drawn.blocking_sends),
                u8::from(!drawn.flush_policies),
                u8::from(!drawn.lost_requests),
                u8::from(!drawn.mid_step_power_losses),
                u8::from(!drawn.slow_messages),
                u8::from(!drawn.partition_shapes),
                u8::from(!drawn.eio_anywhere),
                u8::from(!drawn.acks_mix)
            )
        );
    }

    /// A fault drawn from a stream of its own: among the first `seeds`
    /// runs with it turned on, one that drew it (`drew` says `Some(true)`)
    /// passes and replays byte for byte, and one that drew none of it
    /// (`Some(false)`) is event for event the run it is with it off.
    fn assert_drawn_apart(
        what: &str,
        seeds: u64,
        turn_on: fn(SimConfig) -> SimConfig,
        drew: fn(&SimReport) -> Option<bool>,
    ) {
        let (mut with, mut without) = (None, None);
        for seed in 0..seeds {
            let config = turn_on(single_log(seed));
            let report = run(&config).unwrap_or_else(|failure| panic!("{failure}"));
            match drew(&report) {
                Some(true) => {
                    with.get_or_insert((config, report.trace_hash));
                }
                Some(false) => {
                    without.get_or_insert((seed, report.trace_hash));
                }
                None => {}
            }
            if with.is_some() && without.is_some() {
                break;
            }
        }
        let (config, hash) = with.unwrap_or_else(|| panic!("a run among {seeds} draws {what}"));
        let replayed = run(&config).unwrap_or_else(|failure| panic!("{failure}"));
        assert_eq!(replayed.trace_hash, hash, "seed {} replays", config.seed);
        let (seed, hash) = without.unwrap_or_else(|| panic!("a run among {seeds} draws no {what}"));
        let before = run(&single_log(seed)).unwrap_or_else(|failure| panic!("{failure}"));
        assert_eq!(before.trace_hash, hash, "seed {seed} without {what}");
    }

    /// Slow messages and partitions' shapes are drawn apart: a run that
    /// draws neither is event for event the run it is without them, and
    /// one that has both passes and replays byte for byte.
    #[test]
    fn slow_messages_and_partition_shapes_are_drawn_apart() {
        assert_drawn_apart(
            "slow messages and one-way cuts",
            24,
            |config| SimConfig {
                slow_messages: true,
                partition_shapes: true,
                ..config
            },
            |report| {
                let [slow, deaf, mute, _] = report.network_shapes;
                if slow > 0 && deaf + mute > 0 {
                    Some(true)
                } else {
                    (report.network_shapes == [0; 4]).then_some(false)
                }
            },
        );
    }

    /// Power losses in the middle of a step are drawn apart: a run that
    /// draws none is event for event the run it is without them, and one
    /// in which some struck passes and replays byte for byte.
    #[test]
    fn mid_step_power_losses_are_drawn_apart() {
        assert_drawn_apart(
            "power losses in a step",
            16,
            |config| SimConfig {
                mid_step_power_losses: true,
                ..config
            },
            |report| Some(report.mid_step_power_cuts.0 > 0),
        );
    }

    /// Coordinator writes lost before they take effect are drawn apart: a
    /// run that draws none is event for event the run it is without them,
    /// and one that draws some passes and replays byte for byte.
    #[test]
    fn lost_requests_are_drawn_apart() {
        assert_drawn_apart(
            "writes lost before they take effect",
            16,
            |config| SimConfig {
                lost_requests: true,
                ..config
            },
            |report| Some(report.requests_lost > 0),
        );
    }

    /// Plain appends with `acks=1` and `acks=0` are drawn apart: a run
    /// that draws none is event for event the run it is without them, and
    /// one that makes some passes and replays byte for byte.
    #[test]
    fn acks_mix_is_drawn_apart() {
        assert_drawn_apart(
            "appends with acks=1 and acks=0",
            16,
            |config| SimConfig {
                acks_mix: true,
                ..config
            },
            |report| {
                let (leader, none) = report.unreplicated_appends;
                Some(leader > 0 && none > 0)
            },
        );
    }

    /// Disk faults that strike any operation are drawn apart: a run that
    /// draws none is event for event the run it is without them, and one
    /// that draws some passes and replays byte for byte.
    #[test]
    fn eio_anywhere_is_drawn_apart() {
        assert_drawn_apart(
            "disk faults on any operation",
            24,
            |config| SimConfig {
                eio_anywhere: true,
                ..config
            },
            |report| Some(report.eio_anywhere_faults > 0),
        );
    }

    /// Flush policies are drawn apart: a run that draws `Always` is event
    /// for event the run it is without the draw, and runs that draw
    /// `Never` and `Every` (power losses only on their lossy node) pass
    /// and replay byte for byte.
    #[test]
    fn flush_policies_are_drawn_apart() {
        let (mut never, mut every, mut always) = (None, None, None);
        for seed in 0..32 {
            let config = SimConfig {
                flush_policies: true,
                ..single_log(seed)
            };
            let report = run(&config).unwrap_or_else(|failure| panic!("{failure}"));
            let slot = match report.flush_policy {
                FlushPolicy::Never => &mut never,
                FlushPolicy::Every { .. } => &mut every,
                FlushPolicy::Always => &mut always,
            };
            slot.get_or_insert((config, report.trace_hash));
            if never.is_some() && every.is_some() && always.is_some() {
                break;
            }
        }
        for (name, drawn) in [("Never", never), ("Every", every)] {
            let (config, hash) = drawn.unwrap_or_else(|| panic!("a run among 32 draws {name}"));
            let replayed = run(&config).unwrap_or_else(|failure| panic!("{failure}"));
            assert_eq!(replayed.trace_hash, hash, "seed {} replays", config.seed);
        }
        let (config, hash) = always.expect("a run among 32 draws Always");
        let before = run(&single_log(config.seed)).unwrap_or_else(|failure| panic!("{failure}"));
        assert_eq!(
            before.trace_hash, hash,
            "seed {} under Always, drawn or not",
            config.seed
        );
    }

    /// The producer's blocking sends are drawn apart: a run that draws
    /// none is event for event the run it is without them, and one that
    /// draws them makes some, passes and replays byte for byte.
    #[test]
    fn the_producers_blocking_sends_are_drawn_apart() {
        assert_drawn_apart(
            "blocking sends",
            16,
            |config| SimConfig {
                blocking_sends: true,
                ..config
            },
            |report| Some(report.produced.2 > 0),
        );
    }

    /// A run of three logs passes, and each log had a leader, acknowledged
    /// records and served the reader: the workload and the checks reach
    /// every log, not only the first.
    #[test]
    fn a_run_of_three_logs_checks_each() {
        let mut config = SimConfig::new(7).with_logs(3);
        config.simulated = Duration::from_secs(20);
        let report = run(&config).unwrap_or_else(|failure| panic!("{failure}"));
        assert_eq!(report.logs.len(), 3, "{report:?}");
        for (log, counts) in report.logs.iter().enumerate() {
            assert!(
                counts.leaders > 0 && counts.acknowledged > 0 && counts.read > 0,
                "log {}: {counts:?}",
                log + 1
            );
        }
        assert_eq!(
            report.acknowledged,
            report.logs.iter().map(|log| log.acknowledged).sum::<u64>()
        );
    }

    /// [`SimConfig::new`] draws one log in about half the runs, two and
    /// three in about a quarter each, apart from the run's own draws.
    #[test]
    fn the_number_of_logs_is_drawn_per_seed() {
        let mut runs = [0u32; 3];
        for seed in 0..400 {
            runs[SimConfig::new(seed).logs - 1] += 1;
        }
        assert!(runs[0] > 150 && runs[1] > 60 && runs[2] > 60, "{runs:?}");
    }

    /// [`SimConfig::new`] draws three nodes in about three runs of four,
    /// four and five in about an eighth each, apart from the number of
    /// logs.
    #[test]
    fn the_number_of_nodes_is_drawn_per_seed() {
        let mut runs = [[0u32; 3]; 3];
        for seed in 0..1600 {
            let config = SimConfig::new(seed);
            runs[config.nodes - 3][config.logs - 1] += 1;
        }
        let by_nodes: Vec<u32> = runs.iter().map(|logs| logs.iter().sum()).collect();
        assert!(
            by_nodes[0] > 1050 && by_nodes[1] > 140 && by_nodes[2] > 140,
            "{runs:?}"
        );
        // Every pairing happens: the two draws are apart.
        assert!(runs.iter().flatten().all(|count| *count > 20), "{runs:?}");
    }

    /// A log's replicas are every node of a three-node run, in id order
    /// (as before runs had more nodes), and three distinct nodes of a
    /// larger run's, drawn per log.
    #[test]
    fn each_log_is_placed_on_three_nodes() {
        let ids = |ids: &[u32]| ids.iter().map(|id| NodeId(*id)).collect::<Vec<_>>();
        assert_eq!(initial_replicas(7, 3, 2), vec![ids(&[0, 1, 2]); 2]);
        let mut placements = std::collections::BTreeSet::new();
        for seed in 0..50 {
            for replicas in initial_replicas(seed, 5, 3) {
                assert_eq!(replicas.len(), REPLICATION_FACTOR, "{replicas:?}");
                let distinct: std::collections::BTreeSet<_> = replicas.iter().collect();
                assert_eq!(distinct.len(), REPLICATION_FACTOR, "{replicas:?}");
                assert!(replicas.iter().all(|node| node.0 < 5), "{replicas:?}");
                placements.insert(replicas);
            }
        }
        assert!(placements.len() > 30, "{placements:?}");
    }

    /// A run of five nodes and three logs passes, each log on three of
    /// them, and each log had a leader, acknowledged records and served
    /// the reader.
    #[test]
    fn a_run_of_five_nodes_checks_each_log() {
        let mut config = SimConfig::new(7).with_logs(3).with_nodes(5);
        config.simulated = Duration::from_secs(20);
        let report = run(&config).unwrap_or_else(|failure| panic!("{failure}"));
        for (log, counts) in report.logs.iter().enumerate() {
            assert!(
                counts.leaders > 0 && counts.acknowledged > 0 && counts.read > 0,
                "log {}: {counts:?}",
                log + 1
            );
        }
    }

    #[test]
    fn a_seed_replays_byte_for_byte() {
        let mut config = SimConfig::new(7);
        config.simulated = Duration::from_secs(20);
        let first = run(&config).unwrap_or_else(|failure| panic!("{failure}"));
        let second = run(&config).unwrap_or_else(|failure| panic!("{failure}"));
        assert_eq!(first, second);
        assert!(first.acknowledged > 0 && first.crashes > 0, "{first:?}");
        let other = SimConfig { seed: 8, ..config };
        let other_first = run(&other).unwrap_or_else(|failure| panic!("{failure}"));
        assert_ne!(first.trace_hash, other_first.trace_hash);
        // A run with controlled stops replays too.
        let other_second = run(&other).unwrap_or_else(|failure| panic!("{failure}"));
        assert_eq!(other_first, other_second);
        assert!(other_first.controlled_stops.0 > 0, "{other_first:?}");
        // And one with reassignments.
        assert!(
            first.reassignments.0 + other_first.reassignments.0 > 0,
            "{first:?} {other_first:?}"
        );
    }
}
