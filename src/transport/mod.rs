//! How nodes talk to each other: the [`Transport`] (client) and
//! [`RequestHandler`] (server) traits, the request and response messages they
//! carry, and [`MemoryNetwork`], the in-process network with fault injection
//! that the tests run on.
//!
//! This module owns the *shape* of the conversation (SPEC §3.2 fetch, §3.6
//! epoch query) and the numeric [`ErrorCode`]s a response carries. It does not
//! own what the messages mean: the leader's fetch handling, fencing and
//! divergence checks live in the replication layer, and the byte encoding of a
//! message lives with each network transport (`tcp/` for TCP). Record
//! bytes travel as opaque [`bytes::Bytes`] holding whole record batches; the
//! transport never parses them.
//!
//! Every call carries a deadline. A `Transport` must return by then (plus
//! scheduling slack) with a response or a [`TransportError`]; a handler may
//! block, but only up to the request's own bound (`FetchRequest::wait_max`).
//! Implementations of `Transport` must pass
//! `testing::transport_suite::run` (feature `testing`).

mod memory;
mod tcp;

#[allow(unused_imports)]
use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::error::Error;
use crate::snapshot::SnapshotInfo;
use crate::types::{Incarnation, LeaderEpoch, LogId, NodeId, Offset};

pub use memory::{MemoryNetwork, MemoryTransport};
#[cfg(any(test, feature = "testing"))]
pub(crate) use tcp::{
    decode_body, encode_request, encode_response, read_frame, FrameError, Message, ReadError,
};
#[cfg(feature = "tls")]
pub use tcp::{node_dns_name, TlsConfig};
pub(crate) use tcp::{RateLimitedWarnings, Warning};
pub use tcp::{TcpConfig, TcpServer, TcpServerStats, TcpTransport, TCP_FRAME_VERSION};

// ---- traits ----------------------------------------------------------------

/// Client side: what a node uses to call another node.
///
/// Implementations are shared between threads (the fetcher threads of one
/// node all call through the same value), so concurrent calls must each get
/// their own response.
pub trait Transport: Send + Sync + 'static {
    /// Sends `request` to `to` and waits for the response until `deadline`.
    ///
    /// `deadline` is real monotonic time (`Instant::now()` plus a timeout):
    /// the network does not run on a test's `ManualClock`. A `Timeout` error
    /// leaves the outcome unknown: the handler may or may not have run.
    fn call(
        &self,
        to: NodeId,
        request: Request,
        deadline: Instant,
    ) -> Result<Response, TransportError>;
}

/// Server side: what a node exposes to answer calls. May block (long poll),
/// but only up to the bound the request carries (`FetchRequest::wait_max`).
pub trait RequestHandler: Send + Sync + 'static {
    /// Answers `request`, sent by node `from`. Failures go into the response
    /// (`Response::Error`, or an [`ErrorCode`] per log); a handler never
    /// panics on a request it does not like.
    fn handle(&self, from: NodeId, request: Request) -> Response;
}

/// Why a call produced no response.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The destination could not be reached at all (unknown node, node down,
    /// connection refused). The request was not handled.
    #[error("{to} is unreachable: {reason}")]
    Unreachable {
        /// The destination.
        to: NodeId,
        /// What failed.
        reason: String,
    },
    /// No response arrived before the deadline. The request may or may not
    /// have been handled.
    #[error("no response from {to} before the deadline")]
    Timeout {
        /// The destination.
        to: NodeId,
    },
    /// This transport has been shut down.
    #[error("transport shut down")]
    Shutdown,
    /// The peer sent bytes that do not decode as a response.
    // Carries the peer (the brief had only `reason`) so that every error
    // names the node it came from, and the conversion into `crate::Error`
    // keeps it.
    #[error("malformed response from {to}: {reason}")]
    Malformed {
        /// The peer whose bytes were malformed.
        to: NodeId,
        /// What failed to decode.
        reason: String,
    },
}

impl From<TransportError> for Error {
    fn from(error: TransportError) -> Error {
        match error {
            TransportError::Shutdown => Error::Shutdown,
            TransportError::Unreachable { to, .. }
            | TransportError::Timeout { to }
            | TransportError::Malformed { to, .. } => Error::Transport {
                to,
                reason: error.to_string(),
            },
        }
    }
}

// ---- messages --------------------------------------------------------------

/// A call from one node to another.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// A follower pulls records of many logs from their leader (SPEC §3.2).
    Fetch(FetchRequest),
    /// A replica asks where epochs end on the leader (SPEC §3.6, Kafka's
    /// `OffsetsForLeaderEpoch`).
    EpochEndOffsets(EpochEndOffsetsRequest),
    /// A follower asks its leader for a chunk of the leader application's
    /// latest snapshot (SPEC §3.9), or, after the first chunk, of the
    /// snapshot that chunk named ([`SnapshotRequest::snapshot`]).
    Snapshot(SnapshotRequest),
}

/// The answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Response {
    /// Answer to [`Request::Fetch`].
    Fetch(FetchResponse),
    /// Answer to [`Request::EpochEndOffsets`].
    EpochEndOffsets(EpochEndOffsetsResponse),
    /// Answer to [`Request::Snapshot`].
    Snapshot(SnapshotResponse),
    /// The whole request failed (for example the node is shutting down, or
    /// the request was invalid); per-log failures go in the per-log `error`.
    Error(ErrorCode),
}

/// A fetch of many logs from one leader, sent by one follower (SPEC §3.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchRequest {
    /// The follower sending it.
    pub replica: NodeId,
    /// The follower's current incarnation, from its registration with the
    /// coordinator (Kafka's broker epoch, KIP-903): the leader counts the
    /// fetch only if it is the one the coordinator lists for `replica`
    /// (SPEC 3.2), and answers [`ErrorCode::StaleIncarnation`] otherwise.
    pub incarnation: Incarnation,
    /// Long-poll bound: how long the leader may hold the request while no
    /// log has new data.
    pub wait_max: Duration,
    /// Byte budget for the records of the whole response.
    pub bytes_max: u32,
    /// The logs fetched, each with the follower's position.
    pub logs: Vec<FetchLog>,
}

/// One log's part of a [`FetchRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchLog {
    /// The log.
    pub log: LogId,
    /// The sender's view of the leader epoch, for fencing (SPEC §3.7).
    pub current_leader_epoch: LeaderEpoch,
    /// The follower's log end offset: records from here are wanted, and
    /// everything below is acknowledged.
    pub fetch_offset: Offset,
    /// Epoch of the follower's last batch, for the divergence check; `None`
    /// when the follower's log is empty.
    pub last_fetched_epoch: Option<LeaderEpoch>,
    /// The follower's line epoch as stored on its disk
    /// ([`Log::line_epoch`](crate::Log::line_epoch)): the newest epoch
    /// whose leader's log its log is known to be a prefix of. The leader
    /// counts the fetch towards its high watermark only once this is its
    /// own epoch (SPEC 3.3, 3.5): until then a crash could bring the
    /// follower back on an older line, and unclean recovery would weigh
    /// records committed by this fetch as those of that older line.
    pub line_epoch: Option<LeaderEpoch>,
    /// The follower's log start offset (informational).
    pub log_start_offset: Offset,
    /// Byte budget for this log's records.
    pub bytes_max: u32,
    /// The follower application's applied position (SPEC 3.9), `None`
    /// while it has reported none.
    pub applied_offset: Option<Offset>,
}

impl FetchLog {
    /// Whether the fetch says its follower's log is durably on `epoch`'s
    /// line ([`line_epoch`](Self::line_epoch) at least `epoch`). A leader
    /// of `epoch` counts only such a fetch towards its high watermark and
    /// the ISR, and answers any other at once, never parking it.
    pub fn is_on_line_of(&self, epoch: LeaderEpoch) -> bool {
        self.line_epoch >= Some(epoch)
    }
}

/// The answer to a [`FetchRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchResponse {
    /// One entry per requested log.
    pub logs: Vec<FetchedLog>,
}

/// One log's part of a [`FetchResponse`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchedLog {
    /// The log.
    pub log: LogId,
    /// [`ErrorCode::None`] on success; otherwise the other fields are not
    /// meaningful, but for the log start and end offsets, `log_start_epoch`
    /// and `log_end_epoch` of an `OffsetOutOfRange` answer.
    pub error: ErrorCode,
    /// The leader's high watermark.
    pub high_watermark: Offset,
    /// The leader's log start offset.
    pub log_start_offset: Offset,
    /// The leader's log end offset.
    pub log_end_offset: Offset,
    /// Set when the follower's log diverges from the leader's (SPEC §3.2 step
    /// 2): the follower must truncate first; `records` is then empty.
    pub diverging: Option<EpochEndOffset>,
    /// An epoch whose leader's log held the leader's records below
    /// `log_start_offset` (its start line, or the epoch of its batch at
    /// the start), on the answers that may restart the follower's log
    /// there (`OffsetOutOfRange`, `diverging`); `None` on the others, or
    /// when the leader knows none. The follower notes it as its log's
    /// start line (SPEC 3.5), as it does a snapshot's epoch.
    pub log_start_epoch: Option<LeaderEpoch>,
    /// An epoch whose leader's log held the leader's records below
    /// `log_end_offset` (the epoch of its last record, or its start line
    /// when it holds none), on `OffsetOutOfRange` answers only, which
    /// restart a follower's log at the leader's end when that end is below
    /// the follower's own log start; `None` on the others, or when the
    /// leader knows none. The follower notes it as its log's start line
    /// (SPEC 3.5).
    pub log_end_epoch: Option<LeaderEpoch>,
    /// Whole record batches starting at the requested `fetch_offset`.
    pub records: Bytes,
    /// Every applied position the leader knows, by replica (SPEC 3.9): the
    /// follower keeps a copy, for when it leads.
    pub applied_offsets: Vec<(NodeId, Offset)>,
}

/// Where a leader epoch ends on a replica (SPEC §3.6); defined in `types`
/// because the storage layer's epoch cache answers with it too.
pub use crate::types::EpochEndOffset;

/// A replica asks the leader where some epochs end (SPEC §3.6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochEndOffsetsRequest {
    /// The replica asking.
    pub replica: NodeId,
    /// One query per log.
    pub logs: Vec<EpochQuery>,
}

/// One log's question in an [`EpochEndOffsetsRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochQuery {
    /// The log.
    pub log: LogId,
    /// The sender's view of the leader epoch, for fencing.
    pub current_leader_epoch: LeaderEpoch,
    /// The epoch whose end offset is wanted.
    pub epoch: LeaderEpoch,
}

/// The answer to an [`EpochEndOffsetsRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochEndOffsetsResponse {
    /// One answer per query.
    pub logs: Vec<EpochAnswer>,
}

/// A follower asks for one chunk of a snapshot of a log by the leader's
/// application (SPEC §3.9): of the latest for a transfer's first chunk,
/// then of the one that chunk named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotRequest {
    /// The follower asking.
    pub replica: NodeId,
    /// The log.
    pub log: LogId,
    /// The sender's view of the leader epoch, for fencing.
    pub current_leader_epoch: LeaderEpoch,
    /// Byte of the snapshot the chunk starts at.
    pub position: u64,
    /// Largest chunk wanted.
    pub bytes_max: u32,
    /// The snapshot being downloaded, as the transfer's first chunk named
    /// it; `None` for the first request, which gets the leader's latest.
    /// A transfer reads one snapshot to its end even after the leader's
    /// application took a newer one: the leader serves the snapshot named
    /// while its store can read it and its offset is within the leader's
    /// log, and answers [`ErrorCode::SnapshotUnavailable`] otherwise (the
    /// follower then starts again from the latest). A [`Transport`] must
    /// carry it: dropped, every chunk is read from the latest, and a
    /// transfer starts again whenever the latest changes under it.
    pub snapshot: Option<SnapshotInfo>,
}

/// One chunk of a snapshot (SPEC §3.9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotResponse {
    /// The log.
    pub log: LogId,
    /// [`ErrorCode::None`] on success; otherwise the other fields are not
    /// meaningful.
    pub error: ErrorCode,
    /// The offset the snapshot was taken at: every record below it is in
    /// it. After the first chunk it is the request's
    /// [`SnapshotRequest::snapshot`]'s: a leader serves only the snapshot a
    /// request names.
    pub snapshot_offset: Offset,
    /// An epoch whose leader's log held the records below
    /// `snapshot_offset`: the epoch of the leader's record just below it,
    /// the last one the snapshot holds (KRaft names a snapshot by its end
    /// offset and this epoch), or, where the leader's log starts at that
    /// offset, its start line or the epoch of its batch there. `None` when
    /// the leader knows none (the offset is 0, or its log keeps no epoch
    /// there), or stopped leading in the request's epoch meanwhile. It may change between chunks of one snapshot (a deletion up
    /// to its offset meanwhile). The installing follower notes it as its
    /// log's start line, so that unclean recovery can tell which longer
    /// logs hold the same records below (SPEC 3.5).
    pub snapshot_epoch: Option<LeaderEpoch>,
    /// The snapshot's whole length in bytes.
    pub snapshot_bytes: u64,
    /// Byte of the snapshot `data` starts at (the request's position).
    pub position: u64,
    /// CRC-32 (IEEE) of `data`.
    pub crc32: u32,
    /// The chunk.
    pub data: Bytes,
}

/// One log's answer in an [`EpochEndOffsetsResponse`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochAnswer {
    /// The log.
    pub log: LogId,
    /// [`ErrorCode::None`] on success.
    pub error: ErrorCode,
    /// Where the epoch ends; `None` means "undefined" (the epoch is newer
    /// than every epoch the leader knows).
    pub end: Option<EpochEndOffset>,
}

// ---- error codes -----------------------------------------------------------

/// What went wrong with (part of) a request, as carried on the wire. The
/// numbers are stable: a transport encodes [`ErrorCode::as_u16`] and decodes
/// with [`ErrorCode::from_u16`]; new codes are only ever appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
#[non_exhaustive]
pub enum ErrorCode {
    /// Success.
    None = 0,
    /// The receiver is not the leader of the log.
    NotLeader = 1,
    /// The request's leader epoch is older than the receiver's.
    FencedLeaderEpoch = 2,
    /// The request's leader epoch is newer than the receiver knows.
    UnknownLeaderEpoch = 3,
    /// The receiver hosts no replica of the log.
    UnknownLog = 4,
    /// The requested offset is outside the receiver's log.
    OffsetOutOfRange = 5,
    /// `acks=all` refused: the ISR is too small.
    NotEnoughReplicas = 6,
    /// `acks=all`: appended, but the ISR shrank before the batch committed.
    NotEnoughReplicasAfterAppend = 7,
    /// The receiver gave up waiting.
    Timeout = 8,
    /// An idempotent producer's sequence is not the next one expected.
    OutOfOrderSequence = 9,
    /// A newer epoch of the producer exists.
    ProducerFenced = 10,
    /// The request is malformed or inconsistent.
    InvalidRequest = 11,
    /// The receiver is shutting down.
    Shutdown = 12,
    /// Any other failure, and any number this version does not know.
    Unknown = 13,
    /// The fetch does not come from the sender's current incarnation (its
    /// registration with the coordinator, Kafka's `STALE_BROKER_EPOCH`,
    /// KIP-903): sent by an earlier process of the node, by a node the
    /// leader does not know as live, or by someone posing as it. It counts
    /// for nothing (SPEC 3.2).
    StaleIncarnation = 14,
    /// The leader has no snapshot to send (SPEC 3.9): none is configured,
    /// none was taken, or the latest is below its log start.
    SnapshotUnavailable = 15,
}

impl ErrorCode {
    /// Every code, in wire order. Conformance tests send each one.
    pub const ALL: [ErrorCode; 16] = [
        ErrorCode::None,
        ErrorCode::NotLeader,
        ErrorCode::FencedLeaderEpoch,
        ErrorCode::UnknownLeaderEpoch,
        ErrorCode::UnknownLog,
        ErrorCode::OffsetOutOfRange,
        ErrorCode::NotEnoughReplicas,
        ErrorCode::NotEnoughReplicasAfterAppend,
        ErrorCode::Timeout,
        ErrorCode::OutOfOrderSequence,
        ErrorCode::ProducerFenced,
        ErrorCode::InvalidRequest,
        ErrorCode::Shutdown,
        ErrorCode::Unknown,
        ErrorCode::StaleIncarnation,
        ErrorCode::SnapshotUnavailable,
    ];

    /// The wire number of this code.
    pub fn as_u16(self) -> u16 {
        self as u16
    }

    /// The code for a wire number; numbers this version does not know (sent
    /// by a newer peer) become [`ErrorCode::Unknown`] rather than an error.
    pub fn from_u16(number: u16) -> ErrorCode {
        ErrorCode::ALL
            .get(usize::from(number))
            .copied()
            .unwrap_or(ErrorCode::Unknown)
    }

    /// Whether this code means success.
    pub fn is_none(self) -> bool {
        self == ErrorCode::None
    }

    /// The code a handler puts on the wire for a crate error. Errors with no
    /// code of their own (storage failures, ...) become `Unknown`: the peer
    /// cannot act on them beyond retrying elsewhere.
    pub fn from_error(error: &Error) -> ErrorCode {
        match error {
            Error::NotLeader { .. } | Error::LeaderNotAvailable(_) => ErrorCode::NotLeader,
            Error::FencedLeaderEpoch { .. } => ErrorCode::FencedLeaderEpoch,
            Error::UnknownLeaderEpoch { .. } => ErrorCode::UnknownLeaderEpoch,
            Error::UnknownLog(_) => ErrorCode::UnknownLog,
            Error::OffsetOutOfRange { .. } | Error::LogStartAboveHighWatermark { .. } => {
                ErrorCode::OffsetOutOfRange
            }
            Error::NotEnoughReplicas { .. } => ErrorCode::NotEnoughReplicas,
            Error::NotEnoughReplicasAfterAppend { .. } => ErrorCode::NotEnoughReplicasAfterAppend,
            Error::Timeout { .. } => ErrorCode::Timeout,
            Error::OutOfOrderSequence { .. } => ErrorCode::OutOfOrderSequence,
            Error::ProducerFenced { .. } => ErrorCode::ProducerFenced,
            Error::InvalidBatch { .. } | Error::NonContiguousAppend { .. } => {
                ErrorCode::InvalidRequest
            }
            Error::Shutdown => ErrorCode::Shutdown,
            _ => ErrorCode::Unknown,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ErrorCode::None => "none",
            ErrorCode::NotLeader => "not leader",
            ErrorCode::FencedLeaderEpoch => "fenced leader epoch",
            ErrorCode::UnknownLeaderEpoch => "unknown leader epoch",
            ErrorCode::UnknownLog => "unknown log",
            ErrorCode::SnapshotUnavailable => "snapshot unavailable",
            ErrorCode::OffsetOutOfRange => "offset out of range",
            ErrorCode::NotEnoughReplicas => "not enough replicas",
            ErrorCode::NotEnoughReplicasAfterAppend => "not enough replicas after append",
            ErrorCode::Timeout => "timeout",
            ErrorCode::OutOfOrderSequence => "out of order sequence",
            ErrorCode::ProducerFenced => "producer fenced",
            ErrorCode::InvalidRequest => "invalid request",
            ErrorCode::Shutdown => "shutdown",
            ErrorCode::Unknown => "unknown error",
            ErrorCode::StaleIncarnation => "stale incarnation",
        };
        write!(f, "{name} ({})", self.as_u16())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_code_numbers_are_stable_and_round_trip() {
        for (index, code) in ErrorCode::ALL.into_iter().enumerate() {
            assert_eq!(usize::from(code.as_u16()), index, "{code:?}");
            assert_eq!(ErrorCode::from_u16(code.as_u16()), code);
        }
        // Spot-check the numbers a peer of another version relies on.
        assert_eq!(ErrorCode::None.as_u16(), 0);
        assert_eq!(ErrorCode::Timeout.as_u16(), 8);
        assert_eq!(ErrorCode::Unknown.as_u16(), 13);
    }

    #[test]
    fn unknown_error_code_numbers_decode_as_unknown() {
        let first_unknown = ErrorCode::ALL.len() as u16;
        for number in [first_unknown, first_unknown + 1, 1000, u16::MAX] {
            assert_eq!(ErrorCode::from_u16(number), ErrorCode::Unknown, "{number}");
        }
    }

    #[test]
    fn error_code_display_names_the_code_and_its_number() {
        let cases = [
            (ErrorCode::None, "none (0)"),
            (ErrorCode::FencedLeaderEpoch, "fenced leader epoch (2)"),
            (ErrorCode::Unknown, "unknown error (13)"),
        ];
        for (code, want) in cases {
            assert_eq!(code.to_string(), want);
        }
    }

    #[test]
    fn error_code_from_error_table() {
        let log = LogId(3);
        let epoch = LeaderEpoch(4);
        let cases = [
            (
                Error::NotLeader {
                    log,
                    epoch,
                    leader: None,
                },
                ErrorCode::NotLeader,
            ),
            (
                Error::FencedLeaderEpoch {
                    request: epoch,
                    current: epoch.next(),
                },
                ErrorCode::FencedLeaderEpoch,
            ),
            (
                Error::UnknownLeaderEpoch {
                    request: epoch.next(),
                    current: epoch,
                },
                ErrorCode::UnknownLeaderEpoch,
            ),
            (Error::UnknownLog(log), ErrorCode::UnknownLog),
            (
                Error::OffsetOutOfRange {
                    requested: Offset(9),
                    log_start: Offset(0),
                    log_end: Offset(5),
                },
                ErrorCode::OffsetOutOfRange,
            ),
            (Error::Shutdown, ErrorCode::Shutdown),
            (
                Error::Coordinator {
                    reason: "lost".into(),
                },
                ErrorCode::Unknown,
            ),
        ];
        for (error, want) in cases {
            assert_eq!(ErrorCode::from_error(&error), want, "{error}");
        }
    }

    #[test]
    fn transport_error_names_the_node_and_converts_into_crate_error() {
        let to = NodeId(5);
        let cases = [
            TransportError::Unreachable {
                to,
                reason: "node down".into(),
            },
            TransportError::Timeout { to },
            TransportError::Malformed {
                to,
                reason: "short frame".into(),
            },
        ];
        for error in cases {
            assert!(error.to_string().contains("node-5"), "{error}");
            let message = error.to_string();
            match Error::from(error) {
                Error::Transport { to: got, reason } => {
                    assert_eq!(got, to);
                    assert_eq!(reason, message);
                }
                other => panic!("expected Error::Transport, got {other:?}"),
            }
        }
        assert!(matches!(
            Error::from(TransportError::Shutdown),
            Error::Shutdown
        ));
    }
}
