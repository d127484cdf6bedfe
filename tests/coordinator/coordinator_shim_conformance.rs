//! The coordinator conformance suite run through the demo coordinator shim
//! of `examples/tcp_cluster`: a `MemoryCoordinator` on a manual clock,
//! served over loopback TCP and called through `RemoteCoordinator`. Proves
//! the shim's line encoding and its event stream keep the trait's contract
//! (the example's multi-process mode depends on it).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use isrlog::testing::coordinator_suite::{self, SuiteTime};
use isrlog::{ManualClock, MemoryCoordinator};

#[test]
fn coordinator_shim_conforms_with_manual_time() {
    coordinator_suite::run_with_time(|| {
        let clock = ManualClock::default();
        let coordinator = MemoryCoordinator::new(Arc::new(clock.clone()));
        let addr =
            crate::coordinator_shim::serve(coordinator, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
                .expect("serve the shim on loopback");
        (
            crate::coordinator_shim::RemoteCoordinator::new(addr),
            SuiteTime::manual(move |by| clock.advance(by)),
        )
    });
}
