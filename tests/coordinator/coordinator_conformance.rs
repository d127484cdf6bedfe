//! The coordinator conformance suite run against `MemoryCoordinator`, once
//! with a manual clock moved by the suite and once with real time.

use std::sync::Arc;

use isrlog::testing::coordinator_suite::{self, SuiteTime};
use isrlog::{ManualClock, MemoryCoordinator, SystemClock};

#[test]
fn memory_coordinator_conforms_with_manual_time() {
    coordinator_suite::run_with_time(|| {
        let clock = ManualClock::default();
        let coordinator = MemoryCoordinator::new(Arc::new(clock.clone()));
        (coordinator, SuiteTime::manual(move |by| clock.advance(by)))
    });
}

#[test]
fn memory_coordinator_conforms_with_real_time() {
    coordinator_suite::run(|| MemoryCoordinator::new(Arc::new(SystemClock)));
}
