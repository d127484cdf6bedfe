//! Replication throughput and latency on the memory transport (issue 3,
//! "Performance"), each figure next to a baseline measured in the same run:
//!
//! 1. 3 replicas, 1 KiB records in batches of 100, `acks=all`, 4 producer
//!    threads: records/s and MB/s, and the ratio to the same workload on a
//!    single replica with `acks=1` (target >= 0.5).
//! 2. `acks=all` latency of single-record appends from one producer: p50
//!    and p99 (targets p50 <= 20 µs, p99 <= 100 µs), next to the `acks=1`
//!    latency of the same appends.
//! 3. 64 producer threads each appending single 1 KiB records with
//!    `acks=all`: records/s (target >= 500,000/s), next to the same on a
//!    single replica with `acks=1`.
//!
//! 4. The idempotent producer (issue 5): the workload of (1) through 4
//!    `IdempotentProducer`s next to plain `acks=all` appends in the same
//!    run (target: at most 10% slower).
//!
//! `cargo bench --bench replication` runs it; `-- --test` runs a tiny
//! version (CI). `ISRLOG_BENCH_SECONDS` sets the length of each phase.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::{
    Acks, IdempotentProducer, LeaderRouter, LogId, ProducerConfig, RecordBatch, RecordBatchBuilder,
    ReplicatedLog, ReplicationConfig,
};

const LOG: LogId = LogId(0);

fn batch(records: usize) -> RecordBatch {
    let value = vec![0x5Au8; 1024];
    let mut builder = RecordBatchBuilder::with_capacity(1_700_000_000_000, records * 1060);
    for _ in 0..records {
        builder.push(&value);
    }
    builder.build().expect("batch")
}

fn cluster(nodes: usize) -> (Cluster, ReplicatedLog) {
    let cluster = Cluster::builder()
        .nodes(nodes)
        .min_insync_replicas(nodes.min(2))
        .replication(ReplicationConfig {
            min_insync_replicas: nodes.min(2),
            replica_lag_time_max: Duration::from_secs(30),
            fetch_wait_max: Duration::from_millis(500),
            request_timeout: Duration::from_secs(30),
            spin_before_park: std::env::var("ISRLOG_BENCH_SPIN_US")
                .ok()
                .and_then(|s| s.parse().ok())
                .map(Duration::from_micros)
                .unwrap_or(ReplicationConfig::default().spin_before_park),
            ..ReplicationConfig::default()
        })
        .session_timeout(Duration::from_secs(60))
        .build()
        .expect("cluster");
    cluster.create_log(LOG, nodes).expect("create log");
    let leader = cluster.leader_log(LOG).expect("leader");
    (cluster, leader)
}

/// Runs `threads` producers appending `batch` with `acks` for `duration`;
/// returns records per second.
fn throughput(
    leader: &ReplicatedLog,
    batch: &RecordBatch,
    acks: Acks,
    threads: usize,
    duration: Duration,
) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let records = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let leader = leader.clone();
            let batch = batch.clone();
            let stop = Arc::clone(&stop);
            let records = Arc::clone(&records);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    leader.append(&batch, acks).expect("append");
                    records.fetch_add(u64::from(batch.record_count()), Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.join().expect("producer");
    }
    records.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// Routes every send to one known leader: the bench measures the
/// idempotent path, not the harness's leader lookup.
struct KnownLeader(ReplicatedLog);

impl LeaderRouter for KnownLeader {
    fn leader_log(&self, _log: LogId) -> isrlog::Result<ReplicatedLog> {
        Ok(self.0.clone())
    }
}

/// Like [`throughput`] with `acks=all`, but each thread is an idempotent
/// producer: every batch carries its producer id, epoch and sequence.
fn idempotent_throughput(
    cluster: &Cluster,
    leader: &ReplicatedLog,
    threads: usize,
    duration: Duration,
) -> f64 {
    let stop = AtomicBool::new(false);
    let records = AtomicU64::new(0);
    let value = vec![0x5Au8; 1024];
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let producer = IdempotentProducer::init(
                    &cluster.coordinator,
                    KnownLeader(leader.clone()),
                    ProducerConfig::default(),
                )
                .expect("producer id");
                while !stop.load(Ordering::Relaxed) {
                    let mut builder =
                        RecordBatchBuilder::with_capacity(1_700_000_000_000, 100 * 1060);
                    for _ in 0..100 {
                        builder.push(&value);
                    }
                    producer.send(LOG, builder).expect("send");
                    records.fetch_add(100, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
    });
    records.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// Plain `acks=all` appends of freshly built batches of 100 (the same
/// building work the idempotent producer does per batch).
fn plain_built_throughput(leader: &ReplicatedLog, threads: usize, duration: Duration) -> f64 {
    let stop = AtomicBool::new(false);
    let records = AtomicU64::new(0);
    let value = vec![0x5Au8; 1024];
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let mut builder =
                        RecordBatchBuilder::with_capacity(1_700_000_000_000, 100 * 1060);
                    for _ in 0..100 {
                        builder.push(&value);
                    }
                    leader
                        .append(&builder.build().expect("batch"), Acks::All)
                        .expect("append");
                    records.fetch_add(100, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
    });
    records.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn latencies(
    leader: &ReplicatedLog,
    batch: &RecordBatch,
    acks: Acks,
    count: usize,
) -> (Duration, Duration) {
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let start = Instant::now();
        leader.append(batch, acks).expect("append");
        samples.push(start.elapsed());
    }
    samples.sort();
    (samples[count / 2], samples[count * 99 / 100])
}

fn main() {
    let quick = std::env::args().any(|a| a == "--test");
    let seconds: f64 = std::env::var("ISRLOG_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 0.2 } else { 3.0 });
    let phase = Duration::from_secs_f64(seconds);
    let big = batch(100);
    let single = batch(1);

    // 1. Batches of 100, 4 producers.
    let (single_cluster, single_leader) = cluster(1);
    let _ = throughput(&single_leader, &big, Acks::Leader, 4, phase / 4); // warm-up
    let baseline = throughput(&single_leader, &big, Acks::Leader, 4, phase);
    drop(single_leader);
    single_cluster.shutdown().expect("shutdown");
    let (replicated_cluster, leader) = cluster(3);
    let _ = throughput(&leader, &big, Acks::All, 4, phase / 4);
    let replicated = throughput(&leader, &big, Acks::All, 4, phase);
    println!(
        "replication/batches_of_100x1KiB/4_producers: 3 replicas acks=all {:.0} records/s ({:.0} MB/s); \
         1 replica acks=1 {:.0} records/s ({:.0} MB/s); ratio {:.2} (target >= 0.5)",
        replicated,
        replicated * 1024.0 / 1e6,
        baseline,
        baseline * 1024.0 / 1e6,
        replicated / baseline
    );

    // 4. Idempotent producers against plain acks=all, alternating.
    let mut plain = Vec::new();
    let mut idempotent = Vec::new();
    for _ in 0..2 {
        plain.push(plain_built_throughput(&leader, 4, phase / 2));
        idempotent.push(idempotent_throughput(
            &replicated_cluster,
            &leader,
            4,
            phase / 2,
        ));
    }
    let plain = plain.into_iter().fold(0.0, f64::max);
    let idempotent = idempotent.into_iter().fold(0.0, f64::max);
    println!(
        "replication/idempotent/batches_of_100x1KiB/4_producers: idempotent {:.0} records/s; \
         plain acks=all {:.0} records/s; ratio {:.2} (target >= 0.90)",
        idempotent,
        plain,
        idempotent / plain
    );

    // 2. Latency of single-record appends, one producer.
    let count = if quick { 200 } else { 20_000 };
    let _ = latencies(&leader, &single, Acks::All, count / 4);
    let (p50_all, p99_all) = latencies(&leader, &single, Acks::All, count);
    let (p50_one, p99_one) = latencies(&leader, &single, Acks::Leader, count);
    println!(
        "replication/latency/1_producer_1x1KiB: acks=all p50 {:.1} µs p99 {:.1} µs (targets 20 / 100); \
         acks=1 on the same leader p50 {:.1} µs p99 {:.1} µs",
        p50_all.as_secs_f64() * 1e6,
        p99_all.as_secs_f64() * 1e6,
        p50_one.as_secs_f64() * 1e6,
        p99_one.as_secs_f64() * 1e6
    );

    // 3. 64 producers of single records.
    let _ = throughput(&leader, &single, Acks::All, 64, phase / 4);
    let many = throughput(&leader, &single, Acks::All, 64, phase);
    drop(leader);
    replicated_cluster.shutdown().expect("shutdown");
    let (single_cluster, single_leader) = cluster(1);
    let many_baseline = throughput(&single_leader, &single, Acks::Leader, 64, phase);
    drop(single_leader);
    single_cluster.shutdown().expect("shutdown");
    println!(
        "replication/64_producers_1x1KiB: 3 replicas acks=all {:.0} records/s (target >= 500000); \
         1 replica acks=1 {:.0} records/s; ratio {:.2}",
        many,
        many_baseline,
        many / many_baseline
    );
}
