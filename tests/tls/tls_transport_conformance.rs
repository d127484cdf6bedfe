//! Issue 12: the TCP transport over mutual TLS passes the same conformance
//! suite as the memory and plain TCP transports, every node with its own
//! certificate from one CA.

use crate::tls_support::TlsTransportFactory;
use isrlog::testing::transport_suite;

#[test]
fn tls_transport_passes_the_conformance_suite() {
    transport_suite::run(TlsTransportFactory::new());
}
