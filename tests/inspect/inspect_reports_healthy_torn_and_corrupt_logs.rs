//! Issue 15: `isrlog::inspect::inspect_dir` (and the `isrlog-inspect`
//! binary over it) reports a log directory's segments, batches, producers,
//! epoch cache and checkpoint, finds a torn tail and a flipped byte naming
//! file and byte position, predicts what recovery does (checked against
//! what `Log::open` then does on a copy), and changes nothing in the
//! directory it reads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::storage_support::*;
use isrlog::inspect::{
    inspect_dir, CheckpointState, EpochCacheState, IndexState, RecoveryAction, Report,
};
use isrlog::{
    LeaderEpoch, LogConfig, Offset, ProducerEpoch, ProducerId, RecordBatch, RecordBatchBuilder,
    Sequence,
};

const PRODUCER: ProducerId = ProducerId(7);
const PER_BATCH: u64 = 3;
const BATCHES: u64 = 9;
const BATCHES_PER_SEGMENT: u64 = 3;

/// Batch `index` of the healthy log: 3 records by producer 7, sequences
/// continuing from the batch before.
fn idempotent_batch(index: u64) -> RecordBatch {
    let mut builder = RecordBatchBuilder::new(START_MS);
    builder.producer(
        PRODUCER,
        ProducerEpoch(0),
        Sequence((index * PER_BATCH) as i32),
    );
    for i in 0..PER_BATCH {
        builder.push(format!("v{:04}", index * PER_BATCH + i).as_bytes());
    }
    builder.build().unwrap()
}

fn healthy_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: idempotent_batch(0).size_bytes() as u64 * BATCHES_PER_SEGMENT,
        ..LogConfig::default()
    }
}

/// Every file of the directory, name to contents: compared before and
/// after inspecting, it proves nothing was written, cut or created.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect()
}

/// Inspects `dir` and asserts that its files are byte for byte unchanged.
fn inspect_unchanged(dir: &Path) -> Report {
    let before = snapshot(dir);
    let report = inspect_dir(dir).unwrap();
    let after = snapshot(dir);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "inspecting created or removed files"
    );
    assert!(before == after, "inspecting changed a file's bytes");
    report
}

/// The healthy log: 9 idempotent batches over 3 segments, epochs 0 and 1,
/// high watermark at the end, closed cleanly.
fn healthy_log() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), healthy_config());
    for index in 0..BATCHES {
        let epoch = LeaderEpoch(u32::from(index >= 5));
        log.assign_epoch(epoch, log.log_end_offset()).unwrap();
        log.append_as_leader(&idempotent_batch(index), epoch)
            .unwrap();
    }
    log.set_high_watermark(Offset(BATCHES * PER_BATCH));
    log.close().unwrap();
    dir
}

#[test]
fn healthy_log_is_dumped_in_full_and_reported_healthy() {
    let dir = healthy_log();
    let mut report = inspect_unchanged(dir.path());
    assert!(report.is_healthy(), "{report}");
    assert!(report.damage.is_empty());
    assert!(report.recovery.is_empty());
    assert_eq!(
        report.checkpoint,
        CheckpointState::Valid {
            recovery_point: Offset(27),
            high_watermark: Offset(27),
            log_start_offset: Offset(0),
            clean_shutdown: true,
        }
    );
    assert_eq!(
        report.epoch_cache,
        EpochCacheState::Valid(vec![
            (LeaderEpoch(0), Offset(0)),
            (LeaderEpoch(1), Offset(15))
        ])
    );
    assert_eq!(report.segments.len(), 3);
    assert_eq!(report.batch_count(), BATCHES);
    assert_eq!(report.record_count(), BATCHES * PER_BATCH);
    assert_eq!(report.log_end_offset(), Some(Offset(27)));
    let batch_bytes = idempotent_batch(0).size_bytes() as u64;
    for (s, segment) in report.segments.iter().enumerate() {
        let base = s as u64 * BATCHES_PER_SEGMENT * PER_BATCH;
        assert_eq!(segment.base_offset, Offset(base));
        assert_eq!(segment.next_offset, Offset(base + 9));
        assert_eq!(segment.file_bytes, batch_bytes * BATCHES_PER_SEGMENT);
        assert_eq!(segment.valid_bytes, segment.file_bytes);
        assert!(
            matches!(segment.index, IndexState::Valid { .. }),
            "{:?}",
            segment.index
        );
        for (b, batch) in segment.batches.iter().enumerate() {
            let index = s as u64 * BATCHES_PER_SEGMENT + b as u64;
            assert_eq!(batch.position, b as u64 * batch_bytes);
            assert_eq!(batch.base_offset, Offset(index * PER_BATCH));
            assert_eq!(batch.last_offset, Offset(index * PER_BATCH + 2));
            assert_eq!(batch.record_count, 3);
            assert_eq!(batch.leader_epoch, LeaderEpoch(u32::from(index >= 5)));
            assert_eq!(batch.producer_id, PRODUCER);
            assert_eq!(batch.base_sequence, Sequence((index * PER_BATCH) as i32));
        }
    }
    // Rolls and the clean close write producer snapshots; the newest knows
    // producer 7's last batch.
    let newest = report
        .producer_snapshots
        .last()
        .expect("a producer snapshot");
    let producers = newest.producers.as_ref().unwrap();
    assert_eq!(producers.len(), 1);
    assert_eq!(producers[0].producer_id, PRODUCER);
    let (_, last_sequence, _, last_offset) = *producers[0].batches.last().unwrap();
    assert_eq!(
        (last_sequence, last_offset),
        (Sequence(26), Offset(26)),
        "{report}"
    );

    let text = report.to_string();
    assert!(
        text.contains("recovery point 27, high watermark 27"),
        "{text}"
    );
    assert!(
        text.contains("total: 3 segments, 9 batches, 27 records, log end offset 27"),
        "{text}"
    );
    assert!(text.contains("recovery would: nothing (healthy)"), "{text}");
    assert!(!text.contains("batch at byte"), "not verbose: {text}");
    report.verbose = true;
    let text = report.to_string();
    assert!(
        text.contains(&format!(
            "batch at byte {batch_bytes}: offsets 12..=14, epoch 0, 3 records"
        )),
        "{text}"
    );
    assert!(text.contains("producer-7 epoch 0 sequence 12"), "{text}");
}

/// The log of `torn_tail_recovers_to_last_complete_batch`: batches a (3
/// records, flushed), b (3) and c (4, epoch 1), dropped without close, so
/// the recovery point is 3 and the high watermark 0. Returns the byte
/// positions where b and c start, and the file's length.
fn crashed_log(dir: &Path) -> (u64, u64, u64) {
    let log = open(dir, dense_index());
    log.assign_epoch(LeaderEpoch(0), Offset(0)).unwrap();
    log.append_as_leader(&batch("a", 3), LeaderEpoch(0))
        .unwrap();
    log.flush().unwrap();
    log.append_as_leader(&batch("b", 3), LeaderEpoch(0))
        .unwrap();
    log.assign_epoch(LeaderEpoch(1), Offset(6)).unwrap();
    log.append_as_leader(&batch("c", 4), LeaderEpoch(1))
        .unwrap();
    let a = batch("a", 3).size_bytes() as u64;
    let b = batch("b", 3).size_bytes() as u64;
    let c = batch("c", 4).size_bytes() as u64;
    (a, a + b, a + b + c)
}

/// What `Log::open` does on a copy of `dir` (the original stays as it is).
fn recovery_of_a_copy(dir: &Path) -> isrlog::Result<isrlog::RecoveryReport> {
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir, copy.path());
    open_with(copy.path(), dense_index(), &clock()).map(|log| log.recovery_report().clone())
}

#[test]
fn torn_tail_is_found_and_the_cut_recovery_makes_is_predicted() {
    let dir = tempfile::tempdir().unwrap();
    let (_, c_start, c_end) = crashed_log(dir.path());
    let file = segment_files(dir.path()).remove(0);
    let full = std::fs::read(&file).unwrap();
    assert_eq!(full.len() as u64, c_end);
    let cut = c_start + 7;
    std::fs::write(&file, &full[..cut as usize]).unwrap();

    let report = inspect_unchanged(dir.path());
    assert!(!report.is_healthy());
    assert_eq!(report.batch_count(), 2);
    assert_eq!(report.record_count(), 6);
    assert_eq!(report.log_end_offset(), Some(Offset(6)));
    assert_eq!(report.damage.len(), 1, "{report}");
    let damage = &report.damage[0];
    assert_eq!((&damage.path, damage.position), (&file, c_start));
    assert_eq!(damage.offset, Offset(6));
    assert!(damage.reason.contains("torn"), "{}", damage.reason);
    assert_eq!(
        report.recovery,
        vec![RecoveryAction::TruncateTail {
            path: file.clone(),
            position: c_start,
            bytes: cut - c_start,
            reason: damage.reason.clone(),
        }]
    );
    let text = report.to_string();
    assert!(
        text.contains(&format!(
            "recovery would: truncate torn tail at byte {c_start} of file {} (7 bytes)",
            file.display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("DAMAGE {}:{c_start} (offset 6)", file.display())),
        "{text}"
    );

    // The prediction is what recovery does.
    let recovered = recovery_of_a_copy(dir.path()).unwrap();
    assert_eq!(recovered.truncations.len(), 1);
    assert_eq!(recovered.truncations[0].position, c_start);
    assert_eq!(recovered.truncations[0].bytes, cut - c_start);
    assert_eq!(recovered.log_end_offset, Offset(6));
}

#[test]
fn flipped_byte_above_the_recovery_point_is_a_corrupt_tail_to_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (_, c_start, c_end) = crashed_log(dir.path());
    let file = segment_files(dir.path()).remove(0);
    let mut bytes = std::fs::read(&file).unwrap();
    // A byte of c's last record value.
    bytes[c_end as usize - 2] ^= 0x40;
    std::fs::write(&file, &bytes).unwrap();

    let report = inspect_unchanged(dir.path());
    assert_eq!(report.damage.len(), 1, "{report}");
    let damage = &report.damage[0];
    assert_eq!((&damage.path, damage.position), (&file, c_start));
    assert!(damage.reason.contains("CRC mismatch"), "{}", damage.reason);
    assert!(matches!(
        &report.recovery[..],
        [RecoveryAction::TruncateTail { position, bytes, .. }]
            if *position == c_start && *bytes == c_end - c_start
    ));
    let recovered = recovery_of_a_copy(dir.path()).unwrap();
    assert_eq!(recovered.truncations[0].position, c_start);
}

#[test]
fn flipped_byte_below_the_recovery_point_is_named_and_never_cut() {
    let dir = healthy_log();
    let batch_bytes = idempotent_batch(0).size_bytes() as u64;
    // Batch 4: the second batch of the second segment.
    let file = segment_files(dir.path())[1].clone();
    let mut bytes = std::fs::read(&file).unwrap();
    let position = batch_bytes;
    bytes[(position + batch_bytes - 3) as usize] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();

    let report = inspect_unchanged(dir.path());
    assert!(!report.is_healthy());
    assert_eq!(report.damage.len(), 1, "{report}");
    let damage = &report.damage[0];
    assert_eq!((&damage.path, damage.position), (&file, position));
    assert_eq!(damage.offset, Offset(12));
    assert!(damage.reason.contains("CRC mismatch"), "{}", damage.reason);
    // Batches before the damage are still listed; the walk of that segment
    // stops at it.
    assert_eq!(report.segments[1].batches.len(), 1);
    assert_eq!(report.segments[1].valid_bytes, position);
    assert!(matches!(
        &report.recovery[..],
        [RecoveryAction::Refuse { path, position: p, reason }]
            if path == &file && *p == position && reason.contains("below the recovery point 27")
    ));
    let text = report.to_string();
    assert!(
        text.contains("recovery would: refuse to open: corrupt batch below the recovery point 27"),
        "{text}"
    );
    assert!(
        text.contains(&format!("at {}:{position}", file.display())),
        "{text}"
    );
}

#[test]
fn the_binary_exits_0_when_healthy_1_on_damage_2_on_usage() {
    let exe = env!("CARGO_BIN_EXE_isrlog-inspect");
    let healthy = healthy_log();
    let out = Command::new(exe)
        .arg("--verbose")
        .arg(healthy.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("9 batches, 27 records"), "{stdout}");
    assert!(
        stdout.contains("batch at byte 0: offsets 0..=2"),
        "{stdout}"
    );

    let torn = tempfile::tempdir().unwrap();
    let (_, c_start, c_end) = crashed_log(torn.path());
    let file = segment_files(torn.path()).remove(0);
    let full = std::fs::read(&file).unwrap();
    std::fs::write(&file, &full[..(c_end - 1) as usize]).unwrap();
    let before = snapshot(torn.path());
    let out = Command::new(exe).arg(torn.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "truncate torn tail at byte {c_start} of file {}",
            file.display()
        )),
        "{stdout}"
    );
    assert!(
        before == snapshot(torn.path()),
        "the binary changed the directory"
    );

    let out = Command::new(exe).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage"));
    let out = Command::new(exe)
        .arg(torn.path().join("no-such-dir"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-dir"));
}

#[test]
fn garbage_index_and_missing_checkpoint_are_what_recovery_repairs() {
    let dir = healthy_log();
    let index = segment_files(dir.path())[1].with_extension("index");
    std::fs::write(&index, [0xffu8; 12]).unwrap();
    std::fs::remove_file(dir.path().join("log-state.checkpoint")).unwrap();

    let report = inspect_unchanged(dir.path());
    assert!(!report.is_healthy());
    assert!(report.damage.is_empty(), "the data is intact: {report}");
    assert_eq!(report.checkpoint, CheckpointState::Missing);
    assert!(
        matches!(&report.segments[1].index, IndexState::Problem(reason) if reason.contains("not a multiple of 8")),
        "{:?}",
        report.segments[1].index
    );
    assert!(matches!(
        &report.recovery[..],
        [RecoveryAction::RescanWholeLog { .. }, RecoveryAction::RebuildIndex { path, .. }]
            if path == &index
    ));
    let text = report.to_string();
    assert!(
        text.contains(&format!(
            "recovery would: rebuild index {}",
            index.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("recovery would: validate the whole log from its start"),
        "{text}"
    );

    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), copy.path());
    let recovered = open(copy.path(), healthy_config())
        .recovery_report()
        .clone();
    assert!(recovered.high_watermark_unknown);
    let rebuilt: Vec<&PathBuf> = recovered.indexes_rebuilt.iter().map(|(p, _)| p).collect();
    assert_eq!(rebuilt, vec![&copy.path().join(index.file_name().unwrap())]);
}

#[test]
fn a_missing_first_segment_is_a_refusal_naming_the_next() {
    let dir = healthy_log();
    let files = segment_files(dir.path());
    std::fs::remove_file(&files[0]).unwrap();
    std::fs::remove_file(files[0].with_extension("index")).unwrap();

    let report = inspect_unchanged(dir.path());
    assert_eq!(report.segments.len(), 2);
    assert!(
        matches!(
            &report.recovery[..],
            [RecoveryAction::Refuse { path, position: 0, reason }]
                if path == &files[1] && reason.contains("offsets 0..9 is")
        ),
        "{report}"
    );
    let text = report.to_string();
    assert!(
        text.contains("recovery would: refuse to open: the log starts at offset 0"),
        "{text}"
    );
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), copy.path());
    let err = open_with(copy.path(), healthy_config(), &clock()).unwrap_err();
    assert!(matches!(err, isrlog::Error::Corrupt { .. }), "{err}");
}

/// Issue 25: a log whose start moved past a leader change, inside a
/// segment, then closed cleanly and reopened (which trims the epoch file to
/// the log start): the batches below the log start carry an earlier epoch
/// than the file's first entry, which is no damage (recovery checks them
/// against the epoch the cache gives the log start, and so does inspect).
#[test]
fn a_log_start_past_a_leader_change_is_reported_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes_max: 1 << 20,
        ..LogConfig::default()
    };
    {
        let log = open(dir.path(), config.clone());
        for (epoch, count) in [(0, 3), (2, 3)] {
            for i in 0..count {
                log.append_as_leader(&batch(&format!("e{epoch}-{i}"), 2), LeaderEpoch(epoch))
                    .unwrap();
            }
        }
        log.set_high_watermark(log.log_end_offset());
        log.set_log_start_offset(Offset(8)).unwrap();
        log.close().unwrap();
    }
    // The reopen trims the epoch file: its first entry is now (2, 8).
    open(dir.path(), config).close().unwrap();
    let report = inspect_unchanged(dir.path());
    assert!(report.is_healthy(), "{report}");
}
