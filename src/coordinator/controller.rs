//! The controller: the one node per cluster that moves leadership (SPEC 3.5).
//!
//! Every node runs a [`Controller`]; each one's thread keeps trying to take
//! the coordinator's controller seat, and only the holder acts. The holder
//! watches node liveness and, for every log, writes the decision of
//! [`elect_leader`] with compare-and-set: a new leader (the first live ISR
//! member in assignment order, else the first live eligible leader replica,
//! KIP-966; epoch + 1) when the leader's node is gone, "no leader" when no
//! ISR or ELR member is live (unless unclean election is on), and the
//! removal of dead followers from the ISR (into the ELR when the ISR falls
//! below `min_insync_replicas`). On request, or on a timer, it
//! moves leadership back to each log's preferred replica
//! ([`elect_preferred_leader`]).
//!
//! This module does not own sessions (the node registers and heartbeats its
//! own session; the controller seat lives and dies with it), does not touch
//! any replica's data (a new leader learns of its election from the
//! coordinator's `LogChanged` event and acts on it in the replication layer),
//! and does not shrink the ISR of lagging but live followers (the leader does
//! that, SPEC 3.4).
//!
//! Fencing a deposed controller: as Kafka in ZooKeeper mode makes each
//! controller write conditional on the controller epoch znode's version,
//! every write here goes through
//! [`Coordinator::compare_and_set_as_controller`], which refuses it unless
//! this node still holds the seat with the epoch it acted under, atomically
//! with the compare-and-set on the log's (leader epoch, version). A
//! controller that lost its seat in the middle of a pass therefore writes
//! nothing more; it notices at its next seat check. The live-node set a
//! write is decided from is read just before that write (not once per pass),
//! so a pass that takes a while does not act on an old view of liveness.
//!
//! Promptness: the controller subscribes with
//! [`Coordinator::subscribe_all`], so it hears of changes to every log,
//! including logs its own node does not host, rather than finding them at
//! its next poll.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvError, Sender, TryRecvError};

use super::{
    completion_update, CasOutcome, ControllerEpoch, Coordinator, CoordinatorEvent, LogState,
    LogUpdate,
};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering};
use crate::types::{LogId, NodeId};

/// Default for [`ControllerConfig::poll_interval`].
const POLL_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);
/// Default for [`ControllerConfig::unclean_recovery_wait_max`]: Kafka's
/// `unclean.recovery.timeout.ms` (KIP-966), five minutes.
const UNCLEAN_RECOVERY_WAIT_MAX_DEFAULT: Duration = Duration::from_secs(300);
/// After a failed coordinator call, the controller tries again this soon
/// (or at its poll interval, if that is shorter).
const RETRY_INTERVAL: Duration = Duration::from_millis(50);
/// Compare-and-set attempts on one log in one pass before leaving it to the
/// next pass: losing this often means someone else keeps writing the log,
/// and the next pass starts from a fresh read anyway.
const CAS_ATTEMPTS_MAX: usize = 8;
/// Events drained per wake-up, so a flood of events cannot keep the thread
/// from acting (or from noticing a stop).
const EVENTS_PER_WAKE_MAX: usize = 1024;
/// Logs remembered individually for the next pass; beyond this the next
/// pass simply covers every log.
const PENDING_LOGS_MAX: usize = 1024;

/// Reassignment (SPEC 3.10): how long the controller leaves a live leader
/// that a move removes to hand its leadership to a caught-up target
/// replica itself (the node's hand-over, as in a controlled shutdown)
/// before it completes the move without it, naming the first live target
/// replica leader in the completing write. Measured by the controller
/// holding the seat, from when it first saw every target replica in the
/// ISR; the periodic pass ([`ControllerConfig::poll_interval`]) notices
/// its end.
pub(crate) const REASSIGNMENT_HAND_OVER_WAIT_MAX: Duration = Duration::from_secs(10);

/// How long the controller waits for a live leader that a reassignment
/// removes to hand over itself: [`REASSIGNMENT_HAND_OVER_WAIT_MAX`], or
/// longer than a cut-off target replica can stay in the ISR (its
/// `replica_lag_time_max`, plus the leader's own hand-over wait and retry)
/// if that is longer. Until then the leader, which alone knows which
/// target replica fetched everything, names its successor.
fn reassignment_hand_over_wait_max(config: &ControllerConfig) -> Duration {
    REASSIGNMENT_HAND_OVER_WAIT_MAX.max(config.replica_lag_time_max + Duration::from_secs(5))
}

/// How a [`Controller`] behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerConfig {
    /// When no ISR member of a log is live, let the first live replica lead
    /// with ISR = {itself}, accepting that committed records it lacks are
    /// lost (SPEC 3.5; Kafka's `unclean.leader.election.enable`). Off by
    /// default: the log stays leaderless until an ISR member returns.
    pub unclean_leader_election: bool,
    /// With [`ControllerConfig::unclean_leader_election`] on, how long a
    /// log in unclean recovery waits for the rest of the replicas that held
    /// its committed records before the unclean switch decides (SPEC 3.5;
    /// Kafka's `unclean.recovery.timeout.ms`, KIP-966). A log is in
    /// unclean recovery when no ISR or ELR member is live and some of them
    /// came back after an unclean shutdown and reported their log ends
    /// ([`LogState::unclean_replicas`]): until every one of them has
    /// reported and the longest log is live, an unclean election could
    /// pick a replica that lost records another still holds. The wait is
    /// measured by the controller holding the seat and starts again when
    /// the seat moves. A log with no unclean report waits for nothing: the
    /// switch decides at once, as before unclean recovery existed. With
    /// the switch off, the log waits for those ISR and ELR members as long
    /// as it takes.
    ///
    /// With the switch on, it also bounds how long unclean recovery waits
    /// for a replica outside the ISR and ELR that is away (down, or cut off
    /// from the coordinator), or one whose log end is not known yet, before
    /// electing the longest reported log without it, when some report
    /// holds records (if every report is empty, the log waits for replicas
    /// outside the list as long as it takes: one of them may hold
    /// everything): such a replica may have left the ISR holding records
    /// that every later member lost (SPEC G1(c)), and one back within the
    /// wait reports its log end and is compared; one away longer is passed
    /// over, and records only it held are lost (counted as an unclean
    /// election). With the switch off nobody is passed over: the log waits
    /// for them as long as it takes. Default five minutes.
    pub unclean_recovery_wait_max: Duration,
    /// Run preferred-leader election this often while controller (Kafka's
    /// `auto.leader.rebalance.enable` with
    /// `leader.imbalance.check.interval.seconds`); `None` (the default) runs
    /// it only on request.
    pub preferred_leader_check_interval: Option<Duration>,
    /// A full pass over every log at least this often while controller, as a
    /// safety net for missed events; also how often a node without a
    /// controller seat looks for a free one when no event wakes it.
    pub poll_interval: Duration,
    /// The logs' `min_insync_replicas` (SPEC 3.1), which decides who joins
    /// the eligible leader replicas when the controller shrinks an ISR
    /// ([`LogState::eligible_leader_replicas_after`]). A
    /// [`Node`](crate::Node) sets it from its
    /// [`ReplicationConfig`](crate::ReplicationConfig), so the two cannot
    /// disagree; default 1, as there.
    pub min_insync_replicas: usize,
    /// The logs' `replica_lag_time_max` (SPEC 3.4), which bounds how long
    /// the controller waits for a live leader that a reassignment removes
    /// to hand its leadership over itself before it names a successor
    /// without it: longer than a cut-off replica may stay in the ISR, so
    /// the controller never names one the leader could not reach. A
    /// [`Node`](crate::Node) sets it from its
    /// [`ReplicationConfig`](crate::ReplicationConfig); default 30 s, as
    /// there.
    pub replica_lag_time_max: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            unclean_leader_election: false,
            unclean_recovery_wait_max: UNCLEAN_RECOVERY_WAIT_MAX_DEFAULT,
            preferred_leader_check_interval: None,
            poll_interval: POLL_INTERVAL_DEFAULT,
            min_insync_replicas: 1,
            replica_lag_time_max: Duration::from_secs(30),
        }
    }
}

impl ControllerConfig {
    /// Checks every setting: [`Error::InvalidConfig`] naming the first bad
    /// one.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.min_insync_replicas == 0 {
            return Err(Error::InvalidConfig {
                field: "min_insync_replicas",
                value: "0".to_owned(),
                reason: "must be at least 1",
            });
        }
        if self.poll_interval.is_zero() {
            return Err(Error::InvalidConfig {
                field: "poll_interval",
                value: format!("{:?}", self.poll_interval),
                reason: "must be longer than zero",
            });
        }
        if let Some(interval) = self.preferred_leader_check_interval {
            if interval.is_zero() {
                return Err(Error::InvalidConfig {
                    field: "preferred_leader_check_interval",
                    value: format!("{interval:?}"),
                    reason: "must be longer than zero (or None to disable the timer)",
                });
            }
        }
        Ok(())
    }
}

/// What the controller should write for one log, as decided by
/// [`elect_leader`] or [`elect_preferred_leader`] from the stored state and
/// the live nodes.
// A decision returned and written at once, never stored: boxing the
// `LogUpdate` (large since unclean entries carry epoch caches) would only
// add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Election {
    /// Nothing to write.
    Unchanged,
    /// Make `leader` the leader in the next leader epoch with this ISR.
    Leader {
        /// The new leader; never the current one.
        leader: NodeId,
        /// The new ISR; contains `leader`.
        in_sync_replicas: Vec<NodeId>,
        /// No ISR or ELR member was live: `leader` may lack committed
        /// records.
        unclean: bool,
    },
    /// No replica may lead: leader `None` in the next leader epoch (which
    /// fences the old leader), ISR unchanged.
    NoLeader,
    /// The leader stays (same epoch); dead followers leave the ISR.
    ShrinkIsr {
        /// The new ISR: the old one without the dead followers.
        in_sync_replicas: Vec<NodeId>,
    },
    /// Every target replica of the log's reassignment is in the ISR:
    /// store this update, which sets replicas = target (SPEC 3.10,
    /// [`completion_update`]).
    CompleteReassignment(LogUpdate),
}

impl Election {
    /// The compare-and-set payload that carries out this decision on
    /// `state` for logs with `min_insync_replicas`, or `None` for
    /// [`Election::Unchanged`]. The ELR follows the new ISR
    /// ([`LogState::eligible_leader_replicas_after`]), except after an
    /// unclean election, which empties it as Kafka's
    /// `PartitionChangeBuilder.maybeUpdateRecordElr` does: the new leader's
    /// log is the truth from then on, and nobody is known to hold all of it.
    fn update(&self, state: &LogState, min_insync_replicas: usize) -> Option<LogUpdate> {
        match self {
            Election::Unchanged => None,
            Election::Leader {
                leader,
                in_sync_replicas,
                unclean,
            } => {
                debug_assert_ne!(
                    state.leader,
                    Some(*leader),
                    "an election must change the leader"
                );
                let eligible_leader_replicas = if *unclean {
                    Vec::new()
                } else {
                    state.eligible_leader_replicas_after(in_sync_replicas, min_insync_replicas)
                };
                Some(LogUpdate {
                    leader: Some(*leader),
                    leader_epoch: state.leader_epoch.next(),
                    in_sync_replicas: in_sync_replicas.clone(),
                    eligible_leader_replicas,
                    unclean_report: None,
                    assignment: None,
                })
            }
            Election::NoLeader => {
                debug_assert!(state.leader.is_some(), "the log is already leaderless");
                Some(LogUpdate {
                    leader: None,
                    leader_epoch: state.leader_epoch.next(),
                    in_sync_replicas: state.in_sync_replicas.clone(),
                    eligible_leader_replicas: state.eligible_leader_replicas_after(
                        &state.in_sync_replicas,
                        min_insync_replicas,
                    ),
                    unclean_report: None,
                    assignment: None,
                })
            }
            Election::ShrinkIsr { in_sync_replicas } => Some(LogUpdate::in_sync_replicas(
                state,
                in_sync_replicas.clone(),
                min_insync_replicas,
            )),
            Election::CompleteReassignment(update) => Some(update.clone()),
        }
    }
}

/// Decides what the controller writes for a log whose stored state is
/// `state` when `live` are the nodes with a session (SPEC 3.5; Kafka's
/// `OfflinePartitionLeaderElectionStrategy` plus `onBrokerFailure`).
///
/// - Leader live: dead followers leave the ISR, leader and epoch stay (as
///   Kafka's KRaft controller does when it fences a broker; the ZooKeeper
///   controller also bumped the epoch, which needlessly fences the live
///   leader's followers).
/// - Leader dead or `None`: the first replica in assignment order that is
///   live and in the ISR leads, with ISR = the old ISR minus the dead nodes.
/// - No ISR member live: the first replica in assignment order that is live
///   and in the ELR leads, with ISR = {itself} (KIP-966; Kafka's
///   `PartitionChangeBuilder.isValidNewLeader` takes an ELR member only when
///   the ISR, which holds no fenced broker in KRaft, is empty, and
///   `tryElection` sets the ISR to the new leader alone). The dead ISR
///   members then join the ELR, per [`Election::update`].
/// - ISR and ELR both empty (every replica that held the committed records
///   restarted after an unclean shutdown): the one of
///   [`LogState::unclean_replicas`] whose log holds the most of the newest
///   line ([`LogState::recovery_leader`], [`LogState::longest_line`]) leads
///   with ISR = {itself}, once it is live (KIP-966's unclean recovery,
///   which compares last epoch, then log end offset: see `longest_line`
///   for why not here). Not counted as unclean: if any of them kept its disk,
///   nothing committed is lost (unless a replica that may hold more was
///   passed over, below). A log reported empty is never the longest
///   ([`recovery_election`]). Every replica outside the list that is
///   neither known empty nor reported yet, and every one in the list whose
///   log end is not known yet (its node could not open it), is waited for,
///   live or away, until `recovery_waited` (the unclean switch is on and
///   the log has waited [`ControllerConfig::unclean_recovery_wait_max`]);
///   past that, only the live ones, which report as soon as they can, and
///   an election that passed over one that is away counts as unclean. When every known end is
///   empty, every such replica is waited for the same way: none of the
///   reported logs may be elected over one that may hold records.
/// - No ISR or ELR member live, `unclean` on: a live replica leads with
///   ISR = {itself}: the live one of [`LogState::unclean_replicas`] with
///   the non-empty reported log end [`LogState::longest_line`] picks among
///   the live ones, else the first live replica
///   whose log end is not known, else the first live replica. The caller
///   passes `unclean` on only once the log has waited
///   [`ControllerConfig::unclean_recovery_wait_max`] if it is in unclean
///   recovery ([`awaits_unclean_recovery`]).
/// - Otherwise: no leader, ISR kept as it was. Kafka keeps only the last
///   ISR member in that case; we keep all of them because every member of
///   the stored ISR holds every committed record (a leader's ISR shrink takes
///   effect only once stored, SPEC 3.3/3.4), so whichever of them returns
///   first may safely lead, which makes the log available sooner. The epoch
///   still grows so the old leader, should it still be running, is fenced.
pub(crate) fn elect_leader(
    state: &LogState,
    live: &[NodeId],
    unclean: bool,
    recovery_waited: bool,
) -> Election {
    let is_live = |node: &NodeId| live.contains(node);
    let live_in_sync: Vec<NodeId> = state
        .in_sync_replicas
        .iter()
        .copied()
        .filter(is_live)
        .collect();
    if let Some(leader) = state.leader.filter(is_live) {
        if live_in_sync.len() == state.in_sync_replicas.len() {
            return Election::Unchanged;
        }
        // The leader is in the ISR (a stored-state invariant) and live, so
        // the shrunk ISR still contains it.
        debug_assert!(live_in_sync.contains(&leader));
        return Election::ShrinkIsr {
            in_sync_replicas: live_in_sync,
        };
    }
    let clean = state
        .replicas
        .iter()
        .copied()
        .find(|node| is_live(node) && state.is_in_sync(*node));
    if let Some(leader) = clean {
        return Election::Leader {
            leader,
            in_sync_replicas: live_in_sync,
            unclean: false,
        };
    }
    let eligible = state
        .replicas
        .iter()
        .copied()
        .find(|node| is_live(node) && state.is_eligible(*node));
    if let Some(leader) = eligible {
        return Election::Leader {
            leader,
            in_sync_replicas: vec![leader],
            unclean: false,
        };
    }
    // Unclean recovery: no ISR or ELR member is left at all, every replica
    // that held the committed records restarted after an unclean shutdown.
    // The one `longest_line` picks leads once it is live; until then
    // the log waits for it (SPEC G1(c)), unless unclean election decides.
    if let Some((leader, passed_over)) = recovery_election(state, &is_live, recovery_waited) {
        return Election::Leader {
            leader,
            in_sync_replicas: vec![leader],
            // Electing without a replica that may hold more may lose
            // committed records: that is the unclean switch's decision.
            unclean: passed_over,
        };
    }
    if unclean {
        // After the recovery wait, prefer what the reports say: a replica
        // known to hold records, then one that may, then any.
        let reported = state
            .longest_line(
                state
                    .replicas
                    .iter()
                    .filter(|node| is_live(node))
                    .filter_map(|node| state.unclean_replicas.iter().find(|r| r.node == *node)),
            )
            .map(|r| r.node);
        let unknown = || {
            state
                .replicas
                .iter()
                .copied()
                .find(|node| is_live(node) && state.log_end_unknown(*node))
        };
        let any = || state.replicas.iter().copied().find(is_live);
        if let Some(leader) = reported.or_else(unknown).or_else(any) {
            return Election::Leader {
                leader,
                in_sync_replicas: vec![leader],
                unclean: true,
            };
        }
    }
    if state.leader.is_none() {
        Election::Unchanged
    } else {
        Election::NoLeader
    }
}

/// The replica unclean recovery elects now on `state`'s log (SPEC 3.5,
/// KIP-966 balanced), or `None` to wait: only when the ISR and ELR are both
/// empty and some replica reported an unclean restart. The longest reported
/// log ([`LogState::recovery_leader`]) once it is live. If every reported
/// log is empty, none of them is the longest: a replica outside the
/// unclean list may still hold records (it left the ISR earlier, holding
/// what was committed until then), so the log waits until every such
/// replica has reported its log end (a live one does as soon as it sees the
/// log in recovery) and is then in the list, where the longest is known;
/// not for the first of them to be live: another may hold more (review of
/// the controller, finding 1: replicas [A, B, C, D], C left the ISR at 100
/// and D at 200, A and B came back empty, and C led with D's records
/// 100..200 truncated). With nobody outside the list, the log holds
/// nothing anywhere and the first live replica leads, so an empty log is
/// not left leaderless for ever after a whole-cluster power cut.
///
/// With a longest log known, a replica outside the list is waited for
/// until it reports (SPEC G1(c): it may have left the ISR with its disk
/// holding records every later member lost): a live one reports as soon as
/// it sees the log in recovery; one that is away is waited for until
/// `recovery_waited` (only ever set with the unclean switch on), then
/// passed over, so that with the switch on a replica gone for good holds
/// the log leaderless for [`ControllerConfig::unclean_recovery_wait_max`]
/// at most (KIP-966's balanced strategy likewise elects from the replies
/// it has once its timeout passes). A replica in the list whose log end is
/// not known yet ([`UncleanReplica::log_end`](crate::coordinator::UncleanReplica::log_end)
/// is `None`) counts as one that has not reported.
fn recovery_election(
    state: &LogState,
    is_live: &impl Fn(&NodeId) -> bool,
    recovery_waited: bool,
) -> Option<(NodeId, bool)> {
    if !state.in_sync_replicas.is_empty()
        || !state.eligible_leader_replicas.is_empty()
        || state.unclean_replicas.is_empty()
    {
        return None;
    }
    // A replica outside the list left the ISR earlier with its disk and
    // may hold records that every later member lost (SPEC G1(c)): a live
    // one reports its log end as soon as it sees the log in recovery
    // (`LogState::recovery_candidate_update`), and the election waits for
    // that report; one that is away (a process down, a node cut off from
    // the coordinator) is waited for until `recovery_waited` (found by the
    // power-loss fault test, seed 25: a leader cut off from the
    // coordinator left the ISR when its session expired, both followers
    // then lost power, and the longer of their logs was elected at once,
    // without the records only the old leader held). A replica in the list
    // whose end is not known yet (its node could not open it when it
    // reported, typically because its recovery cuts records and may do so
    // only once the report is stored) is waited for the same way (review
    // of dfd9830: every node lost power, C needed the cut and reported
    // empty, B held 0..50; B was elected before C reported 0..120, and C
    // truncated 50..120). A live one that never opens holds the log
    // leaderless, as a live replica that never reports would: the unclean
    // switch, or deleting that replica's directory, decides (README).
    let unknown: Vec<NodeId> = state
        .replicas
        .iter()
        .copied()
        .filter(|node| state.log_end_unknown(*node))
        .collect();
    if unknown.iter().any(|node| is_live(node) || !recovery_waited) {
        return None;
    }
    // Only the unclean switch gets here with some left (`recovery_waited`).
    let passed_over = !unknown.is_empty();
    let leader = match state.recovery_leader() {
        Some(best) => is_live(&best.node).then_some(best.node)?,
        // Every reported end is empty: one outside the list may hold
        // everything, so it is waited for however long; with nobody
        // outside it, every replica that may hold records has reported
        // empty, and the first live one leads.
        None if state.replicas.iter().any(|node| !state.is_unclean(*node)) => return None,
        None => state.replicas.iter().copied().find(|node| is_live(node))?,
    };
    if passed_over {
        tracing::warn!(log = %state.log, %leader, passed_over = ?unknown,
            "unclean recovery: the recovery wait is over and these replicas, whose log ends are not known, are still away; the unclean switch is on, so the longest reported log leads without them, and records only they held are lost if they held any");
    }
    Some((leader, passed_over))
}

/// Whether `state`'s log is in unclean recovery and recovery cannot elect
/// yet with `live` the live nodes: its leader is not live, no ISR or ELR
/// member is, some replica that held its committed records came back
/// uncleanly and reported ([`LogState::unclean_replicas`] not empty), and
/// [`elect_leader`] without the unclean switch elects nobody (an ISR or
/// ELR member is still away, or the longest reported log is). The unclean
/// switch waits [`ControllerConfig::unclean_recovery_wait_max`] while this
/// holds (SPEC 3.5: only if they do not all come back in that time does
/// `unclean_leader_election` decide).
pub(crate) fn awaits_unclean_recovery(state: &LogState, live: &[NodeId]) -> bool {
    !state.unclean_replicas.is_empty()
        && !state.leader.is_some_and(|leader| live.contains(&leader))
        && !matches!(
            elect_leader(state, live, false, false),
            Election::Leader { .. }
        )
}

/// Decides whether to move leadership of `state`'s log to its preferred
/// replica, `replicas[0]`: only if that replica is live, in the ISR and not
/// already leading (Kafka's `PreferredReplicaPartitionLeaderElectionStrategy`).
/// The ISR stays as it is.
pub(crate) fn elect_preferred_leader(state: &LogState, live: &[NodeId]) -> Election {
    let preferred = state.replicas[0];
    if state.leader == Some(preferred) || !live.contains(&preferred) || !state.is_in_sync(preferred)
    {
        return Election::Unchanged;
    }
    Election::Leader {
        leader: preferred,
        in_sync_replicas: state.in_sync_replicas.clone(),
        unclean: false,
    }
}

/// A log's waits in unclean recovery ([`Shared::recovery_waits`]).
#[derive(Debug)]
struct RecoveryWait {
    /// When this controller first saw the log await recovery: the unclean
    /// switch's wait runs from here (SPEC 3.5) and is not restarted
    /// (review of fd4cbfa, finding 5).
    since: Instant,
    /// When it entered recovery proper (ISR and ELR empty): the wait
    /// before replicas still away may be passed over (switch on only).
    in_recovery_since: Option<Instant>,
    /// The last warning that the log still waits (switch off).
    warned_at: Option<Instant>,
}

/// One node's controller: a thread that competes for the controller seat
/// and, while it holds it, keeps every log led by a live ISR member. Stop
/// it with [`Controller::stop`] or by dropping it.
///
/// Stopping resigns the seat if this node may hold it
/// ([`Coordinator::resign_controller`]), so another node takes over at once
/// rather than when this node's session ends; the session itself is the
/// node's business.
#[derive(Debug)]
pub struct Controller {
    shared: Arc<Shared>,
    /// Dropping it tells the thread to stop; nothing is ever sent.
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// Cleared by [`Controller::stop_by`]: the node's session ends, which
    /// frees the seat, so no later stop (or drop) resigns it past the
    /// deadline (the detached thread may still set `may_hold_seat`).
    resign_on_stop: bool,
}

struct Shared {
    node: NodeId,
    coordinator: Arc<dyn Coordinator>,
    config: ControllerConfig,
    /// What the waits of [`Shared::hand_over_waits`] and
    /// [`Shared::recovery_waits`] are measured on. The thread's own sleeps
    /// stay on real time (a thread can only sleep on real time).
    clock: Arc<dyn Clock>,
    /// The controller epoch this node holds the seat with, as of the
    /// thread's last check; 0 while it does not hold it (real epochs start
    /// at 1).
    active_epoch: AtomicU64,
    /// The last seat claim answered with an epoch and no later one was
    /// refused: this node may hold the seat, so stopping must resign it.
    /// Unlike `active_epoch`, a failed coordinator call does not clear it.
    may_hold_seat: AtomicBool,
    /// The controller epoch `hand_over_waits` and `recovery_waits` were
    /// measured in (0 before any): when the seat comes back in another
    /// one, they start again. Unlike `active_epoch`, a failed coordinator
    /// call does not clear it, so a coordinator that flaps does not put
    /// the waits off for ever.
    waits_epoch: AtomicU64,
    elections: AtomicU64,
    unclean_elections: AtomicU64,
    /// Reassignments this controller completed (SPEC 3.10).
    reassignments_completed: AtomicU64,
    /// Logs whose live leader a reassignment removes, with when this
    /// controller first saw every target replica in the ISR, for
    /// [`REASSIGNMENT_HAND_OVER_WAIT_MAX`]. Bounded by the number of logs.
    hand_over_waits: Mutex<HashMap<LogId, Instant>>,
    /// Logs in unclean recovery ([`awaits_unclean_recovery`]) with their
    /// waits for [`ControllerConfig::unclean_recovery_wait_max`]; a log
    /// leaves it when it no longer waits. Bounded by the number of logs.
    recovery_waits: Mutex<HashMap<LogId, RecoveryWait>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("node", &self.node)
            .field("config", &self.config)
            .field("active_epoch", &self.active_epoch)
            .field("elections", &self.elections)
            .field("unclean_elections", &self.unclean_elections)
            .finish_non_exhaustive()
    }
}

impl Controller {
    /// Starts `node`'s controller thread. The node's session is the
    /// caller's business: until `node` is registered with `coordinator`,
    /// the controller just waits. Errs if `config` is invalid or the thread
    /// cannot be spawned.
    pub fn start(
        node: NodeId,
        coordinator: Arc<dyn Coordinator>,
        config: ControllerConfig,
    ) -> Result<Controller> {
        Controller::start_with_clock(node, coordinator, config, Arc::new(SystemClock))
    }

    /// [`Controller::start`], measuring how long a log has waited (for
    /// [`ControllerConfig::unclean_recovery_wait_max`] and a reassignment's
    /// hand-over) on `clock`: a test or a simulation moving a
    /// [`ManualClock`](crate::ManualClock) decides those waits without
    /// sleeping.
    pub fn start_with_clock(
        node: NodeId,
        coordinator: Arc<dyn Coordinator>,
        config: ControllerConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Controller> {
        config.validate()?;
        let shared = Shared::new(node, coordinator, config, clock);
        let (stop, stopped) = crossbeam_channel::bounded::<()>(1);
        let for_thread = Arc::clone(&shared);
        crate::simulation::forbid_in_simulation("spawning the controller thread");
        let thread = std::thread::Builder::new()
            .name(format!("isrlog-controller-{node}"))
            .spawn(move || run(&for_thread, &stopped))
            .map_err(|error| {
                Error::io(
                    PathBuf::from("<thread>"),
                    "spawn the controller thread",
                    error,
                )
            })?;
        Ok(Controller {
            shared,
            stop: Some(stop),
            thread: Some(thread),
            resign_on_stop: true,
        })
    }

    /// The node this controller runs on.
    pub fn node(&self) -> NodeId {
        self.shared.node
    }

    /// Whether this node held the controller seat at the thread's last
    /// check.
    pub fn is_active(&self) -> bool {
        self.controller_epoch().is_some()
    }

    /// The controller epoch this node holds the seat with, as of the
    /// thread's last check, or `None` if it does not hold it.
    pub fn controller_epoch(&self) -> Option<ControllerEpoch> {
        match self.shared.active_epoch.load(Ordering::SeqCst) {
            0 => None,
            epoch => Some(ControllerEpoch(epoch)),
        }
    }

    /// Leader changes this controller has written: failover, unclean and
    /// preferred-leader elections alike.
    pub fn elections(&self) -> u64 {
        self.shared.elections.load(Ordering::SeqCst)
    }

    /// The subset of [`Controller::elections`] that were unclean (a replica
    /// outside the ISR made leader).
    pub fn unclean_elections(&self) -> u64 {
        self.shared.unclean_elections.load(Ordering::SeqCst)
    }

    /// Reassignments this controller completed (SPEC 3.10): writes of
    /// replicas = target once every target replica was in the ISR.
    pub fn reassignments_completed(&self) -> u64 {
        self.shared.reassignments_completed.load(Ordering::SeqCst)
    }

    /// Moves the leadership of every log whose preferred replica
    /// (`replicas[0]`) is live and in sync but not leading back to it, on
    /// the calling thread, and returns how many logs changed. Does nothing
    /// (returns 0) unless this node holds the controller seat. Errs if the
    /// coordinator cannot be reached; logs already moved stay moved.
    pub fn elect_preferred_leaders(&self) -> Result<usize> {
        self.shared.elect_preferred_leaders(&|| false)
    }

    /// Stops the thread, waits for it and, if this node may hold the
    /// controller seat, resigns it so another node can take over now;
    /// idempotent. The thread checks for the stop between coordinator
    /// calls, so this waits for at most one, plus the resignation. A failed
    /// resignation is logged: the seat is then freed when the node's
    /// session ends, as before.
    pub fn stop(&mut self) {
        self.halt_thread();
        if self.shared.may_hold_seat.swap(false, Ordering::SeqCst) && self.resign_on_stop {
            let node = self.shared.node;
            match self.shared.coordinator.resign_controller(node) {
                Ok(()) => tracing::info!(%node, "controller resigned"),
                Err(error) => tracing::warn!(%node, %error,
                    "cannot resign the controller seat; it is freed when the node's session ends"),
            }
        }
    }

    /// Stops the thread for a controlled shutdown that ends the node's
    /// session (which frees the seat): resigns nothing, and waits for the
    /// thread only until `deadline`, then leaves it to end on its own after
    /// the coordinator call it is in (SPEC 3.5: the shutdown is bounded by
    /// its deadline). Idempotent; a later [`Controller::stop`] then does
    /// nothing.
    pub(crate) fn stop_by(&mut self, deadline: Instant) {
        self.resign_on_stop = false;
        drop(self.stop.take());
        self.shared.may_hold_seat.store(false, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            while !thread.is_finished() && Instant::now() < deadline {
                crate::simulation::forbid_in_simulation(
                    "a sleep waiting for the controller thread",
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            if thread.is_finished() {
                if thread.join().is_err() {
                    tracing::warn!(node = %self.shared.node, "the controller thread panicked");
                }
            } else {
                tracing::warn!(node = %self.shared.node,
                    "controlled shutdown: the controller thread is still in a coordinator call at the deadline; not waiting for it");
            }
        }
        self.shared.active_epoch.store(0, Ordering::SeqCst);
    }

    /// Tells the thread to stop, without waiting for it: it stops after
    /// the coordinator call it is in. A node in controlled shutdown calls
    /// this early, so that [`Controller::stop`] later has nothing, or less,
    /// to wait for.
    pub(crate) fn signal_stop(&mut self) {
        drop(self.stop.take());
    }

    /// Stops the thread and waits for it *without* resigning the seat, as a
    /// crashed process would: the seat then stays taken until the node's
    /// session ends. For crash simulations; idempotent.
    #[doc(hidden)]
    pub fn halt_for_crash(&mut self) {
        self.halt_thread();
        // A crashed process resigns nothing, not even when it is dropped
        // later: `stop` (and so `Drop`) must not call the coordinator.
        // (Before, dropping a crash-halted node resigned its seat, which
        // made the simulated crash gentler than a real one and, with the
        // node cut off from its coordinator, blocked the drop for a whole
        // call timeout.)
        self.shared.may_hold_seat.store(false, Ordering::SeqCst);
    }

    /// Stops the thread and waits for it; resigns nothing.
    fn halt_thread(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::warn!(node = %self.shared.node, "the controller thread panicked");
            }
        }
        self.shared.active_epoch.store(0, Ordering::SeqCst);
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Work owed by the thread: which logs to look at on its next pass.
#[derive(Debug, Default)]
struct Pending {
    every_log: bool,
    logs: BTreeSet<LogId>,
}

impl Pending {
    fn everything() -> Pending {
        Pending {
            every_log: true,
            logs: BTreeSet::new(),
        }
    }

    fn note(&mut self, event: CoordinatorEvent) {
        match event {
            CoordinatorEvent::NodesChanged { .. } | CoordinatorEvent::Resync => {
                self.every_log = true;
            }
            CoordinatorEvent::LogChanged(state) => {
                if self.logs.len() < PENDING_LOGS_MAX {
                    self.logs.insert(state.log);
                } else {
                    self.every_log = true;
                }
            }
            // Every wake-up asks for the seat anyway; a seat newly taken
            // brings a pass over every log.
            CoordinatorEvent::ControllerChanged { .. } => {}
        }
    }

    fn clear(&mut self) {
        self.every_log = false;
        self.logs.clear();
    }
}

/// The controller loop's state between passes: its subscription to the
/// coordinator's events, the work they owe, and its two timers (the poll
/// of every log, the preferred-leader check). The thread ([`run`]) and a
/// simulator ([`SteppedController`]) drive the same passes; each hands in
/// its own `now` (the thread real time, since it sleeps on real time; a
/// simulator its manual clock's).
struct Driver {
    subscription: Option<Receiver<CoordinatorEvent>>,
    pending: Pending,
    next_poll: Instant,
    next_preferred: Option<Instant>,
}

impl Driver {
    /// A driver whose first pass looks at every log.
    fn new(shared: &Shared, now: Instant) -> Driver {
        Driver {
            subscription: None,
            pending: Pending::everything(),
            next_poll: now,
            next_preferred: shared
                .config
                .preferred_leader_check_interval
                .map(|interval| now + interval),
        }
    }

    /// One pass at `now`: subscribes if it has no subscription, marks what
    /// its timers make due, and does the owed work ([`Shared::step`]).
    /// `Err(Shutdown)` means a stop was noticed mid-pass; other errors are
    /// logged here and retried sooner.
    fn pass(&mut self, shared: &Shared, now: Instant, is_stopped: &dyn Fn() -> bool) -> Result<()> {
        let poll_interval = shared.config.poll_interval;
        if self.subscription.is_none() {
            match shared.coordinator.subscribe_all(shared.node) {
                Ok(events) => {
                    self.subscription = Some(events);
                    // Whatever happened before we listened is unknown.
                    self.pending.every_log = true;
                }
                Err(error) => {
                    tracing::debug!(node = %shared.node, %error, "controller cannot subscribe yet");
                }
            }
        }
        if now >= self.next_poll {
            self.pending.every_log = true;
            self.next_poll = now + poll_interval;
        }
        let preferred_due = self.next_preferred.is_some_and(|at| now >= at);
        if preferred_due {
            self.next_preferred = shared
                .config
                .preferred_leader_check_interval
                .map(|interval| now + interval);
        }
        match shared.step(&mut self.pending, preferred_due, is_stopped) {
            Ok(()) => Ok(()),
            Err(Error::Shutdown) => Err(Error::Shutdown),
            Err(error) => {
                tracing::debug!(node = %shared.node, %error, "controller pass failed, will retry");
                self.next_poll = self.next_poll.min(now + RETRY_INTERVAL.min(poll_interval));
                Ok(())
            }
        }
    }

    /// When the next pass is due if no event comes first.
    fn next_wake(&self) -> Instant {
        self.next_preferred
            .map_or(self.next_poll, |at| at.min(self.next_poll))
    }

    /// Notes one event taken off the subscription, or its end.
    fn note(&mut self, shared: &Shared, event: std::result::Result<CoordinatorEvent, RecvError>) {
        match event {
            Ok(event) => self.pending.note(event),
            Err(_) => {
                tracing::debug!(node = %shared.node, "controller's event stream closed, resubscribing");
                self.subscription = None;
            }
        }
    }

    /// Notes the events that arrived, up to [`EVENTS_PER_WAKE_MAX`];
    /// returns how many.
    fn note_arrived(&mut self, shared: &Shared) -> usize {
        let mut noted = 0;
        while noted < EVENTS_PER_WAKE_MAX {
            let Some(events) = &self.subscription else {
                break;
            };
            let event = match events.try_recv() {
                Ok(event) => Ok(event),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => Err(RecvError),
            };
            self.note(shared, event);
            noted += 1;
        }
        noted
    }
}

/// The thread: act on owed work, then wait for an event, the next timer or
/// the stop. Waits use real time because a thread can only sleep on real
/// time; the coordinator judges sessions by its own clock.
fn run(shared: &Shared, stopped: &Receiver<()>) {
    let mut driver = Driver::new(shared, Instant::now());
    loop {
        let is_stopped = || matches!(stopped.try_recv(), Err(TryRecvError::Disconnected));
        if let Err(Error::Shutdown) = driver.pass(shared, Instant::now(), &is_stopped) {
            return;
        }
        let timeout = driver.next_wake().saturating_duration_since(Instant::now());
        let never = crossbeam_channel::never::<CoordinatorEvent>();
        let event = {
            let events = driver.subscription.as_ref().unwrap_or(&never);
            crate::simulation::forbid_in_simulation("the controller's timed select");
            crossbeam_channel::select! {
                recv(stopped) -> _ => return,
                recv(events) -> event => Some(event),
                default(timeout) => None,
            }
        };
        if let Some(event) = event {
            driver.note(shared, event);
        }
        driver.note_arrived(shared);
    }
}

/// A controller without a thread, for the simulator (issue 28): each
/// [`step`](Self::step) is one pass of the thread's loop, on the caller's
/// thread and at the caller's `now`. Dropping it resigns nothing, as a
/// crashed process would not; the seat is freed when the node's session
/// ends. Its waits (unclean recovery, hand-over) are measured on the clock
/// it is given, the simulator's; a node's controller thread measures them
/// on the system clock (`Controller::start`), whatever the node's clock.
#[cfg(any(test, feature = "testing"))]
#[derive(Debug)]
pub(crate) struct SteppedController {
    shared: Arc<Shared>,
    driver: Driver,
}

#[cfg(any(test, feature = "testing"))]
impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("pending", &self.pending)
            .field("next_poll", &self.next_poll)
            .field("next_preferred", &self.next_preferred)
            .finish_non_exhaustive()
    }
}

#[cfg(any(test, feature = "testing"))]
#[cfg_attr(not(test), allow(dead_code))]
impl SteppedController {
    /// `node`'s controller, measuring its waits on `clock`, with no thread.
    /// Errs if `config` is invalid.
    pub(crate) fn open(
        node: NodeId,
        coordinator: Arc<dyn Coordinator>,
        config: ControllerConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<SteppedController> {
        config.validate()?;
        let now = clock.now();
        let shared = Shared::new(node, coordinator, config, clock);
        let driver = Driver::new(&shared, now);
        Ok(SteppedController { shared, driver })
    }

    /// Notes the events that arrived and makes one pass at `now` (the
    /// clock's time); returns how many events it noted. It waits for
    /// nothing, but its pass calls the coordinator.
    pub(crate) fn step(&mut self, now: Instant) -> usize {
        let noted = self.driver.note_arrived(&self.shared);
        // Nothing stops a stepped controller mid-pass: it is dropped
        // between steps.
        let _ = self.driver.pass(&self.shared, now, &|| false);
        noted
    }

    /// When the next step is due if no event comes first.
    pub(crate) fn next_wake(&self) -> Instant {
        self.driver.next_wake()
    }

    /// Whether the controller thread would wake at `now`: an event waits,
    /// or [`next_wake`](Self::next_wake) has come. (An ended subscription
    /// also wakes the thread; it is not seen here: the memory coordinator
    /// a simulator uses never ends one.)
    pub(crate) fn is_due(&self, now: Instant) -> bool {
        now >= self.driver.next_wake()
            || self
                .driver
                .subscription
                .as_ref()
                .is_some_and(|events| !events.is_empty())
    }

    /// The controller epoch held, as of the last step.
    pub(crate) fn controller_epoch(&self) -> Option<ControllerEpoch> {
        match self.shared.active_epoch.load(Ordering::SeqCst) {
            0 => None,
            epoch => Some(ControllerEpoch(epoch)),
        }
    }

    /// Elections written so far (clean and unclean).
    pub(crate) fn elections(&self) -> (u64, u64) {
        (
            self.shared.elections.load(Ordering::SeqCst),
            self.shared.unclean_elections.load(Ordering::SeqCst),
        )
    }
}

impl Shared {
    /// A controller's state before its first pass: no seat, no waits.
    fn new(
        node: NodeId,
        coordinator: Arc<dyn Coordinator>,
        config: ControllerConfig,
        clock: Arc<dyn Clock>,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            node,
            coordinator,
            config,
            clock,
            active_epoch: AtomicU64::new(0),
            may_hold_seat: AtomicBool::new(false),
            waits_epoch: AtomicU64::new(0),
            elections: AtomicU64::new(0),
            unclean_elections: AtomicU64::new(0),
            reassignments_completed: AtomicU64::new(0),
            hand_over_waits: Mutex::new(HashMap::new()),
            recovery_waits: Mutex::new(HashMap::new()),
        })
    }

    /// Claims (or confirms) the seat and, if held, does the owed work.
    /// `Err(Shutdown)` means a stop was noticed mid-pass.
    fn step(
        &self,
        pending: &mut Pending,
        preferred_due: bool,
        is_stopped: &dyn Fn() -> bool,
    ) -> Result<()> {
        let epoch = match self.coordinator.try_become_controller(self.node) {
            Ok(Some(epoch)) => epoch,
            Ok(None) => {
                self.may_hold_seat.store(false, Ordering::SeqCst);
                self.set_inactive();
                pending.clear();
                return Ok(());
            }
            Err(error) => {
                // Unreachable coordinator or no session: we may have lost
                // the seat. Keep the owed work in case we still hold it.
                self.set_inactive();
                return Err(error);
            }
        };
        self.may_hold_seat.store(true, Ordering::SeqCst);
        self.start_waits_in(epoch);
        let previous = self.active_epoch.swap(epoch.0, Ordering::SeqCst);
        if previous != epoch.0 {
            tracing::info!(node = %self.node, %epoch, "acting as controller");
            pending.every_log = true;
        }
        let decide = |state: &LogState, live: &[NodeId]| {
            let (unclean, recovery_waited) = self.recovery_decision(state, live);
            match elect_leader(state, live, unclean, recovery_waited) {
                // Elections and dead followers first: a reassignment
                // completes on a log whose leader and ISR are settled.
                Election::Unchanged => {
                    let waited = self.hand_over_waited(state, live);
                    completion_update(state, live, self.config.min_insync_replicas, waited)
                        .map_or(Election::Unchanged, Election::CompleteReassignment)
                }
                election => election,
            }
        };
        if pending.every_log {
            self.settle_logs(epoch, None, is_stopped, decide)?;
        } else if !pending.logs.is_empty() {
            let logs: Vec<LogId> = pending.logs.iter().copied().collect();
            self.settle_logs(epoch, Some(&logs), is_stopped, decide)?;
        }
        pending.clear();
        if preferred_due {
            self.settle_logs(epoch, None, is_stopped, elect_preferred_leader)?;
        }
        Ok(())
    }

    /// For `state`'s log now: whether the unclean switch may decide, and
    /// whether unclean recovery has waited long enough to pass over the
    /// replicas still away ([`elect_leader`]'s `unclean` and
    /// `recovery_waited`). A log in unclean recovery that cannot elect yet
    /// ([`awaits_unclean_recovery`]) waits
    /// [`ControllerConfig::unclean_recovery_wait_max`] from when this
    /// controller first saw it so; the switch decides only after that (and
    /// at once for a log not in recovery). The periodic pass over every log
    /// ([`ControllerConfig::poll_interval`]) notices the end of a wait.
    fn recovery_decision(&self, state: &LogState, live: &[NodeId]) -> (bool, bool) {
        let switch = self.config.unclean_leader_election;
        let mut waits = self.recovery_waits.lock();
        if !awaits_unclean_recovery(state, live) {
            waits.remove(&state.log);
            return (switch, switch);
        }
        // The wait that passes over replicas still away starts when the
        // log is in recovery proper (ISR and ELR empty), not while an ISR
        // member that is away keeps it out: a wait begun then would be over
        // by the time the last member reports, and a replica outside the
        // lists that is away would get none (review of the controller,
        // finding 4).
        // The switch's wait runs from when the log first awaited recovery
        // (SPEC 3.5), and is not restarted (review of fd4cbfa, finding 5).
        let in_recovery = state.in_unclean_recovery();
        let now = self.clock.now();
        let wait = waits.entry(state.log).or_insert_with(|| {
            tracing::info!(log = %state.log, unclean_replicas = ?state.unclean_replicas,
                wait_max = ?self.config.unclean_recovery_wait_max, unclean_leader_election = switch,
                "unclean recovery: waiting for the replicas that held the committed records");
            RecoveryWait {
                since: now,
                in_recovery_since: None,
                warned_at: None,
            }
        });
        if in_recovery && wait.in_recovery_since.is_none() {
            wait.in_recovery_since = Some(now);
        }
        let wait_max = self.config.unclean_recovery_wait_max;
        let waited_since = |since: Instant| now.saturating_duration_since(since);
        let switch_waited = waited_since(wait.since) >= wait_max;
        // Outside recovery proper no election passes anyone over (an ISR
        // or ELR member is still to come): the switch's wait stands in.
        let recovery_waited = wait
            .in_recovery_since
            .map_or(switch_waited, |since| waited_since(since) >= wait_max);
        // With the switch off the wait has no end: say so, naming who the
        // log waits for, once per `wait_max`, so that an operator learns of
        // a log held by a replica that may never come back.
        if !switch && switch_waited && wait.warned_at.is_none_or(|at| waited_since(at) >= wait_max)
        {
            wait.warned_at = Some(now);
            let waiting_for: Vec<NodeId> = state
                .replicas
                .iter()
                .copied()
                .filter(|node| {
                    state.is_in_sync(*node)
                        || state.is_eligible(*node)
                        || state.log_end_unknown(*node)
                })
                .collect();
            tracing::warn!(log = %state.log, ?waiting_for, waited = ?waited_since(wait.since),
                "unclean recovery: the log stays leaderless until these replicas come back and report (they may hold committed records no other replica has); unclean_leader_election is off");
        }
        // Passing over a replica that may hold records may lose them: only
        // the unclean switch may (SPEC 3.5: "only if they do not all come
        // back in that time does unclean_leader_election decide"; G1(c)
        // counts any replica that was in the ISR when a record was
        // committed and comes back with its disk, however late). With the
        // switch off the log waits for them as long as it takes, as a
        // Kafka partition without unclean election waits for its ISR.
        (switch && switch_waited, switch && recovery_waited)
    }

    /// For `state`'s log now: whether the controller may complete its
    /// reassignment without waiting for its leader's own hand-over
    /// ([`completion_update`]'s `hand_over_waited`): yes unless its leader
    /// is live, being removed, every target replica is in the ISR, and
    /// [`REASSIGNMENT_HAND_OVER_WAIT_MAX`] has not passed since this
    /// controller first saw it so.
    fn hand_over_waited(&self, state: &LogState, live: &[NodeId]) -> bool {
        let mut waits = self.hand_over_waits.lock();
        let waiting = state.leader.is_some_and(|leader| {
            state.removing_replicas.contains(&leader) && live.contains(&leader)
        }) && state
            .target_replicas()
            .iter()
            .all(|node| state.is_in_sync(*node));
        if !waiting {
            waits.remove(&state.log);
            return true;
        }
        let now = self.clock.now();
        let since = *waits.entry(state.log).or_insert(now);
        now.saturating_duration_since(since) >= reassignment_hand_over_wait_max(&self.config)
    }

    /// Holding the seat in `epoch`: waits measured in another epoch start
    /// again, as [`ControllerConfig::unclean_recovery_wait_max`] says. Other
    /// controllers held the seat in between, and a log may have left
    /// unclean recovery and entered it again meanwhile: kept, a wait begun
    /// before let this controller pass over replicas still away, or elect
    /// uncleanly, at its first pass with the seat back (helper-153's
    /// review).
    fn start_waits_in(&self, epoch: ControllerEpoch) {
        let measured_in = self.waits_epoch.swap(epoch.0, Ordering::SeqCst);
        if measured_in != epoch.0 {
            self.recovery_waits.lock().clear();
            self.hand_over_waits.lock().clear();
        }
    }

    fn set_inactive(&self) {
        let previous = self.active_epoch.swap(0, Ordering::SeqCst);
        if previous != 0 {
            tracing::info!(node = %self.node, epoch = previous, "no longer acting as controller");
        }
    }

    fn elect_preferred_leaders(&self, is_stopped: &dyn Fn() -> bool) -> Result<usize> {
        let epoch = match self.coordinator.controller()? {
            Some((holder, epoch)) if holder == self.node => epoch,
            _ => return Ok(0),
        };
        self.settle_logs(epoch, None, is_stopped, elect_preferred_leader)
    }

    /// Whether this node holds the seat with `epoch`, per the coordinator.
    fn holds_seat(&self, epoch: ControllerEpoch) -> Result<bool> {
        Ok(self.coordinator.controller()? == Some((self.node, epoch)))
    }

    /// Applies `decide` to each of `logs` (every log if `None`), writing as
    /// controller of `epoch`, and returns how many logs changed. A failure
    /// on one log does not stop the others, unless it came with the loss of
    /// the seat (or of the coordinator): then the rest of the pass would be
    /// refused too. The first failure is returned at the end.
    fn settle_logs(
        &self,
        epoch: ControllerEpoch,
        logs: Option<&[LogId]>,
        is_stopped: &dyn Fn() -> bool,
        decide: impl Fn(&LogState, &[NodeId]) -> Election,
    ) -> Result<usize> {
        // Only a first filter: a log that needs a write is re-decided
        // against a fresh read of the live nodes just before the write.
        let live = self.coordinator.live_nodes()?;
        let states = match logs {
            None => self.coordinator.logs()?,
            Some(logs) => {
                let mut states = Vec::with_capacity(logs.len());
                for log in logs {
                    if is_stopped() {
                        return Err(Error::Shutdown);
                    }
                    if let Some(state) = self.coordinator.log_state(*log)? {
                        states.push(state);
                    }
                }
                states
            }
        };
        let mut changed = 0;
        let mut first_error = None;
        for state in states {
            if is_stopped() {
                return Err(Error::Shutdown);
            }
            let log = state.log;
            match self.settle(epoch, state, &live, &decide, is_stopped) {
                Ok(true) => changed += 1,
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(node = %self.node, %log, %error, "controller could not update log");
                    let seat_held = matches!(self.holds_seat(epoch), Ok(true));
                    first_error.get_or_insert(error);
                    if !seat_held {
                        break;
                    }
                }
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(changed),
        }
    }

    /// Writes `decide`'s decision for one log with compare-and-set as
    /// controller of `epoch`, re-deciding from the current state and a fresh
    /// read of the live nodes before every attempt. `pass_live` is the
    /// pass's earlier read, used only to skip logs that need nothing without
    /// a coordinator call. Returns whether a change was stored.
    fn settle(
        &self,
        epoch: ControllerEpoch,
        mut state: LogState,
        pass_live: &[NodeId],
        decide: &impl Fn(&LogState, &[NodeId]) -> Election,
        is_stopped: &dyn Fn() -> bool,
    ) -> Result<bool> {
        if decide(&state, pass_live) == Election::Unchanged {
            // A node that died since `pass_live` was read is announced by
            // an event, which brings another pass.
            return Ok(false);
        }
        for _ in 0..CAS_ATTEMPTS_MAX {
            if is_stopped() {
                return Err(Error::Shutdown);
            }
            let live = self.coordinator.live_nodes()?;
            let election = decide(&state, &live);
            let Some(update) = election.update(&state, self.config.min_insync_replicas) else {
                return Ok(false);
            };
            let written = self.coordinator.compare_and_set_as_controller(
                self.node,
                epoch,
                state.log,
                state.leader_epoch,
                state.version,
                update.clone(),
            );
            match written {
                Ok(CasOutcome::Applied(stored)) => {
                    self.record(&state, &stored, &election);
                    return Ok(true);
                }
                Ok(CasOutcome::Stale(current)) => state = current,
                // Maybe applied (SPEC 3.4): never taken as "not written".
                // Read what is stored; if it is this decision, it was;
                // otherwise decide again from what is there.
                Err(error) if error.is_outcome_unknown() => {
                    tracing::warn!(node = %self.node, log = %state.log, %error,
                        "controller write outcome unknown; re-reading the log");
                    let Some(stored) = self.coordinator.log_state(state.log)? else {
                        return Ok(false);
                    };
                    if stored.is_result_of(&state, &update) {
                        self.record(&state, &stored, &election);
                        return Ok(true);
                    }
                    state = stored;
                }
                Err(error) => return Err(error),
            }
        }
        tracing::warn!(node = %self.node, log = %state.log, attempts = CAS_ATTEMPTS_MAX,
            "controller keeps losing compare-and-set races on this log; leaving it to the next pass");
        Ok(false)
    }

    fn record(&self, before: &LogState, after: &LogState, election: &Election) {
        let log = after.log;
        match election {
            Election::Leader { unclean: true, .. } => {
                self.elections.fetch_add(1, Ordering::SeqCst);
                self.unclean_elections.fetch_add(1, Ordering::SeqCst);
                tracing::warn!(%log, leader = ?after.leader, epoch = %after.leader_epoch,
                    old_in_sync_replicas = ?before.in_sync_replicas,
                    "unclean leader election: no in-sync replica is live, so a replica outside the ISR \
                     leads and committed records it lacks may be lost");
            }
            Election::Leader { .. }
                if before.in_sync_replicas.is_empty()
                    && before.eligible_leader_replicas.is_empty() =>
            {
                self.elections.fetch_add(1, Ordering::SeqCst);
                tracing::warn!(%log, leader = ?after.leader, epoch = %after.leader_epoch,
                    unclean_replicas = ?before.unclean_replicas,
                    "unclean recovery: every replica that held the committed records restarted \
                     after an unclean shutdown; the longest log of the newest line leads");
            }
            Election::Leader { .. } => {
                self.elections.fetch_add(1, Ordering::SeqCst);
                tracing::info!(%log, old_leader = ?before.leader, leader = ?after.leader,
                    epoch = %after.leader_epoch, isr = ?after.in_sync_replicas,
                    elr = ?after.eligible_leader_replicas, "leader elected");
            }
            Election::NoLeader => {
                tracing::warn!(%log, old_leader = ?before.leader, epoch = %after.leader_epoch,
                    isr = ?after.in_sync_replicas,
                    elr = ?after.eligible_leader_replicas,
                    "no in-sync or eligible replica is live: the log has no leader until one returns");
            }
            Election::ShrinkIsr { .. } => {
                tracing::info!(%log, old_isr = ?before.in_sync_replicas,
                    isr = ?after.in_sync_replicas, elr = ?after.eligible_leader_replicas,
                    "dead followers removed from the ISR");
            }
            Election::CompleteReassignment(_) => {
                self.reassignments_completed.fetch_add(1, Ordering::SeqCst);
                tracing::info!(%log, old_replicas = ?before.replicas, replicas = ?after.replicas,
                    old_leader = ?before.leader, leader = ?after.leader, epoch = %after.leader_epoch,
                    isr = ?after.in_sync_replicas, "reassignment completed");
            }
            Election::Unchanged => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LeaderEpoch;

    fn nodes(ids: &[u32]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    /// A log on replicas 1, 2, 3 (in that assignment order) in epoch 5.
    fn state(leader: Option<u32>, isr: &[u32]) -> LogState {
        LogState {
            log: LogId(7),
            replicas: nodes(&[1, 2, 3]),
            leader: leader.map(NodeId),
            leader_epoch: LeaderEpoch(5),
            in_sync_replicas: nodes(isr),
            eligible_leader_replicas: Vec::new(),
            version: 11,
            unclean_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    fn leader(id: u32, isr: &[u32], unclean: bool) -> Election {
        Election::Leader {
            leader: NodeId(id),
            in_sync_replicas: nodes(isr),
            unclean,
        }
    }

    fn shrink(isr: &[u32]) -> Election {
        Election::ShrinkIsr {
            in_sync_replicas: nodes(isr),
        }
    }

    #[test]
    fn elect_leader_table() {
        struct Case {
            name: &'static str,
            state: LogState,
            live: &'static [u32],
            unclean: bool,
            expect: Election,
        }
        let cases = [
            Case {
                name: "everyone live",
                state: state(Some(1), &[1, 2, 3]),
                live: &[1, 2, 3],
                unclean: false,
                expect: Election::Unchanged,
            },
            Case {
                name: "dead leader: next live ISR member in assignment order",
                state: state(Some(1), &[1, 2, 3]),
                live: &[2, 3],
                unclean: false,
                expect: leader(2, &[2, 3], false),
            },
            Case {
                name: "assignment order, not ISR order, picks the leader",
                state: state(Some(1), &[1, 3, 2]),
                live: &[2, 3],
                unclean: false,
                expect: leader(2, &[3, 2], false),
            },
            Case {
                name: "a live replica outside the ISR is skipped",
                state: state(Some(1), &[1, 3]),
                live: &[2, 3],
                unclean: false,
                expect: leader(3, &[3], false),
            },
            Case {
                name: "dead leader and dead follower both leave the ISR",
                state: state(Some(2), &[1, 2, 3]),
                live: &[3],
                unclean: false,
                expect: leader(3, &[3], false),
            },
            Case {
                name: "live leader, dead follower leaves the ISR, epoch kept",
                state: state(Some(1), &[1, 2, 3]),
                live: &[1, 3],
                unclean: false,
                expect: shrink(&[1, 3]),
            },
            Case {
                name: "live leader, dead node outside the ISR: nothing to do",
                state: state(Some(1), &[1, 2]),
                live: &[1, 2],
                unclean: false,
                expect: Election::Unchanged,
            },
            Case {
                name: "no live ISR member, unclean off: no leader",
                state: state(Some(1), &[1, 2]),
                live: &[3],
                unclean: false,
                expect: Election::NoLeader,
            },
            Case {
                name: "already leaderless, still no live ISR member: nothing to do",
                state: state(None, &[1, 2]),
                live: &[3],
                unclean: false,
                expect: Election::Unchanged,
            },
            Case {
                name: "leaderless, an ISR member returns: it leads",
                state: state(None, &[1, 2]),
                live: &[2, 3],
                unclean: false,
                expect: leader(2, &[2], false),
            },
            Case {
                name: "no live ISR member, unclean on: first live replica, ISR = {it}",
                state: state(Some(1), &[1]),
                live: &[2, 3],
                unclean: true,
                expect: leader(2, &[2], true),
            },
            Case {
                name: "leaderless, unclean on: first live replica",
                state: state(None, &[1, 2]),
                live: &[3],
                unclean: true,
                expect: leader(3, &[3], true),
            },
            Case {
                name: "unclean on, but a live ISR member exists: clean election",
                state: state(Some(1), &[1, 3]),
                live: &[2, 3],
                unclean: true,
                expect: leader(3, &[3], false),
            },
            Case {
                name: "nobody live, unclean on: no leader",
                state: state(Some(1), &[1, 2, 3]),
                live: &[],
                unclean: true,
                expect: Election::NoLeader,
            },
            Case {
                name: "nobody live, already leaderless: nothing to do",
                state: state(None, &[1, 2, 3]),
                live: &[],
                unclean: true,
                expect: Election::Unchanged,
            },
            Case {
                name: "live leader that is not the preferred one stays",
                state: state(Some(2), &[1, 2, 3]),
                live: &[1, 2, 3],
                unclean: false,
                expect: Election::Unchanged,
            },
        ];
        for case in cases {
            let live = nodes(case.live);
            let got = elect_leader(&case.state, &live, case.unclean, case.unclean);
            assert_eq!(got, case.expect, "{}", case.name);
            if let Some(update) = got.update(&case.state, 2) {
                case.state
                    .validate_update(&update)
                    .unwrap_or_else(|error| panic!("{}: invalid update: {error}", case.name));
            }
        }
    }

    #[test]
    fn elect_preferred_leader_table() {
        let cases: [(&str, LogState, &[u32], Election); 6] = [
            (
                "preferred live and in sync: it leads, ISR kept",
                state(Some(2), &[2, 1, 3]),
                &[1, 2, 3],
                leader(1, &[2, 1, 3], false),
            ),
            (
                "preferred already leads",
                state(Some(1), &[1, 2]),
                &[1, 2, 3],
                Election::Unchanged,
            ),
            (
                "preferred dead",
                state(Some(2), &[1, 2]),
                &[2, 3],
                Election::Unchanged,
            ),
            (
                "preferred live but not in sync",
                state(Some(2), &[2, 3]),
                &[1, 2, 3],
                Election::Unchanged,
            ),
            (
                "leaderless, preferred live and in sync",
                state(None, &[1]),
                &[1],
                leader(1, &[1], false),
            ),
            (
                "leaderless, preferred live but not in sync",
                state(None, &[2]),
                &[1],
                Election::Unchanged,
            ),
        ];
        for (name, state, live, expect) in cases {
            let got = elect_preferred_leader(&state, &nodes(live));
            assert_eq!(got, expect, "{name}");
            if let Some(update) = got.update(&state, 2) {
                state
                    .validate_update(&update)
                    .unwrap_or_else(|error| panic!("{name}: invalid update: {error}"));
            }
        }
    }

    #[test]
    fn updates_bump_the_epoch_only_when_the_leader_changes() {
        let before = state(Some(1), &[1, 2, 3]);
        let elected = leader(2, &[2, 3], false).update(&before, 2).unwrap();
        assert_eq!(
            elected,
            LogUpdate {
                leader: Some(NodeId(2)),
                leader_epoch: LeaderEpoch(6),
                in_sync_replicas: nodes(&[2, 3]),
                eligible_leader_replicas: Vec::new(),
                unclean_report: None,
                assignment: None,
            }
        );
        let leaderless = Election::NoLeader.update(&before, 2).unwrap();
        assert_eq!(
            leaderless,
            LogUpdate {
                leader: None,
                leader_epoch: LeaderEpoch(6),
                in_sync_replicas: nodes(&[1, 2, 3]),
                eligible_leader_replicas: Vec::new(),
                unclean_report: None,
                assignment: None,
            }
        );
        let shrunk = shrink(&[1, 3]).update(&before, 2).unwrap();
        assert_eq!(shrunk.leader_epoch, LeaderEpoch(5));
        assert_eq!(shrunk.leader, Some(NodeId(1)));
        assert_eq!(Election::Unchanged.update(&before, 2), None);
    }

    /// A log on replicas 1, 2, 3 in epoch 5 with an ELR.
    fn state_with_elr(leader: Option<u32>, isr: &[u32], elr: &[u32]) -> LogState {
        let state = LogState {
            eligible_leader_replicas: nodes(elr),
            ..state(leader, isr)
        };
        state.check_invariants();
        state
    }

    /// KIP-966 elections: ISR first, then ELR, then the unclean switch; and
    /// the ELR each decision writes, for `min_insync_replicas` 2 (and 3
    /// where it matters).
    #[test]
    fn elect_leader_with_eligible_leader_replicas_table() {
        struct Case {
            name: &'static str,
            state: LogState,
            live: &'static [u32],
            unclean: bool,
            min_insync_replicas: usize,
            expect: Election,
            /// The ISR and ELR the update writes, if any.
            written: Option<(&'static [u32], &'static [u32])>,
        }
        let cases = [
            Case {
                name: "dead follower leaves an ISR of 2: it joins the ELR",
                state: state_with_elr(Some(1), &[1, 2], &[]),
                live: &[1, 3],
                unclean: false,
                min_insync_replicas: 2,
                expect: shrink(&[1]),
                written: Some((&[1], &[2])),
            },
            Case {
                name: "dead follower leaves, ISR still at the minimum: no ELR",
                state: state_with_elr(Some(1), &[1, 2, 3], &[]),
                live: &[1, 3],
                unclean: false,
                min_insync_replicas: 2,
                expect: shrink(&[1, 3]),
                written: Some((&[1, 3], &[])),
            },
            Case {
                name: "min ISR 3: one removal below it puts the follower in the ELR",
                state: state_with_elr(Some(1), &[1, 2, 3], &[]),
                live: &[1, 3],
                unclean: false,
                min_insync_replicas: 3,
                expect: shrink(&[1, 3]),
                written: Some((&[1, 3], &[2])),
            },
            Case {
                name: "the last ISR member dies: leaderless, ISR and ELR kept",
                state: state_with_elr(Some(1), &[1], &[2]),
                live: &[3],
                unclean: false,
                min_insync_replicas: 2,
                expect: Election::NoLeader,
                written: Some((&[1], &[2])),
            },
            Case {
                name: "no live ISR member: the live ELR member leads alone, the dead ISR member becomes eligible",
                state: state_with_elr(None, &[1], &[2, 3]),
                live: &[3],
                unclean: false,
                min_insync_replicas: 2,
                expect: leader(3, &[3], false),
                written: Some((&[3], &[1, 2])),
            },
            Case {
                name: "dead leader: a live ISR member wins over an ELR member earlier in assignment order",
                state: state_with_elr(Some(2), &[2, 3], &[1]),
                live: &[1, 3],
                unclean: false,
                min_insync_replicas: 3,
                expect: leader(3, &[3], false),
                written: Some((&[3], &[1, 2])),
            },
            Case {
                name: "ELR members in assignment order",
                state: state_with_elr(None, &[1], &[3, 2]),
                live: &[2, 3],
                unclean: false,
                min_insync_replicas: 2,
                expect: leader(2, &[2], false),
                written: Some((&[2], &[1, 3])),
            },
            Case {
                name: "unclean on but an ELR member is live: clean election from the ELR",
                state: state_with_elr(None, &[1], &[2]),
                live: &[2, 3],
                unclean: true,
                min_insync_replicas: 2,
                expect: leader(2, &[2], false),
                written: Some((&[2], &[1])),
            },
            Case {
                name: "no ISR or ELR member live, unclean off: nothing to do",
                state: state_with_elr(None, &[1], &[2]),
                live: &[3],
                unclean: false,
                min_insync_replicas: 2,
                expect: Election::Unchanged,
                written: None,
            },
            Case {
                name: "no ISR or ELR member live, unclean on: first live replica, ELR emptied",
                state: state_with_elr(None, &[1], &[2]),
                live: &[3],
                unclean: true,
                min_insync_replicas: 2,
                expect: leader(3, &[3], true),
                written: Some((&[3], &[])),
            },
        ];
        for case in cases {
            let live = nodes(case.live);
            let got = elect_leader(&case.state, &live, case.unclean, case.unclean);
            assert_eq!(got, case.expect, "{}", case.name);
            let update = got.update(&case.state, case.min_insync_replicas);
            let written = update.as_ref().map(|update| {
                (
                    update.in_sync_replicas.clone(),
                    update.eligible_leader_replicas.clone(),
                )
            });
            let expected = case.written.map(|(isr, elr)| (nodes(isr), nodes(elr)));
            assert_eq!(written, expected, "{}: written ISR and ELR", case.name);
            if let Some(update) = update {
                case.state
                    .validate_update(&update)
                    .unwrap_or_else(|error| panic!("{}: invalid update: {error}", case.name));
                case.state.with_update(update).check_invariants();
            }
        }
    }

    /// Unclean recovery (ISR and ELR empty, every former holder restarted
    /// uncleanly): the longest reported log (of the newest line) leads,
    /// once it is live; an
    /// empty log is never the longest; an ELR member still away is waited
    /// for; and once the recovery wait is over (the caller passes `unclean`
    /// on), the unclean switch prefers what the reports say. The restart
    /// orders of G1(c) on three replicas that all lost power: whichever
    /// comes back first, the one that kept the records leads.
    #[test]
    fn elect_leader_unclean_recovery_table() {
        use crate::coordinator::{LogEnd, UncleanReplica};
        use crate::types::Offset;
        // (name, ELR, unclean list as (node, log end offset; 0 is an empty
        //  log), live, unclean switch, expected, whether the log awaits
        //  unclean recovery)
        type Case = (
            &'static str,
            &'static [u32],
            &'static [(u32, u64)],
            &'static [u32],
            bool,
            Election,
            bool,
        );
        // A log end not known yet (`UncleanReplica::log_end` is `None`).
        const UNKNOWN: u64 = u64::MAX;
        let cases: &[Case] = &[
            (
                "G1(c), a live replica's end is not known yet (it needed the cut): wait for it",
                &[],
                &[(1, 5), (2, UNKNOWN), (3, 3)],
                &[1, 2, 3],
                false,
                Election::Unchanged,
                true,
            ),
            (
                "G1(c), a live replica's end still not known after the wait: only the switch passes it over",
                &[],
                &[(1, 5), (2, UNKNOWN), (3, 3)],
                &[1, 2, 3],
                true,
                leader(1, &[1], true),
                true,
            ),
            (
                "an end not known of a replica still away after the wait: passed over, uncleanly",
                &[],
                &[(1, 5), (2, UNKNOWN), (3, 3)],
                &[1, 3],
                true,
                leader(1, &[1], true),
                true,
            ),
            (
                "G1(c), every known end is empty and one is not known: wait for it",
                &[],
                &[(1, 0), (2, UNKNOWN), (3, 0)],
                &[1, 2, 3],
                false,
                Election::Unchanged,
                true,
            ),
            (
                "every known end is empty, one not known and away after the wait: a known empty one leads, uncleanly",
                &[],
                &[(1, 0), (2, UNKNOWN), (3, 0)],
                &[1, 3],
                true,
                leader(1, &[1], true),
                true,
            ),
            (
                "every known end is empty, one not known and live after the wait: only the switch decides, for it",
                &[],
                &[(1, 0), (2, UNKNOWN), (3, 0)],
                &[1, 2, 3],
                true,
                leader(2, &[2], true),
                true,
            ),
            (
                "the longest log is live: it leads alone",
                &[],
                &[(1, 3), (2, 9), (3, 5)],
                &[1, 2, 3],
                false,
                leader(2, &[2], false),
                false,
            ),
            (
                "G1(c), a live replica outside the list has not reported its log end: wait for it",
                &[],
                &[(1, 3), (2, 9)],
                &[1, 2, 3],
                false,
                Election::Unchanged,
                true,
            ),
            (
                "G1(c), a replica outside the list is away: wait for it",
                &[],
                &[(1, 3), (2, 9)],
                &[1, 2],
                false,
                Election::Unchanged,
                true,
            ),
            (
                "the longest log is not live: wait, though shorter ones are",
                &[],
                &[(1, 3), (2, 9), (3, 5)],
                &[1, 3],
                false,
                Election::Unchanged,
                true,
            ),
            (
                "G1(c), the keeper restarts first: the others still in the ELR are waited for",
                &[2, 3],
                &[(1, 9)],
                &[1],
                false,
                Election::Unchanged,
                true,
            ),
            (
                "G1(c), the keeper restarts second: the last ELR member is waited for",
                &[3],
                &[(1, 9), (2, 4)],
                &[1, 2],
                false,
                Election::Unchanged,
                true,
            ),
            (
                "G1(c), the keeper restarts last: it leads",
                &[],
                &[(1, 0), (2, 4), (3, 9)],
                &[1, 2, 3],
                false,
                leader(3, &[3], false),
                false,
            ),
            (
                "the longest log is not live, recovery wait over: the longest live report leads",
                &[],
                &[(1, 3), (2, 9), (3, 5)],
                &[1, 3],
                true,
                leader(3, &[3], true),
                true,
            ),
            (
                "the longest log is not live, recovery wait over, only it reported records: \
                 a replica not known empty is preferred",
                &[],
                &[(1, 0), (2, 9)],
                &[1, 3],
                true,
                leader(3, &[3], true),
                true,
            ),
            (
                "only one unclean replica, live, the others away: wait for them",
                &[],
                &[(3, 4)],
                &[3],
                false,
                Election::Unchanged,
                true,
            ),
            (
                "only one unclean replica, live, the others away, recovery wait over: it leads, uncleanly",
                &[],
                &[(3, 4)],
                &[3],
                true,
                leader(3, &[3], true),
                true,
            ),
            (
                "every report empty, a replica outside the list is away: wait for it",
                &[],
                &[(1, 0), (2, 0)],
                &[1, 2],
                false,
                Election::Unchanged,
                true,
            ),
            (
                "every report empty, the replica outside the list is live: wait for its report, \
                 another outside it may hold more",
                &[],
                &[(1, 0), (2, 0)],
                &[1, 2, 3],
                false,
                Election::Unchanged,
                true,
            ),
            (
                "every other report empty, the replica outside the list reported records: it leads",
                &[],
                &[(1, 0), (2, 0), (3, 7)],
                &[1, 2, 3],
                false,
                leader(3, &[3], false),
                false,
            ),
            (
                "every replica reported an empty log: nothing anywhere, the first live leads",
                &[],
                &[(1, 0), (2, 0), (3, 0)],
                &[2, 3],
                false,
                leader(2, &[2], false),
                false,
            ),
        ];
        for (name, elr, list, live, unclean, expected, awaits) in cases {
            let mut state = state_with_elr(None, &[], elr);
            state.unclean_replicas = list
                .iter()
                .map(|&(node, offset)| UncleanReplica {
                    node: NodeId(node),
                    acknowledged_end: None,
                    log_end: (offset != UNKNOWN).then_some(LogEnd {
                        last_epoch: (offset > 0).then_some(LeaderEpoch(4)),
                        log_end_offset: Offset(offset),
                        ..Default::default()
                    }),
                })
                .collect();
            state.check_invariants();
            assert_eq!(
                awaits_unclean_recovery(&state, &nodes(live)),
                *awaits,
                "{name}: awaits unclean recovery"
            );
            // The switch decides only once the recovery wait is over.
            let got = elect_leader(&state, &nodes(live), *unclean, *unclean);
            assert_eq!(&got, expected, "{name}");
            if let Some(update) = got.update(&state, 2) {
                state
                    .validate_update(&update)
                    .unwrap_or_else(|error| panic!("{name}: {error}"));
                let next = state.with_update(update);
                let Election::Leader { leader, .. } = got else {
                    unreachable!()
                };
                assert!(
                    !next.is_unclean(leader),
                    "{name}: the leader left the unclean list"
                );
            }
        }
    }

    /// SPEC G1(c) and 3.5: a replica outside the unclean list that is away
    /// holds a log in unclean recovery leaderless until the recovery wait
    /// is over, and then only if the unclean switch is on (the caller
    /// passes `recovery_waited` only then): the longest reported log leads,
    /// counted as unclean. Once it is back it reports and is compared
    /// instead.
    #[test]
    fn a_replica_away_outside_the_list_is_waited_for_until_the_recovery_wait_is_over() {
        use crate::coordinator::{LogEnd, UncleanReplica};
        use crate::types::Offset;
        let mut state = state_with_elr(None, &[], &[]);
        state.unclean_replicas = [(1, 3), (2, 9)]
            .iter()
            .map(|&(node, offset)| UncleanReplica {
                node: NodeId(node),
                acknowledged_end: None,
                log_end: Some(LogEnd {
                    last_epoch: Some(LeaderEpoch(4)),
                    log_end_offset: Offset(offset),
                    ..Default::default()
                }),
            })
            .collect();
        state.check_invariants();
        let live = nodes(&[1, 2]);
        assert!(awaits_unclean_recovery(&state, &live));
        assert_eq!(
            elect_leader(&state, &live, false, false),
            Election::Unchanged,
            "still waiting: node 3 may hold more"
        );
        assert_eq!(
            elect_leader(&state, &live, true, true),
            leader(2, &[2], true),
            "wait over, switch on: the longest reported log leads, uncleanly"
        );
        // Back before the election: it is live and not yet reported, so
        // the election waits for its report.
        assert_eq!(
            elect_leader(&state, &nodes(&[1, 2, 3]), false, true),
            Election::Unchanged
        );
    }

    /// With the unclean switch on, a log in unclean recovery is elected
    /// uncleanly only after `unclean_recovery_wait_max`; a log with no
    /// unclean report at once, as before.
    #[test]
    fn unclean_switch_waits_for_unclean_recovery() {
        use crate::coordinator::{LogEnd, MemoryCoordinator, UncleanReplica};
        use crate::types::Offset;
        let coordinator: Arc<dyn Coordinator> =
            Arc::new(MemoryCoordinator::new(Arc::new(crate::clock::SystemClock)));
        // The waits are measured on the controller's clock: moved by hand.
        let clock = crate::clock::ManualClock::default();
        let shared = |unclean_leader_election, unclean_recovery_wait_max| {
            Shared::new(
                NodeId(1),
                Arc::clone(&coordinator),
                ControllerConfig {
                    unclean_leader_election,
                    unclean_recovery_wait_max,
                    ..ControllerConfig::default()
                },
                Arc::new(clock.clone()),
            )
        };
        let mut recovering = state_with_elr(None, &[], &[3]);
        recovering.unclean_replicas = vec![UncleanReplica {
            node: NodeId(1),
            acknowledged_end: None,
            log_end: Some(LogEnd {
                last_epoch: Some(LeaderEpoch(4)),
                log_end_offset: Offset(9),
                ..Default::default()
            }),
        }];
        recovering.check_invariants();
        let classic = LogState {
            log: LogId(8),
            ..state(None, &[3])
        };
        let live = nodes(&[1, 2]);

        let off = shared(false, Duration::ZERO);
        assert!(!off.recovery_decision(&recovering, &live).0);
        assert!(!off.recovery_decision(&classic, &live).0);
        // With the switch off nobody is ever passed over (SPEC 3.5, G1(c)).
        assert!(!off.recovery_decision(&recovering, &live).1);
        assert!(
            shared(true, Duration::ZERO)
                .recovery_decision(&recovering, &live)
                .1
        );
        assert!(
            !shared(true, Duration::from_secs(3600))
                .recovery_decision(&recovering, &live)
                .1
        );

        let waiting = shared(true, Duration::from_secs(3600));
        assert!(!waiting.recovery_decision(&recovering, &live).0);
        assert!(waiting.recovery_decision(&classic, &live).0);
        assert_eq!(waiting.recovery_waits.lock().len(), 1);
        // Node 3 came back cleanly: no longer waiting, and forgotten.
        assert!(waiting.recovery_decision(&recovering, &nodes(&[1, 2, 3])).0);
        assert!(waiting.recovery_waits.lock().is_empty());

        // The wait restarts when the log enters recovery proper: one begun
        // while an ISR member was still away is not spent by then.
        let restarted = shared(true, Duration::from_millis(200));
        let mut isr_away = recovering.clone();
        isr_away.in_sync_replicas = vec![NodeId(3)];
        isr_away.eligible_leader_replicas = Vec::new();
        let mut in_recovery = isr_away.clone();
        in_recovery.in_sync_replicas = Vec::new();
        assert!(!isr_away.in_unclean_recovery());
        assert!(in_recovery.in_unclean_recovery());
        // In recovery proper, the switch off: the wait never passes anyone
        // over, however long it was (review of 58ca599, finding 4).
        let off_now = shared(false, Duration::ZERO);
        let (switch_decides, passes_over) = off_now.recovery_decision(&in_recovery, &live);
        assert!(!switch_decides && !passes_over);
        assert_eq!(
            elect_leader(&in_recovery, &live, switch_decides, passes_over),
            Election::Unchanged,
            "node 3 may hold more"
        );
        assert!(!restarted.recovery_decision(&isr_away, &live).1);
        clock.advance(Duration::from_millis(250));
        assert!(
            !restarted.recovery_decision(&in_recovery, &live).1,
            "entering recovery restarts the wait"
        );
        clock.advance(Duration::from_millis(250));
        assert!(restarted.recovery_decision(&in_recovery, &live).1);
        // The switch's own wait is not restarted (review of fd4cbfa,
        // finding 5): it runs from the first time the log awaited.
        let switch_on = shared(true, Duration::from_millis(200));
        assert!(!switch_on.recovery_decision(&isr_away, &live).0);
        clock.advance(Duration::from_millis(250));
        let (switch_decides, passes_over) = switch_on.recovery_decision(&in_recovery, &live);
        assert!(switch_decides, "the switch waited from the first sight");
        assert!(
            !passes_over,
            "the pass-over wait began with recovery proper"
        );

        // Waits measured before the seat moved away and came back start
        // again; a failed call while holding it keeps them.
        for node in [1, 2] {
            coordinator
                .register_node(NodeId(node), Duration::from_secs(3600))
                .unwrap();
        }
        let again = shared(true, Duration::from_millis(200));
        let mut pending = Pending::default();
        again.step(&mut pending, false, &|| false).unwrap();
        assert!(!again.recovery_decision(&in_recovery, &live).1);
        clock.advance(Duration::from_millis(250));
        again.set_inactive();
        again.step(&mut pending, false, &|| false).unwrap();
        assert!(
            again.recovery_decision(&in_recovery, &live).1,
            "the same seat: the wait is kept"
        );
        coordinator.resign_controller(NodeId(1)).unwrap();
        let other = Shared::new(
            NodeId(2),
            Arc::clone(&coordinator),
            ControllerConfig::default(),
            Arc::new(clock.clone()),
        );
        other
            .step(&mut Pending::default(), false, &|| false)
            .unwrap();
        coordinator.resign_controller(NodeId(2)).unwrap();
        again.step(&mut pending, false, &|| false).unwrap();
        assert!(
            !again.recovery_decision(&in_recovery, &live).1,
            "the seat came back: the wait starts again"
        );
        clock.advance(Duration::from_millis(250));
        assert!(again.recovery_decision(&in_recovery, &live).1);

        let over = shared(true, Duration::ZERO);
        assert!(over.recovery_decision(&recovering, &live).0);
        assert_eq!(
            elect_leader(&recovering, &live, true, true),
            leader(1, &[1], true),
            "after the wait the switch decides, for the longest report"
        );
    }

    #[test]
    fn config_rejects_zero_intervals() {
        let zero_poll = ControllerConfig {
            poll_interval: Duration::ZERO,
            ..ControllerConfig::default()
        };
        assert!(matches!(
            zero_poll.validate(),
            Err(Error::InvalidConfig {
                field: "poll_interval",
                ..
            })
        ));
        let zero_preferred = ControllerConfig {
            preferred_leader_check_interval: Some(Duration::ZERO),
            ..ControllerConfig::default()
        };
        assert!(matches!(
            zero_preferred.validate(),
            Err(Error::InvalidConfig {
                field: "preferred_leader_check_interval",
                ..
            })
        ));
        let zero_min_isr = ControllerConfig {
            min_insync_replicas: 0,
            ..ControllerConfig::default()
        };
        assert!(matches!(
            zero_min_isr.validate(),
            Err(Error::InvalidConfig {
                field: "min_insync_replicas",
                ..
            })
        ));
        let default = ControllerConfig::default().validate();
        assert!(default.is_ok(), "the default is valid: {default:?}");
    }
}
