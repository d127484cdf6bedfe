//! Regression: `flush` (which writes the log checkpoint) and `truncate_to`
//! (which writes one before it cuts) took the checkpoint lock and the log's
//! state lock in opposite orders, so the two racing could hang both for
//! ever. Lock order is now checkpoint lock first everywhere. This runs the
//! race for a bounded time and fails if either thread stops making progress.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::storage_support::*;
use isrlog::{LeaderEpoch, Offset};

#[test]
fn checkpoint_and_truncation_never_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open(dir.path(), dense_index()));
    let stop = Arc::new(AtomicBool::new(false));
    let flushes = Arc::new(AtomicU64::new(0));
    let flusher = {
        let (log, stop, flushes) = (log.clone(), stop.clone(), flushes.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                log.flush().unwrap();
                flushes.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let truncations = Arc::new(AtomicU64::new(0));
    let truncator = {
        let (log, stop, truncations) = (log.clone(), stop.clone(), truncations.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                for _ in 0..4 {
                    log.append_as_leader(&batch("t", 2), LeaderEpoch(0))
                        .unwrap();
                }
                let end = log.log_end_offset();
                log.truncate_to(Offset(end.0 - 4)).unwrap();
                truncations.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    // Both threads must keep making progress; a deadlocked pair never
    // returns, so the test watches them instead of joining blindly.
    let mut seen = (0, 0);
    let run_until = Instant::now() + Duration::from_millis(1500);
    let mut last_progress = Instant::now();
    while Instant::now() < run_until {
        std::thread::sleep(Duration::from_millis(50));
        let now = (
            flushes.load(Ordering::SeqCst),
            truncations.load(Ordering::SeqCst),
        );
        if now.0 > seen.0 && now.1 > seen.1 {
            last_progress = Instant::now();
        }
        seen = now;
        assert!(
            last_progress.elapsed() < Duration::from_secs(5),
            "no progress: {} flushes and {} truncations, then stuck",
            seen.0,
            seen.1
        );
    }
    stop.store(true, Ordering::SeqCst);
    let stopping = Instant::now();
    while !(flusher.is_finished() && truncator.is_finished()) {
        assert!(
            stopping.elapsed() < Duration::from_secs(10),
            "a thread is stuck"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    flusher.join().unwrap();
    truncator.join().unwrap();
    assert!(seen.0 > 10 && seen.1 > 10, "{seen:?}");
}
