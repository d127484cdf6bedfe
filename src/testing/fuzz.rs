//! Entry points for fuzzing every decoder of untrusted bytes (SPEC G5): one
//! function per decoder, each handing arbitrary bytes to the code the
//! library itself runs and returning what it made of them.
//!
//! This module owns no decoding logic. Each function calls the real decoder
//! (through a file in a temporary directory where the real decoder reads a
//! file) and turns its result into public types a test can inspect:
//!
//! | decoder | entry point |
//! |---|---|
//! | one record batch and its records | [`decode_batch`] |
//! | back-to-back batches (a read result, fetched records) | [`decode_batches`] |
//! | one TCP frame; a stream of frames | [`decode_frame`], [`decode_frames`] |
//! | `log-state.checkpoint` | [`decode_log_checkpoint`] |
//! | `leader-epoch.checkpoint` | [`decode_epoch_checkpoint`] |
//! | producer state snapshot | [`decode_producer_snapshot`] |
//! | segment offset index | [`decode_offset_index`] |
//! | segment data file, through recovery and reads | [`decode_segment`] |
//!
//! A `cargo-fuzz` target calls one of them:
//!
//! ```no_run
//! // fuzz/fuzz_targets/decoders.rs, in a crate depending on `libfuzzer-sys`
//! // and `isrlog = { version = "0.1", features = ["testing"] }`:
//! //     libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_one(data));
//! fn fuzz_one(data: &[u8]) {
//!     let _ = isrlog::testing::fuzz::decode_batch(data);
//!     let _ = isrlog::testing::fuzz::decode_frames(data, 1 << 20);
//! }
//! # fuzz_one(b"");
//! ```
//!
//! The contract every decoder keeps, and every function here passes on:
//! whatever the bytes, it returns (a value or the crate's clear error, naming
//! the field or the file) and never panics, hangs, or allocates more than
//! the input can fill. A panic under a fuzzer is a bug in the decoder.
//!
//! The `encode_*` functions run the real encoders, for seed corpora and
//! round-trip properties.
//!
//! What each format protects with a CRC, and what it cannot:
//! - a record batch's CRC covers everything but its base offset, length,
//!   leader epoch and magic (as Kafka's): a change to the base offset or the
//!   leader epoch decodes, and only the caller (the log, against the file
//!   name, the index and the epoch cache) can tell;
//! - a frame has no CRC (TCP checksums the stream): a changed byte in a
//!   numeric field decodes to another valid message;
//! - checkpoint files and producer snapshots end with a CRC over everything
//!   before it, so any single changed byte is caught;
//! - the offset index has no CRC; it is sanity-checked (entries increasing,
//!   positions inside the data file) and rebuilt from the data when the
//!   check fails, so a change that passes the check yields other, ordered
//!   entries, which only steer where a read starts scanning.

use std::fs;

use crate::storage::StdDisk;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use tempfile::TempDir;

use crate::clock::ManualClock;
use crate::error::{Error, Result};
use crate::record::{BatchHeader, BatchIter, Record, RecordBatch};
use crate::storage::{
    snapshot_path, LeaderEpochCache, Log, LogCheckpoint, LogConfig, OffsetIndex,
    ProducerStateManager, RecoveryReport, INDEX_ENTRY_BYTES,
};
use crate::transport::{
    decode_body, encode_request, encode_response, read_frame, FrameError, Message, ReadError,
    Request, Response,
};
use crate::types::{LeaderEpoch, NodeId, Offset, ProducerEpoch, ProducerId, Sequence};

// ---- record batches ---------------------------------------------------------

/// A batch that decoded, with every one of its records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedBatch {
    /// The batch (header checked, CRC matched).
    pub batch: RecordBatch,
    /// Its records, in order.
    pub records: Vec<Record>,
}

fn with_records(batch: RecordBatch) -> Result<DecodedBatch> {
    let records = batch.records().collect::<Result<Vec<_>>>()?;
    Ok(DecodedBatch { batch, records })
}

/// Decodes `bytes` as exactly one record batch, as a caller handing a batch
/// to the library does ([`RecordBatch::from_bytes`]), then decodes each of
/// its records ([`RecordBatch::records`]).
///
/// A fuzz target for the batch and record layout. Errors are
/// `Error::InvalidBatch` naming the check that failed.
pub fn decode_batch(bytes: &[u8]) -> Result<DecodedBatch> {
    with_records(RecordBatch::from_bytes(Bytes::copy_from_slice(bytes))?)
}

/// Decodes `bytes` as back-to-back batches, as a reader of a read result or
/// a fetch response does ([`BatchIter`]), and decodes every record of each.
/// A partial batch at the end is not an error (a read may stop inside one)
/// and is left out; the first bad batch or record is the error.
///
/// A fuzz target for the batch scanner. Errors are `Error::InvalidBatch`.
pub fn decode_batches(bytes: &[u8]) -> Result<Vec<DecodedBatch>> {
    BatchIter::new(Bytes::copy_from_slice(bytes))
        .map(|batch| with_records(batch?))
        .collect()
}

// ---- TCP frames ---------------------------------------------------------------

/// What a decoded frame carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameMessage {
    /// A call, with the node that says it made it.
    Request {
        /// The sender named in the frame.
        from: NodeId,
        /// The call.
        request: Request,
    },
    /// An answer.
    Response(Response),
}

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedFrame {
    /// The id pairing a response with its request.
    pub request_id: u64,
    /// The message.
    pub message: FrameMessage,
}

/// Why bytes were refused as a frame: the field at fault and the
/// decoder's own words (as a connection logs them before closing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameRejected {
    /// The field that did not decode (`"magic"`, `"body length"`, `"fetch
    /// log count"`, ... or `"header"`/`"body"` for a frame cut short).
    pub field: &'static str,
    /// The whole message, naming the field and the bad value.
    pub reason: String,
}

impl std::fmt::Display for FrameRejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl From<FrameError> for FrameRejected {
    fn from(error: FrameError) -> FrameRejected {
        FrameRejected {
            field: error.field(),
            reason: error.to_string(),
        }
    }
}

/// Frames read off a stream until it ended or a frame was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameStream {
    /// The frames decoded, in order.
    pub frames: Vec<DecodedFrame>,
    /// Why reading stopped before the end of the stream, if it did: a
    /// connection would be closed here.
    pub rejected: Option<FrameRejected>,
}

fn into_decoded(request_id: u64, message: Message) -> DecodedFrame {
    let message = match message {
        Message::Request { from, request } => FrameMessage::Request { from, request },
        Message::Response(response) => FrameMessage::Response(response),
    };
    DecodedFrame {
        request_id,
        message,
    }
}

/// Reads one frame off `stream` exactly as a connection's reader thread
/// does: `Ok(None)` when the stream ended cleanly between frames.
fn read_one(
    stream: &mut &[u8],
    frame_bytes_max: usize,
) -> std::result::Result<Option<DecodedFrame>, FrameRejected> {
    let (header, body) = match read_frame(stream, frame_bytes_max) {
        Ok(frame) => frame,
        Err(ReadError::Closed) => return Ok(None),
        Err(ReadError::Frame(error)) => return Err(error.into()),
        // A byte slice neither fails nor times out; were it to, say so
        // rather than panic.
        Err(other @ (ReadError::Io(_) | ReadError::Idle | ReadError::Late { .. })) => {
            return Err(FrameError::new("stream", other.to_string()).into())
        }
    };
    let message = decode_body(&header, body)?;
    Ok(Some(into_decoded(header.request_id, message)))
}

/// Decodes `bytes` as exactly one whole TCP frame (header and body, nothing
/// after it), with the stream reader and the body decoder a connection
/// uses, refusing a frame over `frame_bytes_max` before reading its body.
///
/// A fuzz target for the wire format; `frame_bytes_max` is
/// `TcpConfig::frame_bytes_max` (65 MiB by default; a fuzzer may pick a
/// small one to reach the size check).
pub fn decode_frame(
    bytes: &[u8],
    frame_bytes_max: usize,
) -> std::result::Result<DecodedFrame, FrameRejected> {
    let mut stream = bytes;
    let frame = read_one(&mut stream, frame_bytes_max)?.ok_or_else(|| {
        FrameError::new("header", "no bytes: the stream ended before a frame".into())
    })?;
    if !stream.is_empty() {
        return Err(
            FrameError::new("stream", format!("{} bytes after the frame", stream.len())).into(),
        );
    }
    Ok(frame)
}

/// Reads frames off `bytes` as a connection's reader thread does, until the
/// stream ends or a frame is refused (where the connection would be
/// closed). Never reads past a refused frame.
///
/// A fuzz target for the stream reader: frame boundaries, a frame cut by
/// the end of the stream, garbage after good frames.
pub fn decode_frames(bytes: &[u8], frame_bytes_max: usize) -> FrameStream {
    let mut stream = bytes;
    let mut frames = Vec::new();
    loop {
        match read_one(&mut stream, frame_bytes_max) {
            Ok(Some(frame)) => frames.push(frame),
            Ok(None) => {
                return FrameStream {
                    frames,
                    rejected: None,
                }
            }
            Err(rejected) => {
                return FrameStream {
                    frames,
                    rejected: Some(rejected),
                }
            }
        }
    }
}

/// The frame a client sends for `request`; `None` when it would exceed
/// `frame_bytes_max`.
pub fn encode_request_frame(
    request_id: u64,
    from: NodeId,
    request: &Request,
    frame_bytes_max: usize,
) -> Option<Vec<u8>> {
    encode_request(request_id, from, request, frame_bytes_max).ok()
}

/// The frame a server sends for `response`; `None` when it would exceed
/// `frame_bytes_max`.
pub fn encode_response_frame(
    request_id: u64,
    response: &Response,
    frame_bytes_max: usize,
) -> Option<Vec<u8>> {
    encode_response(request_id, response, frame_bytes_max).ok()
}

// ---- files --------------------------------------------------------------------

fn temp_dir() -> Result<TempDir> {
    tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), "create a directory in", e))
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::write(path, bytes).map_err(|e| Error::io(path, "write", e))
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| Error::io(path, "read", e))
}

/// The fields of a log's `log-state.checkpoint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogCheckpointFields {
    /// Every byte below this offset was flushed.
    pub recovery_point: Offset,
    /// The high watermark kept across a restart.
    pub high_watermark: Offset,
    /// The first offset the log holds.
    pub log_start_offset: Offset,
    /// Whether the log was closed cleanly.
    pub clean_shutdown: bool,
}

/// Writes `bytes` as a log directory's `log-state.checkpoint` and loads it
/// with the loader `Log::open` uses.
///
/// A fuzz target for the log checkpoint. Errors are
/// `Error::InvalidCheckpoint` naming the file and what was wrong.
pub fn decode_log_checkpoint(bytes: &[u8]) -> Result<LogCheckpointFields> {
    let dir = temp_dir()?;
    write_file(&LogCheckpoint::path(dir.path()), bytes)?;
    let checkpoint =
        LogCheckpoint::load(&StdDisk, dir.path())?.ok_or_else(|| Error::InvalidCheckpoint {
            path: LogCheckpoint::path(dir.path()),
            reason: "the file just written was not found".into(),
        })?;
    Ok(LogCheckpointFields {
        recovery_point: checkpoint.recovery_point,
        high_watermark: checkpoint.high_watermark,
        log_start_offset: checkpoint.log_start_offset,
        clean_shutdown: checkpoint.clean_shutdown,
    })
}

/// The bytes of the `log-state.checkpoint` the log writes for `fields`.
pub fn encode_log_checkpoint(fields: &LogCheckpointFields) -> Result<Vec<u8>> {
    let dir = temp_dir()?;
    LogCheckpoint {
        recovery_point: fields.recovery_point,
        high_watermark: fields.high_watermark,
        log_start_offset: fields.log_start_offset,
        clean_shutdown: fields.clean_shutdown,
    }
    .store(&StdDisk, dir.path())?;
    read_file(&LogCheckpoint::path(dir.path()))
}

/// Writes `bytes` as a log directory's `leader-epoch.checkpoint` and opens
/// the leader epoch cache from it, as `Log::open` does. The result is the
/// cache's `(epoch, start offset)` entries, oldest first.
///
/// A fuzz target for the epoch checkpoint (its generic list-of-pairs format
/// and the cache's ordering checks). Errors are `Error::InvalidCheckpoint`.
pub fn decode_epoch_checkpoint(bytes: &[u8]) -> Result<Vec<(LeaderEpoch, Offset)>> {
    let dir = temp_dir()?;
    write_file(&dir.path().join(LeaderEpochCache::FILE_NAME), bytes)?;
    let cache = LeaderEpochCache::open(&StdDisk::shared(), dir.path())?;
    Ok(cache
        .entries()
        .iter()
        .map(|entry| (entry.epoch, entry.start_offset))
        .collect())
}

/// The bytes of the `leader-epoch.checkpoint` the log writes after
/// assigning each `(epoch, start offset)` in turn (an entry that does not
/// follow the ones before is handled as the log handles it: an epoch not
/// newer than the latest is ignored, and a start at or below an earlier
/// one's drops that earlier one).
pub fn encode_epoch_checkpoint(entries: &[(LeaderEpoch, Offset)]) -> Result<Vec<u8>> {
    let dir = temp_dir()?;
    let mut cache = LeaderEpochCache::empty(&StdDisk::shared(), dir.path());
    for &(epoch, start_offset) in entries {
        cache.assign_in_memory(epoch, start_offset);
    }
    cache.persist(Offset::ZERO)?;
    read_file(&dir.path().join(LeaderEpochCache::FILE_NAME))
}

/// One batch a producer snapshot remembers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotBatch {
    /// Sequence of its first record.
    pub first_sequence: Sequence,
    /// Sequence of its last record.
    pub last_sequence: Sequence,
    /// Offset of its first record.
    pub first_offset: Offset,
    /// Offset of its last record.
    pub last_offset: Offset,
    /// Epoch of the leader that wrote it.
    pub leader_epoch: LeaderEpoch,
    /// Its largest record timestamp.
    pub max_timestamp_ms: i64,
}

/// One producer of a producer state snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotProducer {
    /// The producer.
    pub producer_id: ProducerId,
    /// Its current epoch.
    pub producer_epoch: ProducerEpoch,
    /// Max timestamp of its newest batch.
    pub last_timestamp_ms: i64,
    /// Its last one to five batches, oldest first.
    pub batches: Vec<SnapshotBatch>,
}

/// Writes `bytes` as the producer state snapshot as of `offset` (file
/// `{offset:020}.snapshot`) and reads it back with the reader `Log::open`
/// uses. The result lists the producers by id.
///
/// A fuzz target for the snapshot format. Errors are
/// `Error::InvalidCheckpoint` naming the file.
pub fn decode_producer_snapshot(offset: Offset, bytes: &[u8]) -> Result<Vec<SnapshotProducer>> {
    let dir = temp_dir()?;
    write_file(&snapshot_path(dir.path(), offset), bytes)?;
    let state = ProducerStateManager::read_snapshot(&StdDisk, dir.path(), offset)?;
    Ok(state
        .producers_by_id()
        .into_iter()
        .map(
            |(producer_id, producer_epoch, last_timestamp_ms, batches)| SnapshotProducer {
                producer_id,
                producer_epoch,
                last_timestamp_ms,
                batches: batches
                    .into_iter()
                    .map(|b| SnapshotBatch {
                        first_sequence: b.first_sequence,
                        last_sequence: b.last_sequence,
                        first_offset: b.first_offset,
                        last_offset: b.last_offset,
                        leader_epoch: b.leader_epoch,
                        max_timestamp_ms: b.max_timestamp_ms,
                    })
                    .collect(),
            },
        )
        .collect())
}

/// The snapshot as of `offset` of the producer state that recording
/// `headers` in order builds (what a log writes at a segment roll).
/// Headers of non-idempotent batches are skipped, as the log skips them.
pub fn encode_producer_snapshot(offset: Offset, headers: &[BatchHeader]) -> Vec<u8> {
    let mut state = ProducerStateManager::empty();
    for header in headers {
        state.record(header);
    }
    state.encode_snapshot(offset)
}

/// What an offset index file decoded to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexOutcome {
    /// The file passed the sanity check; its used entries as
    /// `(offset, byte position)`, oldest first.
    Accepted(Vec<(Offset, u64)>),
    /// The file failed the check; the log would rebuild it from the data
    /// file, for this reason.
    Rebuild(String),
}

/// Writes `bytes` as the offset index of a segment starting at
/// `base_offset` whose data file is `data_bytes` long, and opens it with the
/// check the segment runs (`Ok(IndexOutcome::Rebuild)` when it fails;
/// `Err` only for an I/O failure).
///
/// A fuzz target for the index format; a target may draw `base_offset` and
/// `data_bytes` from the input (a segment's base offset comes from its file
/// name, which is untrusted too).
pub fn decode_offset_index(
    base_offset: Offset,
    data_bytes: u64,
    bytes: &[u8],
) -> Result<IndexOutcome> {
    let dir = temp_dir()?;
    let path = dir.path().join("index");
    write_file(&path, bytes)?;
    let outcome = match OffsetIndex::open_checked(&StdDisk, &path, base_offset, data_bytes)? {
        Ok(index) => IndexOutcome::Accepted(
            index
                .used_entries()
                .into_iter()
                .map(|entry| (entry.offset, entry.position))
                .collect(),
        ),
        Err(problem) => IndexOutcome::Rebuild(problem.0),
    };
    Ok(outcome)
}

/// The index file the segment at `base_offset` writes for `entries`
/// (`(offset, byte position)`), trimmed to the used entries as at a roll.
///
/// # Panics
///
/// When an entry is not strictly after the one before (offset and
/// position), or is not above the base offset and position 0 by at most
/// `u32::MAX`: a segment never writes such an entry.
pub fn encode_offset_index(base_offset: Offset, entries: &[(Offset, u64)]) -> Result<Vec<u8>> {
    let mut previous = (base_offset, 0);
    for &(offset, position) in entries {
        assert!(
            offset > previous.0 && position > previous.1,
            "index entry ({offset}, {position}) does not follow ({}, {})",
            previous.0,
            previous.1
        );
        assert!(
            offset.distance_from(base_offset) <= u64::from(u32::MAX)
                && position <= u64::from(u32::MAX),
            "index entry ({offset}, {position}) does not fit 32 bits"
        );
        previous = (offset, position);
    }
    let dir = temp_dir()?;
    let path = dir.path().join("index");
    let bytes_max = (entries.len() as u64 + 1) * INDEX_ENTRY_BYTES as u64;
    let mut index = OffsetIndex::create(&StdDisk, &path, base_offset, bytes_max)?;
    for &(offset, position) in entries {
        let added = index.append(offset, position);
        debug_assert!(added, "the index was sized for every entry");
    }
    index.trim_to_used()?;
    index.flush()?;
    drop(index);
    read_file(&path)
}

// ---- segments -----------------------------------------------------------------

/// What a log made of a directory holding one segment data file.
#[derive(Clone, Debug)]
pub struct SegmentOutcome {
    /// What recovery found and did.
    pub report: RecoveryReport,
    /// Every record read from the log start to the log end, in order.
    pub records: Vec<Record>,
    /// Where a read below the log end returned nothing, if one did (a reader
    /// would wait there for ever: a bug).
    pub read_stalled_at: Option<Offset>,
}

/// Writes `bytes` as the data file of the first segment of a log with no
/// other file (no index, no checkpoint: recovery validates everything),
/// opens the log as a node does after a crash, and reads every record back
/// through the public read path.
///
/// A fuzz target for recovery and the read path over a damaged segment.
/// Errors are the log's own (`Error::Corrupt` naming the file and byte,
/// `Error::InvalidBatch`, ...).
pub fn decode_segment(bytes: &[u8]) -> Result<SegmentOutcome> {
    let dir = temp_dir()?;
    write_file(&dir.path().join("00000000000000000000.log"), bytes)?;
    let config = LogConfig {
        // A small preallocated index keeps each call cheap.
        index_bytes_max: 4096,
        ..LogConfig::default()
    };
    let log = Log::open(dir.path(), config, Arc::new(ManualClock::new(0)))?;
    let report = log.recovery_report().clone();
    let mut records = Vec::new();
    let mut next = log.log_start_offset();
    let end = log.log_end_offset();
    let mut read_stalled_at = None;
    while next < end {
        let read = log.read(next, 1)?;
        let before = next;
        for batch in read.batches() {
            let batch = batch?;
            for record in batch.records() {
                let record = record?;
                if record.offset >= next {
                    records.push(record);
                }
            }
            next = next.max(batch.next_offset());
        }
        if next <= before {
            read_stalled_at = Some(before);
            break;
        }
    }
    Ok(SegmentOutcome {
        report,
        records,
        read_stalled_at,
    })
}
