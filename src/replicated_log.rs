//! `ReplicatedLog`: the public handle of one log on one node — append with
//! `acks`, read committed (or uncommitted) data, wait for data, and the
//! getters an application exports as metrics. Thin over `Replica`.

use std::time::{Duration, Instant};

use crate::append::{Acks, AppendOutcome};
use crate::error::{Error, Result};
use crate::node::{LogParts, Node, NodeShared};
use crate::record::{Record, RecordBatch, RecordBatchBuilder};
use crate::replication::{AppendHandle, Completion, DeferredWriter, Replica, Role};
use crate::sync::Arc;
use crate::types::{LeaderEpoch, LogId, NodeId, Offset};

/// Which records a read may return (SPEC 3.8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// Only records below the high watermark. The default.
    #[default]
    Committed,
    /// Everything up to the log end offset (leader only; for diagnostics).
    Uncommitted,
}

/// One log on one node. Cheap to clone; callable from many threads.
#[derive(Clone, Debug)]
pub struct ReplicatedLog {
    replica: Arc<Replica>,
    node: Arc<NodeShared>,
}

// `Node`'s methods that hand out this handle live here, in the public face,
// and not in `node.rs`: the runtime hands out the parts
// (`Node::log_parts`) and never names the face above it.
impl Node {
    /// The replica of `log` on this node, or `Error::UnknownLog` if this node
    /// does not host it (yet: the coordinator's notification may still be on
    /// its way).
    #[inline]
    pub fn log(&self, log: LogId) -> Result<ReplicatedLog> {
        self.log_parts(log).map(ReplicatedLog::new)
    }

    /// Like [`Node::log`], waiting up to `timeout` for the node to host it.
    pub fn wait_for_log(&self, log: LogId, timeout: Duration) -> Result<ReplicatedLog> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.log(log) {
                Ok(handle) => return Ok(handle),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => {
                    crate::simulation::forbid_in_simulation("a sleep waiting for a log");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
}

impl ReplicatedLog {
    fn new(parts: LogParts) -> ReplicatedLog {
        let LogParts { replica, node } = parts;
        ReplicatedLog { replica, node }
    }

    /// The log's id.
    pub fn id(&self) -> LogId {
        self.replica.log_id()
    }

    /// The node this handle lives on.
    pub fn node_id(&self) -> NodeId {
        self.node.config.node_id
    }

    /// Appends `batch` on this node, which must be the leader (SPEC 3.1).
    ///
    /// Errors: `NotLeader` (try the leader it names), `NotEnoughReplicas`
    /// (`acks=all` and the ISR is below `min_insync_replicas`: nothing was
    /// appended), `NotEnoughReplicasAfterAppend` (the batch is in the log
    /// but the ISR shrank before it was committed), `Timeout` (unknown
    /// outcome), `Shutdown` (this handle's node was shut down, halted or
    /// crashed: at once, and nothing was appended, if it had stopped before
    /// the call; unknown outcome for an `acks=all` append whose node stopped
    /// while it waited), `Poisoned` (this replica's storage failed: at once,
    /// and nothing was appended, if it had failed before the call, whatever
    /// the `acks`; the node must open the log again). `Io` or `Poisoned`
    /// raised by the write itself or by the fsync after it (the flush
    /// policy's, a roll's) is an unknown outcome: the batch may be in the
    /// log and may still be replicated and committed. `NotLeader` after an
    /// `acks=all` append was written (the replica stopped leading while
    /// it waited) is an unknown outcome too: a new leader may hold the
    /// batch, as in Kafka. With `Acks::None` the
    /// offsets are returned when the append succeeded, and errors of the
    /// write are only logged.
    pub fn append(&self, batch: &RecordBatch, acks: Acks) -> Result<AppendOutcome> {
        let (outcome, generation) = self.append_unwaited(batch, acks)?;
        if acks == Acks::All {
            self.replica
                .wait_committed(outcome.last_offset, generation, Instant::now(), || {
                    self.node.is_stopped()
                })?;
        }
        Ok(outcome)
    }

    /// [`append`](Self::append) up to its wait for the commit: the
    /// batch's outcome as written, and the role generation it was written
    /// in.
    fn append_unwaited(&self, batch: &RecordBatch, acks: Acks) -> Result<(AppendOutcome, u64)> {
        // A stopped node's replicas may still say they lead (a halt stops
        // the threads, nothing else): without this an acks=1 append would
        // succeed on a dead node and an acks=all one wait out its timeout.
        if self.node.is_stopped() {
            return Err(Error::Shutdown);
        }
        // An acks=all append waits for the followers' fetches anyway: it
        // may leave its write to the next one when other appends wait
        // too, which then writes them together (`append_as_leader`).
        let appended = match self.replica.append_as_leader(
            batch,
            acks == Acks::All,
            acks == Acks::Leader,
            acks == Acks::All,
        ) {
            Ok(appended) => appended,
            Err(error) if acks == Acks::None => {
                tracing::debug!(log = %self.id(), %error, "acks=0 append failed");
                return Err(error);
            }
            Err(error) => return Err(error),
        };
        // This append may have written (and, on a lone leader, committed)
        // pipelined appends queued behind the same write.
        self.replica.resolve_pipelined();
        if let Some(error) = appended.failed_after_write {
            // SPEC 3.1: acks=0 reports no error of the write itself, and
            // its offsets are where the batch may be.
            if acks == Acks::None {
                tracing::debug!(log = %self.id(), %error, "acks=0 append failed in or after its write");
            } else {
                // The caller learns the failure, and (documented above)
                // that the batch may be in the log.
                return Err(error);
            }
        }
        let outcome = AppendOutcome {
            base_offset: appended.info.base_offset,
            last_offset: appended.info.last_offset,
            leader_epoch: appended.info.leader_epoch,
            duplicate: appended.info.duplicate,
        };
        Ok((outcome, appended.generation))
    }

    /// A blocking `acks=all` [`append`](Self::append) split at its wait,
    /// for a caller that steps the node instead of blocking on it (the
    /// simulator's blocking clients): the same write, and what to ask
    /// [`blocking_append_outcome`](Self::blocking_append_outcome) after
    /// each step. An error is the one `append` would return before waiting.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn begin_blocking_append(&self, batch: &RecordBatch) -> Result<BlockingAppend> {
        let (outcome, generation) = self.append_unwaited(batch, Acks::All)?;
        Ok(BlockingAppend {
            outcome,
            generation,
        })
    }

    /// The outcome `append` would return for `append` now (see
    /// [`Replica::committed_now`]), `past_deadline` once its caller's
    /// clock passed `request_timeout` after the call; `None` while `append`
    /// would go on waiting.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn blocking_append_outcome(
        &self,
        append: &BlockingAppend,
        past_deadline: bool,
    ) -> Option<Result<AppendOutcome>> {
        let decided = self.replica.committed_now(
            append.outcome.last_offset,
            append.generation,
            self.node.is_stopped(),
            past_deadline,
        )?;
        Some(decided.map(|_| append.outcome))
    }

    /// Appends `batch` on this node, which must be the leader, without
    /// waiting for the outcome: the batch gets its place in the log before
    /// this returns (so batches appended one after another from one thread
    /// get increasing offsets, in call order), and the returned
    /// [`AppendHandle`] yields the outcome once it is known — exactly what
    /// [`append`](Self::append) would have returned for the same batch and
    /// `acks`: the [`AppendOutcome`], or `NotEnoughReplicasAfterAppend`,
    /// `NotLeader` (the role changed first), `Shutdown` (the node stopped
    /// first), `Timeout` (at `request_timeout`, within 100 ms of it even
    /// while the coordinator hangs: the node's deadline timer decides it),
    /// `Poisoned` or `Io` (the write, or the fsync after it, failed: the
    /// batch may be in the log). `NotLeader`, `Shutdown`, `Timeout`,
    /// `Poisoned` and `Io` from a handle are unknown outcomes, as from
    /// `append`: the batch may still be committed. Every handle is
    /// resolved, at the latest at its timeout or when the node stops.
    ///
    /// Errors returned here mean nothing was appended: those of `append`
    /// before the write (`NotLeader`, `NotEnoughReplicas`, `Shutdown`,
    /// `Poisoned`, an invalid batch), and [`Error::PipelineFull`]: the log's pipelined
    /// appends not resolved yet hold
    /// [`ReplicationConfig::pipelined_bytes_max`](crate::ReplicationConfig::pipelined_bytes_max)
    /// bytes, and none were freed within
    /// [`pipelined_block_max`](crate::ReplicationConfig::pipelined_block_max),
    /// for which this call blocks (Kafka's `buffer.memory` and
    /// `max.block.ms`). With `Acks::None` the append is done before this
    /// returns (as [`append`](Self::append)) and the handle is resolved.
    pub fn append_pipelined(&self, batch: &RecordBatch, acks: Acks) -> Result<AppendHandle> {
        if acks == Acks::None {
            return self
                .append(batch, Acks::None)
                .map(|outcome| AppendHandle::resolved(Ok(outcome)));
        }
        if self.node.is_stopped() {
            return Err(Error::Shutdown);
        }
        let bytes = batch.size_bytes();
        self.replica.reserve_pipelined(bytes)?;
        let acks_all = acks == Acks::All;
        let mut appended = match self
            .replica
            .append_as_leader(batch, acks_all, false, acks_all)
        {
            Ok(appended) => appended,
            Err(error) => {
                self.replica.release_pipelined(bytes);
                self.replica.resolve_pipelined();
                return Err(error);
            }
        };
        if let Some(error) = appended.failed_after_write.take() {
            // The batch was written, then its fsync (or a roll's flush)
            // failed: it may be in the log, so this is an outcome, not an
            // error of the call ("nothing was appended"), and a caller
            // must not retry it as if nothing had been.
            self.replica.release_pipelined(bytes);
            self.replica.resolve_pipelined();
            return Ok(AppendHandle::resolved(Err(error)).placed_in(appended.leader_epoch));
        }
        // With nothing else of this log in flight (and the latest
        // resolution pass resolving at most one), the handle's first poll
        // spins for the outcome rather than waking through the completion
        // thread (see `AppendHandle::with_spin`).
        let lone = self.replica.pipelined_alone();
        // Its callback or waker runs on the node's completion thread, the
        // runner of every resolution pass of this replica's appends.
        let (cell, handle) = Completion::new_pair_on_pass_runner();
        let handle = handle.placed_in(appended.leader_epoch);
        let handle = if lone {
            handle.with_spin(self.node.config.replication.spin_before_park)
        } else {
            handle
        };
        self.replica
            .queue_pipelined(&appended, acks_all, bytes, cell);
        // This append's write may have decided others' outcomes. One left
        // for the next fetch wrote nothing: that fetch resolves them.
        if !appended.deferred {
            self.replica.resolve_pipelined();
        }
        Ok(handle)
    }

    /// Bytes of pipelined appends on this log whose outcome is not known
    /// yet (bounded by `ReplicationConfig::pipelined_bytes_max`).
    pub fn pipelined_bytes_in_flight(&self) -> usize {
        self.replica.pipelined_bytes_in_flight().0
    }

    /// The most bytes pipelined appends on this log ever held in flight
    /// (never above `ReplicationConfig::pipelined_bytes_max`).
    pub fn pipelined_bytes_in_flight_peak(&self) -> usize {
        self.replica.pipelined_bytes_in_flight().1
    }

    /// Pipelined appends on this log whose outcome is not known yet.
    pub fn pipelined_appends_pending(&self) -> usize {
        self.replica.pipelined_pending()
    }

    /// Builds a batch of `values` (one record each, no key, timestamped
    /// now) and appends it.
    pub fn append_values<V: AsRef<[u8]>>(&self, values: &[V], acks: Acks) -> Result<AppendOutcome> {
        let bytes: usize = values.iter().map(|v| v.as_ref().len() + 32).sum();
        let mut builder = RecordBatchBuilder::with_capacity(self.node.clock.wall_clock_ms(), bytes);
        for value in values {
            builder.push(value.as_ref());
        }
        self.append(&builder.build()?, acks)
    }

    /// Reads whole batches starting with the one that holds `from`, up to
    /// about `bytes_max` (at least one batch when there is one). The first
    /// batch may start before `from`. `Uncommitted` is for the leader only.
    ///
    /// `Committed` (SPEC 3.8, G3) returns only records below this replica's
    /// high watermark *at the moment of the read*. What that promises a
    /// caller who reads [`high_watermark`](Self::high_watermark) afterwards
    /// depends on the role:
    /// - on a leader the high watermark never moves back within its epoch,
    ///   so every offset returned is below any later reading in that epoch;
    /// - on a follower it may move back: each fetch answer sets it to
    ///   `min(leader HW, own LEO)` (SPEC 3.2), and a newly elected leader's
    ///   high watermark can lag the one the previous leader had already
    ///   passed on (SPEC 3.8). A follower that returned offset 10 while its
    ///   high watermark was 11 may report 10 a moment later. The record was
    ///   committed all the same, and stays so; only the follower's view of
    ///   the committed end fell behind.
    pub fn read(
        &self,
        from: Offset,
        bytes_max: usize,
        isolation: Isolation,
    ) -> Result<Vec<RecordBatch>> {
        self.replica
            .read_batches(from, bytes_max, isolation == Isolation::Committed)
    }

    /// Like [`read`](Self::read) with `Committed`, but waits up to `timeout`
    /// for a record at or after `from` to be committed. Returns an empty
    /// list if none was.
    pub fn read_blocking(
        &self,
        from: Offset,
        bytes_max: usize,
        timeout: Duration,
    ) -> Result<Vec<RecordBatch>> {
        let deadline = Instant::now() + timeout;
        if self.high_watermark() <= from
            && self
                .replica
                .wait_for_high_watermark_above(from, deadline)
                .is_none()
        {
            return Ok(Vec::new());
        }
        self.read(from, bytes_max, Isolation::Committed)
    }

    /// A blocking iterator over committed records from `from` on, for an
    /// apply loop (SPEC 6). It waits at the high watermark, keeps going
    /// across leader changes, and ends once this handle's node stops.
    pub fn committed_records(&self, from: Offset) -> CommittedRecords {
        CommittedRecords {
            log: self.clone(),
            next: from,
            buffered: std::collections::VecDeque::new(),
            wait_max: Duration::from_millis(100),
            finished: false,
        }
    }

    /// This replica's role.
    pub fn role(&self) -> Role {
        self.replica.role().0
    }

    /// The leader epoch this replica knows.
    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.replica.role().1
    }

    /// Whether this replica is the leader.
    pub fn is_leader(&self) -> bool {
        self.role() == Role::Leader
    }

    /// The high watermark: every offset below it is committed. Never moves
    /// back on a leader within its epoch; on a follower it follows the
    /// leader's and may move back (see [`read`](Self::read)). It is a lower
    /// bound, not the committed end: a new leader's can be below what the
    /// previous leader acknowledged; [`committed_end`](Self::committed_end)
    /// says when it is the end.
    pub fn high_watermark(&self) -> Offset {
        self.replica.high_watermark()
    }

    /// The committed end of the log, on the leader: every offset below it
    /// is committed and, unlike [`high_watermark`](Self::high_watermark),
    /// no offset at or above it had been acknowledged by an earlier leader
    /// (SPEC 3.8).
    ///
    /// A newly elected leader starts from the high watermark it had as a
    /// follower, which can be below what the previous leader acknowledged:
    /// until its followers have fetched up to the start offset of its
    /// epoch, this returns [`Error::CommittedEndNotYetKnown`] (Kafka's
    /// `OFFSET_NOT_AVAILABLE`), which is retriable. On a follower it
    /// returns [`Error::NotLeader`]: a follower's high watermark is only its
    /// view, and may lag or move back.
    pub fn committed_end(&self) -> Result<Offset> {
        self.replica.committed_end()
    }

    /// The log end offset: the offset the next record will get (on a
    /// leader, past every append that returned).
    pub fn log_end_offset(&self) -> Offset {
        self.replica.write_deferred(DeferredWriter::Reader);
        self.replica.log().log_end_offset()
    }

    /// The offset below which this replica's log is on disk (fsynced).
    pub fn flushed_offset(&self) -> Offset {
        self.replica.log().flushed_offset()
    }

    /// Whether this replica's storage failed (a failed write or fsync); a
    /// leader in that state hands its leadership over.
    pub fn is_storage_failed(&self) -> bool {
        self.replica.log().is_poisoned()
    }

    /// Test harness only: makes this replica's storage fail as a failed
    /// fsync would.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn fail_storage_for_test(&self) {
        self.replica
            .log()
            .poison_for_test("simulated fsync failure");
    }

    /// Test harness only: whether a log start move of this replica (a
    /// follower following its leader's) still waits for its background
    /// file work, the checkpoint among it: a crash now reopens the log
    /// with its older start.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn log_start_move_pending_for_test(&self) -> bool {
        self.replica.log().log_start_moves_pending()
    }

    /// Storage counters of this replica (appends, fsyncs, bytes, segments).
    pub fn log_stats(&self) -> crate::storage::LogStats {
        self.replica.log().stats()
    }

    /// The first offset the log still holds.
    pub fn log_start_offset(&self) -> Offset {
        self.replica.log().log_start_offset()
    }

    /// Tells the log how far this replica's application has applied it:
    /// every record below `applied` is durable in the application's own
    /// state (SPEC 3.9; a database stores it in the same write as the
    /// applied state, SPEC 6). Followers carry it to the leader in their
    /// fetches; under [`ReplicationConfig::retain_until_applied`](crate::ReplicationConfig::retain_until_applied)
    /// (the default) no record at or above the lowest such position over
    /// the log's replicas is deleted (unless the cap has passed), so until
    /// every replica's application has called it, nothing is. It may go
    /// down (an application restored an older checkpoint). Kept in the log's
    /// directory by the retention timer and at shutdown; call it again
    /// after a restart.
    ///
    /// Errors: `OffsetOutOfRange` when `applied` is above this replica's
    /// log end (nothing changes), unless this replica is a follower that
    /// waits for a snapshot because its log ends below its leader's log
    /// start ([`needs_snapshot`](Self::needs_snapshot)): its log may have
    /// lost records its application holds (a cut after corruption), and a
    /// position at or above that start lets its log restart there rather
    /// than wait for a snapshot.
    pub fn set_applied(&self, applied: Offset) -> Result<()> {
        self.replica.set_applied(applied)
    }

    /// Every applied position this replica knows, by replica: on the
    /// leader, as its followers last reported them; on a follower, as its
    /// leader last told it (its own as it set it).
    pub fn applied_positions(&self) -> std::collections::BTreeMap<NodeId, Offset> {
        self.replica.applied_positions()
    }

    /// Where deletion stops on this replica, who holds it there and how
    /// many bytes are kept for them (SPEC 3.9; meaningful on the leader,
    /// which decides deletion).
    pub fn deletion_bound(&self) -> Result<crate::DeletionBound> {
        self.replica.deletion_bound()
    }

    /// Deletes every record below `offset` now (Kafka's `DeleteRecords`,
    /// KIP-107): the leader's log start offset moves exactly to `offset`,
    /// segments wholly below it are deleted, and it is checkpointed (it
    /// survives the leader's restarts). Followers follow it from their next
    /// fetch answer (SPEC 3.9); the call returns without waiting for them.
    /// A follower that becomes leader before it learned the new start
    /// still holds the records, so after a failover a deletion may have to
    /// be asked for again (Kafka's `DeleteRecords` instead answers once
    /// every live replica's log start has passed `offset`, or times out).
    /// Reads below it are then `OffsetOutOfRange`. Returns the log start
    /// offset after the call; an `offset` at or below the current log
    /// start changes nothing.
    ///
    /// Errors, each deleting nothing: `NotLeader`; `DeletionHeldBack` when
    /// `offset` is above a replica's applied position
    /// (`retain_until_applied`, cap not passed); `LogStartAboveHighWatermark`
    /// when it is above the high watermark (only committed records are
    /// deleted, as Kafka answers `OFFSET_OUT_OF_RANGE`).
    pub fn delete_records_before(&self, offset: Offset) -> Result<Offset> {
        if self.node.is_stopped() {
            return Err(Error::Shutdown);
        }
        self.replica.delete_records_before(offset)
    }

    /// Whether this follower's log ends below its leader's log start, or
    /// its application's applied position does (a live follower whose
    /// apply loop stalled past the cap), and it waits for a snapshot (SPEC
    /// 3.9, [`crate::snapshot`]): with a snapshot store it fetches nothing
    /// of this log until one is installed; with no
    /// [`NodeConfig::snapshots`](crate::NodeConfig::snapshots) under
    /// `retain_until_applied` it stays so until an operator acts (a
    /// follower whose log still reaches goes on fetching meanwhile).
    ///
    /// On a leader: whether its application's applied position is below
    /// its log start (it was elected while its application lagged past the
    /// cap). Its application is stuck until it is rebuilt from a snapshot,
    /// which only a follower receives: the node hands the leadership to an
    /// in-sync replica that has fetched everything and whose application
    /// reaches the log start as soon as there is one, and until then leads
    /// on (appends and fetches are served; the application and the
    /// replicas that need a snapshot wait). For the hand-over itself it
    /// stops appends as a controlled shutdown does (for about one fetch
    /// round, at most 2 s; they fail with a retriable
    /// [`Error::NotLeader`](crate::Error::NotLeader)), so that it completes
    /// under continuous load. It then leaves the ISR until its snapshot is
    /// installed and it has caught up: with two replicas and
    /// `min_insync_replicas = 2`, `acks=all` appends fail with
    /// [`Error::NotEnoughReplicas`](crate::Error::NotEnoughReplicas)
    /// meanwhile.
    pub fn needs_snapshot(&self) -> bool {
        self.replica.application_needs_snapshot()
    }

    /// The in-sync replicas this replica knows of.
    pub fn in_sync_replicas(&self) -> Vec<NodeId> {
        self.replica.in_sync_replicas()
    }

    /// All replicas of the log, in assignment order.
    pub fn replicas(&self) -> Vec<NodeId> {
        self.replica.replicas()
    }

    /// On a leader: how far `follower` is behind, in records, and how long
    /// ago it was last caught up. `None` on a follower or for an unknown node.
    pub fn follower_lag(&self, follower: NodeId) -> Option<(u64, Duration)> {
        self.replica.follower_lag(follower)
    }

    /// Waits until this replica is the leader, up to `timeout`.
    pub fn wait_until_leader(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.is_leader() {
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    waited: timeout,
                    waiting_for: "this replica to become leader",
                });
            }
            crate::simulation::forbid_in_simulation("a sleep waiting for leadership");
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

/// Blocking iterator over committed records; see
/// [`ReplicatedLog::committed_records`]. Yields errors from storage, and
/// ends (`None`) once the handle's node has stopped (shut down, halted or
/// crashed), after the records it had already read: a `for` loop over it
/// ends at shutdown. A restarted node's handle resumes from
/// [`position`](Self::position).
#[derive(Debug)]
pub struct CommittedRecords {
    log: ReplicatedLog,
    next: Offset,
    buffered: std::collections::VecDeque<Record>,
    wait_max: Duration,
    /// Set once the node was seen stopped with nothing left to hand out.
    finished: bool,
}

impl CommittedRecords {
    /// The offset of the next record this iterator yields.
    pub fn position(&self) -> Offset {
        self.next
    }

    /// Whether the iterator has ended because its node stopped: it yields
    /// nothing more.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Returns the next committed record, waiting up to `timeout`; `None`
    /// if none was committed in that time or the node has stopped (see
    /// [`is_finished`](Self::is_finished) to tell them apart).
    pub fn next_timeout(&mut self, timeout: Duration) -> Option<Result<Record>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(record) = self.buffered.pop_front() {
                self.next = record.offset.next();
                return Some(Ok(record));
            }
            if self.log.node.is_stopped() {
                self.finished = true;
                return None;
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let batches =
                match self
                    .log
                    .read_blocking(self.next, 1024 * 1024, remaining.min(self.wait_max))
                {
                    Ok(batches) => batches,
                    // Stopped while reading: the end, not an error.
                    Err(_) if self.log.node.is_stopped() => continue,
                    Err(error) => return Some(Err(error)),
                };
            for batch in batches {
                for record in batch.records() {
                    match record {
                        Ok(record) if record.offset >= self.next => self.buffered.push_back(record),
                        Ok(_) => {}
                        Err(error) => return Some(Err(error)),
                    }
                }
            }
            if self.buffered.is_empty() && Instant::now() >= deadline {
                return None;
            }
        }
    }
}

impl Iterator for CommittedRecords {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        loop {
            if let Some(item) = self.next_timeout(Duration::from_secs(3600)) {
                return Some(item);
            }
            if self.finished {
                return None;
            }
        }
    }
}
/// A blocking `acks=all` append under way, split at its wait
/// ([`ReplicatedLog::begin_blocking_append`]).
#[cfg(any(test, feature = "testing"))]
#[derive(Debug)]
pub(crate) struct BlockingAppend {
    outcome: AppendOutcome,
    generation: u64,
}
