//! SPEC 4 and 2.7 on one log: the producer state is snapshotted at segment
//! roll and clean close, rebuilt on open from the newest snapshot plus the
//! tail (or from the batches alone when the snapshot is damaged, which is
//! reported, never a refusal to open), rolled back by truncation, built
//! by followers from the batches they append, and expired after
//! `producer_id_expiration` by the log's clock.

use std::time::Duration;

use crate::storage_support::*;
use isrlog::{
    Error, LeaderEpoch, Log, LogConfig, ManualClock, Offset, ProducerEpoch, ProducerId,
    RecordBatch, RecordBatchBuilder, Sequence,
};

const P: ProducerId = ProducerId(11);
const EPOCH: LeaderEpoch = LeaderEpoch(1);

fn idempotent(sequence: i32, records: usize) -> RecordBatch {
    let mut b = RecordBatchBuilder::new(START_MS);
    b.producer(P, ProducerEpoch(0), Sequence(sequence));
    for i in 0..records {
        b.push(format!("s{sequence}-{i}").as_bytes());
    }
    b.build().unwrap()
}

/// Small segments: a roll every few batches.
fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes_max: 400,
        ..dense_index()
    }
}

/// Appends batches of 2 records with sequences 0, 2, 4, ... 2(n-1).
fn append_n(log: &Log, n: i32) {
    for i in 0..n {
        let info = log.append_as_leader(&idempotent(2 * i, 2), EPOCH).unwrap();
        assert!(!info.duplicate);
    }
}

fn snapshots(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".snapshot"))
        .collect();
    names.sort();
    names
}

#[test]
fn reopen_loads_the_newest_snapshot_and_scans_only_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open_with(dir.path(), small_segments(), &clock).unwrap();
    append_n(&log, 12);
    assert!(log.stats().rolls >= 2, "{:?}", log.stats());
    assert!(!snapshots(dir.path()).is_empty());
    let end = log.log_end_offset();
    drop(log); // crash: the last snapshot is the last roll's

    let log = open_with(dir.path(), small_segments(), &clock).unwrap();
    let report = log.recovery_report().clone();
    let snapshot = report
        .producer_snapshot
        .expect("a snapshot from the last roll");
    assert!(snapshot > Offset(0) && snapshot <= end);
    // Batches of 2 records: the tail after the snapshot, and nothing else.
    assert_eq!(
        report.producer_batches_scanned,
        end.distance_from(snapshot) / 2
    );
    assert!(report.producer_batches_scanned < 12);
    assert_eq!(
        log.producer_last_sequence(P),
        Some((ProducerEpoch(0), Sequence(23)))
    );
    // A retry of the newest batch is a duplicate with its original offsets.
    let dup = log.append_as_leader(&idempotent(22, 2), EPOCH).unwrap();
    assert!(dup.duplicate);
    assert_eq!((dup.base_offset, dup.last_offset), (Offset(22), Offset(23)));
    assert_eq!(log.log_end_offset(), end);
    log.close().unwrap();

    // A clean close snapshots at the log end: nothing to scan.
    let log = open_with(dir.path(), small_segments(), &clock).unwrap();
    assert_eq!(log.recovery_report().producer_snapshot, Some(end));
    assert_eq!(log.recovery_report().producer_batches_scanned, 0);
    assert!(
        log.append_as_leader(&idempotent(20, 2), EPOCH)
            .unwrap()
            .duplicate
    );
}

#[test]
fn damaged_snapshot_is_reported_and_rebuilt_from_the_batches() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open_with(dir.path(), small_segments(), &clock).unwrap();
    append_n(&log, 6);
    let end = log.log_end_offset();
    log.close().unwrap();
    let newest = dir.path().join(snapshots(dir.path()).pop().unwrap());
    std::fs::write(&newest, b"garbage").unwrap();

    let log = open_with(dir.path(), small_segments(), &clock).unwrap();
    let report = log.recovery_report();
    assert!(
        report
            .checkpoint_problems
            .iter()
            .any(|p| p.contains(&newest.display().to_string())),
        "{report:?}"
    );
    assert!(!report.is_clean());
    assert_ne!(report.producer_snapshot, Some(end));
    assert_eq!(
        log.producer_last_sequence(P),
        Some((ProducerEpoch(0), Sequence(11)))
    );
    assert!(
        log.append_as_leader(&idempotent(10, 2), EPOCH)
            .unwrap()
            .duplicate
    );
    assert!(!newest.exists(), "the damaged snapshot is removed");
}

/// A log of four flushed idempotent batches of 2 records (sequences 0, 2,
/// 4, 6), left by a crash (no snapshot at its end); its directory, its
/// open handle, the data file and where each batch starts.
fn four_flushed_batches(
    clock: &isrlog::ManualClock,
) -> (tempfile::TempDir, Log, std::path::PathBuf, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let log = open_with(dir.path(), dense_index(), clock).unwrap();
    let mut starts = Vec::new();
    let mut at = 0;
    for i in 0..4 {
        let info = log.append_as_leader(&idempotent(2 * i, 2), EPOCH).unwrap();
        starts.push(at);
        at += log.read(info.base_offset, 1).unwrap().records.len() as u64;
    }
    log.flush().unwrap();
    assert!(snapshots(dir.path()).is_empty());
    let file = segment_files(dir.path()).remove(0);
    (dir, log, file, starts)
}

/// Flips `mask` in the byte at `position` of `file`.
fn flip(file: &std::path::Path, position: u64, mask: u8) {
    let mut bytes = std::fs::read(file).unwrap();
    bytes[position as usize] ^= mask;
    std::fs::write(file, bytes).unwrap();
}

/// `result` is `Corrupt` naming `file` at `position` as a CRC mismatch
/// found rebuilding the producer state; `what` names the damage.
fn assert_corrupt_rebuild<T: std::fmt::Debug>(
    result: isrlog::Result<T>,
    file: &std::path::Path,
    position: u64,
    what: &str,
) {
    match result {
        Err(Error::Corrupt {
            path,
            position: at,
            reason,
        }) => {
            assert_eq!(path, file, "{what}");
            assert_eq!(at, position, "{what}");
            assert!(reason.contains("CRC mismatch"), "{what}: {reason}");
            assert!(reason.contains("producer state"), "{what}: {reason}");
        }
        other => panic!("{what}: expected Corrupt at {position}, got {other:?}"),
    }
}

/// A flipped bit in a flushed batch (below the recovery point, which
/// recovery does not scan) is `Corrupt` naming the file and the batch's
/// position when the producer state is rebuilt from the batches, never a
/// state with a wrong sequence (simulator, seed 60105060: sequence 245
/// read as 65781 made a leader refuse a batch it held, and the producer's
/// next record was acknowledged as its duplicate), nor one that skips the
/// batch (bit 63 of the producer id makes it negative, which is not
/// "some").
#[test]
fn a_flipped_producer_field_below_the_recovery_point_is_corrupt_not_state() {
    // (what, batch, byte in the header, mask)
    let flips: [(&str, usize, u64, u8); 2] = [
        ("bit 16 of the base sequence (4 -> 65540)", 2, 53 + 2, 0x01),
        (
            "bit 63 of the producer id (11 -> negative)",
            3,
            43 + 7,
            0x80,
        ),
    ];
    for (what, batch, byte, mask) in flips {
        let clock = clock();
        let (dir, log, file, starts) = four_flushed_batches(&clock);
        drop(log); // a crash
        flip(&file, starts[batch] + byte, mask);
        let reopened =
            open_with(dir.path(), dense_index(), &clock).map(|log| log.producer_last_sequence(P));
        assert_corrupt_rebuild(reopened, &file, starts[batch], what);
    }
}

/// The same damage found by the rebuild after a truncation: the truncation
/// fails with `Corrupt` (and the log is poisoned), instead of leaving a
/// producer state with a wrong sequence.
#[test]
fn a_flipped_sequence_found_at_truncation_is_corrupt_not_state() {
    let clock = clock();
    let (_dir, log, file, starts) = four_flushed_batches(&clock);
    flip(&file, starts[2] + 53 + 2, 0x01);
    // Keep batches 0..=2 (offsets 0..6): the rebuild walks batch 2.
    assert_corrupt_rebuild(
        log.truncate_to(Offset(6)),
        &file,
        starts[2],
        "bit 16 of the base sequence",
    );
}

#[test]
fn truncation_rolls_back_producer_state() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open_with(dir.path(), small_segments(), &clock).unwrap();
    append_n(&log, 12);
    // Keep batches 0..=3 (offsets 0..8): sequences up to 7.
    log.truncate_to(Offset(8)).unwrap();
    assert_eq!(log.log_end_offset(), Offset(8));
    assert_eq!(
        log.producer_last_sequence(P),
        Some((ProducerEpoch(0), Sequence(7)))
    );
    for name in snapshots(dir.path()) {
        let offset: u64 = name.trim_end_matches(".snapshot").parse().unwrap();
        assert!(offset <= 8, "snapshot {name} above the new end survived");
    }
    // The removed batch with sequence 8 is new again, not a duplicate.
    let again = log.append_as_leader(&idempotent(8, 2), EPOCH).unwrap();
    assert!(!again.duplicate);
    assert_eq!(again.base_offset, Offset(8));
    // And the state after truncation survives a crash.
    drop(log);
    let log = open_with(dir.path(), small_segments(), &clock).unwrap();
    assert_eq!(
        log.producer_last_sequence(P),
        Some((ProducerEpoch(0), Sequence(9)))
    );
    assert!(
        log.append_as_leader(&idempotent(8, 2), EPOCH)
            .unwrap()
            .duplicate
    );

    log.truncate_fully_and_start_at(Offset(100)).unwrap();
    assert_eq!(log.producer_last_sequence(P), None);
    assert!(snapshots(dir.path()).is_empty());
}

#[test]
fn follower_builds_the_same_state_from_replicated_batches() {
    let leader_dir = tempfile::tempdir().unwrap();
    let leader = open(leader_dir.path(), small_segments());
    append_n(&leader, 8);
    let follower_dir = tempfile::tempdir().unwrap();
    let follower = open(follower_dir.path(), small_segments());
    let mut next = Offset(0);
    while next < leader.log_end_offset() {
        let read = leader.read(next, 1 << 20).unwrap();
        follower.append_as_follower(&read.records).unwrap();
        next = read.next_offset().unwrap();
    }
    assert_eq!(
        follower.producer_last_sequence(P),
        leader.producer_last_sequence(P)
    );
    // Promoted, the follower deduplicates the leader's last batches.
    let dup = follower
        .append_as_leader(&idempotent(14, 2), LeaderEpoch(2))
        .unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.leader_epoch, EPOCH);
    // Followers roll, and snapshot, like leaders.
    assert!(
        !snapshots(follower_dir.path()).is_empty(),
        "rolled followers snapshot too"
    );
}

#[test]
fn idle_producer_expires_by_the_log_clock() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let config = LogConfig {
        producer_id_expiration: Duration::from_secs(3600),
        ..dense_index()
    };
    let log = open_with(dir.path(), config.clone(), &clock).unwrap();
    append_n(&log, 2);
    clock.advance(Duration::from_secs(3599));
    assert_eq!(log.remove_expired_producers(), 0);
    clock.advance(Duration::from_secs(1));
    assert_eq!(log.remove_expired_producers(), 1);
    assert_eq!(log.producer_count(), 0);
    // Forgotten: like Kafka, an unknown producer may start at any sequence,
    // so the retry is appended again — the documented cost of expiry.
    assert!(
        !log.append_as_leader(&idempotent(2, 2), EPOCH)
            .unwrap()
            .duplicate
    );
}

/// The fault test with deletion, seed 7 ("expected 27, got 29"): a log
/// start inside a segment, above that segment's producer snapshot, and a
/// crash. The reopened log must know the sequences of the batches between
/// the snapshot and the log start: they were appended, and a producer whose
/// last batches lie there goes on from them.
#[test]
fn reopen_keeps_the_sequences_of_batches_below_an_exact_log_start() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open_with(dir.path(), small_segments(), &clock).unwrap();
    append_n(&log, 12);
    let end = log.log_end_offset();
    let snapshot = snapshots(dir.path())
        .iter()
        .map(|name| name.trim_end_matches(".snapshot").parse::<u64>().unwrap())
        .max()
        .expect("a snapshot from the last roll");
    // The last roll's snapshot lies below the last batches (seq 22 and 23
    // and the ones before them in the active segment).
    assert!(end.0 >= snapshot + 4, "end {end}, snapshot at {snapshot}");
    // Every record deleted, exactly: the active segment still holds them.
    log.set_high_watermark(end);
    log.set_log_start_offset(end).unwrap();
    drop(log); // crash

    let log = open_with(dir.path(), small_segments(), &clock).unwrap();
    assert_eq!(log.log_start_offset(), end);
    assert_eq!(
        log.producer_last_sequence(P),
        Some((ProducerEpoch(0), Sequence(23)))
    );
    // A retry of the last batch, below the log start, is still a
    // duplicate, and the next sequence is accepted.
    assert!(
        log.append_as_leader(&idempotent(22, 2), EPOCH)
            .unwrap()
            .duplicate
    );
    assert!(
        !log.append_as_leader(&idempotent(24, 2), EPOCH)
            .unwrap()
            .duplicate
    );
}
