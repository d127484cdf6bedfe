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
//!    single replica with `acks=1`, and next to a reference for any
//!    blocking API on this machine: 64 threads that do nothing but block
//!    and be woken once per record.
//!
//! 4. The idempotent producer (issue 5): the workload of (1) through 4
//!    `IdempotentProducer`s next to plain `acks=all` appends in the same
//!    run (target: at most 10% slower).
//! 5. One thread pipelining single 1 KiB records with `acks=all` through
//!    `append_pipelined`, 1024 in flight (issue 14, target >= 500,000/s),
//!    next to the 64 blocking producers of (3).
//!
//! 6. Deletion (issue 25): the 64 producers of (3) on a 3-replica cluster
//!    with `retain_until_applied` and 8 MiB segments, with and without a
//!    deleting application beside them (every 100 ms each replica reports
//!    its high watermark as applied and the leader deletes below the
//!    lowest), alternating, best of two rounds each (target: no
//!    measurable cost, ratio >= 0.95).
//!
//! Criterion measures each workload (one iteration is one append call;
//! multi-threaded workloads through `Bencher::iter_custom`), and after its
//! report the bench prints every figure next to its baseline as a ratio.
//! Each group builds its clusters once, outside the measured routines,
//! and shuts them down at its end.
//!
//! `cargo bench --bench replication` runs it; `-- --test` runs a tiny
//! version (CI). `ISRLOG_BENCH_SECONDS` sets the length of each phase
//! (criterion's measurement time; its warm-up is a quarter of that);
//! `ISRLOG_BENCH_SPIN_US` sets `spin_before_park`.

#[path = "support/page_cache.rs"]
mod page_cache;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, Criterion, SamplingMode, Throughput,
};
use isrlog::testing::Cluster;
use isrlog::{
    Acks, IdempotentProducer, LeaderRouter, LogConfig, LogId, NodeId, Offset, ProducerConfig,
    RecordBatch, RecordBatchBuilder, ReplicatedLog, ReplicationConfig,
};

const LOG: LogId = LogId(0);

/// Criterion's samples per benchmark (its minimum): few long samples, so a
/// sample's thread start-up is small next to its appends.
const SAMPLES: usize = 10;

/// Single-record appends per latency measurement in test mode (as many as
/// the custom main took there), and a quarter of that to warm up.
const QUICK_LATENCY_SAMPLES: u64 = 200;
/// Appends one pipelining thread keeps in flight (about 1 MiB of 1 KiB
/// records, far below `pipelined_bytes_max`).
const PIPELINED_WINDOW: usize = 1024;

/// Criterion's measurement time for the latency benchmarks: about the
/// 20,000 appends the custom main timed (33–60 µs each here).
const LATENCY_MEASUREMENT: Duration = Duration::from_secs(1);

/// How this run measures.
#[derive(Clone, Copy)]
struct Settings {
    /// Criterion's test mode (`-- --test`, or no `--bench` as under
    /// `cargo test --benches`): it calls each routine once and ignores its
    /// time, so the routines run the short timed phases of the custom main
    /// instead, and CI still sees the figures.
    quick: bool,
    /// Length of one measured phase (`ISRLOG_BENCH_SECONDS`).
    phase: Duration,
}

impl Settings {
    fn from_env() -> Self {
        let args: Vec<String> = std::env::args().collect();
        // The rule of criterion's `configure_from_args`.
        let quick = args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench");
        let seconds: f64 = std::env::var("ISRLOG_BENCH_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(if quick { 0.2 } else { 3.0 });
        // Criterion refuses a zero measurement time.
        let phase = Duration::from_secs_f64(seconds.max(0.001));
        Settings { quick, phase }
    }
}

/// `SAMPLES` equal samples over `measurement`, after a warm-up of a quarter
/// of it (the warm-up the custom main gave a phase).
fn configure(group: &mut BenchmarkGroup<'_, WallTime>, measurement: Duration) {
    group
        .sample_size(SAMPLES)
        .sampling_mode(SamplingMode::Flat)
        .measurement_time(measurement)
        .warm_up_time(measurement / 4);
}

/// The results of every call criterion made of one routine, in order. In
/// a benchmark run the last `SAMPLES` calls are its measurement and the
/// ones before them its warm-up (`Routine::sample` in criterion 0.5); in
/// test mode there is one call.
fn measured<T>(calls: &[T]) -> &[T] {
    &calls[calls.len().saturating_sub(SAMPLES)..]
}

/// What one call of a throughput routine did.
#[derive(Clone, Copy)]
struct Run {
    records: u64,
    elapsed: Duration,
}

/// Records per second over `runs`; `None` if nothing ran (the benchmark
/// was filtered out or only listed).
fn rate(runs: &[Run]) -> Option<f64> {
    let records: u64 = runs.iter().map(|r| r.records).sum();
    let elapsed: Duration = runs.iter().map(|r| r.elapsed).sum();
    (!runs.is_empty()).then(|| records as f64 / elapsed.as_secs_f64())
}

/// How much one call of a routine does.
#[derive(Clone, Copy)]
enum Amount {
    /// Criterion's iteration count: this many append calls, shared among
    /// the threads.
    Appends(u64),
    /// Test mode: append until this much time has passed.
    For(Duration),
}

/// Runs `threads` producer threads, each with its own `state`, calling
/// `append` (which returns the records it appended) until `amount` is
/// done. The time includes starting and joining the threads, as the
/// custom main's did.
fn drive<S>(
    threads: usize,
    amount: Amount,
    state: impl Fn() -> S + Sync,
    append: impl Fn(&S) -> u64 + Sync,
) -> Run {
    let stop = AtomicBool::new(false);
    let claimed = AtomicU64::new(0);
    let records = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let state = state();
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
                    records.fetch_add(append(&state), Ordering::Relaxed);
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

/// Benchmarks the throughput routine `run` as `id` and returns its
/// records/s over criterion's measurement. In test mode the one call
/// warms up for `quick_warm_up` (if any) and then measures one phase.
fn bench_rate(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: &str,
    settings: Settings,
    quick_warm_up: Option<Duration>,
    quick_phase: Duration,
    run: impl Fn(Amount) -> Run,
) -> Option<f64> {
    let mut runs = Vec::new();
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            page_cache::settle_page_cache();
            let done = if settings.quick {
                if let Some(warm_up) = quick_warm_up {
                    let _ = run(Amount::For(warm_up));
                }
                run(Amount::For(quick_phase))
            } else {
                run(Amount::Appends(iters))
            };
            runs.push(done);
            done.elapsed
        })
    });
    rate(measured(&runs))
}

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

/// A 3-replica cluster like [`cluster`] whose deletion waits for the
/// applications (`retain_until_applied`), with 8 MiB segments so that
/// deleting removes files while the producers run.
fn deleting_cluster() -> (Cluster, ReplicatedLog) {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_secs(30),
            fetch_wait_max: Duration::from_millis(500),
            request_timeout: Duration::from_secs(30),
            retain_until_applied: true,
            ..ReplicationConfig::default()
        })
        .log_config(LogConfig {
            segment_bytes_max: 8 * 1024 * 1024,
            ..LogConfig::default()
        })
        .session_timeout(Duration::from_secs(60))
        .build()
        .expect("cluster");
    cluster.create_log(LOG, 3).expect("create log");
    let leader = cluster.leader_log(LOG).expect("leader");
    (cluster, leader)
}

/// Runs `work` with, beside it when `delete`, an application that every
/// 100 ms reports each replica's high watermark as applied and deletes on
/// the leader up to its deletion bound. Returns `work`'s result and the log
/// start offset at the end.
fn with_deleter<T>(cluster: &Cluster, delete: bool, work: impl FnOnce() -> T) -> (T, Offset) {
    let stop = AtomicBool::new(false);
    let replicas: Vec<ReplicatedLog> = (0..3)
        .map(|n| cluster.log(NodeId(n), LOG).expect("replica"))
        .collect();
    let leader = cluster.leader_log(LOG).expect("leader");
    let result = std::thread::scope(|scope| {
        if delete {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    for replica in &replicas {
                        let _ = replica.set_applied(replica.high_watermark());
                    }
                    // Up to where the leader knows every position (the
                    // followers' arrive with their next fetches).
                    if let Ok(bound) = leader.deletion_bound() {
                        let _ = leader.delete_records_before(bound.bound);
                    }
                }
            });
        }
        let result = work();
        stop.store(true, Ordering::Relaxed);
        result
    });
    (result, leader.log_start_offset())
}

/// `threads` producers appending `batch` with `acks`.
fn appends(
    leader: &ReplicatedLog,
    batch: &RecordBatch,
    acks: Acks,
    threads: usize,
    amount: Amount,
) -> Run {
    drive(
        threads,
        amount,
        || (leader.clone(), batch.clone()),
        |(leader, batch)| {
            leader.append(batch, acks).expect("append");
            u64::from(batch.record_count())
        },
    )
}

/// One thread pipelining `batch` with `acks` through `append_pipelined`,
/// at most `window` appends in flight (it waits for the oldest when the
/// window is full). Records count once their outcome is `Ok`, so the last
/// window of a run is timed but not counted.
fn pipelined_appends(
    leader: &ReplicatedLog,
    batch: &RecordBatch,
    acks: Acks,
    window: usize,
    amount: Amount,
) -> Run {
    drive(
        1,
        amount,
        || {
            (
                leader.clone(),
                batch.clone(),
                std::cell::RefCell::new(std::collections::VecDeque::with_capacity(window)),
            )
        },
        |(leader, batch, in_flight)| {
            let mut in_flight = in_flight.borrow_mut();
            in_flight.push_back(
                leader
                    .append_pipelined(batch, acks)
                    .expect("append_pipelined"),
            );
            if in_flight.len() < window {
                return 0;
            }
            let oldest = in_flight.pop_front().expect("a handle in flight");
            oldest.wait().expect("pipelined append");
            u64::from(batch.record_count())
        },
    )
}

/// A reference for the 64-producer figure: `threads` threads that each
/// block once per "record" and are released, all at once, by one thread
/// that unparks them — no log, no replication. Every blocking `append`
/// from a thread of its own costs at least one such park and wake-up; this
/// simple version shows what those alone cost on this machine (a better
/// tuned one may do somewhat better, so it is a reference, not a bound).
fn block_and_wake(threads: usize, amount: Amount) -> Run {
    let generation = AtomicU64::new(0);
    let waiting = std::sync::Mutex::new(Vec::<std::thread::Thread>::new());
    let finished = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !finished.load(Ordering::Relaxed) {
                let released = std::mem::take(&mut *waiting.lock().expect("lock"));
                if released.is_empty() {
                    std::thread::yield_now();
                    continue;
                }
                // The generation moves before any unpark: a released thread
                // that wakes sees it moved.
                generation.fetch_add(1, Ordering::SeqCst);
                for thread in released {
                    thread.unpark();
                }
            }
        });
        let run = drive(
            threads,
            amount,
            || (),
            |_| {
                // Registered under the lock after reading the generation: a
                // release that takes this entry moves the generation after
                // the read, so the wait below ends.
                let seen = {
                    let mut waiting = waiting.lock().expect("lock");
                    waiting.push(std::thread::current());
                    generation.load(Ordering::SeqCst)
                };
                while generation.load(Ordering::SeqCst) == seen {
                    std::thread::park_timeout(Duration::from_millis(1));
                }
                1
            },
        );
        finished.store(true, Ordering::Relaxed);
        run
    })
}

/// Routes every send to one known leader: the bench measures the
/// idempotent path, not the harness's leader lookup.
struct KnownLeader(ReplicatedLog);

impl LeaderRouter for KnownLeader {
    fn leader_log(&self, _log: LogId) -> isrlog::Result<ReplicatedLog> {
        Ok(self.0.clone())
    }
}

fn batch_of_100(value: &[u8]) -> RecordBatchBuilder {
    let mut builder = RecordBatchBuilder::with_capacity(1_700_000_000_000, 100 * 1060);
    for _ in 0..100 {
        builder.push(value);
    }
    builder
}

/// Like [`appends`] with `acks=all` and batches of 100, but each thread is
/// an idempotent producer: every batch carries its producer id, epoch and
/// sequence. Each thread gets its producer id inside the timed run, as in
/// the custom main.
fn idempotent_appends(
    cluster: &Cluster,
    leader: &ReplicatedLog,
    threads: usize,
    amount: Amount,
) -> Run {
    let value = vec![0x5Au8; 1024];
    drive(
        threads,
        amount,
        || {
            IdempotentProducer::init(
                &cluster.coordinator,
                KnownLeader(leader.clone()),
                ProducerConfig::default(),
            )
            .expect("producer id")
        },
        |producer| {
            producer.send(LOG, batch_of_100(&value)).expect("send");
            100
        },
    )
}

/// Plain `acks=all` appends of freshly built batches of 100 (the same
/// building work the idempotent producer does per batch).
fn plain_built_appends(leader: &ReplicatedLog, threads: usize, amount: Amount) -> Run {
    let value = vec![0x5Au8; 1024];
    drive(
        threads,
        amount,
        || (),
        |()| {
            leader
                .append(&batch_of_100(&value).build().expect("batch"), Acks::All)
                .expect("append");
            100
        },
    )
}

/// Times `count` single appends of `batch` one after another, each alone.
fn latencies(leader: &ReplicatedLog, batch: &RecordBatch, acks: Acks, count: u64) -> Vec<Duration> {
    (0..count)
        .map(|_| {
            let start = Instant::now();
            leader.append(batch, acks).expect("append");
            start.elapsed()
        })
        .collect()
}

/// Benchmarks single appends of `batch` with `acks` as `id` and returns
/// p50 and p99 of every append timed in criterion's measurement. In test
/// mode the one call times `QUICK_LATENCY_SAMPLES` appends, after a
/// quarter as many if `quick_warm_up`.
fn bench_latency(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: &str,
    settings: Settings,
    quick_warm_up: bool,
    leader: &ReplicatedLog,
    batch: &RecordBatch,
    acks: Acks,
) -> Option<(Duration, Duration)> {
    let mut calls: Vec<Vec<Duration>> = Vec::new();
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let count = if settings.quick {
                if quick_warm_up {
                    let _ = latencies(leader, batch, acks, QUICK_LATENCY_SAMPLES / 4);
                }
                QUICK_LATENCY_SAMPLES
            } else {
                iters
            };
            let samples = latencies(leader, batch, acks, count);
            let total = samples.iter().sum();
            calls.push(samples);
            total
        })
    });
    let mut samples: Vec<Duration> = measured(&calls).concat();
    samples.sort();
    let count = samples.len();
    (count > 0).then(|| (samples[count / 2], samples[count * 99 / 100]))
}

fn replication(c: &mut Criterion) {
    let settings = Settings::from_env();
    let phase = settings.phase;
    let big = batch(100);
    let single = batch(1);

    // Every group builds its clusters (one at a time) before its
    // benchmarks and shuts them down after. The custom main kept one
    // 3-replica cluster through groups 1, 4, 2 and 3: its three copies
    // (no retention) grew to about 21 GB in a full run, which filled the
    // disk here; one group's cluster peaks near 12 GB.

    // 1. Batches of 100, 4 producers.
    let mut group = c.benchmark_group("replication/batches_of_100x1KiB/4_producers");
    configure(&mut group, phase);
    group.throughput(Throughput::Elements(100));
    let (single_cluster, single_leader) = cluster(1);
    let baseline = bench_rate(
        &mut group,
        "1_replica_acks_1",
        settings,
        Some(phase / 4),
        phase,
        |amount| appends(&single_leader, &big, Acks::Leader, 4, amount),
    );
    drop(single_leader);
    single_cluster.shutdown().expect("shutdown");
    let (replicated_cluster, leader) = cluster(3);
    let replicated = bench_rate(
        &mut group,
        "3_replicas_acks_all",
        settings,
        Some(phase / 4),
        phase,
        |amount| appends(&leader, &big, Acks::All, 4, amount),
    );
    drop(leader);
    replicated_cluster.shutdown().expect("shutdown");
    group.finish();

    // 4. Idempotent producers against plain acks=all, alternating, best of
    // two rounds each. The custom main had no warm-up here; criterion
    // needs one to size its samples, so it gets a short one.
    let mut group = c.benchmark_group("replication/idempotent/batches_of_100x1KiB/4_producers");
    configure(&mut group, phase / 2);
    group.warm_up_time(phase / 40);
    group.throughput(Throughput::Elements(100));
    let (replicated_cluster, leader) = cluster(3);
    let (mut plain, mut idempotent) = (None::<f64>, None::<f64>);
    for round in 1..=2 {
        let p = bench_rate(
            &mut group,
            &format!("plain_acks_all/round_{round}"),
            settings,
            None,
            phase / 2,
            |amount| plain_built_appends(&leader, 4, amount),
        );
        let i = bench_rate(
            &mut group,
            &format!("idempotent/round_{round}"),
            settings,
            None,
            phase / 2,
            |amount| idempotent_appends(&replicated_cluster, &leader, 4, amount),
        );
        plain = best(plain, p);
        idempotent = best(idempotent, i);
    }
    drop(leader);
    replicated_cluster.shutdown().expect("shutdown");
    group.finish();

    // 2. Latency of single-record appends, one producer.
    let mut group = c.benchmark_group("replication/latency/1_producer_1x1KiB");
    configure(&mut group, LATENCY_MEASUREMENT);
    let (replicated_cluster, leader) = cluster(3);
    let latency_all = bench_latency(
        &mut group,
        "acks_all",
        settings,
        true,
        &leader,
        &single,
        Acks::All,
    );
    let latency_one = bench_latency(
        &mut group,
        "acks_1",
        settings,
        false,
        &leader,
        &single,
        Acks::Leader,
    );
    drop(leader);
    replicated_cluster.shutdown().expect("shutdown");
    group.finish();

    // 3. 64 producers of single records.
    let mut group = c.benchmark_group("replication/64_producers_1x1KiB");
    configure(&mut group, phase);
    group.throughput(Throughput::Elements(1));
    let (replicated_cluster, leader) = cluster(3);
    let many = bench_rate(
        &mut group,
        "3_replicas_acks_all",
        settings,
        Some(phase / 4),
        phase,
        |amount| appends(&leader, &single, Acks::All, 64, amount),
    );
    drop(leader);
    replicated_cluster.shutdown().expect("shutdown");
    let (single_cluster, single_leader) = cluster(1);
    let many_baseline = bench_rate(
        &mut group,
        "1_replica_acks_1",
        settings,
        None,
        phase,
        |amount| appends(&single_leader, &single, Acks::Leader, 64, amount),
    );
    drop(single_leader);
    single_cluster.shutdown().expect("shutdown");
    let floor = bench_rate(
        &mut group,
        "reference_64_threads_block_and_wake",
        settings,
        None,
        phase,
        |amount| block_and_wake(64, amount),
    );
    group.finish();

    // 6. Deletion beside 64 producers (issue 25), alternating.
    let mut group = c.benchmark_group("replication/deletion/64_producers_1x1KiB");
    configure(&mut group, phase / 2);
    group.throughput(Throughput::Elements(1));
    let (deleting, deleting_leader) = deleting_cluster();
    let (mut kept, mut deleted) = (None::<f64>, None::<f64>);
    let log_start = std::cell::Cell::new(Offset(0));
    for round in 1..=2 {
        let k = bench_rate(
            &mut group,
            &format!("no_deletion/round_{round}"),
            settings,
            None,
            phase / 2,
            |amount| appends(&deleting_leader, &single, Acks::All, 64, amount),
        );
        // The deleting application runs beside the whole benchmark (its
        // warm-up included), not per call: a thread started and joined in
        // each call would be timed with the appends.
        let (d, start) = with_deleter(&deleting, true, || {
            bench_rate(
                &mut group,
                &format!("deleting_application/round_{round}"),
                settings,
                None,
                phase / 2,
                |amount| appends(&deleting_leader, &single, Acks::All, 64, amount),
            )
        });
        log_start.set(start);
        kept = best(kept, k);
        deleted = best(deleted, d);
    }
    let (log_start, log_end) = (log_start.get(), deleting_leader.log_end_offset());
    drop(deleting_leader);
    deleting.shutdown().expect("shutdown");
    group.finish();

    // 5. One thread pipelining single records (issue 14).
    let mut group = c.benchmark_group("replication/pipelined/1_thread_1x1KiB");
    configure(&mut group, phase);
    group.throughput(Throughput::Elements(1));
    let (replicated_cluster, leader) = cluster(3);
    let pipelined = bench_rate(
        &mut group,
        "3_replicas_acks_all_1024_in_flight",
        settings,
        Some(phase / 4),
        phase,
        |amount| pipelined_appends(&leader, &single, Acks::All, PIPELINED_WINDOW, amount),
    );
    drop(leader);
    replicated_cluster.shutdown().expect("shutdown");
    group.finish();

    // The figures, each next to its same-run baseline.
    if let (Some(replicated), Some(baseline)) = (replicated, baseline) {
        println!(
            "replication/batches_of_100x1KiB/4_producers: 3 replicas acks=all {:.0} records/s ({:.0} MB/s); \
             1 replica acks=1 {:.0} records/s ({:.0} MB/s); ratio {:.2} (target >= 0.5)",
            replicated,
            replicated * 1024.0 / 1e6,
            baseline,
            baseline * 1024.0 / 1e6,
            replicated / baseline
        );
    }
    if let (Some(idempotent), Some(plain)) = (idempotent, plain) {
        println!(
            "replication/idempotent/batches_of_100x1KiB/4_producers: idempotent {:.0} records/s; \
             plain acks=all {:.0} records/s; ratio {:.2} (target >= 0.90)",
            idempotent,
            plain,
            idempotent / plain
        );
    }
    if let (Some((p50_all, p99_all)), Some((p50_one, p99_one))) = (latency_all, latency_one) {
        println!(
            "replication/latency/1_producer_1x1KiB: acks=all p50 {:.1} µs p99 {:.1} µs (targets 20 / 100); \
             acks=1 on the same leader p50 {:.1} µs p99 {:.1} µs",
            p50_all.as_secs_f64() * 1e6,
            p99_all.as_secs_f64() * 1e6,
            p50_one.as_secs_f64() * 1e6,
            p99_one.as_secs_f64() * 1e6
        );
    }
    if let (Some(many), Some(many_baseline)) = (many, many_baseline) {
        println!(
            "replication/64_producers_1x1KiB: 3 replicas acks=all {:.0} records/s (target >= 500000); \
             1 replica acks=1 {:.0} records/s; ratio {:.2}",
            many,
            many_baseline,
            many / many_baseline
        );
    }
    if let (Some(pipelined), Some(many)) = (pipelined, many) {
        println!(
            "replication/pipelined/1_thread_1x1KiB: 3 replicas acks=all, {PIPELINED_WINDOW} in flight, {:.0} records/s \
             (issue 14 target >= 500000); 64 threads of blocking acks=all appends {:.0} records/s; ratio {:.2}",
            pipelined,
            many,
            pipelined / many
        );
    }
    if let (Some(deleted), Some(kept)) = (deleted, kept) {
        println!(
            "replication/deletion/64_producers_1x1KiB: 3 replicas acks=all with a deleting application {:.0} records/s \
             (log start {log_start} of {log_end} at the end); without deletion {:.0} records/s; ratio {:.2} (target >= 0.95)",
            deleted,
            kept,
            deleted / kept
        );
    }
    if let (Some(many), Some(floor)) = (many, floor) {
        println!(
            "replication/64_producers_1x1KiB/reference: 64 threads that only block and are woken once per record \
             (no log, no replication) {:.0} cycles/s; 3 replicas acks=all reach {:.2} of it",
            floor,
            many / floor
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

criterion_group!(benches, replication);
criterion_main!(benches);
