//! Shared by the benches that measure how long an application could not
//! write while the cluster changes (rolling restart, reassignment): a writer
//! thread appending with `acks=all` to whoever leads, without pause and
//! retrying at once on a refusal, and the longest gap between two of its
//! acknowledgements in a window.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::{Acks, LogId};

/// The writer and the instants its appends were acknowledged at.
pub struct StallWriter {
    acknowledged: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl StallWriter {
    /// Starts appending to `log` on `cluster`.
    pub fn start(cluster: &Arc<Cluster>, log: LogId) -> StallWriter {
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (cluster, acknowledged, stop) = (
                Arc::clone(cluster),
                Arc::clone(&acknowledged),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let appended = cluster
                        .leader_of(log)
                        .and_then(|node| cluster.log(node, log).ok())
                        .map(|handle| handle.append_values(&[format!("v{i}")], Acks::All));
                    match appended {
                        Some(Ok(_)) => {
                            i += 1;
                            acknowledged
                                .lock()
                                .expect("writer lock")
                                .push(Instant::now());
                        }
                        _ => std::thread::yield_now(),
                    }
                }
            })
        };
        StallWriter {
            acknowledged,
            stop,
            writer: Some(writer),
        }
    }

    /// Waits until the writer got an append acknowledged after `done`
    /// (`wait_max` at most), then returns the longest gap between
    /// acknowledgements that overlaps `started..done` (a gap open at
    /// `started` counts from `started`). Forgets the acknowledgements but
    /// the last, which starts the next window's first gap.
    pub fn longest_gap(&self, started: Instant, done: Instant, wait_max: Duration) -> Duration {
        let deadline = done + wait_max;
        loop {
            let last = self
                .acknowledged
                .lock()
                .expect("writer lock")
                .last()
                .copied();
            if last.is_some_and(|at| at > done) {
                break;
            }
            assert!(Instant::now() < deadline, "the writer stalled for good");
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut acknowledged = self.acknowledged.lock().expect("writer lock");
        let mut stall = Duration::ZERO;
        let mut previous: Option<Instant> = None;
        for &at in acknowledged.iter() {
            if let Some(before) = previous {
                if at >= started && before <= done {
                    stall = stall.max(at.duration_since(before.max(started)));
                }
            }
            previous = Some(at);
        }
        let last = acknowledged.last().copied();
        acknowledged.clear();
        acknowledged.extend(last);
        stall
    }
}

impl Drop for StallWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// Median and max of the last `count` figures, printed with the target.
pub fn print_stalls(what: &str, unit: &str, stalls: &[Duration], count: usize, target: Duration) {
    let mut last: Vec<Duration> = stalls[stalls.len().saturating_sub(count)..].to_vec();
    last.sort();
    let Some(&max) = last.last() else { return };
    let median = last[last.len() / 2];
    println!(
        "{what} ({} {unit}): longest append stall median {:.1} ms, max {:.1} ms; target max <= {} ms: {}",
        last.len(),
        median.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        target.as_millis(),
        if max <= target { "met" } else { "MISSED" }
    );
}
