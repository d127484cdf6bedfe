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
//! With `--features tls` it also measures, in the same run and interleaved
//! with the others, the same workload over mutual TLS 1.3 (issue 12): its
//! throughput next to plaintext TCP (target >= 0.7), and the latency of
//! single-record (1 KiB) `acks=all` appends, one at a time, on plaintext
//! TCP and on TLS: p50 and p99 of each and the p50 ratio (target TLS
//! within 2x of plaintext).
//!
//! `cargo bench --bench tcp` runs it; `-- --test` runs a tiny version (CI).
//! `ISRLOG_BENCH_SECONDS` sets the length of each measured phase
//! (criterion's measurement time; its warm-up is a quarter of that).
//! Both clusters keep every record (no retention): a full run leaves about
//! 18 GB of log files on the disk until its end; `ISRLOG_BENCH_SECONDS=1`
//! about a third of that.

#[path = "support/page_cache.rs"]
mod page_cache;
#[cfg(feature = "tls")]
#[path = "../tests/support/tls_support.rs"]
mod tls_support;

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
    // The same over mutual TLS, each node with its own certificate.
    #[cfg(feature = "tls")]
    let tls_cluster = TcpCluster::builder()
        .nodes(REPLICAS)
        .replication(replication())
        .session_timeout(Duration::from_secs(60))
        .tcp_config(isrlog::TcpConfig::default())
        .tls(tls_support::TestCa::new("isrlog bench CA").cluster_configs(REPLICAS as u32))
        .build()
        .expect("tls cluster");
    #[cfg(feature = "tls")]
    tls_cluster.create_log(LOG, REPLICAS).expect("create log");
    #[cfg(feature = "tls")]
    let tls_leader = tls_cluster.leader_log(LOG).expect("leader");
    #[cfg(feature = "tls")]
    let mut tls = None::<f64>;

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
        #[cfg(feature = "tls")]
        {
            let s = bench_phase(
                &mut group,
                &format!("tls/round_{round}"),
                quick,
                warm_up,
                phase,
                &tls_leader,
                &batch,
            );
            tls = best(tls, s);
        }
    }
    group.finish();
    #[cfg(feature = "tls")]
    // Only when the phases ran (not when criterion only lists or filters).
    let latencies = tcp.is_some().then(|| {
        let samples = if quick { 200 } else { 3000 };
        latency_pair(&tcp_leader, &tls_leader, samples)
    });
    #[cfg(feature = "tls")]
    {
        drop(tls_leader);
        tls_cluster.shutdown().expect("shutdown");
    }
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
    #[cfg(feature = "tls")]
    {
        if let (Some(tls), Some(tcp)) = (tls, tcp) {
            println!(
                "tcp/3_replicas/acks_all/batches_of_100x1KiB/4_producers: best of {ROUNDS}: mutual TLS 1.3 {:.0} records/s ({:.0} MB/s); \
                 plaintext TCP {:.0} records/s ({:.0} MB/s); ratio {:.2} (target >= 0.7)",
                tls,
                megabytes_per_second(tls),
                tcp,
                megabytes_per_second(tcp),
                tls / tcp
            );
        }
        if let Some((plain, tls)) = latencies {
            println!(
            "tcp/3_replicas/acks_all/1x1KiB/1_producer latency over {} appends each: \
             mutual TLS 1.3 p50 {:?} p99 {:?}; plaintext TCP p50 {:?} p99 {:?}; p50 ratio {:.2} (target <= 2)",
            plain.len(),
            percentile(&tls, 0.5),
            percentile(&tls, 0.99),
            percentile(&plain, 0.5),
            percentile(&plain, 0.99),
            percentile(&tls, 0.5).as_secs_f64() / percentile(&plain, 0.5).as_secs_f64()
        );
        }
    }
    #[cfg(not(feature = "tls"))]
    println!("tcp: TLS not measured (build with --features tls)");
}

/// Latencies of `samples` single-record `acks=all` appends on each leader,
/// sorted: in alternating blocks, so load from elsewhere hits both alike.
/// Each leader first takes a few unmeasured appends.
#[cfg(feature = "tls")]
fn latency_pair(
    plain: &ReplicatedLog,
    tls: &ReplicatedLog,
    samples: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    const BLOCK: usize = 100;
    let value = vec![0xA5u8; RECORD_BYTES];
    let append = |leader: &ReplicatedLog| {
        let start = Instant::now();
        leader.append_values(&[&value], Acks::All).expect("append");
        start.elapsed()
    };
    for _ in 0..20 {
        append(plain);
        append(tls);
    }
    let (mut plain_times, mut tls_times) = (Vec::new(), Vec::new());
    while plain_times.len() < samples {
        let block = BLOCK.min(samples - plain_times.len());
        plain_times.extend((0..block).map(|_| append(plain)));
        tls_times.extend((0..block).map(|_| append(tls)));
    }
    plain_times.sort();
    tls_times.sort();
    (plain_times, tls_times)
}

/// The `q` quantile of sorted, non-empty `times` (nearest rank).
#[cfg(feature = "tls")]
fn percentile(times: &[Duration], q: f64) -> Duration {
    let rank = ((times.len() as f64 * q).ceil() as usize).clamp(1, times.len());
    times[rank - 1]
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
