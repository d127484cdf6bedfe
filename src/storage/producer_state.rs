//! Idempotent producer state of one log (SPEC 4): per producer id, its
//! current producer epoch and the metadata of its last five batches, the
//! rules that decide whether a leader append is new, a duplicate or an
//! error, and the snapshot file that lets a replica rebuild the state on
//! open without reading the whole log.
//!
//! This module owns the rules (after Kafka's `ProducerStateManager` and
//! `ProducerAppendInfo`) and the snapshot file format. It does not own when
//! they run: the `Log` checks and records batches under the lock that
//! assigns offsets (so deduplication is atomic with offset assignment),
//! writes snapshots at segment roll and clean close, and rebuilds the state
//! after truncation.
//!
//! # Snapshot file
//!
//! `{offset:020}.snapshot` holds the state as of `offset` (every batch below
//! it, none at or above it). Little-endian, replaced atomically:
//!
//! | field | type |
//! |---|---|
//! | magic `ISRLPSNP` | 8 bytes |
//! | version (= 1) | u16 |
//! | offset (= the file name's) | u64 |
//! | producer count | u32 |
//! | per producer: id i64, epoch i16, last timestamp i64, batch count u8 (1..=5), then per batch: first sequence i32, last sequence i32, first offset u64, last offset u64, leader epoch u32, max timestamp i64 | |
//! | CRC-32 of everything before | u32 |

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::checkpoint::write_atomically;
use super::disk::Disk;
use crate::error::{Error, Result};
use crate::record::BatchHeader;
use crate::types::{LeaderEpoch, Offset, ProducerEpoch, ProducerId, Sequence};

/// How many batches per producer are remembered for deduplication (Kafka's
/// `NUM_BATCHES_TO_RETAIN`, which matches its 5 in-flight requests).
pub(crate) const BATCHES_PER_PRODUCER_MAX: usize = 5;

/// File name suffix of producer state snapshots.
pub(crate) const SNAPSHOT_SUFFIX: &str = ".snapshot";

const SNAPSHOT_MAGIC: &[u8; 8] = b"ISRLPSNP";
const SNAPSHOT_VERSION: u16 = 1;
const SNAPSHOT_HEADER_BYTES: usize = 8 + 2 + 8 + 4;
const PRODUCER_FIXED_BYTES: usize = 8 + 2 + 8 + 1;
const BATCH_METADATA_BYTES: usize = 4 + 4 + 8 + 8 + 4 + 8;
const CRC_BYTES: usize = 4;

/// Where one batch of a producer landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BatchMetadata {
    pub(crate) first_sequence: Sequence,
    pub(crate) last_sequence: Sequence,
    pub(crate) first_offset: Offset,
    pub(crate) last_offset: Offset,
    pub(crate) leader_epoch: LeaderEpoch,
    pub(crate) max_timestamp_ms: i64,
}

impl BatchMetadata {
    fn of(header: &BatchHeader) -> BatchMetadata {
        BatchMetadata {
            first_sequence: header.base_sequence,
            last_sequence: header.last_sequence(),
            first_offset: header.base_offset,
            last_offset: header.last_offset(),
            leader_epoch: header.leader_epoch,
            max_timestamp_ms: header.max_timestamp,
        }
    }
}

/// What one producer has written to this log.
///
/// Invariant: `batches` holds 1 to 5 entries, oldest first, with offsets
/// increasing; all were written in `producer_epoch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProducerEntry {
    producer_epoch: ProducerEpoch,
    batches: VecDeque<BatchMetadata>,
    /// Max timestamp of the newest batch (Kafka's `lastTimestamp`): expiry is
    /// measured from it, so every replica expires the same producers.
    last_timestamp_ms: i64,
}

impl ProducerEntry {
    fn last_sequence(&self) -> Sequence {
        self.batches
            .back()
            .map_or(Sequence::NONE, |b| b.last_sequence)
    }

    fn find_duplicate(&self, header: &BatchHeader) -> Option<BatchMetadata> {
        if header.producer_epoch != self.producer_epoch {
            return None;
        }
        let (first, last) = (header.base_sequence, header.last_sequence());
        self.batches
            .iter()
            .find(|b| b.first_sequence == first && b.last_sequence == last)
            .copied()
    }

    fn check_invariants(&self) -> bool {
        !self.batches.is_empty()
            && self.batches.len() <= BATCHES_PER_PRODUCER_MAX
            && self
                .batches
                .iter()
                .zip(self.batches.iter().skip(1))
                .all(|(a, b)| a.last_offset < b.first_offset)
            && self.batches.iter().all(|b| b.first_offset <= b.last_offset)
    }
}

/// Kafka's `inSequence`: `next` follows `last`, wrapping at `i32::MAX`.
pub(crate) fn in_sequence(last: Sequence, next: Sequence) -> bool {
    i64::from(next.0) == i64::from(last.0) + 1 || (next.0 == 0 && last.0 == i32::MAX)
}

fn sequence_after(last: Sequence) -> Sequence {
    if last.0 == i32::MAX {
        Sequence(0)
    } else {
        Sequence(last.0 + 1)
    }
}

/// The verdict on a leader append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaderCheck {
    /// Not a duplicate and in order (or not idempotent at all): append it.
    Append,
    /// The same batch was appended before, at these offsets: append nothing.
    Duplicate(BatchMetadata),
}

/// The producer state of one log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ProducerStateManager {
    producers: HashMap<ProducerId, ProducerEntry>,
}

impl ProducerStateManager {
    /// No producer known.
    pub(crate) fn empty() -> ProducerStateManager {
        ProducerStateManager::default()
    }

    /// Number of producers known.
    pub(crate) fn len(&self) -> usize {
        self.producers.len()
    }

    /// The current epoch and last sequence of `producer`.
    pub(crate) fn last_sequence(&self, producer: ProducerId) -> Option<(ProducerEpoch, Sequence)> {
        self.producers
            .get(&producer)
            .map(|e| (e.producer_epoch, e.last_sequence()))
    }

    /// Decides what a leader does with a batch (Kafka's
    /// `UnifiedLog.analyzeAndValidateProducerState` with origin CLIENT):
    /// a batch whose sequence range matches one of the producer's last five
    /// (in the same producer epoch) is a duplicate; an older producer epoch
    /// is fenced; a newer epoch must start at sequence 0; otherwise the
    /// sequence must follow the last one. Like Kafka 3.x, a producer id with
    /// no state here (new, or its state expired) may start at any sequence.
    ///
    /// `leader_epoch` is the epoch of the leader deciding, named in an
    /// `OutOfOrderSequence` refusal (see that error).
    pub(crate) fn check_leader_append(
        &self,
        header: &BatchHeader,
        leader_epoch: LeaderEpoch,
    ) -> Result<LeaderCheck> {
        let producer = header.producer_id;
        if !producer.is_some() {
            return Ok(LeaderCheck::Append);
        }
        if header.base_sequence.0 < 0 || header.producer_epoch.0 < 0 {
            return Err(Error::InvalidBatch {
                reason: format!(
                    "batch of {producer} has epoch {} and base sequence {}: an idempotent batch needs both non-negative",
                    header.producer_epoch, header.base_sequence
                ),
            });
        }
        let Some(entry) = self.producers.get(&producer) else {
            return Ok(LeaderCheck::Append);
        };
        if let Some(original) = entry.find_duplicate(header) {
            return Ok(LeaderCheck::Duplicate(original));
        }
        if header.producer_epoch < entry.producer_epoch {
            return Err(Error::ProducerFenced {
                producer,
                current: entry.producer_epoch,
                received: header.producer_epoch,
            });
        }
        let expected = if header.producer_epoch > entry.producer_epoch {
            Sequence(0)
        } else {
            sequence_after(entry.last_sequence())
        };
        let in_order = if header.producer_epoch > entry.producer_epoch {
            header.base_sequence.0 == 0
        } else {
            in_sequence(entry.last_sequence(), header.base_sequence)
        };
        if !in_order {
            return Err(Error::OutOfOrderSequence {
                producer,
                expected,
                received: header.base_sequence,
                leader_epoch,
            });
        }
        Ok(LeaderCheck::Append)
    }

    /// Records a batch that is now in the log (with its final offsets and
    /// leader epoch). No validation: on a leader the batch was checked
    /// already, and a follower mirrors its leader whatever it sent (Kafka's
    /// origin REPLICATION only warns about an older producer epoch).
    pub(crate) fn record(&mut self, header: &BatchHeader) {
        let producer = header.producer_id;
        if !producer.is_some() || header.base_sequence.0 < 0 {
            return;
        }
        let metadata = BatchMetadata::of(header);
        let entry = self
            .producers
            .entry(producer)
            .or_insert_with(|| ProducerEntry {
                producer_epoch: header.producer_epoch,
                batches: VecDeque::with_capacity(BATCHES_PER_PRODUCER_MAX),
                last_timestamp_ms: header.max_timestamp,
            });
        if entry
            .batches
            .back()
            .is_some_and(|b| b.last_offset >= metadata.first_offset)
        {
            // Already recorded (a rebuild that starts inside a batch).
            return;
        }
        if header.producer_epoch != entry.producer_epoch {
            if header.producer_epoch < entry.producer_epoch {
                tracing::warn!(%producer, current = %entry.producer_epoch, received = %header.producer_epoch, offset = %header.base_offset, "replicated batch has an older producer epoch");
            }
            entry.producer_epoch = header.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == BATCHES_PER_PRODUCER_MAX {
            entry.batches.pop_front();
        }
        entry.batches.push_back(metadata);
        entry.last_timestamp_ms = header.max_timestamp;
        debug_assert!(entry.check_invariants());
    }

    /// Forgets producers idle for at least `expiration` (Kafka's
    /// `producer.id.expiration.ms`): whose newest batch's timestamp is that
    /// far behind `now_ms`. Returns how many were removed.
    pub(crate) fn remove_expired(&mut self, now_ms: i64, expiration: Duration) -> usize {
        let expiration_ms = i64::try_from(expiration.as_millis()).unwrap_or(i64::MAX);
        let before = self.producers.len();
        self.producers
            .retain(|_, e| now_ms.saturating_sub(e.last_timestamp_ms) < expiration_ms);
        let removed = before - self.producers.len();
        if removed > 0 {
            tracing::debug!(removed, "expired idle producer ids");
        }
        removed
    }

    pub(crate) fn check_invariants(&self) -> bool {
        self.producers.values().all(ProducerEntry::check_invariants)
    }

    /// Every producer's id, epoch, last timestamp and remembered batches,
    /// sorted by id (for `testing::fuzz`, which shows what a decoded
    /// snapshot holds, and the inspector).
    pub(crate) fn producers_by_id(
        &self,
    ) -> Vec<(ProducerId, ProducerEpoch, i64, Vec<BatchMetadata>)> {
        let mut producers: Vec<_> = self
            .producers
            .iter()
            .map(|(id, entry)| {
                (
                    *id,
                    entry.producer_epoch,
                    entry.last_timestamp_ms,
                    entry.batches.iter().copied().collect(),
                )
            })
            .collect();
        producers.sort_by_key(|(id, ..)| *id);
        producers
    }

    // ---- snapshots ---------------------------------------------------------

    /// The snapshot bytes of this state as of `offset`.
    pub(crate) fn encode_snapshot(&self, offset: Offset) -> Vec<u8> {
        let mut buf = Vec::with_capacity(
            SNAPSHOT_HEADER_BYTES
                + self.producers.len() * (PRODUCER_FIXED_BYTES + BATCH_METADATA_BYTES)
                + CRC_BYTES,
        );
        buf.extend_from_slice(SNAPSHOT_MAGIC);
        buf.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        buf.extend_from_slice(&offset.0.to_le_bytes());
        buf.extend_from_slice(&(self.producers.len() as u32).to_le_bytes());
        // Sorted, so that equal states give equal files.
        let mut ids: Vec<&ProducerId> = self.producers.keys().collect();
        ids.sort();
        for id in ids {
            let entry = &self.producers[id];
            buf.extend_from_slice(&id.0.to_le_bytes());
            buf.extend_from_slice(&entry.producer_epoch.0.to_le_bytes());
            buf.extend_from_slice(&entry.last_timestamp_ms.to_le_bytes());
            buf.push(entry.batches.len() as u8);
            for b in &entry.batches {
                buf.extend_from_slice(&b.first_sequence.0.to_le_bytes());
                buf.extend_from_slice(&b.last_sequence.0.to_le_bytes());
                buf.extend_from_slice(&b.first_offset.0.to_le_bytes());
                buf.extend_from_slice(&b.last_offset.0.to_le_bytes());
                buf.extend_from_slice(&b.leader_epoch.0.to_le_bytes());
                buf.extend_from_slice(&b.max_timestamp_ms.to_le_bytes());
            }
        }
        let crc = crc32fast::hash(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        buf
    }

    /// Decodes a snapshot read from `path`, which must be as of `offset`.
    /// Any damage is `Error::InvalidCheckpoint` naming the file; never a
    /// panic, whatever the bytes.
    pub(crate) fn decode_snapshot(
        path: &Path,
        offset: Offset,
        bytes: &[u8],
    ) -> Result<ProducerStateManager> {
        let invalid = |reason: String| Error::InvalidCheckpoint {
            path: path.to_path_buf(),
            reason,
        };
        if bytes.len() < SNAPSHOT_HEADER_BYTES + CRC_BYTES {
            return Err(invalid(format!("too short: {} bytes", bytes.len())));
        }
        let (body, crc) = bytes.split_at(bytes.len() - CRC_BYTES);
        let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(invalid(format!(
                "CRC mismatch: stored {stored:08x}, computed {computed:08x}"
            )));
        }
        let mut r = Reader { buf: body, at: 0 };
        let short = || invalid("ends in the middle of an entry".to_owned());
        if r.take(8).ok_or_else(short)? != SNAPSHOT_MAGIC {
            return Err(invalid("bad magic".to_owned()));
        }
        let version = r.u16().ok_or_else(short)?;
        if version != SNAPSHOT_VERSION {
            return Err(invalid(format!("unknown version {version}")));
        }
        let stored_offset = Offset(r.u64().ok_or_else(short)?);
        if stored_offset != offset {
            return Err(invalid(format!(
                "holds the state as of offset {stored_offset}, but its name says {offset}"
            )));
        }
        let count = r.u32().ok_or_else(short)?;
        let mut state = ProducerStateManager::empty();
        for _ in 0..count {
            let id = ProducerId(r.u64().ok_or_else(short)? as i64);
            let producer_epoch = ProducerEpoch(r.u16().ok_or_else(short)? as i16);
            let last_timestamp_ms = r.u64().ok_or_else(short)? as i64;
            let batch_count = usize::from(r.u8().ok_or_else(short)?);
            let mut batches = VecDeque::with_capacity(batch_count);
            for _ in 0..batch_count {
                batches.push_back(BatchMetadata {
                    first_sequence: Sequence(r.u32().ok_or_else(short)? as i32),
                    last_sequence: Sequence(r.u32().ok_or_else(short)? as i32),
                    first_offset: Offset(r.u64().ok_or_else(short)?),
                    last_offset: Offset(r.u64().ok_or_else(short)?),
                    leader_epoch: LeaderEpoch(r.u32().ok_or_else(short)?),
                    max_timestamp_ms: r.u64().ok_or_else(short)? as i64,
                });
            }
            let entry = ProducerEntry {
                producer_epoch,
                batches,
                last_timestamp_ms,
            };
            let below_offset = entry.batches.back().is_some_and(|b| b.last_offset < offset);
            if !id.is_some() || !entry.check_invariants() || !below_offset {
                return Err(invalid(format!("inconsistent entry for {id}")));
            }
            if state.producers.insert(id, entry).is_some() {
                return Err(invalid(format!("{id} appears twice")));
            }
        }
        if r.at != body.len() {
            return Err(invalid(format!(
                "{} bytes after the last entry",
                body.len() - r.at
            )));
        }
        Ok(state)
    }

    /// Writes this state as the snapshot as of `offset`, atomically.
    pub(crate) fn write_snapshot(&self, disk: &dyn Disk, dir: &Path, offset: Offset) -> Result<()> {
        write_atomically(
            disk,
            &snapshot_path(dir, offset),
            &self.encode_snapshot(offset),
        )
    }

    /// Reads the snapshot as of `offset` from `dir`.
    pub(crate) fn read_snapshot(
        disk: &dyn Disk,
        dir: &Path,
        offset: Offset,
    ) -> Result<ProducerStateManager> {
        let path = snapshot_path(dir, offset);
        let bytes = disk.read(&path).map_err(|e| Error::io(&path, "read", e))?;
        ProducerStateManager::decode_snapshot(&path, offset, &bytes)
    }
}

/// Path of the snapshot as of `offset`.
pub(crate) fn snapshot_path(dir: &Path, offset: Offset) -> PathBuf {
    dir.join(format!("{:020}{SNAPSHOT_SUFFIX}", offset.0))
}

/// The offsets of the snapshots in `dir`, oldest first.
pub(crate) fn list_snapshots(disk: &dyn Disk, dir: &Path) -> Result<Vec<Offset>> {
    let mut offsets = Vec::new();
    let names = disk.list_dir(dir).map_err(|e| Error::io(dir, "list", e))?;
    for name in names {
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(SNAPSHOT_SUFFIX)) else {
            continue;
        };
        if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(offset) = stem.parse() {
                offsets.push(Offset(offset));
            }
        }
    }
    offsets.sort();
    Ok(offsets)
}

/// Deletes the snapshots of `dir` for which `doomed(offset)` holds. Returns
/// whether any was deleted (the caller fsyncs the directory when it matters).
pub(crate) fn delete_snapshots(
    disk: &dyn Disk,
    dir: &Path,
    doomed: impl Fn(Offset) -> bool,
) -> Result<bool> {
    let mut deleted = false;
    for offset in list_snapshots(disk, dir)? {
        if doomed(offset) {
            let path = snapshot_path(dir, offset);
            match disk.remove_file(&path) {
                Ok(()) => deleted = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&path, "delete", e)),
            }
        }
    }
    Ok(deleted)
}

/// Bounds-checked little-endian reads; `None` past the end.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.buf.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Option<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::disk::StdDisk;

    const PRODUCER: ProducerId = ProducerId(7);
    /// The epoch of the leader deciding, as an `OutOfOrderSequence` names it.
    const TEST_EPOCH: LeaderEpoch = LeaderEpoch(4);

    /// A header of `records` records of `PRODUCER` at `offset`.
    fn batch(epoch: i16, base_sequence: i32, records: u32, offset: u64) -> BatchHeader {
        BatchHeader {
            base_offset: Offset(offset),
            batch_length: 100,
            leader_epoch: LeaderEpoch(3),
            crc: 0,
            attributes: 0,
            last_offset_delta: records - 1,
            first_timestamp: 1_000,
            max_timestamp: 1_000 + offset as i64,
            producer_id: PRODUCER,
            producer_epoch: ProducerEpoch(epoch),
            base_sequence: Sequence(base_sequence),
            record_count: records,
        }
    }

    /// Seven batches of two records each, sequences 0..14, offsets 0..14.
    fn seven_batches() -> ProducerStateManager {
        let mut state = ProducerStateManager::empty();
        for i in 0..7 {
            state.record(&batch(0, 2 * i, 2, 2 * i as u64));
        }
        state
    }

    #[test]
    fn leader_check_follows_kafka_rules() {
        let state = seven_batches();
        let dup = |first: u64| {
            Ok(LeaderCheck::Duplicate(BatchMetadata {
                first_sequence: Sequence(first as i32),
                last_sequence: Sequence(first as i32 + 1),
                first_offset: Offset(first),
                last_offset: Offset(first + 1),
                leader_epoch: LeaderEpoch(3),
                max_timestamp_ms: 1_000 + first as i64,
            }))
        };
        let out_of_order = |expected: i32, received: i32| {
            Err::<LeaderCheck, _>(format!(
                "{:?}",
                Error::OutOfOrderSequence {
                    producer: PRODUCER,
                    expected: Sequence(expected),
                    received: Sequence(received),
                    leader_epoch: TEST_EPOCH,
                }
            ))
        };
        let fenced = |received: i16| {
            Err::<LeaderCheck, _>(format!(
                "{:?}",
                Error::ProducerFenced {
                    producer: PRODUCER,
                    current: ProducerEpoch(0),
                    received: ProducerEpoch(received),
                }
            ))
        };
        let table: Vec<(&str, BatchHeader, Result<LeaderCheck, String>)> = vec![
            (
                "next in order",
                batch(0, 14, 3, 99),
                Ok(LeaderCheck::Append),
            ),
            ("duplicate of the newest", batch(0, 12, 2, 99), dup(12)),
            ("duplicate of the 2nd newest", batch(0, 10, 2, 99), dup(10)),
            ("duplicate of the 3rd newest", batch(0, 8, 2, 99), dup(8)),
            ("duplicate of the 4th newest", batch(0, 6, 2, 99), dup(6)),
            ("duplicate of the 5th newest", batch(0, 4, 2, 99), dup(4)),
            // Kafka: an old sequence no longer cached fails checkSequence.
            (
                "6th newest is forgotten",
                batch(0, 2, 2, 99),
                out_of_order(14, 2),
            ),
            (
                "same first, other last",
                batch(0, 12, 3, 99),
                out_of_order(14, 12),
            ),
            ("gap", batch(0, 15, 1, 99), out_of_order(14, 15)),
            (
                "newer epoch from 0",
                batch(1, 0, 1, 99),
                Ok(LeaderCheck::Append),
            ),
            (
                "newer epoch not from 0",
                batch(1, 14, 1, 99),
                out_of_order(0, 14),
            ),
        ];
        for (name, header, expected) in table {
            let got = state
                .check_leader_append(&header, TEST_EPOCH)
                .map_err(|e| format!("{e:?}"));
            assert_eq!(got, expected, "{name}");
        }
        // A duplicate in an older epoch is still fenced, not a duplicate.
        let mut bumped = seven_batches();
        bumped.record(&batch(1, 0, 1, 14));
        let got = bumped
            .check_leader_append(&batch(0, 12, 2, 99), TEST_EPOCH)
            .map_err(|e| format!("{e:?}"));
        let expected = fenced(0)
            .map_err(|s| s.replace("current: ProducerEpoch(0)", "current: ProducerEpoch(1)"));
        assert_eq!(got, expected);
    }

    #[test]
    fn unknown_producer_may_start_anywhere_and_plain_batches_pass() {
        let state = ProducerStateManager::empty();
        assert_eq!(
            state
                .check_leader_append(&batch(0, 42, 1, 0), TEST_EPOCH)
                .unwrap(),
            LeaderCheck::Append
        );
        let mut plain = batch(0, 0, 1, 0);
        plain.producer_id = ProducerId::NONE;
        plain.base_sequence = Sequence::NONE;
        assert_eq!(
            seven_batches()
                .check_leader_append(&plain, TEST_EPOCH)
                .unwrap(),
            LeaderCheck::Append
        );
        let mut missing_sequence = batch(0, 0, 1, 0);
        missing_sequence.base_sequence = Sequence::NONE;
        assert!(matches!(
            state.check_leader_append(&missing_sequence, TEST_EPOCH),
            Err(Error::InvalidBatch { .. })
        ));
    }

    #[test]
    fn sequence_wraps_at_i32_max() {
        let mut state = ProducerStateManager::empty();
        // Records i32::MAX - 1, i32::MAX, 0: the last sequence wraps.
        state.record(&batch(0, i32::MAX - 1, 3, 0));
        assert_eq!(
            state.last_sequence(PRODUCER),
            Some((ProducerEpoch(0), Sequence(0)))
        );
        assert_eq!(
            state
                .check_leader_append(&batch(0, 1, 1, 3), TEST_EPOCH)
                .unwrap(),
            LeaderCheck::Append
        );
        assert!(matches!(
            state
                .check_leader_append(&batch(0, i32::MAX - 1, 3, 3), TEST_EPOCH)
                .unwrap(),
            LeaderCheck::Duplicate(_)
        ));
        let mut at_max = ProducerStateManager::empty();
        at_max.record(&batch(0, i32::MAX, 1, 0));
        assert_eq!(
            at_max
                .check_leader_append(&batch(0, 0, 1, 1), TEST_EPOCH)
                .unwrap(),
            LeaderCheck::Append
        );
        // After i32::MAX the next sequence is 0, so 1 skips one.
        let skipped = at_max.check_leader_append(&batch(0, 1, 1, 1), TEST_EPOCH);
        assert!(
            matches!(
                skipped,
                Err(Error::OutOfOrderSequence {
                    producer: PRODUCER,
                    expected: Sequence(0),
                    received: Sequence(1),
                    leader_epoch: TEST_EPOCH,
                })
            ),
            "{skipped:?}"
        );
        assert!(in_sequence(Sequence(i32::MAX), Sequence(0)));
        assert!(!in_sequence(Sequence(i32::MAX), Sequence(i32::MIN)));
    }

    #[test]
    fn replicated_epoch_change_starts_a_fresh_entry_and_keeps_five() {
        let mut state = seven_batches();
        assert_eq!(
            state.producers[&PRODUCER].batches.len(),
            BATCHES_PER_PRODUCER_MAX
        );
        state.record(&batch(2, 0, 1, 14));
        assert_eq!(state.producers[&PRODUCER].batches.len(), 1);
        assert_eq!(
            state.last_sequence(PRODUCER),
            Some((ProducerEpoch(2), Sequence(0)))
        );
        // Recording the same batch again (a rebuild overlapping) is a no-op.
        state.record(&batch(2, 0, 1, 14));
        assert_eq!(state.producers[&PRODUCER].batches.len(), 1);
    }

    #[test]
    fn idle_producers_expire() {
        let mut state = seven_batches();
        let newest_ms = 1_000 + 12;
        let day = Duration::from_secs(24 * 3600);
        let day_ms = day.as_millis() as i64;
        assert_eq!(state.remove_expired(newest_ms + day_ms - 1, day), 0);
        assert_eq!(state.len(), 1);
        assert_eq!(state.remove_expired(newest_ms + day_ms, day), 1);
        assert_eq!(state.len(), 0);
    }

    #[test]
    fn snapshot_round_trips_and_every_damage_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = seven_batches();
        let mut other = batch(4, 9, 1, 14);
        other.producer_id = ProducerId(3);
        state.record(&other);
        state
            .write_snapshot(&StdDisk, dir.path(), Offset(15))
            .unwrap();
        assert_eq!(
            list_snapshots(&StdDisk, dir.path()).unwrap(),
            vec![Offset(15)]
        );
        assert_eq!(
            ProducerStateManager::read_snapshot(&StdDisk, dir.path(), Offset(15)).unwrap(),
            state
        );
        let path = snapshot_path(dir.path(), Offset(15));
        assert!(path.ends_with("00000000000000000015.snapshot"));
        let good = std::fs::read(&path).unwrap();
        let mut damaged: Vec<Vec<u8>> = (0..good.len()).map(|n| good[..n].to_vec()).collect();
        for i in 0..good.len() {
            let mut bytes = good.clone();
            bytes[i] ^= 0x10;
            damaged.push(bytes);
        }
        for bytes in damaged {
            match ProducerStateManager::decode_snapshot(&path, Offset(15), &bytes) {
                Err(Error::InvalidCheckpoint { path: p, .. }) => assert_eq!(p, path),
                other => panic!("{bytes:?} gave {other:?}"),
            }
        }
        // A valid file under the wrong name is rejected too.
        match ProducerStateManager::decode_snapshot(&path, Offset(16), &good) {
            Err(Error::InvalidCheckpoint { path: p, reason }) => {
                assert_eq!(p, path);
                assert_eq!(
                    reason,
                    "holds the state as of offset 15, but its name says 16"
                );
            }
            other => panic!("a snapshot under the wrong name gave {other:?}"),
        }
        assert!(delete_snapshots(&StdDisk, dir.path(), |o| o == Offset(15)).unwrap());
        assert!(list_snapshots(&StdDisk, dir.path()).unwrap().is_empty());
    }
}
