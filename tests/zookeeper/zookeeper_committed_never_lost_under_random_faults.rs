//! SPEC §5 G1–G4 under random faults with the nodes on a real ZooKeeper
//! (issue 11): seeded runs of `isrlog::testing::fault_test` where every
//! node has its own `ZkCoordinator` on one standalone server started here,
//! and "isolate from coordinator" cuts a node's connections to ZooKeeper at
//! a proxy (its sessions expire, as a partitioned process's would). Issue
//! 24: "lose coordinator reply" has a node's proxy lose the reply to its
//! next log write (applied by the server, never answered), and
//! "coordinator outage" kills the server until the next "heal network"
//! (often longer than twice the 300 ms session timeout) and restarts it on
//! the same data: what the nodes see of an ensemble that lost its quorum
//! (no session expires meanwhile; each gets a fresh timeout when it is
//! back).
//!
//! CI runs 3 seeds of process crashes and 2 of power loss under
//! `FlushPolicy::Always`; a seed's first fault is a lost reply (even
//! seeds) or an outage (odd seeds), so every run of two or more seeds
//! draws both, and the test checks it. Arming is not losing: a reply is
//! only lost if a write comes while armed, so the test also checks that
//! over the seeds at least one reply really was lost (applied by the
//! server, never answered), or the lost-reply fault proved nothing.
//! `ISRLOG_FAULT_SEEDS=N` runs seeds `0..N` of each (N must be at least 1:
//! a run of no seed fails rather than passing vacuously);
//! `ISRLOG_FAULT_SEED=S` runs seed `S` alone.

use std::sync::{Arc, Mutex};

use isrlog::testing::fault_test::{run_on_zookeeper_with_outages, CrashMode, FaultTestConfig};
use isrlog::testing::zookeeper::ZkServer;
use isrlog::testing::OutageHook;

fn env_number(name: &str) -> Option<u64> {
    let value = match std::env::var(name) {
        Ok(value) => value,
        Err(std::env::VarError::NotPresent) => return None,
        Err(error) => panic!("{name}: {error}"),
    };
    if value.trim().is_empty() {
        panic!("{name} is set but empty: give a number, or unset it for the CI default");
    }
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|error| panic!("{name}={value:?} is not a number: {error}")),
    )
}

fn seeds(ci_default: u64) -> Vec<u64> {
    if let Some(seed) = env_number("ISRLOG_FAULT_SEED") {
        return vec![seed];
    }
    let count = env_number("ISRLOG_FAULT_SEEDS").unwrap_or(ci_default);
    assert!(
        count > 0,
        "ISRLOG_FAULT_SEEDS=0 would run no seed and prove nothing: give at least 1"
    );
    (0..count).collect()
}

fn run_seeds(mode: CrashMode, ci_default: u64) -> std::collections::BTreeMap<&'static str, usize> {
    if std::env::var("RUST_LOG").is_ok() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
    let seeds = seeds(ci_default);
    let server = ZkServer::start().unwrap_or_else(|e| panic!("cannot start ZooKeeper: {e}"));
    let connect = server.connect_string();
    let server = Arc::new(Mutex::new(server));
    let outage = {
        let server = Arc::clone(&server);
        OutageHook(Arc::new(move |down| {
            let mut server = server.lock().unwrap_or_else(|e| e.into_inner());
            if down {
                server.kill();
                true
            } else {
                server
                    .resume()
                    .unwrap_or_else(|e| panic!("cannot restart ZooKeeper after an outage: {e}"));
                true
            }
        }))
    };
    let mut drawn: std::collections::BTreeMap<&'static str, usize> = Default::default();
    for seed in seeds {
        let config = FaultTestConfig::new(seed, mode);
        match run_on_zookeeper_with_outages(&config, &connect, Some(outage.clone())) {
            Ok(report) => {
                eprintln!("seed {seed} {mode:?} on ZooKeeper: ok {report:?}");
                for (fault, count) in &report.faults {
                    *drawn.entry(fault).or_insert(0) += count;
                }
            }
            Err(failure) => panic!("on ZooKeeper: {failure}"),
        }
    }
    eprintln!("{mode:?} on ZooKeeper: faults drawn over all seeds: {drawn:?}");
    drawn
}

/// Which faults a seed draws depends on timing too, except its first one:
/// on ZooKeeper that is a lost reply for even seeds and an outage for odd
/// ones, so any run of two or more seeds has armed both. An armed lost
/// reply only counts once a write came while it was armed (the report's
/// "coordinator replies lost" entry): armed and never triggered, the
/// seeds would test nothing about unknown outcomes (issue 24 review).
///
/// `really_lost`: also require that a reply was really lost. The forced
/// first lost reply arms every node, so a run with a crash or an ISR
/// change loses one; the power-loss run's two seeds draw too few faults
/// for that to be certain, so only the process-crash run (three seeds)
/// requires it.
fn assert_coordinator_faults_drawn(
    drawn: &std::collections::BTreeMap<&'static str, usize>,
    really_lost: bool,
) {
    if seeds(2).len() < 2 {
        return;
    }
    let mut kinds = vec!["lose coordinator reply", "coordinator outage"];
    if really_lost {
        kinds.push("coordinator replies lost (applied, never answered)");
    }
    for kind in kinds {
        assert!(
            drawn.get(kind).copied().unwrap_or(0) > 0,
            "no {kind:?} over the seeds: {drawn:?}"
        );
    }
}

#[test]
fn committed_never_lost_under_random_faults_on_zookeeper() {
    let drawn = run_seeds(CrashMode::Process, 3);
    assert_coordinator_faults_drawn(&drawn, true);
}

#[test]
fn committed_never_lost_under_random_power_loss_on_zookeeper() {
    let drawn = run_seeds(CrashMode::PowerLossFlushAlways, 2);
    assert_coordinator_faults_drawn(&drawn, false);
}
