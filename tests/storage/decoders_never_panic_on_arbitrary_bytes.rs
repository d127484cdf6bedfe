//! SPEC G5: bad bytes produce a clear error or a clean recovery, never a
//! panic. For every decoder of untrusted bytes, through the entry points
//! `isrlog::testing::fuzz` gives a downstream fuzzer:
//!
//! - arbitrary bytes never panic and either decode or give the crate's clear
//!   error (and bytes behind a valid header or CRC, to reach past them);
//! - a valid encoding round-trips;
//! - a valid encoding with one byte changed, cut at any point or with bytes
//!   appended fails with a clear error, or decodes to something the caller
//!   can check (what each format's CRC does not cover, as documented in
//!   `testing::fuzz`).
//!
//! Case counts are modest so the file runs in seconds in a debug build; a
//! fuzzer runs the same functions for hours.

use std::collections::BTreeMap;
use std::time::Duration;

use isrlog::testing::fuzz::{self, DecodedFrame, FrameMessage, IndexOutcome, LogCheckpointFields};
use isrlog::transport::{
    EpochAnswer, EpochEndOffsetsRequest, EpochEndOffsetsResponse, EpochQuery, ErrorCode, FetchLog,
    FetchRequest, FetchResponse, FetchedLog, Request, Response,
};
use isrlog::{
    BatchHeader, EpochEndOffset, Error, Incarnation, LeaderEpoch, LogId, NodeId, Offset,
    ProducerEpoch, ProducerId, RecordBatch, RecordBatchBuilder, RecordData, Sequence,
};
use proptest::prelude::*;
use proptest::sample::Index;

/// Cases for decoders that work in memory.
const MEMORY_CASES: u32 = 256;
/// Cases for decoders that read a file (one temporary directory per case).
const FILE_CASES: u32 = 96;
/// Cases for a whole log opened over a segment file.
const SEGMENT_CASES: u32 = 32;

const FRAME_BYTES_MAX: usize = 1 << 20;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        // Shrinking a file-backed case is slow; a failure prints its input.
        max_shrink_iters: 256,
        ..ProptestConfig::with_cases(cases)
    }
}

fn arbitrary_bytes(len_max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..len_max)
}

// ---- damage to a valid encoding ----------------------------------------------

/// One way of damaging a valid encoding.
#[derive(Clone, Debug)]
enum Damage {
    /// XOR the byte at the index with a non-zero mask.
    Flip(Index, u8),
    /// Keep only the bytes before the index (a strict prefix).
    Truncate(Index),
    /// Append these (one or more) bytes.
    Append(Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<Index>(), 1..=u8::MAX).prop_map(|(at, mask)| Damage::Flip(at, mask)),
        any::<Index>().prop_map(Damage::Truncate),
        proptest::collection::vec(any::<u8>(), 1..40).prop_map(Damage::Append),
    ]
}

/// Applies `damage` to `good` (not empty); returns the damaged bytes and,
/// for a flip, where it was.
fn apply(good: &[u8], damage: &Damage) -> (Vec<u8>, Option<usize>) {
    let mut bytes = good.to_vec();
    match damage {
        Damage::Flip(at, mask) => {
            let at = at.index(bytes.len());
            bytes[at] ^= mask;
            (bytes, Some(at))
        }
        Damage::Truncate(at) => {
            bytes.truncate(at.index(good.len()));
            (bytes, None)
        }
        Damage::Append(tail) => {
            bytes.extend_from_slice(tail);
            (bytes, None)
        }
    }
}

fn is_invalid_checkpoint(error: &Error) -> bool {
    matches!(error, Error::InvalidCheckpoint { .. })
}

fn is_invalid_batch(error: &Error) -> bool {
    matches!(error, Error::InvalidBatch { .. })
}

/// Appends the CRC line of the checkpoint format to `body`.
fn with_checkpoint_crc(body: &str) -> Vec<u8> {
    format!("{body}crc32 {:08x}\n", crc32fast::hash(body.as_bytes())).into_bytes()
}

// ---- record batches ---------------------------------------------------------

/// One record's contents, owned.
#[derive(Clone, Debug)]
struct RecordSpec {
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    timestamp_delta: Option<i64>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

fn record_spec() -> impl Strategy<Value = RecordSpec> {
    (
        proptest::option::of(arbitrary_bytes(12)),
        arbitrary_bytes(24),
        proptest::option::of(-1_000_000i64..1_000_000),
        proptest::collection::vec(
            (arbitrary_bytes(6), proptest::option::of(arbitrary_bytes(6))),
            0..3,
        ),
    )
        .prop_map(|(key, value, timestamp_delta, headers)| RecordSpec {
            key,
            value,
            timestamp_delta,
            headers,
        })
}

#[derive(Clone, Debug)]
struct BatchSpec {
    timestamp_ms: i64,
    producer: Option<(i64, i16, i32)>,
    records: Vec<RecordSpec>,
}

fn batch_spec() -> impl Strategy<Value = BatchSpec> {
    (
        0i64..4_000_000_000_000,
        proptest::option::of((0i64..1000, 0i16..10, 0i32..1_000_000)),
        proptest::collection::vec(record_spec(), 1..5),
    )
        .prop_map(|(timestamp_ms, producer, records)| BatchSpec {
            timestamp_ms,
            producer,
            records,
        })
}

fn build(spec: &BatchSpec) -> RecordBatch {
    let mut builder = RecordBatchBuilder::new(spec.timestamp_ms);
    if let Some((id, epoch, sequence)) = spec.producer {
        builder.producer(ProducerId(id), ProducerEpoch(epoch), Sequence(sequence));
    }
    for record in &spec.records {
        let mut data = RecordData::new(&record.value);
        if let Some(key) = &record.key {
            data = data.key(key);
        }
        if let Some(delta) = record.timestamp_delta {
            data = data.timestamp(spec.timestamp_ms + delta);
        }
        for (key, value) in &record.headers {
            data = data.header(key, value.as_deref());
        }
        builder.push_record(&data);
    }
    builder.build().expect("a generated batch is valid")
}

/// Asserts that `decoded` holds exactly the records of `spec`, numbered from
/// `base_offset`.
fn assert_records_match(
    decoded: &fuzz::DecodedBatch,
    spec: &BatchSpec,
    base_offset: Offset,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(decoded.records.len(), spec.records.len());
    prop_assert_eq!(decoded.batch.record_count() as usize, spec.records.len());
    for (i, (record, want)) in decoded.records.iter().zip(&spec.records).enumerate() {
        prop_assert_eq!(record.offset, Offset(base_offset.0 + i as u64));
        prop_assert_eq!(record.key.as_deref(), want.key.as_deref());
        prop_assert_eq!(&record.value[..], &want.value[..]);
        let headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = record
            .headers
            .iter()
            .map(|(k, v)| (k.to_vec(), v.as_ref().map(|v| v.to_vec())))
            .collect();
        prop_assert_eq!(&headers, &want.headers);
        if let Some(delta) = want.timestamp_delta {
            prop_assert_eq!(record.timestamp, spec.timestamp_ms + delta);
        }
    }
    Ok(())
}

/// Checks what every decoded batch must satisfy, whatever the input was.
fn check_decoded_batch(decoded: &fuzz::DecodedBatch) -> Result<(), TestCaseError> {
    let header = decoded.batch.header();
    prop_assert!(header.record_count >= 1);
    prop_assert_eq!(decoded.records.len(), header.record_count as usize);
    for (i, record) in decoded.records.iter().enumerate() {
        prop_assert_eq!(record.offset, Offset(header.base_offset.0 + i as u64));
    }
    Ok(())
}

/// The batch layout's byte positions (documented in `record/batch.rs`).
const BATCH_LEADER_EPOCH_AT: usize = 12;
const BATCH_MAGIC_AT: usize = 16;
const BATCH_CRC_AT: usize = 17;
const BATCH_CRC_COVERS_FROM: usize = 21;
const BATCH_HEADER_BYTES: usize = 61;

proptest! {
    #![proptest_config(config(MEMORY_CASES))]

    #[test]
    fn batch_decoders_never_panic_on_arbitrary_bytes(bytes in arbitrary_bytes(200)) {
        match fuzz::decode_batch(&bytes) {
            Ok(decoded) => {
                check_decoded_batch(&decoded)?;
                prop_assert_eq!(&decoded.batch.as_bytes()[..], &bytes[..]);
            }
            Err(error) => prop_assert!(is_invalid_batch(&error), "{error:?}"),
        }
        match fuzz::decode_batches(&bytes) {
            Ok(batches) => {
                let mut total = 0;
                for decoded in &batches {
                    check_decoded_batch(decoded)?;
                    total += decoded.batch.size_bytes();
                }
                prop_assert!(total <= bytes.len());
            }
            Err(error) => prop_assert!(is_invalid_batch(&error), "{error:?}"),
        }
    }

    /// Arbitrary records behind a valid header and a CRC that matches them:
    /// the record decoder sees garbage the CRC cannot stop.
    #[test]
    fn record_decoder_never_panics_on_arbitrary_records_under_a_valid_crc(
        spec in batch_spec(),
        changes in proptest::collection::vec((any::<Index>(), any::<u8>()), 1..6),
        tail in arbitrary_bytes(16),
        record_count in prop_oneof![Just(None), (1u32..8).prop_map(Some)],
    ) {
        let mut bytes = build(&spec).into_bytes().to_vec();
        for (at, value) in changes {
            let at = BATCH_HEADER_BYTES + at.index(bytes.len() - BATCH_HEADER_BYTES);
            bytes[at] = value;
        }
        bytes.extend_from_slice(&tail);
        let batch_length = (bytes.len() - 12) as u32;
        bytes[8..12].copy_from_slice(&batch_length.to_le_bytes());
        if let Some(count) = record_count {
            bytes[23..27].copy_from_slice(&(count - 1).to_le_bytes());
            bytes[57..61].copy_from_slice(&count.to_le_bytes());
        }
        let crc = crc32fast::hash(&bytes[BATCH_CRC_COVERS_FROM..]);
        bytes[BATCH_CRC_AT..BATCH_CRC_COVERS_FROM].copy_from_slice(&crc.to_le_bytes());
        match fuzz::decode_batch(&bytes) {
            Ok(decoded) => check_decoded_batch(&decoded)?,
            Err(error) => prop_assert!(is_invalid_batch(&error), "{error:?}"),
        }
    }

    #[test]
    fn valid_batches_round_trip(specs in proptest::collection::vec(batch_spec(), 1..4)) {
        let mut all = Vec::new();
        for spec in &specs {
            let batch = build(spec);
            let decoded = fuzz::decode_batch(batch.as_bytes()).expect("a valid batch decodes");
            prop_assert_eq!(&decoded.batch, &batch);
            assert_records_match(&decoded, spec, Offset(0))?;
            all.extend_from_slice(batch.as_bytes());
        }
        let decoded = fuzz::decode_batches(&all).expect("valid batches decode");
        prop_assert_eq!(decoded.len(), specs.len());
        for (decoded, spec) in decoded.iter().zip(&specs) {
            assert_records_match(decoded, spec, Offset(0))?;
        }
    }

    /// Only the base offset and the leader epoch are outside the CRC: a
    /// change there decodes (the log checks them against its own records);
    /// any other change, a cut or extra bytes are an `InvalidBatch`. A read
    /// cut inside a batch yields the batches before it.
    #[test]
    fn damaged_batches_are_refused_or_differ_only_outside_the_crc(
        spec in batch_spec(),
        damage in damage(),
    ) {
        let batch = build(&spec);
        let good = batch.as_bytes().to_vec();
        let (bytes, flipped) = apply(&good, &damage);
        let decoded = fuzz::decode_batch(&bytes);
        match flipped {
            Some(at) if at < 8 => match decoded {
                // The base offset changed; the records moved with it.
                Ok(decoded) => {
                    prop_assert_ne!(decoded.batch.base_offset(), batch.base_offset());
                    prop_assert_eq!(decoded.batch.leader_epoch(), batch.leader_epoch());
                    assert_records_match(&decoded, &spec, decoded.batch.base_offset())?;
                }
                // ... or it overflows with the last offset delta.
                Err(error) => prop_assert!(is_invalid_batch(&error), "{error:?}"),
            },
            Some(at) if (BATCH_LEADER_EPOCH_AT..BATCH_MAGIC_AT).contains(&at) => {
                let decoded = decoded.expect("the leader epoch is outside the CRC");
                prop_assert_ne!(decoded.batch.leader_epoch(), batch.leader_epoch());
                prop_assert_eq!(decoded.batch.base_offset(), batch.base_offset());
                assert_records_match(&decoded, &spec, Offset(0))?;
            }
            _ => match decoded {
                Ok(decoded) => prop_assert!(false, "{damage:?} decoded as {decoded:?}"),
                Err(error) => prop_assert!(is_invalid_batch(&error), "{error:?}"),
            },
        }
        match (&damage, fuzz::decode_batches(&bytes)) {
            (Damage::Truncate(_), Ok(batches)) => prop_assert!(batches.is_empty()),
            (Damage::Truncate(_), Err(error)) => {
                prop_assert!(false, "a cut batch is a partial read, not {error:?}")
            }
            (Damage::Append(_), Ok(batches)) => {
                prop_assert_eq!(&batches[0].batch, &batch);
                for decoded in &batches {
                    check_decoded_batch(decoded)?;
                }
            }
            (_, Ok(batches)) => {
                for decoded in &batches {
                    check_decoded_batch(decoded)?;
                }
            }
            (_, Err(error)) => prop_assert!(is_invalid_batch(&error), "{error:?}"),
        }
    }
}

// ---- TCP frames ---------------------------------------------------------------

fn epoch_end() -> impl Strategy<Value = Option<EpochEndOffset>> {
    proptest::option::of(
        (any::<u32>(), any::<u64>()).prop_map(|(epoch, end)| EpochEndOffset {
            epoch: LeaderEpoch(epoch),
            end_offset: Offset(end),
        }),
    )
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    proptest::sample::select(ErrorCode::ALL.to_vec())
}

fn request() -> impl Strategy<Value = Request> {
    let fetch_log = (
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        proptest::option::of(any::<u32>()),
        any::<u64>(),
        any::<u32>(),
    )
        .prop_map(|(log, epoch, offset, last, start, bytes_max)| FetchLog {
            log: LogId(log),
            current_leader_epoch: LeaderEpoch(epoch),
            fetch_offset: Offset(offset),
            last_fetched_epoch: last.map(LeaderEpoch),
            line_epoch: Some(LeaderEpoch(epoch)),
            log_start_offset: Offset(start),
            bytes_max,
            applied_offset: (start % 2 == 0).then_some(Offset(offset)),
        });
    let fetch = (
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        0u32..1_000_000_000,
        any::<u32>(),
        proptest::collection::vec(fetch_log, 0..4),
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
    let query =
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(log, current, epoch)| EpochQuery {
            log: LogId(log),
            current_leader_epoch: LeaderEpoch(current),
            epoch: LeaderEpoch(epoch),
        });
    let epochs =
        (any::<u32>(), proptest::collection::vec(query, 0..4)).prop_map(|(replica, logs)| {
            Request::EpochEndOffsets(EpochEndOffsetsRequest {
                replica: NodeId(replica),
                logs,
            })
        });
    prop_oneof![fetch, epochs]
}

fn response() -> impl Strategy<Value = Response> {
    let fetched = (
        any::<u32>(),
        error_code(),
        (any::<u64>(), any::<u64>(), any::<u64>()),
        epoch_end(),
        prop_oneof![
            arbitrary_bytes(40),
            batch_spec().prop_map(|spec| build(&spec).into_bytes().to_vec()),
        ],
    )
        .prop_map(
            |(log, error, (hw, start, end), diverging, records)| FetchedLog {
                log: LogId(log),
                error,
                high_watermark: Offset(hw),
                log_start_offset: Offset(start),
                log_end_offset: Offset(end),
                log_start_epoch: (hw % 2 == 0).then_some(LeaderEpoch(log)),
                log_end_epoch: (start % 2 == 0).then_some(LeaderEpoch(log ^ 1)),
                diverging,
                records: records.into(),
                applied_offsets: (0..hw % 3)
                    .map(|i| (NodeId(log ^ i as u32), Offset(end)))
                    .collect(),
            },
        );
    let fetch = proptest::collection::vec(fetched, 0..3)
        .prop_map(|logs| Response::Fetch(FetchResponse { logs }));
    let answer =
        (any::<u32>(), error_code(), epoch_end()).prop_map(|(log, error, end)| EpochAnswer {
            log: LogId(log),
            error,
            end,
        });
    let epochs = proptest::collection::vec(answer, 0..4)
        .prop_map(|logs| Response::EpochEndOffsets(EpochEndOffsetsResponse { logs }));
    prop_oneof![fetch, epochs, error_code().prop_map(Response::Error)]
}

fn frame() -> impl Strategy<Value = DecodedFrame> {
    let request =
        (any::<u64>(), any::<u32>(), request()).prop_map(|(id, from, request)| DecodedFrame {
            request_id: id,
            message: FrameMessage::Request {
                from: NodeId(from),
                request,
            },
        });
    let response = (any::<u64>(), response()).prop_map(|(id, response)| DecodedFrame {
        request_id: id,
        message: FrameMessage::Response(response),
    });
    prop_oneof![request, response]
}

fn encode(frame: &DecodedFrame) -> Vec<u8> {
    match &frame.message {
        FrameMessage::Request { from, request } => {
            fuzz::encode_request_frame(frame.request_id, *from, request, FRAME_BYTES_MAX)
        }
        FrameMessage::Response(response) => {
            fuzz::encode_response_frame(frame.request_id, response, FRAME_BYTES_MAX)
        }
    }
    .expect("a small frame fits")
}

/// The frame layout's byte positions (documented in `transport/tcp/frame.rs`).
const FRAME_HEADER_BYTES: usize = 18;
const FRAME_BODY_LENGTH_AT: usize = 6;

proptest! {
    #![proptest_config(config(MEMORY_CASES))]

    #[test]
    fn frame_decoders_never_panic_on_arbitrary_bytes(
        bytes in arbitrary_bytes(300),
        frame_bytes_max in prop_oneof![Just(FRAME_BYTES_MAX), 0usize..64],
    ) {
        match fuzz::decode_frame(&bytes, frame_bytes_max) {
            // Whatever decoded is exactly what the bytes say.
            Ok(frame) => prop_assert_eq!(encode(&frame).len(), bytes.len()),
            Err(rejected) => prop_assert!(rejected.reason.contains(rejected.field), "{rejected}"),
        }
        let stream = fuzz::decode_frames(&bytes, frame_bytes_max);
        let read: usize = stream.frames.iter().map(|f| encode(f).len()).sum();
        prop_assert!(read <= bytes.len());
        match &stream.rejected {
            None => prop_assert_eq!(read, bytes.len(), "a clean end must be at a frame boundary"),
            Some(rejected) => prop_assert!(rejected.reason.contains(rejected.field), "{rejected}"),
        }
    }

    /// Arbitrary bodies behind a valid header of every message type, so the
    /// body decoder sees garbage and not just a bad magic.
    #[test]
    fn frame_decoder_never_panics_on_arbitrary_bodies_behind_a_valid_header(
        template in frame(),
        body in arbitrary_bytes(200),
    ) {
        let mut bytes = encode(&template);
        bytes.truncate(FRAME_HEADER_BYTES);
        bytes[FRAME_BODY_LENGTH_AT..FRAME_BODY_LENGTH_AT + 4]
            .copy_from_slice(&(body.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&body);
        match fuzz::decode_frame(&bytes, FRAME_BYTES_MAX) {
            Ok(frame) => {
                prop_assert_eq!(frame.request_id, template.request_id);
                prop_assert_eq!(encode(&frame).len(), bytes.len());
            }
            Err(rejected) => {
                prop_assert!(rejected.reason.contains(rejected.field), "{rejected}");
            }
        }
    }

    #[test]
    fn valid_frames_round_trip_alone_and_back_to_back(
        frames in proptest::collection::vec(frame(), 1..4),
    ) {
        let mut stream = Vec::new();
        for frame in &frames {
            let bytes = encode(frame);
            prop_assert_eq!(&fuzz::decode_frame(&bytes, FRAME_BYTES_MAX), &Ok(frame.clone()));
            // One byte under its size, the same frame is refused by its header.
            let small = fuzz::decode_frame(&bytes, bytes.len() - 1).expect_err("over the limit");
            prop_assert_eq!(small.field, "body length");
            stream.extend_from_slice(&bytes);
        }
        let decoded = fuzz::decode_frames(&stream, FRAME_BYTES_MAX);
        prop_assert_eq!(decoded.frames, frames);
        prop_assert_eq!(decoded.rejected, None);
    }

    /// Frames carry no CRC: a changed byte either is refused, naming the
    /// field, or decodes to the message those bytes encode (re-encoding it
    /// gives the same bytes, but for an error code the decoder does not
    /// know, which becomes `Unknown`). A cut frame or extra bytes after it
    /// are refused; a stream reader keeps the whole frames before a cut.
    #[test]
    fn damaged_frames_are_refused_or_decode_to_what_the_bytes_say(
        frame in frame(),
        damage in damage(),
    ) {
        let good = encode(&frame);
        let (bytes, flipped) = apply(&good, &damage);
        let decoded = fuzz::decode_frame(&bytes, FRAME_BYTES_MAX);
        match (&damage, decoded) {
            (Damage::Flip(..), Ok(decoded)) => {
                let at = flipped.expect("a flip has a position");
                let again = encode(&decoded);
                prop_assert_eq!(again.len(), bytes.len());
                for (i, (a, b)) in again.iter().zip(&bytes).enumerate() {
                    prop_assert!(
                        a == b || i + 1 == at || i == at || i == at + 1,
                        "byte {i} re-encodes as {a} not {b} (flip at {at})"
                    );
                }
            }
            (_, Ok(decoded)) => prop_assert!(false, "{damage:?} decoded as {decoded:?}"),
            (_, Err(rejected)) => {
                prop_assert!(rejected.reason.contains(rejected.field), "{rejected}")
            }
        }
        let stream = fuzz::decode_frames(&bytes, FRAME_BYTES_MAX);
        match &damage {
            Damage::Truncate(_) => {
                prop_assert!(stream.frames.is_empty());
                prop_assert_eq!(stream.rejected.is_none(), bytes.is_empty());
            }
            Damage::Append(_) => {
                prop_assert_eq!(&stream.frames[0], &frame);
                prop_assert!(stream.rejected.is_some() || stream.frames.len() > 1);
            }
            Damage::Flip(..) => {}
        }
    }
}

// ---- checkpoint files -----------------------------------------------------------

fn offset() -> impl Strategy<Value = Offset> {
    prop_oneof![Just(0u64), any::<u64>(), (u64::MAX - 2)..=u64::MAX].prop_map(Offset)
}

fn log_checkpoint() -> impl Strategy<Value = LogCheckpointFields> {
    (offset(), offset(), offset(), any::<bool>()).prop_map(
        |(recovery_point, high_watermark, log_start_offset, clean_shutdown)| LogCheckpointFields {
            recovery_point,
            high_watermark,
            log_start_offset,
            clean_shutdown,
        },
    )
}

/// Lines that look like a checkpoint's, and some that do not.
fn checkpoint_line() -> impl Strategy<Value = String> {
    let word = proptest::sample::select(vec![
        "recovery_point",
        "high_watermark",
        "log_start_offset",
        "clean_shutdown",
        "entries",
        "",
    ]);
    let value = prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("-1".to_owned()),
        "[ -~]{0,12}",
    ];
    prop_oneof![
        (word, value.clone()).prop_map(|(word, value)| format!("{word} {value}")),
        (value.clone(), value).prop_map(|(a, b)| format!("{a} {b}")),
        "[ -~]{0,24}",
        "\\PC{0,8}",
    ]
}

/// A checkpoint body of arbitrary lines under one of the real headers (or
/// none), with a CRC line that matches: the field parser sees garbage the
/// CRC cannot stop.
fn checkpoint_under_a_valid_crc() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::sample::select(vec![
            "isrlog log-state v1\n",
            "isrlog leader-epoch v1\n",
            "isrlog log-state v2\n",
            "",
        ]),
        proptest::collection::vec(checkpoint_line(), 0..7),
    )
        .prop_map(|(header, lines)| {
            let mut body = header.to_owned();
            for line in lines {
                body.push_str(&line);
                body.push('\n');
            }
            with_checkpoint_crc(&body)
        })
}

fn epoch_entries() -> impl Strategy<Value = Vec<(LeaderEpoch, Offset)>> {
    proptest::collection::vec((1u32..1000, 1u64..1_000_000), 0..8).prop_map(|steps| {
        let (mut epoch, mut start) = (0u32, 0u64);
        steps
            .into_iter()
            .map(|(de, ds)| {
                let entry = (LeaderEpoch(epoch), Offset(start));
                epoch += de;
                start += ds;
                entry
            })
            .collect()
    })
}

fn check_epoch_entries(entries: &[(LeaderEpoch, Offset)]) -> Result<(), TestCaseError> {
    for pair in entries.windows(2) {
        prop_assert!(
            pair[0].0 < pair[1].0 && pair[0].1 < pair[1].1,
            "{entries:?}"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(FILE_CASES))]

    #[test]
    fn checkpoint_decoders_never_panic_on_arbitrary_bytes(
        bytes in prop_oneof![arbitrary_bytes(120), checkpoint_under_a_valid_crc()],
    ) {
        if let Err(error) = fuzz::decode_log_checkpoint(&bytes) {
            prop_assert!(is_invalid_checkpoint(&error), "{error:?}");
        }
        match fuzz::decode_epoch_checkpoint(&bytes) {
            Ok(entries) => check_epoch_entries(&entries)?,
            Err(error) => prop_assert!(is_invalid_checkpoint(&error), "{error:?}"),
        }
    }

    #[test]
    fn log_checkpoint_round_trips(fields in log_checkpoint()) {
        let bytes = fuzz::encode_log_checkpoint(&fields).expect("encodes");
        prop_assert_eq!(fuzz::decode_log_checkpoint(&bytes).expect("decodes"), fields);
    }

    #[test]
    fn epoch_checkpoint_round_trips(entries in epoch_entries()) {
        let bytes = fuzz::encode_epoch_checkpoint(&entries).expect("encodes");
        prop_assert_eq!(fuzz::decode_epoch_checkpoint(&bytes).expect("decodes"), entries);
    }

    /// The CRC line covers every byte before it, and only a change that
    /// leaves the stored CRC's value the same (hex case, a `+` for a leading
    /// zero) can pass: such a file decodes to the same fields.
    #[test]
    fn damaged_log_checkpoint_is_refused_or_unchanged(
        fields in log_checkpoint(),
        damage in damage(),
    ) {
        let good = fuzz::encode_log_checkpoint(&fields).expect("encodes");
        let (bytes, _) = apply(&good, &damage);
        match fuzz::decode_log_checkpoint(&bytes) {
            Ok(decoded) => prop_assert_eq!(decoded, fields, "{:?}", damage),
            Err(error) => prop_assert!(is_invalid_checkpoint(&error), "{error:?}"),
        }
    }

    #[test]
    fn damaged_epoch_checkpoint_is_refused_or_unchanged(
        entries in epoch_entries(),
        damage in damage(),
    ) {
        let good = fuzz::encode_epoch_checkpoint(&entries).expect("encodes");
        let (bytes, _) = apply(&good, &damage);
        match fuzz::decode_epoch_checkpoint(&bytes) {
            Ok(decoded) => prop_assert_eq!(decoded, entries, "{:?}", damage),
            Err(error) => prop_assert!(is_invalid_checkpoint(&error), "{error:?}"),
        }
    }
}

// ---- producer state snapshots ---------------------------------------------------

/// The snapshot layout (documented in `storage/producer_state.rs`).
const SNAPSHOT_MAGIC: &[u8; 8] = b"ISRLPSNP";

/// Headers of idempotent (and some plain) batches at increasing offsets,
/// all below the returned snapshot offset.
fn producer_history() -> impl Strategy<Value = (Offset, Vec<BatchHeader>)> {
    proptest::collection::vec(
        (
            prop_oneof![Just(-1i64), 0i64..4, any::<i64>()],
            0i16..3,
            prop_oneof![Just(-1i32), 0i32..100, Just(i32::MAX)],
            1u32..5,
            1u64..10,
            any::<u32>(),
            any::<i64>(),
        ),
        0..12,
    )
    .prop_map(|batches| {
        let mut next = 0u64;
        let headers: Vec<BatchHeader> = batches
            .into_iter()
            .map(
                |(producer, epoch, sequence, count, gap, leader_epoch, timestamp)| {
                    let base_offset = next + gap;
                    next = base_offset + u64::from(count);
                    BatchHeader {
                        base_offset: Offset(base_offset),
                        batch_length: 0,
                        leader_epoch: LeaderEpoch(leader_epoch),
                        crc: 0,
                        attributes: 0,
                        last_offset_delta: count - 1,
                        first_timestamp: timestamp,
                        max_timestamp: timestamp,
                        producer_id: ProducerId(producer),
                        producer_epoch: ProducerEpoch(epoch),
                        base_sequence: Sequence(sequence),
                        record_count: count,
                    }
                },
            )
            .collect();
        (Offset(next), headers)
    })
}

/// Arbitrary entries behind the real magic, version and offset, under a
/// CRC that matches: the entry parser sees garbage the CRC cannot stop.
fn snapshot_under_a_valid_crc() -> impl Strategy<Value = (Offset, Vec<u8>)> {
    (
        offset(),
        prop_oneof![Just(None), any::<u32>().prop_map(Some)],
        prop_oneof![0u32..4, any::<u32>()],
        arbitrary_bytes(120),
    )
        .prop_map(|(offset, stored_offset, count, entries)| {
            let mut bytes = SNAPSHOT_MAGIC.to_vec();
            bytes.extend_from_slice(&1u16.to_le_bytes());
            let stored = stored_offset.map_or(offset.0, u64::from);
            bytes.extend_from_slice(&stored.to_le_bytes());
            bytes.extend_from_slice(&count.to_le_bytes());
            bytes.extend_from_slice(&entries);
            let crc = crc32fast::hash(&bytes);
            bytes.extend_from_slice(&crc.to_le_bytes());
            (offset, bytes)
        })
}

fn check_snapshot(
    offset: Offset,
    producers: &[fuzz::SnapshotProducer],
) -> Result<(), TestCaseError> {
    for pair in producers.windows(2) {
        prop_assert!(pair[0].producer_id < pair[1].producer_id);
    }
    for producer in producers {
        prop_assert!(producer.producer_id.0 >= 0);
        prop_assert!((1..=5).contains(&producer.batches.len()));
        for batch in &producer.batches {
            prop_assert!(batch.first_offset <= batch.last_offset);
            prop_assert!(batch.last_offset < offset);
        }
        for pair in producer.batches.windows(2) {
            prop_assert!(pair[0].last_offset < pair[1].first_offset);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(FILE_CASES))]

    #[test]
    fn producer_snapshot_decoder_never_panics_on_arbitrary_bytes(
        (offset, bytes) in prop_oneof![
            (offset(), arbitrary_bytes(200)),
            snapshot_under_a_valid_crc(),
        ],
    ) {
        match fuzz::decode_producer_snapshot(offset, &bytes) {
            Ok(producers) => check_snapshot(offset, &producers)?,
            Err(error) => prop_assert!(is_invalid_checkpoint(&error), "{error:?}"),
        }
    }

    /// A snapshot holds, for every idempotent producer, the newest batch it
    /// wrote, in its newest epoch.
    #[test]
    fn producer_snapshot_round_trips((offset, headers) in producer_history()) {
        let bytes = fuzz::encode_producer_snapshot(offset, &headers);
        let producers = fuzz::decode_producer_snapshot(offset, &bytes).expect("decodes");
        check_snapshot(offset, &producers)?;
        let mut newest: BTreeMap<ProducerId, &BatchHeader> = BTreeMap::new();
        for header in &headers {
            if header.producer_id.0 >= 0 && header.base_sequence.0 >= 0 {
                newest.insert(header.producer_id, header);
            }
        }
        prop_assert_eq!(producers.len(), newest.len());
        for (producer, (id, header)) in producers.iter().zip(&newest) {
            prop_assert_eq!(producer.producer_id, *id);
            prop_assert_eq!(producer.producer_epoch, header.producer_epoch);
            prop_assert_eq!(producer.last_timestamp_ms, header.max_timestamp);
            let last = producer.batches.last().expect("at least one batch");
            prop_assert_eq!(last.first_offset, header.base_offset);
            prop_assert_eq!(last.last_offset, header.last_offset());
            prop_assert_eq!(last.first_sequence, header.base_sequence);
            prop_assert_eq!(last.last_sequence, header.last_sequence());
            prop_assert_eq!(last.leader_epoch, header.leader_epoch);
            prop_assert_eq!(last.max_timestamp_ms, header.max_timestamp);
        }
        // A snapshot is only read back under the offset its name says.
        let elsewhere = Offset(offset.0.wrapping_add(1));
        let error = fuzz::decode_producer_snapshot(elsewhere, &bytes).expect_err("wrong offset");
        prop_assert!(is_invalid_checkpoint(&error), "{error:?}");
    }

    /// The CRC covers every byte before it: any change, cut or extra bytes
    /// are an `InvalidCheckpoint`.
    #[test]
    fn damaged_producer_snapshot_is_refused(
        (offset, headers) in producer_history(),
        damage in damage(),
    ) {
        let good = fuzz::encode_producer_snapshot(offset, &headers);
        let (bytes, _) = apply(&good, &damage);
        let error = fuzz::decode_producer_snapshot(offset, &bytes).expect_err("damaged");
        prop_assert!(is_invalid_checkpoint(&error), "{error:?}");
    }
}

// ---- offset index files -----------------------------------------------------------

/// Entries `(offset, position)` after `base_offset`, strictly increasing,
/// within 32 bits of the segment start.
fn index_entries(base_offset: u64) -> impl Strategy<Value = Vec<(Offset, u64)>> {
    proptest::collection::vec((1u64..1000, 1u64..100_000), 0..12).prop_map(move |steps| {
        let (mut relative, mut position) = (0u64, 0u64);
        steps
            .into_iter()
            .map(|(dr, dp)| {
                relative += dr;
                position += dp;
                (Offset(base_offset + relative), position)
            })
            .collect()
    })
}

fn index_base_offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        any::<u64>(),
        (u64::MAX - u64::from(u32::MAX))..=u64::MAX,
    ]
}

fn check_index(
    outcome: &IndexOutcome,
    base_offset: Offset,
    data_bytes: u64,
) -> Result<(), TestCaseError> {
    match outcome {
        IndexOutcome::Accepted(entries) => {
            let mut previous = (base_offset, 0);
            for &(offset, position) in entries {
                prop_assert!(offset > previous.0 && position > previous.1, "{entries:?}");
                prop_assert!(position < data_bytes);
                previous = (offset, position);
            }
        }
        IndexOutcome::Rebuild(reason) => prop_assert!(!reason.is_empty()),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(FILE_CASES))]

    /// Whatever the bytes (and whatever base offset the segment's file name
    /// gave), the index is accepted with sane entries or rebuilt.
    #[test]
    fn offset_index_decoder_never_panics_on_arbitrary_bytes(
        base_offset in index_base_offset(),
        data_bytes in prop_oneof![Just(u64::MAX), any::<u64>(), 0u64..1000],
        bytes in prop_oneof![
            arbitrary_bytes(100),
            // Whole entries with small numbers, which pass the check more
            // often than random ones.
            proptest::collection::vec((0u32..50, 0u32..50), 0..10).prop_map(|entries| {
                entries
                    .into_iter()
                    .flat_map(|(r, p)| r.to_le_bytes().into_iter().chain(p.to_le_bytes()))
                    .collect()
            }),
        ],
    ) {
        let outcome = fuzz::decode_offset_index(Offset(base_offset), data_bytes, &bytes)
            .expect("no I/O failure");
        check_index(&outcome, Offset(base_offset), data_bytes)?;
    }

    #[test]
    fn offset_index_round_trips(
        (base_offset, entries) in (0u64..u64::MAX / 2)
            .prop_flat_map(|base| (Just(base), index_entries(base))),
    ) {
        let bytes = fuzz::encode_offset_index(Offset(base_offset), &entries).expect("encodes");
        let data_bytes = entries.last().map_or(1, |&(_, position)| position + 1);
        let outcome = fuzz::decode_offset_index(Offset(base_offset), data_bytes, &bytes)
            .expect("no I/O failure");
        prop_assert_eq!(outcome, IndexOutcome::Accepted(entries));
    }

    /// The index has no CRC: a damaged file either fails the check (and is
    /// rebuilt from the data) or passes it with ordered entries inside the
    /// data file, which only move where a read starts scanning; a cut at a
    /// whole entry keeps the entries before it.
    #[test]
    fn damaged_offset_index_is_rebuilt_or_still_sane(
        (base_offset, entries) in (0u64..u64::MAX / 2)
            .prop_flat_map(|base| (Just(base), index_entries(base)))
            .prop_filter("an index file to damage", |(_, entries)| !entries.is_empty()),
        damage in damage(),
    ) {
        let good = fuzz::encode_offset_index(Offset(base_offset), &entries).expect("encodes");
        let (bytes, _) = apply(&good, &damage);
        let data_bytes = entries.last().map_or(1, |&(_, position)| position + 1);
        let outcome = fuzz::decode_offset_index(Offset(base_offset), data_bytes, &bytes)
            .expect("no I/O failure");
        check_index(&outcome, Offset(base_offset), data_bytes)?;
        if let (Damage::Truncate(_), IndexOutcome::Accepted(kept)) = (&damage, &outcome) {
            prop_assert_eq!(bytes.len() % 8, 0);
            prop_assert_eq!(&kept[..], &entries[..bytes.len() / 8]);
        }
    }
}

// ---- segments -------------------------------------------------------------------

/// The bytes of a segment holding `specs` as consecutive batches from
/// offset 0, written by a real log, and the (offset, value) of each record.
fn segment_of(specs: &[BatchSpec]) -> (Vec<u8>, Vec<(Offset, Vec<u8>)>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = isrlog::Log::open(
        dir.path(),
        isrlog::LogConfig {
            index_bytes_max: 4096,
            ..isrlog::LogConfig::default()
        },
        std::sync::Arc::new(isrlog::ManualClock::new(0)),
    )
    .expect("opens");
    let mut records = Vec::new();
    for spec in specs {
        // A leader checks producer sequences; these batches are plain.
        let batch = build(&BatchSpec {
            producer: None,
            ..spec.clone()
        });
        let info = log
            .append_as_leader(&batch, LeaderEpoch(3))
            .expect("appends");
        for (i, record) in spec.records.iter().enumerate() {
            records.push((Offset(info.base_offset.0 + i as u64), record.value.clone()));
        }
    }
    log.close().expect("closes");
    let bytes = std::fs::read(dir.path().join("00000000000000000000.log")).expect("segment");
    (bytes, records)
}

proptest! {
    #![proptest_config(config(SEGMENT_CASES))]

    /// A log opened over one arbitrary segment file (no checkpoint, no
    /// index) recovers or refuses, and never stalls a reader.
    #[test]
    fn segment_recovery_never_panics_on_arbitrary_bytes(
        specs in proptest::collection::vec(batch_spec(), 0..3),
        tail in arbitrary_bytes(200),
    ) {
        let (mut bytes, records) = segment_of(&specs);
        bytes.extend_from_slice(&tail);
        if let Ok(outcome) = fuzz::decode_segment(&bytes) {
            prop_assert_eq!(outcome.read_stalled_at, None);
            // Garbage after the last batch is a torn tail: cut, never served.
            let served: Vec<_> =
                outcome.records.iter().map(|r| (r.offset, r.value.to_vec())).collect();
            prop_assert_eq!(served, records);
        }
    }

    #[test]
    fn valid_segment_round_trips(specs in proptest::collection::vec(batch_spec(), 1..4)) {
        let (bytes, records) = segment_of(&specs);
        let outcome = fuzz::decode_segment(&bytes).expect("a valid segment opens");
        prop_assert_eq!(outcome.read_stalled_at, None);
        prop_assert!(outcome.report.truncations.is_empty(), "{:?}", outcome.report);
        let served: Vec<_> =
            outcome.records.iter().map(|r| (r.offset, r.value.to_vec())).collect();
        prop_assert_eq!(served, records);
    }

    /// A damaged segment opens with a clean recovery or refuses; whatever
    /// it serves is a record that was written, at the offset it was written.
    #[test]
    fn damaged_segment_serves_only_what_was_written(
        specs in proptest::collection::vec(batch_spec(), 1..4),
        damage in damage(),
    ) {
        let (good, records) = segment_of(&specs);
        let (bytes, _) = apply(&good, &damage);
        if let Ok(outcome) = fuzz::decode_segment(&bytes) {
            prop_assert_eq!(outcome.read_stalled_at, None);
            for record in &outcome.records {
                let written = records.iter().find(|(offset, _)| *offset == record.offset);
                prop_assert_eq!(
                    written.map(|(_, value)| &value[..]),
                    Some(&record.value[..]),
                    "{:?} served {:?} at {}", damage, record.value, record.offset
                );
            }
        }
    }
}
