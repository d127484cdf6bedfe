//! The server half of the TCP transport: [`TcpServer`] accepts connections,
//! reads request frames, runs a [`RequestHandler`] on a bounded pool of
//! threads, and writes each response back on the connection it came from.
//!
//! Owns the listener, the accepted connections, their reader threads and the
//! handler pool. Does not own what a request means (the handler) or the frame
//! bytes (`frame.rs`).
//!
//! Threads: one acceptor; one reader per connection (at most
//! `server_connections_max`); `handler_threads` handlers fed by a queue of
//! `handler_queue_len` requests. Nothing grows without bound: a connection
//! over the limits is closed on accept (or makes room by closing one that
//! never sent a valid frame, see `limits.rs`), large frame bodies share one
//! byte budget, a frame has a deadline from its first byte to its last, and
//! a request that finds the queue full is answered at once with
//! `ErrorCode::Unknown`; each with a rate-limited warning.

use std::collections::HashMap;
use std::fmt;
use std::io::BufReader;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

use super::frame::{decode_body, encode_response_pieces, Message};
use super::io::{read_frame_within, FrameLimits, ReadError};
use super::limits::{
    decide_slot, FrameBudget, LimitCounters, RateLimitedWarnings, Reservation, SlotDecision,
    SlotView, TcpServerStats, Warning,
};
use super::stream::{impersonation, ReadHalf, Security, WriteHalf};
use super::worker::Worker;
use super::TcpConfig;
use crate::error::{Error, Result};
use crate::sync::{Arc, AtomicBool, AtomicU64, Condvar, Mutex, Ordering};
use crate::transport::{ErrorCode, Request, RequestHandler, Response};
use crate::types::NodeId;

/// Read buffer of a server connection.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Pause after a failed `accept` (out of file descriptors, ...) so that the
/// acceptor does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(10);

/// Longest the shutdown waits to connect to its own listener to wake the
/// acceptor.
const WAKE_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A node's TCP listener. Stops on [`TcpServer::shutdown`] or drop.
pub struct TcpServer {
    local_addr: SocketAddr,
    shared: Arc<ServerShared>,
    /// Present until shutdown.
    running: Mutex<Option<Running>>,
}

/// The threads and the queue a running server owns; taken apart on
/// shutdown.
struct Running {
    acceptor: Worker,
    handlers: Vec<Worker>,
    /// The server's own sender; readers hold clones. Handler threads end when
    /// every sender is gone.
    queue: Sender<Job>,
}

struct ServerShared {
    config: TcpConfig,
    /// The listener's port: every thread of the server is named after it,
    /// so that a log line says which server of a process wrote it.
    port: u16,
    /// Plain TCP, or TLS with the node's certificate.
    security: Security,
    handler: Arc<dyn RequestHandler>,
    stopping: AtomicBool,
    next_connection_id: AtomicU64,
    /// Open connections and their reader threads. A reader removes its own
    /// entry when it ends.
    connections: Mutex<HashMap<u64, OpenConnection>>,
    /// Bytes of large frame bodies being received, across all connections.
    budget: Arc<FrameBudget>,
    counters: LimitCounters,
    warnings: RateLimitedWarnings,
}

/// An accepted connection and its reader thread (`None` only while the
/// thread is being started).
type OpenConnection = (Arc<ServerConnection>, Option<Worker>);

/// One accepted connection.
struct ServerConnection {
    peer_addr: SocketAddr,
    /// Whole response frames are written under this lock. Waiting for it
    /// counts against the response's write deadline, so a handler never
    /// waits on it for longer than `write_timeout`.
    writer: Mutex<WriteHalf>,
    /// Requests read from this connection and not yet answered (or dropped).
    /// Invariant: at most `requests_in_flight_max`.
    in_flight: Mutex<usize>,
    /// Signalled when `in_flight` drops or the connection closes.
    in_flight_freed: Condvar,
    /// Shuts the socket without waiting for the writer lock.
    control: TcpStream,
    closed: AtomicBool,
    accepted_at: Instant,
    /// Set once the connection has sent a valid request frame; until then
    /// its slot may be given to a newer connection.
    proven: AtomicBool,
}

/// One decoded request waiting for a handler thread.
struct Job {
    connection: Arc<ServerConnection>,
    request_id: u64,
    from: NodeId,
    request: Request,
    /// The frame budget bytes of a large request, held until it is
    /// answered (see `limits.rs`).
    reservation: Reservation,
    /// The request's place among its connection's requests in flight,
    /// given back when the job is dropped (answered or not).
    _in_flight: InFlight,
}

/// One of a connection's `requests_in_flight_max` places; frees it on drop.
struct InFlight(Arc<ServerConnection>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut in_flight = self.0.in_flight.lock();
        debug_assert!(*in_flight > 0, "in-flight count underflow");
        *in_flight = in_flight.saturating_sub(1);
        self.0.in_flight_freed.notify_all();
    }
}

/// Longest a reader waiting for an in-flight place sleeps before it looks
/// again at whether its connection was closed.
const IN_FLIGHT_WAIT_SLICE: Duration = Duration::from_millis(100);

impl TcpServer {
    /// Listens on `addr` (port 0 picks a free port; see
    /// [`TcpServer::local_addr`]) and answers every request with `handler`.
    pub fn bind(
        addr: SocketAddr,
        handler: Arc<dyn RequestHandler>,
        config: TcpConfig,
    ) -> Result<TcpServer> {
        TcpServer::bind_secured(addr, handler, config, Security::Plain)
    }

    /// As [`TcpServer::bind`], over mutual TLS: every connection must
    /// present a certificate chained to `tls`'s CA, and may then only send
    /// requests as the node its certificate names (see
    /// [`TlsConfig`](crate::transport::TlsConfig)). The handshake runs on the
    /// connection's own thread, within `handshake_timeout` of the accept.
    #[cfg(feature = "tls")]
    pub fn bind_tls(
        addr: SocketAddr,
        handler: Arc<dyn RequestHandler>,
        config: TcpConfig,
        tls: crate::transport::TlsConfig,
    ) -> Result<TcpServer> {
        let refusals = Arc::new(super::tls::RefusalLog::new(config.warning_interval));
        TcpServer::bind_secured(addr, handler, config, Security::Tls(tls, refusals))
    }

    fn bind_secured(
        addr: SocketAddr,
        handler: Arc<dyn RequestHandler>,
        config: TcpConfig,
        security: Security,
    ) -> Result<TcpServer> {
        config.validate()?;
        let network_error = |operation, source| Error::Network {
            addr,
            operation,
            source,
        };
        let listener = TcpListener::bind(addr).map_err(|source| network_error("bind", source))?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| network_error("read the address of", source))?;
        let (queue, jobs) = bounded::<Job>(config.handler_queue_len);
        let shared = Arc::new(ServerShared {
            port: local_addr.port(),
            handler,
            security,
            stopping: AtomicBool::new(false),
            next_connection_id: AtomicU64::new(0),
            connections: Mutex::new(HashMap::new()),
            budget: Arc::new(FrameBudget::new(config.frame_buffer_bytes_max)),
            counters: LimitCounters::new(),
            warnings: RateLimitedWarnings::new(config.warning_interval),
            config,
        });
        let mut handlers = Vec::with_capacity(shared.config.handler_threads);
        for index in 0..shared.config.handler_threads {
            let jobs = jobs.clone();
            let worker_shared = Arc::clone(&shared);
            let name = format!("isrlog-tcp-handler-{}-{index}", local_addr.port());
            match Worker::spawn(name, move || worker_shared.run_handler(&jobs)) {
                Ok(worker) => handlers.push(worker),
                Err(source) => {
                    // Dropping the queue ends the handlers already started.
                    drop(queue);
                    let deadline = Instant::now() + shared.config.shutdown_timeout;
                    for handler in handlers {
                        handler.join_until(deadline);
                    }
                    return Err(network_error("start handler threads for", source));
                }
            }
        }
        drop(jobs);
        let acceptor_shared = Arc::clone(&shared);
        let acceptor_queue = queue.clone();
        let acceptor = Worker::spawn(
            format!("isrlog-tcp-accept-{}", local_addr.port()),
            move || acceptor_shared.accept_connections(&listener, &acceptor_queue),
        );
        let acceptor = match acceptor {
            Ok(acceptor) => acceptor,
            Err(source) => {
                drop(queue);
                let deadline = Instant::now() + shared.config.shutdown_timeout;
                for handler in handlers {
                    handler.join_until(deadline);
                }
                return Err(network_error("start the acceptor thread for", source));
            }
        };
        tracing::debug!(addr = %local_addr, "tcp: server listening");
        Ok(TcpServer {
            local_addr,
            shared,
            running: Mutex::new(Some(Running {
                acceptor,
                handlers,
                queue,
            })),
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Number of connections open right now.
    pub fn connection_count(&self) -> usize {
        self.shared.connections.lock().len()
    }

    /// What the server's limits against hostile or broken peers are doing:
    /// bytes held for frames being received, connections refused, evicted
    /// or timed out.
    pub fn stats(&self) -> TcpServerStats {
        let (buffered_frame_bytes, buffered_frame_bytes_peak, frames_waited_for_budget) =
            self.shared.budget.usage();
        let counters = &self.shared.counters;
        TcpServerStats {
            connections: self.connection_count(),
            buffered_frame_bytes,
            buffered_frame_bytes_peak,
            frames_waited_for_budget,
            connections_refused: counters.connections_refused.load(Ordering::Relaxed),
            connections_evicted: counters.connections_evicted.load(Ordering::Relaxed),
            handshake_timeouts: counters.handshake_timeouts.load(Ordering::Relaxed),
            frame_timeouts: counters.frame_timeouts.load(Ordering::Relaxed),
            write_timeouts: counters.write_timeouts.load(Ordering::Relaxed),
            reads_paused_for_in_flight: counters.reads_paused_for_in_flight.load(Ordering::Relaxed),
        }
    }

    /// Stops accepting, closes every connection and stops every thread,
    /// waiting up to `shutdown_timeout` for each group (a handler still
    /// running then is detached with a warning). Requests queued but not yet
    /// handled are dropped; their callers time out or see the connection
    /// close. Idempotent.
    pub fn shutdown(&self) {
        let Some(running) = self.running.lock().take() else {
            return;
        };
        self.shared.stopping.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + self.shared.config.shutdown_timeout;
        // `accept` has no timeout; a connection of our own wakes it to see
        // `stopping`.
        let mut wake_addr = self.local_addr;
        if wake_addr.ip().is_unspecified() {
            wake_addr.set_ip(match wake_addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        if let Err(error) = TcpStream::connect_timeout(&wake_addr, WAKE_CONNECT_TIMEOUT) {
            tracing::warn!(addr = %self.local_addr, %error, "tcp: could not wake the acceptor");
        }
        running.acceptor.join_until(deadline);
        let connections = std::mem::take(&mut *self.shared.connections.lock());
        let mut readers = Vec::with_capacity(connections.len());
        for (_, (connection, reader)) in connections {
            connection.close();
            readers.extend(reader);
        }
        for reader in readers {
            reader.join_until(deadline);
        }
        drop(running.queue);
        for handler in running.handlers {
            handler.join_until(deadline);
        }
        tracing::debug!(addr = %self.local_addr, "tcp: server stopped");
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl fmt::Debug for TcpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpServer")
            .field("local_addr", &self.local_addr)
            .field("connections", &self.connection_count())
            .finish_non_exhaustive()
    }
}

impl ServerShared {
    /// The acceptor thread.
    fn accept_connections(self: &Arc<Self>, listener: &TcpListener, queue: &Sender<Job>) {
        for stream in listener.incoming() {
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            match stream {
                Ok(stream) => self.start_connection(stream, queue),
                Err(error) => {
                    if let Some(suppressed) = self.warnings.admit(Warning::AcceptFailed) {
                        tracing::warn!(%error, suppressed, "tcp: accept failed");
                    }
                    thread::sleep(ACCEPT_ERROR_PAUSE);
                }
            }
        }
    }

    fn start_connection(self: &Arc<Self>, stream: TcpStream, queue: &Sender<Job>) {
        let peer_addr = match stream.peer_addr() {
            Ok(addr) => addr,
            Err(error) => {
                tracing::debug!(%error, "tcp: accepted connection already gone");
                return;
            }
        };
        let mut connections = self.connections.lock();
        // Connections already closed (evicted, timed out) but whose reader
        // has not yet removed them do not hold a slot: their readers were
        // woken by the shutdown of their sockets and are ending.
        let open: Vec<SlotView> = connections
            .iter()
            .filter(|(_, (connection, _))| !connection.closed.load(Ordering::SeqCst))
            .map(|(id, (connection, _))| SlotView {
                id: *id,
                ip: connection.peer_addr.ip(),
                accepted_at: connection.accepted_at,
                proven: connection.proven.load(Ordering::SeqCst),
            })
            .collect();
        let decision = decide_slot(
            &open,
            peer_addr.ip(),
            self.config.server_connections_max,
            self.config.connections_per_address_max,
        );
        match decision {
            SlotDecision::Admit => {}
            SlotDecision::Evict(victim) => {
                if let Some((evicted, _)) = connections.get(&victim) {
                    evicted.close();
                    LimitCounters::bump(&self.counters.connections_evicted);
                    if let Some(suppressed) = self.warnings.admit(Warning::ConnectionEvicted) {
                        tracing::warn!(peer = %evicted.peer_addr, new_peer = %peer_addr, limit = self.config.server_connections_max, suppressed, "tcp: every connection slot taken; closing the oldest connection that has sent no valid frame to make room");
                    }
                }
            }
            SlotDecision::RefuseAddress | SlotDecision::RefuseFull => {
                LimitCounters::bump(&self.counters.connections_refused);
                if let Some(suppressed) = self.warnings.admit(Warning::ConnectionRefused) {
                    if decision == SlotDecision::RefuseAddress {
                        tracing::warn!(peer = %peer_addr, limit = self.config.connections_per_address_max, suppressed, "tcp: too many connections from this address (connections_per_address_max); closing the new one");
                    } else {
                        tracing::warn!(peer = %peer_addr, limit = self.config.server_connections_max, suppressed, "tcp: too many connections (server_connections_max), all sending valid frames; closing the new one");
                    }
                }
                return;
            }
        }
        // The reader sets the read timeout before each read that waits (see
        // `read_frame_within`).
        let prepared = stream
            .set_nodelay(true)
            .and_then(|()| stream.set_write_timeout(Some(self.config.write_timeout)))
            .and_then(|()| {
                let (reading, writing) = self.security.accept(&stream)?;
                Ok((stream, reading, writing))
            });
        let (control, reading, writing) = match prepared {
            Ok(handles) => handles,
            Err(error) => {
                if let Some(suppressed) = self.warnings.admit(Warning::ConnectionSetup) {
                    tracing::warn!(peer = %peer_addr, %error, suppressed, "tcp: could not set up connection; closing it");
                }
                return;
            }
        };
        let connection = Arc::new(ServerConnection {
            peer_addr,
            writer: Mutex::new(writing),
            in_flight: Mutex::new(0),
            in_flight_freed: Condvar::new(),
            control,
            closed: AtomicBool::new(false),
            accepted_at: Instant::now(),
            proven: AtomicBool::new(false),
        });
        let id = self.next_connection_id.fetch_add(1, Ordering::Relaxed);
        // Registered before the reader starts, so the reader's removal of its
        // own entry always finds it.
        connections.insert(id, (Arc::clone(&connection), None));
        let reader_shared = Arc::clone(self);
        let reader_connection = Arc::clone(&connection);
        let reader_queue = queue.clone();
        let spawned = Worker::spawn(
            format!("isrlog-tcp-conn-{}-{peer_addr}", self.port),
            move || {
                reader_shared.read_requests(&reader_connection, reading, &reader_queue);
                reader_shared.connections.lock().remove(&id);
            },
        );
        match spawned {
            Ok(worker) => {
                if let Some(entry) = connections.get_mut(&id) {
                    entry.1 = Some(worker);
                }
                tracing::debug!(peer = %peer_addr, "tcp: connection accepted");
            }
            Err(error) => {
                connections.remove(&id);
                connection.close();
                tracing::warn!(peer = %peer_addr, %error, "tcp: could not start a reader thread; closing connection");
            }
        }
    }

    /// A connection's reader thread: decodes requests into the handler
    /// queue until the peer leaves, the server stops or the peer sends
    /// something that is not a request frame.
    fn read_requests(
        &self,
        connection: &Arc<ServerConnection>,
        mut stream: ReadHalf,
        queue: &Sender<Job>,
    ) {
        let peer = connection.peer_addr;
        // With TLS, the node the peer's certificate names; every request
        // must come from it. Nothing is read before the handshake succeeds,
        // which must end by the handshake deadline.
        let handshake_by = connection.accepted_at + self.config.handshake_timeout;
        let identity =
            match stream.handshake(handshake_by.saturating_duration_since(Instant::now())) {
                Ok(identity) => identity,
                Err(reason) => {
                    self.security.log_refusal(peer, &reason);
                    connection.close();
                    return;
                }
            };
        if let Some(node) = identity {
            tracing::debug!(%peer, %node, "tcp: peer authenticated");
        }
        let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, stream);
        // `control` is the same socket: its read timeout is the reader's.
        let mut set_read_timeout = |timeout| connection.control.set_read_timeout(Some(timeout));
        let limits = FrameLimits {
            frame_bytes_max: self.config.frame_bytes_max,
            frame_timeout: self.config.frame_read_timeout,
            budget: &self.budget,
        };
        let closed = || connection.closed.load(Ordering::SeqCst);
        let mut last_frame_at = connection.accepted_at;
        loop {
            // Kafka reads one request per connection and mutes the socket
            // until it is answered; here up to `requests_in_flight_max` are
            // read, then reading stops until one is answered, so one
            // connection holds at most that many handler threads (and
            // responses waiting for its writer).
            let Some(place) = self.in_flight_place(connection) else {
                break;
            };
            if place.1 {
                // Idle time counts from when reading resumed.
                last_frame_at = last_frame_at.max(Instant::now());
            }
            let place = place.0;
            // Until its first valid request the connection has only the
            // handshake deadline; after that it may idle for `idle_timeout`.
            let proven = connection.proven.load(Ordering::SeqCst);
            let first_byte_by = if proven {
                last_frame_at + self.config.idle_timeout
            } else {
                connection.accepted_at + self.config.handshake_timeout
            };
            let read = read_frame_within(
                &mut reader,
                &mut set_read_timeout,
                first_byte_by,
                &limits,
                &closed,
            );
            let (header, body, reservation) = match read {
                Ok(frame) => frame,
                Err(ReadError::Idle) if proven => {
                    tracing::debug!(%peer, idle = ?last_frame_at.elapsed(), "tcp: closing idle connection");
                    break;
                }
                Err(ReadError::Idle) => {
                    LimitCounters::bump(&self.counters.handshake_timeouts);
                    if let Some(suppressed) = self.warnings.admit(Warning::HandshakeTimeout) {
                        tracing::warn!(%peer, timeout = ?self.config.handshake_timeout, suppressed, "tcp: closing connection: no valid request frame within handshake_timeout");
                    }
                    break;
                }
                Err(error @ ReadError::Late { .. }) => {
                    LimitCounters::bump(&self.counters.frame_timeouts);
                    self.warn_bad_frame(peer, &error);
                    break;
                }
                Err(ReadError::Frame(error)) => {
                    self.warn_bad_frame(peer, &error);
                    break;
                }
                Err(error @ (ReadError::Closed | ReadError::Io(_))) => {
                    tracing::debug!(%peer, reason = %error, "tcp: connection ended");
                    break;
                }
            };
            let request_id = header.request_id;
            let (from, request) = match decode_body(&header, body) {
                Ok(Message::Request { from, request }) => (from, request),
                Ok(Message::Response(_)) => {
                    self.warn_bad_frame(
                        peer,
                        &format_args!("a response sent to a server ({:?})", header.message_type),
                    );
                    break;
                }
                Err(error) => {
                    self.warn_bad_frame(peer, &error);
                    break;
                }
            };
            if let Some(reason) = impersonation(identity, from, &request) {
                // Not handled, not answered: the peer's certificate does not
                // let it speak for that node.
                self.security.log_refusal(peer, &reason);
                break;
            }
            last_frame_at = Instant::now();
            connection.proven.store(true, Ordering::SeqCst);
            let job = Job {
                connection: Arc::clone(connection),
                request_id,
                from,
                request,
                reservation,
                _in_flight: place,
            };
            match queue.try_send(job) {
                Ok(()) => {}
                Err(TrySendError::Full(job)) => {
                    if let Some(suppressed) = self.warnings.admit(Warning::QueueFull) {
                        tracing::warn!(%peer, %from, queue = self.config.handler_queue_len, suppressed, "tcp: handler queue full; answering the request with an error");
                    }
                    self.respond(
                        &job.connection,
                        job.request_id,
                        &Response::Error(ErrorCode::Unknown),
                    );
                }
                Err(TrySendError::Disconnected(_)) => break,
            }
        }
        connection.close();
    }

    /// Takes one of `connection`'s in-flight places, waiting while all are
    /// taken; `None` once the connection is closed. The flag says whether
    /// it had to wait.
    fn in_flight_place(&self, connection: &Arc<ServerConnection>) -> Option<(InFlight, bool)> {
        let max = self.config.requests_in_flight_max;
        let mut in_flight = connection.in_flight.lock();
        let mut waited = false;
        while *in_flight >= max {
            if !waited {
                waited = true;
                LimitCounters::bump(&self.counters.reads_paused_for_in_flight);
            }
            if connection.closed.load(Ordering::SeqCst) {
                return None;
            }
            let _ = connection
                .in_flight_freed
                .wait_for(&mut in_flight, IN_FLIGHT_WAIT_SLICE);
        }
        *in_flight += 1;
        debug_assert!(*in_flight <= max, "more requests in flight than allowed");
        Some((InFlight(Arc::clone(connection)), waited))
    }

    /// Logs (rate-limited) that a connection is closed for a bad frame.
    fn warn_bad_frame(&self, peer: SocketAddr, reason: &dyn fmt::Display) {
        if let Some(suppressed) = self.warnings.admit(Warning::BadFrame) {
            tracing::warn!(%peer, %reason, suppressed, "tcp: closing connection: bad frame");
        }
    }

    /// A handler thread: runs queued requests until every sender is gone.
    fn run_handler(&self, jobs: &Receiver<Job>) {
        // Blocking without a deadline is the shutdown protocol here: the
        // server drops the last sender to end this loop.
        for job in jobs.iter() {
            if job.connection.closed.load(Ordering::SeqCst) {
                continue;
            }
            let handler = &self.handler;
            let from = job.from;
            let request = job.request;
            // A handler must not panic (trait contract); if one does anyway,
            // the pool keeps its thread and the caller gets an error.
            let response = catch_unwind(AssertUnwindSafe(|| handler.handle(from, request)))
                .unwrap_or_else(|_| {
                    tracing::error!(peer = %job.connection.peer_addr, %from, "tcp: request handler panicked");
                    Response::Error(ErrorCode::Unknown)
                });
            self.respond(&job.connection, job.request_id, &response);
            // Only now are the request's frame budget bytes free again.
            drop(job.reservation);
        }
    }

    /// Writes one response frame; on failure the connection is closed.
    fn respond(&self, connection: &ServerConnection, request_id: u64, response: &Response) {
        let peer = connection.peer_addr;
        let frame = match encode_response_pieces(request_id, response, self.config.frame_bytes_max)
        {
            Ok(frame) => frame,
            Err(error) => {
                if let Some(suppressed) = self.warnings.admit(Warning::ResponseTooLarge) {
                    tracing::warn!(%peer, %error, suppressed, "tcp: response too large to send; answering with an error instead");
                }
                let fallback = Response::Error(ErrorCode::Unknown);
                match encode_response_pieces(request_id, &fallback, self.config.frame_bytes_max) {
                    Ok(frame) => frame,
                    Err(_) => {
                        // Validation guarantees room for an error frame.
                        connection.close();
                        return;
                    }
                }
            }
        };
        // One deadline for the whole response, the wait for the writer
        // included: a peer reading slowly cannot hold a handler thread
        // longer than `write_timeout` (SO_SNDTIMEO alone bounds each write
        // call, and every call that moves a byte starts it anew).
        let deadline = Instant::now() + self.config.write_timeout;
        let written = match connection.writer.try_lock_until(deadline) {
            Some(mut writer) => writer.write_frame_by(&frame, deadline),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the connection's writer stayed busy",
            )),
        };
        match written {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::TimedOut => {
                LimitCounters::bump(&self.counters.write_timeouts);
                if let Some(suppressed) = self.warnings.admit(Warning::WriteTimeout) {
                    tracing::warn!(%peer, timeout = ?self.config.write_timeout, bytes = frame.len(), %error, suppressed, "tcp: closing connection: response not written within write_timeout (the peer reads too slowly)");
                }
                connection.close();
            }
            Err(error) => {
                tracing::debug!(%peer, %error, "tcp: writing a response failed; closing connection");
                connection.close();
            }
        }
    }
}

impl ServerConnection {
    /// Shuts the socket down, ending the reader and refusing further writes.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        // Fails only if the socket is already shut, which is the goal.
        let _ = self.control.shutdown(Shutdown::Both);
        // A reader waiting for an in-flight place sees the close at once.
        let _guard = self.in_flight.lock();
        self.in_flight_freed.notify_all();
    }
}
