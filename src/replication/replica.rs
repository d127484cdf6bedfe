//! `Replica`: one log on one node — its storage, its role (leader, follower
//! or offline) and the published high watermark — and the operations the
//! node's threads perform on it: append as leader, answer a follower's
//! fetch, apply a fetch answer as follower, change role.
//!
//! The decisions are made by the pure state machines (`LeaderState`,
//! `FollowerState`, `truncation_for_divergence`); this module holds the locks
//! and does the I/O around them.
//!
//! Lock order: `follower_io` before `role` (read or write) before `leader`
//! and `follower` (never both). Leader appends hold `role` for reading, so a
//! role change (write) waits for appends in flight and no append of an old
//! leader can land after the replica became a follower and started taking
//! the new leader's records. Applying a fetch answer holds `follower_io`
//! and then `follower` (without `role`) across its I/O, so the follower
//! machine and the log move together: `next_fetch` never sees one without
//! the other.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::applied::{AppliedPositions, LowestApplied};
use super::combiner::{Combine, Combiner, Deferral};
use super::completion::{Completion, CompletionRunner};
use super::follower::{DivergenceAction, FetchedUpdate, FollowerState, OutOfRangeAction};
use super::isr::{FetchArrival, IsrProposal};
use super::leader::{
    check_divergence, AcksAllProgress, Divergence, FetchDecision, FetchRejection, LeaderAssignment,
    LeaderConfig, LeaderState,
};
use super::pending::{PendingAppend, PendingAppends, Snapshot, Verdict};
use super::recent_writes::RecentWrites;
use super::snapshot_download::SnapshotId;
use super::watch::{WaitOutcome, Watch};
use super::LogOffsets;
use crate::append::AppendOutcome;
use crate::clock::Clock;
use crate::config::ReplicationConfig;
use crate::error::{Error, Result};
use crate::record::{
    merge_records, parse_header, seal_crc, set_base_offset, set_leader_epoch, RecordBatch,
};
use crate::snapshot::{SnapshotInfo, SnapshotStore};
use crate::storage::{AppendInfo, FlushPolicy, Log};
use crate::sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering, RwLock};
use crate::transport::{ErrorCode, FetchLog, FetchedLog, SnapshotRequest, SnapshotResponse};
use crate::types::{EpochEndOffset, Incarnation, LeaderEpoch, LogId, NodeId, Offset};

/// The role of a replica, as this node knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// This replica leads the log.
    Leader,
    /// This replica follows the given leader.
    Follower {
        /// The leader it fetches from.
        leader: NodeId,
    },
    /// The log has no leader this node knows of (or it is not hosted).
    Offline,
}

#[derive(Debug)]
pub(crate) struct RoleState {
    pub(crate) role: Role,
    pub(crate) leader_epoch: LeaderEpoch,
    pub(crate) replicas: Vec<NodeId>,
    pub(crate) in_sync_replicas: Vec<NodeId>,
    pub(crate) isr_version: u64,
    /// While `role` is `Leader`: the leader machine's
    /// [`isr_below_min`](LeaderState::isr_below_min), which refuses
    /// `acks=all` appends before they are written (SPEC 3.1); `None`
    /// otherwise. A copy, so that an append reads it under the role's read
    /// lock, which it holds anyway, instead of taking the leader machine's
    /// lock, which every fetch answer and every write takes too (profile of
    /// 256 async clients appending 100 B records: that lock pair was about
    /// 1.6% of all samples).
    ///
    /// Invariant: equals the leader machine's `isr_below_min()` while
    /// `role` is `Leader`, `None` otherwise. The accepted ISR changes only
    /// in `become_leader` and `update_isr`, both under the role's write
    /// lock, and both set this there; every way out of `Leader` clears it;
    /// `append_as_leader` checks both with `debug_assert!`.
    pub(crate) leader_isr_below_min: Option<(usize, usize)>,
    /// Bumped on every role change; an `acks=all` waiter that sees it move
    /// fails with `NotLeader` even if the high watermark later passes its
    /// offset, because the records at that offset may no longer be its own.
    pub(crate) generation: u64,
}

/// What a leader append reports back.
#[derive(Debug)]
pub(crate) struct LeaderAppend {
    pub(crate) info: AppendInfo,
    pub(crate) generation: u64,
    pub(crate) leader_epoch: LeaderEpoch,
    /// Left queued for the next follower fetch: this call wrote nothing,
    /// so it decided no other append's outcome.
    pub(crate) deferred: bool,
    /// The append failed in or after its write (the write itself, the
    /// fsync its flush policy asked for, a roll's flush): the batch may be
    /// in the log at `info`'s offsets, and may yet be replicated and
    /// committed (or kept by the next open's recovery), so its outcome is
    /// unknown and this is the error to report for it. A caller must not
    /// say "nothing was appended" (helper-152's review; helper-157's for
    /// the write itself).
    pub(crate) failed_after_write: Option<Error>,
}

/// At most this many yields of the pipeline's seat holder while gathering.
const GATHER_YIELDS_MAX: u32 = 8;

/// How often a blocking `acks=all` wait re-checks the ISR, whose shrinking
/// below `min_insync_replicas` is not a high watermark event.
const ISR_RECHECK_INTERVAL: Duration = Duration::from_millis(5);

/// Batches at least this large skip the combining pipeline.
const DIRECT_APPEND_BYTES_MIN: usize = 32 * 1024;

/// The largest batch the pipeline makes by merging appends pushed together.
const MERGED_BATCH_BYTES_MAX: usize = 64 * 1024;

/// A pipelined append is left to the next fetch only while less than this
/// is queued: past it the appender writes, so one write stays moderate.
const DEFERRED_BYTES_MAX: usize = 512 * 1024;

/// The leader's append pipeline for plain (non-idempotent) batches: flat
/// combining. An appender reserves its offsets and copies its batch,
/// stamped with those offsets and the leader epoch, into `pending` under a
/// short lock; whichever appender finds the writer seat free then writes
/// everything pending with one `write` and publishes the result. Under load
/// many appenders share one write and one lock hand-off instead of queueing
/// on the log's lock one by one.
///
/// A pipelined `acks=all` append may leave its batch queued (deferred, see
/// `Replica::append_as_leader`): the next follower fetch writes it
/// (`Replica::write_deferred`), with whatever else was queued meanwhile;
/// so does a leader read past the committed end, a log end query, the
/// node's control loop on its tick (should no fetch come) and every role
/// change.
///
/// Invariant: `pending` is empty once a role change holds `Replica::role`
/// for writing and wrote what was queued (`flush_pipeline_for_role_change`;
/// every writer holds `role` for reading), so a role change never leaves
/// batches of the old role behind.
#[derive(Debug)]
struct AppendPipeline {
    /// The queue of stamped batches, and the writer seat.
    combiner: Combiner<AppendQueue>,
    /// The log end offset written so far by the pipeline (acks=1 waits on it).
    written: Watch,
    /// Set when a write failed: the log is poisoned, every waiter fails.
    failure: Mutex<Option<String>>,
    /// Whether `failure` is set: raised right after it, never lowered.
    /// Read without the lock on every pipelined append's verdict.
    failed: AtomicBool,
    /// Appends pushed so far (read by the seat holder's gathering).
    pushes: AtomicU64,
}

impl Combine for AppendQueue {
    type Taken = Taken;

    fn take(&mut self) -> Option<Taken> {
        if self.pending.is_empty() {
            return None;
        }
        self.close_open_batch();
        Some(Taken {
            bytes: self.pending.split(),
            crc_due: std::mem::take(&mut self.crc_due),
            log_end_offset: self.next_offset,
        })
    }

    fn is_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

/// Stamped batches taken out of the pipeline's queue for one write.
#[derive(Debug)]
struct Taken {
    bytes: BytesMut,
    /// Where the batches that took merges start in `bytes`: their CRC is
    /// computed by the writer, outside the queue's lock.
    crc_due: Vec<usize>,
    /// The log end offset once they are written.
    log_end_offset: Offset,
}

/// The pipeline's queue. Appends pushed together are merged into few
/// batches (as Kafka's producer accumulates records into a batch): a
/// plain batch's records join the last batch queued while that one is
/// plain and stays within `MERGED_BATCH_BYTES_MAX`; each append keeps its
/// own offsets (handed out as before) and outcome. Batches with a producer
/// id never merge (their sequences are their identity, SPEC 4; they do not
/// come through here anyway).
#[derive(Debug)]
struct AppendQueue {
    /// The offset the next reserved batch gets.
    /// Invariant: next_offset = log end offset + records taken by the
    /// seat holder and not yet written + records in `pending`; more only
    /// after a write failed (the log is poisoned then, and offsets handed
    /// out are never handed out again).
    next_offset: Offset,
    pending: BytesMut,
    /// Where the last batch in `pending` starts, which later pushes may
    /// merge into; `None` when `pending` is empty.
    open: Option<usize>,
    /// Whether the open batch took a merge (its CRC is stale).
    open_merged: bool,
    /// Starts in `pending` of closed batches that took merges.
    crc_due: Vec<usize>,
    /// The largest batch a merge may make (and never above the log's
    /// `batch_bytes_max`).
    merged_bytes_max: usize,
}

impl AppendQueue {
    fn new(merged_bytes_max: usize) -> AppendQueue {
        AppendQueue {
            next_offset: Offset::ZERO,
            pending: BytesMut::new(),
            open: None,
            open_merged: false,
            crc_due: Vec::new(),
            merged_bytes_max,
        }
    }

    /// No later push merges into the open batch; its CRC is due if it
    /// took merges.
    fn close_open_batch(&mut self) {
        if let Some(at) = self.open.take() {
            if self.open_merged {
                self.crc_due.push(at);
            }
        }
        self.open_merged = false;
    }

    /// Queues `batch` stamped with `base_offset` and `leader_epoch`: merged
    /// into the open batch if it can be, else as a batch of its own (then
    /// the open one).
    fn push_batch(&mut self, batch: &RecordBatch, base_offset: Offset, leader_epoch: LeaderEpoch) {
        if let Some(open) = self.open {
            if merge_records(&mut self.pending, open, batch, self.merged_bytes_max) {
                self.open_merged = true;
                return;
            }
        }
        self.close_open_batch();
        let at = self.pending.len();
        self.pending.extend_from_slice(batch.as_bytes());
        set_base_offset(&mut self.pending[at..], base_offset);
        set_leader_epoch(&mut self.pending[at..], leader_epoch);
        self.open = Some(at);
    }
}

/// One log on one node.
#[derive(Debug)]
pub(crate) struct Replica {
    log_id: LogId,
    local: NodeId,
    log: Log,
    config: ReplicationConfig,
    flush_always: bool,
    clock: Arc<dyn Clock>,
    role: RwLock<RoleState>,
    leader: Mutex<Option<LeaderState>>,
    /// The follower's state machine while this replica follows a leader,
    /// `None` otherwise. Invariant (unless the log is poisoned): its log
    /// start and end are the log's, its high watermark the published one.
    follower: Mutex<Option<FollowerState>>,
    /// The high watermark readers and `acks=all` waiters see. Closed (and
    /// reset) on every role change.
    high_watermark: Watch,
    /// Serialises follower I/O (fetch answers) with role changes.
    follower_io: Mutex<()>,
    /// An ISR proposal the control loop should send to the coordinator.
    isr_proposal: Mutex<Option<IsrProposal>>,
    generation: AtomicU64,
    /// The node's "data arrived" sequence, bumped after each leader append
    /// to release parked long-poll fetches.
    data_arrived: Arc<Watch>,
    /// Whether the log's directory existed when this process opened it.
    restarted: bool,
    /// This process moved the log to a new leader epoch of its own, as a
    /// restarted leader must before it leads (`NodeShared::reconcile_with`):
    /// every epoch from then on was made after this process started.
    epoch_bumped: AtomicBool,
    /// When this replica last tried to resign after its storage failed:
    /// retried at most once a second, not on every control-loop tick.
    resign_attempted_at: Mutex<Option<Instant>>,
    /// The epoch whose `become_leader` failed: the coordinator names this
    /// replica leader but it cannot lead, so the control loop keeps trying
    /// to hand the log on (or, with nobody to hand it to, to lead again).
    /// Cleared by the next role change, or once the coordinator names
    /// another leader in that epoch or a later one.
    leadership_failed: Mutex<Option<LeaderEpoch>>,
    /// The end of what was acknowledged before this replica stopped
    /// leading in an epoch to resign it
    /// (`stop_acknowledging_to_resign`), kept for the resignation's
    /// retries.
    resigned_acknowledged_end: Mutex<Option<(LeaderEpoch, Offset)>>,
    /// Controlled shutdown: the leader epoch (plus one; 0 for none) in
    /// which this replica stopped taking appends to hand its leadership
    /// over. A later epoch is not affected.
    appends_stopped_in: AtomicU64,
    /// Set once its node's controlled shutdown began: no append is taken
    /// from then on, in this epoch or any later one (a reassignment's
    /// completion may make the stopping leader lead again in a new epoch;
    /// simulator seeds 20009429 and 20006026).
    stopped_for_shutdown: AtomicBool,
    pipeline: AppendPipeline,
    /// The pipeline's last writes, from which follower fetches are
    /// answered without reading the log back (see `RecentWrites`). A leaf
    /// lock: nothing else is taken while it is held.
    recent_writes: Mutex<RecentWrites>,
    /// Pipelined appends waiting for their outcome
    /// (`ReplicatedLog::append_pipelined`).
    pending: PendingAppends,
    /// Held from deciding pipelined appends to handing them their outcomes,
    /// so that outcomes decided by two threads at once (a fetch answer and
    /// the deadline timer, say) reach the node's completion thread in the
    /// order they were decided: a log's callbacks run in offset order.
    /// Taken with no other lock of the replica held, and held over no
    /// application code (callbacks run on the completion thread).
    resolving: Mutex<()>,
    /// How many pipelined appends the latest resolution pass resolved: a
    /// hint, read by [`pipelined_alone`](Self::pipelined_alone), that
    /// several tasks append to this log together. It steers only whether
    /// a handle spins, never an outcome.
    last_pass_resolved: AtomicUsize,
    /// The stop flag of the node hosting this replica, set when the node
    /// first hands out the log's handle: a pipelined append whose node
    /// stopped fails with `Shutdown` (not `NotLeader`), as a blocking
    /// `append` does. The node raises the flag when it stops and when it
    /// is dropped, so one load answers "stopped or gone" (it was a weak
    /// reference to the node, upgraded on every pipelined append: two
    /// atomic read-modify-writes on a count every thread shares).
    node_stop: std::sync::OnceLock<Arc<AtomicBool>>,
    /// The applied positions of the log's replicas (SPEC 3.9).
    applied: AppliedPositions,
    /// What a follower whose log ends below its leader's log start does
    /// (SPEC 3.9).
    below_leader_start: BelowLeaderStart,
    /// Set when this follower's log ends below its leader's log start and
    /// it must not restart there: the leader's log start it is below.
    /// Cleared when a snapshot is installed or the role changes.
    needs_snapshot: Mutex<Option<Offset>>,
    /// The application's snapshot store, if it keeps snapshots: as leader,
    /// deletion never passes its latest snapshot (see `deletion_bound_in`).
    snapshots: Option<crate::snapshot::Snapshots>,
    /// The leader epoch in which this replica last warned that it leads
    /// with its application behind its log start (see
    /// `leader_application_behind`).
    stuck_application_warned: Mutex<Option<LeaderEpoch>>,
}

/// Who writes pipelined appends left queued for a fetch
/// (`Replica::write_deferred`), which decides how long it may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeferredWriter {
    /// A follower's fetch, or the control loop's tick (should no fetch
    /// come): writes unless another thread holds the writer seat, whose
    /// write then bumps "data arrived" once it is done (a fetch held in
    /// its long poll reads again).
    Drainer,
    /// A reader that must see every append that returned (a log end query,
    /// a leader read past the committed end): waits for the seat while
    /// offsets handed out are not in the log yet.
    Reader,
}

/// The leader's log start (or, for a follower whose log starts past it,
/// its log end) as a fetch answer named it: the offset, and an epoch whose
/// leader's log held the records below it (`FetchedLog::log_start_epoch`,
/// `log_end_epoch`; named only on answers that may restart a log there,
/// so a restart on an answer without an error, `FetchedUpdate::ResetTo`,
/// falls back to the leader's epoch).
#[derive(Clone, Copy, Debug)]
struct StartNamed {
    /// `FetchedLog::log_start_offset` (or `log_end_offset`).
    offset: Offset,
    /// `FetchedLog::log_start_epoch` (or `log_end_epoch`).
    epoch: Option<LeaderEpoch>,
}

impl StartNamed {
    /// The start line of a follower's log restarted at `start` on this
    /// answer: the epoch the leader named for its start, if the log
    /// restarts there; else `leader_epoch`, the epoch of the leader whose
    /// start it is, whose log held the records below it too, but of which
    /// a longer log may hold no record (SPEC 3.5: unclean recovery would
    /// then keep the empty log over one holding records past it, should
    /// the first batch's own start line, `Replica::append_fetched`, not
    /// be written).
    fn line_at(self, start: Offset, leader_epoch: LeaderEpoch) -> LeaderEpoch {
        match self.epoch {
            Some(epoch) if self.offset == start => epoch,
            _ => leader_epoch,
        }
    }
}

/// What a follower whose log ends below its leader's log start does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BelowLeaderStart {
    /// Restart the log, empty, at the leader's log start (Kafka).
    Restart,
    /// Install the leader application's snapshot (the node has a store).
    InstallSnapshot,
    /// Stop fetching and report it: the application needs every record
    /// (`retain_until_applied`) and no store is configured.
    Report,
}

/// Where deletion of a log's records must stop (SPEC 3.9), and why: what
/// [`ReplicatedLog::deletion_bound`](crate::ReplicatedLog::deletion_bound)
/// answers, for an application to export as metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeletionBound {
    /// Records below it may be deleted (by retention or
    /// `delete_records_before`).
    pub bound: Offset,
    /// The replica whose applied position is `bound`, when that is below
    /// the high watermark (`retain_until_applied`); past the cap, `None`
    /// when the bound is what the `min_insync_replicas`-th in-sync
    /// application applied. This replica itself when its application's
    /// latest snapshot holds the bound (with a snapshot store the log
    /// start never passes it, so that a follower can be rebuilt from the
    /// snapshot plus the log after it).
    pub held_by: Option<NodeId>,
    /// That replica's applied position (or that snapshot's offset); `None`
    /// when it never reported one (or when no replica holds deletion
    /// back).
    pub held_by_applied: Option<Offset>,
    /// Bytes of whole segments below the high watermark kept for the
    /// lowest applied position over all replicas (what the cap measures).
    pub held_bytes: u64,
    /// Whether the cap (`applied_hold_bytes_max`, `applied_hold_age_max`)
    /// has passed for the lowest position: `bound` then passes the lagging
    /// positions (their replicas will need a snapshot), up to what the
    /// leader's application and `min_insync_replicas` in-sync applications
    /// have applied.
    pub capped: bool,
}

/// Resolves the pipelined appends a role change or a fetch decided, when
/// dropped: declared first in a method, it runs after every lock the
/// method took was released, so outcomes are handed out (and blocked
/// owners woken) under no lock of the replica; callbacks and wakers go on
/// to the node's completion thread.
struct ResolveOnDrop<'a> {
    replica: &'a Replica,
    check_isr: bool,
}

impl Drop for ResolveOnDrop<'_> {
    fn drop(&mut self) {
        if self.check_isr {
            self.replica.resolve_pipelined_full(true);
        } else {
            self.replica.resolve_pipelined();
        }
    }
}

impl Replica {
    pub(crate) fn new(
        log_id: LogId,
        local: NodeId,
        log: Log,
        config: ReplicationConfig,
        clock: Arc<dyn Clock>,
        data_arrived: Arc<Watch>,
        restarted: bool,
    ) -> Replica {
        let hw = log.high_watermark().min(log.log_end_offset());
        let flush_always = matches!(log.config().flush_policy, FlushPolicy::Always);
        let applied = AppliedPositions::open(Arc::clone(log.disk()), log.dir());
        let merged_bytes_max = MERGED_BATCH_BYTES_MAX.min(log.config().batch_bytes_max);
        let pending = PendingAppends::new(config.request_timeout);
        Replica {
            log_id,
            local,
            log,
            config,
            flush_always,
            clock,
            role: RwLock::new(RoleState {
                role: Role::Offline,
                leader_epoch: LeaderEpoch::ZERO,
                replicas: Vec::new(),
                in_sync_replicas: Vec::new(),
                isr_version: 0,
                leader_isr_below_min: None,
                generation: 0,
            }),
            leader: Mutex::new(None),
            follower: Mutex::new(None),
            high_watermark: Watch::new(hw.0),
            follower_io: Mutex::new(()),
            isr_proposal: Mutex::new(None),
            generation: AtomicU64::new(0),
            data_arrived,
            restarted,
            epoch_bumped: AtomicBool::new(false),
            resign_attempted_at: Mutex::new(None),
            leadership_failed: Mutex::new(None),
            resigned_acknowledged_end: Mutex::new(None),
            appends_stopped_in: AtomicU64::new(0),
            stopped_for_shutdown: AtomicBool::new(false),
            pipeline: AppendPipeline {
                combiner: Combiner::new(AppendQueue::new(merged_bytes_max)),
                written: Watch::new(0),
                failure: Mutex::new(None),
                failed: AtomicBool::new(false),
                pushes: AtomicU64::new(0),
            },
            recent_writes: Mutex::new(RecentWrites::default()),
            pending,
            resolving: Mutex::new(()),
            last_pass_resolved: AtomicUsize::new(0),
            node_stop: std::sync::OnceLock::new(),
            applied,
            below_leader_start: BelowLeaderStart::Restart,
            needs_snapshot: Mutex::new(None),
            snapshots: None,
            stuck_application_warned: Mutex::new(None),
        }
    }

    /// What this replica does as a follower below its leader's log start
    /// (default: restart there, as Kafka).
    pub(crate) fn with_below_leader_start(mut self, below: BelowLeaderStart) -> Replica {
        self.below_leader_start = below;
        self
    }

    /// The runner of the node hosting this replica, where the callbacks and
    /// wakers of its pipelined appends run.
    pub(crate) fn with_completions(mut self, runner: Arc<CompletionRunner>) -> Replica {
        self.pending.set_completions(runner);
        self
    }

    /// The application's snapshot store, which bounds deletion on the
    /// leader (SPEC 3.9).
    pub(crate) fn with_snapshots(
        mut self,
        snapshots: Option<crate::snapshot::Snapshots>,
    ) -> Replica {
        self.snapshots = snapshots;
        self
    }

    /// Whether a leader whose storage failed should try (again) to resign
    /// at `now` (the node's clock, read by its driver): at most once a
    /// second.
    pub(crate) fn resign_due(&self, now: Instant) -> bool {
        let mut last = self.resign_attempted_at.lock();
        match *last {
            Some(at) if now.duration_since(at) < Duration::from_secs(1) => false,
            _ => {
                *last = Some(now);
                true
            }
        }
    }

    /// Whether `become_leader` failed since the last role change (the
    /// coordinator names this replica leader, but it cannot lead).
    pub(crate) fn leadership_failed(&self) -> bool {
        self.leadership_failed.lock().is_some()
    }

    /// The coordinator names `leader` in `epoch`: if that is another node in
    /// the failed epoch or a later one, nothing is left to hand on. (A
    /// failure in a later epoch than the coordinator state read is kept.)
    pub(crate) fn clear_leadership_failed(&self, epoch: LeaderEpoch, leader: Option<NodeId>) {
        let mut failed = self.leadership_failed.lock();
        if let Some(failed_epoch) = *failed {
            if leader != Some(self.local) && epoch >= failed_epoch {
                *failed = None;
            }
        }
    }

    /// Stops this failed leader acknowledging anything in `epoch`, the
    /// epoch it resigns, ahead of the resignation that lists it among the
    /// unclean replicas (SPEC 3.5, `UncleanReplica::acknowledged_end`), and
    /// returns the end of what was acknowledged with `acks=all` before, by
    /// it or by an earlier leader:
    /// - Leading in `epoch` (its log failed), it stops as after a failed
    ///   `become_leader` (what the pipeline queued is written or fails,
    ///   appends fail, waiters are released, and the resignation is
    ///   retried until the coordinator names another leader); its high
    ///   watermark is then final. An earlier leader's records lie below
    ///   its epoch's start (it was elected holding them), which a new
    ///   leader's high watermark may not have reached yet (SPEC 3.8). The
    ///   end is kept for the resignation's retries.
    /// - Stopped so before in `epoch` (a retry): the end it kept.
    /// - Else (its `become_leader` failed, or it leads another epoch than
    ///   the resignation read, which then fails as stale), it
    ///   acknowledged nothing in `epoch`, and an earlier leader's records
    ///   lie below its log end: nothing narrower is known.
    pub(crate) fn stop_acknowledging_to_resign(&self, epoch: LeaderEpoch) -> Offset {
        let _resolve = self.resolve_on_drop(false);
        let _io = self.follower_io.lock();
        let mut role = self.role.write();
        if role.role != Role::Leader || role.leader_epoch != epoch {
            return match *self.resigned_acknowledged_end.lock() {
                Some((stopped, end)) if stopped == epoch => end,
                _ => self.log.log_end_offset(),
            };
        }
        self.flush_pipeline_for_role_change();
        self.fail_leadership(&mut role, epoch);
        let high_watermark = Offset(self.high_watermark.get());
        // `become_leader` wrote the epoch's entry before leading; without
        // it, the log end bounds everything.
        let epoch_start = self
            .log
            .epoch_entries()
            .into_iter()
            .find(|(entry, _)| *entry == epoch)
            .map_or_else(|| self.log.log_end_offset(), |(_, start)| start);
        debug_assert!(high_watermark <= self.log.log_end_offset());
        let end = high_watermark.max(epoch_start);
        // The coordinator takes it only at most at the log end it is
        // listed with (`LogState::validate_update`).
        debug_assert!(end <= self.log.log_end_offset(), "{end} past the log end");
        *self.resigned_acknowledged_end.lock() = Some((epoch, end));
        end
    }

    /// `become_leader` for `epoch` failed, or a failed leader stops to
    /// resign it (`stop_acknowledging_to_resign`): stop acting as leader
    /// of `epoch` or an older one (appends fail, waiters are released) and
    /// remember it.
    fn fail_leadership(&self, role: &mut RoleState, epoch: LeaderEpoch) {
        *self.leadership_failed.lock() = Some(epoch);
        if role.role == Role::Leader {
            *self.leader.lock() = None;
            role.leader_isr_below_min = None;
            role.role = Role::Offline;
            role.leader_epoch = epoch;
            let hw = Offset(self.high_watermark.get()).min(self.log.log_end_offset());
            self.bump_generation(role, hw);
        }
    }

    /// Whether the log existed on disk before this process opened it.
    pub(crate) fn restarted(&self) -> bool {
        self.restarted
    }

    /// Whether this process already moved the log to a leader epoch of its
    /// own (see `epoch_bumped`).
    pub(crate) fn epoch_bumped(&self) -> bool {
        self.epoch_bumped.load(Ordering::SeqCst)
    }

    /// Records that this process moved the log to a leader epoch of its own.
    pub(crate) fn mark_epoch_bumped(&self) {
        self.epoch_bumped.store(true, Ordering::SeqCst);
    }

    /// Whether this replica has not taken any role yet in this process.
    pub(crate) fn is_fresh(&self) -> bool {
        self.generation.load(Ordering::SeqCst) == 0
    }

    pub(crate) fn log_id(&self) -> LogId {
        self.log_id
    }

    pub(crate) fn log(&self) -> &Log {
        &self.log
    }

    /// The log end offset that this replica may acknowledge: under
    /// `FlushPolicy::Always` only flushed data counts (SPEC 2.5).
    fn acknowledgeable_end(&self) -> Offset {
        if self.flush_always {
            self.log.flushed_offset().min(self.log.log_end_offset())
        } else {
            self.log.log_end_offset()
        }
    }

    /// Whether many blocking `acks=all` appenders waited for the high
    /// watermark together last time (see `Watch::is_crowded`): spinning
    /// for them then costs more than it saves.
    pub(crate) fn producers_crowded(&self) -> bool {
        self.high_watermark.is_crowded()
    }

    pub(crate) fn high_watermark(&self) -> Offset {
        Offset(self.high_watermark.get())
    }

    pub(crate) fn role(&self) -> (Role, LeaderEpoch) {
        let state = self.role.read();
        (state.role, state.leader_epoch)
    }

    /// The committed end of the log on a leader that knows it (SPEC 3.8):
    /// `NotLeader` on a follower, `CommittedEndNotYetKnown` on a new leader
    /// whose high watermark is still below its epoch's start offset.
    pub(crate) fn committed_end(&self) -> Result<Offset> {
        let role = self.role.read();
        if role.role != Role::Leader {
            return Err(self.not_leader(&role));
        }
        let leader = self.leader.lock();
        let Some(leader) = leader.as_ref() else {
            return Err(self.not_leader(&role));
        };
        leader
            .committed_end()
            .ok_or_else(|| Error::CommittedEndNotYetKnown {
                log: self.log_id,
                epoch: leader.leader_epoch(),
                high_watermark: leader.high_watermark(),
                epoch_start_offset: leader.epoch_start_offset(),
            })
    }

    /// Controlled shutdown, and a leader's hand-over (a reassignment's, a
    /// stuck application's): if this replica leads, it takes no more
    /// appends in its epoch (they fail with a retriable `NotLeader`) and
    /// returns that epoch and its log end offset, final once this returns
    /// (every append admitted before is in the log: each holds `role`
    /// until its batch is written or queued, and the queue's writer drains
    /// it before letting `role` go). `None` on a follower.
    pub(crate) fn stop_appends_for_hand_over(&self) -> Option<(LeaderEpoch, Offset)> {
        let role = self.role.write();
        if role.role != Role::Leader {
            return None;
        }
        self.flush_pipeline_for_role_change();
        self.appends_stopped_in
            .store(u64::from(role.leader_epoch.0) + 1, Ordering::SeqCst);
        Some((role.leader_epoch, self.log.log_end_offset()))
    }

    /// Controlled shutdown (SPEC 3.5): this replica takes no append from
    /// now on, whatever epoch it leads later; as a leader also
    /// [`stop_appends_for_hand_over`](Self::stop_appends_for_hand_over),
    /// whose epoch and log end it returns (`None` on a follower).
    pub(crate) fn stop_appends_for_shutdown(&self) -> Option<(LeaderEpoch, Offset)> {
        {
            // Under the role's lock: an append admitted before holds it
            // until its batch is written or queued.
            let _role = self.role.write();
            self.stopped_for_shutdown.store(true, Ordering::SeqCst);
        }
        self.stop_appends_for_hand_over()
    }

    /// A leader's hand-over (reassignment, SPEC 3.10; stuck application,
    /// SPEC 3.9) begun with
    /// [`stop_appends_for_hand_over`](Self::stop_appends_for_hand_over)
    /// that found no successor in time, or is no longer due, gives appends
    /// back, if this replica still leads in `epoch` with appends stopped
    /// there.
    pub(crate) fn resume_appends_after_hand_over(&self, epoch: LeaderEpoch) {
        let _ = self.appends_stopped_in.compare_exchange(
            u64::from(epoch.0) + 1,
            0,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    /// Controlled shutdown: whether `follower` has fetched everything this
    /// leader holds (it is caught up to the log end).
    pub(crate) fn has_caught_up(&self, follower: NodeId) -> bool {
        let end = self.log.log_end_offset();
        self.leader
            .lock()
            .as_ref()
            .and_then(|leader| leader.follower_log_end_offset(follower))
            .is_some_and(|offset| offset >= end)
    }

    /// A leader's hand-over before it stops appends: whether `follower`
    /// has fetched in this epoch and held everything this leader had
    /// within `window` (see `LeaderState::follower_caught_up_within`).
    /// `false` on a follower.
    pub(crate) fn has_caught_up_within(&self, follower: NodeId, window: Duration) -> bool {
        let now = self.clock.now();
        self.leader
            .lock()
            .as_ref()
            .is_some_and(|leader| leader.follower_caught_up_within(follower, now, window))
    }

    pub(crate) fn in_sync_replicas(&self) -> Vec<NodeId> {
        self.role.read().in_sync_replicas.clone()
    }

    pub(crate) fn replicas(&self) -> Vec<NodeId> {
        self.role.read().replicas.clone()
    }

    fn not_leader(&self, state: &RoleState) -> Error {
        Error::NotLeader {
            log: self.log_id,
            epoch: state.leader_epoch,
            leader: match state.role {
                Role::Leader => Some(self.local),
                Role::Follower { leader } => Some(leader),
                Role::Offline => None,
            },
        }
    }

    /// Raises the high watermark: the log's first (committed reads are
    /// clamped to it), then the watch readers and waiters see. Both only
    /// rise, so publishers racing out of order (a leader's fetch threads)
    /// cannot move either back.
    fn publish_high_watermark(&self, hw: Offset) {
        self.log.raise_high_watermark(hw);
        self.high_watermark.publish(hw.0);
    }

    // ---- role changes -----------------------------------------------------

    /// Makes this replica the leader of `epoch` (SPEC 3.5): records
    /// `(epoch, own LEO)` in the epoch cache before anything is written, and
    /// never truncates.
    pub(crate) fn become_leader(
        &self,
        epoch: LeaderEpoch,
        replicas: Vec<NodeId>,
        in_sync_replicas: Vec<NodeId>,
        isr_version: u64,
    ) -> Result<()> {
        let _resolve = self.resolve_on_drop(false);
        let _io = self.follower_io.lock();
        let mut role = self.role.write();
        *self.needs_snapshot.lock() = None;
        self.flush_pipeline_for_role_change();
        let log_end = self.log.log_end_offset();
        // The log is this epoch's line from here on (`Log::line_epoch`).
        if let Err(error) = self
            .log
            .assign_epoch(epoch, log_end)
            .and_then(|()| self.log.note_line_epoch(epoch))
        {
            self.fail_leadership(&mut role, epoch);
            return Err(error);
        }
        let hw = Offset(self.high_watermark.get()).min(log_end);
        let now = self.clock.now();
        let leader = LeaderState::become_leader(
            LeaderAssignment {
                local: self.local,
                replicas: replicas.clone(),
                in_sync_replicas: in_sync_replicas.clone(),
                isr_version,
                leader_epoch: epoch,
            },
            LogOffsets {
                log_start_offset: self.log.log_start_offset(),
                high_watermark: hw,
                log_end_offset: self.acknowledgeable_end(),
            },
            now,
            LeaderConfig {
                min_insync_replicas: self.config.min_insync_replicas,
                replica_lag_time_max: self.config.replica_lag_time_max,
            },
        );
        let leader = match leader {
            Ok(leader) => leader,
            Err(error) => {
                self.fail_leadership(&mut role, epoch);
                return Err(error);
            }
        };
        *self.leadership_failed.lock() = None;
        let hw = leader.high_watermark();
        role.leader_isr_below_min = leader.isr_below_min();
        self.pipeline
            .combiner
            .push(|queue| queue.next_offset = log_end);
        self.pipeline.written.reset(log_end.0);
        *self.leader.lock() = Some(leader);
        *self.follower.lock() = None;
        *self.isr_proposal.lock() = None;
        role.role = Role::Leader;
        role.leader_epoch = epoch;
        role.replicas = replicas;
        role.in_sync_replicas = in_sync_replicas;
        role.isr_version = isr_version;
        self.bump_generation(&mut role, hw);
        tracing::info!(log = %self.log_id, node = %self.local, %epoch, log_end_offset = %log_end, high_watermark = %hw, "became leader");
        Ok(())
    }

    /// Makes this replica a follower of `leader` in `epoch`. Never
    /// truncates here: truncation happens only through the epoch
    /// protocol, on the first fetch answer (SPEC 3.6).
    pub(crate) fn become_follower(
        &self,
        leader: Option<NodeId>,
        epoch: LeaderEpoch,
        replicas: Vec<NodeId>,
        in_sync_replicas: Vec<NodeId>,
        isr_version: u64,
    ) {
        let _resolve = self.resolve_on_drop(false);
        let _io = self.follower_io.lock();
        let mut role = self.role.write();
        *self.needs_snapshot.lock() = None;
        self.flush_pipeline_for_role_change();
        *self.leadership_failed.lock() = None;
        *self.leader.lock() = None;
        *self.isr_proposal.lock() = None;
        role.leader_isr_below_min = None;
        role.role = match leader {
            Some(leader) => Role::Follower { leader },
            None => Role::Offline,
        };
        role.leader_epoch = epoch;
        role.replicas = replicas;
        role.in_sync_replicas = in_sync_replicas;
        role.isr_version = isr_version;
        // A new machine from the log as it is, for every leader or epoch:
        // the log is the truth for the offsets, and the machine never
        // carries a view of an earlier leader's log over.
        let follower = leader.map(|leader| {
            FollowerState::become_follower(
                leader,
                epoch,
                LogOffsets {
                    log_start_offset: self.log.log_start_offset(),
                    high_watermark: Offset(self.high_watermark.get()),
                    log_end_offset: self.log.log_end_offset(),
                },
            )
        });
        let hw = match &follower {
            Some(follower) => follower.high_watermark(),
            None => Offset(self.high_watermark.get()).min(self.log.log_end_offset()),
        };
        *self.follower.lock() = follower;
        self.bump_generation(&mut role, hw);
        tracing::info!(log = %self.log_id, node = %self.local, %epoch, ?leader, "became follower");
    }

    /// Writes what the old role queued (deferred pipelined appends, stamped
    /// by the old leader with their offsets handed out) before the role
    /// changes: they are the old leader's, and a later role must find the
    /// log as the old one left it. Called with `role` held for writing, so
    /// no appender or drainer is in the pipeline.
    fn flush_pipeline_for_role_change(&self) {
        if self.pipeline.combiner.with_state(AppendQueue::is_pending) {
            self.pipeline
                .combiner
                .exclusive(&mut |taken| self.write_taken(taken), |_| ());
        }
    }

    /// Writes the pipelined appends left queued for a fetch (deferred, see
    /// `append_as_leader`); nothing when none is. Holds `role` for reading
    /// (as every appender does), so a role change cannot pass the write.
    /// Call with no lock of the replica held.
    pub(crate) fn write_deferred(&self, by: DeferredWriter) {
        if by == DeferredWriter::Reader {
            return self.write_handed_out();
        }
        if !self.pipeline.combiner.has_deferred() {
            return;
        }
        let role = self.role.read();
        if role.role == Role::Leader {
            self.pipeline
                .combiner
                .drain_deferred(&mut |taken| self.write_taken(taken));
        }
    }

    /// On a leader, returns once every offset handed out is in the log:
    /// writes what is queued, or waits for the seat holder writing it. (A
    /// drain that finds the seat taken returns at once, and the queue's
    /// deferred flag is cleared when the holder takes it, before it writes:
    /// neither says that the log holds everything that returned.)
    fn write_handed_out(&self) {
        let role = self.role.read();
        if role.role != Role::Leader {
            return;
        }
        let handed_out = self.pipeline.combiner.with_state(|queue| queue.next_offset);
        if handed_out > self.log.log_end_offset() {
            self.pipeline
                .combiner
                .exclusive(&mut |taken| self.write_taken(taken), |_| ());
        }
    }

    /// Takes the replica out of service before its log is closed: appends
    /// fail with `NotLeader`, waiters are released, follower I/O stops.
    pub(crate) fn take_offline(&self) {
        let _resolve = self.resolve_on_drop(false);
        let _io = self.follower_io.lock();
        let mut role = self.role.write();
        *self.needs_snapshot.lock() = None;
        self.flush_pipeline_for_role_change();
        *self.leader.lock() = None;
        *self.follower.lock() = None;
        role.leader_isr_below_min = None;
        role.role = Role::Offline;
        let hw = Offset(self.high_watermark.get()).min(self.log.log_end_offset());
        self.bump_generation(&mut role, hw);
    }

    fn bump_generation(&self, role: &mut RoleState, hw: Offset) {
        role.generation += 1;
        self.generation.store(role.generation, Ordering::SeqCst);
        self.recent_writes.lock().clear();
        // Release every waiter of the old role, then reopen for the new one.
        self.high_watermark.close();
        self.high_watermark.reset(hw.0);
        // Parked long polls re-check their logs: a deposed leader answers
        // NotLeader now rather than after `wait_max`.
        self.data_arrived.bump();
        self.log.set_high_watermark(hw);
        // Pipelined appends of the old role fail (resolved by the role
        // change's caller once its locks are released).
        self.pending.request_full_scan();
    }

    /// The coordinator accepted an ISR (ours or the controller's) for the
    /// current epoch.
    pub(crate) fn update_isr(&self, in_sync_replicas: Vec<NodeId>, isr_version: u64) {
        // A shrink below min.insync.replicas fails pipelined acks=all
        // appends not committed yet (blocking ones see it in `wait_committed`).
        let _resolve = self.resolve_on_drop(true);
        let mut role = self.role.write();
        if isr_version <= role.isr_version && !role.in_sync_replicas.is_empty() {
            return;
        }
        role.in_sync_replicas = in_sync_replicas.clone();
        role.isr_version = isr_version;
        if role.role == Role::Leader {
            let mut leader = self.leader.lock();
            if let Some(leader) = leader.as_mut() {
                match leader.on_isr_accepted(in_sync_replicas, isr_version) {
                    Ok(update) => {
                        if let Some(hw) = update.advanced_to() {
                            self.publish_high_watermark(hw);
                        }
                    }
                    Err(error) => {
                        tracing::error!(log = %self.log_id, %error, "ignoring an inconsistent ISR")
                    }
                }
                role.leader_isr_below_min = leader.isr_below_min();
            }
        }
        // acks=all waiters re-check the ISR size every few milliseconds
        // (NotEnoughReplicasAfterAppend), see `wait_committed`.
    }

    // ---- leader paths -----------------------------------------------------

    /// Appends a batch as leader. With `check_isr`, fails with
    /// `NotEnoughReplicas` before appending when the ISR is too small
    /// (SPEC 3.1, `acks=all`). With `wait_written`, returns only once the
    /// batch is in the log (`acks=1`); otherwise once it is queued for the
    /// log (`acks=0`, or `acks=all`, which waits for the high watermark).
    ///
    /// With `defer` (an `acks=all` append, whose caller needs its offsets
    /// now and its outcome only once followers have fetched it: a
    /// pipelined one, or a blocking one, which then waits for the high
    /// watermark) the write may be left to the next follower fetch (see
    /// `write_deferred`), when other appends are in flight (pipelined ones
    /// queued, or blocking ones waiting for the high watermark) and
    /// followers must fetch before anything commits: those fetches then
    /// write many appends with one write, and a lone appender, which finds
    /// nothing in flight, still writes at once. (64 OS threads appending
    /// 1 KiB records with the blocking `append`: 7% more appends a second
    /// than when each wrote its own, issue 27.)
    pub(crate) fn append_as_leader(
        &self,
        batch: &RecordBatch,
        check_isr: bool,
        wait_written: bool,
        defer: bool,
    ) -> Result<LeaderAppend> {
        let role = self.role.read();
        if role.role != Role::Leader {
            debug_assert!(
                role.leader_isr_below_min.is_none(),
                "a replica that does not lead keeps a leader's ISR check"
            );
            return Err(self.not_leader(&role));
        }
        if self.stopped_for_shutdown.load(Ordering::SeqCst)
            || self.appends_stopped_in.load(Ordering::SeqCst) == u64::from(role.leader_epoch.0) + 1
        {
            // Handing leadership over (controlled shutdown): the successor
            // is not named yet; the caller retries and finds it.
            return Err(Error::NotLeader {
                log: self.log_id,
                epoch: role.leader_epoch,
                leader: None,
            });
        }
        debug_assert_eq!(
            self.leader.lock().as_ref().map(LeaderState::isr_below_min),
            Some(role.leader_isr_below_min),
            "a leader without its machine, or with a stale copy of its ISR check"
        );
        // A log whose storage failed refuses every write until its node
        // opens it again: the append fails here, before it is given
        // offsets, and nothing is appended. Given offsets, an `acks=0`
        // append (whose write errors are not reported) was acknowledged at
        // offsets nothing was ever written at, two of them at the same
        // one (simulator seed 60736899: at 652, 652 and 650 after the
        // log was poisoned); the others learned the failure only from
        // their handles.
        self.log.check_not_poisoned()?;
        if check_isr {
            if let Some((in_sync, min_insync_replicas)) = role.leader_isr_below_min {
                return Err(Error::NotEnoughReplicas {
                    in_sync,
                    min_insync_replicas,
                });
            }
        }
        let (generation, leader_epoch) = (role.generation, role.leader_epoch);
        if batch.header().producer_id.is_some() || batch.size_bytes() >= DIRECT_APPEND_BYTES_MIN {
            // Idempotent batches are checked against the producer state
            // under the log's own lock (SPEC 4), after everything queued.
            // Large batches gain nothing from combining and would pay a copy
            // and a second CRC pass in the pipeline: they go straight to
            // the log too (its `write_vectored` stamps them without a copy).
            // `exclusive` writes what was queued first and drains what is
            // queued meanwhile afterwards, so offsets stay in order.
            let (info, failed_after_write) = self.pipeline.combiner.exclusive(
                &mut |taken| self.write_taken(taken),
                |queue| -> Result<(AppendInfo, Option<Error>)> {
                    // The seat is held: no other write moves the log end
                    // until this returns, so a move is this batch's.
                    let end_before = self.log.log_end_offset();
                    let healthy_before = !self.log.is_poisoned();
                    let appended = self.log.append_as_leader(batch, leader_epoch);
                    // Whatever the outcome: an append can fail after its
                    // write (the fsync its flush policy asked for, a roll's
                    // flush, a crash poisoning the log in between), and the
                    // batch is then in the log. A queue still stamping from
                    // before it would give the next append the same offsets,
                    // and that append's acks=all waiter would be released by
                    // the high watermark passing this batch although its own
                    // write failed (an acknowledged record lost: the fault
                    // test's seed 2 with reassignments, under load).
                    // Never lowered, though: after a combined write failed
                    // (the log poisoned, its offsets handed out and never
                    // written) the queue is past the log end, and setting
                    // it back would hand those offsets out again, to
                    // appends stamped before they learn of the poison (an
                    // `acks=0` one is answered with them).
                    let end_after = self.log.log_end_offset();
                    queue.next_offset = queue.next_offset.max(end_after);
                    // Written, then failed (the log end moved), or failed
                    // in its write (the log was poisoned by this call: a
                    // failed write may have put the whole batch on disk,
                    // which the next open's recovery keeps, SPEC 2.3): the
                    // batch may be in the log at the offsets it would have
                    // had, so its outcome is unknown and those offsets are
                    // never handed out again. Errors that leave the log
                    // healthy (a fenced epoch, a producer's sequence, a
                    // batch too large) came before any write, and so did a
                    // `Poisoned` refusal: another thread poisoned the log
                    // (a flusher's failed fsync, a halt) while this call
                    // waited (helper-159's review). Only this call's own
                    // `Io` may have written (or its roll's, which wrote
                    // nothing: counted unknown, the cautious side).
                    let written = end_after > end_before;
                    let failed_writing = healthy_before
                        && self.log.is_poisoned()
                        && matches!(appended, Err(Error::Io { .. }));
                    match appended {
                        Ok(info) => Ok((info, None)),
                        Err(error) if written || failed_writing => {
                            let end = end_before.plus(u64::from(batch.record_count()));
                            debug_assert!(
                                !written || end_after == end,
                                "a failed direct write moved the log end to {end_after}, not past its batch to {end}"
                            );
                            queue.next_offset = queue.next_offset.max(end);
                            let info = AppendInfo {
                                base_offset: end_before,
                                last_offset: end_before
                                    .plus(u64::from(batch.header().last_offset_delta)),
                                log_end_offset: end,
                                leader_epoch,
                                duplicate: false,
                            };
                            Ok((info, Some(error)))
                        }
                        Err(error) => Err(error),
                    }
                },
            )?;
            if failed_after_write.is_none() {
                self.after_leader_write(info.log_end_offset);
            }
            return Ok(LeaderAppend {
                info,
                generation,
                leader_epoch,
                deferred: false,
                failed_after_write,
            });
        }
        self.log.check_batch_size(batch.size_bytes())?;
        self.pipeline.pushes.fetch_add(1, Ordering::Relaxed);
        // Deferring needs a fetch that will come: a follower in the ISR
        // (without one, a lone leader commits on its own write), and no
        // fsync left to a fetch answer (`FlushPolicy::Always`).
        let defer = defer
            && !self.flush_always
            && role.in_sync_replicas.len() > 1
            && (self.pending.queued() > 0 || self.high_watermark.has_waiters());
        let stamp = |queue: &mut AppendQueue| {
            let base_offset = queue.next_offset;
            // Offsets handed out are never below the log's end: they would
            // be another batch's.
            debug_assert!(
                base_offset >= self.log.log_end_offset(),
                "stamping offset {base_offset} below the log end {}",
                self.log.log_end_offset()
            );
            queue.push_batch(batch, base_offset, leader_epoch);
            queue.next_offset = base_offset.plus(u64::from(batch.record_count()));
            AppendInfo {
                base_offset,
                last_offset: base_offset.plus(u64::from(batch.header().last_offset_delta)),
                log_end_offset: queue.next_offset,
                leader_epoch,
                duplicate: false,
            }
        };
        let (info, deferral) = if defer {
            self.pipeline.combiner.push_deferred(|queue| {
                let deferred = queue.pending.len() < DEFERRED_BYTES_MAX;
                (stamp(queue), deferred)
            })
        } else {
            (self.pipeline.combiner.push(stamp), Deferral::Drain)
        };
        if deferral.is_deferred() {
            drop(role);
            // Parked fetches wake and write it (`answer_fetch`). Behind
            // another deferred append, that one's bump wakes them, and
            // their take writes both.
            if deferral == Deferral::First {
                self.data_arrived.bump();
            }
            return Ok(LeaderAppend {
                info,
                generation,
                leader_epoch,
                deferred: true,
                failed_after_write: None,
            });
        }
        self.pipeline
            .combiner
            .drain_gathering(|| self.gather(), &mut |taken| self.write_taken(taken));
        drop(role);
        if wait_written {
            self.wait_written(info.log_end_offset, generation)?;
        }
        Ok(LeaderAppend {
            info,
            generation,
            leader_epoch,
            deferred: false,
            failed_after_write: None,
        })
    }

    /// Run by the pipeline's seat holder before it takes the queue: while
    /// other producers wait for their appends (so more are likely on their
    /// way — producers the last high watermark released, runnable but not
    /// yet running), give up the core for as long as that brings new
    /// pushes, at most `GATHER_YIELDS_MAX` times. On two cores with dozens
    /// of producers this turns one `write` per record into one per round;
    /// a lone producer never waits here.
    fn gather(&self) {
        if !self.high_watermark.has_waiters() && !self.pipeline.written.has_waiters() {
            return;
        }
        let mut seen = self.pipeline.pushes.load(Ordering::Relaxed);
        for _ in 0..GATHER_YIELDS_MAX {
            std::thread::yield_now();
            let now = self.pipeline.pushes.load(Ordering::Relaxed);
            if now == seen {
                return;
            }
            seen = now;
        }
    }

    /// The combiner's write: appends batches taken from the queue with
    /// one write. Called holding the writer seat (so takes are written in
    /// the order they were taken), not the queue's lock: appenders keep
    /// queueing meanwhile. A failure poisons the log and is recorded for
    /// the waiters.
    fn write_taken(&self, mut taken: Taken) {
        for &at in &taken.crc_due {
            seal_crc(&mut taken.bytes, at);
        }
        let bytes = taken.bytes.freeze();
        match self.log.append_as_follower(&bytes) {
            Ok(info) => {
                debug_assert_eq!(info.log_end_offset, taken.log_end_offset);
                // Before fetches are told of it: the next fetch finds it
                // here rather than reading it back from the file.
                self.recent_writes.lock().record(
                    self.generation.load(Ordering::SeqCst),
                    info.base_offset,
                    info.log_end_offset,
                    bytes,
                );
                self.after_leader_write(info.log_end_offset);
            }
            Err(error) => {
                tracing::error!(log = %self.log_id, %error, "leader append failed");
                crate::simulation::note_handled_error(&error);
                // Not every failed append poisons the log by itself, but
                // this one had its offsets handed out already (the queue's
                // `next_offset` is past the log end): the log must take no
                // more work, or later batches would reuse those offsets and
                // the batch's waiters could be acknowledged for a write that
                // never happened. A poisoned leader resigns.
                self.log.poison(&format!("leader append failed: {error}"));
                *self.pipeline.failure.lock() = Some(error.to_string());
                self.pipeline.failed.store(true, Ordering::SeqCst);
                self.pipeline.written.close();
                // acks=all waiters fail now with the cause, not at their
                // timeout.
                self.high_watermark.close();
                self.pending.request_full_scan();
            }
        }
    }

    /// After a leader write: the high watermark (a lone leader commits at
    /// once), the written mark, and parked fetches.
    fn after_leader_write(&self, log_end_offset: Offset) {
        if let Some(leader) = self.leader.lock().as_mut() {
            // Read the end under the lock: concurrent writers then report
            // it in increasing order (a leader's log end never moves back).
            let end = self.acknowledgeable_end().max(leader.log_end_offset());
            if let Some(hw) = leader.on_local_append(end).advanced_to() {
                self.publish_high_watermark(hw);
            }
        }
        self.pipeline.written.publish(log_end_offset.0);
        // Wake parked fetches only after the append is readable.
        self.data_arrived.bump();
    }

    /// `Poisoned` with the cause of the pipeline's failed write, if one
    /// failed.
    fn pipeline_failure(&self) -> Option<Error> {
        let reason = self.pipeline.failure.lock().clone()?;
        Some(self.poisoned(reason))
    }

    fn poisoned(&self, reason: String) -> Error {
        Error::Poisoned {
            path: self.log.dir().to_path_buf(),
            reason,
        }
    }

    /// Waits until the pipeline wrote up to `end` (`acks=1`).
    fn wait_written(&self, end: Offset, generation: u64) -> Result<()> {
        let deadline = Instant::now() + self.config.request_timeout;
        let mut spin = self.config.spin_before_park;
        // A failed write records its cause before the seat holder lets go of
        // `role`, so before any role change completes.
        let failed = || self.pipeline_failure();
        loop {
            let slice_end = deadline.min(Instant::now() + Duration::from_millis(5));
            match self.pipeline.written.wait_at_least(end.0, slice_end, spin) {
                WaitOutcome::Reached(_) => {
                    // After a role change the mark may be a later role's.
                    if self.generation.load(Ordering::SeqCst) != generation {
                        if let Some(error) = failed() {
                            return Err(error);
                        }
                    }
                    return Ok(());
                }
                WaitOutcome::Closed => {
                    // Only a failed write closes `written`.
                    debug_assert!(failed().is_some(), "written closed without a failure");
                    return Err(failed().unwrap_or_else(|| self.poisoned(String::new())));
                }
                WaitOutcome::TimedOut => {}
            }
            spin = Duration::ZERO;
            // A role change happens only once everything pending was
            // written (the pipeline's invariant) or the write failed (and
            // said so above): without a failure, the batch is in the log.
            if self.generation.load(Ordering::SeqCst) != generation {
                return match failed() {
                    Some(error) => Err(error),
                    None => Ok(()),
                };
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    waited: self.config.request_timeout,
                    waiting_for: "the leader to write the batch",
                });
            }
        }
    }

    /// Waits until `offset` is committed, for an `acks=all` append made in
    /// `generation` (SPEC 3.1). Fails with `Shutdown` within a few
    /// milliseconds once `node_stopped` says the node stopped: no follower
    /// can fetch from it any more, so the wait could only time out (a
    /// shutdown's role change would otherwise say `NotLeader`). `started`
    /// is when the wait began, as the caller just read it: the wait times
    /// out `request_timeout` after it.
    pub(crate) fn wait_committed(
        &self,
        offset: Offset,
        generation: u64,
        started: Instant,
        node_stopped: impl Fn() -> bool,
    ) -> Result<Offset> {
        let deadline = started + self.config.request_timeout;
        let mut spin = self.config.spin_before_park;
        // The first slice starts at `started`, which the caller just read:
        // one clock read less on the path of every blocking `acks=all`
        // append (64 thread clients appending 1 KiB records read the clock
        // about six times per append; those reads were 5% of all samples).
        let mut slice_end = deadline.min(started + ISR_RECHECK_INTERVAL);
        loop {
            if self.generation.load(Ordering::SeqCst) != generation {
                let role = self.role.read();
                return Err(self.append_ended(&role, node_stopped()));
            }
            match self
                .high_watermark
                .wait_at_least(offset.0 + 1, slice_end, spin)
            {
                WaitOutcome::Reached(hw) => {
                    if self.generation.load(Ordering::SeqCst) != generation {
                        let role = self.role.read();
                        return Err(self.append_ended(&role, node_stopped()));
                    }
                    return Ok(Offset(hw));
                }
                WaitOutcome::Closed => return Err(self.high_watermark_closed(node_stopped())),
                WaitOutcome::TimedOut => {}
            }
            spin = Duration::ZERO;
            let now = Instant::now();
            // Re-check the ISR at least every few milliseconds: its
            // shrinking is not a high watermark event.
            slice_end = deadline.min(now + ISR_RECHECK_INTERVAL);
            let past_deadline = now >= deadline;
            if let Some(outcome) =
                self.acks_all_decision(offset, generation, node_stopped(), past_deadline)
            {
                return outcome;
            }
            if past_deadline {
                return Err(Error::Timeout {
                    waited: started.elapsed(),
                    waiting_for: "the high watermark to pass the appended batch",
                });
            }
        }
    }

    /// [`wait_committed`](Self::wait_committed) without its waits, for a
    /// caller that steps the node instead of blocking on it (the
    /// simulator's blocking clients): the outcome of the `acks=all`
    /// append of `offset` made in `generation` if it is known now, as the
    /// wait would return it (a timeout once `past_deadline`, which the
    /// caller reads off its clock); `None` while it would go on waiting.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn committed_now(
        &self,
        offset: Offset,
        generation: u64,
        node_stopped: bool,
        past_deadline: bool,
    ) -> Option<Result<Offset>> {
        if self.generation.load(Ordering::SeqCst) != generation {
            let role = self.role.read();
            return Some(Err(self.append_ended(&role, node_stopped)));
        }
        // As `Watch::wait_at_least` decides: reached before closed.
        let hw = self.high_watermark.get();
        if hw > offset.0 {
            return Some(Ok(Offset(hw)));
        }
        if self.high_watermark.is_closed() {
            return Some(Err(self.high_watermark_closed(node_stopped)));
        }
        if let Some(outcome) =
            self.acks_all_decision(offset, generation, node_stopped, past_deadline)
        {
            return Some(outcome);
        }
        past_deadline.then_some(Err(Error::Timeout {
            waited: self.config.request_timeout,
            waiting_for: "the high watermark to pass the appended batch",
        }))
    }

    /// Why an append made in an earlier generation of the role ends:
    /// `Shutdown` once the node stopped, else `NotLeader`.
    fn append_ended(&self, role: &RoleState, node_stopped: bool) -> Error {
        if node_stopped {
            Error::Shutdown
        } else {
            self.not_leader(role)
        }
    }

    /// Why an `acks=all` wait ends when the high watermark closed: the
    /// pipeline's failed write, or the role's end.
    fn high_watermark_closed(&self, node_stopped: bool) -> Error {
        if let Some(error) = self.pipeline_failure() {
            return error;
        }
        let role = self.role.read();
        self.append_ended(&role, node_stopped)
    }

    /// What an `acks=all` wait for `offset` (made in `generation`)
    /// decides once the published high watermark has not passed it:
    /// `None` to go on waiting. The leader machine decides (SPEC 3.1):
    /// committed before the ISR shrank is a success, the error is for an
    /// ISR that shrank *before* the batch was committed.
    fn acks_all_decision(
        &self,
        offset: Offset,
        generation: u64,
        node_stopped: bool,
        past_deadline: bool,
    ) -> Option<Result<Offset>> {
        if node_stopped {
            return Some(Err(Error::Shutdown));
        }
        let role = self.role.read();
        if role.generation != generation {
            return Some(Err(self.append_ended(&role, node_stopped)));
        }
        let (progress, machine_hw) = match self.leader.lock().as_ref() {
            Some(leader) => (leader.acks_all_progress(offset), leader.high_watermark()),
            None => return Some(Err(self.append_ended(&role, node_stopped))),
        };
        match progress {
            AcksAllProgress::Committed => {
                // The machine's high watermark is published right after
                // it moves; acknowledge once readers see it too (the wait
                // returns at once then), or at the deadline, since it is
                // committed either way.
                let published = self.high_watermark.get();
                (published > offset.0 || past_deadline)
                    .then(|| Ok(Offset(published).max(machine_hw)))
            }
            AcksAllProgress::Waiting => None,
            AcksAllProgress::NotEnoughReplicasAfterAppend {
                in_sync,
                min_insync_replicas,
            } => Some(Err(Error::NotEnoughReplicasAfterAppend {
                in_sync,
                min_insync_replicas,
            })),
        }
    }

    // ---- pipelined appends ------------------------------------------------

    fn resolve_on_drop(&self, check_isr: bool) -> ResolveOnDrop<'_> {
        ResolveOnDrop {
            replica: self,
            check_isr,
        }
    }

    /// Reserves `bytes` of the pipelined in-flight bound, blocking up to
    /// `pipelined_block_max` for room.
    pub(crate) fn reserve_pipelined(&self, bytes: usize) -> Result<()> {
        self.pending.reserve(
            self.log_id,
            bytes,
            self.config.pipelined_bytes_max,
            self.config.pipelined_block_max,
        )
    }

    /// Gives back a reservation whose append was not queued.
    pub(crate) fn release_pipelined(&self, bytes: usize) {
        self.pending.release(bytes);
    }

    /// Bytes held by pipelined appends whose outcome is not known yet, and
    /// the most ever held.
    pub(crate) fn pipelined_bytes_in_flight(&self) -> (usize, usize) {
        self.pending.bytes_in_flight()
    }

    /// Pipelined appends whose outcome is not known yet.
    pub(crate) fn pipelined_pending(&self) -> usize {
        self.pending.queued()
    }

    /// Whether a pipelined append made now has no company: no other
    /// pipelined append of this log is pending, and the latest resolution
    /// pass resolved at most one. Right after a pass resolves many, none
    /// is pending for a moment, yet the tasks it woke are about to append
    /// again; a handle that spun for its outcome then (see
    /// `AppendHandle::with_spin`) held its executor's worker, with those
    /// tasks queued behind it, for a whole fetch round trip (256 async
    /// clients appending 100 B records: 31% of the process's
    /// `sched_yield` calls came from such spins).
    pub(crate) fn pipelined_alone(&self) -> bool {
        self.pending.queued() == 0 && self.last_pass_resolved.load(Ordering::Relaxed) <= 1
    }

    /// What the pending appends' outcomes are decided from. The high
    /// watermark and written mark are read before the generation: a role
    /// change stores its generation before it resets them, so a value of a
    /// later role always comes with that role's generation.
    fn pipelined_snapshot(
        &self,
        stopped: bool,
        isr_short: Option<(usize, usize)>,
        now: Option<Instant>,
    ) -> Snapshot {
        let high_watermark = self.high_watermark.get();
        let written = self.pipeline.written.get();
        let generation = self.generation.load(Ordering::SeqCst);
        let failed = self.pipeline.failed.load(Ordering::SeqCst);
        Snapshot {
            generation,
            high_watermark,
            written,
            failed,
            stopped: stopped || self.node_stopped(),
            isr_short,
            now,
        }
    }

    /// Queues a pipelined append (its bytes reserved) made in
    /// `appended.generation`; resolves it at once if its outcome is known
    /// already. Call with no lock of the replica held.
    pub(crate) fn queue_pipelined(
        &self,
        appended: &LeaderAppend,
        acks_all: bool,
        bytes: usize,
        cell: Arc<Completion>,
    ) {
        let append = PendingAppend {
            outcome: AppendOutcome {
                base_offset: appended.info.base_offset,
                last_offset: appended.info.last_offset,
                leader_epoch: appended.info.leader_epoch,
                duplicate: appended.info.duplicate,
            },
            end: appended.info.log_end_offset,
            acks_all,
            generation: appended.generation,
            // Set by the next scan that reads the replica's clock
            // (`expire_pipelined` at the latest, on the deadline timer's
            // next tick), unless a fetch resolves it before.
            deadline: None,
            ahead: false,
            bytes,
            cell,
            resolved: false,
        };
        let decide = |append: &PendingAppend, stopped: bool| {
            super::pending::verdict(append, &self.pipelined_snapshot(stopped, None, None))
        };
        // Almost every append still waits when it is queued: it hands
        // nothing over, so it needs no place in the order of hand-overs
        // and is queued without `resolving`, which every fetch's
        // resolution pass holds (one lock pair less per append).
        let Some(append) = self.pending.queue_if_waiting(append, decide) else {
            return;
        };
        // Its outcome is known already: decide it again, in order with
        // the other passes (a decided append stays decided).
        let _order = self.resolving.lock();
        let settled = self.pending.queue(append, decide);
        if let Some((append, verdict)) = settled {
            self.resolve_decided(vec![(append, verdict)]);
        }
    }

    /// Resolves the pipelined appends whose outcome became known: on the
    /// hot paths (a fetch, an append) only those at the fronts of the
    /// queues, unless a role change or failed write asked for a full scan.
    /// Call with no lock of the replica held.
    pub(crate) fn resolve_pipelined(&self) {
        if self.pending.is_idle() {
            return;
        }
        let _order = self.resolving.lock();
        let full = self.pending.take_full_scan();
        // The replica's clock, which sets the deadlines: the real one ran
        // ahead of a simulated run's (a slow replay timed appends out early).
        // Read under the queues' lock (see `Snapshot::now`).
        let decided = self.pending.scan(
            |stopped| self.pipelined_snapshot(stopped, None, full.then(|| self.clock.now())),
            full,
        );
        self.resolve_decided(decided);
    }

    /// Looks at every pending append: deadlines, and with `check_isr` an
    /// ISR below `min.insync.replicas` (as `wait_committed` checks it).
    fn resolve_pipelined_full(&self, check_isr: bool) {
        if self.pending.is_idle() {
            return;
        }
        let isr_short = if check_isr {
            self.leader
                .lock()
                .as_ref()
                .and_then(LeaderState::isr_below_min)
        } else {
            None
        };
        let _order = self.resolving.lock();
        let _ = self.pending.take_full_scan();
        let decided = self.pending.scan(
            |stopped| self.pipelined_snapshot(stopped, isr_short, Some(self.clock.now())),
            true,
        );
        self.resolve_decided(decided);
    }

    /// The node's periodic tick: ISR shrinks (and deadlines) of pipelined
    /// appends, on the control loop's tick.
    pub(crate) fn tick_pipelined(&self) {
        // Should no fetch come to write appends left for one (followers cut
        // off, or an ISR that shrank to this leader, which then commits on
        // its own write), they are written here, a tick late. Not on the
        // deadline timer: a write may wait for the disk (dirty page
        // throttling), and the timer must stay on time.
        self.write_deferred(DeferredWriter::Drainer);
        self.resolve_pipelined_full(true);
    }

    /// The node's deadline timer: fails with `Timeout` the pipelined
    /// appends whose deadline passed, and gives the appends queued since
    /// its last tick their deadline (see `PendingAppend::deadline`). It
    /// looks at the fronts of the queues only (appends are queued in offset
    /// order, and their deadlines follow that order but for appenders
    /// racing by microseconds: one queued just after a tick, before an
    /// append of a higher offset queued just before it, has a deadline one
    /// tick later, and holds that one back by a tick at most), takes no
    /// lock a coordinator call can hold, and so is on time whatever the
    /// control loop is doing.
    pub(crate) fn expire_pipelined(&self) {
        if self.pending.queued() == 0 {
            return;
        }
        let _order = self.resolving.lock();
        // Read under the queues' lock: it also stamps the deadlines of the
        // appends queued since the last tick.
        let decided = self.pending.scan(
            |stopped| self.pipelined_snapshot(stopped, None, Some(self.clock.now())),
            false,
        );
        self.resolve_decided(decided);
    }

    /// The node stopped: every pending pipelined append fails with
    /// `Shutdown` (unless already decided otherwise), and so does every
    /// later one.
    pub(crate) fn stop_pipelined(&self) {
        self.pending.stop();
        self.pending.request_full_scan();
        self.resolve_pipelined_full(false);
    }

    /// Hands decided appends their outcomes (errors built as the blocking
    /// waits build them), in one pass: blocked owners wake as their cells
    /// are written, and the wakers and callbacks of the whole pass go to
    /// the node's completion thread in one step, in order.
    fn resolve_decided(&self, decided: super::pending::Decided) {
        if decided.is_empty() {
            return;
        }
        self.last_pass_resolved
            .store(decided.len(), Ordering::Relaxed);
        let mut wakeups = self.pending.wakeups();
        for (append, verdict) in decided {
            let outcome = match verdict {
                Verdict::Ok => Ok(append.outcome),
                Verdict::Wait => {
                    // Never: scans hand over decided appends only. Should
                    // one come, it gets what `PendingAppend`'s drop would
                    // give it, but in this pass, so that its callback
                    // still runs on the completion thread.
                    debug_assert!(false, "an undecided append was resolved");
                    Err(Error::Shutdown)
                }
                Verdict::RoleChanged => Err(if self.pending_stopped() {
                    Error::Shutdown
                } else {
                    let role = self.role.read();
                    self.not_leader(&role)
                }),
                Verdict::Failed => Err(self
                    .pipeline_failure()
                    .unwrap_or_else(|| self.poisoned(String::new()))),
                Verdict::Stopped => Err(Error::Shutdown),
                Verdict::IsrShort {
                    in_sync,
                    min_insync_replicas,
                } => Err(Error::NotEnoughReplicasAfterAppend {
                    in_sync,
                    min_insync_replicas,
                }),
                Verdict::TimedOut => Err(Error::Timeout {
                    waited: self.config.request_timeout,
                    waiting_for: if append.acks_all {
                        "the high watermark to pass the appended batch"
                    } else {
                        "the leader to write the batch"
                    },
                }),
            };
            append.resolve_into(outcome, &mut wakeups);
        }
        wakeups.hand_over();
    }

    fn pending_stopped(&self) -> bool {
        self.pending.is_stopped() || self.node_stopped()
    }

    /// Records the stop flag of the node hosting this replica (the first
    /// call wins). The node must raise it when it stops (shut down, halted
    /// or crashed) and when it is dropped.
    pub(crate) fn set_node_stop(&self, stop: &Arc<AtomicBool>) {
        // Every `Node::log` call lands here: once set, no reference is
        // cloned (and dropped) only to be refused.
        if self.node_stop.get().is_some() {
            return;
        }
        let _ = self.node_stop.set(Arc::clone(stop));
    }

    /// Whether the hosting node stopped (or is gone).
    fn node_stopped(&self) -> bool {
        self.node_stop
            .get()
            .is_some_and(|stop| stop.load(Ordering::SeqCst))
    }

    /// Answers one log of a follower's fetch (SPEC 3.2). An empty answer may
    /// be held (long poll) and the fetch answered again when data arrives:
    /// `arrival` says when the fetch arrived and whether this is its first
    /// evaluation, for it vouches for its follower only as of then (SPEC
    /// 3.4, `LeaderState::on_fetch`). `incarnation` is the follower's, which
    /// the node checked is its current one before calling (SPEC 3.2).
    ///
    /// At most `bytes_max` bytes of records are returned, except that with
    /// `min_one_batch` the first batch is returned whatever its size (Kafka's
    /// `minOneMessage`: the first log of a fetch answer with data may exceed
    /// the budget so that a large batch still moves).
    ///
    /// An answer that may restart the follower's log at this log's start
    /// (`OffsetOutOfRange`, or diverging) names an epoch whose leader's
    /// log held the records below that start (`Log::epoch_below`:
    /// `FetchedLog::log_start_epoch`), which the follower notes as its
    /// start line; an `OffsetOutOfRange` answer, which restarts a
    /// follower whose log starts past this log's end at that end, names
    /// one below the end too (`FetchedLog::log_end_epoch`). Looked up
    /// only for those, off the path of the answers that carry records.
    pub(crate) fn answer_fetch(
        &self,
        follower: NodeId,
        request: &FetchLog,
        bytes_max: usize,
        min_one_batch: bool,
        arrival: FetchArrival,
        incarnation: Incarnation,
    ) -> FetchedLog {
        let mut answer = self.answer_fetch_unnamed(
            follower,
            request,
            bytes_max,
            min_one_batch,
            arrival,
            incarnation,
        );
        if answer.error == ErrorCode::OffsetOutOfRange || answer.diverging.is_some() {
            answer.log_start_epoch = self
                .epoch_below_as_leader_of(request.current_leader_epoch, answer.log_start_offset);
        }
        if answer.error == ErrorCode::OffsetOutOfRange {
            answer.log_end_epoch =
                self.epoch_below_as_leader_of(request.current_leader_epoch, answer.log_end_offset);
        }
        answer
    }

    /// `Log::epoch_below(offset)`, named only while this replica leads in
    /// `epoch`, under the role's lock as the rest of an answer made in it:
    /// after a demotion, a restart of this log at the same offset on
    /// another history would name an epoch of that one.
    fn epoch_below_as_leader_of(&self, epoch: LeaderEpoch, offset: Offset) -> Option<LeaderEpoch> {
        let role = self.role.read();
        let named = (role.role == Role::Leader && role.leader_epoch == epoch)
            .then(|| self.log.epoch_below(offset))
            .flatten();
        // A leader's log holds no epoch newer than the one it leads in.
        debug_assert!(
            named <= Some(role.leader_epoch),
            "{named:?} named by the leader of {:?}",
            role.leader_epoch
        );
        named
    }

    /// [`answer_fetch`](Self::answer_fetch) without the epochs below the
    /// log start and end.
    fn answer_fetch_unnamed(
        &self,
        follower: NodeId,
        request: &FetchLog,
        bytes_max: usize,
        min_one_batch: bool,
        arrival: FetchArrival,
        incarnation: Incarnation,
    ) -> FetchedLog {
        // The fetch may move the high watermark past pipelined appends.
        let _resolve = self.resolve_on_drop(false);
        // Pipelined appends left for this fetch go into the log first, so
        // that it reads them.
        self.write_deferred(DeferredWriter::Drainer);
        let mut answer = FetchedLog {
            log: self.log_id,
            error: ErrorCode::None,
            high_watermark: self.high_watermark(),
            log_start_offset: self.log.log_start_offset(),
            log_end_offset: self.log.log_end_offset(),
            log_start_epoch: None,
            log_end_epoch: None,
            diverging: None,
            records: Bytes::new(),
            applied_offsets: Vec::new(),
        };
        let role = self.role.read();
        if role.role != Role::Leader {
            answer.error = ErrorCode::NotLeader;
            return answer;
        }
        // 1. Fencing (checked again by the state machine).
        if request.current_leader_epoch < role.leader_epoch {
            answer.error = ErrorCode::FencedLeaderEpoch;
            return answer;
        }
        if request.current_leader_epoch > role.leader_epoch {
            answer.error = ErrorCode::UnknownLeaderEpoch;
            return answer;
        }
        if request.fetch_offset < self.log.log_start_offset() {
            answer.error = ErrorCode::OffsetOutOfRange;
            return answer;
        }
        // 2. Divergence (a diverging fetch acknowledges nothing).
        let lookup = request
            .last_fetched_epoch
            .and_then(|epoch| self.log.end_offset_for_epoch(epoch));
        // An epoch older than every epoch this leader still knows: the
        // follower's records in it lie below what this leader deleted (a
        // record at or past its log start is in a known epoch), so it can
        // vouch for none of them, even where the cache's answer `(e, log
        // start)` reaches the fetch offset (simulator seed 20012215: a
        // follower's records of a deposed leader's epoch survived below the
        // log start, under records committed in a later epoch). Diverging,
        // at the log start: the follower then discards what it holds below
        // it (`apply_fetched_to`). Kafka answers from the same cache (KIP-101)
        // without this check.
        let older_than_known = request
            .last_fetched_epoch
            .zip(self.log.earliest_epoch())
            .is_some_and(|(epoch, earliest)| epoch < earliest);
        let divergence = match lookup {
            Some(end) if older_than_known => Divergence::Diverging(end),
            _ => check_divergence(request.fetch_offset, request.last_fetched_epoch, lookup),
        };
        match divergence {
            Divergence::Consistent => {}
            Divergence::Diverging(end) => {
                // The follower truncates as told: its next fetch may be
                // below the log end recorded for it.
                if let Some(leader) = self.leader.lock().as_mut() {
                    leader.on_diverging_answer(follower, incarnation);
                }
                answer.diverging = Some(end);
                return answer;
            }
            Divergence::UndefinedEpoch => {
                // Kafka answers OFFSET_OUT_OF_RANGE here (Partition.readRecords).
                answer.error = ErrorCode::OffsetOutOfRange;
                return answer;
            }
        }
        // A fetch past the log end (the follower's log is longer, and names
        // no last epoch the check above could use: say, a log reopened
        // empty at its old start) vouches for nothing: the follower
        // truncates to the leader's end (Kafka: OFFSET_OUT_OF_RANGE, then
        // `handleOutOfRangeError`). Counting it at the clamped offset would
        // take it for caught up on records it does not hold.
        if request.fetch_offset > self.log.log_end_offset() {
            answer.error = ErrorCode::OffsetOutOfRange;
            return answer;
        }
        // 3. The fetch acknowledges everything below its offset — but under
        // `FlushPolicy::Always` no more than the leader itself has flushed,
        // so the high watermark never passes data that is not on the
        // leader's disk.
        let acknowledged = request.fetch_offset.min(self.acknowledgeable_end());
        let decision = {
            let mut leader = self.leader.lock();
            match leader.as_mut() {
                Some(leader) => {
                    // Under `Always`, a concurrent append may have been
                    // flushed since its own bookkeeping: catch up first.
                    let end = self.acknowledgeable_end().max(leader.log_end_offset());
                    if let Some(hw) = leader.on_local_append(end).advanced_to() {
                        self.publish_high_watermark(hw);
                    }
                    let epoch = leader.leader_epoch();
                    leader.on_fetch_of_line(
                        follower,
                        acknowledged,
                        request.current_leader_epoch,
                        arrival,
                        incarnation,
                        request.is_on_line_of(epoch),
                    )
                }
                None => {
                    answer.error = ErrorCode::NotLeader;
                    return answer;
                }
            }
        };
        match decision {
            FetchDecision::Accepted {
                high_watermark,
                isr_proposal,
            } => {
                // Only a fetch the leader accepted reports a position.
                if let Some(applied) = request.applied_offset {
                    self.applied.set(follower, applied);
                }
                if let Some(hw) = high_watermark.advanced_to() {
                    self.publish_high_watermark(hw);
                }
                if let Some(proposal) = isr_proposal {
                    *self.isr_proposal.lock() = Some(proposal);
                }
            }
            FetchDecision::Rejected(rejection) => {
                answer.error = match rejection {
                    FetchRejection::FencedLeaderEpoch { .. } => ErrorCode::FencedLeaderEpoch,
                    FetchRejection::UnknownLeaderEpoch { .. } => ErrorCode::UnknownLeaderEpoch,
                    FetchRejection::UnknownFollower { .. } => ErrorCode::InvalidRequest,
                    FetchRejection::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
                    FetchRejection::StaleIncarnation { .. } => ErrorCode::StaleIncarnation,
                };
                return answer;
            }
        }
        answer.high_watermark = self.high_watermark();
        let limit = bytes_max
            .min(request.bytes_max as usize)
            .min(self.config.fetch_bytes_max as usize);
        // The pipeline's recent writes are answered from memory
        // (`RecentWrites`): bytes this leader stamped and wrote a moment
        // ago, which damage on its disk cannot reach, so SPEC 2.3's
        // read-time checks (against a changed byte on disk) have nothing to
        // find in them. Older data is read from the file and checked; a
        // poisoned log answers with its error as before.
        let recent = if self.log.is_poisoned() {
            None
        } else {
            self.recent_writes
                .lock()
                .read(role.generation, request.fetch_offset, limit)
        };
        let read = if let Some(records) = recent {
            Ok(records)
        } else if limit == 0 && !min_one_batch {
            Ok(Bytes::new())
        } else {
            self.log
                .read(request.fetch_offset, limit)
                .map(|read| read.records)
        };
        match read {
            // The log always reads at least one batch; over the limit it is
            // dropped here unless this answer may carry one batch regardless.
            Ok(records) if records.len() > limit && !min_one_batch => {}
            Ok(records) => answer.records = records,
            Err(Error::OffsetOutOfRange { .. }) => answer.error = ErrorCode::OffsetOutOfRange,
            Err(e) => {
                tracing::warn!(log = %self.log_id, error = %e, "read for a fetch failed");
                crate::simulation::note_handled_error(&e);
                answer.error = ErrorCode::from_error(&e);
            }
        }
        answer.log_end_offset = self.log.log_end_offset();
        answer.applied_offsets = self.applied.to_vec();
        answer
    }

    /// Whether an ISR proposal waits for the control loop.
    pub(crate) fn has_isr_proposal(&self) -> bool {
        self.isr_proposal.lock().is_some()
    }

    /// A pending ISR proposal for the control loop, if any.
    pub(crate) fn take_isr_proposal(&self) -> Option<IsrProposal> {
        self.isr_proposal.lock().take()
    }

    /// Periodic leader work: ISR shrink (SPEC 3.4).
    pub(crate) fn tick(&self) -> Option<IsrProposal> {
        let role = self.role.read();
        if role.role != Role::Leader {
            return None;
        }
        let now = self.clock.now();
        let mut leader = self.leader.lock();
        leader.as_mut().and_then(|leader| leader.tick(now))
    }

    /// Leader only: deletes whole segments beyond the retention limits,
    /// never one holding an offset at or above the high watermark (SPEC
    /// 2.6). Followers follow the leader's log start from fetch answers.
    pub(crate) fn apply_retention(&self) {
        // Every replica keeps the positions, for when it leads.
        self.store_applied_positions();
        let latest = self.latest_snapshot();
        let role = self.role.read();
        if role.role != Role::Leader {
            return;
        }
        let limit = match self.deletion_bound_in(&role, latest) {
            Ok(bound) => bound.bound,
            Err(error) => {
                tracing::warn!(log = %self.log_id, %error, "cannot compute the deletion bound; retention waits");
                return;
            }
        };
        match self.log.delete_segments_by_retention(limit) {
            Ok(0) => {}
            Ok(deleted) => {
                let start = self.log.log_start_offset();
                tracing::info!(log = %self.log_id, deleted, log_start_offset = %start, "retention deleted segments");
                if let Some(leader) = self.leader.lock().as_mut() {
                    leader.on_log_start_offset(start);
                }
            }
            Err(error) => {
                tracing::warn!(log = %self.log_id, %error, "retention failed");
                crate::simulation::note_handled_error(&error);
            }
        }
    }

    /// The application's applied position on this replica (SPEC 3.9):
    /// everything below `applied` is durable in its own state. It may go
    /// down (an application restored an older checkpoint). Above the log
    /// end it is `OffsetOutOfRange` and changes nothing, except on a
    /// follower that waits for a snapshot because its log ends below its
    /// leader's log start: its log may have lost records its application
    /// holds (a cut after corruption), and the position is what lets the
    /// log restart at the leader's start instead of waiting for a snapshot
    /// the application does not need (simulator seed 60060809: a flip cut
    /// node 2's log to [0, 0] with its application at 24, the leader's
    /// start; every `set_applied(24)` was refused, and with no store it
    /// waited for a snapshot for ever). The role is read under its lock
    /// until the position is stored, so a replica that becomes leader
    /// meanwhile never takes one above its log end that way (review of
    /// 3c5e304, finding 1).
    pub(crate) fn set_applied(&self, applied: Offset) -> Result<()> {
        let role = self.role.read();
        let log_end = self.log.log_end_offset();
        // Lock order: the role, then the flag (as role changes take them).
        let mut needs = self.needs_snapshot.lock();
        let waits_below_leader_start =
            role.role != Role::Leader && needs.is_some_and(|leader_start| log_end < leader_start);
        if applied > log_end && !waits_below_leader_start {
            return Err(Error::OffsetOutOfRange {
                requested: applied,
                log_start: self.log.log_start_offset(),
                log_end,
            });
        }
        self.applied.set(self.local, applied);
        // A follower that waits for a snapshot because its application's
        // position was below its leader's log start (a restarted node
        // reopens with the position last stored, which can be older than
        // the one its application had reported, and the leader deleted up
        // to) needs none once its application reports one at or above that
        // start: its log reaches it, or restarts there at the next fetch
        // answer (`apply_fetched_to`).
        // Left set, `needs_snapshot()` said so until the next role change,
        // a snapshot store installed a needless snapshot, and without one
        // the replica looked stuck for ever (simulator seed 49).
        if needs.is_some_and(|leader_start| applied >= leader_start) {
            tracing::info!(log = %self.log_id, node = %self.local, %applied, "this replica's application reaches its leader's log start again: it needs no snapshot");
            *needs = None;
        }
        Ok(())
    }

    /// Every applied position this replica knows, by replica.
    pub(crate) fn applied_positions(&self) -> std::collections::BTreeMap<NodeId, Offset> {
        self.applied.all()
    }

    /// Ends every write of this replica to its directory, before the
    /// directory is deleted ([`Log::retire`], and the applied positions'
    /// file): a thread still holding the replica then writes nothing into
    /// the directory of a replica that re-hosts the log.
    pub(crate) fn retire(&self, reason: &str) {
        self.log.retire(reason);
        self.applied.retire();
    }

    /// Writes the applied positions to the log's directory if they changed
    /// (the retention timer and close call it).
    pub(crate) fn store_applied_positions(&self) {
        if let Err(error) = self.applied.store() {
            tracing::warn!(log = %self.log_id, %error, "cannot store the applied positions; retried at the next retention check");
        }
    }

    /// Where deletion must stop (SPEC 3.9): the high watermark, or, with
    /// `retain_until_applied`, the lowest applied position over the log's
    /// replicas if lower and the cap has not passed; with a snapshot
    /// store, never past the application's latest snapshot either.
    pub(crate) fn deletion_bound(&self) -> Result<DeletionBound> {
        let latest = self.latest_snapshot();
        let role = self.role.read();
        self.deletion_bound_in(&role, latest)
    }

    /// The application's latest snapshot of this log, if it has a store.
    /// Asked before any lock of this replica is taken: it is the
    /// application's code, and may wait for a lock the application holds
    /// while it calls into this log (a `delete_records_before` caller);
    /// asked under the role lock, that wait could close a cycle with a
    /// role change queued for the write lock.
    fn latest_snapshot(&self) -> Option<SnapshotInfo> {
        self.snapshots
            .as_ref()
            .and_then(|store| store.0.latest(self.log_id))
    }

    /// `latest`: [`latest_snapshot`](Self::latest_snapshot), asked before
    /// `role` was taken.
    fn deletion_bound_in(
        &self,
        role: &RoleState,
        latest: Option<SnapshotInfo>,
    ) -> Result<DeletionBound> {
        let by_applied = self.deletion_bound_by_applied(role)?;
        // Rule (issue 25): with a snapshot store, the log start never
        // passes the application's latest snapshot. A follower that needs
        // a snapshot is rebuilt from that snapshot plus the log after it;
        // a log start above the snapshot leaves a gap between them (and the
        // leader refuses to send a snapshot below its log start), so such a
        // follower could not be rebuilt until the application took a newer
        // one. This is openraft's rule (logs are purged only up to the last
        // snapshot); SPEC 3.9 is silent. With no snapshot yet there is
        // nothing to keep the suffix of: the application's first snapshot
        // is taken at its applied position, which (with
        // `retain_until_applied`) the bound never passes on the leader.
        // `latest` is the application's code, asked on the thread that
        // deletes (the retention timer, a `delete_records_before` caller)
        // before the role lock. A snapshot taken in between is newer and
        // only raises the floor: using the older one keeps more.
        let Some(latest) = latest else {
            return Ok(by_applied);
        };
        let floor = latest.offset.max(self.log.log_start_offset());
        if by_applied.bound <= floor {
            return Ok(by_applied);
        }
        debug_assert!(floor < by_applied.bound);
        Ok(DeletionBound {
            bound: floor,
            held_by: Some(self.local),
            held_by_applied: Some(latest.offset),
            ..by_applied
        })
    }

    /// The deletion bound by the applied positions and the cap alone.
    fn deletion_bound_by_applied(&self, role: &RoleState) -> Result<DeletionBound> {
        let high_watermark = self.high_watermark();
        let unheld = DeletionBound {
            bound: high_watermark,
            held_by: None,
            held_by_applied: None,
            held_bytes: 0,
            capped: false,
        };
        if !self.config.retain_until_applied {
            return Ok(unheld);
        }
        let Some(LowestApplied {
            replica: held_by,
            applied: held_by_applied,
        }) = self.applied.lowest(&role.replicas)
        else {
            return Ok(unheld);
        };
        let applied = held_by_applied.unwrap_or(Offset::ZERO);
        if applied >= high_watermark {
            return Ok(unheld);
        }
        let (held_bytes, oldest_ms) = self.log.held_back(
            applied,
            high_watermark,
            self.config.applied_hold_age_max.is_some(),
        )?;
        let over_bytes = self
            .config
            .applied_hold_bytes_max
            .is_some_and(|max| held_bytes > max);
        let now_ms = self.clock.wall_clock_ms();
        let over_age = match (self.config.applied_hold_age_max, oldest_ms) {
            (Some(age), Some(oldest)) => {
                now_ms.saturating_sub(oldest) > i64::try_from(age.as_millis()).unwrap_or(i64::MAX)
            }
            _ => false,
        };
        let capped = over_bytes || over_age;
        // Past the cap, deletion passes the lagging positions, but only up
        // to what the leader's own application and at least
        // `min_insync_replicas` in-sync applications have applied: every
        // deleted record then lives in as many applications' states as an
        // acknowledged record lives in logs (SPEC G1 counts it as kept),
        // and the leader, whose snapshots rebuild the others, has it.
        let (bound, held_by, held_by_applied) = match capped {
            false => (applied, Some(held_by), held_by_applied),
            true => {
                let own = self.applied.get(self.local).unwrap_or(Offset::ZERO);
                let quorum = self
                    .applied
                    .highest_held_by(&role.in_sync_replicas, self.config.min_insync_replicas)
                    .unwrap_or(Offset::ZERO);
                let bound = own.min(quorum).clamp(applied, high_watermark);
                if bound == high_watermark {
                    (bound, None, None)
                } else if bound == own {
                    (bound, Some(self.local), Some(own))
                } else {
                    // The bound is a position some replica holds: an
                    // in-sync one's (the quorum's), or the lowest one's
                    // (`applied`, the clamp's floor).
                    match self.applied.holder_of(&role.in_sync_replicas, bound) {
                        Some(holder) => (bound, Some(holder), Some(bound)),
                        // The positions moved between the two reads: name
                        // the lowest replica with the position it held.
                        None => (bound, Some(held_by), held_by_applied),
                    }
                }
            }
        };
        // Deletion never passes the high watermark (SPEC 2.6), nor, below
        // the cap, the lowest applied position.
        debug_assert!(bound <= high_watermark);
        debug_assert!(capped || bound == applied);
        // A bound below the high watermark names what holds it (errors and
        // metrics report it).
        debug_assert!(held_by.is_some() || bound == high_watermark);
        Ok(DeletionBound {
            bound,
            held_by,
            held_by_applied,
            held_bytes,
            capped,
        })
    }

    /// Leader only: deletes every record below `offset` at once (Kafka's
    /// `DeleteRecords`, KIP-107), whole segments and the rest exactly (the
    /// log start may fall inside a batch); followers follow from fetch
    /// answers. Refused, deleting nothing, above the deletion bound
    /// ([`Error::DeletionHeldBack`] when an application holds it, else
    /// [`Error::LogStartAboveHighWatermark`]). Returns the log start
    /// offset after it (unchanged when `offset` is not above it).
    pub(crate) fn delete_records_before(&self, offset: Offset) -> Result<Offset> {
        let latest = self.latest_snapshot();
        let role = self.role.read();
        if role.role != Role::Leader {
            return Err(self.not_leader(&role));
        }
        let bound = self.deletion_bound_in(&role, latest)?;
        if offset > bound.bound {
            // Named by what held the bound when it was computed: the high
            // watermark read again here may have risen past `offset`
            // meanwhile, and an error naming it would contradict itself.
            return Err(match bound.held_by {
                Some(held_by) => Error::DeletionHeldBack {
                    requested: offset,
                    bound: bound.bound,
                    held_by,
                    applied: bound.held_by_applied,
                },
                // Without a holder the bound is the high watermark it was
                // computed from (see `deletion_bound_by_applied`).
                None => Error::LogStartAboveHighWatermark {
                    requested: offset,
                    high_watermark: bound.bound,
                },
            });
        }
        self.log.set_log_start_offset(offset)?;
        let start = self.log.log_start_offset();
        tracing::info!(log = %self.log_id, log_start_offset = %start, "records deleted on request");
        if let Some(leader) = self.leader.lock().as_mut() {
            leader.on_log_start_offset(start);
        }
        Ok(start)
    }

    /// Records that this follower needs a snapshot (SPEC 3.9): its log end,
    /// or its application's applied position (`what`), is `behind`, below
    /// its leader's log start `leader_start`. Says so once per condition:
    /// an error without a store (nothing will fill the gap until an
    /// operator acts), a warning with one (the transfer starts).
    fn flag_needs_snapshot(&self, what: &str, behind: Offset, leader_start: Offset) {
        debug_assert!(behind < leader_start);
        let mut needs = self.needs_snapshot.lock();
        self.flag_needs_snapshot_locked(&mut needs, what, behind, leader_start);
    }

    /// [`flag_needs_snapshot`](Self::flag_needs_snapshot) for an
    /// application whose position (`applied`, read before) is below the
    /// leader's start: the position is read again under the flag's lock,
    /// so that a `set_applied` that reached the start meanwhile is not
    /// undone (`set_applied` stores the position, then clears the flag
    /// under that lock: whichever of the two takes the lock second sees
    /// the other's write).
    fn flag_application_needs_snapshot(&self, applied: Offset, leader_start: Offset) {
        debug_assert!(applied < leader_start);
        let mut needs = self.needs_snapshot.lock();
        match self.own_applied() {
            Some(now) if now < leader_start => {
                self.flag_needs_snapshot_locked(
                    &mut needs,
                    "application applied",
                    now,
                    leader_start,
                );
            }
            _ => {}
        }
    }

    fn flag_needs_snapshot_locked(
        &self,
        needs: &mut Option<Offset>,
        what: &str,
        behind: Offset,
        leader_start: Offset,
    ) {
        if needs.is_none() {
            match self.below_leader_start {
                BelowLeaderStart::Report => {
                    tracing::error!(log = %self.log_id, node = %self.local, %behind, %leader_start, "this replica's {what} below its leader's log start and no snapshot store is configured: the records in between are gone (retain_until_applied); it needs a snapshot")
                }
                _ => {
                    tracing::warn!(log = %self.log_id, node = %self.local, %behind, %leader_start, "this replica's {what} below its leader's log start: installing the leader's snapshot")
                }
            }
        }
        *needs = Some(leader_start);
    }

    /// Whether this follower waits for a snapshot (its log ends below its
    /// leader's log start, SPEC 3.9).
    pub(crate) fn needs_snapshot(&self) -> bool {
        self.needs_snapshot.lock().is_some()
    }

    /// Whether this replica's application waits for a snapshot, whatever
    /// the role: a follower's (see [`needs_snapshot`](Self::needs_snapshot))
    /// or a leader's ([`leader_application_behind`](Self::leader_application_behind)).
    pub(crate) fn application_needs_snapshot(&self) -> bool {
        self.needs_snapshot() || self.leader_application_behind().is_some()
    }

    /// Leader only (SPEC 3.9, issue 25): `(applied, log start)` when this
    /// replica's application has applied less than its log start, so that
    /// it can never read what it still needs. A follower in that state
    /// installs its leader's snapshot; a leader has nobody to get one from
    /// (and its own snapshots are older than its log start, so no follower
    /// can be rebuilt from them either). It gets there by being elected
    /// while its application lagged past the cap (it was a live follower
    /// in the ISR), or when its application goes back to an older
    /// checkpoint. The node hands such a leadership over
    /// (`NodeCore::hand_over_from_a_stuck_application`). `None` without
    /// a store and without `retain_until_applied` (`BelowLeaderStart::Restart`:
    /// the application does not rely on every record, as a follower there
    /// does not), or when [`own_applied`](Self::own_applied) is `None`.
    pub(crate) fn leader_application_behind(&self) -> Option<(Offset, Offset)> {
        if self.below_leader_start == BelowLeaderStart::Restart
            || self.role.read().role != Role::Leader
        {
            return None;
        }
        let applied = self.own_applied()?;
        let start = self.log.log_start_offset();
        (applied < start).then_some((applied, start))
    }

    /// This replica's application's applied position, as the snapshot
    /// rules read it: its last report; with none, under
    /// `retain_until_applied`, zero: such an application relies on every
    /// record and has applied none yet (deletion counts it so too). The
    /// bug this prevents (found by the reassignment and deletion fault
    /// mode): a follower whose application had not reported when the cap
    /// let the leader delete past offset 0 fetched on, its log reaching the
    /// leader's start, and its application read below the log start for
    /// ever. Without `retain_until_applied` an application that never
    /// reports has opted out of positions: `None`.
    fn own_applied(&self) -> Option<Offset> {
        self.applied
            .get(self.local)
            .or(self.config.retain_until_applied.then_some(Offset::ZERO))
    }

    /// Leader only: whether `node`'s application, as its last fetch (or
    /// the stored positions) said, has applied at least this log's start:
    /// it can lead without needing a snapshot itself, and its snapshots
    /// can rebuild this replica. A position not known counts as behind.
    pub(crate) fn application_reaches_log_start(&self, node: NodeId) -> bool {
        self.applied
            .get(node)
            .is_some_and(|applied| applied >= self.log.log_start_offset())
    }

    /// Whether the stuck-application warning (see
    /// [`leader_application_behind`](Self::leader_application_behind))
    /// is due in `epoch`: once per leadership, so a leader with nobody to
    /// hand over to does not repeat it on every control tick.
    pub(crate) fn stuck_application_warning_due(&self, epoch: LeaderEpoch) -> bool {
        let mut warned = self.stuck_application_warned.lock();
        let due = *warned != Some(epoch);
        *warned = Some(epoch);
        due
    }

    /// What a follower below its leader's log start does.
    pub(crate) fn below_leader_start(&self) -> BelowLeaderStart {
        self.below_leader_start
    }

    /// Leader only: one chunk of an application's snapshot for a follower
    /// (SPEC 3.9): of the snapshot the request names
    /// ([`SnapshotRequest::snapshot`], every chunk of a transfer after its
    /// first), else of the latest. The snapshot must lie between the log
    /// start and what this replica knows to be committed: below the start the
    /// follower could not fetch on from it, above the committed end it
    /// would hold records that are not committed. Known committed are the
    /// offsets below the high watermark and, when higher, below its own
    /// application's applied position (an application applies committed
    /// records only), within the log end. The high watermark alone was
    /// not enough (simulator seed 1122): a leader restarted after an
    /// unclean stop came back with its checkpointed high watermark
    /// (1669), below its application's latest snapshot (1714), and led
    /// alone; the follower that had to be rebuilt from that snapshot was
    /// refused it for ever, and, out of the ISR, could never let the
    /// high watermark pass the snapshot (`min_insync_replicas` 2).
    pub(crate) fn answer_snapshot(
        &self,
        request: &SnapshotRequest,
        store: Option<&dyn SnapshotStore>,
    ) -> SnapshotResponse {
        let mut answer = SnapshotResponse {
            log: self.log_id,
            error: ErrorCode::None,
            snapshot_offset: Offset::ZERO,
            snapshot_epoch: None,
            snapshot_bytes: 0,
            position: request.position,
            crc32: 0,
            data: Bytes::new(),
        };
        let role = self.role.read();
        answer.error = if role.role != Role::Leader {
            ErrorCode::NotLeader
        } else if !role.replicas.contains(&request.replica) || request.replica == self.local {
            // Only a follower of this log gets its application's state.
            ErrorCode::InvalidRequest
        } else if request.current_leader_epoch < role.leader_epoch {
            ErrorCode::FencedLeaderEpoch
        } else if request.current_leader_epoch > role.leader_epoch {
            ErrorCode::UnknownLeaderEpoch
        } else {
            ErrorCode::None
        };
        drop(role);
        if !answer.error.is_none() {
            return answer;
        }
        let Some(store) = store else {
            answer.error = ErrorCode::SnapshotUnavailable;
            return answer;
        };
        // A transfer reads the snapshot it began to its end (SPEC 3.9):
        // served from the latest, a transfer longer than the time between
        // two of the application's snapshots started again at every new
        // one and never ended. A snapshot its store can no longer read is
        // answered below as unavailable, and the follower starts again
        // from the latest.
        let Some(info) = request.snapshot.or_else(|| store.latest(self.log_id)) else {
            answer.error = ErrorCode::SnapshotUnavailable;
            return answer;
        };
        // An application applies only committed records (SPEC 3.9), so
        // everything below its snapshot's offset was committed, and stays
        // in the log (G1): a snapshot up to the log end continues this
        // log's history. Not only up to the high watermark or the own
        // application's position: after an unclean restart the high
        // watermark is the checkpoint's, which lags, an application that
        // restored from scratch reports less than its snapshots hold, and
        // with the ISR below `min_insync_replicas` nothing raises either,
        // while the followers that would raise it wait for this snapshot
        // (simulator seeds 1122, 20002921 and three more: a leader
        // refused it for ever).
        let (start, end) = (self.log.log_start_offset(), self.log.log_end_offset());
        if info.offset < start || info.offset > end {
            tracing::warn!(log = %self.log_id, snapshot_offset = %info.offset, named = request.snapshot.is_some(), log_start = %start, log_end = %end, "the snapshot asked for is outside [log start, log end]: not sent");
            answer.error = ErrorCode::SnapshotUnavailable;
            return answer;
        }
        answer.snapshot_offset = info.offset;
        answer.snapshot_epoch =
            self.epoch_below_as_leader_of(request.current_leader_epoch, info.offset);
        answer.snapshot_bytes = info.size_bytes;
        if request.position > info.size_bytes {
            answer.error = ErrorCode::OffsetOutOfRange;
            return answer;
        }
        let len = (info.size_bytes - request.position)
            .min(u64::from(request.bytes_max))
            .min(u64::from(self.config.fetch_bytes_max)) as usize;
        match store.read_chunk(self.log_id, info, request.position, len) {
            Ok(data) if data.len() == len => {
                answer.crc32 = crc32fast::hash(&data);
                answer.data = data;
            }
            Ok(data) => {
                tracing::warn!(log = %self.log_id, position = request.position, wanted = len, got = data.len(), "the snapshot store read a short chunk");
                answer.error = ErrorCode::SnapshotUnavailable;
            }
            Err(error) => {
                tracing::warn!(log = %self.log_id, position = request.position, %error, "cannot read a snapshot chunk");
                answer.error = ErrorCode::SnapshotUnavailable;
            }
        }
        answer
    }

    /// Follower only: whether this replica may take `leader`'s snapshot
    /// taken at `offset` (SPEC 2.6, 3.9). Refused (`OffsetOutOfRange`,
    /// with a warning naming the log, the snapshot's offset and the log
    /// start) when the snapshot is older than this replica's log start
    /// while its log holds records: a new leader whose log starts lower
    /// serves one. Installing it would wipe a log that may hold
    /// acknowledged records above the snapshot, on a replica that may be
    /// in the ISR, and the application's state would go back to a point
    /// this log no longer reaches. The replica keeps its log until a
    /// snapshot at or above its log start comes.
    ///
    /// The transfer asks before the application's
    /// [`SnapshotStore::install`] touches its state, and
    /// [`Replica::snapshot_installed`] asks again as the final guard. SPEC
    /// 3.9 is silent on the order; Kafka's KRaft follower decides on the
    /// log before its state machine sees a snapshot: the fetched snapshot
    /// is frozen to a file, `KafkaMetadataLog.truncateToLatestSnapshot`
    /// replaces the log only with a snapshot past its end, and only then is
    /// the listener handed the snapshot to load.
    pub(crate) fn check_snapshot_offset(&self, leader: NodeId, offset: Offset) -> Result<()> {
        let (start, end) = (self.log.log_start_offset(), self.log.log_end_offset());
        if offset < start && start < end {
            tracing::warn!(log = %self.log_id, node = %self.local, %leader, snapshot_offset = %offset, log_start = %start, log_end = %end,
                "refusing a snapshot below this replica's log start: installing it would wipe records it holds");
            return Err(Error::OffsetOutOfRange {
                requested: offset,
                log_start: start,
                log_end: end,
            });
        }
        Ok(())
    }

    /// Follower only: the application installed the leader's snapshot
    /// `snapshot` (SPEC 3.9): the log restarts, empty, at its offset, the
    /// applied position is that offset, and fetching goes on from it.
    /// Refused (`NotLeader`) when the role changed since the transfer
    /// began.
    ///
    /// The log's start line (`Log::note_start_line`) is the snapshot's
    /// epoch, one whose leader's log held the records below its offset
    /// (`Log::epoch_below`), when the leader named it: any log holding a
    /// record of that epoch at or past the offset below the snapshot's
    /// holds the same records below it. Without it, the leader's
    /// epoch `epoch`, whose leader's log held them too, but of which a
    /// longer log may hold no record, so that unclean recovery would keep
    /// this empty log over one holding records past it: with the first
    /// fetched batch failing to be written, and the write of its own
    /// epoch as the start line before it failing too, that was simulator
    /// seed 60357926's loss again.
    pub(crate) fn snapshot_installed(
        &self,
        leader: NodeId,
        epoch: LeaderEpoch,
        snapshot: SnapshotId,
    ) -> Result<()> {
        let (offset, snapshot_epoch) = (snapshot.offset, snapshot.epoch);
        let _io = self.follower_io.lock();
        {
            let role = self.role.read();
            if role.role != (Role::Follower { leader }) || role.leader_epoch != epoch {
                return Err(self.not_leader(&role));
            }
        }
        let mut follower = self.follower.lock();
        let Some(state) = follower.as_mut() else {
            return Err(Error::Shutdown);
        };
        // The final guard: the log start may have moved since the
        // transfer's check before the application's install.
        self.check_snapshot_offset(leader, offset)?;
        let (start, end) = (self.log.log_start_offset(), self.log.log_end_offset());
        // Everything below the snapshot is committed (an application
        // snapshots only what it applied, and applies only committed
        // records: see `answer_snapshot`): the high watermark rises to it
        // before the machine restarts from the log.
        if start <= offset && offset <= end {
            // A live follower whose application lagged: its log holds the
            // snapshot's offset and what follows, which it fetched from
            // this leader in this epoch (the epoch checked above), so it
            // keeps them and only its start moves up. Wiping them would
            // take acknowledged records off an in-sync replica.
            if offset.0 > self.high_watermark.get() {
                self.publish_high_watermark(offset);
            }
            self.log.set_log_start_offset(offset)?;
        } else {
            self.log.truncate_fully_and_start_at(offset)?;
            if offset.0 > self.high_watermark.get() {
                self.publish_high_watermark(offset);
            }
        }
        // Below its start the log is now the leader's.
        self.log.note_start_line(snapshot_epoch.unwrap_or(epoch))?;
        self.resync_follower(state);
        self.applied.set(self.local, offset);
        self.store_applied_positions();
        *self.needs_snapshot.lock() = None;
        tracing::info!(log = %self.log_id, node = %self.local, %leader, snapshot_offset = %offset, "installed the leader's snapshot; fetching from its offset");
        Ok(())
    }

    /// The node did not send our ISR proposal (see
    /// `LeaderState::on_isr_withdrawn`).
    pub(crate) fn isr_proposal_withdrawn(&self) {
        if let Some(leader) = self.leader.lock().as_mut() {
            leader.on_isr_withdrawn(self.clock.now());
        }
    }

    /// The coordinator's answer to our ISR proposal was lost
    /// (`Error::CoordinatorOutcomeUnknown`): the change stays pending, and
    /// counting for the high watermark, until
    /// [`Replica::unsettled_isr_change`] is settled by a read (SPEC 3.4).
    pub(crate) fn isr_proposal_outcome_unknown(&self) {
        if let Some(leader) = self.leader.lock().as_mut() {
            leader.on_isr_outcome_unknown();
        }
    }

    /// The leader's pending ISR change whose outcome is unknown, as the
    /// `(leader_epoch, expected_version)` it was sent with; `None` if this
    /// replica does not lead or nothing waits for a settling read.
    pub(crate) fn unsettled_isr_change(&self) -> Option<(LeaderEpoch, u64)> {
        let role = self.role.read();
        if role.role != Role::Leader {
            return None;
        }
        self.leader
            .lock()
            .as_ref()
            .and_then(|leader| leader.unsettled_isr_change())
    }

    /// A read of the stored state showed that our ISR change whose outcome
    /// was unknown was not applied: drop it (a later fetch or tick may
    /// propose it again) and let the high watermark move without it.
    pub(crate) fn isr_proposal_not_applied(&self) {
        let role = self.role.read();
        if role.role != Role::Leader {
            return;
        }
        let mut leader = self.leader.lock();
        if let Some(leader) = leader.as_mut() {
            if let Some(hw) = leader.on_isr_not_applied().advanced_to() {
                self.publish_high_watermark(hw);
            }
        }
    }

    /// The coordinator answered our ISR proposal with "stale".
    pub(crate) fn isr_proposal_rejected(&self) {
        if let Some(leader) = self.leader.lock().as_mut() {
            // The caller re-reads the coordinator state next.
            let _reread = leader.on_isr_rejected();
        }
    }

    /// On a leader: the incarnation of `follower` whose fetches it counted
    /// in this epoch (SPEC 3.2); `None` on a follower or before one.
    pub(crate) fn follower_incarnation(&self, follower: NodeId) -> Option<Incarnation> {
        self.leader.lock().as_ref()?.follower_incarnation(follower)
    }

    /// Per-follower lag in records and time since caught up.
    pub(crate) fn follower_lag(&self, follower: NodeId) -> Option<(u64, Duration)> {
        let now = self.clock.now();
        let lag = self.leader.lock().as_ref()?.follower_lag(follower, now)?;
        Some((lag.records.unwrap_or(u64::MAX), lag.since_caught_up))
    }

    // ---- follower paths ---------------------------------------------------

    /// The fields of this log's next fetch, or `None` if this replica does
    /// not follow `leader` in `epoch` any more.
    pub(crate) fn next_fetch(
        &self,
        leader: NodeId,
        epoch: LeaderEpoch,
        bytes_max: u32,
    ) -> Option<FetchLog> {
        let role = self.role.read();
        if role.role != (Role::Follower { leader }) || role.leader_epoch != epoch {
            return None;
        }
        // A replica whose storage failed cannot store what it would fetch;
        // fetching anyway would report it caught up and bring it back into
        // the ISR, where it would hold the high watermark still.
        if self.log.is_poisoned() {
            return None;
        }
        let follower = self.follower.lock();
        drop(role);
        let Some(state) = follower.as_ref() else {
            debug_assert!(false, "a follower without its state machine");
            return None;
        };
        self.debug_check_follower(state);
        let flushed_offset = self.flush_always.then(|| self.log.flushed_offset());
        let position = state.next_fetch(self.log.last_batch_epoch(), flushed_offset);
        debug_assert_eq!(position.current_leader_epoch, epoch);
        Some(FetchLog {
            log: self.log_id,
            current_leader_epoch: position.current_leader_epoch,
            fetch_offset: position.fetch_offset,
            last_fetched_epoch: position.last_fetched_epoch,
            line_epoch: self.log.line_epoch(),
            log_start_offset: state.log_start_offset(),
            bytes_max,
            applied_offset: self.applied.get(self.local),
        })
    }

    /// Applies one log of a fetch answer as follower (SPEC 3.2, 3.6).
    /// Returns the error code the fetcher should act on. The follower
    /// machine decides; this does the I/O it asks for.
    pub(crate) fn apply_fetched(
        &self,
        leader: NodeId,
        epoch: LeaderEpoch,
        answer: FetchedLog,
    ) -> Result<ErrorCode> {
        let _io = self.follower_io.lock();
        {
            let role = self.role.read();
            if role.role != (Role::Follower { leader }) || role.leader_epoch != epoch {
                return Ok(ErrorCode::None);
            }
        }
        // No role change can happen while `follower_io` is held.
        let mut follower = self.follower.lock();
        let Some(state) = follower.as_mut() else {
            debug_assert!(false, "a follower without its state machine");
            return Ok(ErrorCode::None);
        };
        debug_assert_eq!((state.leader(), state.leader_epoch()), (leader, epoch));
        self.debug_check_follower(state);
        let applied = self.apply_fetched_to(state, answer);
        if applied.is_err() {
            // The I/O may have moved the log part of the way: the log is the
            // truth, so the machine starts again from it.
            self.resync_follower(state);
        }
        applied
    }

    fn apply_fetched_to(&self, state: &mut FollowerState, answer: FetchedLog) -> Result<ErrorCode> {
        let named_start = StartNamed {
            offset: answer.log_start_offset,
            epoch: answer.log_start_epoch,
        };
        if !answer.error.is_none() {
            let below_start = answer.error == ErrorCode::OffsetOutOfRange
                && state.log_end_offset() < answer.log_start_offset
                && answer.log_start_offset <= answer.log_end_offset;
            // An application that has applied up to the leader's log start
            // already needs none of the records in between: the log
            // restarts there, as Kafka's does (simulator seed 268: a bit
            // flip cut node 2's log to 642 after its application had
            // applied past the leader's start; with no store it reported
            // needs_snapshot for ever).
            let application_reaches_start = self
                .own_applied()
                .is_some_and(|applied| applied >= answer.log_start_offset);
            if below_start
                && self.below_leader_start != BelowLeaderStart::Restart
                && !application_reaches_start
            {
                // SPEC 3.9: restarting at the leader's log start would
                // leave the application a gap; a snapshot fills it.
                self.flag_needs_snapshot(
                    "log ends",
                    state.log_end_offset(),
                    answer.log_start_offset,
                );
                return Ok(ErrorCode::OffsetOutOfRange);
            }
            if answer.error == ErrorCode::OffsetOutOfRange {
                match state.on_offset_out_of_range(answer.log_start_offset, answer.log_end_offset) {
                    OutOfRangeAction::ResetTo { log_start_offset } => {
                        self.reset_follower_log(state, log_start_offset, named_start)?;
                        return Ok(ErrorCode::None);
                    }
                    OutOfRangeAction::TruncateTo { log_end_offset } => {
                        // Below this log's start it restarts the log there
                        // (only after an unclean election or a lost disk),
                        // on the line of the epoch the leader named below
                        // its end, as a restart at its start does.
                        let restarts = log_end_offset < self.log.log_start_offset();
                        self.log.truncate_to(log_end_offset)?;
                        // Only this fetcher moves a follower's log start
                        // (it holds `follower_io`): the truncation did
                        // restart the log exactly when it started past
                        // the cut.
                        debug_assert!(
                            !restarts || self.log.log_start_offset() == log_end_offset,
                            "restarted at {log_end_offset}, starts at {}",
                            self.log.log_start_offset()
                        );
                        if restarts {
                            let named_end = StartNamed {
                                offset: answer.log_end_offset,
                                epoch: answer.log_end_epoch,
                            };
                            self.log.note_start_line(
                                named_end.line_at(log_end_offset, state.leader_epoch()),
                            )?;
                        }
                        state.on_truncated(self.log.log_end_offset());
                        self.lower_follower_high_watermark(state);
                        return Ok(ErrorCode::None);
                    }
                    OutOfRangeAction::BackOff => {}
                }
            }
            return Ok(answer.error);
        }
        // Divergence is resolved before anything else in the answer is used.
        if let Some(diverging) = answer.diverging {
            // The leader deleted what lies below its log start and vouches
            // for nothing there: when it says the logs agree at most up to
            // that start, a log holding records below it cannot tell which
            // of them match (simulator seed 20012215), and drops them all.
            // It restarts empty at the leader's start, not at its own: a
            // log ending below the committed end must not be left to lead
            // (simulator seed 60047659: cut to its own start, 297, a
            // member of the ELR was elected with its log ending there,
            // below records committed up to 464, whose offsets the next
            // appends would have taken again). Its application, if behind
            // that start, gets the snapshot path on the next answer, as a
            // live follower's lagging application does (SPEC 3.9).
            let (leader_start, own_start) = (answer.log_start_offset, self.log.log_start_offset());
            if diverging.end_offset <= leader_start && own_start < leader_start {
                tracing::warn!(log = %self.log_id, node = %self.local, leader = %state.leader(),
                    diverging_end_offset = %diverging.end_offset, %leader_start, %own_start,
                    "the logs diverge at or below the leader's log start: discarding every record below it and restarting the log there");
                self.log.truncate_fully_and_start_at(leader_start)?;
                self.log
                    .note_start_line(named_start.line_at(leader_start, state.leader_epoch()))?;
                // The machine's log start moves with the log's.
                self.resync_follower(state);
                return Ok(ErrorCode::None);
            }
            // The same answer to a log that starts at or above the leader's
            // start: the leader's records from there on are all of epochs
            // newer than the one this log names, so none of this log's
            // records matches one of the leader's, and an empty log still
            // names that epoch from its cache. Cutting to its own start
            // would cut nothing and leave the epoch: the next fetch would
            // name it again and get the same answer, for ever (simulator
            // seed 60012908: a follower empty at 1044, its start moved
            // there, of last epoch 11, under a leader restarted at 1044 by
            // a snapshot and leading since in epoch 19, whose cache starts
            // there). It restarts empty at the leader's start, with no
            // epoch, and fetches from there: a log that started above it
            // (only after an unclean election or a lost disk) would
            // otherwise vouch, by fetching from its own start, for
            // records below it that are not the leader's (as the cut this
            // answer asks for did before: below a log's start,
            // `truncate_to` restarts the log at the cut).
            if diverging.end_offset <= leader_start {
                debug_assert!(own_start >= leader_start);
                tracing::warn!(log = %self.log_id, node = %self.local, leader = %state.leader(),
                    diverging_end_offset = %diverging.end_offset, %leader_start, %own_start,
                    log_end_offset = %self.log.log_end_offset(),
                    "the logs agree nowhere past the leader's log start, where this log starts or above: restarting it empty at the leader's start");
                self.log.truncate_fully_and_start_at(leader_start)?;
                self.log
                    .note_start_line(named_start.line_at(leader_start, state.leader_epoch()))?;
                // The machine's log start moves with the log's.
                self.resync_follower(state);
                return Ok(ErrorCode::None);
            }
            let lookup = self.log.end_offset_for_epoch(diverging.epoch);
            match state.on_diverging(diverging, lookup) {
                DivergenceAction::Truncate(truncation) => {
                    self.log.truncate_to(truncation.truncate_to)?;
                    // A batch goes whole: the log may end below the cut.
                    state.on_truncated(self.log.log_end_offset());
                    self.lower_follower_high_watermark(state);
                    return Ok(ErrorCode::None);
                }
                // Asking again at once would repeat the same answer.
                DivergenceAction::BackOff => return Ok(ErrorCode::Unknown),
            }
        }
        // The leader found no divergence: this log is a prefix of the
        // leader's, on its epoch's line (`Log::line_epoch`).
        self.log.note_line_epoch(state.leader_epoch())?;
        if !answer.records.is_empty() {
            self.append_fetched(&answer.records)?;
        }
        match state.on_fetched(
            answer.high_watermark,
            answer.log_start_offset,
            self.log.log_end_offset(),
        ) {
            FetchedUpdate::Applied {
                high_watermark,
                log_start_offset,
            } => {
                // HW = min(leader HW, own LEO) (SPEC 3.2): it may fall when
                // a new leader's is lower.
                match high_watermark.0.cmp(&self.high_watermark.get()) {
                    std::cmp::Ordering::Greater => self.publish_high_watermark(high_watermark),
                    std::cmp::Ordering::Less => {
                        tracing::debug!(
                            log = %self.log_id,
                            node = %self.local,
                            leader = %state.leader(),
                            epoch = %state.leader_epoch(),
                            from = self.high_watermark.get(),
                            to = %high_watermark,
                            leader_high_watermark = %answer.high_watermark,
                            "follower high watermark fell to the leader's"
                        );
                        self.high_watermark.reset(high_watermark.0);
                        self.log.set_high_watermark(high_watermark);
                    }
                    std::cmp::Ordering::Equal => {}
                }
                // After the high watermark: the log start never passes it.
                // The leader's start is at most its high watermark and, on
                // this branch, at most this log's end, so at most the new
                // high watermark.
                if log_start_offset > self.log.log_start_offset() {
                    // Its checkpoint and file deletions run on the roll
                    // flush thread: this fetcher waits for no fsync.
                    self.log.raise_log_start_offset_deferred(log_start_offset)?;
                }
                self.applied
                    .adopt_leader_view(self.local, &answer.applied_offsets);
                // SPEC 3.9: a live follower whose application lags (its
                // apply loop stalled while the cap let the leader delete
                // past its applied position) can fetch, but its
                // application can never read the records it still needs:
                // they are gone on the leader, and this log follows the
                // leader's start. It goes the snapshot path exactly as a
                // replica whose log ends below the leader's start. Under
                // `retain_until_applied` an application that never
                // reported has applied nothing (see `own_applied`).
                if self.below_leader_start != BelowLeaderStart::Restart {
                    if let Some(applied) = self.own_applied() {
                        if applied < log_start_offset {
                            self.flag_application_needs_snapshot(applied, log_start_offset);
                            // With a store, the fetcher starts the transfer
                            // on this code; without one the follower goes on
                            // fetching (it stays a full replica of the log)
                            // and has said, once, that it needs a snapshot.
                            if self.below_leader_start == BelowLeaderStart::InstallSnapshot {
                                return Ok(ErrorCode::OffsetOutOfRange);
                            }
                        }
                    }
                }
            }
            FetchedUpdate::ResetTo { log_start_offset } => {
                self.reset_follower_log(state, log_start_offset, named_start)?;
            }
        }
        Ok(ErrorCode::None)
    }

    /// Appends what the leader sent. A log start inside a batch (a
    /// deletion at an exact offset) makes a leader answer a fetch at it
    /// with the whole batch holding it, whose base is below. An empty log
    /// (end == start, e.g. just restarted at the leader's log start) whose
    /// end the first fetched batch spans restarts at the batch's base, so
    /// that the batch appends; without this the follower would reject the
    /// batch and ask again for ever. Its log start goes back up to the
    /// leader's from the same answer. Kafka does the same in
    /// `Partition.appendRecordsToFollowerOrFutureReplica` (on
    /// `UnexpectedAppendOffsetException`). Malformed bytes are left to
    /// `append_as_follower`, which names what is wrong.
    ///
    /// An empty log past offset 0 whose first fetched batch starts at its
    /// end first notes that batch's epoch as its start line
    /// (`Log::note_start_line`): that epoch's leader held the same batch
    /// there, so the same records below it (KIP-279's premise), which are
    /// this log's. A log holding a batch of that epoch at or past the
    /// start then agrees with this one below it, though it never followed
    /// this log's leader: if the batch is lost before it is on disk,
    /// unclean recovery can take such a log, which may hold the batch
    /// acknowledged (simulator seed 60357926: node 0 installed node 1's
    /// snapshot at 471 in epoch 8 and failed to write the batch of epoch 3
    /// at 471; node 2, on epoch 4's line, held it, and lost to node 0's
    /// newer line).
    fn append_fetched(&self, records: &Bytes) -> Result<()> {
        let (start, end) = (self.log.log_start_offset(), self.log.log_end_offset());
        let spans_empty_end = |first: &crate::record::BatchHeader| {
            end == start && first.base_offset < end && first.last_offset() >= end
        };
        let first = parse_header(records).ok();
        if let Some(first) = &first {
            if end == start
                && end != Offset::ZERO
                && first.base_offset == end
                && self.log.start_line() != Some(first.leader_epoch)
            {
                self.log.note_start_line(first.leader_epoch)?;
            }
        }
        let Some(first) = first.filter(spans_empty_end) else {
            self.log.append_as_follower(records)?;
            return Ok(());
        };
        tracing::info!(
            log = %self.log_id,
            log_end = %end,
            batch_base = %first.base_offset,
            batch_last = %first.last_offset(),
            "the first fetched batch starts below this empty log's end; restarting the log at the batch's base"
        );
        self.log.truncate_fully_and_start_at(first.base_offset)?;
        // As above: the batch's leader held this log's records below it.
        self.log.note_start_line(first.leader_epoch)?;
        self.log.append_as_follower(records)?;
        // The restart set the log's own high watermark to the batch's base;
        // the published one (at most the old end) holds again now that the
        // batch is written. The log's copy follows it there, or raising the
        // log start back to the leader's would be refused as above it.
        debug_assert!(self.log.log_end_offset() > end);
        debug_assert!(self.high_watermark.get() <= end.0);
        self.log
            .raise_high_watermark(Offset(self.high_watermark.get()));
        Ok(())
    }

    /// SPEC 3.6: the follower's log ends below the leader's log start; the
    /// machine already moved to `log_start_offset`, the log follows.
    fn reset_follower_log(
        &self,
        state: &FollowerState,
        log_start_offset: Offset,
        named: StartNamed,
    ) -> Result<()> {
        tracing::warn!(log = %self.log_id, leader = %state.leader(), leader_log_start = %log_start_offset, "follower is below the leader's log start; discarding its log");
        self.log.truncate_fully_and_start_at(log_start_offset)?;
        self.log
            .note_start_line(named.line_at(log_start_offset, state.leader_epoch()))?;
        // Everything below the leader's log start was committed (retention
        // never deletes at or above the high watermark); Kafka's
        // `truncateFullyAndStartAt` likewise moves the high watermark to
        // the new log end. It rises: the old log ended below it.
        debug_assert!(state.high_watermark().0 >= self.high_watermark.get());
        self.publish_high_watermark(state.high_watermark());
        Ok(())
    }

    /// After a truncation: a follower's published high watermark falls with
    /// its log end (it never held anything committed above the leader's
    /// end).
    fn lower_follower_high_watermark(&self, state: &FollowerState) {
        let hw = state.high_watermark();
        debug_assert!(hw.0 <= self.high_watermark.get());
        if hw.0 < self.high_watermark.get() {
            self.high_watermark.reset(hw.0);
            self.log.set_high_watermark(hw);
        }
    }

    /// After failed follower I/O: a machine rebuilt from the log's offsets
    /// (a high watermark above the log end falls with it; one below a
    /// risen log start rises to it).
    fn resync_follower(&self, state: &mut FollowerState) {
        *state = FollowerState::become_follower(
            state.leader(),
            state.leader_epoch(),
            LogOffsets {
                log_start_offset: self.log.log_start_offset(),
                high_watermark: Offset(self.high_watermark.get()),
                log_end_offset: self.log.log_end_offset(),
            },
        );
        let hw = state.high_watermark();
        match hw.0.cmp(&self.high_watermark.get()) {
            std::cmp::Ordering::Less => {
                self.high_watermark.reset(hw.0);
                self.log.set_high_watermark(hw);
            }
            std::cmp::Ordering::Greater => self.publish_high_watermark(hw),
            std::cmp::Ordering::Equal => {}
        }
    }

    /// Debug builds: the follower machine agrees with the log and the
    /// published high watermark (a poisoned log may have moved part-way
    /// through a failed write; nothing reads it any more).
    fn debug_check_follower(&self, state: &FollowerState) {
        if !cfg!(debug_assertions) || self.log.is_poisoned() {
            return;
        }
        debug_assert_eq!(state.check_invariants(), Ok(()));
        debug_assert_eq!(
            (
                state.log_start_offset(),
                state.log_end_offset(),
                state.high_watermark().0
            ),
            (
                self.log.log_start_offset(),
                self.log.log_end_offset(),
                self.high_watermark.get()
            ),
            "the follower machine (log start, log end, high watermark) drifted from the log: {state:?}"
        );
    }

    /// Reads committed (or, on a leader, uncommitted) data. A committed read
    /// stops below the high watermark as of the read: the lower of the
    /// published one and the log's, taken under the log's lock, so a
    /// high watermark lowered meanwhile (a follower's, SPEC 3.2) is obeyed.
    /// A follower's may fall after the read; what it returned was committed
    /// nonetheless (see `ReplicatedLog::read`).
    #[cfg(test)]
    pub(crate) fn read(&self, from: Offset, bytes_max: usize, committed: bool) -> Result<Bytes> {
        if committed {
            let hw = self.high_watermark();
            let read = self.log.read_committed(from, bytes_max, hw)?;
            Ok(read.records)
        } else {
            self.write_deferred(DeferredWriter::Reader);
            let role = self.role.read();
            if role.role != Role::Leader {
                return Err(self.not_leader(&role));
            }
            drop(role);
            Ok(self.log.read(from, bytes_max)?.records)
        }
    }

    /// Like [`read`](Self::read), but returns the batches as the log
    /// checked them (parsed and CRC-checked once, not again by the caller).
    pub(crate) fn read_batches(
        &self,
        from: Offset,
        bytes_max: usize,
        committed: bool,
    ) -> Result<Vec<RecordBatch>> {
        if committed {
            let hw = self.high_watermark();
            self.log.read_batches(from, bytes_max, Some(hw))
        } else {
            self.write_deferred(DeferredWriter::Reader);
            let role = self.role.read();
            if role.role != Role::Leader {
                return Err(self.not_leader(&role));
            }
            drop(role);
            self.log.read_batches(from, bytes_max, None)
        }
    }

    /// Waits until the high watermark is above `offset`. Panics inside a
    /// deterministic simulation unless it already is.
    #[track_caller]
    pub(crate) fn wait_for_high_watermark_above(
        &self,
        offset: Offset,
        deadline: Instant,
    ) -> Option<Offset> {
        loop {
            match self.high_watermark.wait_at_least(
                offset.0 + 1,
                deadline,
                self.config.spin_before_park,
            ) {
                WaitOutcome::Reached(hw) => return Some(Offset(hw)),
                WaitOutcome::TimedOut => return None,
                // A role change: the watch reopens at once; wait again.
                WaitOutcome::Closed => {
                    if Instant::now() >= deadline {
                        return None;
                    }
                    // Reopened at once on a role change; stays closed after
                    // a failed write until the node gives the log up. Check
                    // again shortly rather than spin.
                    crate::simulation::forbid_in_simulation(
                        "a sleep while the high watermark is closed",
                    );
                    std::thread::sleep(
                        Duration::from_millis(1)
                            .min(deadline.saturating_duration_since(Instant::now())),
                    );
                }
            }
        }
    }

    /// The epoch-end query answer for a peer (SPEC 3.6 explicit request).
    pub(crate) fn epoch_end_offset(
        &self,
        current_leader_epoch: LeaderEpoch,
        epoch: LeaderEpoch,
    ) -> (ErrorCode, Option<EpochEndOffset>) {
        let role = self.role.read();
        if role.role != Role::Leader {
            return (ErrorCode::NotLeader, None);
        }
        if current_leader_epoch < role.leader_epoch {
            return (ErrorCode::FencedLeaderEpoch, None);
        }
        if current_leader_epoch > role.leader_epoch {
            return (ErrorCode::UnknownLeaderEpoch, None);
        }
        (ErrorCode::None, self.log.end_offset_for_epoch(epoch))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::record::RecordBatchBuilder;
    use crate::storage::LogConfig;

    fn lone_leader(dir: &std::path::Path) -> Replica {
        lone_leader_of(Log::open(dir, LogConfig::default(), Arc::new(SystemClock)).unwrap())
    }

    /// A lone leader of epoch 1 in `dir` holding ten one-record batches,
    /// offsets 0 to 9.
    fn leader_of_ten_records(dir: &std::path::Path) -> Replica {
        let leader = lone_leader(dir);
        for _ in 0..10 {
            let mut builder = RecordBatchBuilder::new(1);
            builder.push(b"v");
            leader
                .append_as_leader(&builder.build().unwrap(), false, true, false)
                .unwrap();
        }
        leader
    }

    /// A replica of `log` leading alone in epoch 1.
    fn lone_leader_of(log: Log) -> Replica {
        let replica = Replica::new(
            LogId(0),
            NodeId(0),
            log,
            ReplicationConfig::default(),
            Arc::new(SystemClock),
            Arc::new(Watch::new(0)),
            false,
        );
        replica
            .become_leader(LeaderEpoch(1), vec![NodeId(0)], vec![NodeId(0)], 1)
            .unwrap();
        replica
    }

    /// SPEC 3.5: once its node's controlled shutdown began, a replica
    /// takes no append, in that epoch or a later one it leads (a
    /// reassignment's completion bumps a kept leader's epoch: simulator
    /// seeds 20009429, 20006026), while a reassignment's hand-over stop
    /// ends with its epoch.
    #[test]
    fn a_shutdown_stop_holds_in_every_later_epoch_a_hand_over_stop_does_not() {
        let append = |replica: &Replica| {
            let mut builder = RecordBatchBuilder::new(1);
            builder.push(b"v");
            replica.append_as_leader(&builder.build().unwrap(), false, true, false)
        };
        let dir = tempfile::tempdir().unwrap();
        let replica = lone_leader(dir.path());
        append(&replica).unwrap();
        assert_eq!(
            replica.stop_appends_for_hand_over(),
            Some((LeaderEpoch(1), Offset(1)))
        );
        assert!(matches!(
            append(&replica),
            Err(Error::NotLeader { leader: None, .. })
        ));
        replica
            .become_leader(LeaderEpoch(2), vec![NodeId(0)], vec![NodeId(0)], 1)
            .unwrap();
        append(&replica).expect("a hand-over's stop ends with its epoch");

        assert_eq!(
            replica.stop_appends_for_shutdown(),
            Some((LeaderEpoch(2), Offset(2)))
        );
        assert!(matches!(
            append(&replica),
            Err(Error::NotLeader { leader: None, .. })
        ));
        replica
            .become_leader(LeaderEpoch(3), vec![NodeId(0)], vec![NodeId(0)], 1)
            .unwrap();
        assert!(
            matches!(append(&replica), Err(Error::NotLeader { leader: None, .. })),
            "a shutdown's stop holds in a later epoch"
        );
        assert_eq!(replica.log.log_end_offset(), Offset(2));
    }

    /// An append that bypasses the queue (an idempotent or large batch)
    /// and fails after its write, here on the fsync `FlushPolicy::Always`
    /// asks for, leaves its batch in the log: the queue must stamp the next
    /// append after it, never at its offsets. Otherwise that append's write
    /// fails while the high watermark passing the other batch releases its
    /// `acks=all` waiter: an acknowledged record no replica holds (the
    /// fault test's seed 2 with reassignments, where a crash poisoned the
    /// log between the write and its fsync).
    #[test]
    fn a_batch_written_by_a_failed_direct_append_is_never_stamped_over() {
        use crate::storage::disk::{DiskOperation, EioPlan, SimDisk};
        use crate::storage::FlushPolicy;
        let disk = SimDisk::new(2);
        let config = LogConfig {
            flush_policy: FlushPolicy::Always,
            ..LogConfig::default()
        };
        let log = Log::open_on(disk.shared(), "/sim/log-0", config, Arc::new(SystemClock)).unwrap();
        let replica = lone_leader_of(log);
        let mut small = RecordBatchBuilder::new(1);
        small.push(b"before");
        replica
            .append_as_leader(&small.build().unwrap(), false, true, false)
            .unwrap();
        let end_before = replica.log().log_end_offset();

        disk.fail_with_eio(EioPlan::Nth(1), &[DiskOperation::Sync]);
        let mut large = RecordBatchBuilder::new(1);
        large.push(&vec![7u8; DIRECT_APPEND_BYTES_MIN]);
        let failed = replica.append_as_leader(&large.build().unwrap(), false, true, false);
        // Written, then failed: reported as such, at the batch's offsets.
        let failed = failed.expect("the write itself succeeded");
        assert!(
            matches!(failed.failed_after_write, Some(Error::Io { .. })),
            "the fsync failed: {failed:?}"
        );
        assert_eq!(failed.info.base_offset, end_before);
        let end_after = replica.log().log_end_offset();
        assert_eq!(failed.info.log_end_offset, end_after);
        assert!(
            end_after > end_before,
            "the batch was written before its fsync failed"
        );

        let handed_out = replica
            .pipeline
            .combiner
            .with_state(|queue| queue.next_offset);
        assert!(
            handed_out >= end_after,
            "the queue hands out {handed_out}, below the log end {end_after}"
        );
    }

    /// Node 1, following node 0 in epoch 1 with `retain_until_applied`
    /// and no snapshot store (`BelowLeaderStart::Report`), its log in
    /// `dir`.
    fn follower_without_a_store(dir: &std::path::Path) -> Replica {
        let log = Log::open(dir, LogConfig::default(), Arc::new(SystemClock)).unwrap();
        let config = ReplicationConfig {
            retain_until_applied: true,
            ..ReplicationConfig::default()
        };
        let follower = Replica::new(
            LogId(0),
            NodeId(1),
            log,
            config,
            Arc::new(SystemClock),
            Arc::new(Watch::new(0)),
            false,
        )
        .with_below_leader_start(BelowLeaderStart::Report);
        let replicas = vec![NodeId(0), NodeId(1)];
        follower.become_follower(
            Some(NodeId(0)),
            LeaderEpoch(1),
            replicas.clone(),
            replicas,
            1,
        );
        follower
    }

    /// SPEC 3.9: a follower without a snapshot store whose log ends below
    /// its leader's log start, but whose application has applied past that
    /// start (its log was cut after the application applied: a recovery
    /// that dropped a corrupt batch), needs none of the records in between
    /// and restarts its log at the leader's start, as Kafka's would. It
    /// reported `needs_snapshot` for ever (simulator seed 268).
    #[test]
    fn a_follower_whose_application_applied_past_the_leaders_start_restarts_there() {
        let dir = tempfile::tempdir().unwrap();
        let follower = follower_without_a_store(dir.path());
        // As stored before the cut: above the log's end (0).
        follower.applied.set(NodeId(1), Offset(7));
        let answer = FetchedLog {
            log: LogId(0),
            error: ErrorCode::OffsetOutOfRange,
            high_watermark: Offset(10),
            log_start_offset: Offset(5),
            log_end_offset: Offset(10),
            log_start_epoch: None,
            log_end_epoch: None,
            diverging: None,
            records: Bytes::new(),
            applied_offsets: Vec::new(),
        };
        follower
            .apply_fetched(NodeId(0), LeaderEpoch(1), answer)
            .unwrap();
        assert!(!follower.needs_snapshot());
        assert_eq!(follower.log().log_start_offset(), Offset(5));
        assert_eq!(follower.log().log_end_offset(), Offset(5));
    }

    /// Simulator seed 60357926: a follower that restarts empty at its
    /// leader's start notes the leader's epoch as its start line, then the
    /// epoch of the first batch it fetches there, before writing it: that
    /// batch's leader held the same records below it.
    #[test]
    fn an_empty_logs_first_fetched_batch_names_its_start_line() {
        let leader_dir = tempfile::tempdir().unwrap();
        let leader = leader_of_ten_records(leader_dir.path());
        let dir = tempfile::tempdir().unwrap();
        // It follows a leader of epoch 2 whose log holds epoch 1's batches.
        let follower = follower_restarted_at_5(dir.path(), LeaderEpoch(2), None);
        let log = follower.log();
        assert_eq!(log.start_line(), Some(LeaderEpoch(2)));
        let records = leader.read(Offset(5), 1 << 20, false).unwrap();
        follower
            .apply_fetched(
                NodeId(0),
                LeaderEpoch(2),
                ten_records_answer(Offset(10), Offset(5), None, records),
            )
            .unwrap();
        let log = follower.log();
        assert_eq!(log.log_end_offset(), Offset(10));
        assert_eq!(log.start_line(), Some(LeaderEpoch(1)));
        assert_eq!(
            log.end_report(crate::coordinator::LogEnd::EPOCHS_REPORTED)
                .unwrap()
                .start_line,
            Some(LeaderEpoch(1))
        );
    }

    /// `leader`'s answer to `fetch`, new from node 1 (incarnation 1), with
    /// a budget of 1 MiB.
    fn answer_node_1(leader: &Replica, fetch: &FetchLog) -> FetchedLog {
        let arrival = FetchArrival::New(Instant::now());
        leader.answer_fetch(NodeId(1), fetch, 1 << 20, false, arrival, Incarnation(1))
    }

    /// A lone leader in `dir` holding ten one-record batches, offsets 0
    /// to 4 written in epoch 1 and 5 to 9 in epoch 2, leading in epoch 2.
    fn lone_leader_of_two_epochs(dir: &std::path::Path) -> Replica {
        let leader = lone_leader(dir);
        for epoch in [1, 1, 1, 1, 1, 2, 2, 2, 2, 2] {
            if epoch == 2 && leader.role().1 != LeaderEpoch(2) {
                leader
                    .become_leader(LeaderEpoch(2), vec![NodeId(0)], vec![NodeId(0)], 1)
                    .unwrap();
            }
            let mut builder = RecordBatchBuilder::new(1);
            builder.push(b"v");
            leader
                .append_as_leader(&builder.build().unwrap(), false, true, false)
                .unwrap();
        }
        leader
    }

    /// SPEC 3.5: a fetch below the leader's log start is answered
    /// `OffsetOutOfRange` naming an epoch whose leader held the records
    /// below that start (the record below it deleted, the epoch of the
    /// batch at the start, 2, not of the record below, 1), and the
    /// follower that restarts its log there notes that epoch as its start
    /// line, not the leader's own (which a longer log holding the records
    /// past the start may never have held a record of). An answer naming
    /// none leaves it the leader's epoch.
    #[test]
    fn a_restart_at_the_leaders_start_notes_the_epoch_the_leader_names() {
        let leader_dir = tempfile::tempdir().unwrap();
        let leader = lone_leader_of_two_epochs(leader_dir.path());
        leader.log().set_log_start_offset(Offset(5)).unwrap();
        let replicas = vec![NodeId(0), NodeId(1)];
        leader
            .become_leader(LeaderEpoch(3), replicas.clone(), replicas.clone(), 1)
            .unwrap();
        let fetch = FetchLog {
            log: LogId(0),
            current_leader_epoch: LeaderEpoch(3),
            fetch_offset: Offset(2),
            last_fetched_epoch: Some(LeaderEpoch(1)),
            line_epoch: Some(LeaderEpoch(3)),
            log_start_offset: Offset::ZERO,
            bytes_max: 1 << 20,
            applied_offset: None,
        };
        let answer = answer_node_1(&leader, &fetch);
        assert_eq!(answer.error, ErrorCode::OffsetOutOfRange);
        assert_eq!(
            (answer.log_start_offset, answer.log_start_epoch),
            (Offset(5), Some(LeaderEpoch(2)))
        );
        let at_start = FetchLog {
            fetch_offset: Offset(5),
            last_fetched_epoch: None,
            ..fetch
        };
        let answer = answer_node_1(&leader, &at_start);
        assert_eq!(answer.error, ErrorCode::None);
        assert_eq!(
            answer.log_start_epoch, None,
            "only answers that restart a log name it"
        );
        for (named, noted) in [(Some(LeaderEpoch(1)), 1), (None, 3)] {
            let dir = tempfile::tempdir().unwrap();
            let follower = follower_restarted_at_5(dir.path(), LeaderEpoch(3), named);
            let log = follower.log();
            assert_eq!(log.start_line(), Some(LeaderEpoch(noted)), "{named:?}");
        }
    }

    /// SPEC 3.5: a follower whose log starts past its leader's log end
    /// (after an unclean election or a lost disk) restarts empty at that
    /// end on an `OffsetOutOfRange` answer, and notes as its start line
    /// the epoch the leader names below its end, that of its last record;
    /// an answer naming none leaves it the leader's epoch. It noted none
    /// before (review helper-122): unclean recovery could not tell which
    /// longer log holds the records below it.
    #[test]
    fn a_restart_at_the_leaders_end_notes_the_epoch_the_leader_names_below_it() {
        let leader_dir = tempfile::tempdir().unwrap();
        let leader = lone_leader_of_two_epochs(leader_dir.path());
        let replicas = vec![NodeId(0), NodeId(1)];
        leader
            .become_leader(LeaderEpoch(3), replicas.clone(), replicas.clone(), 1)
            .unwrap();
        let past_the_end = FetchLog {
            log: LogId(0),
            current_leader_epoch: LeaderEpoch(3),
            fetch_offset: Offset(15),
            last_fetched_epoch: None,
            line_epoch: Some(LeaderEpoch(3)),
            log_start_offset: Offset(15),
            bytes_max: 1 << 20,
            applied_offset: None,
        };
        let answer = answer_node_1(&leader, &past_the_end);
        assert_eq!(answer.error, ErrorCode::OffsetOutOfRange);
        assert_eq!(
            (answer.log_end_offset, answer.log_end_epoch),
            (Offset(10), Some(LeaderEpoch(2)))
        );
        for (named, noted) in [(Some(LeaderEpoch(2)), 2), (None, 3)] {
            let dir = tempfile::tempdir().unwrap();
            let follower = follower_without_a_store(dir.path());
            follower
                .log()
                .truncate_fully_and_start_at(Offset(15))
                .unwrap();
            follower.become_follower(
                Some(NodeId(0)),
                LeaderEpoch(3),
                replicas.clone(),
                replicas.clone(),
                2,
            );
            let past_the_end = FetchedLog {
                error: ErrorCode::OffsetOutOfRange,
                log_end_epoch: named,
                ..ten_records_answer(Offset(10), Offset(0), None, Bytes::new())
            };
            follower
                .apply_fetched(NodeId(0), LeaderEpoch(3), past_the_end)
                .unwrap();
            let log = follower.log();
            assert_eq!(
                (log.log_start_offset(), log.log_end_offset()),
                (Offset(10), Offset(10))
            );
            assert_eq!(log.start_line(), Some(LeaderEpoch(noted)), "{named:?}");
        }
        // A log cut to the leader's end without restarting notes nothing.
        let dir = tempfile::tempdir().unwrap();
        let follower = follower_of_ten_records(dir.path());
        let below_its_end = FetchedLog {
            error: ErrorCode::OffsetOutOfRange,
            log_end_offset: Offset(7),
            log_end_epoch: Some(LeaderEpoch(1)),
            ..ten_records_answer(Offset(0), Offset(0), None, Bytes::new())
        };
        follower
            .apply_fetched(NodeId(0), LeaderEpoch(1), below_its_end)
            .unwrap();
        let log = follower.log();
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (Offset(0), Offset(7))
        );
        assert_eq!(log.start_line(), None, "no restart, no start line");
        // A leader holding no record names its start line below its end.
        let empty_dir = tempfile::tempdir().unwrap();
        let empty = lone_leader(empty_dir.path());
        empty.log().truncate_fully_and_start_at(Offset(5)).unwrap();
        empty.log().note_start_line(LeaderEpoch(1)).unwrap();
        empty
            .become_leader(LeaderEpoch(3), replicas.clone(), replicas, 1)
            .unwrap();
        let answer = answer_node_1(
            &empty,
            &FetchLog {
                fetch_offset: Offset(8),
                ..past_the_end
            },
        );
        assert_eq!(answer.error, ErrorCode::OffsetOutOfRange);
        assert_eq!(
            (answer.log_end_offset, answer.log_end_epoch),
            (Offset(5), Some(LeaderEpoch(1)))
        );
    }

    /// The epoch a fetch answer named below the leader's start is the
    /// start line only of a log restarted at that very start; at another
    /// offset (the machine's own restart point), or named by none, the
    /// leader's epoch.
    #[test]
    fn a_named_start_epoch_holds_only_at_the_start_it_was_named_for() {
        let named = StartNamed {
            offset: Offset(5),
            epoch: Some(LeaderEpoch(1)),
        };
        assert_eq!(named.line_at(Offset(5), LeaderEpoch(3)), LeaderEpoch(1));
        assert_eq!(named.line_at(Offset(6), LeaderEpoch(3)), LeaderEpoch(3));
        let unnamed = StartNamed {
            offset: Offset(5),
            epoch: None,
        };
        assert_eq!(unnamed.line_at(Offset(5), LeaderEpoch(3)), LeaderEpoch(3));
    }

    /// A follower of node 0 in `epoch`, its application at 7, whose
    /// log restarted, empty, at 5 on an `OffsetOutOfRange` answer of a
    /// leader starting there that named `named` below its start.
    fn follower_restarted_at_5(
        dir: &std::path::Path,
        epoch: LeaderEpoch,
        named: Option<LeaderEpoch>,
    ) -> Replica {
        let follower = follower_without_a_store(dir);
        let replicas = vec![NodeId(0), NodeId(1)];
        follower.become_follower(Some(NodeId(0)), epoch, replicas.clone(), replicas, 2);
        follower.applied.set(NodeId(1), Offset(7));
        let below_the_start = FetchedLog {
            error: ErrorCode::OffsetOutOfRange,
            log_start_epoch: named,
            ..ten_records_answer(Offset(10), Offset(5), None, Bytes::new())
        };
        follower
            .apply_fetched(NodeId(0), epoch, below_the_start)
            .unwrap();
        let log = follower.log();
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (Offset(5), Offset(5))
        );
        follower
    }

    /// A follower without a snapshot store in `dir` holding what a lone
    /// leader wrote in epoch 1: ten one-record batches, offsets 0 to 9,
    /// its high watermark still 0.
    fn follower_of_ten_records(dir: &std::path::Path) -> Replica {
        let leader_dir = tempfile::tempdir().unwrap();
        let leader = leader_of_ten_records(leader_dir.path());
        let records = leader.read(Offset(0), 1 << 20, false).unwrap();
        let follower = follower_without_a_store(dir);
        follower
            .apply_fetched(
                NodeId(0),
                LeaderEpoch(1),
                ten_records_answer(Offset(0), Offset(0), None, records),
            )
            .unwrap();
        assert_eq!(follower.log().log_end_offset(), Offset(10));
        follower
    }

    /// An answer of the leader of [`follower_of_ten_records`], whose log
    /// ends at 10.
    fn ten_records_answer(
        high_watermark: Offset,
        log_start_offset: Offset,
        diverging: Option<EpochEndOffset>,
        records: Bytes,
    ) -> FetchedLog {
        FetchedLog {
            log: LogId(0),
            error: ErrorCode::None,
            high_watermark,
            log_start_offset,
            log_end_offset: Offset(10),
            log_start_epoch: None,
            log_end_epoch: None,
            diverging,
            records,
            applied_offsets: Vec::new(),
        }
    }

    /// SPEC 3.6 (simulator seed 20012215): told that its log and the
    /// leader's agree at most up to the leader's log start, a follower
    /// holding records below that start discards them all: the leader
    /// deleted its own and vouches for none of them. A cut to that start
    /// alone kept a deposed leader's records there.
    #[test]
    fn a_follower_told_the_logs_agree_only_up_to_the_leaders_start_keeps_nothing_below_it() {
        let dir = tempfile::tempdir().unwrap();
        let follower = follower_of_ten_records(dir.path());
        let at_the_start = EpochEndOffset {
            epoch: LeaderEpoch(1),
            end_offset: Offset(5),
        };
        let answer = FetchedLog {
            // The leader names the epoch below its start (SPEC 3.5).
            log_start_epoch: Some(LeaderEpoch(0)),
            ..ten_records_answer(Offset(0), Offset(5), Some(at_the_start), Bytes::new())
        };
        follower
            .apply_fetched(NodeId(0), LeaderEpoch(1), answer)
            .unwrap();
        let log = follower.log();
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (Offset(5), Offset(5)),
            "records below 5 kept, or a log ending below the leader's start (seed 60047659)"
        );
        assert_eq!(log.start_line(), Some(LeaderEpoch(0)), "the named epoch");
    }

    /// The same answer to a follower whose log is empty at the leader's
    /// start (its own start moved there) but still names an epoch the
    /// leader no longer knows: cutting to its start cut nothing, the epoch
    /// stayed, and every fetch got the same answer again (simulator seed
    /// 60012908). It restarts empty at its start, naming no epoch.
    #[test]
    fn an_empty_follower_told_the_logs_agree_only_up_to_the_leaders_start_forgets_its_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let follower = follower_of_ten_records(dir.path());
        // The leader's start moves to 10, and the follower's with it.
        let moved = ten_records_answer(Offset(10), Offset(10), None, Bytes::new());
        follower
            .apply_fetched(NodeId(0), LeaderEpoch(1), moved)
            .unwrap();
        let log = follower.log();
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (Offset(10), Offset(10))
        );
        let epoch = log.latest_epoch().expect("the cache keeps the last epoch");
        let at_the_start = EpochEndOffset {
            epoch,
            end_offset: Offset(10),
        };
        let answer = ten_records_answer(Offset(10), Offset(10), Some(at_the_start), Bytes::new());
        let code = follower
            .apply_fetched(NodeId(0), LeaderEpoch(1), answer)
            .unwrap();
        assert_eq!(code, ErrorCode::None, "backed off");
        let log = follower.log();
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (Offset(10), Offset(10))
        );
        assert_eq!(
            log.latest_epoch(),
            None,
            "the next fetch names the epoch again"
        );
    }

    /// SPEC 3.9: a follower without a snapshot store whose application's
    /// position was below its leader's log start says it needs a snapshot;
    /// once its application reports a position at or above that start (a
    /// restarted node whose stored position was older than the one its
    /// application had reported: the simulator's applications), its log
    /// still reaching it, it needs none any more. The flag stayed set
    /// until the next role change, and `needs_snapshot()` said so for ever.
    #[test]
    fn a_follower_whose_application_catches_up_with_the_log_start_needs_no_snapshot() {
        let leader_dir = tempfile::tempdir().unwrap();
        let leader = leader_of_ten_records(leader_dir.path());
        let records = leader.read(Offset(0), 1 << 20, false).unwrap();

        let dir = tempfile::tempdir().unwrap();
        let follower = follower_without_a_store(dir.path());
        let answer = |records: Bytes| FetchedLog {
            log: LogId(0),
            error: ErrorCode::None,
            high_watermark: Offset(10),
            log_start_offset: Offset(5),
            log_end_offset: Offset(10),
            log_start_epoch: None,
            log_end_epoch: None,
            diverging: None,
            records,
            applied_offsets: Vec::new(),
        };
        follower
            .apply_fetched(NodeId(0), LeaderEpoch(1), answer(records))
            .unwrap();
        assert_eq!(follower.log().log_end_offset(), Offset(10));
        assert!(
            follower.needs_snapshot(),
            "its application never reported: it has applied nothing below the leader's start 5"
        );
        follower.set_applied(Offset(7)).unwrap();
        assert!(
            !follower.needs_snapshot(),
            "its application reached 7, above the leader's start, and its log holds 7 on"
        );
        follower
            .apply_fetched(NodeId(0), LeaderEpoch(1), answer(Bytes::new()))
            .unwrap();
        assert!(!follower.needs_snapshot());
    }

    /// A store whose latest snapshot is at offset `.0`, of 8 bytes.
    struct LatestAt(Offset);

    impl SnapshotStore for LatestAt {
        fn latest(&self, _log: LogId) -> Option<SnapshotInfo> {
            Some(SnapshotInfo {
                offset: self.0,
                size_bytes: 8,
            })
        }

        fn read_chunk(
            &self,
            _log: LogId,
            _snapshot: SnapshotInfo,
            position: u64,
            len: usize,
        ) -> std::io::Result<Bytes> {
            Ok(Bytes::from(vec![7u8; len.min(8 - position as usize)]))
        }

        fn install(
            &self,
            _log: LogId,
            _snapshot: SnapshotInfo,
            _data: &mut dyn std::io::Read,
        ) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// SPEC 3.9: a leader serves its application's snapshot anywhere in
    /// [log start, log end], above its high watermark and its own
    /// application's position too (both lag after an unclean restart, the
    /// latter after a restore from scratch: simulator seeds 1122 and
    /// 20002921 deadlocked there), and nothing past its log end.
    #[test]
    fn a_leader_serves_a_snapshot_up_to_its_log_end_whatever_its_high_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogConfig::default(), Arc::new(SystemClock)).unwrap();
        let leader = Replica::new(
            LogId(0),
            NodeId(0),
            log,
            ReplicationConfig::default(),
            Arc::new(SystemClock),
            Arc::new(Watch::new(0)),
            false,
        );
        let replicas = vec![NodeId(0), NodeId(1)];
        leader
            .become_leader(LeaderEpoch(1), replicas.clone(), replicas, 1)
            .unwrap();
        for _ in 0..10 {
            let mut builder = RecordBatchBuilder::new(1);
            builder.push(b"v");
            leader
                .append_as_leader(&builder.build().unwrap(), false, true, false)
                .unwrap();
        }
        assert_eq!(leader.high_watermark(), Offset(0), "node 1 fetched nothing");
        let request = SnapshotRequest {
            replica: NodeId(1),
            log: LogId(0),
            current_leader_epoch: LeaderEpoch(1),
            position: 0,
            bytes_max: 1024,
            snapshot: None,
        };
        let answer = leader.answer_snapshot(&request, Some(&LatestAt(Offset(11))));
        assert_eq!(
            answer.error,
            ErrorCode::SnapshotUnavailable,
            "11 is past the log end, 10"
        );
        let answer = leader.answer_snapshot(&request, Some(&LatestAt(Offset(6))));
        assert_eq!(answer.error, ErrorCode::None, "6 is within the log");
        assert_eq!(answer.snapshot_offset, Offset(6));
        assert_eq!(answer.data.len(), 8);
        let answer = leader.answer_snapshot(&request, Some(&LatestAt(Offset(10))));
        assert_eq!(answer.error, ErrorCode::None, "the log end itself");
    }

    /// A store holding two snapshots of 8 bytes, both readable: the
    /// latest at offset 8 and an older one at offset 6 (its bytes are 6s,
    /// the latest's 8s); one at offset 4 that it no longer holds.
    struct TwoSnapshots;

    impl TwoSnapshots {
        const OLDER: SnapshotInfo = SnapshotInfo {
            offset: Offset(6),
            size_bytes: 8,
        };
        const LATEST: SnapshotInfo = SnapshotInfo {
            offset: Offset(8),
            size_bytes: 8,
        };
        const DELETED: SnapshotInfo = SnapshotInfo {
            offset: Offset(4),
            size_bytes: 8,
        };
    }

    impl SnapshotStore for TwoSnapshots {
        fn latest(&self, _log: LogId) -> Option<SnapshotInfo> {
            Some(Self::LATEST)
        }

        fn read_chunk(
            &self,
            _log: LogId,
            snapshot: SnapshotInfo,
            position: u64,
            len: usize,
        ) -> std::io::Result<Bytes> {
            if snapshot != Self::OLDER && snapshot != Self::LATEST {
                return Err(std::io::Error::other("no such snapshot"));
            }
            let end = (position as usize + len).min(8);
            Ok(Bytes::from(vec![
                snapshot.offset.0 as u8;
                end.saturating_sub(position as usize)
            ]))
        }

        fn install(
            &self,
            _log: LogId,
            _snapshot: SnapshotInfo,
            _data: &mut dyn std::io::Read,
        ) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// SPEC 3.9: a transfer reads the snapshot it began to its end. A
    /// request that names no snapshot (a transfer's first) gets the
    /// latest; one that names a snapshot gets that one, though a newer one
    /// is the latest, while the store can read it and its offset is within
    /// [log start, log end]; otherwise it is unavailable (the follower
    /// starts again from the latest). Before, every chunk came from the
    /// latest, and a transfer that took longer than the time between two
    /// snapshots started again at each one and never ended. The fencing
    /// checks come first, as for the latest.
    #[test]
    fn a_leader_serves_the_snapshot_a_request_names_else_its_latest() {
        let dir = tempfile::tempdir().unwrap();
        let leader = leader_of_ten_records(dir.path());
        let replicas = vec![NodeId(0), NodeId(1)];
        leader
            .become_leader(LeaderEpoch(2), replicas.clone(), replicas, 1)
            .unwrap();
        let ask = |snapshot: Option<SnapshotInfo>, position: u64| SnapshotRequest {
            replica: NodeId(1),
            log: LogId(0),
            current_leader_epoch: LeaderEpoch(2),
            position,
            bytes_max: 4,
            snapshot,
        };
        let first = leader.answer_snapshot(&ask(None, 0), Some(&TwoSnapshots));
        assert_eq!(first.error, ErrorCode::None);
        assert_eq!(
            (first.snapshot_offset, first.snapshot_bytes, &first.data[..]),
            (Offset(8), 8, &[8u8; 4][..]),
            "a first request gets the latest"
        );
        let named = leader.answer_snapshot(&ask(Some(TwoSnapshots::OLDER), 4), Some(&TwoSnapshots));
        assert_eq!(named.error, ErrorCode::None);
        assert_eq!(
            (named.snapshot_offset, named.snapshot_bytes, &named.data[..]),
            (Offset(6), 8, &[6u8; 4][..]),
            "a named snapshot is served though a newer one is the latest"
        );
        assert_eq!(named.crc32, crc32fast::hash(&[6u8; 4]));
        assert_eq!(
            named.snapshot_epoch,
            Some(LeaderEpoch(1)),
            "record 5 is epoch 1's"
        );
        let gone =
            leader.answer_snapshot(&ask(Some(TwoSnapshots::DELETED), 4), Some(&TwoSnapshots));
        assert_eq!(
            gone.error,
            ErrorCode::SnapshotUnavailable,
            "the store no longer reads it: not the latest instead"
        );
        assert!(gone.data.is_empty());
        let past_end = SnapshotInfo {
            offset: Offset(11),
            size_bytes: 8,
        };
        assert_eq!(
            leader
                .answer_snapshot(&ask(Some(past_end), 0), Some(&TwoSnapshots))
                .error,
            ErrorCode::SnapshotUnavailable,
            "11 is past the log end, 10"
        );
        assert_eq!(
            leader
                .answer_snapshot(&ask(Some(TwoSnapshots::OLDER), 9), Some(&TwoSnapshots))
                .error,
            ErrorCode::OffsetOutOfRange,
            "past the named snapshot's 8 bytes"
        );
        assert_eq!(
            leader
                .answer_snapshot(&ask(Some(TwoSnapshots::OLDER), 0), None)
                .error,
            ErrorCode::SnapshotUnavailable,
            "no store"
        );
        let fenced = SnapshotRequest {
            current_leader_epoch: LeaderEpoch(1),
            ..ask(Some(TwoSnapshots::OLDER), 4)
        };
        assert_eq!(
            leader.answer_snapshot(&fenced, Some(&TwoSnapshots)).error,
            ErrorCode::FencedLeaderEpoch
        );
        let stranger = SnapshotRequest {
            replica: NodeId(7),
            ..ask(Some(TwoSnapshots::OLDER), 4)
        };
        assert_eq!(
            leader.answer_snapshot(&stranger, Some(&TwoSnapshots)).error,
            ErrorCode::InvalidRequest
        );
        // The log start passes the named snapshot: it could not be fetched
        // on from.
        leader.log().set_log_start_offset(Offset(7)).unwrap();
        assert_eq!(
            leader
                .answer_snapshot(&ask(Some(TwoSnapshots::OLDER), 4), Some(&TwoSnapshots))
                .error,
            ErrorCode::SnapshotUnavailable,
            "6 is below the log start, 7"
        );
    }

    /// SPEC 3.5, 3.9: a snapshot's chunks name the epoch of the leader's
    /// record below the snapshot's offset (not the leader's own epoch),
    /// and the follower that installs it notes that epoch as its start
    /// line; a leader that does not name one leaves it the leader's
    /// epoch. With the leader's epoch, a longer log holding the records
    /// past the snapshot but none of that epoch was passed over by
    /// unclean recovery for the empty one (the loss of simulator seed
    /// 60357926, should the first batch's own start line not be written).
    #[test]
    fn an_installed_snapshot_names_the_epoch_of_the_record_below_it() {
        let leader_dir = tempfile::tempdir().unwrap();
        let leader = leader_of_ten_records(leader_dir.path());
        let replicas = vec![NodeId(0), NodeId(1)];
        leader
            .become_leader(LeaderEpoch(3), replicas.clone(), replicas.clone(), 1)
            .unwrap();
        let mut builder = RecordBatchBuilder::new(1);
        builder.push(b"v");
        leader
            .append_as_leader(&builder.build().unwrap(), false, true, false)
            .unwrap();
        let request = SnapshotRequest {
            replica: NodeId(1),
            log: LogId(0),
            current_leader_epoch: LeaderEpoch(3),
            position: 0,
            bytes_max: 1024,
            snapshot: None,
        };
        let epoch_at = |offset: u64| {
            let answer = leader.answer_snapshot(&request, Some(&LatestAt(Offset(offset))));
            assert_eq!(answer.error, ErrorCode::None, "{offset}");
            answer.snapshot_epoch
        };
        assert_eq!(epoch_at(0), None, "nothing lies below offset 0");
        assert_eq!(epoch_at(10), Some(LeaderEpoch(1)), "record 9 is epoch 1's");
        assert_eq!(epoch_at(11), Some(LeaderEpoch(3)), "record 10 is epoch 3's");
        for (named, noted) in [(Some(LeaderEpoch(1)), 1), (None, 3)] {
            let dir = tempfile::tempdir().unwrap();
            let follower = follower_without_a_store(dir.path());
            follower.become_follower(
                Some(NodeId(0)),
                LeaderEpoch(3),
                replicas.clone(),
                replicas.clone(),
                2,
            );
            follower
                .snapshot_installed(
                    NodeId(0),
                    LeaderEpoch(3),
                    SnapshotId {
                        offset: Offset(10),
                        size_bytes: 0,
                        epoch: named,
                    },
                )
                .unwrap();
            let log = follower.log();
            assert_eq!(
                (log.log_start_offset(), log.log_end_offset()),
                (Offset(10), Offset(10))
            );
            assert_eq!(log.start_line(), Some(LeaderEpoch(noted)), "{named:?}");
        }
    }

    #[test]
    fn high_watermark_publishes_arriving_out_of_order_never_hide_committed_records() {
        // Two fetch threads may compute 5 then 10 under the leader's lock but
        // publish 10 first and 5 last. Neither the watch nor the log's own
        // high watermark (the limit of committed reads) may move back.
        let dir = tempfile::tempdir().unwrap();
        let replica = lone_leader(dir.path());
        for _ in 0..10 {
            let mut builder = RecordBatchBuilder::new(1);
            builder.push(b"v");
            replica
                .append_as_leader(&builder.build().unwrap(), false, true, false)
                .unwrap();
        }
        replica.publish_high_watermark(Offset(10));
        replica.publish_high_watermark(Offset(5));
        assert_eq!(replica.high_watermark(), Offset(10));
        assert_eq!(replica.log().high_watermark(), Offset(10));
        let committed = replica.read(Offset(5), 1 << 20, true).unwrap();
        let batches = crate::record::BatchIter::new(committed).count();
        assert_eq!(batches, 5, "offsets 5..10 are committed and readable");
    }
}
