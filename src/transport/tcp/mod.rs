//! The TCP transport: [`TcpTransport`] (a node's client) and [`TcpServer`]
//! (a node's listener), speaking the versioned frame format of `frame.rs`
//! over `std::net` sockets with `TCP_NODELAY` on.
//!
//! This module owns connections, threads, deadlines and the bytes on the
//! wire. It does not own what a request means (the [`RequestHandler`] the
//! server is given does) nor which address a node has (the application tells
//! the client, with [`TcpTransport::set_peer`]).
//!
//! Shape of a call: the client picks one of `connections_per_peer`
//! connections to the peer (dialling it if needed, with exponential backoff
//! after failures), writes one frame tagged with a fresh request id, and waits
//! on a one-slot channel until its deadline. A reader thread per connection
//! hands each response to the waiter with the same id, so calls on one
//! connection are multiplexed: a long-poll fetch does not hold up another
//! thread's call to the same peer. On the server, a reader thread per
//! connection decodes requests into a bounded queue served by a fixed pool of
//! `handler_threads`; whichever handler finishes writes its response, so
//! responses may overtake each other.
//!
//! Bad input closes only the connection it came on: a frame over
//! `frame_bytes_max`, an unknown version or message type, a truncated or
//! garbage frame is logged (`tracing::warn!`, naming the peer address and the
//! field at fault) and the socket is shut; every other connection is served
//! as before.
//!
//! With the `tls` feature, `TcpServer::bind_tls` and
//! `TcpTransport::with_tls` run the same frames over mutual TLS 1.3, and
//! a connection may only speak for the node its certificate names (see
//! `TlsConfig`). Without it (and with the plain constructors), anyone who
//! can reach a server's port can read every log as a follower would and
//! send requests as any node.
//!
//! A hostile or broken peer cannot take more than its share (`limits.rs`):
//! a frame must be whole within `frame_read_timeout` of its first byte;
//! large frame bodies being received share one `frame_buffer_bytes_max`
//! budget; one address holds at most `connections_per_address_max`
//! connections, and a connection that sends no valid request frame is closed
//! after `handshake_timeout` or when its slot is needed; the warnings a peer
//! can provoke are rate-limited. [`TcpServer::stats`] counts each at work.
//!
//! Memory on the client side: each client connection keeps up to 4 idle
//! buffers of up to 2 MiB (8 MiB) for response bodies of 64 KiB to 2 MiB
//! (snapshot chunks, large fetch responses), so that their pages are not
//! faulted in again for every body; a body of that size gets its whole
//! length reserved when its header arrives (after the header was checked
//! against `frame_bytes_max`).
//!
//! [`RequestHandler`]: crate::transport::RequestHandler

mod client;
mod frame;
mod io;
mod limits;
mod server;
mod stream;
#[cfg(feature = "tls")]
mod tls;
mod worker;

use std::time::Duration;

use crate::error::{Error, Result};
use crate::record::BATCH_BYTES_MAX;

pub use client::TcpTransport;
pub use limits::TcpServerStats;
pub(crate) use limits::{RateLimitedWarnings, Warning};
#[cfg(feature = "tls")]
pub use tls::{node_dns_name, TlsConfig};
// The wire codec, for `testing::fuzz`: fuzzers drive the same decoder the
// connections run.
#[cfg(any(test, feature = "testing"))]
pub(crate) use frame::{decode_body, encode_request, encode_response, FrameError, Message};
#[cfg(any(test, feature = "testing"))]
pub(crate) use io::{read_frame, ReadError};

/// The smallest `frame_bytes_max` accepted: room for any error response and
/// for small requests, so a server can always answer.
const FRAME_BYTES_MAX_LEAST: usize = 1024;
pub use server::TcpServer;

/// The frame format version this build speaks (the fifth byte of every
/// frame). A frame of another version is refused as malformed, so the nodes
/// of one cluster must run builds that speak the same version. It changes
/// whenever a message gains or loses a field.
pub const TCP_FRAME_VERSION: u8 = frame::VERSION;

/// Settings of the TCP transport, shared by [`TcpTransport`] and
/// [`TcpServer`]. Build with `TcpConfig::default()` and change fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// Largest frame, header included, either side sends or accepts. A peer
    /// announcing a larger one is cut off. Default 65 MiB: the largest record
    /// batch (64 MiB) plus room for the fields around it. Keep every fetch's
    /// `bytes_max` below it.
    pub frame_bytes_max: usize,
    /// Longest a client waits for a TCP connection to be set up (further
    /// bounded by the call's own deadline). Default 10 s, Kafka's
    /// `socket.connection.setup.timeout.ms`. With TLS it also bounds the
    /// client's handshake (a server's is within `handshake_timeout`).
    pub connect_timeout: Duration,
    /// Wait before redialling a peer after the first failed attempt; it
    /// doubles with each further failure. Default 50 ms, Kafka's
    /// `reconnect.backoff.ms`.
    pub reconnect_backoff_min: Duration,
    /// Upper bound of the redial wait. Default 1 s, Kafka's
    /// `reconnect.backoff.max.ms`.
    pub reconnect_backoff_max: Duration,
    /// Connections a client keeps to each peer; calls are spread over them
    /// and multiplexed on each. Default 2, so one large fetch response does
    /// not delay every other answer from that peer.
    pub connections_per_peer: usize,
    /// Threads a server runs handlers on. Handlers may block for a fetch's
    /// `wait_max`, so this bounds the long polls served at once. Default 16.
    pub handler_threads: usize,
    /// Requests a server queues for its handler threads; a request that
    /// finds the queue full is answered at once with
    /// `Response::Error(ErrorCode::Unknown)` (and a warning is logged) rather
    /// than queued without bound. Default 256.
    pub handler_queue_len: usize,
    /// Connections a server keeps open at once (each has a reader thread).
    /// When all are taken, a new connection closes the oldest one that has
    /// not yet sent a valid request frame (Kafka's KIP-402 does the like for
    /// its inter-broker listener), so idle connections cannot keep a replica
    /// out; if every connection has sent valid frames the new one is closed
    /// on accept. Default 256.
    pub server_connections_max: usize,
    /// Connections a server keeps open from one IP address; more are closed
    /// on accept (Kafka's `max.connections.per.ip`, unlimited there by
    /// default). Default 64, a quarter of `server_connections_max`: one
    /// address cannot take every slot. A node needs `connections_per_peer`
    /// from each peer.
    pub connections_per_address_max: usize,
    /// A server connection that has not sent a valid request frame this long
    /// after it was accepted is closed. Replicas send their first request at
    /// once; this bounds how long a connection that never speaks holds a
    /// slot. With TLS, the TLS handshake must also end within it. Default
    /// 10 s.
    pub handshake_timeout: Duration,
    /// Bytes a server may hold, across all its connections, in frame bodies
    /// larger than 64 KiB that it is receiving, or in requests from them it
    /// has not yet answered. The whole length
    /// announced in a frame's header is reserved before its body is read; a
    /// connection that finds the budget spent is not read from until bytes
    /// are freed or its `frame_read_timeout` passes (as Kafka's
    /// `queued.max.request.bytes` mutes sockets; unlimited there by
    /// default). Smaller bodies are outside the budget: at most one per
    /// connection, so `server_connections_max` × 64 KiB in all. Must be at
    /// least `frame_bytes_max`. Default 130 MiB, two frames of the default
    /// maximum.
    pub frame_buffer_bytes_max: usize,
    /// Longest a server takes to write one response, from when its handler
    /// is done (waiting for the connection's writer included) to its last
    /// byte; the socket's send timeout is re-armed to the time left before
    /// each write. A connection whose response is not written by then (a
    /// peer that stopped reading, or reads too slowly) is closed. Default
    /// 10 s.
    pub write_timeout: Duration,
    /// Requests a server reads from one connection before it has answered
    /// them; at the limit it stops reading that connection until one is
    /// answered. Kafka processes one request per connection at a time
    /// (muting the socket until the response is sent); a few are allowed
    /// here because one client connection carries calls from several
    /// threads (long-poll fetches among them). Bounds the handler threads
    /// and unsent responses one connection can hold. Default 4; at least 1.
    pub requests_in_flight_max: usize,
    /// Longest a server waits for a whole frame, from its first byte to its
    /// last (not for each read: a peer trickling a byte at a time is cut off
    /// too); a peer that has not finished its frame by then (a stalled or
    /// truncated frame on an open socket) is disconnected with a logged
    /// reason. Default 30 s; a replica's requests are a few KiB.
    pub frame_read_timeout: Duration,
    /// A server connection with no request for this long is closed (Kafka's
    /// `connections.max.idle.ms`; clients redial on their next call).
    /// Default 10 minutes.
    pub idle_timeout: Duration,
    /// Longest `shutdown` (or drop) waits for each group of threads to stop
    /// before it detaches them with a warning. Default 5 s.
    pub shutdown_timeout: Duration,
    /// Warnings a peer can provoke at will (refused or evicted connections,
    /// bad or late frames, a full handler queue) are logged at most once
    /// per this interval for each kind; the next one logged says how many
    /// were held back. Zero logs every one. Default 10 s.
    pub warning_interval: Duration,
}

impl Default for TcpConfig {
    fn default() -> TcpConfig {
        TcpConfig {
            frame_bytes_max: BATCH_BYTES_MAX + (1 << 20),
            connect_timeout: Duration::from_secs(10),
            reconnect_backoff_min: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(1),
            connections_per_peer: 2,
            handler_threads: 16,
            handler_queue_len: 256,
            server_connections_max: 256,
            connections_per_address_max: 64,
            handshake_timeout: Duration::from_secs(10),
            frame_buffer_bytes_max: 2 * (BATCH_BYTES_MAX + (1 << 20)),
            write_timeout: Duration::from_secs(10),
            requests_in_flight_max: 4,
            frame_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(600),
            shutdown_timeout: Duration::from_secs(5),
            warning_interval: Duration::from_secs(10),
        }
    }
}

impl TcpConfig {
    /// Checks that every field is usable.
    pub fn validate(&self) -> Result<()> {
        fn invalid(field: &'static str, value: String, reason: &'static str) -> Result<()> {
            Err(Error::InvalidConfig {
                field,
                value,
                reason,
            })
        }
        if self.frame_bytes_max < FRAME_BYTES_MAX_LEAST
            || u32::try_from(self.frame_bytes_max - frame::HEADER_BYTES).is_err()
        {
            return invalid(
                "frame_bytes_max",
                self.frame_bytes_max.to_string(),
                "must be at least 1 KiB and leave a body length that fits a u32",
            );
        }
        if self.frame_buffer_bytes_max < self.frame_bytes_max {
            return invalid(
                "frame_buffer_bytes_max",
                self.frame_buffer_bytes_max.to_string(),
                "must be at least frame_bytes_max, or a frame of the largest size could never be read",
            );
        }
        for (field, value) in [
            ("frame_read_timeout", self.frame_read_timeout),
            ("idle_timeout", self.idle_timeout),
            ("handshake_timeout", self.handshake_timeout),
        ] {
            if value.is_zero() {
                return invalid(field, format!("{value:?}"), "must be positive");
            }
        }
        if self.connect_timeout.is_zero() {
            return invalid(
                "connect_timeout",
                format!("{:?}", self.connect_timeout),
                "must be positive",
            );
        }
        if self.reconnect_backoff_min > self.reconnect_backoff_max {
            return invalid(
                "reconnect_backoff_min",
                format!("{:?}", self.reconnect_backoff_min),
                "must not exceed reconnect_backoff_max",
            );
        }
        let counts = [
            ("connections_per_peer", self.connections_per_peer),
            ("handler_threads", self.handler_threads),
            ("handler_queue_len", self.handler_queue_len),
            ("server_connections_max", self.server_connections_max),
            (
                "connections_per_address_max",
                self.connections_per_address_max,
            ),
            ("requests_in_flight_max", self.requests_in_flight_max),
        ];
        for (field, value) in counts {
            if value == 0 {
                return invalid(field, value.to_string(), "must be at least 1");
            }
        }
        if self.write_timeout.is_zero() {
            return invalid(
                "write_timeout",
                format!("{:?}", self.write_timeout),
                "must be positive (zero would mean no timeout to the OS)",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid() {
        TcpConfig::default().validate().expect("defaults are valid");
    }

    #[test]
    fn invalid_configs_name_the_field() {
        let base = TcpConfig::default();
        let cases: [(TcpConfig, &str); 12] = [
            (
                TcpConfig {
                    requests_in_flight_max: 0,
                    ..base.clone()
                },
                "requests_in_flight_max",
            ),
            (
                TcpConfig {
                    frame_buffer_bytes_max: base.frame_bytes_max - 1,
                    ..base.clone()
                },
                "frame_buffer_bytes_max",
            ),
            (
                TcpConfig {
                    handshake_timeout: Duration::ZERO,
                    ..base.clone()
                },
                "handshake_timeout",
            ),
            (
                TcpConfig {
                    connections_per_address_max: 0,
                    ..base.clone()
                },
                "connections_per_address_max",
            ),
            (
                TcpConfig {
                    frame_bytes_max: frame::HEADER_BYTES,
                    ..base.clone()
                },
                "frame_bytes_max",
            ),
            (
                TcpConfig {
                    frame_bytes_max: usize::MAX,
                    ..base.clone()
                },
                "frame_bytes_max",
            ),
            (
                TcpConfig {
                    connect_timeout: Duration::ZERO,
                    ..base.clone()
                },
                "connect_timeout",
            ),
            (
                TcpConfig {
                    reconnect_backoff_min: Duration::from_secs(2),
                    ..base.clone()
                },
                "reconnect_backoff_min",
            ),
            (
                TcpConfig {
                    connections_per_peer: 0,
                    ..base.clone()
                },
                "connections_per_peer",
            ),
            (
                TcpConfig {
                    handler_threads: 0,
                    ..base.clone()
                },
                "handler_threads",
            ),
            (
                TcpConfig {
                    handler_queue_len: 0,
                    ..base.clone()
                },
                "handler_queue_len",
            ),
            (
                TcpConfig {
                    write_timeout: Duration::ZERO,
                    ..base.clone()
                },
                "write_timeout",
            ),
        ];
        for (config, want) in cases {
            match config.validate() {
                Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, want),
                other => panic!("{want}: expected InvalidConfig, got {other:?}"),
            }
        }
    }
}
