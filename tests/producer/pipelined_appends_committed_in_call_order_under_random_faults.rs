//! Issue 14: pipelined appends under every fault the fault test injects
//! (crashes with and without power loss, partitions, coordinator
//! partitions, slow links, forced leader changes). Each log's plain
//! producer keeps 8 `append_pipelined` calls in flight; the run checks that
//! every completed `Ok` is committed at its offset on every replica (G1,
//! as for blocking appends), that completed `Ok`s follow call order, and
//! that no handle stays unresolved. Under power loss without flushing,
//! where SPEC G1 lets committed records be lost (and their offsets be
//! reused), only G2–G4 and the resolution of every handle are checked.
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
            pipelined: 8,
            ..FaultTestConfig::new(seed, mode)
        };
        match run(&config) {
            Ok(report) => {
                assert!(
                    report.acknowledged > 0,
                    "seed {seed} {mode:?}: no append was acknowledged: {report:?}"
                );
                eprintln!("seed {seed} {mode:?} pipelined: ok {report:?}");
            }
            Err(failure) => panic!("pipelined: {failure}"),
        }
    }
}

#[test]
fn pipelined_appends_committed_in_call_order_under_process_crashes() {
    run_seeds(CrashMode::Process, 4);
}

#[test]
fn pipelined_appends_committed_in_call_order_under_power_loss_flush_always() {
    run_seeds(CrashMode::PowerLossFlushAlways, 3);
}

#[test]
fn pipelined_appends_resolved_under_power_loss_flush_never() {
    run_seeds(CrashMode::PowerLossFlushNever, 2);
}
