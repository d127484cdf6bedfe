//! The TCP wire format: one versioned binary frame per request or response,
//! its encoder, and its checked, zero-copy decoder.
//!
//! This module owns bytes only. It does not own sockets, connections or
//! deadlines (see `client.rs` and `server.rs`), nor what a message means.
//!
//! # Frame layout
//!
//! Every integer is fixed-width **little-endian** (as in the record batch
//! layout). A frame is an 18-byte header followed by a body:
//!
//! | at | field | type |
//! |---:|---|---|
//! | 0 | magic, the ASCII bytes `ISRL` | [u8; 4] |
//! | 4 | version (= 6) | u8 |
//! | 5 | message type (table below) | u8 |
//! | 6 | body length: bytes after the header | u32 |
//! | 10 | request id, chosen by the caller, echoed by the response | u64 |
//! | 18 | body | |
//!
//! The magic comes before the length so that a stream of garbage (a port
//! scanner, an HTTP client, a desynchronised peer) is recognised from its first
//! four bytes instead of being trusted as a length. A frame's total size,
//! header included, is at most the configured `frame_bytes_max`; the decoder
//! checks the body length against it before reading or allocating the body.
//!
//! | message type | body |
//! |---:|---|
//! | `0x01` | fetch request |
//! | `0x02` | epoch end offsets request |
//! | `0x80` | error response: error code u16 |
//! | `0x81` | fetch response |
//! | `0x82` | epoch end offsets response |
//! | `0x03` | snapshot request: sender, replica, log id, current leader epoch (u32 ×4), position u64, bytes_max u32, snapshot named (presence byte, then its offset and byte length, u64 ×2) |
//! | `0x83` | snapshot response: log id u32, error code u16, snapshot offset u64, snapshot epoch (presence byte, then u32), snapshot bytes, position (u64 ×2), CRC-32 of the data u32, data length u32, data |
//!
//! A request body starts with the **sender**: the caller's node id (u32), which
//! the server hands to its handler as `from`. Then:
//!
//! Fetch request (`FetchRequest`):
//!
//! | field | type |
//! |---|---|
//! | sender | u32 |
//! | replica | u32 |
//! | replica's incarnation | u64 |
//! | wait_max, whole seconds | u64 |
//! | wait_max, nanoseconds (< 10^9) | u32 |
//! | bytes_max | u32 |
//! | log count | u32 |
//! | per log: log id | u32 |
//! | per log: current leader epoch | u32 |
//! | per log: fetch offset | u64 |
//! | per log: last fetched epoch present (0 or 1) | u8 |
//! | per log: last fetched epoch, only if present | u32 |
//! | per log: line epoch present (0 or 1) | u8 |
//! | per log: line epoch, only if present | u32 |
//! | per log: log start offset | u64 |
//! | per log: bytes_max | u32 |
//! | per log: applied offset present (0 or 1) | u8 |
//! | per log: applied offset, only if present | u64 |
//!
//! Epoch end offsets request (`EpochEndOffsetsRequest`):
//!
//! | field | type |
//! |---|---|
//! | sender | u32 |
//! | replica | u32 |
//! | query count | u32 |
//! | per query: log id, current leader epoch, epoch | u32, u32, u32 |
//!
//! Fetch response (`FetchResponse`):
//!
//! | field | type |
//! |---|---|
//! | log count | u32 |
//! | per log: log id | u32 |
//! | per log: error code | u16 |
//! | per log: high watermark, log start offset, log end offset | u64 ×3 |
//! | per log: diverging present (0 or 1) | u8 |
//! | per log: diverging epoch, end offset, only if present | u32, u64 |
//! | per log: log start epoch present (0 or 1) | u8 |
//! | per log: log start epoch, only if present | u32 |
//! | per log: log end epoch present (0 or 1) | u8 |
//! | per log: log end epoch, only if present | u32 |
//! | per log: records length | u32 |
//! | per log: records (whole record batches, opaque here) | bytes |
//! | per log: applied position count | u32 |
//! | per log, per position: replica, applied offset | u32, u64 |
//!
//! Epoch end offsets response (`EpochEndOffsetsResponse`):
//!
//! | field | type |
//! |---|---|
//! | answer count | u32 |
//! | per answer: log id | u32 |
//! | per answer: error code | u16 |
//! | per answer: end present (0 or 1) | u8 |
//! | per answer: epoch, end offset, only if present | u32, u64 |
//!
//! Error codes are [`ErrorCode::as_u16`]; a number this version does not know
//! decodes as [`ErrorCode::Unknown`] (a newer peer may send it), while every
//! other unknown value (magic, version, message type, a presence byte other
//! than 0 or 1, nanoseconds >= 10^9, bytes after the last field) is a
//! [`FrameError`] naming the field and the value.
//!
//! # Decoding guarantees
//!
//! The decoder never panics on any input and never allocates more than the
//! input can fill: every count is checked against the bytes remaining (times
//! the smallest encoding of one entry) before a `Vec` is reserved. Records
//! are returned as slices of the frame's `Bytes`, never copied.
//!
//! The encoder does not copy long payloads either: a response's records or
//! snapshot data of at least 4 KiB stay in their own buffers, as pieces of
//! an `EncodedFrame` that the server writes piece by piece.

use std::fmt;
use std::time::Duration;

use bytes::{BufMut, Bytes};

use crate::snapshot::SnapshotInfo;
use crate::transport::{
    EpochAnswer, EpochEndOffset, EpochEndOffsetsRequest, EpochEndOffsetsResponse, EpochQuery,
    ErrorCode, FetchLog, FetchRequest, FetchResponse, FetchedLog, Request, Response,
    SnapshotRequest, SnapshotResponse,
};
use crate::types::{Incarnation, LeaderEpoch, LogId, NodeId, Offset};

/// The first four bytes of every frame.
pub(crate) const MAGIC: [u8; 4] = *b"ISRL";
/// The only frame version this code speaks. Version 2 added the
/// follower's incarnation to the fetch request, applied positions to
/// fetches and their answers, and the snapshot messages (SPEC 3.9);
/// version 3 the epoch below the log start to fetch answers and the
/// snapshot's epoch to its chunks; version 4 the epoch below the log end
/// to fetch answers; version 5 the follower's line epoch to the fetch
/// request; version 6 the snapshot being downloaded to the snapshot
/// request.
pub(crate) const VERSION: u8 = 6;
/// Size of the fixed frame header.
pub(crate) const HEADER_BYTES: usize = 18;

const MAGIC_AT: usize = 0;
const VERSION_AT: usize = 4;
const TYPE_AT: usize = 5;
const BODY_LENGTH_AT: usize = 6;
const REQUEST_ID_AT: usize = 10;

const _: () = assert!(MAGIC_AT + MAGIC.len() == VERSION_AT);
const _: () = assert!(VERSION_AT + 1 == TYPE_AT);
const _: () = assert!(TYPE_AT + 1 == BODY_LENGTH_AT);
const _: () = assert!(BODY_LENGTH_AT + 4 == REQUEST_ID_AT);
const _: () = assert!(REQUEST_ID_AT + 8 == HEADER_BYTES);

/// Smallest encoding of one `FetchLog` (last fetched epoch, line epoch and
/// applied position absent).
const FETCH_LOG_BYTES_MIN: usize = 4 + 4 + 8 + 1 + 1 + 8 + 4 + 1;
/// Smallest encoding of one `FetchedLog` (not diverging, no records, no
/// applied positions).
const FETCHED_LOG_BYTES_MIN: usize = 4 + 2 + 8 * 3 + 1 + 1 + 1 + 4 + 4;
/// Smallest encoding of a `SnapshotRequest` after the sender (no
/// snapshot named).
const SNAPSHOT_REQUEST_BYTES_MIN: usize = 4 + 4 + 4 + 8 + 4 + 1;
/// Encoding of the snapshot a `SnapshotRequest` names, after its presence
/// byte.
const SNAPSHOT_NAMED_BYTES: usize = 8 + 8;
/// Smallest encoding of a `SnapshotResponse` (no data).
const SNAPSHOT_RESPONSE_BYTES_MIN: usize = 4 + 2 + 8 * 3 + 1 + 4 + 4;
/// Encoding of one applied position in a `FetchedLog`.
const APPLIED_POSITION_BYTES: usize = 4 + 8;
/// Encoding of one `EpochQuery`.
const EPOCH_QUERY_BYTES: usize = 4 * 3;
/// Smallest encoding of one `EpochAnswer` (end absent).
const EPOCH_ANSWER_BYTES_MIN: usize = 4 + 2 + 1;

const NANOS_PER_SECOND: u32 = 1_000_000_000;

/// What a frame carries, by its message type byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MessageType {
    /// [`Request::Fetch`].
    FetchRequest,
    /// [`Request::EpochEndOffsets`].
    EpochEndOffsetsRequest,
    /// [`Response::Error`].
    ErrorResponse,
    /// [`Response::Fetch`].
    FetchResponse,
    /// [`Response::EpochEndOffsets`].
    EpochEndOffsetsResponse,
    /// [`Request::Snapshot`].
    SnapshotRequest,
    /// [`Response::Snapshot`].
    SnapshotResponse,
}

impl MessageType {
    fn as_u8(self) -> u8 {
        match self {
            MessageType::FetchRequest => 0x01,
            MessageType::EpochEndOffsetsRequest => 0x02,
            MessageType::ErrorResponse => 0x80,
            MessageType::FetchResponse => 0x81,
            MessageType::EpochEndOffsetsResponse => 0x82,
            MessageType::SnapshotRequest => 0x03,
            MessageType::SnapshotResponse => 0x83,
        }
    }

    fn from_u8(number: u8) -> Option<MessageType> {
        Some(match number {
            0x01 => MessageType::FetchRequest,
            0x02 => MessageType::EpochEndOffsetsRequest,
            0x80 => MessageType::ErrorResponse,
            0x81 => MessageType::FetchResponse,
            0x82 => MessageType::EpochEndOffsetsResponse,
            0x03 => MessageType::SnapshotRequest,
            0x83 => MessageType::SnapshotResponse,
            _ => return None,
        })
    }
}

/// The decoded fixed header of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    /// What the body holds.
    pub(crate) message_type: MessageType,
    /// Bytes after the header. Invariant: `HEADER_BYTES + body_bytes` is at
    /// most the `frame_bytes_max` the header was decoded with.
    pub(crate) body_bytes: usize,
    /// The caller's id for the call, echoed by the response.
    pub(crate) request_id: u64,
}

/// A decoded frame body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Message {
    /// A call, with the node that made it.
    Request {
        /// The caller (`from` of `RequestHandler::handle`).
        from: NodeId,
        /// The call.
        request: Request,
    },
    /// An answer.
    Response(Response),
}

/// A whole decoded frame.
#[cfg(test)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    /// The id that pairs a response with its request.
    pub(crate) request_id: u64,
    /// What the frame carries.
    pub(crate) message: Message,
}

/// Why bytes do not decode as a frame: the field that was wrong and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FrameError {
    field: &'static str,
    problem: String,
}

impl FrameError {
    pub(crate) fn new(field: &'static str, problem: String) -> FrameError {
        FrameError { field, problem }
    }

    pub(crate) fn truncated(field: &'static str, needed: usize, remaining: usize) -> FrameError {
        FrameError::new(
            field,
            format!("truncated: needs {needed} bytes, {remaining} remain"),
        )
    }

    /// The field that failed to decode.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn field(&self) -> &'static str {
        self.field
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad frame field `{}`: {}", self.field, self.problem)
    }
}

// ---- encoding --------------------------------------------------------------

/// Why a message cannot be put in a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FrameTooLarge {
    /// The size the frame would have had.
    pub(crate) frame_bytes: usize,
    /// The configured maximum.
    pub(crate) frame_bytes_max: usize,
}

impl fmt::Display for FrameTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a frame of {} bytes exceeds frame_bytes_max {}",
            self.frame_bytes, self.frame_bytes_max
        )
    }
}

/// Encodes `request`, sent by `from`, as a whole frame.
pub(crate) fn encode_request(
    request_id: u64,
    from: NodeId,
    request: &Request,
    frame_bytes_max: usize,
) -> Result<Vec<u8>, FrameTooLarge> {
    let (message_type, size) = match request {
        Request::Fetch(fetch) => (MessageType::FetchRequest, fetch_request_bytes(fetch)),
        Request::EpochEndOffsets(query) => (
            MessageType::EpochEndOffsetsRequest,
            4 + 4 + 4 + EPOCH_QUERY_BYTES * query.logs.len(),
        ),
        Request::Snapshot(snapshot) => (
            MessageType::SnapshotRequest,
            4 + SNAPSHOT_REQUEST_BYTES_MIN + snapshot.snapshot.map_or(0, |_| SNAPSHOT_NAMED_BYTES),
        ),
    };
    let mut out = start_frame(message_type, request_id, size, frame_bytes_max)?;
    out.put_u32_le(from.0);
    match request {
        Request::Fetch(fetch) => {
            out.put_u32_le(fetch.replica.0);
            out.put_u64_le(fetch.incarnation.0);
            out.put_u64_le(fetch.wait_max.as_secs());
            out.put_u32_le(fetch.wait_max.subsec_nanos());
            out.put_u32_le(fetch.bytes_max);
            put_count(&mut out, fetch.logs.len());
            for log in &fetch.logs {
                out.put_u32_le(log.log.0);
                out.put_u32_le(log.current_leader_epoch.0);
                out.put_u64_le(log.fetch_offset.0);
                put_epoch(&mut out, log.last_fetched_epoch);
                put_epoch(&mut out, log.line_epoch);
                out.put_u64_le(log.log_start_offset.0);
                out.put_u32_le(log.bytes_max);
                match log.applied_offset {
                    Some(applied) => {
                        out.put_u8(1);
                        out.put_u64_le(applied.0);
                    }
                    None => out.put_u8(0),
                }
            }
        }
        Request::EpochEndOffsets(query) => {
            out.put_u32_le(query.replica.0);
            put_count(&mut out, query.logs.len());
            for q in &query.logs {
                out.put_u32_le(q.log.0);
                out.put_u32_le(q.current_leader_epoch.0);
                out.put_u32_le(q.epoch.0);
            }
        }
        Request::Snapshot(snapshot) => {
            out.put_u32_le(snapshot.replica.0);
            out.put_u32_le(snapshot.log.0);
            out.put_u32_le(snapshot.current_leader_epoch.0);
            out.put_u64_le(snapshot.position);
            out.put_u32_le(snapshot.bytes_max);
            match snapshot.snapshot {
                Some(named) => {
                    out.put_u8(1);
                    out.put_u64_le(named.offset.0);
                    out.put_u64_le(named.size_bytes);
                }
                None => out.put_u8(0),
            }
        }
    }
    finish_frame(out, size)
}

/// Payloads (a log's records, a snapshot chunk's data) at least this long
/// are sent from the response's own `Bytes` rather than copied into the
/// frame: a copy of a 1 MiB snapshot chunk costs the leader as much as the
/// CRC it computes on it. Shorter ones are copied; a piece of their own
/// would cost an allocation for the fields after them.
const PAYLOAD_SHARED_BYTES_MIN: usize = 4096;

/// An encoded frame, ready to send: its bytes in order, in pieces. Every
/// payload of at least [`PAYLOAD_SHARED_BYTES_MIN`] bytes is a piece of its
/// own that shares the response's buffer (no copy); the fields around the
/// payloads are the other pieces. Sent piece by piece, the small pieces
/// together (`io::write_all_pieces_by`).
#[derive(Clone, Debug)]
pub(crate) struct EncodedFrame {
    /// Invariant: their lengths add up to `bytes`; none is empty.
    pieces: Vec<Bytes>,
    bytes: usize,
}

impl EncodedFrame {
    /// The frame's bytes, in order.
    pub(crate) fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }

    /// The frame's length, header included.
    pub(crate) fn len(&self) -> usize {
        self.bytes
    }

    /// The frame as one buffer (a copy), for tests and fuzzers.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes);
        for piece in &self.pieces {
            out.extend_from_slice(piece);
        }
        out
    }
}

/// A response frame being encoded: the pieces done and the fields after
/// the last shared payload.
struct PieceWriter {
    pieces: Vec<Bytes>,
    out: Vec<u8>,
    /// Bytes of `pieces`.
    done_bytes: usize,
}

impl PieceWriter {
    /// Appends `payload`: shared when long, copied when short.
    fn put_payload(&mut self, payload: &Bytes) {
        if payload.len() < PAYLOAD_SHARED_BYTES_MIN {
            self.out.put_slice(payload);
            return;
        }
        self.end_piece();
        self.done_bytes += payload.len();
        self.pieces.push(payload.clone());
    }

    /// Closes the piece of fields being written, if it holds any.
    fn end_piece(&mut self) {
        if !self.out.is_empty() {
            let out = std::mem::take(&mut self.out);
            self.done_bytes += out.len();
            self.pieces.push(Bytes::from(out));
        }
    }

    fn finish(mut self, body_bytes: usize) -> EncodedFrame {
        self.end_piece();
        // The size computation and the writes must agree, or the peer would
        // read the next frame's header as this frame's tail.
        assert_eq!(
            self.done_bytes,
            HEADER_BYTES + body_bytes,
            "frame size computed wrongly"
        );
        debug_assert_eq!(
            self.pieces.iter().map(Bytes::len).sum::<usize>(),
            self.done_bytes
        );
        debug_assert!(self.pieces.iter().all(|piece| !piece.is_empty()));
        EncodedFrame {
            pieces: self.pieces,
            bytes: self.done_bytes,
        }
    }
}

/// Bytes of `response`'s payloads that [`encode_response_pieces`] shares
/// rather than copies.
fn shared_payload_bytes(response: &Response) -> usize {
    let shared = |len: usize| {
        if len >= PAYLOAD_SHARED_BYTES_MIN {
            len
        } else {
            0
        }
    };
    match response {
        Response::Fetch(fetch) => fetch.logs.iter().map(|log| shared(log.records.len())).sum(),
        Response::Snapshot(chunk) => shared(chunk.data.len()),
        Response::EpochEndOffsets(_) | Response::Error(_) => 0,
    }
}

/// Encodes `response` as a whole frame, in one buffer (a copy of every
/// payload), for tests and fuzzers; a server sends
/// [`encode_response_pieces`].
#[cfg(any(test, feature = "testing"))]
pub(crate) fn encode_response(
    request_id: u64,
    response: &Response,
    frame_bytes_max: usize,
) -> Result<Vec<u8>, FrameTooLarge> {
    encode_response_pieces(request_id, response, frame_bytes_max).map(|frame| frame.to_vec())
}

/// Encodes `response` as a whole frame whose long payloads are not copied
/// (see [`EncodedFrame`]).
pub(crate) fn encode_response_pieces(
    request_id: u64,
    response: &Response,
    frame_bytes_max: usize,
) -> Result<EncodedFrame, FrameTooLarge> {
    let (message_type, size) = match response {
        Response::Fetch(fetch) => (MessageType::FetchResponse, fetch_response_bytes(fetch)),
        Response::EpochEndOffsets(answers) => (
            MessageType::EpochEndOffsetsResponse,
            4 + answers
                .logs
                .iter()
                .map(|answer| EPOCH_ANSWER_BYTES_MIN + answer.end.map_or(0, |_| 4 + 8))
                .sum::<usize>(),
        ),
        Response::Error(_) => (MessageType::ErrorResponse, 2),
        Response::Snapshot(chunk) => (
            MessageType::SnapshotResponse,
            SNAPSHOT_RESPONSE_BYTES_MIN + chunk.snapshot_epoch.map_or(0, |_| 4) + chunk.data.len(),
        ),
    };
    let shared = shared_payload_bytes(response);
    debug_assert!(shared <= size);
    let out = start_frame_copying(
        message_type,
        request_id,
        size,
        size - shared,
        frame_bytes_max,
    )?;
    let mut w = PieceWriter {
        pieces: Vec::new(),
        out,
        done_bytes: 0,
    };
    match response {
        Response::Fetch(fetch) => {
            put_count(&mut w.out, fetch.logs.len());
            for log in &fetch.logs {
                w.out.put_u32_le(log.log.0);
                w.out.put_u16_le(log.error.as_u16());
                w.out.put_u64_le(log.high_watermark.0);
                w.out.put_u64_le(log.log_start_offset.0);
                w.out.put_u64_le(log.log_end_offset.0);
                put_epoch_end(&mut w.out, log.diverging);
                put_epoch(&mut w.out, log.log_start_epoch);
                put_epoch(&mut w.out, log.log_end_epoch);
                put_count(&mut w.out, log.records.len());
                w.put_payload(&log.records);
                put_count(&mut w.out, log.applied_offsets.len());
                for (node, applied) in &log.applied_offsets {
                    w.out.put_u32_le(node.0);
                    w.out.put_u64_le(applied.0);
                }
            }
        }
        Response::EpochEndOffsets(answers) => {
            put_count(&mut w.out, answers.logs.len());
            for answer in &answers.logs {
                w.out.put_u32_le(answer.log.0);
                w.out.put_u16_le(answer.error.as_u16());
                put_epoch_end(&mut w.out, answer.end);
            }
        }
        Response::Error(code) => w.out.put_u16_le(code.as_u16()),
        Response::Snapshot(chunk) => {
            w.out.put_u32_le(chunk.log.0);
            w.out.put_u16_le(chunk.error.as_u16());
            w.out.put_u64_le(chunk.snapshot_offset.0);
            put_epoch(&mut w.out, chunk.snapshot_epoch);
            w.out.put_u64_le(chunk.snapshot_bytes);
            w.out.put_u64_le(chunk.position);
            w.out.put_u32_le(chunk.crc32);
            put_count(&mut w.out, chunk.data.len());
            w.put_payload(&chunk.data);
        }
    }
    Ok(w.finish(size))
}

fn fetch_request_bytes(fetch: &FetchRequest) -> usize {
    4 + 4
        + 8
        + 8
        + 4
        + 4
        + 4
        + fetch
            .logs
            .iter()
            .map(|log| {
                FETCH_LOG_BYTES_MIN
                    + log.last_fetched_epoch.map_or(0, |_| 4)
                    + log.line_epoch.map_or(0, |_| 4)
                    + log.applied_offset.map_or(0, |_| 8)
            })
            .sum::<usize>()
}

fn fetch_response_bytes(fetch: &FetchResponse) -> usize {
    4 + fetch
        .logs
        .iter()
        .map(|log| {
            FETCHED_LOG_BYTES_MIN
                + log.diverging.map_or(0, |_| 4 + 8)
                + log.log_start_epoch.map_or(0, |_| 4)
                + log.log_end_epoch.map_or(0, |_| 4)
                + log.records.len()
                + APPLIED_POSITION_BYTES * log.applied_offsets.len()
        })
        .sum::<usize>()
}

/// Writes the header of a frame whose body will be `body_bytes` long, after
/// checking the frame fits in `frame_bytes_max`.
fn start_frame(
    message_type: MessageType,
    request_id: u64,
    body_bytes: usize,
    frame_bytes_max: usize,
) -> Result<Vec<u8>, FrameTooLarge> {
    start_frame_copying(
        message_type,
        request_id,
        body_bytes,
        body_bytes,
        frame_bytes_max,
    )
}

/// As [`start_frame`], with room for only the `copied_body_bytes` of the
/// body that will be copied after the header (the rest is shared, see
/// [`EncodedFrame`]).
fn start_frame_copying(
    message_type: MessageType,
    request_id: u64,
    body_bytes: usize,
    copied_body_bytes: usize,
    frame_bytes_max: usize,
) -> Result<Vec<u8>, FrameTooLarge> {
    debug_assert!(copied_body_bytes <= body_bytes);
    let frame_bytes = HEADER_BYTES.saturating_add(body_bytes);
    // The body length must also fit its u32 field, whatever the limit says.
    if frame_bytes > frame_bytes_max || u32::try_from(body_bytes).is_err() {
        return Err(FrameTooLarge {
            frame_bytes,
            frame_bytes_max,
        });
    }
    let mut out = Vec::with_capacity(HEADER_BYTES + copied_body_bytes);
    out.put_slice(&MAGIC);
    out.put_u8(VERSION);
    out.put_u8(message_type.as_u8());
    out.put_u32_le(body_bytes as u32);
    out.put_u64_le(request_id);
    Ok(out)
}

fn finish_frame(out: Vec<u8>, body_bytes: usize) -> Result<Vec<u8>, FrameTooLarge> {
    // The size computation and the writes must agree, or the peer would read
    // the next frame's header as this frame's tail.
    assert_eq!(
        out.len(),
        HEADER_BYTES + body_bytes,
        "frame size computed wrongly"
    );
    Ok(out)
}

/// Writes a count or a length. Callers have already checked, through the
/// frame size limit, that it fits in u32.
fn put_count(out: &mut Vec<u8>, count: usize) {
    debug_assert!(u32::try_from(count).is_ok());
    out.put_u32_le(count as u32);
}

/// An optional epoch: a presence byte, then the epoch if present.
fn put_epoch(out: &mut Vec<u8>, epoch: Option<LeaderEpoch>) {
    match epoch {
        Some(epoch) => {
            out.put_u8(1);
            out.put_u32_le(epoch.0);
        }
        None => out.put_u8(0),
    }
}

fn put_epoch_end(out: &mut Vec<u8>, end: Option<EpochEndOffset>) {
    match end {
        Some(end) => {
            out.put_u8(1);
            out.put_u32_le(end.epoch.0);
            out.put_u64_le(end.end_offset.0);
        }
        None => out.put_u8(0),
    }
}

// ---- decoding --------------------------------------------------------------

/// Decodes and checks a frame header: magic, version, message type, and that
/// the whole frame fits in `frame_bytes_max`.
pub(crate) fn decode_header(
    header: &[u8; HEADER_BYTES],
    frame_bytes_max: usize,
) -> Result<FrameHeader, FrameError> {
    let magic = &header[MAGIC_AT..MAGIC_AT + MAGIC.len()];
    if magic != MAGIC {
        return Err(FrameError::new(
            "magic",
            format!("{magic:02x?} is not {MAGIC:02x?} (\"ISRL\")"),
        ));
    }
    let version = header[VERSION_AT];
    if version != VERSION {
        return Err(FrameError::new(
            "version",
            format!("unknown version {version}, this node speaks {VERSION}"),
        ));
    }
    let type_number = header[TYPE_AT];
    let message_type = MessageType::from_u8(type_number).ok_or_else(|| {
        FrameError::new(
            "message type",
            format!("unknown message type {type_number:#04x}"),
        )
    })?;
    let body_length = u32::from_le_bytes([
        header[BODY_LENGTH_AT],
        header[BODY_LENGTH_AT + 1],
        header[BODY_LENGTH_AT + 2],
        header[BODY_LENGTH_AT + 3],
    ]);
    let frame_bytes = HEADER_BYTES as u64 + u64::from(body_length);
    if frame_bytes > frame_bytes_max as u64 {
        return Err(FrameError::new(
            "body length",
            format!(
                "{body_length} makes a frame of {frame_bytes} bytes, over frame_bytes_max {frame_bytes_max}"
            ),
        ));
    }
    let mut request_id = [0u8; 8];
    request_id.copy_from_slice(&header[REQUEST_ID_AT..HEADER_BYTES]);
    Ok(FrameHeader {
        message_type,
        body_bytes: body_length as usize,
        request_id: u64::from_le_bytes(request_id),
    })
}

/// Decodes a frame body of the type `header` announces. `body` must be
/// exactly `header.body_bytes` long; records in the result are slices of it.
pub(crate) fn decode_body(header: &FrameHeader, body: Bytes) -> Result<Message, FrameError> {
    if body.len() != header.body_bytes {
        return Err(FrameError::truncated("body", header.body_bytes, body.len()));
    }
    let mut reader = Reader { body, at: 0 };
    let message = match header.message_type {
        MessageType::FetchRequest => {
            let from = NodeId(reader.u32("sender")?);
            Message::Request {
                from,
                request: Request::Fetch(decode_fetch_request(&mut reader)?),
            }
        }
        MessageType::EpochEndOffsetsRequest => {
            let from = NodeId(reader.u32("sender")?);
            Message::Request {
                from,
                request: Request::EpochEndOffsets(decode_epoch_request(&mut reader)?),
            }
        }
        MessageType::ErrorResponse => Message::Response(Response::Error(ErrorCode::from_u16(
            reader.u16("error response code")?,
        ))),
        MessageType::FetchResponse => {
            Message::Response(Response::Fetch(decode_fetch_response(&mut reader)?))
        }
        MessageType::EpochEndOffsetsResponse => Message::Response(Response::EpochEndOffsets(
            decode_epoch_response(&mut reader)?,
        )),
        MessageType::SnapshotRequest => {
            let from = NodeId(reader.u32("sender")?);
            Message::Request {
                from,
                request: Request::Snapshot(SnapshotRequest {
                    replica: NodeId(reader.u32("snapshot replica")?),
                    log: LogId(reader.u32("snapshot log id")?),
                    current_leader_epoch: LeaderEpoch(reader.u32("snapshot current leader epoch")?),
                    position: reader.u64("snapshot position")?,
                    bytes_max: reader.u32("snapshot bytes_max")?,
                    snapshot: if reader.presence("snapshot named present")? {
                        Some(SnapshotInfo {
                            offset: Offset(reader.u64("snapshot named offset")?),
                            size_bytes: reader.u64("snapshot named bytes")?,
                        })
                    } else {
                        None
                    },
                }),
            }
        }
        MessageType::SnapshotResponse => {
            let log = LogId(reader.u32("snapshot chunk log id")?);
            let error = ErrorCode::from_u16(reader.u16("snapshot chunk error code")?);
            let snapshot_offset = Offset(reader.u64("snapshot chunk snapshot offset")?);
            let snapshot_epoch = reader.epoch("snapshot chunk snapshot epoch")?;
            let snapshot_bytes = reader.u64("snapshot chunk snapshot bytes")?;
            let position = reader.u64("snapshot chunk position")?;
            let crc32 = reader.u32("snapshot chunk crc32")?;
            let length = reader.u32("snapshot chunk data length")? as usize;
            let data = reader.bytes("snapshot chunk data", length)?;
            Message::Response(Response::Snapshot(SnapshotResponse {
                log,
                error,
                snapshot_offset,
                snapshot_epoch,
                snapshot_bytes,
                position,
                crc32,
                data,
            }))
        }
    };
    let trailing = reader.remaining();
    if trailing != 0 {
        return Err(FrameError::new(
            "body",
            format!("{trailing} bytes after the last field"),
        ));
    }
    Ok(message)
}

/// Decodes one whole frame held in `bytes` (header and body, nothing more).
/// The transport reads header and body separately (`io.rs`); this is the
/// same decoder in one piece, for the tests and fuzzing.
#[cfg(test)]
pub(crate) fn decode_frame(bytes: Bytes, frame_bytes_max: usize) -> Result<Frame, FrameError> {
    let Some(header_bytes) = bytes.get(..HEADER_BYTES) else {
        return Err(FrameError::truncated("header", HEADER_BYTES, bytes.len()));
    };
    let mut fixed = [0u8; HEADER_BYTES];
    fixed.copy_from_slice(header_bytes);
    let header = decode_header(&fixed, frame_bytes_max)?;
    let body = bytes.slice(HEADER_BYTES..);
    let message = decode_body(&header, body)?;
    Ok(Frame {
        request_id: header.request_id,
        message,
    })
}

fn decode_fetch_request(reader: &mut Reader) -> Result<FetchRequest, FrameError> {
    let replica = NodeId(reader.u32("fetch replica")?);
    let incarnation = Incarnation(reader.u64("fetch incarnation")?);
    let seconds = reader.u64("fetch wait_max seconds")?;
    let nanos = reader.u32("fetch wait_max nanoseconds")?;
    if nanos >= NANOS_PER_SECOND {
        return Err(FrameError::new(
            "fetch wait_max nanoseconds",
            format!("{nanos} is not below {NANOS_PER_SECOND}"),
        ));
    }
    let bytes_max = reader.u32("fetch bytes_max")?;
    let count = reader.count("fetch log count", FETCH_LOG_BYTES_MIN)?;
    let mut logs = Vec::with_capacity(count);
    for _ in 0..count {
        let log = LogId(reader.u32("fetch log id")?);
        let current_leader_epoch = LeaderEpoch(reader.u32("fetch current leader epoch")?);
        let fetch_offset = Offset(reader.u64("fetch offset")?);
        let last_fetched_epoch = reader.epoch("fetch last fetched epoch")?;
        let line_epoch = reader.epoch("fetch line epoch")?;
        let log_start_offset = Offset(reader.u64("fetch log start offset")?);
        let log_bytes_max = reader.u32("fetch log bytes_max")?;
        let applied_offset = if reader.presence("fetch applied offset present")? {
            Some(Offset(reader.u64("fetch applied offset")?))
        } else {
            None
        };
        logs.push(FetchLog {
            log,
            current_leader_epoch,
            fetch_offset,
            last_fetched_epoch,
            line_epoch,
            log_start_offset,
            bytes_max: log_bytes_max,
            applied_offset,
        });
    }
    Ok(FetchRequest {
        replica,
        incarnation,
        // Seconds up to u64::MAX with nanoseconds below one second never
        // overflow `Duration::new`.
        wait_max: Duration::new(seconds, nanos),
        bytes_max,
        logs,
    })
}

fn decode_epoch_request(reader: &mut Reader) -> Result<EpochEndOffsetsRequest, FrameError> {
    let replica = NodeId(reader.u32("epoch request replica")?);
    let count = reader.count("epoch query count", EPOCH_QUERY_BYTES)?;
    let mut logs = Vec::with_capacity(count);
    for _ in 0..count {
        logs.push(EpochQuery {
            log: LogId(reader.u32("epoch query log id")?),
            current_leader_epoch: LeaderEpoch(reader.u32("epoch query current leader epoch")?),
            epoch: LeaderEpoch(reader.u32("epoch query epoch")?),
        });
    }
    Ok(EpochEndOffsetsRequest { replica, logs })
}

fn decode_fetch_response(reader: &mut Reader) -> Result<FetchResponse, FrameError> {
    let count = reader.count("fetched log count", FETCHED_LOG_BYTES_MIN)?;
    let mut logs = Vec::with_capacity(count);
    for _ in 0..count {
        let log = LogId(reader.u32("fetched log id")?);
        let error = ErrorCode::from_u16(reader.u16("fetched log error code")?);
        let high_watermark = Offset(reader.u64("fetched high watermark")?);
        let log_start_offset = Offset(reader.u64("fetched log start offset")?);
        let log_end_offset = Offset(reader.u64("fetched log end offset")?);
        let diverging = reader.epoch_end("fetched diverging")?;
        let log_start_epoch = reader.epoch("fetched log start epoch")?;
        let log_end_epoch = reader.epoch("fetched log end epoch")?;
        let records_bytes = reader.u32("fetched records length")? as usize;
        let records = reader.bytes("fetched records", records_bytes)?;
        let applied_count =
            reader.count("fetched applied position count", APPLIED_POSITION_BYTES)?;
        let mut applied_offsets = Vec::with_capacity(applied_count);
        for _ in 0..applied_count {
            let node = NodeId(reader.u32("fetched applied position replica")?);
            let applied = Offset(reader.u64("fetched applied position")?);
            applied_offsets.push((node, applied));
        }
        logs.push(FetchedLog {
            log,
            error,
            high_watermark,
            log_start_offset,
            log_end_offset,
            diverging,
            log_start_epoch,
            log_end_epoch,
            records,
            applied_offsets,
        });
    }
    Ok(FetchResponse { logs })
}

fn decode_epoch_response(reader: &mut Reader) -> Result<EpochEndOffsetsResponse, FrameError> {
    let count = reader.count("epoch answer count", EPOCH_ANSWER_BYTES_MIN)?;
    let mut logs = Vec::with_capacity(count);
    for _ in 0..count {
        logs.push(EpochAnswer {
            log: LogId(reader.u32("epoch answer log id")?),
            error: ErrorCode::from_u16(reader.u16("epoch answer error code")?),
            end: reader.epoch_end("epoch answer end")?,
        });
    }
    Ok(EpochEndOffsetsResponse { logs })
}

/// A bounds-checked cursor over a frame body. Every read names its field so
/// that a failure says what was being decoded.
struct Reader {
    body: Bytes,
    /// Invariant: `at <= body.len()`.
    at: usize,
}

impl Reader {
    fn remaining(&self) -> usize {
        self.body.len() - self.at
    }

    fn take<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], FrameError> {
        let remaining = self.remaining();
        if remaining < N {
            return Err(FrameError::truncated(field, N, remaining));
        }
        let mut array = [0u8; N];
        array.copy_from_slice(&self.body[self.at..self.at + N]);
        self.at += N;
        Ok(array)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, FrameError> {
        Ok(self.take::<1>(field)?[0])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, FrameError> {
        Ok(u16::from_le_bytes(self.take(field)?))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, FrameError> {
        Ok(u32::from_le_bytes(self.take(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(self.take(field)?))
    }

    /// A presence byte: 0 (absent) or 1 (present); anything else is garbage.
    fn presence(&mut self, field: &'static str) -> Result<bool, FrameError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(FrameError::new(
                field,
                format!("presence byte {other} is neither 0 nor 1"),
            )),
        }
    }

    /// An optional epoch ([`put_epoch`]).
    fn epoch(&mut self, field: &'static str) -> Result<Option<LeaderEpoch>, FrameError> {
        if !self.presence(field)? {
            return Ok(None);
        }
        Ok(Some(LeaderEpoch(self.u32(field)?)))
    }

    fn epoch_end(&mut self, field: &'static str) -> Result<Option<EpochEndOffset>, FrameError> {
        if !self.presence(field)? {
            return Ok(None);
        }
        Ok(Some(EpochEndOffset {
            epoch: LeaderEpoch(self.u32(field)?),
            end_offset: Offset(self.u64(field)?),
        }))
    }

    /// A zero-copy slice of the next `length` bytes.
    fn bytes(&mut self, field: &'static str, length: usize) -> Result<Bytes, FrameError> {
        let remaining = self.remaining();
        if length > remaining {
            return Err(FrameError::truncated(field, length, remaining));
        }
        let slice = self.body.slice(self.at..self.at + length);
        self.at += length;
        Ok(slice)
    }

    /// An entry count, refused when `count` entries of at least
    /// `entry_bytes_min` each cannot fit in what remains: that is what keeps
    /// `Vec::with_capacity(count)` bounded by the frame's own size.
    fn count(&mut self, field: &'static str, entry_bytes_min: usize) -> Result<usize, FrameError> {
        let count = self.u32(field)? as usize;
        let remaining = self.remaining();
        if count.saturating_mul(entry_bytes_min) > remaining {
            return Err(FrameError::new(
                field,
                format!(
                    "{count} entries of at least {entry_bytes_min} bytes cannot fit in the {remaining} bytes left"
                ),
            ));
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{echo_response, sample_epoch_request, sample_fetch_request};
    use proptest::prelude::*;

    const MAX: usize = 1 << 20;

    fn sample_frames() -> Vec<(Vec<u8>, Frame)> {
        let from = NodeId(4);
        let mut frames = Vec::new();
        let mut requests = vec![sample_fetch_request(from, 7), sample_epoch_request(from, 9)];
        if let Request::Fetch(fetch) = &mut requests[0] {
            fetch.wait_max = Duration::new(3, 999_999_999);
            fetch.logs.push(FetchLog {
                log: LogId(u32::MAX),
                current_leader_epoch: LeaderEpoch(u32::MAX),
                fetch_offset: Offset(u64::MAX),
                last_fetched_epoch: None,
                line_epoch: Some(LeaderEpoch(u32::MAX)),
                log_start_offset: Offset(u64::MAX),
                bytes_max: u32::MAX,
                applied_offset: Some(Offset(u64::MAX)),
            });
        }
        for (id, request) in requests.into_iter().enumerate() {
            let id = id as u64 * 1_000_003;
            let encoded = encode_request(id, from, &request, MAX).expect("fits");
            let response = echo_response(NodeId(9), from, &request);
            frames.push((
                encoded,
                Frame {
                    request_id: id,
                    message: Message::Request { from, request },
                },
            ));
            let encoded = encode_response(u64::MAX - id, &response, MAX).expect("fits");
            frames.push((
                encoded,
                Frame {
                    request_id: u64::MAX - id,
                    message: Message::Response(response),
                },
            ));
        }
        for code in ErrorCode::ALL {
            let response = Response::Error(code);
            frames.push((
                encode_response(5, &response, MAX).expect("fits"),
                Frame {
                    request_id: 5,
                    message: Message::Response(response),
                },
            ));
        }
        frames
    }

    #[test]
    fn every_sample_frame_round_trips() {
        for (encoded, frame) in sample_frames() {
            let decoded = decode_frame(Bytes::from(encoded), MAX).expect("decodes");
            assert_eq!(decoded, frame);
        }
    }

    #[test]
    fn records_are_decoded_without_copying() {
        let request = sample_fetch_request(NodeId(1), 3);
        let response = echo_response(NodeId(2), NodeId(1), &request);
        let encoded = Bytes::from(encode_response(1, &response, MAX).expect("fits"));
        let range = encoded.as_ptr_range();
        let frame = decode_frame(encoded.clone(), MAX).expect("decodes");
        let Message::Response(Response::Fetch(fetch)) = frame.message else {
            panic!("expected a fetch response");
        };
        let records = &fetch.logs[0].records;
        assert!(!records.is_empty());
        assert!(range.contains(&records.as_ptr()), "records were copied");
    }

    /// A server sends a long payload from the response's own buffer: the
    /// leader copied every 1 MiB snapshot chunk into the frame before
    /// writing it, as much work as the chunk's CRC.
    #[test]
    fn long_payloads_are_encoded_without_copying() {
        let data = Bytes::from(vec![7u8; PAYLOAD_SHARED_BYTES_MIN]);
        let response = Response::Snapshot(SnapshotResponse {
            log: LogId(3),
            error: ErrorCode::None,
            snapshot_offset: Offset(10),
            snapshot_epoch: Some(LeaderEpoch(4)),
            snapshot_bytes: 1 << 20,
            position: 4096,
            crc32: crc32fast::hash(&data),
            data: data.clone(),
        });
        let frame = encode_response_pieces(9, &response, MAX).expect("fits");
        assert_eq!(frame.pieces().len(), 2);
        assert_eq!(frame.pieces()[1].as_ptr(), data.as_ptr(), "data was copied");
        assert_eq!(frame.len(), frame.to_vec().len());
        let decoded = decode_frame(Bytes::from(frame.to_vec()), MAX).expect("decodes");
        assert_eq!(decoded.message, Message::Response(response));
        // A short payload is copied into the fields' piece.
        let short = Response::Snapshot(SnapshotResponse {
            log: LogId(3),
            error: ErrorCode::None,
            snapshot_offset: Offset(10),
            snapshot_epoch: None,
            snapshot_bytes: 3,
            position: 0,
            crc32: 0,
            data: Bytes::from_static(b"abc"),
        });
        assert_eq!(
            encode_response_pieces(9, &short, MAX)
                .expect("fits")
                .pieces()
                .len(),
            1
        );
    }

    /// A snapshot request names the snapshot its transfer downloads
    /// (frame version 6), or none for the transfer's first chunk: both
    /// round-trip, the name costs a presence byte and 16 bytes, and a
    /// presence byte other than 0 or 1 is refused by name.
    #[test]
    fn a_snapshot_request_round_trips_with_and_without_the_snapshot_named() {
        let first = SnapshotRequest {
            replica: NodeId(2),
            log: LogId(7),
            current_leader_epoch: LeaderEpoch(3),
            position: 0,
            bytes_max: 1 << 20,
            snapshot: None,
        };
        let later = SnapshotRequest {
            position: 1 << 20,
            snapshot: Some(SnapshotInfo {
                offset: Offset(u64::MAX - 1),
                size_bytes: 10 << 30,
            }),
            ..first.clone()
        };
        let mut lengths = Vec::new();
        for request in [first, later] {
            let request = Request::Snapshot(request);
            let encoded = encode_request(11, NodeId(2), &request, MAX).expect("fits");
            lengths.push(encoded.len());
            assert_eq!(
                decode_frame(Bytes::from(encoded), MAX),
                Ok(Frame {
                    request_id: 11,
                    message: Message::Request {
                        from: NodeId(2),
                        request,
                    },
                })
            );
        }
        assert_eq!(
            lengths,
            [
                HEADER_BYTES + 4 + SNAPSHOT_REQUEST_BYTES_MIN,
                HEADER_BYTES + 4 + SNAPSHOT_REQUEST_BYTES_MIN + SNAPSHOT_NAMED_BYTES
            ]
        );
        let mut body = vec![0u8; 4 + SNAPSHOT_REQUEST_BYTES_MIN];
        *body.last_mut().expect("not empty") = 2;
        let mut frame =
            start_frame(MessageType::SnapshotRequest, 1, body.len(), MAX).expect("fits");
        frame.extend_from_slice(&body);
        let error = decode_frame(Bytes::from(frame), MAX).expect_err("must fail");
        assert_eq!(error.field(), "snapshot named present", "{error}");
    }

    #[test]
    fn header_errors_name_the_field_and_value() {
        let good = encode_response(1, &Response::Error(ErrorCode::Timeout), MAX).expect("fits");
        let cases: [(usize, u8, &str, &str); 4] = [
            (MAGIC_AT, b'X', "magic", "ISRL"),
            (VERSION_AT, 1, "version", "unknown version 1"),
            (TYPE_AT, 0x7f, "message type", "0x7f"),
            (
                BODY_LENGTH_AT + 3,
                0xff,
                "body length",
                "over frame_bytes_max",
            ),
        ];
        for (at, value, field, text) in cases {
            let mut bad = good.clone();
            bad[at] = value;
            let error = decode_frame(Bytes::from(bad), MAX).expect_err("must fail");
            assert_eq!(error.field(), field, "{error}");
            assert!(error.to_string().contains(text), "{error}");
        }
    }

    #[test]
    fn body_errors_name_the_field() {
        let header = |message_type, body: &[u8]| {
            let mut out = start_frame(message_type, 1, body.len(), MAX).expect("fits");
            out.extend_from_slice(body);
            Bytes::from(out)
        };
        let mut huge_count = vec![0u8; 4];
        huge_count.extend_from_slice(&[0, 0, 0, 0]); // replica
        huge_count.extend_from_slice(&u32::MAX.to_le_bytes()); // query count
        let mut bad_nanos = Vec::new();
        bad_nanos.extend_from_slice(&[0; 8]); // sender, replica
        bad_nanos.extend_from_slice(&[0; 8]); // incarnation
        bad_nanos.extend_from_slice(&[0; 8]); // seconds
        bad_nanos.extend_from_slice(&NANOS_PER_SECOND.to_le_bytes());
        bad_nanos.extend_from_slice(&[0; 8]); // bytes_max, count
        let mut bad_presence = Vec::new();
        bad_presence.extend_from_slice(&1u32.to_le_bytes()); // one answer
        bad_presence.extend_from_slice(&[0; 6]); // log, error
        bad_presence.push(2);
        let cases: [(Bytes, &str); 5] = [
            (
                header(MessageType::EpochEndOffsetsRequest, &huge_count),
                "epoch query count",
            ),
            (
                header(MessageType::FetchRequest, &bad_nanos),
                "fetch wait_max nanoseconds",
            ),
            (
                header(MessageType::EpochEndOffsetsResponse, &bad_presence),
                "epoch answer end",
            ),
            (
                header(MessageType::ErrorResponse, &[1]),
                "error response code",
            ),
            (header(MessageType::ErrorResponse, &[1, 0, 0]), "body"),
        ];
        for (frame, field) in cases {
            let error = decode_frame(frame, MAX).expect_err("must fail");
            assert_eq!(error.field(), field, "{error}");
        }
    }

    #[test]
    fn a_frame_over_the_maximum_is_refused_when_encoding() {
        let response = Response::Error(ErrorCode::None);
        let error = encode_response(1, &response, HEADER_BYTES + 1).expect_err("too large");
        assert_eq!(error.frame_bytes, HEADER_BYTES + 2);
        let frame = encode_response(1, &response, HEADER_BYTES + 2).expect("fits exactly");
        assert_eq!(frame.len(), HEADER_BYTES + 2);
        assert_eq!(
            decode_frame(Bytes::from(frame), HEADER_BYTES + 2),
            Ok(Frame {
                request_id: 1,
                message: Message::Response(response),
            })
        );
    }

    #[test]
    fn truncated_header_is_an_error() {
        let good = encode_response(1, &Response::Error(ErrorCode::None), MAX).expect("fits");
        for length in 0..good.len() {
            let error = decode_frame(Bytes::copy_from_slice(&good[..length]), MAX)
                .expect_err("truncated frame must fail");
            let field = error.field();
            assert!(field == "header" || field == "body", "{error}");
        }
    }

    fn arb_epoch_end() -> impl Strategy<Value = Option<EpochEndOffset>> {
        proptest::option::of(
            (any::<u32>(), any::<u64>()).prop_map(|(epoch, end)| EpochEndOffset {
                epoch: LeaderEpoch(epoch),
                end_offset: Offset(end),
            }),
        )
    }

    fn arb_code() -> impl Strategy<Value = ErrorCode> {
        proptest::sample::select(ErrorCode::ALL.to_vec())
    }

    fn arb_request() -> impl Strategy<Value = Request> {
        let fetch_log = (
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            any::<u64>(),
            any::<u32>(),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(
                |(log, epoch, offset, last, line, start, bytes_max, applied)| FetchLog {
                    log: LogId(log),
                    current_leader_epoch: LeaderEpoch(epoch),
                    fetch_offset: Offset(offset),
                    last_fetched_epoch: last.map(LeaderEpoch),
                    line_epoch: line.map(LeaderEpoch),
                    log_start_offset: Offset(start),
                    bytes_max,
                    applied_offset: applied.map(Offset),
                },
            );
        let fetch = (
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            0..NANOS_PER_SECOND,
            any::<u32>(),
            proptest::collection::vec(fetch_log, 0..5),
        )
            .prop_map(|(replica, incarnation, seconds, nanos, bytes_max, logs)| {
                Request::Fetch(FetchRequest {
                    replica: NodeId(replica),
                    incarnation: Incarnation(incarnation),
                    wait_max: Duration::new(seconds, nanos),
                    bytes_max,
                    logs,
                })
            });
        let query = (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(log, current, epoch)| {
            EpochQuery {
                log: LogId(log),
                current_leader_epoch: LeaderEpoch(current),
                epoch: LeaderEpoch(epoch),
            }
        });
        let epochs =
            (any::<u32>(), proptest::collection::vec(query, 0..5)).prop_map(|(replica, logs)| {
                Request::EpochEndOffsets(EpochEndOffsetsRequest {
                    replica: NodeId(replica),
                    logs,
                })
            });
        let snapshot = (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            proptest::option::of((any::<u64>(), any::<u64>())),
        )
            .prop_map(|(replica, log, epoch, position, bytes_max, named)| {
                Request::Snapshot(SnapshotRequest {
                    replica: NodeId(replica),
                    log: LogId(log),
                    current_leader_epoch: LeaderEpoch(epoch),
                    position,
                    bytes_max,
                    snapshot: named.map(|(offset, size_bytes)| SnapshotInfo {
                        offset: Offset(offset),
                        size_bytes,
                    }),
                })
            });
        prop_oneof![fetch, epochs, snapshot]
    }

    fn arb_response() -> impl Strategy<Value = Response> {
        let fetched = (
            any::<u32>(),
            arb_code(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            arb_epoch_end(),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            proptest::collection::vec(any::<u8>(), 0..64),
            proptest::collection::vec((any::<u32>(), any::<u64>()), 0..4),
        )
            .prop_map(
                |(
                    log,
                    error,
                    hw,
                    start,
                    end,
                    diverging,
                    start_epoch,
                    end_epoch,
                    records,
                    applied,
                )| {
                    FetchedLog {
                        log: LogId(log),
                        error,
                        high_watermark: Offset(hw),
                        log_start_offset: Offset(start),
                        log_end_offset: Offset(end),
                        diverging,
                        log_start_epoch: start_epoch.map(LeaderEpoch),
                        log_end_epoch: end_epoch.map(LeaderEpoch),
                        records: Bytes::from(records),
                        applied_offsets: applied
                            .into_iter()
                            .map(|(node, offset)| (NodeId(node), Offset(offset)))
                            .collect(),
                    }
                },
            );
        let fetch = proptest::collection::vec(fetched, 0..4)
            .prop_map(|logs| Response::Fetch(FetchResponse { logs }));
        let answer =
            (any::<u32>(), arb_code(), arb_epoch_end()).prop_map(|(log, error, end)| EpochAnswer {
                log: LogId(log),
                error,
                end,
            });
        let epochs = proptest::collection::vec(answer, 0..5)
            .prop_map(|logs| Response::EpochEndOffsets(EpochEndOffsetsResponse { logs }));
        let snapshot = (
            any::<u32>(),
            arb_code(),
            any::<u64>(),
            proptest::option::of(any::<u32>()),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(
                |(log, error, offset, epoch, bytes, position, crc32, data)| {
                    Response::Snapshot(SnapshotResponse {
                        log: LogId(log),
                        error,
                        snapshot_offset: Offset(offset),
                        snapshot_epoch: epoch.map(LeaderEpoch),
                        snapshot_bytes: bytes,
                        position,
                        crc32,
                        data: Bytes::from(data),
                    })
                },
            );
        prop_oneof![
            fetch,
            epochs,
            snapshot,
            arb_code().prop_map(Response::Error)
        ]
    }

    fn arb_frame() -> impl Strategy<Value = Frame> {
        let request =
            (any::<u64>(), any::<u32>(), arb_request()).prop_map(|(id, from, request)| Frame {
                request_id: id,
                message: Message::Request {
                    from: NodeId(from),
                    request,
                },
            });
        let response = (any::<u64>(), arb_response()).prop_map(|(id, response)| Frame {
            request_id: id,
            message: Message::Response(response),
        });
        prop_oneof![request, response]
    }

    fn encode(frame: &Frame) -> Vec<u8> {
        match &frame.message {
            Message::Request { from, request } => {
                encode_request(frame.request_id, *from, request, MAX)
            }
            Message::Response(response) => encode_response(frame.request_id, response, MAX),
        }
        .expect("small frames fit")
    }

    proptest! {
        #[test]
        fn every_message_round_trips(frame in arb_frame()) {
            let decoded = decode_frame(Bytes::from(encode(&frame)), MAX);
            prop_assert_eq!(decoded, Ok(frame));
        }

        #[test]
        fn frame_decoder_never_panics_on_arbitrary_bytes(
            data in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            // Any outcome is fine for random bytes; the property is only that it returns.
            let _ = decode_frame(Bytes::from(data), MAX);
        }

        #[test]
        fn frame_decoder_never_panics_on_arbitrary_bodies_behind_a_valid_header(
            type_index in 0usize..7,
            body in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let types = [
                MessageType::FetchRequest,
                MessageType::EpochEndOffsetsRequest,
                MessageType::ErrorResponse,
                MessageType::FetchResponse,
                MessageType::EpochEndOffsetsResponse,
                MessageType::SnapshotRequest,
                MessageType::SnapshotResponse,
            ];
            let mut frame = start_frame(types[type_index], 1, body.len(), MAX).expect("fits");
            frame.extend_from_slice(&body);
            // A random body may or may not decode; the property is only that it returns.
            let _ = decode_frame(Bytes::from(frame), MAX);
        }

        #[test]
        fn frame_decoder_never_panics_on_mutated_valid_frames(
            frame in arb_frame(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let good = encode(&frame);
            let end = cut.index(good.len());
            let truncated = decode_frame(Bytes::copy_from_slice(&good[..end]), MAX);
            let expected = if end < HEADER_BYTES {
                FrameError::truncated("header", HEADER_BYTES, end)
            } else {
                FrameError::truncated("body", good.len() - HEADER_BYTES, end - HEADER_BYTES)
            };
            prop_assert_eq!(truncated, Err(expected), "a frame cut to {} bytes", end);
            let mut bytes = good;
            for (index, value) in flips {
                let at = index.index(bytes.len());
                bytes[at] = value;
            }
            // Flips may leave a valid frame or break any field; the property is only that it returns.
            let _ = decode_frame(Bytes::from(bytes), MAX);
        }
    }
}
