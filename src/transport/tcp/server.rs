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
//! over the limit is closed on accept, a request that finds the queue full is
//! answered at once with `ErrorCode::Unknown`, both with a warning.

use std::collections::HashMap;
use std::fmt;
use std::io::{BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

use super::frame::{decode_body, encode_response, Message};
use super::io::{read_frame, ReadError};
use super::stream::{impersonation, ReadHalf, Security, WriteHalf};
use super::worker::Worker;
use super::TcpConfig;
use crate::error::{Error, Result};
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering};
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
    /// Plain TCP, or TLS with the node's certificate.
    security: Security,
    handler: Arc<dyn RequestHandler>,
    stopping: AtomicBool,
    next_connection_id: AtomicU64,
    /// Open connections and their reader threads. A reader removes its own
    /// entry when it ends.
    connections: Mutex<HashMap<u64, OpenConnection>>,
}

/// An accepted connection and its reader thread (`None` only while the
/// thread is being started).
type OpenConnection = (Arc<ServerConnection>, Option<Worker>);

/// One accepted connection.
struct ServerConnection {
    peer_addr: SocketAddr,
    /// Whole response frames are written under this lock.
    writer: Mutex<WriteHalf>,
    /// Shuts the socket without waiting for the writer lock.
    control: TcpStream,
    closed: AtomicBool,
}

/// One decoded request waiting for a handler thread.
struct Job {
    connection: Arc<ServerConnection>,
    request_id: u64,
    from: NodeId,
    request: Request,
}

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
    /// connection's own thread, bounded by `connect_timeout`.
    #[cfg(feature = "tls")]
    pub fn bind_tls(
        addr: SocketAddr,
        handler: Arc<dyn RequestHandler>,
        config: TcpConfig,
        tls: crate::transport::TlsConfig,
    ) -> Result<TcpServer> {
        let refusals = Arc::new(super::tls::RefusalLog::new());
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
            handler,
            security,
            stopping: AtomicBool::new(false),
            next_connection_id: AtomicU64::new(0),
            connections: Mutex::new(HashMap::new()),
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
                    tracing::warn!(%error, "tcp: accept failed");
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
        if connections.len() >= self.config.server_connections_max {
            tracing::warn!(peer = %peer_addr, limit = self.config.server_connections_max, "tcp: too many connections; closing the new one");
            return;
        }
        let prepared = stream
            .set_nodelay(true)
            .and_then(|()| stream.set_write_timeout(Some(self.config.write_timeout)))
            // The reader wakes at least this often: to drop a peer stalled
            // inside a frame, and to count idle time.
            .and_then(|()| {
                stream.set_read_timeout(Some(
                    self.config.frame_read_timeout.min(self.config.idle_timeout),
                ))
            })
            .and_then(|()| {
                let (reading, writing) = self.security.accept(&stream)?;
                Ok((stream, reading, writing))
            });
        let (control, reading, writing) = match prepared {
            Ok(handles) => handles,
            Err(error) => {
                tracing::warn!(peer = %peer_addr, %error, "tcp: could not set up connection; closing it");
                return;
            }
        };
        let connection = Arc::new(ServerConnection {
            peer_addr,
            writer: Mutex::new(writing),
            control,
            closed: AtomicBool::new(false),
        });
        let id = self.next_connection_id.fetch_add(1, Ordering::Relaxed);
        // Registered before the reader starts, so the reader's removal of its
        // own entry always finds it.
        connections.insert(id, (Arc::clone(&connection), None));
        let reader_shared = Arc::clone(self);
        let reader_connection = Arc::clone(&connection);
        let reader_queue = queue.clone();
        let spawned = Worker::spawn(format!("isrlog-tcp-conn-{peer_addr}"), move || {
            reader_shared.read_requests(&reader_connection, reading, &reader_queue);
            reader_shared.connections.lock().remove(&id);
        });
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
        // must come from it. Nothing is read before the handshake succeeds.
        let identity = match stream.handshake(self.config.connect_timeout) {
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
        let mut last_frame_at = std::time::Instant::now();
        loop {
            let (header, body) = match read_frame(&mut reader, self.config.frame_bytes_max) {
                Ok(frame) => {
                    last_frame_at = std::time::Instant::now();
                    frame
                }
                Err(ReadError::Idle) => {
                    if last_frame_at.elapsed() >= self.config.idle_timeout {
                        tracing::debug!(%peer, idle = ?last_frame_at.elapsed(), "tcp: closing idle connection");
                        break;
                    }
                    continue;
                }
                Err(ReadError::Frame(error)) => {
                    tracing::warn!(%peer, reason = %error, "tcp: closing connection: bad frame");
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
                    tracing::warn!(%peer, message_type = ?header.message_type, "tcp: closing connection: bad frame: a response sent to a server");
                    break;
                }
                Err(error) => {
                    tracing::warn!(%peer, reason = %error, "tcp: closing connection: bad frame");
                    break;
                }
            };
            if let Some(reason) = impersonation(identity, from, &request) {
                // Not handled, not answered: the peer's certificate does not
                // let it speak for that node.
                self.security.log_refusal(peer, &reason);
                break;
            }
            let job = Job {
                connection: Arc::clone(connection),
                request_id,
                from,
                request,
            };
            match queue.try_send(job) {
                Ok(()) => {}
                Err(TrySendError::Full(job)) => {
                    tracing::warn!(%peer, %from, queue = self.config.handler_queue_len, "tcp: handler queue full; answering the request with an error");
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
        }
    }

    /// Writes one response frame; on failure the connection is closed.
    fn respond(&self, connection: &ServerConnection, request_id: u64, response: &Response) {
        let peer = connection.peer_addr;
        let frame = match encode_response(request_id, response, self.config.frame_bytes_max) {
            Ok(frame) => frame,
            Err(error) => {
                tracing::warn!(%peer, %error, "tcp: response too large to send; answering with an error instead");
                let fallback = Response::Error(ErrorCode::Unknown);
                match encode_response(request_id, &fallback, self.config.frame_bytes_max) {
                    Ok(frame) => frame,
                    Err(_) => {
                        // Validation guarantees room for an error frame.
                        connection.close();
                        return;
                    }
                }
            }
        };
        let written = connection.writer.lock().write_all(&frame);
        if let Err(error) = written {
            tracing::debug!(%peer, %error, "tcp: writing a response failed; closing connection");
            connection.close();
        }
    }
}

impl ServerConnection {
    /// Shuts the socket down, ending the reader and refusing further writes.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        // Fails only if the socket is already shut, which is the goal.
        let _ = self.control.shutdown(Shutdown::Both);
    }
}
