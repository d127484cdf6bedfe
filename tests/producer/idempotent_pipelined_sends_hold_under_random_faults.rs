//! Issue 27: the fault test's idempotent producers with pipelining on.
//! Each log's `IdempotentProducer` keeps up to 5 batches in flight with
//! `send_pipelined` through a router that drops acknowledgements at
//! random, under every fault the fault test injects (crashes with and
//! without power loss, partitions, coordinator partitions, slow links,
//! forced leader changes). The run checks G1–G4 as for every run: every
//! acknowledged value is committed at its offset on every replica, no
//! value is written twice, replicas agree below their high watermarks,
//! reads stay below them; and that the idempotent producer's completed
//! `Ok`s follow call order and it never sees `ProducerFenced` while no
//! acknowledged data is lost. (`OutOfOrderSequence` may come, honestly, for
//! a batch that is not in the log: a new leader that did not know the
//! producer took a later batch first; see `IdempotentSends::fails_for_good`.)
//!
//! `ISRLOG_FAULT_SEEDS=N` runs seeds `0..N` of each mode;
//! `ISRLOG_FAULT_SEED=S` runs seed `S` alone.

use isrlog::testing::fault_test::{run, CrashMode, FaultTestConfig};

fn seeds(ci_default: u64) -> Vec<u64> {
    let number = |name: &str| {
        std::env::var(name).ok().map(|value| {
            value
                .parse::<u64>()
                .unwrap_or_else(|error| panic!("{name}={value:?} is not a number: {error}"))
        })
    };
    if let Some(seed) = number("ISRLOG_FAULT_SEED") {
        return vec![seed];
    }
    (0..number("ISRLOG_FAULT_SEEDS").unwrap_or(ci_default)).collect()
}

fn run_seeds(mode: CrashMode, ci_default: u64) {
    for seed in seeds(ci_default) {
        let config = FaultTestConfig {
            idempotent_pipelined: true,
            ..FaultTestConfig::new(seed, mode)
        };
        match run(&config) {
            Ok(report) => {
                assert!(
                    report.idempotent_acknowledged > 0,
                    "seed {seed} {mode:?}: no idempotent send was acknowledged: {report:?}"
                );
                eprintln!("seed {seed} {mode:?} idempotent pipelined: ok {report:?}");
            }
            Err(failure) => panic!("idempotent pipelined: {failure}"),
        }
    }
}

#[test]
fn idempotent_pipelined_sends_hold_under_process_crashes() {
    run_seeds(CrashMode::Process, 4);
}

#[test]
fn idempotent_pipelined_sends_hold_under_power_loss_flush_always() {
    run_seeds(CrashMode::PowerLossFlushAlways, 3);
}

#[test]
fn idempotent_pipelined_sends_hold_under_power_loss_flush_never() {
    run_seeds(CrashMode::PowerLossFlushNever, 2);
}
