//! The one error type callers see.
//!
//! Per-call errors (`NotLeader`, `NotEnoughReplicas`, `Timeout`, ...) say that
//! this call did not do what was asked and the caller may retry, elsewhere or
//! later. Fatal errors (`Corrupt`, `Poisoned`) say the replica's storage can no
//! longer be trusted; after a failed fsync every later call returns
//! `Poisoned` (we never retry an fsync and carry on: the kernel may have
//! dropped the dirty pages it failed to write).

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::types::{LeaderEpoch, LogId, NodeId, Offset, ProducerEpoch, ProducerId, Sequence};

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a call into isrlog.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ---- storage -------------------------------------------------------
    /// An I/O operation on a file failed.
    #[error("I/O error while trying to {operation} {path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// What was being done ("open", "write", "fsync", ...).
        operation: &'static str,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Committed data on disk failed validation. Never raised for a torn
    /// tail after the recovery point: that is truncated and reported.
    #[error("corrupt data in {path} at byte {position}: {reason}")]
    Corrupt {
        /// The file holding the bad bytes.
        path: PathBuf,
        /// Byte position of the first bad byte (or of the bad batch).
        position: u64,
        /// What check failed.
        reason: String,
    },
    /// A checkpoint file could not be parsed.
    #[error("invalid checkpoint file {path}: {reason}")]
    InvalidCheckpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// A previous fsync (or write) failed, so the log's durable state is
    /// unknown; the log refuses all further work until reopened. Also what
    /// a handle to a replica this node no longer hosts gets (a
    /// reassignment removed it and deleted its directory): the reason then
    /// says so, and no I/O failed.
    #[error("log {path} is poisoned and refuses all further work: {reason}")]
    Poisoned {
        /// The log directory.
        path: PathBuf,
        /// The failure that poisoned it, or why it was retired.
        reason: String,
    },
    /// A batch handed in by a caller or a peer is malformed.
    #[error("invalid record batch: {reason}")]
    InvalidBatch {
        /// What check failed.
        reason: String,
    },
    /// A configuration value is out of range.
    #[error("invalid configuration: {field} = {value}: {reason}")]
    InvalidConfig {
        /// The configuration field.
        field: &'static str,
        /// The value given.
        value: String,
        /// Why it is not accepted.
        reason: &'static str,
    },
    /// A read asked for an offset outside the log.
    #[error("offset {requested} is out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        /// The offset asked for.
        requested: Offset,
        /// The log start offset.
        log_start: Offset,
        /// The log end offset.
        log_end: Offset,
    },
    /// A new log start offset above the high watermark: only committed
    /// records may be deleted (Kafka's `DeleteRecords` answers
    /// `OFFSET_OUT_OF_RANGE`).
    #[error("log start offset {requested} is above the high watermark {high_watermark}: only committed records below it can be deleted")]
    LogStartAboveHighWatermark {
        /// The log start offset asked for.
        requested: Offset,
        /// The log's high watermark.
        high_watermark: Offset,
    },
    /// [`ReplicatedLog::delete_records_before`](crate::ReplicatedLog::delete_records_before)
    /// asked to delete records that a replica's application has not
    /// applied yet (SPEC 3.9): nothing was deleted. Retriable: the bound
    /// rises as the replica applies.
    #[error("cannot delete records below {requested}: replica {held_by} has applied {}, so records can be deleted below {bound} at most", applied_phrase(.applied))]
    DeletionHeldBack {
        /// The new log start offset asked for.
        requested: Offset,
        /// The deletion bound: `min(high watermark, lowest applied
        /// position)`.
        bound: Offset,
        /// The replica with the lowest applied position.
        held_by: NodeId,
        /// Its applied position; `None` when it never reported one.
        applied: Option<Offset>,
    },
    /// An append as follower did not start at the log end offset, or its
    /// offsets did not increase.
    #[error("non-contiguous append: expected offset {expected}, got {got}")]
    NonContiguousAppend {
        /// The log end offset.
        expected: Offset,
        /// The first offset of the batch.
        got: Offset,
    },

    // ---- replication ---------------------------------------------------
    /// This replica is not the leader of the log.
    #[error("not the leader of {log} (epoch {epoch}, leader {leader:?})")]
    NotLeader {
        /// The log.
        log: LogId,
        /// The leader epoch this replica knows.
        epoch: LeaderEpoch,
        /// The leader this replica knows of, if any.
        leader: Option<NodeId>,
    },
    /// A new leader does not yet know the committed end of the log: its
    /// high watermark is still below the start offset of its own epoch, so
    /// it may be below what the previous leader acknowledged (SPEC 3.8;
    /// Kafka's `OFFSET_NOT_AVAILABLE`). Retriable: it ends once the
    /// followers have fetched up to the epoch's start offset.
    #[error("the committed end of {log} is not yet known: the leader's high watermark {high_watermark} is below the start offset {epoch_start_offset} of its epoch {epoch}")]
    CommittedEndNotYetKnown {
        /// The log.
        log: LogId,
        /// The leader's epoch.
        epoch: LeaderEpoch,
        /// The leader's high watermark: everything below it is committed,
        /// and more may be.
        high_watermark: Offset,
        /// The start offset of the leader's epoch.
        epoch_start_offset: Offset,
    },
    /// `acks=all` refused before appending: the ISR is too small.
    #[error("not enough in-sync replicas: {in_sync} < min.insync.replicas {min_insync_replicas}")]
    NotEnoughReplicas {
        /// Size of the ISR.
        in_sync: usize,
        /// The configured minimum.
        min_insync_replicas: usize,
    },
    /// `acks=all`: the batch was appended but the ISR shrank below the
    /// minimum before it was committed. The batch stays in the log.
    #[error("not enough in-sync replicas after append: {in_sync} < min.insync.replicas {min_insync_replicas}")]
    NotEnoughReplicasAfterAppend {
        /// Size of the ISR.
        in_sync: usize,
        /// The configured minimum.
        min_insync_replicas: usize,
    },
    /// The call did not finish before its deadline. The outcome is unknown:
    /// the write may or may not become committed.
    #[error("timed out after {waited:?} waiting for {waiting_for}")]
    Timeout {
        /// How long the call waited.
        waited: Duration,
        /// What it was waiting for.
        waiting_for: &'static str,
    },
    /// A pipelined append found the log's bytes in flight (appended, outcome
    /// not known yet) at `ReplicationConfig::pipelined_bytes_max` and the
    /// bound did not free up within `pipelined_block_max` (Kafka's
    /// `buffer.memory` and `max.block.ms`). Nothing was appended. A batch
    /// larger than the bound fails at once, with `bytes_in_flight` 0.
    /// Reservations are served first come first: a batch that would fit
    /// beside `bytes_in_flight` still waits behind an earlier one that
    /// does not, and fails the same way if the wait runs out.
    #[error("pipelined appends to {log} hold {bytes_in_flight} bytes in flight; a batch of {batch_bytes} bytes did not fit under ReplicationConfig::pipelined_bytes_max = {bytes_max}, or waited behind an earlier batch that did not, for {waited:?} (pipelined_block_max)")]
    PipelineFull {
        /// The log.
        log: LogId,
        /// Size of the batch that did not fit.
        batch_bytes: usize,
        /// Bytes in flight when the call gave up.
        bytes_in_flight: usize,
        /// The bound (`pipelined_bytes_max`).
        bytes_max: usize,
        /// How long the call blocked.
        waited: Duration,
    },
    /// A request carried a leader epoch older than the receiver's.
    #[error("fenced leader epoch: request has {request}, current is {current}")]
    FencedLeaderEpoch {
        /// The epoch in the request.
        request: LeaderEpoch,
        /// The receiver's epoch.
        current: LeaderEpoch,
    },
    /// A request carried a leader epoch newer than the receiver knows.
    #[error("unknown leader epoch: request has {request}, current is {current}")]
    UnknownLeaderEpoch {
        /// The epoch in the request.
        request: LeaderEpoch,
        /// The receiver's epoch.
        current: LeaderEpoch,
    },
    /// This node hosts no replica of the log.
    #[error("unknown log {0}")]
    UnknownLog(LogId),
    /// The log has no leader (all ISR members are down and unclean election
    /// is off).
    #[error("{0} has no leader")]
    LeaderNotAvailable(LogId),
    /// This node's replica of the log failed to open, and its next attempt
    /// is not due yet: repeated failures are retried with a growing pause
    /// ([`OPEN_RETRY_BACKOFF_MAX`](crate::OPEN_RETRY_BACKOFF_MAX)).
    #[error("the replica of {log} is not opened again yet: its last attempt failed ({last_error}); next attempt in {retry_in:?}")]
    ReplicaOpenDeferred {
        /// The log.
        log: LogId,
        /// The error of the last attempt.
        last_error: String,
        /// How long until the next attempt.
        retry_in: Duration,
    },
    /// Replication factor larger than the number of nodes.
    #[error("replication factor {replication_factor} exceeds the {nodes} available nodes")]
    ReplicationFactorTooLarge {
        /// Requested replication factor.
        replication_factor: usize,
        /// Nodes available.
        nodes: usize,
    },
    /// A transport call failed.
    #[error("transport error talking to {to}: {reason}")]
    Transport {
        /// The destination.
        to: NodeId,
        /// What went wrong.
        reason: String,
    },
    /// A coordinator call failed or a compare-and-set lost.
    #[error("coordinator error: {reason}")]
    Coordinator {
        /// What went wrong.
        reason: String,
    },
    /// A coordinator write was sent but no answer came back (the connection
    /// dropped, or the call timed out, after the request left): the write
    /// may or may not have been applied. The caller must treat it as neither
    /// accepted nor refused and settle it by reading the stored state before
    /// acting on it (SPEC 3.4; Kafka keeps such an ISR change pending,
    /// `PendingExpandIsr`/`PendingShrinkIsr`). Never returned for a write
    /// that certainly did not happen (refused, invalid, or not sent).
    #[error("coordinator write outcome unknown: {operation}: {reason}")]
    CoordinatorOutcomeUnknown {
        /// The write, as in "update log 3" or "write /logs/3 at version 7".
        operation: String,
        /// Why no answer came.
        reason: String,
    },
    /// A coordinator document this version cannot use: it does not decode
    /// (corrupt, or a znode that is not one of ours), it is in a newer
    /// format, or it holds fields this version does not know, so that a
    /// write over it would drop or misread them. Only operations on that one
    /// document fail: bulk reads skip it with a warning, and a node starting
    /// beside it still starts (issue 24). Not retriable: the document stays
    /// as it is until an operator repairs it or an upgraded node changes it.
    #[error("coordinator document {path}: {reason}")]
    CoordinatorDocument {
        /// The document, as its znode path (`/logs/3`, `/controller`).
        path: String,
        /// What this version cannot do with it, and why.
        reason: String,
    },
    /// The data directory belongs to another node or another cluster
    /// (SPEC 2.8): its identity file names a different `field` than this
    /// node has. Nothing was written to it.
    #[error("the data directory's identity file {path} names {field} {found}, but this node is {field} {expected} (refusing to start: nothing was written)")]
    DirectoryIdentityMismatch {
        /// The identity file.
        path: PathBuf,
        /// Which id differs: "cluster id" or "node id".
        field: &'static str,
        /// The id this node has (from its configuration or the
        /// coordinator).
        expected: String,
        /// The id the directory's identity file names.
        found: String,
    },
    /// Another process (or another node of this process) holds the data
    /// directory's lock (SPEC 2.8).
    #[error("data directory {path} is locked by another running node ({lock_file}); two nodes must never share one directory")]
    DirectoryLocked {
        /// The data directory.
        path: PathBuf,
        /// Its lock file.
        lock_file: PathBuf,
    },
    /// The component was shut down.
    #[error("shut down")]
    Shutdown,
    /// A network operation on a local socket failed (binding a listener,
    /// starting its threads).
    #[error("network error while trying to {operation} {addr}: {source}")]
    Network {
        /// The local socket address involved.
        addr: std::net::SocketAddr,
        /// What was being done ("bind", "start threads for", ...).
        operation: &'static str,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// TLS settings could not be loaded or used (feature `tls`): a PEM
    /// file missing or malformed, a key that does not match its
    /// certificate, a certificate that names no node.
    #[error("TLS setup failed: could not {what}: {reason}")]
    Tls {
        /// What was being done, naming the file involved.
        what: String,
        /// What was wrong.
        reason: String,
    },

    // ---- idempotent producer ------------------------------------------
    /// The batch's sequence is not the next one expected from the producer.
    #[error("out-of-order sequence from {producer}: expected {expected}, got {received} (leader epoch {leader_epoch})")]
    OutOfOrderSequence {
        /// The producer.
        producer: ProducerId,
        /// The sequence the leader expected.
        expected: Sequence,
        /// The sequence the batch carried.
        received: Sequence,
        /// The leader epoch of the replica that refused the batch. Its log
        /// speaks for the log only if no attempt of the batch reached a
        /// leader of a later epoch: a stale leader (cut off, not told it
        /// was replaced) does not hold what its successor took.
        leader_epoch: LeaderEpoch,
    },
    /// A newer epoch of this producer exists.
    #[error("{producer} fenced: epoch {received} is older than {current}")]
    ProducerFenced {
        /// The producer.
        producer: ProducerId,
        /// The newest epoch known.
        current: ProducerEpoch,
        /// The epoch the batch carried.
        received: ProducerEpoch,
    },
}

impl Error {
    /// Wraps an I/O error with the path and operation it came from.
    pub fn io(path: impl Into<PathBuf>, operation: &'static str, source: io::Error) -> Error {
        Error::Io {
            path: path.into(),
            operation,
            source,
        }
    }

    /// A copy of this error, for an outcome handed out more than once (an
    /// `AppendHandle` asked again after it completed as a future). An
    /// operating-system error is copied as its kind and message.
    pub(crate) fn duplicate(&self) -> Error {
        fn copy_io(source: &io::Error) -> io::Error {
            io::Error::new(source.kind(), source.to_string())
        }
        match self {
            Error::Io {
                path,
                operation,
                source,
            } => Error::Io {
                path: path.clone(),
                operation,
                source: copy_io(source),
            },
            Error::Corrupt {
                path,
                position,
                reason,
            } => Error::Corrupt {
                path: path.clone(),
                position: *position,
                reason: reason.clone(),
            },
            Error::InvalidCheckpoint { path, reason } => Error::InvalidCheckpoint {
                path: path.clone(),
                reason: reason.clone(),
            },
            Error::Poisoned { path, reason } => Error::Poisoned {
                path: path.clone(),
                reason: reason.clone(),
            },
            Error::InvalidBatch { reason } => Error::InvalidBatch {
                reason: reason.clone(),
            },
            Error::ReplicaOpenDeferred {
                log,
                last_error,
                retry_in,
            } => Error::ReplicaOpenDeferred {
                log: *log,
                last_error: last_error.clone(),
                retry_in: *retry_in,
            },
            Error::InvalidConfig {
                field,
                value,
                reason,
            } => Error::InvalidConfig {
                field,
                value: value.clone(),
                reason,
            },
            Error::OffsetOutOfRange {
                requested,
                log_start,
                log_end,
            } => Error::OffsetOutOfRange {
                requested: *requested,
                log_start: *log_start,
                log_end: *log_end,
            },
            Error::LogStartAboveHighWatermark {
                requested,
                high_watermark,
            } => Error::LogStartAboveHighWatermark {
                requested: *requested,
                high_watermark: *high_watermark,
            },
            Error::DeletionHeldBack {
                requested,
                bound,
                held_by,
                applied,
            } => Error::DeletionHeldBack {
                requested: *requested,
                bound: *bound,
                held_by: *held_by,
                applied: *applied,
            },
            Error::DirectoryIdentityMismatch {
                path,
                field,
                expected,
                found,
            } => Error::DirectoryIdentityMismatch {
                path: path.clone(),
                field,
                expected: expected.clone(),
                found: found.clone(),
            },
            Error::DirectoryLocked { path, lock_file } => Error::DirectoryLocked {
                path: path.clone(),
                lock_file: lock_file.clone(),
            },
            Error::NonContiguousAppend { expected, got } => Error::NonContiguousAppend {
                expected: *expected,
                got: *got,
            },
            Error::NotLeader { log, epoch, leader } => Error::NotLeader {
                log: *log,
                epoch: *epoch,
                leader: *leader,
            },
            Error::CommittedEndNotYetKnown {
                log,
                epoch,
                high_watermark,
                epoch_start_offset,
            } => Error::CommittedEndNotYetKnown {
                log: *log,
                epoch: *epoch,
                high_watermark: *high_watermark,
                epoch_start_offset: *epoch_start_offset,
            },
            Error::NotEnoughReplicas {
                in_sync,
                min_insync_replicas,
            } => Error::NotEnoughReplicas {
                in_sync: *in_sync,
                min_insync_replicas: *min_insync_replicas,
            },
            Error::NotEnoughReplicasAfterAppend {
                in_sync,
                min_insync_replicas,
            } => Error::NotEnoughReplicasAfterAppend {
                in_sync: *in_sync,
                min_insync_replicas: *min_insync_replicas,
            },
            Error::Timeout {
                waited,
                waiting_for,
            } => Error::Timeout {
                waited: *waited,
                waiting_for,
            },
            Error::PipelineFull {
                log,
                batch_bytes,
                bytes_in_flight,
                bytes_max,
                waited,
            } => Error::PipelineFull {
                log: *log,
                batch_bytes: *batch_bytes,
                bytes_in_flight: *bytes_in_flight,
                bytes_max: *bytes_max,
                waited: *waited,
            },
            Error::FencedLeaderEpoch { request, current } => Error::FencedLeaderEpoch {
                request: *request,
                current: *current,
            },
            Error::UnknownLeaderEpoch { request, current } => Error::UnknownLeaderEpoch {
                request: *request,
                current: *current,
            },
            Error::UnknownLog(log) => Error::UnknownLog(*log),
            Error::LeaderNotAvailable(log) => Error::LeaderNotAvailable(*log),
            Error::ReplicationFactorTooLarge {
                replication_factor,
                nodes,
            } => Error::ReplicationFactorTooLarge {
                replication_factor: *replication_factor,
                nodes: *nodes,
            },
            Error::Transport { to, reason } => Error::Transport {
                to: *to,
                reason: reason.clone(),
            },
            Error::Coordinator { reason } => Error::Coordinator {
                reason: reason.clone(),
            },
            Error::CoordinatorOutcomeUnknown { operation, reason } => {
                Error::CoordinatorOutcomeUnknown {
                    operation: operation.clone(),
                    reason: reason.clone(),
                }
            }
            Error::CoordinatorDocument { path, reason } => Error::CoordinatorDocument {
                path: path.clone(),
                reason: reason.clone(),
            },
            Error::Shutdown => Error::Shutdown,
            Error::Network {
                addr,
                operation,
                source,
            } => Error::Network {
                addr: *addr,
                operation,
                source: copy_io(source),
            },
            Error::Tls { what, reason } => Error::Tls {
                what: what.clone(),
                reason: reason.clone(),
            },
            Error::OutOfOrderSequence {
                producer,
                expected,
                received,
                leader_epoch,
            } => Error::OutOfOrderSequence {
                leader_epoch: *leader_epoch,
                producer: *producer,
                expected: *expected,
                received: *received,
            },
            Error::ProducerFenced {
                producer,
                current,
                received,
            } => Error::ProducerFenced {
                producer: *producer,
                current: *current,
                received: *received,
            },
        }
    }

    /// Whether this is [`Error::CoordinatorOutcomeUnknown`]: a write that
    /// may or may not have been applied, to be settled by a read.
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, Error::CoordinatorOutcomeUnknown { .. })
    }

    /// Whether a caller may retry the same request (perhaps against another
    /// node) and expect it to succeed eventually.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            Error::NotLeader { .. }
                | Error::CommittedEndNotYetKnown { .. }
                | Error::NotEnoughReplicas { .. }
                | Error::NotEnoughReplicasAfterAppend { .. }
                | Error::Timeout { .. }
                | Error::PipelineFull { .. }
                | Error::FencedLeaderEpoch { .. }
                | Error::UnknownLeaderEpoch { .. }
                | Error::LeaderNotAvailable(_)
                | Error::Transport { .. }
                | Error::Coordinator { .. }
                | Error::CoordinatorOutcomeUnknown { .. }
                | Error::DeletionHeldBack { .. }
        )
    }
}

/// How [`Error::DeletionHeldBack`] words an applied position.
fn applied_phrase(applied: &Option<Offset>) -> String {
    match applied {
        Some(applied) => format!("the records below {applied}"),
        None => "nothing (it has reported no applied position)".to_string(),
    }
}
