//! The ZooKeeper coordinator (issue 11), against a standalone server this
//! bench starts on loopback:
//! - compare-and-set round trip (`ZkCoordinator::compare_and_set`: one read
//!   and one conditional write), p50 and p99, next to the same call on
//!   `MemoryCoordinator` measured in the same run;
//! - failover: from a leader's process hanging (its lease stops being
//!   renewed, so its coordinator closes its session one session timeout
//!   after its last heartbeat) to the first successful `acks=all` append on
//!   the new leader, with a 1 s session timeout; median and max over 10
//!   failovers. Target: max <= session timeout + 200 ms;
//! - the same from a leader's process crashing: its connection to
//!   ZooKeeper is cut (at a proxy) along with it, so nothing closes its
//!   session and ZooKeeper must expire it.
//!
//! Criterion measures both; after its reports the bench prints the figures.
//! Run with `cargo bench --features zookeeper --bench zookeeper`;
//! `-- --test` runs a few iterations (CI).

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use isrlog::testing::zookeeper::ZkServer;
use isrlog::testing::{Lose, SessionEnd, ZkCluster};
use isrlog::{
    Acks, CasOutcome, Coordinator, LogId, LogUpdate, MemoryCoordinator, NodeId, ReplicationConfig,
    SystemClock, ZkCoordinator, ZkCoordinatorConfig,
};

const SESSION_TIMEOUT: Duration = Duration::from_secs(1);
const FAILOVERS: usize = 10;
const QUICK_FAILOVERS: u64 = 1;
const SAMPLES: usize = 10;
const QUICK_ROUND_TRIPS: u64 = 20;
/// Round-trip times kept per coordinator for the percentiles.
const SAMPLES_KEPT_MAX: usize = 100_000;

fn quick() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench")
}

/// One compare-and-set that flips the ISR of `log` between two values,
/// timed; panics if it does not apply (nobody else writes the log).
fn timed_cas(coordinator: &dyn Coordinator, log: LogId) -> Duration {
    let state = coordinator
        .log_state(log)
        .expect("read")
        .expect("log exists");
    let isr = if state.in_sync_replicas.len() == 3 {
        vec![NodeId(0), NodeId(1)]
    } else {
        vec![NodeId(0), NodeId(1), NodeId(2)]
    };
    let update = LogUpdate::in_sync_replicas(&state, isr, 1);
    let started = Instant::now();
    let outcome = coordinator
        .compare_and_set(log, state.leader_epoch, state.version, update)
        .expect("compare-and-set");
    let took = started.elapsed();
    assert!(matches!(outcome, CasOutcome::Applied(_)), "{outcome:?}");
    took
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn round_trips(c: &mut Criterion, server: &ZkServer) {
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = "/bench-cas".to_owned();
    let zookeeper = ZkCoordinator::connect(config).expect("connect");
    let memory = MemoryCoordinator::new(Arc::new(SystemClock));
    let replicas = vec![NodeId(0), NodeId(1), NodeId(2)];
    let log = LogId(1);
    zookeeper.create_log(log, replicas.clone()).expect("create");
    memory.create_log(log, replicas).expect("create");

    let coordinators: [(&str, &dyn Coordinator); 2] =
        [("zookeeper", &zookeeper), ("memory (baseline)", &memory)];
    let mut figures = Vec::new();
    let mut group = c.benchmark_group("coordinator/compare_and_set");
    group.sample_size(SAMPLES);
    for (name, coordinator) in coordinators {
        let mut times: Vec<Duration> = Vec::new();
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let count = if quick() { QUICK_ROUND_TRIPS } else { iters };
                let mut total = Duration::ZERO;
                for _ in 0..count {
                    let took = timed_cas(coordinator, log);
                    // The memory baseline runs tens of millions of calls:
                    // keep the first ones only, which is plenty for p99.
                    if times.len() < SAMPLES_KEPT_MAX {
                        times.push(took);
                    }
                    total += took;
                }
                total
            })
        });
        if !times.is_empty() {
            times.sort();
            figures.push((name, times));
        }
    }
    group.finish();
    for (name, times) in figures {
        println!(
            "compare-and-set round trip, {name}, loopback ({} calls kept): p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            times.len(),
            millis(percentile(&times, 0.50)),
            millis(percentile(&times, 0.99)),
            millis(times[times.len() - 1]),
        );
    }
}

/// How a failover's leader goes.
#[derive(Clone, Copy)]
enum Fault {
    /// Its process hangs: its own coordinator closes its session once its
    /// lease lapses.
    Hang,
    /// Its process crashes and its ZooKeeper connections go with it:
    /// ZooKeeper expires the session.
    Crash,
}

/// Hangs or crashes the leader of `log`, returns the time until an
/// `acks=all` append succeeds on another node, then restarts the node and
/// waits for it to rejoin the ISR (not timed).
fn failover(cluster: &ZkCluster, log: LogId, round: usize, fault: Fault) -> Duration {
    let leader = cluster.leader_log(log).expect("a leader");
    leader
        .append_values(&[format!("before {round}")], Acks::All)
        .expect("append before the crash");
    let crashed = leader.node_id();
    let started = Instant::now();
    if let Fault::Crash = fault {
        cluster
            .cut_from_zookeeper(crashed, true)
            .expect("a proxied cluster");
    }
    cluster.crash_with(crashed, Lose::Nothing, SessionEnd::OnExpiry);
    loop {
        let appended = cluster
            .leader_of(log)
            .filter(|&node| node != crashed)
            .and_then(|node| cluster.log(node, log).ok())
            .map(|handle| handle.append_values(&[format!("after {round}")], Acks::All));
        if matches!(appended, Some(Ok(_))) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no failover after 30 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = started.elapsed();
    if let Fault::Crash = fault {
        cluster
            .cut_from_zookeeper(crashed, false)
            .expect("a proxied cluster");
    }
    cluster.restart(crashed).expect("restart");
    let back = cluster.wait_until(Duration::from_secs(20), |c| {
        c.in_sync_replicas(log).len() == 3
    });
    assert!(back, "the restarted node rejoins the ISR");
    took
}

fn failovers(c: &mut Criterion, server: &ZkServer) {
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(3)
        .session_timeout(SESSION_TIMEOUT)
        // Each node reaches ZooKeeper through its own proxy, so that a
        // crash can cut its connections.
        .proxied(true)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_secs(10),
            fetch_wait_max: Duration::from_millis(100),
            request_timeout: Duration::from_secs(5),
            fetch_backoff: Duration::from_millis(10),
            ..ReplicationConfig::default()
        })
        .build()
        .expect("cluster starts");
    let log = LogId(0);
    cluster.create_log(log, 3).expect("log created");

    let mut group = c.benchmark_group("failover/zookeeper");
    // As in benches/failover.rs: one warm-up failover, then `SAMPLES`
    // samples of `FAILOVERS / SAMPLES` failovers each.
    let per_sample = (FAILOVERS / SAMPLES).max(1) as u32;
    group
        .sample_size(SAMPLES)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_nanos(1))
        .measurement_time(SESSION_TIMEOUT * (2 * per_sample - 1) / 2 * SAMPLES as u32);
    let mut figures: Vec<(&str, Vec<Vec<Duration>>)> = Vec::new();
    let mut round = 0;
    for (name, fault) in [("hang", Fault::Hang), ("crash with expiry", Fault::Crash)] {
        let mut calls: Vec<Vec<Duration>> = Vec::new();
        let id = match fault {
            Fault::Hang => "session_timeout_1s/hang_to_first_acks_all_append",
            Fault::Crash => "session_timeout_1s/crash_to_first_acks_all_append",
        };
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let count = if quick() { QUICK_FAILOVERS } else { iters };
                let times: Vec<Duration> = (0..count)
                    .map(|_| {
                        round += 1;
                        failover(&cluster, log, round, fault)
                    })
                    .collect();
                let total = times.iter().sum();
                calls.push(times);
                total
            })
        });
        figures.push((name, calls));
    }
    group.finish();
    drop(cluster);

    for (name, calls) in figures {
        print_failovers(name, &calls);
    }
}

/// Prints median, min and max of the last `SAMPLES` samples' failovers.
fn print_failovers(name: &str, calls: &[Vec<Duration>]) {
    let mut times: Vec<Duration> = calls[calls.len().saturating_sub(SAMPLES)..].concat();
    if times.is_empty() {
        return;
    }
    times.sort();
    let median = times[times.len() / 2];
    let max = times[times.len() - 1];
    let target = SESSION_TIMEOUT + Duration::from_millis(200);
    println!(
        "failover on ZooKeeper after a leader's {name} (session timeout {SESSION_TIMEOUT:?}, {} failovers): median {:.1} ms, min {:.1} ms, max {:.1} ms; target max <= {:.0} ms: {}",
        times.len(),
        millis(median),
        millis(times[0]),
        millis(max),
        millis(target),
        if max <= target { "met" } else { "MISSED" }
    );
}

fn zookeeper(c: &mut Criterion) {
    let server = ZkServer::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
    round_trips(c, &server);
    failovers(c, &server);
}

criterion_group!(benches, zookeeper);
criterion_main!(benches);
