//! Mutual TLS 1.3 for the TCP transport (feature `tls`): [`TlsConfig`] (a
//! node's CA, certificate and key), the handshake on both sides, and the
//! encrypted byte stream the frame code reads and writes.
//!
//! Owns the TLS sessions, certificate checks and the rule that names the
//! node a certificate speaks for; not the frames (`frame.rs`, `io.rs`), nor
//! what a request means, nor the connection's threads (`client.rs`,
//! `server.rs`).
//!
//! # Identity convention
//!
//! A node's certificate names the node in a subject alternative name of
//! type DNS: `node-<id>.isrlog`, with `<id>` the decimal [`NodeId`] without
//! leading zeros (node 2: `node-2.isrlog`; see [`node_dns_name`]). It must
//! carry exactly one such name; other DNS names (a host name, say) are
//! allowed and ignored, wildcards never name a node. Both sides check it:
//! - the server reads the client's certificate after verifying it against
//!   the CA, and that connection may then only send frames whose sender
//!   (and `replica` field) is that node; a frame claiming another node is
//!   refused, logged (rate-limited) and the connection is closed before the
//!   request reaches the handler;
//! - the client dials node `n` with server name `node-<n>.isrlog`, so the
//!   handshake fails unless the server's certificate is valid for it, and
//!   then checks that the certificate names exactly node `n`.
//!
//! Only TLS 1.3 is offered, with rustls on the `ring` backend; both sides
//! must present a certificate chained to the configured CA (Kafka's
//! `ssl.client.auth=required`).
//!
//! # Threads and locks
//!
//! A connection is read by one thread and written by others at once. A TLS
//! session (`rustls::Connection`) is one state machine, so it sits behind a
//! mutex that is held only to move bytes in or out of it, never across a
//! socket call: the reader reads raw bytes off the socket unlocked, then
//! feeds them in; a writer encrypts a chunk under the lock, then writes it
//! under a second lock that keeps records in order on the socket. Lock
//! order: writer's socket lock, then session lock.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

use crate::error::{Error, Result};
use crate::sync::{Arc, Mutex};
use crate::types::NodeId;

/// Raw (encrypted) bytes a reader takes off the socket at a time.
const RAW_READ_BYTES: usize = 64 * 1024;

/// Decrypted bytes after which the reader stops feeding ciphertext and
/// hands them out: rustls's own limit on buffered plaintext (16 KiB).
const PLAINTEXT_READY_BYTES: usize = 16 * 1024;

/// Plaintext a writer encrypts under the session lock at a time: large
/// enough for few syscalls, small enough that the reader is not held up
/// behind a 64 MiB response being encrypted.
const WRITE_CHUNK_BYTES: usize = 64 * 1024;

/// The DNS name suffix of node certificates.
const NODE_NAME_SUFFIX: &str = ".isrlog";
/// The DNS name prefix of node certificates.
const NODE_NAME_PREFIX: &str = "node-";

/// The DNS subject alternative name that node `node`'s certificate carries:
/// `node-<id>.isrlog`.
pub fn node_dns_name(node: NodeId) -> String {
    format!("{NODE_NAME_PREFIX}{}{NODE_NAME_SUFFIX}", node.0)
}

/// The node a DNS name names, if it is exactly `node-<id>.isrlog` with a
/// canonical decimal id (ASCII case of the letters is ignored, as DNS does).
fn node_of_dns_name(name: &str) -> Option<NodeId> {
    let lower = name.to_ascii_lowercase();
    let digits = lower
        .strip_prefix(NODE_NAME_PREFIX)?
        .strip_suffix(NODE_NAME_SUFFIX)?;
    let id: u32 = digits.parse().ok()?;
    // "007", "+7": refused, so that each node has one name only.
    (id.to_string() == digits).then_some(NodeId(id))
}

/// The node a certificate speaks for: its one `node-<id>.isrlog` DNS name.
/// The certificate must already be verified; this only reads it.
fn node_of_certificate(cert: &CertificateDer<'_>) -> std::result::Result<NodeId, String> {
    let parsed = webpki::EndEntityCert::try_from(cert)
        .map_err(|error| format!("certificate does not parse: {error}"))?;
    node_of_dns_names(parsed.valid_dns_names())
}

/// The one node named among `names`; an error if none or several are.
fn node_of_dns_names<'a>(
    names: impl Iterator<Item = &'a str>,
) -> std::result::Result<NodeId, String> {
    let mut nodes: Vec<NodeId> = names.filter_map(node_of_dns_name).collect();
    nodes.sort();
    nodes.dedup();
    match nodes.as_slice() {
        [node] => Ok(*node),
        [] => Err(format!(
            "certificate names no node: it needs one DNS subject alternative name \
             {NODE_NAME_PREFIX}<id>{NODE_NAME_SUFFIX}"
        )),
        several => Err(format!(
            "certificate names several nodes ({several:?}); it must name exactly one"
        )),
    }
}

/// A node's TLS settings: the CA that every peer's certificate must chain
/// to, and the node's own certificate chain and private key. The node id
/// the certificate names (see the module docs' identity convention) is the
/// node this configuration speaks for.
///
/// Cheap to clone (the parsed settings are shared).
#[derive(Clone)]
pub struct TlsConfig {
    node: NodeId,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("TlsConfig")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// A PEM source: a file (named in errors) or bytes with a description.
enum Pem<'a> {
    File(&'a Path),
    Bytes(&'a [u8], &'static str),
}

impl Pem<'_> {
    fn describe(&self) -> String {
        match self {
            Pem::File(path) => path.display().to_string(),
            Pem::Bytes(_, what) => (*what).to_string(),
        }
    }

    fn certificates(&self, what: &'static str) -> Result<Vec<CertificateDer<'static>>> {
        let certs: std::result::Result<Vec<_>, _> = match self {
            Pem::File(path) => match CertificateDer::pem_file_iter(path) {
                Ok(iter) => iter.collect(),
                Err(error) => Err(error),
            },
            Pem::Bytes(bytes, _) => CertificateDer::pem_slice_iter(bytes).collect(),
        };
        let certs = certs
            .map_err(|error| tls_error(format!("read {what} from {}", self.describe()), error))?;
        if certs.is_empty() {
            return Err(tls_error(
                format!("read {what} from {}", self.describe()),
                "no CERTIFICATE block in it",
            ));
        }
        Ok(certs)
    }

    fn private_key(&self) -> Result<PrivateKeyDer<'static>> {
        let key = match self {
            Pem::File(path) => PrivateKeyDer::from_pem_file(path),
            Pem::Bytes(bytes, _) => PrivateKeyDer::from_pem_slice(bytes),
        };
        key.map_err(|error| {
            tls_error(
                format!("read the private key from {}", self.describe()),
                format!("{error} (a PKCS#8, PKCS#1 or SEC1 PRIVATE KEY block is needed)"),
            )
        })
    }
}

fn tls_error(what: String, reason: impl fmt::Display) -> Error {
    Error::Tls {
        what,
        reason: reason.to_string(),
    }
}

impl TlsConfig {
    /// Loads the CA certificate(s) every peer must chain to, this node's
    /// certificate chain (its own certificate first, then any
    /// intermediates) and its private key, each from a PEM file. Errors name
    /// the file at fault and what was wrong with it.
    pub fn from_pem_files(
        ca: impl AsRef<Path>,
        cert_chain: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<TlsConfig> {
        TlsConfig::load(
            Pem::File(ca.as_ref()),
            Pem::File(cert_chain.as_ref()),
            Pem::File(key.as_ref()),
        )
    }

    /// As [`TlsConfig::from_pem_files`], from PEM text already in memory.
    pub fn from_pem(ca: &[u8], cert_chain: &[u8], key: &[u8]) -> Result<TlsConfig> {
        TlsConfig::load(
            Pem::Bytes(ca, "the CA PEM"),
            Pem::Bytes(cert_chain, "the certificate chain PEM"),
            Pem::Bytes(key, "the private key PEM"),
        )
    }

    /// The node this configuration's certificate speaks for.
    pub fn node(&self) -> NodeId {
        self.node
    }

    fn load(ca: Pem<'_>, chain: Pem<'_>, key: Pem<'_>) -> Result<TlsConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for cert in ca.certificates("the CA certificate")? {
            roots.add(cert).map_err(|error| {
                tls_error(
                    format!("use the CA certificate in {}", ca.describe()),
                    error,
                )
            })?;
        }
        let roots = Arc::new(roots);
        let chain_certs = chain.certificates("the certificate chain")?;
        let node = node_of_certificate(&chain_certs[0]).map_err(|reason| {
            tls_error(
                format!(
                    "take the node id from the first certificate in {}",
                    chain.describe()
                ),
                reason,
            )
        })?;
        let private_key = key.private_key()?;
        let chain_error = |error: rustls::Error| {
            tls_error(
                format!(
                    "use the certificate chain in {} with the key in {}",
                    chain.describe(),
                    key.describe()
                ),
                error,
            )
        };
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::clone(&roots), Arc::clone(&provider))
                .build()
                .map_err(|error| tls_error(format!("use the CA in {}", ca.describe()), error))?;
        let mut server = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(chain_error)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain_certs.clone(), private_key.clone_key())
            .map_err(chain_error)?;
        // Peers stay connected; resumption tickets would only add traffic.
        server.send_tls13_tickets = 0;
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(chain_error)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain_certs, private_key)
            .map_err(chain_error)?;
        Ok(TlsConfig {
            node,
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// Starts the server side of a session on an accepted socket; the
    /// handshake runs later, on the connection's reader thread
    /// ([`TlsReader::handshake`]).
    pub(crate) fn accept(&self, socket: &TcpStream) -> io::Result<(TlsReader, TlsWriter)> {
        let session = ServerConnection::new(Arc::clone(&self.server)).map_err(io::Error::other)?;
        let (mut reader, writer) = TlsSession::halves(rustls::Connection::Server(session), socket)?;
        // The server reads frames against whole-frame deadlines
        // (`read_frame_within`), which it can only check between reads.
        reader.yield_without_plaintext = true;
        Ok((reader, writer))
    }

    /// Runs the client side of a handshake with node `peer` on a connected
    /// socket, within `timeout`, and checks that the server's certificate
    /// names `peer`.
    pub(crate) fn connect(
        &self,
        socket: &TcpStream,
        peer: NodeId,
        timeout: Duration,
    ) -> std::result::Result<(TlsReader, TlsWriter), String> {
        let name = ServerName::try_from(node_dns_name(peer))
            .map_err(|error| format!("no TLS server name for {peer}: {error}"))?;
        let session = ClientConnection::new(Arc::clone(&self.client), name)
            .map_err(|error| format!("TLS session setup: {error}"))?;
        let (mut reader, writer) = TlsSession::halves(rustls::Connection::Client(session), socket)
            .map_err(|error| format!("TLS session setup: {error}"))?;
        let server_node = reader.handshake(timeout)?;
        if server_node != peer {
            return Err(format!(
                "the server's certificate speaks for {server_node}, not the {peer} dialled"
            ));
        }
        Ok((reader, writer))
    }
}

/// One TLS session shared by a connection's reader and writers.
struct TlsSession {
    session: Mutex<rustls::Connection>,
    /// Where encrypted records go; held while a batch of records produced
    /// under the session lock is written, so records reach the socket in
    /// the order they were sealed.
    socket: Mutex<TcpStream>,
}

impl TlsSession {
    fn halves(
        session: rustls::Connection,
        socket: &TcpStream,
    ) -> io::Result<(TlsReader, TlsWriter)> {
        let shared = Arc::new(TlsSession {
            session: Mutex::new(session),
            socket: Mutex::new(socket.try_clone()?),
        });
        let reader = TlsReader {
            session: Arc::clone(&shared),
            socket: socket.try_clone()?,
            raw: vec![0; RAW_READ_BYTES].into_boxed_slice(),
            raw_start: 0,
            raw_end: 0,
            yield_without_plaintext: false,
        };
        Ok((reader, TlsWriter { session: shared }))
    }

    /// Writes whatever records the session has ready (handshake messages,
    /// alerts, key updates, sealed data).
    fn flush_records(&self) -> io::Result<()> {
        let mut socket = self.socket.lock();
        let mut records = Vec::new();
        {
            let mut session = self.session.lock();
            while session.wants_write() {
                session.write_tls(&mut records)?;
            }
        }
        socket.write_all(&records)
    }
}

/// The reading half of a TLS connection: plaintext out, ciphertext read off
/// the socket as needed. Read timeouts of the socket show through as
/// `WouldBlock`/`TimedOut` errors, as on a plain socket.
pub(crate) struct TlsReader {
    session: Arc<TlsSession>,
    socket: TcpStream,
    /// Ciphertext read but not yet fed to the session: `raw[raw_start..raw_end]`.
    raw: Box<[u8]>,
    raw_start: usize,
    raw_end: usize,
    /// Whether a `read` whose socket read brought no whole record (no
    /// plaintext) returns `WouldBlock` instead of reading the socket again.
    /// Set on the server, whose caller re-checks its frame deadline and
    /// re-arms the socket timeout after every `read`: without it a peer
    /// trickling ciphertext a byte at a time keeps one `read` (and so the
    /// frame) going past any deadline. Clients set no read timeout and read
    /// with plain `read_frame`, which must not see a spurious `WouldBlock`.
    yield_without_plaintext: bool,
}

impl TlsReader {
    /// Runs the handshake to its end within `timeout` and returns the node
    /// the peer's verified certificate speaks for. On failure the error
    /// says why (the alert, if any, was sent to the peer).
    pub(crate) fn handshake(&mut self, timeout: Duration) -> std::result::Result<NodeId, String> {
        let deadline = Instant::now() + timeout;
        let restore = self
            .socket
            .read_timeout()
            .map_err(|error| format!("socket: {error}"))?;
        let outcome = self.drive_handshake(deadline);
        // Restoring fails only on a dead socket, which the next read reports.
        let _ = self.socket.set_read_timeout(restore);
        outcome?;
        let session = self.session.session.lock();
        let cert = session
            .peer_certificates()
            .and_then(|certs| certs.first())
            .ok_or_else(|| "the peer presented no certificate".to_string())?;
        node_of_certificate(cert)
    }

    fn drive_handshake(&mut self, deadline: Instant) -> std::result::Result<(), String> {
        loop {
            self.session
                .flush_records()
                .map_err(|error| format!("sending handshake: {error}"))?;
            if !self.session.session.lock().is_handshaking() {
                return Ok(());
            }
            if self.raw_start == self.raw_end {
                let remaining = deadline.saturating_duration_since(Instant::now());
                if remaining.is_zero() {
                    return Err("handshake not done before the deadline".into());
                }
                self.socket
                    .set_read_timeout(Some(remaining))
                    .map_err(|error| format!("socket: {error}"))?;
                match self.fill_raw() {
                    Ok(0) => return Err("connection closed during the handshake".into()),
                    Ok(_) => {}
                    Err(error)
                        if matches!(
                            error.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        return Err("handshake not done before the deadline".into())
                    }
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return Err(format!("reading handshake: {error}")),
                }
            }
            if let Err(error) = self.feed_raw() {
                // Tell the peer why (an alert is queued), as far as possible.
                let _ = self.session.flush_records();
                return Err(error.to_string());
            }
        }
    }

    /// Reads ciphertext off the socket into the empty raw buffer.
    fn fill_raw(&mut self) -> io::Result<usize> {
        debug_assert_eq!(self.raw_start, self.raw_end, "raw bytes left unfed");
        let read = self.socket.read(&mut self.raw)?;
        self.raw_start = 0;
        self.raw_end = read;
        Ok(read)
    }

    /// Feeds buffered ciphertext to the session and processes it. Records
    /// the session must answer (alerts, key updates) are sent.
    fn feed_raw(&mut self) -> io::Result<()> {
        let wants_write = {
            let mut session = self.session.session.lock();
            // rustls takes at most a few KiB per `read_tls`; feed on under
            // one lock until the buffer is used up or there is plaintext
            // enough for the reader (rustls refuses more past its limit).
            loop {
                let mut pending = &self.raw[self.raw_start..self.raw_end];
                let fed = session.read_tls(&mut pending)?;
                if fed == 0 {
                    // rustls takes nothing more after the peer's
                    // close_notify; bytes after it are dropped.
                    self.raw_start = self.raw_end;
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "TLS session closed by the peer",
                    ));
                }
                self.raw_start += fed;
                let state = session
                    .process_new_packets()
                    .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
                if self.raw_start == self.raw_end
                    || state.plaintext_bytes_to_read() >= PLAINTEXT_READY_BYTES
                    || state.peer_has_closed()
                {
                    break;
                }
            }
            session.wants_write()
        };
        if wants_write {
            self.session.flush_records()?;
        }
        Ok(())
    }
}

impl Read for TlsReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut socket_read = false;
        loop {
            {
                let mut session = self.session.session.lock();
                match session.reader().read(buf) {
                    Ok(read) => return Ok(read),
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                    Err(error) => return Err(error),
                }
            }
            if self.raw_start == self.raw_end {
                if socket_read && self.yield_without_plaintext {
                    // A socket read brought no whole record: hand control
                    // back so the caller's deadline is checked (it retries
                    // `WouldBlock` as it does a timed-out read).
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                if self.fill_raw()? == 0 {
                    // The peer closed the socket without a close_notify; a
                    // frame cut short by it is reported as truncated by the
                    // caller.
                    return Ok(0);
                }
                socket_read = true;
            }
            self.feed_raw()?;
        }
    }
}

/// The writing half of a TLS connection: plaintext in, sealed records out.
pub(crate) struct TlsWriter {
    session: Arc<TlsSession>,
}

impl TlsWriter {
    /// Sets the socket's write timeout (shared with every handle on it).
    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.session.socket.lock().set_write_timeout(timeout)
    }
}

impl Write for TlsWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_all_within(buf, None)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TlsWriter {
    /// Seals `buf` and writes its records, all by `deadline` if there is
    /// one (see `io::write_all_by`), else each socket write within the
    /// socket's write timeout.
    pub(crate) fn write_all_within(
        &mut self,
        buf: &[u8],
        deadline: Option<Instant>,
    ) -> io::Result<()> {
        let mut socket = self.session.socket.lock();
        let mut records = Vec::with_capacity(WRITE_CHUNK_BYTES.min(buf.len()) + 256);
        for chunk in buf.chunks(WRITE_CHUNK_BYTES) {
            records.clear();
            {
                let mut session = self.session.session.lock();
                let mut rest = chunk;
                while !rest.is_empty() {
                    let taken = session.writer().write(rest)?;
                    rest = &rest[taken..];
                    while session.wants_write() {
                        session.write_tls(&mut records)?;
                    }
                    if taken == 0 && !rest.is_empty() {
                        return Err(io::Error::new(
                            io::ErrorKind::WriteZero,
                            "TLS session accepts no more data",
                        ));
                    }
                }
            }
            match deadline {
                Some(deadline) => super::io::write_all_by(&mut socket, &records, deadline)?,
                None => socket.write_all(&records)?,
            }
        }
        Ok(())
    }
}

/// Rate-limited warnings about refused connections and frames: at most one
/// per `TcpConfig::warning_interval` (zero: every one), carrying the count
/// of those suppressed since the last one.
#[derive(Debug)]
pub(crate) struct RefusalLog {
    interval: Duration,
    state: Mutex<RefusalState>,
}

#[derive(Debug)]
struct RefusalState {
    last_logged: Option<Instant>,
    suppressed: u64,
}

impl RefusalLog {
    /// A log that has warned about nothing yet and lets one warning through
    /// per `interval`.
    pub(crate) fn new(interval: Duration) -> RefusalLog {
        RefusalLog {
            interval,
            state: Mutex::new(RefusalState {
                last_logged: None,
                suppressed: 0,
            }),
        }
    }

    /// Returns `Some(suppressed)` if a warning may be logged now (with the
    /// number of refusals not logged since the last one), `None` if this
    /// one is only to be counted.
    pub(crate) fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock();
        let quiet = state
            .last_logged
            .is_none_or(|last| now.saturating_duration_since(last) >= self.interval);
        if quiet {
            state.last_logged = Some(now);
            Some(std::mem::take(&mut state.suppressed))
        } else {
            state.suppressed = state.suppressed.saturating_add(1);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_dns_names_table() {
        let cases: [(&str, Option<u32>); 12] = [
            ("node-0.isrlog", Some(0)),
            ("node-2.isrlog", Some(2)),
            ("NODE-2.ISRLOG", Some(2)),
            ("node-4294967295.isrlog", Some(u32::MAX)),
            ("node-4294967296.isrlog", None),
            ("node-02.isrlog", None),
            ("node-+2.isrlog", None),
            ("node-.isrlog", None),
            ("node-2.isrlog.example.com", None),
            ("x.node-2.isrlog", None),
            ("*.isrlog", None),
            ("node-2", None),
        ];
        for (name, want) in cases {
            assert_eq!(node_of_dns_name(name), want.map(NodeId), "{name}");
        }
        for id in [0, 7, u32::MAX] {
            assert_eq!(
                node_of_dns_name(&node_dns_name(NodeId(id))),
                Some(NodeId(id))
            );
        }
    }

    #[test]
    fn a_certificate_names_exactly_one_node() {
        let cases: [(&[&str], std::result::Result<u32, &str>); 5] = [
            (&["node-3.isrlog"], Ok(3)),
            (&["db7.example.com", "node-3.isrlog"], Ok(3)),
            (&["node-3.isrlog", "NODE-3.isrlog"], Ok(3)),
            (&["db7.example.com"], Err("names no node")),
            (&["node-3.isrlog", "node-4.isrlog"], Err("several nodes")),
        ];
        for (names, want) in cases {
            let got = node_of_dns_names(names.iter().copied());
            match (got, want) {
                (Ok(node), Ok(id)) => assert_eq!(node, NodeId(id), "{names:?}"),
                (Err(reason), Err(needle)) => {
                    assert!(reason.contains(needle), "{names:?}: {reason}")
                }
                (got, want) => panic!("{names:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn refusal_log_admits_one_warning_per_interval_and_counts_the_rest() {
        let log = RefusalLog::new(Duration::from_secs(1));
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let interval = 1000;
        // (time in ms, expected outcome)
        let cases = [
            (0, Some(0)),
            (1, None),
            (interval - 1, None),
            (interval, Some(2)),
            (interval + 1, None),
            (3 * interval, Some(1)),
            (5 * interval, Some(0)),
        ];
        for (ms, want) in cases {
            assert_eq!(log.admit_at(at(ms)), want, "at {ms} ms");
        }
    }
}
