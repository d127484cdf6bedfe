//! The client half of the TCP transport: [`TcpTransport`] dials peers, keeps
//! a few multiplexed connections to each, and pairs responses with waiting
//! calls by request id.
//!
//! Owns outgoing connections, their reader threads, redial backoff and call
//! deadlines. Does not own the listening side (`server.rs`) or the bytes of a
//! frame (`frame.rs`).

use std::collections::HashMap;
use std::fmt;
use std::io::{BufReader, ErrorKind, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};

use super::frame::{decode_body, encode_request, FrameError, Message};
use super::io::{read_frame_pooled, BodyPool, ReadError};
use super::limits::{RateLimitedWarnings, Warning};
use super::stream::{ReadHalf, Security, WriteHalf};
use super::worker::Worker;
use super::TcpConfig;
use crate::error::Result;
use crate::rng::{mix64, SplitMix64};
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering, RwLock};
use crate::transport::{Request, Response, Transport, TransportError};
use crate::types::NodeId;

/// Read buffer of a client connection: many small responses per syscall.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Kafka's `ExponentialBackoff` jitter: each wait is the nominal one times a
/// random factor in `[1 - JITTER, 1 + JITTER)`, so that clients that lost a
/// peer together do not redial it in lockstep.
const RECONNECT_BACKOFF_JITTER: f64 = 0.2;

/// One node's client on a TCP network: calls made *by* that node.
///
/// Dropping it (or [`TcpTransport::shutdown`]) closes every connection; calls
/// still waiting then fail with [`TransportError::Shutdown`].
pub struct TcpTransport {
    shared: Arc<ClientShared>,
}

struct ClientShared {
    local: NodeId,
    config: TcpConfig,
    /// Plain TCP, or TLS with the node's certificate.
    security: Security,
    peers: RwLock<HashMap<NodeId, Arc<Peer>>>,
    next_request_id: AtomicU64,
    shutting_down: Arc<AtomicBool>,
    /// Warnings a server can provoke (malformed responses), rate-limited
    /// by `config.warning_interval`.
    warnings: Arc<RateLimitedWarnings>,
    /// Reader threads of the connections opened so far; finished ones are
    /// pruned whenever a connection is opened.
    readers: Mutex<Vec<Worker>>,
}

/// Everything about one peer address.
struct Peer {
    node: NodeId,
    addr: SocketAddr,
    /// One slot per pooled connection; `None` until first dialled.
    slots: Vec<Mutex<Option<Arc<Connection>>>>,
    /// Serialises dialling this peer, and remembers failures for backoff.
    dialer: Mutex<Dialer>,
    /// Set once the peer was removed or moved to another address: its
    /// connections are closing and none may be opened.
    retired: AtomicBool,
}

/// Redial state of one peer.
struct Dialer {
    /// Failed attempts since the last success.
    failures: u32,
    /// No attempt before this instant. Invariant: `Some` iff `failures > 0`.
    next_attempt: Option<Instant>,
    last_error: String,
    rng: SplitMix64,
}

/// Where a waiting call receives its outcome: a one-slot channel.
type Waiter = Sender<Result<Response, TransportError>>;

/// One open connection and the calls waiting on it.
struct Connection {
    peer: NodeId,
    addr: SocketAddr,
    /// Writes of whole frames; held for one `write_all` at a time.
    writer: Mutex<WriteHalf>,
    /// A handle on the same socket to shut it down without waiting for the
    /// writer lock.
    control: TcpStream,
    /// Calls waiting for their response, by request id. `None` once the
    /// connection is closed: no call may register any more, and every call
    /// that had was told why.
    pending: Mutex<Option<HashMap<u64, Waiter>>>,
    /// The client's rate limiter for warnings a server can provoke.
    warnings: Arc<RateLimitedWarnings>,
}

impl TcpTransport {
    /// A client for node `local` that knows `peers`' addresses. Connections
    /// are opened on first use.
    pub fn new(
        local: NodeId,
        peers: HashMap<NodeId, SocketAddr>,
        config: TcpConfig,
    ) -> Result<TcpTransport> {
        TcpTransport::new_secured(local, peers, config, Security::Plain)
    }

    /// As [`TcpTransport::new`], over mutual TLS: this client presents
    /// `tls`'s certificate, which must name `local`, and accepts a peer only
    /// if its certificate chains to `tls`'s CA and names the node dialled
    /// (see [`TlsConfig`](crate::transport::TlsConfig)). The handshake is
    /// part of connecting, bounded by `connect_timeout`.
    #[cfg(feature = "tls")]
    pub fn with_tls(
        local: NodeId,
        peers: HashMap<NodeId, SocketAddr>,
        config: TcpConfig,
        tls: crate::transport::TlsConfig,
    ) -> Result<TcpTransport> {
        if tls.node() != local {
            return Err(crate::error::Error::InvalidConfig {
                field: "tls",
                value: format!("a certificate for {}", tls.node()),
                reason: "the client's certificate must name the node it calls from",
            });
        }
        let refusals = Arc::new(super::tls::RefusalLog::new(config.warning_interval));
        TcpTransport::new_secured(local, peers, config, Security::Tls(tls, refusals))
    }

    fn new_secured(
        local: NodeId,
        peers: HashMap<NodeId, SocketAddr>,
        config: TcpConfig,
        security: Security,
    ) -> Result<TcpTransport> {
        config.validate()?;
        let shared = Arc::new(ClientShared {
            local,
            security,
            peers: RwLock::new(HashMap::new()),
            next_request_id: AtomicU64::new(1),
            shutting_down: Arc::new(AtomicBool::new(false)),
            readers: Mutex::new(Vec::new()),
            warnings: Arc::new(RateLimitedWarnings::new(config.warning_interval)),
            config,
        });
        let transport = TcpTransport { shared };
        for (node, addr) in peers {
            transport.set_peer(node, addr);
        }
        Ok(transport)
    }

    /// The node this client calls from.
    pub fn local(&self) -> NodeId {
        self.shared.local
    }

    /// The address `node` is reached at, if known.
    pub fn peer_addr(&self, node: NodeId) -> Option<SocketAddr> {
        self.shared.peers.read().get(&node).map(|peer| peer.addr)
    }

    /// Adds `node` at `addr`, or moves it there. Moving closes the
    /// connections to the old address (calls waiting on them fail as
    /// `Unreachable`) and forgets its backoff; the same address again
    /// changes nothing.
    pub fn set_peer(&self, node: NodeId, addr: SocketAddr) {
        let mut peers = self.shared.peers.write();
        if peers.get(&node).is_some_and(|peer| peer.addr == addr) {
            return;
        }
        let peer = Arc::new(Peer::new(
            node,
            addr,
            self.shared.local,
            &self.shared.config,
        ));
        if let Some(old) = peers.insert(node, peer) {
            drop(peers);
            tracing::debug!(local = %self.shared.local, %node, old = %old.addr, new = %addr, "tcp: peer moved");
            old.retire(|| TransportError::Unreachable {
                to: node,
                reason: format!("{node} moved from {} to {addr}", old.addr),
            });
        }
    }

    /// Forgets `node`: later calls to it fail as `Unreachable`, and calls
    /// waiting on it fail likewise.
    pub fn remove_peer(&self, node: NodeId) {
        let removed = self.shared.peers.write().remove(&node);
        if let Some(peer) = removed {
            peer.retire(|| TransportError::Unreachable {
                to: node,
                reason: "peer removed".into(),
            });
        }
    }

    /// Closes every connection and stops their reader threads (waiting up to
    /// `shutdown_timeout`). Later calls fail with `Shutdown`. Idempotent.
    pub fn shutdown(&self) {
        if self.shared.shutting_down.swap(true, Ordering::SeqCst) {
            return;
        }
        let peers: Vec<Arc<Peer>> = self.shared.peers.write().drain().map(|(_, p)| p).collect();
        for peer in peers {
            peer.retire(|| TransportError::Shutdown);
        }
        let deadline = Instant::now() + self.shared.config.shutdown_timeout;
        let readers = std::mem::take(&mut *self.shared.readers.lock());
        for reader in readers {
            reader.join_until(deadline);
        }
    }

    /// The open connection in `peer`'s slot `slot`, dialling it if there is
    /// none (or it closed).
    fn connection(
        &self,
        peer: &Peer,
        slot: usize,
        deadline: Instant,
    ) -> Result<Arc<Connection>, TransportError> {
        let to = peer.node;
        if let Some(open) = peer.open_connection(slot) {
            return Ok(open);
        }
        let Some(mut dialer) = peer.dialer.try_lock_until(deadline) else {
            return Err(TransportError::Timeout { to });
        };
        // Someone else may have dialled while this call waited for the lock.
        if let Some(open) = peer.open_connection(slot) {
            return Ok(open);
        }
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            return Err(TransportError::Shutdown);
        }
        if peer.retired.load(Ordering::SeqCst) {
            return Err(TransportError::Unreachable {
                to,
                reason: "peer removed or moved while the call started".into(),
            });
        }
        let now = Instant::now();
        if let Some(next_attempt) = dialer.next_attempt.filter(|next| *next > now) {
            return Err(TransportError::Unreachable {
                to,
                reason: format!(
                    "next attempt to connect to {} in {:?} ({} failed so far, last: {})",
                    peer.addr,
                    next_attempt - now,
                    dialer.failures,
                    dialer.last_error
                ),
            });
        }
        let timeout = self
            .shared
            .config
            .connect_timeout
            .min(deadline.saturating_duration_since(now));
        if timeout.is_zero() {
            return Err(TransportError::Timeout { to });
        }
        let stream = match TcpStream::connect_timeout(&peer.addr, timeout) {
            Ok(stream) => stream,
            Err(error) => {
                let config = &self.shared.config;
                dialer.failed(error.to_string(), Instant::now(), config);
                tracing::debug!(local = %self.shared.local, %to, addr = %peer.addr, %error, failures = dialer.failures, "tcp: connect failed");
                if Instant::now() >= deadline {
                    return Err(TransportError::Timeout { to });
                }
                return Err(TransportError::Unreachable {
                    to,
                    reason: format!("connect to {} failed: {error}", peer.addr),
                });
            }
        };
        let secured = self.shared.security.connect(
            &stream,
            to,
            timeout.min(deadline.saturating_duration_since(Instant::now())),
        );
        let connection = secured
            .and_then(|(reading, writing)| self.start_connection(peer, stream, reading, writing))
            .map_err(|error| {
                dialer.failed(error.clone(), Instant::now(), &self.shared.config);
                TransportError::Unreachable { to, reason: error }
            })?;
        dialer.succeeded();
        *peer.slots[slot].lock() = Some(Arc::clone(&connection));
        // A retire that ran while this call dialled did not see the new
        // connection; close it here so it does not outlive its peer.
        if peer.retired.load(Ordering::SeqCst) {
            connection.close(|| TransportError::Unreachable {
                to,
                reason: "peer removed or moved".into(),
            });
        }
        Ok(connection)
    }

    /// Sets a connected socket up and starts its reader thread.
    fn start_connection(
        &self,
        peer: &Peer,
        stream: TcpStream,
        reading: ReadHalf,
        writing: WriteHalf,
    ) -> std::result::Result<Arc<Connection>, String> {
        let setup = |what: &str, error: std::io::Error| format!("{what} on {}: {error}", peer.addr);
        stream
            .set_nodelay(true)
            .map_err(|error| setup("set TCP_NODELAY", error))?;
        let connection = Arc::new(Connection {
            peer: peer.node,
            addr: peer.addr,
            writer: Mutex::new(writing),
            control: stream,
            pending: Mutex::new(Some(HashMap::new())),
            warnings: Arc::clone(&self.shared.warnings),
        });
        let reader_connection = Arc::clone(&connection);
        let frame_bytes_max = self.shared.config.frame_bytes_max;
        let shutting_down = Arc::clone(&self.shared.shutting_down);
        let name = format!("isrlog-tcp-client-{}-{}", self.shared.local.0, peer.node.0);
        let worker = Worker::spawn(name, move || {
            reader_connection.read_responses(reading, frame_bytes_max, &shutting_down);
        })
        .map_err(|error| {
            connection.close(|| TransportError::Shutdown);
            setup("start reader thread", error)
        })?;
        let mut readers = self.shared.readers.lock();
        readers.retain(|reader| !reader.is_finished());
        readers.push(worker);
        Ok(connection)
    }
}

impl Transport for TcpTransport {
    fn call(
        &self,
        to: NodeId,
        request: Request,
        deadline: Instant,
    ) -> Result<Response, TransportError> {
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            return Err(TransportError::Shutdown);
        }
        if Instant::now() >= deadline {
            return Err(TransportError::Timeout { to });
        }
        let Some(peer) = self.shared.peers.read().get(&to).cloned() else {
            return Err(TransportError::Unreachable {
                to,
                reason: "no address known for this node".into(),
            });
        };
        let request_id = self.shared.next_request_id.fetch_add(1, Ordering::Relaxed);
        let frame = encode_request(
            request_id,
            self.shared.local,
            &request,
            self.shared.config.frame_bytes_max,
        )
        .map_err(|error| TransportError::Unreachable {
            to,
            reason: format!("request not sent: {error}"),
        })?;
        let slot = (request_id % peer.slots.len() as u64) as usize;
        let connection = self.connection(&peer, slot, deadline)?;
        connection.call(request_id, &frame, deadline)
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut peers: Vec<(NodeId, SocketAddr)> = self
            .shared
            .peers
            .read()
            .values()
            .map(|peer| (peer.node, peer.addr))
            .collect();
        peers.sort();
        f.debug_struct("TcpTransport")
            .field("local", &self.shared.local)
            .field("peers", &peers)
            .finish_non_exhaustive()
    }
}

impl Peer {
    fn new(node: NodeId, addr: SocketAddr, local: NodeId, config: &TcpConfig) -> Peer {
        Peer {
            node,
            addr,
            slots: (0..config.connections_per_peer)
                .map(|_| Mutex::new(None))
                .collect(),
            dialer: Mutex::new(Dialer {
                failures: 0,
                next_attempt: None,
                last_error: String::new(),
                rng: SplitMix64::new(mix64((u64::from(local.0) << 32) | u64::from(node.0))),
            }),
            retired: AtomicBool::new(false),
        }
    }

    fn open_connection(&self, slot: usize) -> Option<Arc<Connection>> {
        self.slots[slot]
            .lock()
            .as_ref()
            .filter(|connection| connection.is_open())
            .cloned()
    }

    /// Closes every connection and refuses new ones; waiting calls fail
    /// with `error()`.
    fn retire(&self, error: impl Fn() -> TransportError) {
        self.retired.store(true, Ordering::SeqCst);
        for slot in &self.slots {
            if let Some(connection) = slot.lock().take() {
                connection.close(&error);
            }
        }
    }
}

impl Dialer {
    fn failed(&mut self, error: String, now: Instant, config: &TcpConfig) {
        self.failures = self.failures.saturating_add(1);
        let jitter = self.rng.next_f64();
        self.next_attempt = Some(now + reconnect_backoff(config, self.failures, jitter));
        self.last_error = error;
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    fn succeeded(&mut self) {
        self.failures = 0;
        self.next_attempt = None;
        self.last_error.clear();
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// Panics if the backoff state is inconsistent.
    fn check_invariants(&self) {
        assert_eq!(
            self.next_attempt.is_some(),
            self.failures > 0,
            "a redial time is set exactly when attempts have failed"
        );
    }
}

/// How long to wait before the next dial after `failures` failed ones
/// (`failures >= 1`): `reconnect_backoff_min` doubled per further failure,
/// times a jitter factor in `[0.8, 1.2)` drawn from `jitter` in `[0, 1)`,
/// and never above `reconnect_backoff_max` (Kafka's `ExponentialBackoff`,
/// except that Kafka lets the jitter overshoot the maximum; here the maximum
/// is a bound).
fn reconnect_backoff(config: &TcpConfig, failures: u32, jitter: f64) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    let nominal = config
        .reconnect_backoff_min
        .saturating_mul(1u32 << doublings)
        .min(config.reconnect_backoff_max);
    let factor = 1.0 - RECONNECT_BACKOFF_JITTER + 2.0 * RECONNECT_BACKOFF_JITTER * jitter;
    nominal.mul_f64(factor).min(config.reconnect_backoff_max)
}

impl Connection {
    fn is_open(&self) -> bool {
        self.pending.lock().is_some()
    }

    /// Sends one request frame and waits for the response with the same id.
    fn call(
        &self,
        request_id: u64,
        frame: &[u8],
        deadline: Instant,
    ) -> Result<Response, TransportError> {
        let to = self.peer;
        let (sender, receiver) = bounded(1);
        match self.pending.lock().as_mut() {
            Some(pending) => {
                pending.insert(request_id, sender);
            }
            None => {
                return Err(TransportError::Unreachable {
                    to,
                    reason: format!("connection to {} closed", self.addr),
                })
            }
        }
        if let Err(error) = self.write_frame(frame, deadline) {
            self.forget(request_id);
            return Err(error);
        }
        match receiver.recv_deadline(deadline) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => {
                self.forget(request_id);
                // The answer may have landed between the timeout and forget.
                receiver
                    .try_recv()
                    .unwrap_or(Err(TransportError::Timeout { to }))
            }
            Err(RecvTimeoutError::Disconnected) => Err(TransportError::Unreachable {
                to,
                reason: format!("connection to {} closed", self.addr),
            }),
        }
    }

    /// Writes one whole frame before `deadline`. A write that fails or runs
    /// out of time may have sent part of the frame, after which the stream
    /// cannot be trusted: the connection is closed.
    fn write_frame(&self, frame: &[u8], deadline: Instant) -> Result<(), TransportError> {
        let to = self.peer;
        let Some(mut writer) = self.writer.try_lock_until(deadline) else {
            return Err(TransportError::Timeout { to });
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(TransportError::Timeout { to });
        }
        let written = writer
            .set_write_timeout(Some(remaining))
            .and_then(|()| writer.write_all(frame));
        drop(writer);
        match written {
            Ok(()) => Ok(()),
            Err(error) => {
                let reason = format!("write to {} failed: {error}", self.addr);
                tracing::debug!(%to, addr = %self.addr, %error, "tcp: write failed; closing connection");
                self.close(|| TransportError::Unreachable {
                    to,
                    reason: reason.clone(),
                });
                // A send timeout shows up as WouldBlock on Unix, TimedOut on
                // Windows.
                if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
                    Err(TransportError::Timeout { to })
                } else {
                    Err(TransportError::Unreachable { to, reason })
                }
            }
        }
    }

    fn forget(&self, request_id: u64) {
        if let Some(pending) = self.pending.lock().as_mut() {
            pending.remove(&request_id);
        }
    }

    /// Marks the connection closed, tells every waiting call `error()`, and
    /// shuts the socket (which ends the reader thread). Idempotent.
    fn close(&self, error: impl Fn() -> TransportError) {
        let waiting = self.pending.lock().take();
        if let Some(waiting) = waiting {
            for (_, sender) in waiting {
                // The waiter may have timed out and gone; nothing to tell.
                let _ = sender.try_send(Err(error()));
            }
        }
        // Fails only if the socket is already shut or gone, which is the goal.
        let _ = self.control.shutdown(Shutdown::Both);
    }

    /// The reader thread: hands each response to the call waiting for its id
    /// until the connection fails or is shut.
    fn read_responses(&self, stream: ReadHalf, frame_bytes_max: usize, shutting_down: &AtomicBool) {
        let to = self.peer;
        let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, stream);
        let bodies = BodyPool::new();
        let failure = loop {
            let (header, body) =
                match read_frame_pooled(&mut reader, frame_bytes_max, Some(&bodies)) {
                    Ok(frame) => frame,
                    Err(error) => break error,
                };
            match decode_body(&header, body) {
                Ok(Message::Response(response)) => self.deliver(header.request_id, response),
                Ok(Message::Request { .. }) => {
                    break ReadError::Frame(FrameError::new(
                        "message type",
                        format!(
                            "{:?} is a request, but a server only sends responses",
                            header.message_type
                        ),
                    ))
                }
                Err(error) => break ReadError::Frame(error),
            }
        };
        if shutting_down.load(Ordering::SeqCst) {
            self.close(|| TransportError::Shutdown);
            return;
        }
        let reason = failure.to_string();
        match failure {
            ReadError::Frame(_) => {
                if let Some(suppressed) = self.warnings.admit(Warning::MalformedResponse) {
                    tracing::warn!(peer = %to, addr = %self.addr, %reason, suppressed, "tcp: malformed response; closing connection");
                }
                self.close(|| TransportError::Malformed {
                    to,
                    reason: reason.clone(),
                });
            }
            // The client sets no read timeout and `read_frame` has no frame
            // deadline, so `Idle` and `Late` cannot happen here; were they
            // to, the connection is treated as gone.
            ReadError::Closed | ReadError::Io(_) | ReadError::Idle | ReadError::Late { .. } => {
                tracing::debug!(peer = %to, addr = %self.addr, %reason, "tcp: connection closed");
                self.close(|| TransportError::Unreachable {
                    to,
                    reason: format!("connection to {}: {reason}", self.addr),
                });
            }
        }
    }

    fn deliver(&self, request_id: u64, response: Response) {
        let waiter = self
            .pending
            .lock()
            .as_mut()
            .and_then(|pending| pending.remove(&request_id));
        match waiter {
            // The one-slot channel is empty: each id is delivered once.
            Some(waiter) => {
                let _ = waiter.try_send(Ok(response));
            }
            None => {
                tracing::debug!(peer = %self.peer, request_id, "tcp: response after its call gave up; dropped");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_backoff_table() {
        let config = TcpConfig {
            reconnect_backoff_min: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_millis(1000),
            ..TcpConfig::default()
        };
        let ms = Duration::from_millis;
        // (failures, jitter draw, expected wait)
        let cases = [
            (1, 0.5, ms(50)),
            (2, 0.5, ms(100)),
            (3, 0.5, ms(200)),
            (5, 0.5, ms(800)),
            (6, 0.5, ms(1000)),
            (40, 0.5, ms(1000)),
            (u32::MAX, 0.5, ms(1000)),
            (1, 0.0, ms(40)),
            (2, 0.0, ms(80)),
            (6, 0.0, ms(800)),
            // The jitter never pushes the wait past the maximum.
            (6, 0.999, ms(1000)),
        ];
        for (failures, jitter, want) in cases {
            let got = reconnect_backoff(&config, failures, jitter);
            let error = got.abs_diff(want);
            assert!(
                error <= Duration::from_micros(1),
                "failures {failures}, jitter {jitter}: got {got:?}, want {want:?}"
            );
        }
    }
}
