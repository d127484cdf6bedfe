//! Replication throughput over loopback TCP (issue 6, "Performance"), next
//! to the same workload on the memory transport measured in the same run:
//! 3 replicas, 1 KiB records in batches of 100, `acks=all`, 4 producer
//! threads. Prints records/s and MB/s of each (best of two interleaved
//! phases) and their ratio (target >= 0.5).
//!
//! Criterion measures each phase (one iteration is one append call, shared
//! by the producer threads through `Bencher::iter_custom`) on two clusters
//! built once, outside the measured routine; after its report the bench
//! prints both figures and their ratio.
//!
//! `cargo bench --bench tcp` runs it; `-- --test` runs a tiny version (CI).
//! `ISRLOG_BENCH_SECONDS` sets the length of each measured phase
//! (criterion's measurement time; its warm-up is a quarter of that).
//! Both clusters keep every record (no retention): a full run leaves about
//! 18 GB of log files on the disk until its end; `ISRLOG_BENCH_SECONDS=1`
//! about a third of that.

#[path = "support/page_cache.rs"]
mod page_cache;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, Criterion, SamplingMode, Throughput,
};
use isrlog::testing::{Cluster, TcpCluster};
use isrlog::{Acks, LogId, RecordBatch, RecordBatchBuilder, ReplicatedLog, ReplicationConfig};

const LOG: LogId = LogId(0);
const REPLICAS: usize = 3;
const PRODUCERS: usize = 4;
const RECORDS_PER_BATCH: usize = 100;
const RECORD_BYTES: usize = 1024;
/// Measured phases per transport; the best one counts.
const ROUNDS: usize = 2;
/// Criterion's samples per phase (its minimum): few long samples, so a
/// sample's thread start-up is small next to its appends.
const SAMPLES: usize = 10;

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

/// What one call of the measured routine did.
#[derive(Clone, Copy)]
struct Run {
    records: u64,
    elapsed: Duration,
}

/// How much one call of the routine does.
#[derive(Clone, Copy)]
enum Amount {
    /// Criterion's iteration count: this many append calls, shared among
    /// the producers.
    Appends(u64),
    /// Criterion's test mode (one call, its time ignored): append until
    /// this much time has passed, as the custom main's phases did.
    For(Duration),
}

/// Runs `PRODUCERS` threads appending `batch` with `acks=all` until
/// `amount` is done. The time includes starting and joining the threads,
/// as the custom main's did.
fn throughput(leader: &ReplicatedLog, batch: &RecordBatch, amount: Amount) -> Run {
    let stop = AtomicBool::new(false);
    let claimed = AtomicU64::new(0);
    let records = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..PRODUCERS {
            scope.spawn(|| {
                let (leader, batch) = (leader.clone(), batch.clone());
                loop {
                    let more = match amount {
                        Amount::Appends(appends) => {
                            claimed.fetch_add(1, Ordering::Relaxed) < appends
                        }
                        Amount::For(_) => !stop.load(Ordering::Relaxed),
                    };
                    if !more {
                        break;
                    }
                    leader.append(&batch, Acks::All).expect("append");
                    records.fetch_add(u64::from(batch.record_count()), Ordering::Relaxed);
                }
            });
        }
        if let Amount::For(duration) = amount {
            std::thread::sleep(duration);
            stop.store(true, Ordering::Relaxed);
        }
    });
    Run {
        records: records.into_inner(),
        elapsed: start.elapsed(),
    }
}

/// Benchmarks one phase on `leader` as `id` and returns its records/s over
/// criterion's measurement (`None` if filtered out or only listed). In
/// test mode the one call warms up for `quick_warm_up` (if any) and then
/// appends for `phase`.
fn bench_phase(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: &str,
    quick: bool,
    quick_warm_up: Option<Duration>,
    phase: Duration,
    leader: &ReplicatedLog,
    batch: &RecordBatch,
) -> Option<f64> {
    let mut runs = Vec::new();
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            page_cache::settle_page_cache();
            let run = if quick {
                if let Some(warm_up) = quick_warm_up {
                    let _ = throughput(leader, batch, Amount::For(warm_up));
                }
                throughput(leader, batch, Amount::For(phase))
            } else {
                throughput(leader, batch, Amount::Appends(iters))
            };
            runs.push(run);
            run.elapsed
        })
    });
    // The last `SAMPLES` calls are criterion's measurement, the ones
    // before them its warm-up (`Routine::sample` in criterion 0.5); in
    // test mode there is one call.
    let measured = &runs[runs.len().saturating_sub(SAMPLES)..];
    let records: u64 = measured.iter().map(|r| r.records).sum();
    let elapsed: Duration = measured.iter().map(|r| r.elapsed).sum();
    (!measured.is_empty()).then(|| records as f64 / elapsed.as_secs_f64())
}

fn megabytes_per_second(records_per_second: f64) -> f64 {
    records_per_second * RECORD_BYTES as f64 / 1e6
}

fn tcp(c: &mut Criterion) {
    // Criterion's test mode (the rule of its `configure_from_args`).
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench");
    let seconds: f64 = std::env::var("ISRLOG_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 0.2 } else { 3.0 });
    // Criterion refuses a zero measurement time.
    let phase = Duration::from_secs_f64(seconds.max(0.001));
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

    let mut group = c.benchmark_group("tcp/3_replicas/acks_all/batches_of_100x1KiB/4_producers");
    // Criterion warms up before every phase (its warm-up also sizes the
    // samples); test mode warms each cluster up once, before its first.
    group
        .sample_size(SAMPLES)
        .sampling_mode(SamplingMode::Flat)
        .measurement_time(phase)
        .warm_up_time(phase / 4)
        .throughput(Throughput::Elements(RECORDS_PER_BATCH as u64));
    let (mut memory, mut tcp) = (None::<f64>, None::<f64>);
    for round in 1..=ROUNDS {
        let warm_up = (round == 1).then_some(phase / 4);
        let m = bench_phase(
            &mut group,
            &format!("memory/round_{round}"),
            quick,
            warm_up,
            phase,
            &memory_leader,
            &batch,
        );
        let t = bench_phase(
            &mut group,
            &format!("tcp/round_{round}"),
            quick,
            warm_up,
            phase,
            &tcp_leader,
            &batch,
        );
        memory = best(memory, m);
        tcp = best(tcp, t);
    }
    group.finish();
    drop((memory_leader, tcp_leader));
    memory_cluster.shutdown().expect("shutdown");
    tcp_cluster.shutdown().expect("shutdown");

    if let (Some(tcp), Some(memory)) = (tcp, memory) {
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
}

/// The larger of two optional figures.
fn best(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

criterion_group!(benches, tcp);
criterion_main!(benches);
