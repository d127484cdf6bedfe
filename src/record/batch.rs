//! The record batch byte layout, and the checked, zero-copy reader of it.
//!
//! # Layout
//!
//! Every integer is fixed-width **little-endian**. A batch is a 61-byte
//! header followed by its records:
//!
//! | at | field | type | covered by CRC |
//! |---:|---|---|---|
//! | 0 | base offset | u64 | no (the leader assigns it) |
//! | 8 | batch length: bytes after this field | u32 | no |
//! | 12 | leader epoch | u32 | no (the leader stamps it) |
//! | 16 | magic (format version, = 1) | u8 | no |
//! | 17 | CRC-32 (IEEE, `crc32fast`) of bytes 21..end | u32 | — |
//! | 21 | attributes (reserved, 0) | u16 | yes |
//! | 23 | last offset delta (= record count - 1) | u32 | yes |
//! | 27 | first timestamp, ms since the Unix epoch | i64 | yes |
//! | 35 | max timestamp | i64 | yes |
//! | 43 | producer id (-1: none) | i64 | yes |
//! | 51 | producer epoch | i16 | yes |
//! | 53 | base sequence (-1: none) | i32 | yes |
//! | 57 | record count | u32 | yes |
//! | 61 | records | | yes |
//!
//! Each record is:
//!
//! | field | type |
//! |---|---|
//! | length: bytes after this field | u32 |
//! | attributes (reserved, 0) | u8 |
//! | timestamp delta from the batch's first timestamp | i64 |
//! | offset delta from the batch's base offset | u32 |
//! | key length, -1 for no key | i32 |
//! | key | bytes |
//! | value length | u32 |
//! | value | bytes |
//! | header count | u32 |
//! | each header: key length u32, key, value length i32 (-1: none), value | |
//!
//! The CRC leaves out the base offset and the leader epoch (as Kafka's does),
//! so a leader assigns offsets and stamps its epoch without recomputing it,
//! and a follower can check what it received byte for byte.

use bytes::{Buf, Bytes};

use crate::error::{Error, Result};
use crate::types::{LeaderEpoch, Offset, ProducerEpoch, ProducerId, Sequence};

/// Size of the fixed batch header.
pub(crate) const BATCH_HEADER_BYTES: usize = 61;
/// Bytes of the header before (and not counted in) the batch length field.
pub(crate) const BATCH_OVERHEAD_BYTES: usize = 12;
/// The largest batch any decoder accepts, whatever the configuration says:
/// a length field above it is garbage, not a big batch.
pub(crate) const BATCH_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Current format version.
pub(crate) const MAGIC: u8 = 1;
/// Fixed bytes of one record besides its key, value and headers.
pub(crate) const RECORD_FIXED_BYTES: usize = 4 + 1 + 8 + 4 + 4 + 4 + 4;

pub(crate) const BASE_OFFSET_AT: usize = 0;
pub(crate) const LENGTH_AT: usize = 8;
pub(crate) const LEADER_EPOCH_AT: usize = 12;
pub(crate) const MAGIC_AT: usize = 16;
pub(crate) const CRC_AT: usize = 17;
pub(crate) const ATTRIBUTES_AT: usize = 21;
pub(crate) const LAST_OFFSET_DELTA_AT: usize = 23;
pub(crate) const FIRST_TIMESTAMP_AT: usize = 27;
pub(crate) const MAX_TIMESTAMP_AT: usize = 35;
pub(crate) const PRODUCER_ID_AT: usize = 43;
pub(crate) const PRODUCER_EPOCH_AT: usize = 51;
pub(crate) const BASE_SEQUENCE_AT: usize = 53;
pub(crate) const RECORD_COUNT_AT: usize = 57;

const _: () = assert!(RECORD_COUNT_AT + 4 == BATCH_HEADER_BYTES);
const _: () = assert!(CRC_AT + 4 == ATTRIBUTES_AT);
const _: () = assert!(LENGTH_AT + 4 == BATCH_OVERHEAD_BYTES);

#[inline]
pub(crate) fn read_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([buf[at], buf[at + 1]])
}
#[inline]
pub(crate) fn read_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}
#[inline]
pub(crate) fn read_u64(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Why a byte range does not start with a valid batch header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderError {
    /// The buffer ends before the header (or the batch it announces) does;
    /// `needed` is the number of bytes the whole batch would take, when known.
    Incomplete {
        /// Total bytes the batch needs, if the length field was readable.
        needed: Option<usize>,
    },
    /// The header itself is impossible.
    Invalid(String),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Incomplete { needed: Some(n) } => {
                write!(f, "incomplete batch: needs {n} bytes")
            }
            HeaderError::Incomplete { needed: None } => write!(f, "incomplete batch header"),
            HeaderError::Invalid(reason) => write!(f, "{reason}"),
        }
    }
}

/// The fixed header of a batch, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: Offset,
    /// Bytes after the length field; the whole batch is 12 bytes more.
    pub batch_length: u32,
    /// Epoch of the leader that wrote the batch.
    pub leader_epoch: LeaderEpoch,
    /// The stored CRC-32.
    pub crc: u32,
    /// Reserved attribute bits.
    pub attributes: u16,
    /// `record_count - 1`.
    pub last_offset_delta: u32,
    /// Timestamp of the first record, ms since the Unix epoch.
    pub first_timestamp: i64,
    /// Largest record timestamp in the batch.
    pub max_timestamp: i64,
    /// Idempotent producer id, or [`ProducerId::NONE`].
    pub producer_id: ProducerId,
    /// Idempotent producer epoch.
    pub producer_epoch: ProducerEpoch,
    /// Sequence of the first record, or [`Sequence::NONE`].
    pub base_sequence: Sequence,
    /// Number of records.
    pub record_count: u32,
}

impl BatchHeader {
    /// Total size of the batch in bytes.
    #[inline]
    pub fn size_bytes(&self) -> usize {
        BATCH_OVERHEAD_BYTES + self.batch_length as usize
    }

    /// Offset of the last record.
    #[inline]
    pub fn last_offset(&self) -> Offset {
        self.base_offset.plus(u64::from(self.last_offset_delta))
    }

    /// Offset after the last record.
    #[inline]
    pub fn next_offset(&self) -> Offset {
        self.last_offset().next()
    }

    /// Sequence of the last record (wrapping at `i32::MAX`, as Kafka's does).
    pub fn last_sequence(&self) -> Sequence {
        if self.base_sequence == Sequence::NONE {
            return Sequence::NONE;
        }
        let last = i64::from(self.base_sequence.0) + i64::from(self.last_offset_delta);
        Sequence((last % (i64::from(i32::MAX) + 1)) as i32)
    }
}

/// Decodes and sanity-checks the header at the start of `buf` without
/// checking the CRC. `Incomplete` when `buf` is shorter than the header or
/// than the batch the header announces.
pub(crate) fn parse_header(buf: &[u8]) -> std::result::Result<BatchHeader, HeaderError> {
    let header = parse_whole_header(buf)?;
    if buf.len() < header.size_bytes() {
        return Err(HeaderError::Incomplete {
            needed: Some(header.size_bytes()),
        });
    }
    Ok(header)
}

/// [`parse_header`] for a buffer that may end after the header, before
/// the batch it announces does: the same checks, in the same order, but
/// the header is returned once it is whole and valid. A reader that holds
/// only a header (a walk over a segment's batches) needs no second decode.
pub(crate) fn parse_whole_header(buf: &[u8]) -> std::result::Result<BatchHeader, HeaderError> {
    if buf.len() < BATCH_OVERHEAD_BYTES {
        return Err(HeaderError::Incomplete { needed: None });
    }
    let batch_length = read_u32(buf, LENGTH_AT);
    let size = BATCH_OVERHEAD_BYTES as u64 + u64::from(batch_length);
    if size < BATCH_HEADER_BYTES as u64 {
        return Err(HeaderError::Invalid(format!(
            "batch length {batch_length} is shorter than the {} byte header",
            BATCH_HEADER_BYTES - BATCH_OVERHEAD_BYTES
        )));
    }
    if size > BATCH_BYTES_MAX as u64 {
        return Err(HeaderError::Invalid(format!(
            "batch length {batch_length} exceeds the {BATCH_BYTES_MAX} byte maximum"
        )));
    }
    if buf.len() < BATCH_HEADER_BYTES {
        return Err(HeaderError::Incomplete {
            needed: Some(size as usize),
        });
    }
    let magic = buf[MAGIC_AT];
    if magic != MAGIC {
        return Err(HeaderError::Invalid(format!(
            "unknown batch format version (magic) {magic}"
        )));
    }
    let header = decode_header_fields(buf);
    if header.record_count == 0 {
        return Err(HeaderError::Invalid("batch has no records".into()));
    }
    if header.last_offset_delta != header.record_count - 1 {
        return Err(HeaderError::Invalid(format!(
            "last offset delta {} does not match record count {}",
            header.last_offset_delta, header.record_count
        )));
    }
    // Each record takes at least RECORD_FIXED_BYTES; a count that cannot fit
    // is garbage (and would make a reader allocate or loop for nothing).
    let records_bytes = size as usize - BATCH_HEADER_BYTES;
    if (header.record_count as usize).saturating_mul(RECORD_FIXED_BYTES) > records_bytes {
        return Err(HeaderError::Invalid(format!(
            "record count {} cannot fit in {records_bytes} bytes",
            header.record_count
        )));
    }
    if header
        .base_offset
        .0
        .checked_add(u64::from(header.last_offset_delta))
        .is_none()
    {
        return Err(HeaderError::Invalid(format!(
            "base offset {} overflows",
            header.base_offset
        )));
    }
    Ok(header)
}

/// Decodes the fixed header fields of `buf` (at least
/// `BATCH_HEADER_BYTES` long) without checking any of them: callers run
/// [`parse_header`] first, or know it accepted these bytes.
pub(crate) fn decode_header_fields(buf: &[u8]) -> BatchHeader {
    // One length check, then each field from fixed places of the header
    // array: no call per byte. Every header walked or read is decoded
    // here, and a `read_u*` call per field made this 4% of a debug
    // simulator run.
    let h: &[u8; BATCH_HEADER_BYTES] = buf[..BATCH_HEADER_BYTES]
        .try_into()
        .expect("a slice of BATCH_HEADER_BYTES");
    macro_rules! field {
        (u16, $at:expr) => {
            u16::from_le_bytes([h[$at], h[$at + 1]])
        };
        (u32, $at:expr) => {
            u32::from_le_bytes([h[$at], h[$at + 1], h[$at + 2], h[$at + 3]])
        };
        (u64, $at:expr) => {
            u64::from_le_bytes([
                h[$at],
                h[$at + 1],
                h[$at + 2],
                h[$at + 3],
                h[$at + 4],
                h[$at + 5],
                h[$at + 6],
                h[$at + 7],
            ])
        };
    }
    BatchHeader {
        base_offset: Offset(field!(u64, BASE_OFFSET_AT)),
        batch_length: field!(u32, LENGTH_AT),
        leader_epoch: LeaderEpoch(field!(u32, LEADER_EPOCH_AT)),
        crc: field!(u32, CRC_AT),
        attributes: field!(u16, ATTRIBUTES_AT),
        last_offset_delta: field!(u32, LAST_OFFSET_DELTA_AT),
        first_timestamp: field!(u64, FIRST_TIMESTAMP_AT) as i64,
        max_timestamp: field!(u64, MAX_TIMESTAMP_AT) as i64,
        producer_id: ProducerId(field!(u64, PRODUCER_ID_AT) as i64),
        producer_epoch: ProducerEpoch(field!(u16, PRODUCER_EPOCH_AT) as i16),
        base_sequence: Sequence(field!(u32, BASE_SEQUENCE_AT) as i32),
        record_count: field!(u32, RECORD_COUNT_AT),
    }
}

/// CRC-32 over the part of a whole batch that the CRC covers.
#[inline]
pub(crate) fn compute_crc(batch: &[u8]) -> u32 {
    crc32fast::hash(&batch[ATTRIBUTES_AT..])
}

/// One validated record batch: a header and records whose CRC matched.
/// Cheap to clone (it shares the underlying [`Bytes`]).
#[derive(Clone, PartialEq, Eq)]
pub struct RecordBatch {
    header: BatchHeader,
    bytes: Bytes,
}

impl std::fmt::Debug for RecordBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordBatch")
            .field("header", &self.header)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl RecordBatch {
    /// Validates one whole batch: header, exact length and CRC. The records
    /// themselves are checked as they are iterated.
    pub fn from_bytes(bytes: Bytes) -> Result<RecordBatch> {
        let header = parse_header(&bytes).map_err(|e| Error::InvalidBatch {
            reason: e.to_string(),
        })?;
        RecordBatch::from_parsed(header, bytes)
    }

    /// [`from_bytes`](Self::from_bytes) for `bytes` that start with
    /// `header`, which the caller has just had from [`parse_header`] (over
    /// these bytes, or a buffer they begin): the length and CRC checks and
    /// their errors, without decoding the header again. Every read and
    /// append parses each batch first: this and [`parse_whole_header`]
    /// took the second decodes out, 4% of a debug simulator run's
    /// instructions.
    pub(crate) fn from_parsed(header: BatchHeader, bytes: Bytes) -> Result<RecordBatch> {
        if header.size_bytes() != bytes.len() {
            return Err(Error::InvalidBatch {
                reason: format!(
                    "batch announces {} bytes but {} were given",
                    header.size_bytes(),
                    bytes.len()
                ),
            });
        }
        let crc = compute_crc(&bytes);
        if crc != header.crc {
            return Err(Error::InvalidBatch {
                reason: format!(
                    "CRC mismatch: stored {:#010x}, computed {crc:#010x}",
                    header.crc
                ),
            });
        }
        Ok(RecordBatch { header, bytes })
    }

    /// Builds the value from parts already validated by the caller.
    pub(crate) fn from_parts(header: BatchHeader, bytes: Bytes) -> RecordBatch {
        debug_assert_eq!(header.size_bytes(), bytes.len());
        debug_assert_eq!(compute_crc(&bytes), header.crc);
        RecordBatch { header, bytes }
    }

    /// The decoded header.
    #[inline]
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The batch's bytes, exactly as stored and replicated.
    #[inline]
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// A copy of this batch numbered from `base_sequence` instead (CRC
    /// recomputed): an idempotent producer renumbers the batches it had in
    /// flight behind one that failed for good, as Kafka's producer does
    /// (`adjustSequencesDueToFailedBatch`), so they follow the last batch
    /// the log holds.
    pub(crate) fn with_base_sequence(&self, base_sequence: Sequence) -> RecordBatch {
        let mut bytes = self.bytes.to_vec();
        bytes[BASE_SEQUENCE_AT..BASE_SEQUENCE_AT + 4]
            .copy_from_slice(&(base_sequence.0 as u32).to_le_bytes());
        let crc = compute_crc(&bytes);
        bytes[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        let header = decode_header_fields(&bytes);
        RecordBatch::from_parts(header, Bytes::from(bytes))
    }

    /// Consumes the batch, returning its bytes.
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// Offset of the first record.
    #[inline]
    pub fn base_offset(&self) -> Offset {
        self.header.base_offset
    }

    /// Offset of the last record.
    #[inline]
    pub fn last_offset(&self) -> Offset {
        self.header.last_offset()
    }

    /// Offset after the last record.
    #[inline]
    pub fn next_offset(&self) -> Offset {
        self.header.next_offset()
    }

    /// Epoch of the leader that wrote the batch.
    #[inline]
    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.header.leader_epoch
    }

    /// Number of records.
    #[inline]
    pub fn record_count(&self) -> u32 {
        self.header.record_count
    }

    /// Size in bytes.
    #[inline]
    pub fn size_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The records, decoded lazily and without copying. A record that does
    /// not parse yields an error and ends the iteration.
    pub fn records(&self) -> Records {
        Records {
            rest: self.bytes.slice(BATCH_HEADER_BYTES..),
            header: self.header,
            index: 0,
            failed: false,
        }
    }
}

/// One record of a batch, with zero-copy key, value and headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The record's offset in the log.
    pub offset: Offset,
    /// Timestamp, ms since the Unix epoch.
    pub timestamp: i64,
    /// Optional key.
    pub key: Option<Bytes>,
    /// The value.
    pub value: Bytes,
    /// Headers, in the order they were added.
    pub headers: Vec<(Bytes, Option<Bytes>)>,
}

/// Iterator over a batch's records.
#[derive(Debug)]
pub struct Records {
    rest: Bytes,
    header: BatchHeader,
    index: u32,
    failed: bool,
}

impl Records {
    fn malformed(&mut self, what: &str) -> Option<Result<Record>> {
        self.failed = true;
        Some(Err(Error::InvalidBatch {
            reason: format!(
                "record {} of batch at offset {}: {what}",
                self.index, self.header.base_offset
            ),
        }))
    }
}

impl Iterator for Records {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        if self.failed {
            return None;
        }
        if self.index == self.header.record_count {
            if !self.rest.is_empty() {
                return self.malformed("trailing bytes after the last record");
            }
            return None;
        }
        // Checked in place first: only the parts handed out become `Bytes`
        // (each a reference taken on the buffer), not every field on the way.
        let layout = match RecordLayout::of(&self.rest, self.index) {
            Ok(layout) => layout,
            Err(what) => return self.malformed(what),
        };
        let mut headers = Vec::with_capacity(layout.header_count);
        let mut at = layout.headers_at;
        for _ in 0..layout.header_count {
            let key_len = u32::from_le_bytes(le_bytes(&self.rest, at)) as usize;
            let key = self.rest.slice(at + 4..at + 4 + key_len);
            at += 4 + key_len;
            let value_len = i32::from_le_bytes(le_bytes(&self.rest, at));
            at += 4;
            let value = usize::try_from(value_len).ok().map(|value_len| {
                at += value_len;
                self.rest.slice(at - value_len..at)
            });
            headers.push((key, value));
        }
        let record = Record {
            offset: self.header.base_offset.plus(u64::from(self.index)),
            timestamp: self
                .header
                .first_timestamp
                .wrapping_add(layout.timestamp_delta),
            key: layout.key.map(|key| self.rest.slice(key)),
            value: self.rest.slice(layout.value),
            headers,
        };
        self.rest.advance(layout.bytes);
        self.index += 1;
        Some(Ok(record))
    }
}

/// Where the parts of the record at the start of a batch's remaining bytes
/// lie, checked as [`Records`] hands a record out.
struct RecordLayout {
    /// The record's bytes, its length field included.
    bytes: usize,
    timestamp_delta: i64,
    key: Option<std::ops::Range<usize>>,
    value: std::ops::Range<usize>,
    /// Where the first header begins; every header is checked to lie
    /// within the record.
    headers_at: usize,
    header_count: usize,
}

impl RecordLayout {
    /// The layout of the record at the start of `rest`, the `index`-th of
    /// its batch, or what is wrong with it.
    fn of(rest: &[u8], index: u32) -> std::result::Result<RecordLayout, &'static str> {
        if rest.len() < 4 {
            return Err("truncated record length");
        }
        let len = u32::from_le_bytes(le_bytes(rest, 0)) as usize;
        if rest.len() - 4 < len {
            return Err("record length runs past the batch");
        }
        let end = 4 + len;
        if len < RECORD_FIXED_BYTES - 4 {
            return Err("record shorter than its fixed fields");
        }
        // After the attributes byte.
        let mut at = 5;
        let timestamp_delta = i64::from_le_bytes(le_bytes(rest, at));
        let offset_delta = u32::from_le_bytes(le_bytes(rest, at + 8));
        if offset_delta != index {
            return Err("offset delta out of order");
        }
        let key_len = i32::from_le_bytes(le_bytes(rest, at + 12));
        at += 16;
        let key = match usize::try_from(key_len) {
            Err(_) => None,
            Ok(key_len) => {
                if end - at < key_len {
                    return Err("key runs past the record");
                }
                at += key_len;
                Some(at - key_len..at)
            }
        };
        if end - at < 4 {
            return Err("truncated value length");
        }
        let value_len = u32::from_le_bytes(le_bytes(rest, at)) as usize;
        at += 4;
        if end - at < value_len {
            return Err("value runs past the record");
        }
        let value = at..at + value_len;
        at += value_len;
        if end - at < 4 {
            return Err("truncated header count");
        }
        let header_count = u32::from_le_bytes(le_bytes(rest, at)) as usize;
        at += 4;
        // Each header needs at least 8 bytes: bound the allocation by them.
        if header_count > (end - at) / 8 {
            return Err("header count runs past the record");
        }
        let headers_at = at;
        for _ in 0..header_count {
            if end - at < 4 {
                return Err("truncated header key length");
            }
            let key_len = u32::from_le_bytes(le_bytes(rest, at)) as usize;
            at += 4;
            if end - at < key_len.saturating_add(4) {
                return Err("header key runs past the record");
            }
            at += key_len;
            let value_len = i32::from_le_bytes(le_bytes(rest, at));
            at += 4;
            if let Ok(value_len) = usize::try_from(value_len) {
                if end - at < value_len {
                    return Err("header value runs past the record");
                }
                at += value_len;
            }
        }
        if at != end {
            return Err("trailing bytes inside the record");
        }
        Ok(RecordLayout {
            bytes: end,
            timestamp_delta,
            key,
            value,
            headers_at,
            header_count,
        })
    }
}

/// The `N` bytes of `bytes` at `at`, which the caller checked are there.
fn le_bytes<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut field = [0; N];
    field.copy_from_slice(&bytes[at..at + N]);
    field
}

/// Iterator over the whole batches in a buffer (a read result or a fetch
/// response). Validates each batch (header and CRC). A trailing partial batch
/// ends the iteration without an error; a bad one yields an error and ends it.
#[derive(Debug, Clone)]
pub struct BatchIter {
    rest: Bytes,
    failed: bool,
}

impl BatchIter {
    /// Iterates over the batches in `bytes`.
    pub fn new(bytes: Bytes) -> BatchIter {
        BatchIter {
            rest: bytes,
            failed: false,
        }
    }
}

impl Iterator for BatchIter {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        match parse_header(&self.rest) {
            Ok(header) => {
                let bytes = self.rest.split_to(header.size_bytes());
                let batch = RecordBatch::from_parsed(header, bytes);
                if batch.is_err() {
                    self.failed = true;
                }
                Some(batch)
            }
            Err(HeaderError::Incomplete { .. }) => None,
            Err(HeaderError::Invalid(reason)) => {
                self.failed = true;
                Some(Err(Error::InvalidBatch { reason }))
            }
        }
    }
}

/// Writes `offset` into a whole batch's base offset field (outside the CRC).
#[allow(dead_code)]
pub(crate) fn set_base_offset(batch: &mut [u8], offset: Offset) {
    batch[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&offset.0.to_le_bytes());
}

/// Writes `epoch` into a whole batch's leader epoch field (outside the CRC).
#[allow(dead_code)]
pub(crate) fn set_leader_epoch(batch: &mut [u8], epoch: LeaderEpoch) {
    batch[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4].copy_from_slice(&epoch.0.to_le_bytes());
}

/// Appends the records of `batch` to the batch that starts at `open_at` in
/// `buffer` and ends it (the leader's pipeline merging appends that arrive
/// together, issue 27): each record's offset delta continues the open
/// batch's, its timestamp delta is taken from the open batch's first
/// timestamp (so every record keeps its own timestamp), and the open
/// batch's length, last offset delta, max timestamp and record count grow.
/// Its CRC is left stale: [`seal_crc`] it before the batch leaves the
/// buffer.
///
/// Only plain batches merge (no producer id, no attribute bit, on either
/// side), and only while the merged batch stays within `bytes_max`.
/// Returns `false`, with `buffer` unchanged, when they do not, or when the
/// records of `batch` do not walk as its header announces.
pub(crate) fn merge_records(
    buffer: &mut bytes::BytesMut,
    open_at: usize,
    batch: &RecordBatch,
    bytes_max: usize,
) -> bool {
    let header = batch.header();
    let records = &batch.as_bytes()[BATCH_HEADER_BYTES..];
    let open = &buffer[open_at..];
    let plain = |attributes: u16, producer_id: u64| {
        attributes == 0 && producer_id as i64 == ProducerId::NONE.0
    };
    if !plain(header.attributes, header.producer_id.0 as u64)
        || !plain(
            read_u16(open, ATTRIBUTES_AT),
            read_u64(open, PRODUCER_ID_AT),
        )
        || open.len() + records.len() > bytes_max
        || header.record_count == 0
    {
        return false;
    }
    let open_count = read_u32(open, RECORD_COUNT_AT);
    let open_first_timestamp = read_u64(open, FIRST_TIMESTAMP_AT) as i64;
    let open_max_timestamp = read_u64(open, MAX_TIMESTAMP_AT) as i64;
    let Some(count) = open_count.checked_add(header.record_count) else {
        return false;
    };
    let shift = header.first_timestamp.wrapping_sub(open_first_timestamp);
    let at = buffer.len();
    buffer.extend_from_slice(records);
    // Each record: length u32, attributes u8, timestamp delta i64 (at +5),
    // offset delta u32 (at +13), then key, value and headers, untouched.
    const TIMESTAMP_DELTA_AT: usize = 5;
    const OFFSET_DELTA_AT: usize = 13;
    let mut position = at;
    let mut index = 0u32;
    let walked = loop {
        if position == buffer.len() {
            break index == header.record_count;
        }
        if position + OFFSET_DELTA_AT + 4 > buffer.len() {
            break false;
        }
        let length = read_u32(buffer, position) as usize;
        let end = position + 4 + length;
        if length < OFFSET_DELTA_AT || end > buffer.len() {
            break false;
        }
        if read_u32(buffer, position + OFFSET_DELTA_AT) != index {
            break false;
        }
        let delta = (read_u64(buffer, position + TIMESTAMP_DELTA_AT) as i64).wrapping_add(shift);
        buffer[position + TIMESTAMP_DELTA_AT..position + TIMESTAMP_DELTA_AT + 8]
            .copy_from_slice(&delta.to_le_bytes());
        buffer[position + OFFSET_DELTA_AT..position + OFFSET_DELTA_AT + 4]
            .copy_from_slice(&(open_count + index).to_le_bytes());
        index += 1;
        position = end;
    };
    if !walked {
        buffer.truncate(at);
        return false;
    }
    let merged = &mut buffer[open_at..];
    let length = (merged.len() - BATCH_OVERHEAD_BYTES) as u32;
    merged[LENGTH_AT..LENGTH_AT + 4].copy_from_slice(&length.to_le_bytes());
    merged[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4]
        .copy_from_slice(&(count - 1).to_le_bytes());
    let max_timestamp = open_max_timestamp.max(header.max_timestamp);
    merged[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&max_timestamp.to_le_bytes());
    merged[RECORD_COUNT_AT..RECORD_COUNT_AT + 4].copy_from_slice(&count.to_le_bytes());
    true
}

/// Computes the CRC of the batch that starts at `at` in `buffer` and writes
/// it into its CRC field (after [`merge_records`] changed what it covers).
pub(crate) fn seal_crc(buffer: &mut [u8], at: usize) {
    let end = at + BATCH_OVERHEAD_BYTES + read_u32(buffer, at + LENGTH_AT) as usize;
    let batch = &mut buffer[at..end];
    let crc = compute_crc(batch);
    batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
}

#[cfg(test)]
mod merge_tests {
    use super::*;
    use crate::record::RecordBatchBuilder;
    use bytes::BytesMut;

    fn batch_of(timestamp: i64, values: &[&[u8]]) -> RecordBatch {
        let mut builder = RecordBatchBuilder::new(timestamp);
        for value in values {
            builder.push(value);
        }
        builder.build().unwrap()
    }

    /// Merged batches decode (CRC included, once sealed) to every record of
    /// each, in order, with dense offsets and each record's own timestamp,
    /// even one earlier than the open batch's first.
    #[test]
    fn merged_batches_decode_to_every_record_with_its_own_timestamp() {
        let first = batch_of(1_000, &[b"a", b"bb"]);
        let second = batch_of(900, &[b"ccc"]);
        let third = batch_of(2_000, &[b"dddd", b"", b"e"]);
        let mut buffer = BytesMut::from(first.as_bytes().as_ref());
        set_base_offset(&mut buffer, Offset(40));
        assert!(merge_records(&mut buffer, 0, &second, 1 << 20));
        assert!(merge_records(&mut buffer, 0, &third, 1 << 20));
        seal_crc(&mut buffer, 0);
        let merged = RecordBatch::from_bytes(buffer.freeze()).unwrap();
        let header = merged.header();
        assert_eq!(header.record_count, 6);
        assert_eq!(header.last_offset_delta, 5);
        assert_eq!(header.first_timestamp, 1_000);
        assert_eq!(header.max_timestamp, 2_000);
        let records: Vec<Record> = merged.records().map(|r| r.unwrap()).collect();
        let values: Vec<&[u8]> = records.iter().map(|r| r.value.as_ref()).collect();
        assert_eq!(values, vec![&b"a"[..], b"bb", b"ccc", b"dddd", b"", b"e"]);
        let offsets: Vec<u64> = records.iter().map(|r| r.offset.0).collect();
        assert_eq!(offsets, (40..46).collect::<Vec<_>>());
        let timestamps: Vec<i64> = records.iter().map(|r| r.timestamp).collect();
        assert_eq!(timestamps, vec![1_000, 1_000, 900, 2_000, 2_000, 2_000]);
    }

    /// A batch carrying a producer id keeps its identity (SPEC 4), and a
    /// merge past the size bound is refused; either leaves the buffer as
    /// it was.
    #[test]
    fn idempotent_batches_and_oversized_merges_are_refused() {
        let plain = batch_of(1_000, &[b"a"]);
        let mut builder = RecordBatchBuilder::new(1_000);
        builder
            .push(b"x")
            .producer(ProducerId(7), ProducerEpoch(0), Sequence(0));
        let idempotent = builder.build().unwrap();
        let mut buffer = BytesMut::from(plain.as_bytes().as_ref());
        let before = buffer.clone();
        assert!(!merge_records(&mut buffer, 0, &idempotent, 1 << 20));
        assert_eq!(buffer, before);
        assert!(!merge_records(
            &mut buffer,
            0,
            &plain,
            plain.size_bytes() + 10
        ));
        assert_eq!(buffer, before);
        let mut open = BytesMut::from(idempotent.as_bytes().as_ref());
        assert!(!merge_records(&mut open, 0, &plain, 1 << 20));
    }
}
