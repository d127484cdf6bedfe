//! Replication throughput over loopback TCP (issue 6, "Performance"), next
//! to the same workload on the memory transport measured in the same run:
//! 3 replicas, 1 KiB records in batches of 100, `acks=all`, 4 producer
//! threads. Prints records/s and MB/s of each (best of two interleaved
//! phases) and their ratio (target >= 0.5).
//!
//! `cargo bench --bench tcp` runs it; `-- --test` runs a tiny version (CI).
//! `ISRLOG_BENCH_SECONDS` sets the length of each measured phase.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use isrlog::testing::{Cluster, TcpCluster};
use isrlog::{Acks, LogId, RecordBatch, RecordBatchBuilder, ReplicatedLog, ReplicationConfig};

const LOG: LogId = LogId(0);
const REPLICAS: usize = 3;
const PRODUCERS: usize = 4;
const RECORDS_PER_BATCH: usize = 100;
const RECORD_BYTES: usize = 1024;
/// Measured phases per transport; the best one counts.
const ROUNDS: usize = 2;

fn batch() -> RecordBatch {
    let value = vec![0x5Au8; RECORD_BYTES];
    let mut builder =
        RecordBatchBuilder::with_capacity(1_700_000_000_000, RECORDS_PER_BATCH * 1060);
    for _ in 0..RECORDS_PER_BATCH {
        builder.push(&value);
    }
    builder.build().expect("batch")
}

/// The same replication settings on both transports, so that the ratio
/// measures the transport and nothing else.
fn replication() -> ReplicationConfig {
    ReplicationConfig {
        min_insync_replicas: 2,
        replica_lag_time_max: Duration::from_secs(30),
        fetch_wait_max: Duration::from_millis(500),
        request_timeout: Duration::from_secs(30),
        ..ReplicationConfig::default()
    }
}

/// Runs `PRODUCERS` threads appending `batch` with `acks=all` for
/// `duration`; returns records per second.
fn throughput(leader: &ReplicatedLog, batch: &RecordBatch, duration: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let records = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let leader = leader.clone();
            let batch = batch.clone();
            let stop = Arc::clone(&stop);
            let records = Arc::clone(&records);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    leader.append(&batch, Acks::All).expect("append");
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

fn megabytes_per_second(records_per_second: f64) -> f64 {
    records_per_second * RECORD_BYTES as f64 / 1e6
}

fn main() {
    let quick = std::env::args().any(|a| a == "--test");
    let seconds: f64 = std::env::var("ISRLOG_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 0.2 } else { 3.0 });
    let phase = Duration::from_secs_f64(seconds);
    let batch = batch();

    // Both clusters stay up and are measured in turns, best of `ROUNDS`:
    // on a shared machine, load from elsewhere then hits both alike rather
    // than whichever phase it happened to overlap.
    let memory_cluster = Cluster::builder()
        .nodes(REPLICAS)
        .replication(replication())
        .session_timeout(Duration::from_secs(60))
        .build()
        .expect("memory cluster");
    memory_cluster
        .create_log(LOG, REPLICAS)
        .expect("create log");
    let memory_leader = memory_cluster.leader_log(LOG).expect("leader");
    // Loopback TCP with the default TCP settings (two connections per peer).
    let tcp_cluster = TcpCluster::builder()
        .nodes(REPLICAS)
        .replication(replication())
        .session_timeout(Duration::from_secs(60))
        .tcp_config(isrlog::TcpConfig::default())
        .build()
        .expect("tcp cluster");
    tcp_cluster.create_log(LOG, REPLICAS).expect("create log");
    let tcp_leader = tcp_cluster.leader_log(LOG).expect("leader");

    let _ = throughput(&memory_leader, &batch, phase / 4); // warm-up
    let _ = throughput(&tcp_leader, &batch, phase / 4);
    let (mut memory, mut tcp) = (0f64, 0f64);
    for _ in 0..ROUNDS {
        memory = memory.max(throughput(&memory_leader, &batch, phase));
        tcp = tcp.max(throughput(&tcp_leader, &batch, phase));
    }
    drop((memory_leader, tcp_leader));
    memory_cluster.shutdown().expect("shutdown");
    tcp_cluster.shutdown().expect("shutdown");

    println!(
        "tcp/3_replicas/acks_all/batches_of_100x1KiB/4_producers: best of {ROUNDS}: loopback TCP {:.0} records/s ({:.0} MB/s); \
         memory transport {:.0} records/s ({:.0} MB/s); ratio {:.2} (target >= 0.5)",
        tcp,
        megabytes_per_second(tcp),
        memory,
        megabytes_per_second(memory),
        tcp / memory
    );
}
