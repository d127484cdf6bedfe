//! The byte streams a connection reads frames from and writes frames to:
//! the socket itself, or (feature `tls`) a TLS session on it.
//!
//! Owns the choice between plain TCP and TLS for one server or client
//! ([`Security`]), the handshake hook, and the check of a frame's claimed
//! sender against the peer's authenticated identity. Does not own frames or
//! threads.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::frame::EncodedFrame;
#[cfg(feature = "tls")]
use super::tls::{RefusalLog, TlsConfig, TlsReader, TlsWriter};
#[cfg(feature = "tls")]
use crate::sync::Arc;
use crate::transport::Request;
use crate::types::NodeId;

/// How a server or a client secures its connections.
#[derive(Debug)]
pub(crate) enum Security {
    /// Plain TCP: peers are who their frames say they are.
    Plain,
    /// Mutual TLS; a server logs refusals through the rate limiter (a
    /// client reports failures to its caller instead).
    #[cfg(feature = "tls")]
    Tls(TlsConfig, Arc<RefusalLog>),
}

/// The reading half of a connection.
pub(crate) enum ReadHalf {
    /// A clone of the socket.
    Plain(TcpStream),
    /// A TLS session's plaintext.
    #[cfg(feature = "tls")]
    Tls(TlsReader),
}

/// The writing half of a connection.
pub(crate) enum WriteHalf {
    /// The socket.
    Plain(TcpStream),
    /// A TLS session's plaintext.
    #[cfg(feature = "tls")]
    Tls(TlsWriter),
}

impl Security {
    /// The halves of an accepted connection; the server runs
    /// [`ReadHalf::handshake`] on its reader thread before reading frames.
    pub(crate) fn accept(&self, socket: &TcpStream) -> io::Result<(ReadHalf, WriteHalf)> {
        match self {
            Security::Plain => Ok((
                ReadHalf::Plain(socket.try_clone()?),
                WriteHalf::Plain(socket.try_clone()?),
            )),
            #[cfg(feature = "tls")]
            Security::Tls(tls, _) => {
                let (reader, writer) = tls.accept(socket)?;
                Ok((ReadHalf::Tls(reader), WriteHalf::Tls(writer)))
            }
        }
    }

    /// The halves of a connection a client dialled to `peer`, after the
    /// handshake (bounded by `timeout`) proved the server is `peer`.
    pub(crate) fn connect(
        &self,
        socket: &TcpStream,
        peer: NodeId,
        timeout: Duration,
    ) -> Result<(ReadHalf, WriteHalf), String> {
        match self {
            Security::Plain => {
                let _ = (peer, timeout);
                let clone = || {
                    socket
                        .try_clone()
                        .map_err(|error| format!("clone socket: {error}"))
                };
                Ok((ReadHalf::Plain(clone()?), WriteHalf::Plain(clone()?)))
            }
            #[cfg(feature = "tls")]
            Security::Tls(tls, _) => {
                let (reader, writer) = tls
                    .connect(socket, peer, timeout)
                    .map_err(|reason| format!("TLS handshake with {peer} failed: {reason}"))?;
                Ok((ReadHalf::Tls(reader), WriteHalf::Tls(writer)))
            }
        }
    }

    /// Logs that a connection from `peer` was refused; with TLS, at most
    /// one warning per `TcpConfig::warning_interval`.
    pub(crate) fn log_refusal(&self, peer: SocketAddr, reason: &str) {
        match self {
            Security::Plain => {
                tracing::warn!(%peer, %reason, "tcp: refused connection");
            }
            #[cfg(feature = "tls")]
            Security::Tls(_, log) => {
                if let Some(suppressed) = log.admit() {
                    tracing::warn!(%peer, %reason, suppressed, "tcp: refused connection (tls; `suppressed` more refusals since the last warning)");
                }
            }
        }
    }
}

impl ReadHalf {
    /// Completes the handshake, if any, within `timeout`, and returns the
    /// node the peer proved to be (`None` on plain TCP, where there is no
    /// proof).
    pub(crate) fn handshake(&mut self, timeout: Duration) -> Result<Option<NodeId>, String> {
        match self {
            ReadHalf::Plain(_) => {
                let _ = timeout;
                Ok(None)
            }
            #[cfg(feature = "tls")]
            ReadHalf::Tls(reader) => reader
                .handshake(timeout)
                .map(Some)
                .map_err(|reason| format!("TLS handshake failed: {reason}")),
        }
    }
}

impl ReadHalf {
    /// Appends up to `len` bytes to `body`, fewer only if the stream ends
    /// first; returns how many. On plain TCP the socket receives straight
    /// into `body`'s spare capacity (`TcpStream` reads into memory not yet
    /// written; through `Read::read` each buffer would be zeroed first, a
    /// pass over every byte of a 1 MiB snapshot chunk).
    pub(crate) fn read_body(&mut self, body: &mut Vec<u8>, len: usize) -> io::Result<usize> {
        match self {
            ReadHalf::Plain(socket) => socket.take(len as u64).read_to_end(body),
            #[cfg(feature = "tls")]
            ReadHalf::Tls(reader) => reader.take(len as u64).read_to_end(body),
        }
    }
}

impl Read for ReadHalf {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ReadHalf::Plain(socket) => socket.read(buf),
            #[cfg(feature = "tls")]
            ReadHalf::Tls(reader) => reader.read(buf),
        }
    }
}

impl WriteHalf {
    /// Writes all of `frame` by `deadline`, re-arming the socket's write
    /// timeout to the time left before each write; at the deadline the
    /// error is `io::ErrorKind::TimedOut`. On plain TCP piece by piece with
    /// the small pieces sent together ([`super::io::write_all_pieces_by`]),
    /// so the frame's shared payloads are not copied; with TLS piece by
    /// piece (the session encrypts into records of its own anyway).
    pub(crate) fn write_frame_by(
        &mut self,
        frame: &EncodedFrame,
        deadline: Instant,
    ) -> io::Result<()> {
        match self {
            WriteHalf::Plain(socket) => {
                let pieces: Vec<&[u8]> = frame.pieces().iter().map(|piece| &piece[..]).collect();
                super::io::write_all_pieces_by(socket, &pieces, deadline)
            }
            #[cfg(feature = "tls")]
            WriteHalf::Tls(writer) => {
                for piece in frame.pieces() {
                    writer.write_all_within(piece, Some(deadline))?;
                }
                Ok(())
            }
        }
    }

    /// Sets the socket's write timeout.
    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            WriteHalf::Plain(socket) => socket.set_write_timeout(timeout),
            #[cfg(feature = "tls")]
            WriteHalf::Tls(writer) => writer.set_write_timeout(timeout),
        }
    }
}

impl Write for WriteHalf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            WriteHalf::Plain(socket) => socket.write(buf),
            #[cfg(feature = "tls")]
            WriteHalf::Tls(writer) => writer.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            WriteHalf::Plain(socket) => socket.write_all(buf),
            #[cfg(feature = "tls")]
            WriteHalf::Tls(writer) => writer.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            WriteHalf::Plain(socket) => socket.flush(),
            #[cfg(feature = "tls")]
            WriteHalf::Tls(writer) => writer.flush(),
        }
    }
}

/// Why a request frame may not be served on a connection whose peer proved
/// to be `identity`: its sender, or the replica it speaks for, is another
/// node. `None` when it may (always, on plain TCP: `identity` is `None`).
pub(crate) fn impersonation(
    identity: Option<NodeId>,
    from: NodeId,
    request: &Request,
) -> Option<String> {
    let identity = identity?;
    if from != identity {
        return Some(format!(
            "frame sent as {from} on a connection authenticated as {identity}"
        ));
    }
    let replica = match request {
        Request::Fetch(fetch) => fetch.replica,
        Request::EpochEndOffsets(query) => query.replica,
        Request::Snapshot(snapshot) => snapshot.replica,
    };
    (replica != identity).then(|| {
        format!("request for replica {replica} on a connection authenticated as {identity}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{sample_epoch_request, sample_fetch_request};

    #[test]
    fn impersonation_table() {
        let (one, two) = (NodeId(1), NodeId(2));
        // (authenticated identity, frame sender, request, refused?)
        let cases = [
            (None, two, sample_fetch_request(one, 0), false),
            (Some(one), one, sample_fetch_request(one, 0), false),
            (Some(one), one, sample_epoch_request(one, 0), false),
            (Some(one), two, sample_fetch_request(two, 0), true),
            (Some(one), two, sample_fetch_request(one, 0), true),
            (Some(one), one, sample_fetch_request(two, 0), true),
            (Some(one), one, sample_epoch_request(two, 0), true),
        ];
        for (identity, from, request, refused) in cases {
            assert_eq!(
                impersonation(identity, from, &request).is_some(),
                refused,
                "{identity:?} sending as {from}: {request:?}"
            );
        }
    }
}
