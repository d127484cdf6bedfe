//! Issue 15: the inspector is safe on a live node's files. While a log is
//! open and a writer appends (segments growing and rolling), every
//! inspection succeeds, reads only what was there when it looked, never
//! reports damage recovery would refuse over, and the finished log (still
//! open) is reported healthy.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use crate::storage_support::*;
use isrlog::inspect::{inspect_dir, RecoveryAction};
use isrlog::{LeaderEpoch, LogConfig, Offset};

const BATCHES: u64 = 300;

#[test]
fn inspecting_a_log_while_it_is_written_is_safe() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes_max: batch("w", 4).size_bytes() as u64 * 20,
        index_interval_bytes: 0,
        ..LogConfig::default()
    };
    let log = Arc::new(open(dir.path(), config));
    log.assign_epoch(LeaderEpoch(0), Offset(0)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let inspections = Arc::new(AtomicU32::new(0));
    let writer = {
        let log = Arc::clone(&log);
        let done = Arc::clone(&done);
        let inspections = Arc::clone(&inspections);
        std::thread::spawn(move || {
            for i in 0..BATCHES {
                // Every 25 batches, wait for an inspection to finish, so
                // that inspections interleave with the writes however fast
                // either side is.
                while inspections.load(Ordering::SeqCst) < (i / 25) as u32 {
                    std::thread::yield_now();
                }
                // A new epoch every 100 batches: the cache changes too.
                let epoch = LeaderEpoch((i / 100) as u32);
                log.assign_epoch(epoch, log.log_end_offset()).unwrap();
                log.append_as_leader(&batch("w", 4), epoch).unwrap();
                if i % 10 == 0 {
                    log.flush().unwrap();
                }
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    loop {
        let finished = done.load(Ordering::SeqCst);
        let report = inspect_dir(dir.path()).unwrap();
        for action in &report.recovery {
            assert!(
                !matches!(action, RecoveryAction::Refuse { .. }),
                "a live, healthy log was judged beyond repair: {report}"
            );
        }
        // At most a batch caught mid-write at the end of the active
        // segment; never a false alarm about epochs (the cache is written
        // just before a new epoch's first batch, maybe after it was read).
        for damage in &report.damage {
            let last = report.segments.last().unwrap();
            assert_eq!(damage.path, last.path, "{report}");
            assert!(!damage.reason.contains("epoch"), "{report}");
        }
        // Whatever was read is a prefix of what the writer writes.
        let mut next = Offset(0);
        for segment in &report.segments {
            for b in &segment.batches {
                assert_eq!(b.base_offset, next, "{report}");
                next = b.last_offset.next();
            }
        }
        inspections.fetch_add(1, Ordering::SeqCst);
        if finished {
            break;
        }
    }
    writer.join().unwrap();
    let report = inspect_dir(dir.path()).unwrap();
    assert!(report.is_healthy(), "{report}");
    assert_eq!(report.record_count(), BATCHES * 4, "{report}");
    assert_eq!(report.log_end_offset(), Some(Offset(BATCHES * 4)));
    assert!(report.segments.len() >= BATCHES as usize / 20, "{report}");
    assert!(inspections.load(Ordering::SeqCst) >= (BATCHES / 25) as u32);
}
