//! Issue 12: a TLS client accepts a server only if its certificate chains
//! to the client's CA and names the node the client meant to call. A server
//! at node 0's address with node 2's certificate, a wildcard certificate or
//! one from another CA gets no request: the call fails as unreachable, the
//! server's handler sees nothing; the real node 0 is then called as usual.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::tls_support::TestCa;
use isrlog::testing::{
    echo_response, sample_epoch_request, EchoHandler, RecordingHandler, TcpTransportFactory,
};
use isrlog::transport::{RequestHandler, TransportError};
use isrlog::{NodeId, TcpServer, TcpTransport, TlsConfig, Transport};

const TARGET: NodeId = NodeId(0);
const CLIENT: NodeId = NodeId(1);

fn server(tls: TlsConfig, handler: Arc<dyn RequestHandler>) -> TcpServer {
    TcpServer::bind_tls(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        handler,
        TcpTransportFactory::test_config(),
        tls,
    )
    .expect("bind")
}

fn config_from_pems(ca: &TestCa, cert: &crate::tls_support::NodeCert) -> TlsConfig {
    TlsConfig::from_pem(
        ca.pem().as_bytes(),
        cert.cert_pem.as_bytes(),
        cert.key_pem.as_bytes(),
    )
    .expect("TLS settings")
}

#[test]
fn a_server_whose_certificate_names_another_node_is_refused() {
    let ca = TestCa::new("isrlog client test CA");
    let rogue_ca = TestCa::new("rogue CA");
    let client_tls = ca.node_config(CLIENT);

    // The impostors: node 2's valid certificate, and node 0's name from
    // another CA. (A wildcard `*.isrlog` certificate, which would pass a
    // plain host name check for node-0.isrlog, cannot even be loaded as a
    // node's settings: checked below.)
    let impostors = [
        ("node 2's certificate", ca.node_config(NodeId(2))),
        ("another CA's node 0", rogue_ca.node_config(TARGET)),
    ];
    for (what, tls) in impostors {
        let recorder = Arc::new(RecordingHandler::new(Arc::new(EchoHandler::new(TARGET))));
        let impostor = server(tls, recorder.clone() as Arc<dyn RequestHandler>);
        let client = TcpTransport::with_tls(
            CLIENT,
            HashMap::from([(TARGET, impostor.local_addr())]),
            TcpTransportFactory::test_config(),
            client_tls.clone(),
        )
        .expect("client");
        let result = client.call(
            TARGET,
            sample_epoch_request(CLIENT, 1),
            Instant::now() + Duration::from_secs(20),
        );
        match result {
            Err(TransportError::Unreachable { reason, .. }) => {
                assert!(reason.contains("TLS handshake"), "{what}: {reason}");
            }
            other => panic!("{what}: expected the call to fail as unreachable, got {other:?}"),
        }
        assert_eq!(recorder.received_count(), 0, "{what}: a request reached it");
        impostor.shutdown();
    }

    let wildcard = ca.cert_for_names(&["*.isrlog".to_string()]);
    match TlsConfig::from_pem(
        ca.pem().as_bytes(),
        wildcard.cert_pem.as_bytes(),
        wildcard.key_pem.as_bytes(),
    ) {
        Err(error) => assert!(error.to_string().contains("names no node"), "{error}"),
        Ok(tls) => panic!("a wildcard certificate was taken as {}", tls.node()),
    }

    // The real node 0.
    let real = server(
        config_from_pems(&ca, &ca.node_cert(TARGET)),
        Arc::new(EchoHandler::new(TARGET)),
    );
    let client = TcpTransport::with_tls(
        CLIENT,
        HashMap::from([(TARGET, real.local_addr())]),
        TcpTransportFactory::test_config(),
        client_tls,
    )
    .expect("client");
    let request = sample_epoch_request(CLIENT, 2);
    let answer = client
        .call(
            TARGET,
            request.clone(),
            Instant::now() + Duration::from_secs(20),
        )
        .expect("the real node 0 answers");
    assert_eq!(answer, echo_response(TARGET, CLIENT, &request));
}

#[test]
fn a_client_certificate_must_name_the_local_node() {
    let ca = TestCa::new("isrlog client test CA");
    match TcpTransport::with_tls(
        CLIENT,
        HashMap::new(),
        TcpTransportFactory::test_config(),
        ca.node_config(NodeId(2)),
    ) {
        Err(error) => assert!(error.to_string().contains("node-2"), "{error}"),
        Ok(_) => panic!("a client for node 1 took node 2's certificate"),
    }
}
