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

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use isrlog::testing::Cluster;
use isrlog::{LogId, NodeId, ReplicationConfig};

#[path = "support/append_stall.rs"]
mod append_stall;
use append_stall::{print_stalls, StallWriter};

const LOG: LogId = LogId(0);
const RESTARTS: usize = 10;
const QUICK_RESTARTS: u64 = 2;
const SAMPLES: usize = 10;
const TARGET: Duration = Duration::from_millis(100);
const WAIT_MAX: Duration = Duration::from_secs(20);

fn quick() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench")
}

/// A cluster and the writer appending to it.
struct Rig {
    cluster: Arc<Cluster>,
    writer: StallWriter,
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
        assert!(cluster.wait_until(WAIT_MAX, |c| c.in_sync_replicas(LOG).len() == 3));
        let writer = StallWriter::start(&cluster, LOG);
        Rig {
            cluster,
            writer,
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
            .wait_until(WAIT_MAX, |c| c.in_sync_replicas(LOG).len() == 3));
        self.writer.longest_gap(started, Instant::now(), WAIT_MAX)
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
        print_stalls(
            &format!("rolling restart, {name}"),
            "restarts",
            &stalls,
            RESTARTS,
            TARGET,
        );
    }
}

criterion_group!(benches, rolling_restart);
criterion_main!(benches);
