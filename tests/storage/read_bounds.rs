//! SPEC 3.8 / 2: reads below the log start or above the log end are
//! `OffsetOutOfRange` with both bounds; a read at the end is empty; a read
//! returns whole batches, at least one, starting with the one containing the
//! offset asked for; `read_up_to` never returns a batch reaching the limit.

use crate::storage_support::*;
use isrlog::{Error, LeaderEpoch, LogConfig, Offset};

fn log_with_batches(dir: &std::path::Path) -> isrlog::Log {
    let log = open(
        dir,
        LogConfig {
            segment_bytes_max: 700,
            batch_bytes_max: 700,
            index_interval_bytes: 50,
            ..LogConfig::default()
        },
    );
    // Batches of 1..=4 records: offsets 0..30 with uneven batch boundaries.
    let mut next = 0;
    let mut i = 0;
    while next < 30 {
        let count = 1 + i % 4;
        log.append_as_leader(&batch(&format!("b{i}"), count), LeaderEpoch(0))
            .unwrap();
        next += count;
        i += 1;
    }
    log
}

#[test]
fn out_of_range_reads_name_both_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_with_batches(dir.path());
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    log.set_log_start_offset(Offset(4)).unwrap();
    for requested in [Offset(0), Offset(3), end.next(), Offset(u64::MAX)] {
        match log.read(requested, 100) {
            Err(Error::OffsetOutOfRange {
                requested: r,
                log_start,
                log_end,
            }) => assert_eq!((r, log_start, log_end), (requested, Offset(4), end)),
            other => panic!("{requested}: {other:?}"),
        }
    }
    let at_end = log.read(end, 100).unwrap();
    assert!(at_end.is_empty());
    assert_eq!(at_end.log_end_offset, end);
    // At the new log start: the batch holding it (which starts below it).
    let at_start = log.read(Offset(4), 100).unwrap();
    assert_eq!(at_start.log_start_offset, Offset(4));
    let first = at_start
        .batches()
        .next()
        .expect("a batch holds the log start")
        .unwrap();
    assert_eq!(
        (first.base_offset(), first.last_offset()),
        (Offset(3), Offset(5)),
        "batch b2 holds offsets 3..=5"
    );
}

#[test]
fn reads_return_whole_batches_containing_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_with_batches(dir.path());
    let end = log.log_end_offset();
    for from in 0..end.0 {
        for bytes_max in [0, 1, 150, 400, 10_000] {
            let result = log.read(Offset(from), bytes_max).unwrap();
            let batches: Vec<_> = result.batches().map(|b| b.unwrap()).collect();
            assert!(!batches.is_empty(), "from {from}");
            assert!(batches[0].base_offset() <= Offset(from));
            assert!(batches[0].last_offset() >= Offset(from));
            let total: usize = batches.iter().map(|b| b.size_bytes()).sum();
            assert_eq!(total, result.records.len(), "only whole batches");
            assert!(total <= bytes_max.max(batches[0].size_bytes()));
            for pair in batches.windows(2) {
                assert_eq!(pair[0].next_offset(), pair[1].base_offset());
            }
        }
    }
}

#[test]
fn read_up_to_never_crosses_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_with_batches(dir.path());
    let end = log.log_end_offset();
    for from in 0..=end.0 {
        for limit in 0..=end.0 + 2 {
            let result = log.read_up_to(Offset(from), 10_000, Offset(limit)).unwrap();
            for batch in result.batches() {
                let batch = batch.unwrap();
                assert!(
                    batch.last_offset() < Offset(limit),
                    "from {from} limit {limit}: batch up to {}",
                    batch.last_offset()
                );
            }
            // Whatever is below the limit in the batch holding `from` comes
            // back when the whole batch is below it.
            if from < end.0 && limit >= end.0 {
                assert!(!result.is_empty(), "from {from} limit {limit}");
            }
        }
    }
}
