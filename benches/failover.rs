//! Failover time on the memory transport (issue 4): from a leader's process
//! crash — noticed by the coordinator only when its session expires, as a
//! real crash is — to the first successful `acks=all` append on the new
//! leader, with a 1 s session timeout. Median and max over 20 failovers.
//! Target: median <= session timeout + 100 ms.
//!
//! Criterion measures it (one iteration is one failover; the crashed node's
//! restart and return to the ISR happen between iterations, untimed) on one
//! cluster built outside the measured routine, and after its report the
//! bench prints median, min and max against the target.
//!
//! Run with `cargo bench --bench failover`; `-- --test` runs 2 failovers
//! (CI).

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use isrlog::testing::{Cluster, Lose, SessionEnd};
use isrlog::{Acks, ControllerConfig, LogId, ReplicationConfig};

const FAILOVERS: usize = 20;
const SESSION_TIMEOUT: Duration = Duration::from_secs(1);
/// Failovers in criterion's test mode (`-- --test`, CI).
const QUICK_FAILOVERS: u64 = 2;
/// Criterion's samples (its minimum); `FAILOVERS / SAMPLES` failovers each.
const SAMPLES: usize = 10;

/// Crashes the leader of `log`, returns the time until an `acks=all`
/// append succeeds on another node, then restarts the crashed node and
/// waits for it to rejoin the ISR (not timed).
fn failover(cluster: &Cluster, log: LogId, round: usize) -> Duration {
    let leader = cluster.leader_log(log).expect("a leader");
    leader
        .append_values(&[format!("before {round}")], Acks::All)
        .expect("append before the crash");
    let crashed = leader.node_id();
    let started = Instant::now();
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
    cluster.restart(crashed).expect("restart");
    let back = cluster.wait_until(Duration::from_secs(10), |c| {
        c.in_sync_replicas(log).len() == 3
    });
    assert!(back, "the restarted node rejoins the ISR");
    took
}

fn failovers(c: &mut Criterion) {
    // Criterion's test mode (the rule of its `configure_from_args`): it
    // calls the routine once with one iteration and ignores the time.
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench");
    let cluster = Cluster::builder()
        .nodes(3)
        .session_timeout(SESSION_TIMEOUT)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_secs(10),
            fetch_wait_max: Duration::from_millis(100),
            request_timeout: Duration::from_secs(5),
            fetch_backoff: Duration::from_millis(10),
            ..ReplicationConfig::default()
        })
        .controller(Some(ControllerConfig::default()))
        .build()
        .expect("cluster starts");
    let log = LogId(0);
    cluster.create_log(log, 3).expect("log created");

    let mut group = c.benchmark_group("failover/memory_transport");
    // Criterion's warm-up runs until its time is exceeded: with 1 ns that
    // is one failover, which estimates the time of one. Each of `SAMPLES`
    // samples then gets ceil(sample time / estimate) failovers; a sample
    // time of (k - 1/2) session timeouts gives k = `FAILOVERS / SAMPLES`
    // for any estimate from 0.75 to 1.5 session timeouts (it is about one).
    let per_sample = (FAILOVERS / SAMPLES) as u32;
    group
        .sample_size(SAMPLES)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_nanos(1))
        .measurement_time(SESSION_TIMEOUT * (2 * per_sample - 1) / 2 * SAMPLES as u32);
    let mut calls: Vec<Vec<Duration>> = Vec::new();
    let mut round = 0;
    group.bench_function("session_timeout_1s/crash_to_first_acks_all_append", |b| {
        b.iter_custom(|iters| {
            let count = if quick { QUICK_FAILOVERS } else { iters };
            let times: Vec<Duration> = (0..count)
                .map(|_| {
                    round += 1;
                    failover(&cluster, log, round)
                })
                .collect();
            let total = times.iter().sum();
            calls.push(times);
            total
        })
    });
    group.finish();
    drop(cluster);

    // The last `SAMPLES` calls are criterion's measurement, the ones
    // before them its warm-up (`Routine::sample` in criterion 0.5); in
    // test mode there is one call.
    let mut times: Vec<Duration> = calls[calls.len().saturating_sub(SAMPLES)..].concat();
    if times.is_empty() {
        return; // filtered out or only listed
    }
    times.sort();
    let median = times[times.len() / 2];
    let max = times[times.len() - 1];
    let target = SESSION_TIMEOUT + Duration::from_millis(100);
    println!(
        "failover (memory transport, session timeout {SESSION_TIMEOUT:?}, {} failovers): median {:.1} ms, min {:.1} ms, max {:.1} ms; target median <= {:.0} ms: {}",
        times.len(),
        median.as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        target.as_secs_f64() * 1e3,
        if median <= target { "met" } else { "MISSED" }
    );
}

criterion_group!(benches, failovers);
criterion_main!(benches);
