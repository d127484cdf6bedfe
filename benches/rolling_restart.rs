//! Rolling restart (issue 13, part 3): a writer appends with `acks=all`
//! without pause, retrying at once on a refusal, while the nodes of a
//! 3-node memory cluster are stopped cleanly and restarted one after the
//! other (0, 1, 2, 0, ...). For each restart the figure is the longest gap
//! between two acknowledged appends from the stop's start until the node is
//! back in the ISR: how long the application could not write. Median and
//! max over 10 restarts; target max <= 100 ms.
//!
//! Baseline in the same run: the same with controlled shutdown off
//! (`controlled_shutdown_timeout = 0`: the node just stops and the
//! controller moves leadership once its session ends, which a clean stop
//! ends at once).
//!
//! Criterion measures each (one iteration is one restart, its stall the
//! time reported), then the bench prints the figures. Run with
//! `cargo bench --bench rolling_restart`; `-- --test` runs 2 restarts each
//! (CI).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use isrlog::testing::Cluster;
use isrlog::{Acks, LogId, NodeId, ReplicationConfig};

const LOG: LogId = LogId(0);
const RESTARTS: usize = 10;
const QUICK_RESTARTS: u64 = 2;
const SAMPLES: usize = 10;
const TARGET: Duration = Duration::from_millis(100);

fn quick() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench")
}

/// A cluster, the writer appending to it and the instants it was
/// acknowledged at.
struct Rig {
    cluster: Arc<Cluster>,
    acknowledged: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
    writer: Option<std::thread::JoinHandle<()>>,
    next_node: u32,
}

impl Rig {
    fn start(controlled_shutdown_timeout: Duration) -> Rig {
        let cluster = Arc::new(
            Cluster::builder()
                .nodes(3)
                .controlled_shutdown_timeout(controlled_shutdown_timeout)
                .replication(ReplicationConfig {
                    min_insync_replicas: 2,
                    fetch_wait_max: Duration::from_millis(100),
                    replica_lag_time_max: Duration::from_secs(10),
                    request_timeout: Duration::from_secs(5),
                    fetch_backoff: Duration::from_millis(5),
                    ..ReplicationConfig::default()
                })
                .build()
                .expect("cluster starts"),
        );
        cluster.create_log(LOG, 3).expect("log created");
        assert!(
            cluster.wait_until(Duration::from_secs(20), |c| c.in_sync_replicas(LOG).len()
                == 3)
        );
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (cluster, acknowledged, stop) = (
                Arc::clone(&cluster),
                Arc::clone(&acknowledged),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let appended = cluster
                        .leader_of(LOG)
                        .and_then(|node| cluster.log(node, LOG).ok())
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
        Rig {
            cluster,
            acknowledged,
            stop,
            writer: Some(writer),
            next_node: 0,
        }
    }

    /// Stops and restarts the next node, waits until it is back in the
    /// ISR and the writer got through once more; returns the longest gap
    /// between acknowledgements in that time.
    fn restart_next(&mut self) -> Duration {
        let node = NodeId(self.next_node % 3);
        self.next_node += 1;
        let started = Instant::now();
        self.cluster.stop_node(node).expect("clean stop");
        self.cluster.restart(node).expect("restart");
        assert!(self
            .cluster
            .wait_until(Duration::from_secs(20), |c| c.in_sync_replicas(LOG).len()
                == 3));
        let back = Instant::now();
        let deadline = back + Duration::from_secs(20);
        loop {
            let last = self
                .acknowledged
                .lock()
                .expect("writer lock")
                .last()
                .copied();
            if last.is_some_and(|at| at > back) {
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
                if at >= started && before <= back {
                    stall = stall.max(at.duration_since(before.max(started)));
                }
            }
            previous = Some(at);
        }
        // Keep the last acknowledgement as the start of the next gap.
        let last = acknowledged.last().copied();
        acknowledged.clear();
        acknowledged.extend(last);
        stall
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn rolling_restart(c: &mut Criterion) {
    let mut group = c.benchmark_group("rolling_restart");
    group
        .sample_size(SAMPLES)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_nanos(1))
        .measurement_time(Duration::from_secs(5));
    let mut figures: Vec<(&str, Vec<Duration>)> = Vec::new();
    for (name, timeout) in [
        ("controlled shutdown", Duration::from_secs(5)),
        ("no controlled shutdown (baseline)", Duration::ZERO),
    ] {
        let mut rig = Rig::start(timeout);
        let mut stalls: Vec<Duration> = Vec::new();
        let id = if timeout.is_zero() {
            "longest_stall/no_controlled_shutdown"
        } else {
            "longest_stall/controlled_shutdown"
        };
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let count = if quick() { QUICK_RESTARTS } else { iters };
                let mut total = Duration::ZERO;
                for _ in 0..count {
                    let stall = rig.restart_next();
                    stalls.push(stall);
                    total += stall;
                }
                total
            })
        });
        drop(rig);
        figures.push((name, stalls));
    }
    group.finish();
    for (name, stalls) in figures {
        let mut last: Vec<Duration> = stalls[stalls.len().saturating_sub(RESTARTS)..].to_vec();
        last.sort();
        let Some(&max) = last.last() else { continue };
        let median = last[last.len() / 2];
        println!(
            "rolling restart, {name} ({} restarts): longest append stall median {:.1} ms, max {:.1} ms; target max <= {} ms: {}",
            last.len(),
            median.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3,
            TARGET.as_millis(),
            if max <= TARGET { "met" } else { "MISSED" }
        );
    }
}

criterion_group!(benches, rolling_restart);
criterion_main!(benches);
