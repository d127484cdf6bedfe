//! SPEC 2.3 / G5: damage to a stored log is detected, never served as data,
//! and never papered over. The log here is the one of issue 10: 3000 records
//! in 300 batches of 10 over 3 segments of 100 batches, in six leader epochs
//! (50 batches each), closed cleanly. Every case damages a copy of it.
//!
//! Each test states the failure it prevents: before these checks, a flipped
//! base offset served offset 1496 with the value written at 1480, a deleted
//! middle segment gave a log that silently ended early, a deleted checkpoint
//! reset the high watermark without a word, and a deleted checkpoint plus one
//! damaged batch cut 3000 committed records to 1580.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::storage_support::*;
use isrlog::{Error, LeaderEpoch, Log, LogConfig, Offset, RecordBatchBuilder};

pub const RECORDS: u64 = 3000;
pub const PER_BATCH: u64 = 10;
pub const BATCHES: u64 = RECORDS / PER_BATCH;
pub const BATCHES_PER_SEGMENT: u64 = 100;
pub const BATCHES_PER_EPOCH: u64 = 50;

/// The value stored at `offset`: every record's value names its offset, so
/// a record served under a wrong offset is caught.
pub fn value_at(offset: u64) -> Vec<u8> {
    format!("r{offset:05}").into_bytes()
}

fn batch_for(index: u64) -> isrlog::RecordBatch {
    let mut builder = RecordBatchBuilder::new(START_MS);
    for i in 0..PER_BATCH {
        builder.push(&value_at(index * PER_BATCH + i));
    }
    builder.build().unwrap()
}

/// Every batch has the same size (values are all 6 bytes).
fn batch_bytes() -> u64 {
    batch_for(0).size_bytes() as u64
}

pub fn config() -> LogConfig {
    LogConfig {
        segment_bytes_max: batch_bytes() * BATCHES_PER_SEGMENT,
        ..LogConfig::default()
    }
}

/// The clean log, built once; each case copies it.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<tempfile::TempDir> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let log = open(dir.path(), config());
            for index in 0..BATCHES {
                let epoch = LeaderEpoch((index / BATCHES_PER_EPOCH) as u32);
                log.assign_epoch(epoch, log.log_end_offset()).unwrap();
                log.append_as_leader(&batch_for(index), epoch).unwrap();
            }
            log.set_high_watermark(Offset(RECORDS));
            assert_eq!(segment_files(dir.path()).len(), 3);
            log.close().unwrap();
            dir
        })
        .path()
}

/// A fresh copy of the clean log.
fn copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(template(), dir.path());
    dir
}

/// Data file and byte position of batch `index`.
pub fn locate(dir: &Path, index: u64) -> (PathBuf, u64) {
    let segment = index / BATCHES_PER_SEGMENT;
    let file = segment_files(dir)[segment as usize].clone();
    (file, (index % BATCHES_PER_SEGMENT) * batch_bytes())
}

fn edit(file: &Path, position: u64, change: impl FnOnce(&mut u8)) {
    let mut bytes = std::fs::read(file).unwrap();
    change(&mut bytes[position as usize]);
    std::fs::write(file, bytes).unwrap();
}

/// What reading a log from start to end gave: each record checked against
/// what was written at its offset; a `Corrupt` error ends the walk over the
/// batch it names and continues after it.
#[derive(Debug, Default)]
pub struct Walk {
    pub records_correct: u64,
    pub corrupt: Vec<(Offset, PathBuf, u64, String)>,
    /// Batches served with a leader epoch other than the one written, as
    /// (base offset, epoch served).
    pub wrong_epochs: Vec<(Offset, LeaderEpoch)>,
}

/// The epoch the batch holding `offset` was written in.
pub fn epoch_at(offset: u64) -> LeaderEpoch {
    LeaderEpoch((offset / PER_BATCH / BATCHES_PER_EPOCH) as u32)
}

/// Reads every offset of `log`, one batch at a time. Panics on a wrong
/// record (served under a wrong offset, or with a wrong value) and on any
/// error other than `Corrupt` naming a data file.
pub fn walk(log: &Log, case: &str) -> Walk {
    let mut walk = Walk::default();
    let mut next = log.log_start_offset().0;
    let end = log.log_end_offset().0;
    while next < end {
        match log.read(Offset(next), 1) {
            Ok(read) => {
                assert!(
                    !read.is_empty(),
                    "{case}: empty read at {next} below the end {end}"
                );
                for batch in read.batches() {
                    let batch = batch.expect("a read batch passes its CRC again");
                    if batch.leader_epoch() != epoch_at(batch.base_offset().0) {
                        walk.wrong_epochs
                            .push((batch.base_offset(), batch.leader_epoch()));
                    }
                    for record in batch.records() {
                        let record = record.expect("a read record decodes");
                        if record.offset.0 >= next {
                            assert_eq!(
                                record.value.as_ref(),
                                value_at(record.offset.0).as_slice(),
                                "{case}: offset {} served a value written elsewhere",
                                record.offset
                            );
                            walk.records_correct += 1;
                        }
                    }
                    assert!(
                        batch.next_offset().0 > next,
                        "{case}: a read must make progress"
                    );
                    next = batch.next_offset().0;
                }
            }
            Err(Error::Corrupt {
                path,
                position,
                reason,
            }) => {
                assert!(
                    path.extension().is_some_and(|e| e == "log"),
                    "{case}: Corrupt names the data file, not {path:?}"
                );
                walk.corrupt.push((Offset(next), path, position, reason));
                // Skip the damaged batch: the next one starts at a multiple
                // of the batch size.
                next = (next / PER_BATCH + 1) * PER_BATCH;
            }
            Err(other) => panic!("{case}: read at {next}: unexpected error {other}"),
        }
    }
    walk
}

#[test]
fn a_flipped_base_offset_is_corrupt_on_read_never_a_wrong_record() {
    // Batch 148 holds offsets 1480..=1489; bit 4 of its base offset makes
    // it claim 1496..=1505, which used to be served for offset 1496.
    let dir = copy();
    let (file, position) = locate(dir.path(), 148);
    edit(&file, position, |b| *b ^= 0x10);
    let log = open(dir.path(), config());
    for offset in [1480, 1485, 1496] {
        match log.read(Offset(offset), 1 << 20) {
            Err(Error::Corrupt { path, reason, .. }) => {
                assert_eq!(path, file, "read at {offset}");
                assert!(reason.contains("1496"), "{reason}");
            }
            other => panic!("read at {offset}: expected Corrupt, got {other:?}"),
        }
    }
    // Reads whose walk from the index passes the bad batch fail too; every
    // failure names it, and every record served is the one written there.
    let walk = walk(&log, "");
    assert!(!walk.corrupt.is_empty());
    for (_, path, at, _) in &walk.corrupt {
        assert_eq!((path, *at), (&file, position));
    }
    assert_eq!(
        walk.records_correct + walk.corrupt.len() as u64 * PER_BATCH,
        RECORDS
    );
}

#[test]
fn a_flipped_leader_epoch_is_corrupt_on_read() {
    // Batch 150 is the first of epoch 3; a flip makes it claim epoch 2.
    for index in [150, 160] {
        let dir = copy();
        let (file, position) = locate(dir.path(), index);
        edit(&file, position + 12, |b| *b ^= 0x01);
        let log = open(dir.path(), config());
        match log.read(Offset(index * PER_BATCH), 1 << 20) {
            Err(Error::Corrupt {
                path,
                position: at,
                reason,
            }) => {
                assert_eq!((path, at), (file, position));
                assert!(reason.contains("leader epoch 2"), "{reason}");
            }
            other => panic!("batch {index}: expected Corrupt, got {other:?}"),
        }
        // A read that starts before it and runs into it is refused too: it
        // never hands out the bad batch's bytes.
        match log.read(Offset(index * PER_BATCH - 1), 1 << 20) {
            Err(Error::Corrupt { position: at, .. }) => assert_eq!(at, position),
            other => panic!("batch {index}: expected Corrupt, got {other:?}"),
        }
    }
}

#[test]
fn a_missing_middle_segment_refuses_to_open() {
    let dir = copy();
    let middle = segment_files(dir.path())[1].clone();
    std::fs::remove_file(&middle).unwrap();
    match open_with(dir.path(), config(), &clock()) {
        Err(Error::Corrupt { path, reason, .. }) => {
            // The segment before the gap ends short of the one after it.
            assert_eq!(path, segment_files(dir.path())[0]);
            assert!(
                reason.contains("1000") && reason.contains("2000"),
                "{reason}"
            );
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Refusing touched nothing: with the segment back, the log is whole.
    copy_dir_file(template(), dir.path(), &middle);
    let log = open(dir.path(), config());
    assert_eq!(walk(&log, "").records_correct, RECORDS);
}

fn copy_dir_file(from_dir: &Path, to_dir: &Path, file: &Path) {
    let name = file.file_name().unwrap();
    std::fs::copy(from_dir.join(name), to_dir.join(name)).unwrap();
}

#[test]
fn a_missing_first_segment_refuses_to_open() {
    let dir = copy();
    std::fs::remove_file(&segment_files(dir.path())[0]).unwrap();
    match open_with(dir.path(), config(), &clock()) {
        Err(Error::Corrupt { reason, .. }) => assert!(reason.contains("missing"), "{reason}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn a_segment_that_ends_short_of_the_next_refuses_to_open() {
    // The middle segment loses its last batch (a whole one: no torn bytes).
    let dir = copy();
    let middle = segment_files(dir.path())[1].clone();
    let len = std::fs::metadata(&middle).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&middle)
        .unwrap();
    file.set_len(len - batch_bytes()).unwrap();
    match open_with(dir.path(), config(), &clock()) {
        Err(Error::Corrupt { path, reason, .. }) => {
            assert_eq!(path, middle);
            assert!(reason.contains("1990"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn a_segment_whose_first_batch_is_not_its_name_refuses_to_open() {
    // The last segment's first batch claims offset 2000 + 2^40.
    let dir = copy();
    let (file, position) = locate(dir.path(), 200);
    assert_eq!(position, 0);
    edit(&file, 5, |b| *b ^= 0x01);
    match open_with(dir.path(), config(), &clock()) {
        Err(Error::Corrupt {
            path,
            position,
            reason,
        }) => {
            assert_eq!((path, position), (file, 0));
            assert!(reason.contains("expected 2000"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn a_missing_log_checkpoint_is_reported() {
    let dir = copy();
    std::fs::remove_file(dir.path().join("log-state.checkpoint")).unwrap();
    let log = open(dir.path(), config());
    let report = log.recovery_report();
    assert!(report.high_watermark_unknown);
    assert!(!report.is_clean());
    assert!(
        report
            .checkpoint_problems
            .iter()
            .any(|p| p.contains("log-state.checkpoint is missing")),
        "{report:?}"
    );
    assert_eq!(log.high_watermark(), Offset::ZERO);
    assert_eq!(log.log_end_offset(), Offset(RECORDS));
    assert_eq!(walk(&log, "").records_correct, RECORDS);
}

#[test]
fn a_missing_checkpoint_and_a_damaged_middle_batch_refuse_rather_than_truncate() {
    // Batch 158 (offsets 1580..=1589): a record byte, covered by the CRC.
    let dir = copy();
    std::fs::remove_file(dir.path().join("log-state.checkpoint")).unwrap();
    let (file, position) = locate(dir.path(), 158);
    edit(&file, position + 100, |b| *b ^= 0x04);
    match open_with(dir.path(), config(), &clock()) {
        Err(Error::Corrupt {
            path,
            position: at,
            reason,
        }) => {
            assert_eq!((path, at), (file, position));
            assert!(reason.contains("may have been committed"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Nothing was cut: the files are as they were.
    let sizes: Vec<u64> = segment_files(dir.path())
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .collect();
    assert_eq!(sizes, vec![batch_bytes() * BATCHES_PER_SEGMENT; 3]);
}

#[test]
fn a_missing_checkpoint_and_a_torn_last_batch_recover_the_prefix() {
    // The one tail recovery may cut with the high watermark unknown: the
    // last batch, with nothing valid after it (a torn write).
    let dir = copy();
    std::fs::remove_file(dir.path().join("log-state.checkpoint")).unwrap();
    let (file, position) = locate(dir.path(), BATCHES - 1);
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(position + 30).unwrap();
    let log = open(dir.path(), config());
    assert_eq!(log.log_end_offset(), Offset(RECORDS - PER_BATCH));
    assert_eq!(log.recovery_report().truncations.len(), 1);
    assert_eq!(walk(&log, "").records_correct, RECORDS - PER_BATCH);
}

/// One header field of a batch (SPEC 2.2's layout, `src/record/batch.rs`),
/// or a byte of its records.
const FIELDS: [(&str, u64, u64); 14] = [
    ("base offset", 0, 8),
    ("length", 8, 4),
    ("leader epoch", 12, 4),
    ("magic", 16, 1),
    ("crc", 17, 4),
    ("attributes", 21, 2),
    ("last offset delta", 23, 4),
    ("first timestamp", 27, 8),
    ("max timestamp", 35, 8),
    ("producer id", 43, 8),
    ("producer epoch", 51, 2),
    ("base sequence", 53, 4),
    ("record count", 57, 4),
    ("a record byte", 61 + 45, 1),
];

#[derive(Clone, Copy, Debug)]
enum Damage {
    /// Flip the lowest bit of the field's first byte.
    FlipLow,
    /// Flip the highest bit of the field's last byte.
    FlipHigh,
    /// Zero the whole field.
    Zero,
    /// Cut the file where the field starts.
    TruncateAt,
}

/// Which of the files beside the segments to delete as well.
#[derive(Clone, Copy, Debug)]
enum Deleted {
    Nothing,
    Indexes,
    LogCheckpoint,
    EpochCheckpoint,
    ProducerSnapshots,
    All,
}

fn delete(dir: &Path, deleted: Deleted) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let index = name.ends_with(".index");
        let log_checkpoint = name == "log-state.checkpoint";
        let epoch_checkpoint = name == "leader-epoch.checkpoint";
        let snapshot = name.ends_with(".snapshot");
        let go = match deleted {
            Deleted::Nothing => false,
            Deleted::Indexes => index,
            Deleted::LogCheckpoint => log_checkpoint,
            Deleted::EpochCheckpoint => epoch_checkpoint,
            Deleted::ProducerSnapshots => snapshot,
            Deleted::All => index || log_checkpoint || epoch_checkpoint || snapshot,
        };
        if go {
            std::fs::remove_file(&path).unwrap();
        }
    }
}

/// Runs one case; returns whether the log refused to open.
fn damage_case(batch: u64, field: (&str, u64, u64), damage: Damage, deleted: Deleted) -> bool {
    let case = format!(
        "batch {batch}, {} ({damage:?}), deleted {deleted:?}",
        field.0
    );
    let dir = copy();
    let (file, batch_position) = locate(dir.path(), batch);
    let at = batch_position + field.1;
    let last = at + field.2 - 1;
    match damage {
        Damage::FlipLow => edit(&file, at, |b| *b ^= 0x01),
        Damage::FlipHigh => edit(&file, last, |b| *b ^= 0x80),
        Damage::Zero => {
            let mut bytes = std::fs::read(&file).unwrap();
            bytes[at as usize..=last as usize].fill(0);
            std::fs::write(&file, bytes).unwrap();
        }
        Damage::TruncateAt => {
            let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
            f.set_len(at).unwrap();
        }
    }
    delete(dir.path(), deleted);
    let checkpoint_kept = !matches!(deleted, Deleted::LogCheckpoint | Deleted::All);
    let log = match open_with(dir.path(), config(), &clock()) {
        Err(Error::Corrupt { path, reason, .. }) => {
            assert!(
                path.starts_with(dir.path()),
                "{case}: Corrupt names {path:?}"
            );
            assert!(!reason.is_empty(), "{case}");
            return true;
        }
        Err(other) => panic!("{case}: refused with an unclear error: {other}"),
        Ok(log) => log,
    };
    let walk = walk(&log, &case);
    let lost_records = RECORDS - log.log_end_offset().0;
    if lost_records > 0 {
        // The one loss recovery may decide on its own (SPEC 2.3): a tail
        // with nothing valid after it, when the high watermark is unknown.
        // Without the checkpoint, a log cut in its last segment cannot be
        // told from a shorter log; the leader supplies the rest again.
        let in_last_segment = batch / BATCHES_PER_SEGMENT == BATCHES / BATCHES_PER_SEGMENT - 1;
        let nothing_valid_after =
            batch == BATCHES - 1 || (matches!(damage, Damage::TruncateAt) && in_last_segment);
        assert!(
            !checkpoint_kept && nothing_valid_after && log.log_end_offset().0 == batch * PER_BATCH,
            "{case}: recovery lost {lost_records} committed records ({:?})",
            log.recovery_report()
        );
    }
    if checkpoint_kept {
        assert_eq!(log.high_watermark(), Offset(RECORDS), "{case}");
    }
    for (_, path, position, reason) in &walk.corrupt {
        // A damaged length sends the walk into the next batch's bytes, which
        // are then what fails to parse: the blame lands at most one batch on.
        assert!(
            path == &file
                && (batch_position..batch_position + 2 * batch_bytes()).contains(position),
            "{case}: a read blamed {path:?} at {position}: {reason}"
        );
    }
    assert_eq!(
        walk.records_correct + walk.corrupt.len() as u64 * PER_BATCH,
        log.log_end_offset().0,
        "{case}"
    );
    // An epoch is checked against the epoch cache. With the cache file
    // deleted it is rebuilt from the batches themselves, and a damaged
    // epoch that still never goes back (say 3 -> 2 on the first batch of
    // epoch 3) cannot be told from a real one: the records are right, the
    // epoch served is not. Anything else is a wrong record.
    let epoch_file_deleted = matches!(deleted, Deleted::EpochCheckpoint | Deleted::All);
    let undetectable = epoch_file_deleted
        && field.0 == "leader epoch"
        && walk
            .wrong_epochs
            .iter()
            .all(|(base, _)| base.0 == batch * PER_BATCH);
    assert!(
        walk.wrong_epochs.is_empty() || undetectable,
        "{case}: batches served with a wrong leader epoch: {:?}",
        walk.wrong_epochs
    );
    false
}

/// Issue 10's matrix: every header field of a batch in the first, a middle
/// and the last segment (and the first batch of a segment, and the log's
/// last batch), flipped, zeroed or cut there, with the indexes and
/// checkpoint files kept or deleted alone or together. After each, the log
/// either refuses to open with `Corrupt` naming a file, or opens with every
/// committed record either served correctly or refused by a read with
/// `Corrupt` naming the damaged batch. Never a wrong record, never a panic.
#[test]
fn corruption_matrix_recovers_or_refuses_never_serves_a_wrong_record() {
    let deletions = [
        Deleted::Nothing,
        Deleted::Indexes,
        Deleted::LogCheckpoint,
        Deleted::EpochCheckpoint,
        Deleted::ProducerSnapshots,
        Deleted::All,
    ];
    let mut cases = 0;
    let mut refused = 0;
    for batch in [50, 100, 150, 250, BATCHES - 1] {
        for field in FIELDS {
            for damage in [Damage::FlipLow, Damage::FlipHigh, Damage::Zero] {
                for deleted in deletions {
                    cases += 1;
                    refused += u32::from(damage_case(batch, field, damage, deleted));
                }
            }
        }
        for at in [0, 30, 61 + 45] {
            for deleted in deletions {
                cases += 1;
                let field = ("cut", at, 1);
                refused += u32::from(damage_case(batch, field, Damage::TruncateAt, deleted));
            }
        }
    }
    assert!(
        refused > 0 && refused < cases,
        "{refused} of {cases} refused"
    );
}

#[test]
fn an_index_entry_that_misses_its_batch_does_not_fail_reads() {
    // The middle segment's fourth index entry keeps its offset but points
    // one batch further: still in order, so the open-time sanity check
    // passes, but a walk from it finds a batch that starts 10 offsets later.
    // Reads must blame the index, not the data, and serve the records.
    let dir = copy();
    let index = dir.path().join("00000000000000001000.index");
    let mut bytes = std::fs::read(&index).unwrap();
    assert!(bytes.len() >= 8 * 5, "the middle segment has index entries");
    let slot = 3 * 8;
    let position = u32::from_le_bytes(bytes[slot + 4..slot + 8].try_into().unwrap());
    let next = u32::from_le_bytes(bytes[slot + 12..slot + 16].try_into().unwrap());
    let moved = position + batch_bytes() as u32;
    assert!(moved < next, "the moved entry stays before the next one");
    bytes[slot + 4..slot + 8].copy_from_slice(&moved.to_le_bytes());
    std::fs::write(&index, bytes).unwrap();
    let log = open(dir.path(), config());
    let walk = walk(&log, "misplaced index entry");
    assert!(walk.corrupt.is_empty(), "{:?}", walk.corrupt);
    assert_eq!(walk.records_correct, RECORDS);
}

/// Seed 60134360: a flipped bit in an index entry's position led a walk
/// into the middle of a batch, where no header parses ("batch length
/// 1174405120 exceeds the maximum"), and the node reported its intact data
/// file corrupt. Reads already fell back to a walk from the segment start;
/// truncation, the producer state rebuild and the epoch lookups did not.
/// With the entry pointing 4 bytes into its batch, every read serves the
/// right records, and a truncation inside the entry's range cuts where it
/// was asked to.
#[test]
fn an_index_entry_inside_a_batch_fails_no_read_or_truncation() {
    let dir = copy();
    let index = dir.path().join("00000000000000001000.index");
    let mut bytes = std::fs::read(&index).unwrap();
    assert!(bytes.len() >= 8 * 5, "the middle segment has index entries");
    let slot = 3 * 8;
    let relative = u32::from_le_bytes(bytes[slot..slot + 4].try_into().unwrap());
    let position = u32::from_le_bytes(bytes[slot + 4..slot + 8].try_into().unwrap());
    bytes[slot + 4..slot + 8].copy_from_slice(&(position + 4).to_le_bytes());
    std::fs::write(&index, bytes).unwrap();
    let log = open(dir.path(), config());
    let found = walk(&log, "index entry inside a batch");
    assert!(found.corrupt.is_empty(), "{:?}", found.corrupt);
    assert_eq!(found.records_correct, RECORDS);
    let cut = 1000 + u64::from(relative) + PER_BATCH + 3;
    log.truncate_to(Offset(cut)).unwrap();
    assert_eq!(log.log_end_offset(), Offset(cut - 3));
    let found = walk(&log, "truncated through an index entry inside a batch");
    assert!(found.corrupt.is_empty(), "{:?}", found.corrupt);
    assert_eq!(found.records_correct, cut - 3);
}

/// The same fallback in the active segment, with the entry moved down into
/// an earlier batch, more than `index_interval_bytes` below its own: the
/// truncation cuts at the entry's batch, and the log takes appends there
/// and serves them. (That the misplaced entry itself is dropped, so that
/// an append at its offset is not indexed after it, is
/// `truncation_drops_entries_naming_the_new_end_or_later` in
/// `offset_index.rs`: here the reopened active segment's index is full,
/// and indexes nothing.)
#[test]
fn a_truncation_through_a_misplaced_index_entry_cuts_where_asked() {
    let dir = copy();
    let index = dir.path().join("00000000000000002000.index");
    let mut bytes = std::fs::read(&index).unwrap();
    let slot = 3 * 8;
    let relative = u32::from_le_bytes(bytes[slot..slot + 4].try_into().unwrap());
    let position = u32::from_le_bytes(bytes[slot + 4..slot + 8].try_into().unwrap());
    let interval = LogConfig::default().index_interval_bytes as u32;
    assert!(
        position > interval + 100,
        "entry 3 lies past the first interval"
    );
    bytes[slot + 4..slot + 8].copy_from_slice(&(position - interval - 100).to_le_bytes());
    std::fs::write(&index, bytes).unwrap();
    let log = open(dir.path(), config());
    let end = 2000 + u64::from(relative);
    log.truncate_to(Offset(end + 3)).unwrap();
    assert_eq!(log.log_end_offset(), Offset(end));
    let epoch = LeaderEpoch(9);
    log.assign_epoch(epoch, log.log_end_offset()).unwrap();
    for index in end / PER_BATCH..end / PER_BATCH + 3 {
        log.append_as_leader(&batch_for(index), epoch).unwrap();
    }
    assert_eq!(log.log_end_offset(), Offset(end + 3 * PER_BATCH));
    let mut next = end - PER_BATCH;
    while next < end + 3 * PER_BATCH {
        let read = log.read(Offset(next), 1).unwrap();
        let batch = read.batches().next().unwrap().unwrap();
        assert_eq!(batch.base_offset(), Offset(next));
        next = batch.next_offset().0;
    }
}

/// Recovery rebuilds an index whose entry it had to walk around: the walk
/// to the batch just below the recovery point (whose epoch recovery checks)
/// starts at a misplaced entry, falls back to the segment start, and the
/// index is rebuilt and reported, instead of being left for every read of
/// the segment to walk around (before, it was left as it was).
#[test]
fn recovery_rebuilds_an_index_it_walked_around() {
    let dir = copy();
    let index = dir.path().join("00000000000000001000.index");
    let mut bytes = std::fs::read(&index).unwrap();
    assert!(bytes.len() >= 8 * 5, "the middle segment has index entries");
    // Entry 3 is misplaced into its batch; the recovery point is entry 4's
    // offset, so recovery finds the recovery point through entry 4 and the
    // batch below it through entry 3.
    let slot = 3 * 8;
    let position = u32::from_le_bytes(bytes[slot + 4..slot + 8].try_into().unwrap());
    let next_relative = u32::from_le_bytes(bytes[slot + 8..slot + 12].try_into().unwrap());
    bytes[slot + 4..slot + 8].copy_from_slice(&(position + 4).to_le_bytes());
    std::fs::write(&index, bytes).unwrap();
    write_checkpoint(dir.path(), 1000 + u64::from(next_relative), RECORDS);
    let log = open_with(dir.path(), config(), &clock()).unwrap();
    let rebuilt = &log.recovery_report().indexes_rebuilt;
    assert_eq!(rebuilt.len(), 1, "{rebuilt:?}");
    assert_eq!(rebuilt[0].0, index);
    let found = walk(&log, "index rebuilt after a walk around one of its entries");
    assert!(found.corrupt.is_empty(), "{:?}", found.corrupt);
    assert_eq!(found.records_correct, RECORDS);
    log.close().unwrap();
    let bytes = std::fs::read(&index).unwrap();
    let entry = u32::from_le_bytes(bytes[slot + 4..slot + 8].try_into().unwrap());
    assert_eq!(
        entry, position,
        "the rebuilt index has the entry where it was written"
    );
}

/// Writes a log checkpoint with these fields into `dir`.
fn write_checkpoint(dir: &Path, recovery_point: u64, high_watermark: u64) {
    use isrlog::testing::fuzz::{encode_log_checkpoint, LogCheckpointFields};
    let bytes = encode_log_checkpoint(&LogCheckpointFields {
        recovery_point: Offset(recovery_point),
        high_watermark: Offset(high_watermark),
        log_start_offset: Offset::ZERO,
        clean_shutdown: false,
    })
    .unwrap();
    std::fs::write(dir.join("log-state.checkpoint"), bytes).unwrap();
}

/// A gap above the recovery point with no valid batch after it is what a
/// crash leaves, not lost data: a power loss right after a roll (the old
/// segment loses its unsynced last batch, the new one every byte), or a
/// crash while recovery deleted the segments after a tail it cut. The log
/// opens at the end of the data even though the checkpointed high watermark
/// (which may run ahead of what was flushed) is above it. With valid
/// batches after the gap, the same state is lost data and is refused.
#[test]
fn a_gap_with_nothing_valid_after_it_is_a_crash_not_lost_data() {
    for later_holds_data in [false, true] {
        let dir = copy();
        let files = segment_files(dir.path());
        let middle_len = std::fs::metadata(&files[1]).unwrap().len();
        let cut = std::fs::OpenOptions::new()
            .write(true)
            .open(&files[1])
            .unwrap();
        cut.set_len(middle_len - batch_bytes()).unwrap();
        if !later_holds_data {
            let emptied = std::fs::OpenOptions::new()
                .write(true)
                .open(&files[2])
                .unwrap();
            emptied.set_len(0).unwrap();
        }
        write_checkpoint(dir.path(), 1500, 3000);
        match (later_holds_data, open_with(dir.path(), config(), &clock())) {
            (false, Ok(log)) => {
                assert_eq!(log.log_end_offset(), Offset(1990));
                assert_eq!(walk(&log, "gap after a roll").records_correct, 1990);
            }
            (true, Err(Error::Corrupt { path, reason, .. })) => {
                assert_eq!(path, files[2]);
                assert!(reason.contains("1990"), "{reason}");
            }
            (later, other) => panic!("later segment holds data: {later}: {other:?}"),
        }
    }
}
