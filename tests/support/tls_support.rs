//! Shared by the `tls_*` tests: a throwaway certificate authority minted
//! with rcgen, node certificates following the identity convention
//! (`node-<id>.isrlog`), a TLS network factory for the transport
//! conformance suite, and raw TLS clients that send hand-made frames.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use isrlog::testing::fuzz::{decode_frames, encode_request_frame};
use isrlog::testing::{TcpTransportFactory, TransportFactory};
use isrlog::transport::{node_dns_name, Request, RequestHandler, Transport};
use isrlog::{NodeId, TcpServer, TcpTransport, TlsConfig};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A CA that signs node certificates, all in memory.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A node certificate and its key, as PEM text.
pub struct NodeCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestCa {
    /// A fresh CA called `name`.
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("self-signed CA");
        TestCa { cert, key }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// A certificate with these DNS subject alternative names, for both
    /// server and client use, signed by this CA.
    pub fn cert_for_names(&self, names: &[String]) -> NodeCert {
        let key = KeyPair::generate().expect("node key");
        let mut params = CertificateParams::new(names.to_vec()).expect("node params");
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().map_or("", String::as_str));
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("sign node certificate");
        NodeCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Node `node`'s certificate: one DNS name, `node-<id>.isrlog`.
    pub fn node_cert(&self, node: NodeId) -> NodeCert {
        self.cert_for_names(&[node_dns_name(node)])
    }

    /// Node `node`'s TLS settings, trusting this CA.
    pub fn node_config(&self, node: NodeId) -> TlsConfig {
        let cert = self.node_cert(node);
        TlsConfig::from_pem(
            self.pem().as_bytes(),
            cert.cert_pem.as_bytes(),
            cert.key_pem.as_bytes(),
        )
        .unwrap_or_else(|error| panic!("TLS settings of {node}: {error}"))
    }

    /// TLS settings of nodes `0..nodes`.
    pub fn cluster_configs(&self, nodes: u32) -> BTreeMap<NodeId, TlsConfig> {
        (0..nodes)
            .map(|id| (NodeId(id), self.node_config(NodeId(id))))
            .collect()
    }
}

/// Builds loopback TLS networks for the transport conformance suite: every
/// node gets a certificate from one CA, minted when its network is built.
pub struct TlsTransportFactory {
    ca: TestCa,
    servers: Vec<TcpServer>,
}

impl TlsTransportFactory {
    /// A factory with a fresh CA.
    pub fn new() -> TlsTransportFactory {
        TlsTransportFactory {
            ca: TestCa::new("isrlog conformance CA"),
            servers: Vec::new(),
        }
    }
}

impl TransportFactory for TlsTransportFactory {
    fn build(&mut self, nodes: &[(NodeId, Arc<dyn RequestHandler>)]) -> Vec<Arc<dyn Transport>> {
        let config = TcpTransportFactory::test_config();
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let mut addrs = HashMap::new();
        let mut tls = HashMap::new();
        for (node, handler) in nodes {
            let node_tls = self.ca.node_config(*node);
            let server = TcpServer::bind_tls(
                loopback,
                Arc::clone(handler),
                config.clone(),
                node_tls.clone(),
            )
            .unwrap_or_else(|error| panic!("binding a TLS server for {node} failed: {error}"));
            addrs.insert(*node, server.local_addr());
            tls.insert(*node, node_tls);
            self.servers.push(server);
        }
        nodes
            .iter()
            .map(|(node, _)| {
                let transport =
                    TcpTransport::with_tls(*node, addrs.clone(), config.clone(), tls[node].clone())
                        .unwrap_or_else(|error| panic!("TLS client for {node}: {error}"));
                Arc::new(transport) as Arc<dyn Transport>
            })
            .collect()
    }

    fn deadline_preempts_handler(&self) -> bool {
        true
    }

    fn teardown(&mut self) {
        for server in self.servers.drain(..) {
            server.shutdown();
        }
    }
}

/// What a hand-made client saw after sending its frames.
#[derive(Debug)]
pub enum Seen {
    /// The server answered with these many frames (`bytes` in all).
    Answered { frames: usize, bytes: usize },
    /// The server closed the connection (or the TLS session failed) with
    /// `bytes` plaintext bytes received before; `reason` is how it ended.
    Refused { bytes: usize, reason: String },
}

/// A rustls client configuration: trusts `ca_pem`, presents `cert` if any.
pub fn raw_client_config(ca_pem: &str, cert: Option<&NodeCert>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(ca.expect("CA PEM")).expect("CA certificate");
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots);
    let config = match cert {
        Some(cert) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
                    .map(|c| c.expect("cert PEM"))
                    .collect(),
                PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).expect("key PEM"),
            )
            .expect("client auth cert"),
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// Connects to server node `server` at `addr` with `config`, sends one
/// request frame per `(from, request)`, and reports what came back within
/// `wait` (or the connection's end). A TLS error anywhere counts as a
/// refusal, as does the server closing the connection.
pub fn send_raw(
    addr: SocketAddr,
    server: NodeId,
    config: Arc<rustls::ClientConfig>,
    frames: &[(NodeId, Request)],
    wait: Duration,
) -> Seen {
    let name = ServerName::try_from(node_dns_name(server)).expect("server name");
    let session = rustls::ClientConnection::new(config, name).expect("client session");
    let socket = TcpStream::connect(addr).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("read timeout");
    let mut stream = rustls::StreamOwned::new(session, socket);
    let mut sent = Vec::new();
    for (id, (from, request)) in frames.iter().enumerate() {
        let frame = encode_request_frame(id as u64 + 1, *from, request, 1 << 20)
            .expect("request fits a frame");
        sent.extend(frame);
    }
    if let Err(error) = stream.write_all(&sent).and_then(|()| stream.flush()) {
        return Seen::Refused {
            bytes: 0,
            reason: format!("write failed: {error}"),
        };
    }
    let deadline = Instant::now() + wait;
    let mut received = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let decoded = decode_frames(&received, 1 << 26);
        if decoded.frames.len() == frames.len() {
            return Seen::Answered {
                frames: decoded.frames.len(),
                bytes: received.len(),
            };
        }
        if Instant::now() >= deadline {
            panic!(
                "the server neither answered all {} frames nor closed within {wait:?} ({} bytes came)",
                frames.len(),
                received.len()
            );
        }
        match stream.read(&mut buf) {
            Ok(0) => {
                return Seen::Refused {
                    bytes: received.len(),
                    reason: "closed".into(),
                }
            }
            Ok(read) => received.extend_from_slice(&buf[..read]),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => {
                return Seen::Refused {
                    bytes: received.len(),
                    reason: error.to_string(),
                }
            }
        }
    }
}
