//! Building record batches: records are encoded straight into the batch's
//! final buffer, so building costs one copy of each key and value.

use bytes::{BufMut, Bytes, BytesMut};

use super::batch::{
    compute_crc, parse_header, RecordBatch, ATTRIBUTES_AT, BASE_SEQUENCE_AT, BATCH_BYTES_MAX,
    BATCH_HEADER_BYTES, BATCH_OVERHEAD_BYTES, CRC_AT, FIRST_TIMESTAMP_AT, LAST_OFFSET_DELTA_AT,
    LENGTH_AT, MAGIC, MAGIC_AT, MAX_TIMESTAMP_AT, PRODUCER_EPOCH_AT, PRODUCER_ID_AT,
    RECORD_COUNT_AT, RECORD_FIXED_BYTES,
};
use crate::error::{Error, Result};
use crate::types::{ProducerEpoch, ProducerId, Sequence};

/// One record to add to a batch: a value, and optionally a key, a timestamp
/// and headers.
#[derive(Clone, Debug, Default)]
pub struct RecordData<'a> {
    key: Option<&'a [u8]>,
    value: &'a [u8],
    timestamp: Option<i64>,
    headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

impl<'a> RecordData<'a> {
    /// A record with this value and nothing else.
    pub fn new(value: &'a [u8]) -> RecordData<'a> {
        RecordData {
            value,
            ..RecordData::default()
        }
    }

    /// Sets the key.
    pub fn key(mut self, key: &'a [u8]) -> RecordData<'a> {
        self.key = Some(key);
        self
    }

    /// Sets the timestamp (ms since the Unix epoch); without one the record
    /// takes the builder's default timestamp.
    pub fn timestamp(mut self, timestamp_ms: i64) -> RecordData<'a> {
        self.timestamp = Some(timestamp_ms);
        self
    }

    /// Adds a header.
    pub fn header(mut self, key: &'a [u8], value: Option<&'a [u8]>) -> RecordData<'a> {
        self.headers.push((key, value));
        self
    }

    fn encoded_bytes(&self) -> usize {
        RECORD_FIXED_BYTES
            + self.key.map_or(0, <[u8]>::len)
            + self.value.len()
            + self
                .headers
                .iter()
                .map(|(k, v)| 8 + k.len() + v.map_or(0, <[u8]>::len))
                .sum::<usize>()
    }
}

/// Builds one [`RecordBatch`]. The base offset and leader epoch are left at
/// zero: the leader's log assigns them on append.
#[derive(Debug)]
pub struct RecordBatchBuilder {
    buf: BytesMut,
    default_timestamp: i64,
    first_timestamp: Option<i64>,
    max_timestamp: i64,
    record_count: u32,
    producer_id: ProducerId,
    producer_epoch: ProducerEpoch,
    base_sequence: Sequence,
}

impl RecordBatchBuilder {
    /// A builder whose records default to `timestamp_ms` (ms since the Unix
    /// epoch).
    pub fn new(timestamp_ms: i64) -> RecordBatchBuilder {
        RecordBatchBuilder::with_capacity(timestamp_ms, 0)
    }

    /// A builder with room for `bytes` of records before it reallocates.
    pub fn with_capacity(timestamp_ms: i64, bytes: usize) -> RecordBatchBuilder {
        let mut buf = BytesMut::with_capacity(BATCH_HEADER_BYTES + bytes);
        buf.put_bytes(0, BATCH_HEADER_BYTES);
        RecordBatchBuilder {
            buf,
            default_timestamp: timestamp_ms,
            first_timestamp: None,
            max_timestamp: i64::MIN,
            record_count: 0,
            producer_id: ProducerId::NONE,
            producer_epoch: ProducerEpoch(-1),
            base_sequence: Sequence::NONE,
        }
    }

    /// Marks the batch as written by an idempotent producer.
    pub fn producer(
        &mut self,
        id: ProducerId,
        epoch: ProducerEpoch,
        base_sequence: Sequence,
    ) -> &mut Self {
        self.producer_id = id;
        self.producer_epoch = epoch;
        self.base_sequence = base_sequence;
        self
    }

    /// Adds a record holding just `value`.
    pub fn push(&mut self, value: &[u8]) -> &mut Self {
        self.push_record(&RecordData::new(value))
    }

    /// Adds a record holding `key` and `value`.
    pub fn push_keyed(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.push_record(&RecordData::new(value).key(key))
    }

    /// Adds a record.
    pub fn push_record(&mut self, record: &RecordData<'_>) -> &mut Self {
        let timestamp = record.timestamp.unwrap_or(self.default_timestamp);
        let first = *self.first_timestamp.get_or_insert(timestamp);
        self.max_timestamp = self.max_timestamp.max(timestamp);
        let body_len = record.encoded_bytes() - 4;
        self.buf.reserve(body_len + 4);
        self.buf.put_u32_le(body_len as u32);
        self.buf.put_u8(0);
        self.buf.put_i64_le(timestamp.wrapping_sub(first));
        self.buf.put_u32_le(self.record_count);
        match record.key {
            Some(key) => {
                self.buf.put_i32_le(key.len() as i32);
                self.buf.put_slice(key);
            }
            None => self.buf.put_i32_le(-1),
        }
        self.buf.put_u32_le(record.value.len() as u32);
        self.buf.put_slice(record.value);
        self.buf.put_u32_le(record.headers.len() as u32);
        for (key, value) in &record.headers {
            self.buf.put_u32_le(key.len() as u32);
            self.buf.put_slice(key);
            match value {
                Some(value) => {
                    self.buf.put_i32_le(value.len() as i32);
                    self.buf.put_slice(value);
                }
                None => self.buf.put_i32_le(-1),
            }
        }
        self.record_count += 1;
        self
    }

    /// Number of records added so far.
    pub fn record_count(&self) -> u32 {
        self.record_count
    }

    /// Size the batch would have if built now.
    pub fn size_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Finishes the batch: fills in the header and the CRC.
    ///
    /// Fails when the batch is empty or larger than the format allows.
    pub fn build(self) -> Result<RecordBatch> {
        if self.record_count == 0 {
            return Err(Error::InvalidBatch {
                reason: "a batch needs at least one record".into(),
            });
        }
        if self.buf.len() > BATCH_BYTES_MAX {
            return Err(Error::InvalidBatch {
                reason: format!(
                    "batch of {} bytes exceeds the {BATCH_BYTES_MAX} byte maximum",
                    self.buf.len()
                ),
            });
        }
        let mut buf = self.buf;
        let batch_length = (buf.len() - BATCH_OVERHEAD_BYTES) as u32;
        buf[LENGTH_AT..LENGTH_AT + 4].copy_from_slice(&batch_length.to_le_bytes());
        buf[MAGIC_AT] = MAGIC;
        buf[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&0u16.to_le_bytes());
        buf[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4]
            .copy_from_slice(&(self.record_count - 1).to_le_bytes());
        let first = self.first_timestamp.unwrap_or(self.default_timestamp);
        buf[FIRST_TIMESTAMP_AT..FIRST_TIMESTAMP_AT + 8].copy_from_slice(&first.to_le_bytes());
        buf[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8]
            .copy_from_slice(&self.max_timestamp.to_le_bytes());
        buf[PRODUCER_ID_AT..PRODUCER_ID_AT + 8].copy_from_slice(&self.producer_id.0.to_le_bytes());
        buf[PRODUCER_EPOCH_AT..PRODUCER_EPOCH_AT + 2]
            .copy_from_slice(&self.producer_epoch.0.to_le_bytes());
        buf[BASE_SEQUENCE_AT..BASE_SEQUENCE_AT + 4]
            .copy_from_slice(&self.base_sequence.0.to_le_bytes());
        buf[RECORD_COUNT_AT..RECORD_COUNT_AT + 4].copy_from_slice(&self.record_count.to_le_bytes());
        let crc = compute_crc(&buf);
        buf[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        let bytes: Bytes = buf.freeze();
        // The builder wrote a header its own parser accepts: a pair assertion.
        let header = parse_header(&bytes).map_err(|e| Error::InvalidBatch {
            reason: format!("builder produced an unparsable header: {e}"),
        })?;
        Ok(RecordBatch::from_parts(header, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::BatchIter;
    use crate::types::Offset;
    use bytes::BytesMut;
    use proptest::prelude::*;

    fn sample() -> RecordBatch {
        let mut b = RecordBatchBuilder::new(1_000);
        b.push(b"plain")
            .push_keyed(b"k", b"keyed")
            .push_record(
                &RecordData::new(b"full")
                    .key(b"key")
                    .timestamp(1_500)
                    .header(b"h1", Some(b"v1"))
                    .header(b"h2", None),
            )
            .producer(ProducerId(7), ProducerEpoch(2), Sequence(40));
        b.build().unwrap()
    }

    #[test]
    fn built_batch_round_trips_every_field() {
        let batch = sample();
        let h = *batch.header();
        assert_eq!(h.record_count, 3);
        assert_eq!(h.first_timestamp, 1_000);
        assert_eq!(h.max_timestamp, 1_500);
        assert_eq!(h.producer_id, ProducerId(7));
        assert_eq!(h.producer_epoch, ProducerEpoch(2));
        assert_eq!(h.base_sequence, Sequence(40));
        assert_eq!(h.last_sequence(), Sequence(42));
        let records: Vec<_> = batch.records().map(|r| r.unwrap()).collect();
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].value.as_ref(), b"plain");
        assert_eq!(records[0].key, None);
        assert_eq!(records[1].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(records[2].timestamp, 1_500);
        assert_eq!(records[2].offset, Offset(2));
        assert_eq!(records[2].headers.len(), 2);
        assert_eq!(records[2].headers[1].1, None);
        let again = RecordBatch::from_bytes(batch.as_bytes().clone()).unwrap();
        assert_eq!(again, batch);
    }

    #[test]
    fn offset_and_epoch_can_be_stamped_without_recomputing_the_crc() {
        let batch = sample();
        let mut bytes = BytesMut::from(batch.as_bytes().as_ref());
        super::super::batch::set_base_offset(&mut bytes, Offset(1234));
        super::super::batch::set_leader_epoch(&mut bytes, crate::types::LeaderEpoch(9));
        let stamped = RecordBatch::from_bytes(bytes.freeze()).unwrap();
        assert_eq!(stamped.base_offset(), Offset(1234));
        assert_eq!(stamped.last_offset(), Offset(1236));
        assert_eq!(stamped.leader_epoch(), crate::types::LeaderEpoch(9));
        assert_eq!(
            stamped.records().last().unwrap().unwrap().offset,
            Offset(1236)
        );
    }

    #[test]
    fn a_flipped_byte_under_the_crc_is_rejected() {
        let batch = sample();
        for at in ATTRIBUTES_AT..batch.size_bytes() {
            let mut bytes = BytesMut::from(batch.as_bytes().as_ref());
            bytes[at] ^= 0x40;
            let result = RecordBatch::from_bytes(bytes.freeze());
            assert!(
                matches!(result, Err(Error::InvalidBatch { .. })),
                "flip at byte {at}: {result:?}"
            );
        }
    }

    #[test]
    fn empty_batch_is_an_error() {
        match RecordBatchBuilder::new(0).build() {
            Err(Error::InvalidBatch { reason }) => {
                assert!(reason.contains("at least one record"), "{reason}")
            }
            other => panic!("an empty batch was built: {other:?}"),
        }
    }

    #[test]
    fn batch_iter_stops_cleanly_at_a_partial_tail() {
        let a = sample();
        let b = sample();
        let mut joined = BytesMut::new();
        joined.extend_from_slice(a.as_bytes());
        joined.extend_from_slice(b.as_bytes());
        let full = joined.clone().freeze();
        assert_eq!(BatchIter::new(full.clone()).count(), 2);
        for cut in 0..full.len() {
            // A partial tail ends the iteration: it is not an error.
            let batches = BatchIter::new(full.slice(..cut))
                .collect::<Result<Vec<_>>>()
                .unwrap_or_else(|error| panic!("cut at {cut}: {error}"));
            let expected = usize::from(cut >= a.size_bytes()) + usize::from(cut == full.len());
            assert_eq!(batches.len(), expected, "cut at {cut}");
        }
    }

    proptest! {
        #[test]
        fn batch_decoder_never_panics_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let bytes = Bytes::from(data);
            for batch in BatchIter::new(bytes.clone()).flatten() {
                for _ in batch.records() {}
            }
            // Arbitrary bytes may or may not decode; not panicking is the property.
            let _ = RecordBatch::from_bytes(bytes);
        }

        #[test]
        fn batch_decoder_never_panics_on_a_mutated_valid_batch(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        ) {
            let batch = sample();
            let mut bytes = BytesMut::from(batch.as_bytes().as_ref());
            for (at, value) in flips {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            // Recompute the CRC so the record parser itself sees the garbage.
            let crc = compute_crc(&bytes);
            bytes[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
            if let Ok(batch) = RecordBatch::from_bytes(bytes.freeze()) {
                for _ in batch.records() {}
            }
        }

        #[test]
        fn records_round_trip(values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..20)) {
            let mut b = RecordBatchBuilder::new(5);
            for v in &values {
                b.push(v);
            }
            let batch = b.build().unwrap();
            let got: Vec<Vec<u8>> = batch.records().map(|r| r.unwrap().value.to_vec()).collect();
            prop_assert_eq!(got, values);
        }
    }
}
