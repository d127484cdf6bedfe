//! The TCP transport passes the same conformance suite as the memory
//! transport, over loopback sockets.

use isrlog::testing::{transport_suite, TcpTransportFactory};

#[test]
fn tcp_transport_passes_the_conformance_suite() {
    transport_suite::run(TcpTransportFactory::new());
}
