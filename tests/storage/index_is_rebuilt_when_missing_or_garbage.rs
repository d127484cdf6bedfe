//! SPEC 2.3: a missing, truncated or garbage offset index is rebuilt from
//! the data file, and reads through it stay correct.

use crate::storage_support::*;
use isrlog::{LeaderEpoch, LogConfig, Offset};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 2048,
        batch_bytes_max: 1024,
        index_interval_bytes: 200,
        ..LogConfig::default()
    }
}

fn closed_log() -> (tempfile::TempDir, Vec<(Offset, Vec<u8>)>) {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config());
    for i in 0..40 {
        log.append_as_leader(&batch(&format!("r{i}"), 1 + i % 4), LeaderEpoch(0))
            .unwrap();
    }
    let all = read_all(&log);
    assert!(log.stats().segments >= 3);
    log.close().unwrap();
    (dir, all)
}

fn check_reads(dir: &std::path::Path, expected: &[(Offset, Vec<u8>)], damaged: &std::path::Path) {
    let log = open(dir, config());
    let report = log.recovery_report();
    assert!(
        report.indexes_rebuilt.iter().any(|(p, _)| p == damaged),
        "{report:?}"
    );
    assert_eq!(read_all(&log), expected);
    // Every single offset is found through the rebuilt index.
    for (offset, value) in expected {
        let result = log.read(*offset, 1).unwrap();
        let found = result
            .batches()
            .flat_map(|b| b.unwrap().records().collect::<Vec<_>>())
            .map(|r| r.unwrap())
            .find(|r| r.offset == *offset)
            .unwrap();
        assert_eq!(&found.value.to_vec(), value);
    }
    log.close().unwrap();
    // Rebuilt with its entries: an index rebuilt with no room held none,
    // and every read of its segment walked from the segment start.
    let entries = std::fs::metadata(damaged).unwrap().len() / 8;
    assert!(
        entries > 0,
        "the rebuilt {} has no entry",
        damaged.display()
    );
    // Rebuilt once: the next open finds nothing to fix.
    let again = open(dir, config());
    assert!(
        again.recovery_report().is_clean(),
        "{:?}",
        again.recovery_report()
    );
}

fn index_of(dir: &std::path::Path, segment: usize) -> std::path::PathBuf {
    segment_files(dir)[segment].with_extension("index")
}

#[test]
fn missing_index_is_rebuilt() {
    let (dir, all) = closed_log();
    let index = index_of(dir.path(), 0);
    std::fs::remove_file(&index).unwrap();
    check_reads(dir.path(), &all, &index);
}

#[test]
fn truncated_index_is_rebuilt() {
    let (dir, all) = closed_log();
    let index = index_of(dir.path(), 1);
    let bytes = std::fs::read(&index).unwrap();
    assert!(bytes.len() >= 16, "the test needs index entries");
    std::fs::write(&index, &bytes[..bytes.len() - 3]).unwrap();
    check_reads(dir.path(), &all, &index);
}

#[test]
fn garbage_index_is_rebuilt() {
    let (dir, all) = closed_log();
    let index = index_of(dir.path(), 0);
    let len = std::fs::metadata(&index).unwrap().len() as usize;
    std::fs::write(&index, vec![0xA5; len.max(8)]).unwrap();
    check_reads(dir.path(), &all, &index);
}

#[test]
fn garbage_index_of_the_active_segment_is_rebuilt() {
    let (dir, all) = closed_log();
    let files = segment_files(dir.path());
    let index = files[files.len() - 1].with_extension("index");
    std::fs::write(&index, [9u8, 0, 0, 0, 0xff, 0xff, 0, 0]).unwrap();
    check_reads(dir.path(), &all, &index);
}
