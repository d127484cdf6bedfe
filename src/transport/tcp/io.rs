//! Reading whole frames off a byte stream.
//!
//! Owns the framing of a stream (where one frame ends and the next starts)
//! and the memory a frame may take while it arrives; not what a frame means
//! (`frame.rs`) nor what to do about a bad one (the connection's owner).

use std::fmt;
use std::io::{self, BufRead, BufReader, IoSlice, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::frame::{decode_header, FrameError, FrameHeader, HEADER_BYTES};
use super::limits::{BudgetRefusal, FrameBudget, Reservation};
use super::stream::ReadHalf;
use crate::sync::Arc;

/// The body buffer starts at most this large and grows as bytes arrive, so a
/// peer that announces a large frame and then sends nothing pins little
/// memory.
const BODY_BUFFER_BYTES_INITIAL: usize = 64 * 1024;

/// Why no frame was read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The peer closed the stream cleanly, between two frames.
    Closed,
    /// The socket failed (reset, shut down locally, ...).
    Io(io::Error),
    /// The bytes are not a frame, or the stream ended (or stalled past the
    /// socket's read timeout) inside one.
    Frame(FrameError),
    /// The socket's read timeout passed between two frames: nothing is
    /// wrong, the peer is idle.
    Idle,
    /// A frame was not whole by its deadline (`read_frame_within`).
    Late {
        /// The part that was still arriving: `header`, `body`, or `budget`
        /// when the server's frame budget stayed spent.
        part: &'static str,
        /// Bytes of that part received.
        received: usize,
        /// Bytes of that part expected.
        expected: usize,
        /// The deadline, counted from the frame's first byte.
        timeout: Duration,
    },
}

fn is_timeout(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Closed => write!(f, "connection closed by the peer"),
            ReadError::Io(error) => write!(f, "socket error: {error}"),
            ReadError::Frame(error) => write!(f, "{error}"),
            ReadError::Idle => write!(f, "no frame before the read timeout"),
            ReadError::Late {
                part: "budget",
                expected,
                timeout,
                ..
            } => write!(
                f,
                "frame of {expected} body bytes not read within {timeout:?}: the server's frame buffer budget stayed spent"
            ),
            ReadError::Late {
                part,
                received,
                expected,
                timeout,
            } => write!(
                f,
                "frame not whole within {timeout:?} of its first byte: {received} of {expected} {part} bytes arrived"
            ),
        }
    }
}

/// A stream a frame body is read from.
pub(crate) trait ReadBody: Read {
    /// Appends up to `len` bytes to `body`, fewer only if the stream ends
    /// first; returns how many. `body` grows as bytes arrive.
    fn read_body(&mut self, body: &mut Vec<u8>, len: usize) -> io::Result<usize>
    where
        Self: Sized,
    {
        self.by_ref().take(len as u64).read_to_end(body)
    }
}

impl ReadBody for &[u8] {}

/// A client connection's reader: the bytes its buffer holds, then the rest
/// straight from the connection (see [`ReadHalf::read_body`]), not through
/// the buffer.
impl ReadBody for BufReader<ReadHalf> {
    fn read_body(&mut self, body: &mut Vec<u8>, len: usize) -> io::Result<usize> {
        let buffered = self.buffer();
        let taken = buffered.len().min(len);
        body.extend_from_slice(&buffered[..taken]);
        self.consume(taken);
        if taken == len {
            return Ok(taken);
        }
        Ok(taken + self.get_mut().read_body(body, len - taken)?)
    }
}

/// Reads the next frame: its checked header and its body, exactly
/// `header.body_bytes` long. The header is checked (magic, version, type,
/// size against `frame_bytes_max`) before any of the body is read.
pub(crate) fn read_frame<R: ReadBody>(
    reader: &mut R,
    frame_bytes_max: usize,
) -> Result<(FrameHeader, Bytes), ReadError> {
    let mut header_bytes = [0u8; HEADER_BYTES];
    let mut filled = 0;
    while filled < HEADER_BYTES {
        match reader.read(&mut header_bytes[filled..]) {
            Ok(0) if filled == 0 => return Err(ReadError::Closed),
            Ok(0) => {
                return Err(ReadError::Frame(FrameError::truncated(
                    "header",
                    HEADER_BYTES,
                    filled,
                )))
            }
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) if is_timeout(&error) && filled == 0 => return Err(ReadError::Idle),
            Err(error) if is_timeout(&error) => {
                return Err(ReadError::Frame(FrameError::truncated(
                    "header",
                    HEADER_BYTES,
                    filled,
                )))
            }
            Err(error) => return Err(ReadError::Io(error)),
        }
    }
    let header = decode_header(&header_bytes, frame_bytes_max).map_err(ReadError::Frame)?;
    // The buffer grows as bytes arrive (a peer that announces a large
    // body and stalls pins little memory).
    let expected = header.body_bytes;
    let mut body = Vec::with_capacity(expected.min(BODY_BUFFER_BYTES_INITIAL));
    match reader.read_body(&mut body, expected) {
        Ok(_) => {}
        // The peer stalled inside the body: a truncated frame.
        Err(error) if is_timeout(&error) => {
            return Err(ReadError::Frame(FrameError::truncated(
                "body",
                expected,
                body.len(),
            )))
        }
        Err(error) => return Err(ReadError::Io(error)),
    }
    if body.len() < expected {
        return Err(ReadError::Frame(FrameError::truncated(
            "body",
            expected,
            body.len(),
        )));
    }
    debug_assert_eq!(body.len(), expected);
    Ok((header, Bytes::from(body)))
}

/// What [`read_frame_within`] holds a frame to.
pub(crate) struct FrameLimits<'a> {
    /// Largest frame, header included.
    pub(crate) frame_bytes_max: usize,
    /// Longest a frame may take to arrive, from its first byte to its last.
    pub(crate) frame_timeout: Duration,
    /// Where bodies larger than a small one reserve their bytes.
    pub(crate) budget: &'a Arc<FrameBudget>,
}

/// Reads the next frame as [`read_frame`] does, but against deadlines for
/// the whole frame rather than for each `read`: the first byte must come by
/// `first_byte_by` (else [`ReadError::Idle`]), and the rest within
/// `limits.frame_timeout` of it (else [`ReadError::Late`]), so a peer that
/// trickles one byte at a time cannot hold the connection open. A large body
/// is read only once its bytes are reserved from `limits.budget`; the
/// returned reservation gives them back when dropped (once the request is
/// answered).
///
/// `set_read_timeout` sets the underlying socket's read timeout; it is
/// called before each read that will reach the socket. `give_up` is asked
/// while waiting for the budget whether the connection was closed.
pub(crate) fn read_frame_within<R: Read>(
    reader: &mut BufReader<R>,
    set_read_timeout: &mut dyn FnMut(Duration) -> io::Result<()>,
    first_byte_by: Instant,
    limits: &FrameLimits<'_>,
    give_up: &dyn Fn() -> bool,
) -> Result<(FrameHeader, Bytes, Reservation), ReadError> {
    let mut header_bytes = [0u8; HEADER_BYTES];
    match read_until(
        reader,
        &mut header_bytes[..1],
        first_byte_by,
        set_read_timeout,
    ) {
        Ok(0) => return Err(ReadError::Closed),
        Ok(_) => {}
        Err(error) if is_timeout(&error) => return Err(ReadError::Idle),
        Err(error) => return Err(ReadError::Io(error)),
    }
    let frame_deadline = Instant::now() + limits.frame_timeout;
    let late = |part, received, expected| ReadError::Late {
        part,
        received,
        expected,
        timeout: limits.frame_timeout,
    };
    let mut filled = 1;
    while filled < HEADER_BYTES {
        match read_until(
            reader,
            &mut header_bytes[filled..],
            frame_deadline,
            set_read_timeout,
        ) {
            Ok(0) => {
                return Err(ReadError::Frame(FrameError::truncated(
                    "header",
                    HEADER_BYTES,
                    filled,
                )))
            }
            Ok(read) => filled += read,
            Err(error) if is_timeout(&error) => return Err(late("header", filled, HEADER_BYTES)),
            Err(error) => return Err(ReadError::Io(error)),
        }
    }
    let header = decode_header(&header_bytes, limits.frame_bytes_max).map_err(ReadError::Frame)?;
    let expected = header.body_bytes;
    let reservation = match limits.budget.reserve(expected, frame_deadline, give_up) {
        Ok(reservation) => reservation,
        Err(BudgetRefusal::DeadlinePassed) => return Err(late("budget", 0, expected)),
        Err(BudgetRefusal::GaveUp) => {
            return Err(ReadError::Io(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection closed while waiting for the frame budget",
            )))
        }
    };
    // The buffer grows as bytes arrive (a peer that announces a large body
    // and stalls pins little memory) but never past the body's length, the
    // amount reserved.
    let mut body = Vec::new();
    let mut received = 0;
    while received < expected {
        if received == body.len() {
            let grow = body
                .len()
                .max(BODY_BUFFER_BYTES_INITIAL)
                .min(expected - body.len());
            body.reserve_exact(grow);
            body.resize(body.len() + grow, 0);
        }
        match read_until(
            reader,
            &mut body[received..],
            frame_deadline,
            set_read_timeout,
        ) {
            Ok(0) => {
                return Err(ReadError::Frame(FrameError::truncated(
                    "body", expected, received,
                )))
            }
            Ok(read) => received += read,
            Err(error) if is_timeout(&error) => return Err(late("body", received, expected)),
            Err(error) => return Err(ReadError::Io(error)),
        }
    }
    debug_assert_eq!(body.len(), expected);
    Ok((header, Bytes::from(body), reservation))
}

/// Shortest socket read timeout set: zero would mean none at all.
const READ_TIMEOUT_LEAST: Duration = Duration::from_millis(1);

/// One `read` into `buf` that returns by `deadline`: the socket's timeout is
/// set to the time left before each read that reaches it. A timed-out read
/// before the deadline is retried; at the deadline the error is
/// `io::ErrorKind::TimedOut`.
fn read_until<R: Read>(
    reader: &mut BufReader<R>,
    buf: &mut [u8],
    deadline: Instant,
    set_read_timeout: &mut dyn FnMut(Duration) -> io::Result<()>,
) -> io::Result<usize> {
    loop {
        if reader.buffer().is_empty() {
            let now = Instant::now();
            if now >= deadline {
                return Err(io::ErrorKind::TimedOut.into());
            }
            set_read_timeout((deadline - now).max(READ_TIMEOUT_LEAST))?;
        }
        match reader.read(buf) {
            Err(error) if error.kind() == io::ErrorKind::Interrupted || is_timeout(&error) => {}
            other => return other,
        }
    }
}

/// Writes all of `buf` to `socket` by `deadline`: the socket's write
/// timeout is set to the time left before each `write` (a peer that reads a
/// little at a time lets every `write` return with some progress, so a
/// timeout per `write` alone bounds nothing). At the deadline the error is
/// `io::ErrorKind::TimedOut`. The socket's previous write timeout is put
/// back on the way out, whatever the outcome.
#[cfg(feature = "tls")]
pub(crate) fn write_all_by(
    socket: &mut TcpStream,
    buf: &[u8],
    deadline: Instant,
) -> io::Result<()> {
    write_all_vectored_by(socket, &mut [IoSlice::new(buf)], deadline)
}

/// As `write_all_by`, for the buffers of `bufs` one after the other,
/// with vectored writes: a frame whose payload is a buffer of its own
/// (`EncodedFrame`) goes out without being copied into one first.
pub(crate) fn write_all_vectored_by(
    socket: &mut TcpStream,
    bufs: &mut [IoSlice<'_>],
    deadline: Instant,
) -> io::Result<()> {
    let restore = socket.write_timeout()?;
    let outcome = write_all_vectored_by_inner(socket, bufs, deadline);
    // Fails only on a dead socket, which the next use reports.
    let _ = socket.set_write_timeout(restore);
    outcome
}

fn write_all_vectored_by_inner(
    socket: &mut TcpStream,
    mut bufs: &mut [IoSlice<'_>],
    deadline: Instant,
) -> io::Result<()> {
    // Empty buffers at the front would make a write of zero bytes look
    // like a peer that accepts nothing.
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let now = Instant::now();
        if now >= deadline {
            return Err(io::ErrorKind::TimedOut.into());
        }
        socket.set_write_timeout(Some((deadline - now).max(READ_TIMEOUT_LEAST)))?;
        match socket.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => IoSlice::advance_slices(&mut bufs, written),
            Err(error) if error.kind() == io::ErrorKind::Interrupted || is_timeout(&error) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::tcp::frame::{decode_body, encode_response, Message};
    use crate::transport::{ErrorCode, Response};

    const MAX: usize = 1 << 16;

    #[test]
    fn reads_consecutive_frames_then_reports_a_clean_close() {
        let mut stream = Vec::new();
        for (id, code) in [(1, ErrorCode::None), (2, ErrorCode::Timeout)] {
            stream.extend(encode_response(id, &Response::Error(code), MAX).expect("fits"));
        }
        let mut reader = &stream[..];
        for (id, code) in [(1, ErrorCode::None), (2, ErrorCode::Timeout)] {
            let (header, body) = read_frame(&mut reader, MAX).expect("a whole frame");
            assert_eq!(header.request_id, id);
            assert_eq!(
                decode_body(&header, body).expect("decodes"),
                Message::Response(Response::Error(code))
            );
        }
        assert!(matches!(
            read_frame(&mut reader, MAX),
            Err(ReadError::Closed)
        ));
    }

    #[test]
    fn a_stream_ending_inside_a_frame_is_a_truncated_frame() {
        let frame = encode_response(1, &Response::Error(ErrorCode::None), MAX).expect("fits");
        for cut in 1..frame.len() {
            let mut reader = &frame[..cut];
            match read_frame(&mut reader, MAX) {
                Err(ReadError::Frame(error)) => {
                    let want = if cut < HEADER_BYTES { "header" } else { "body" };
                    assert_eq!(error.field(), want, "cut at {cut}: {error}");
                }
                other => panic!("cut at {cut}: expected a truncated frame, got {other:?}"),
            }
        }
    }

    #[test]
    fn an_oversized_frame_is_refused_before_its_body_is_read() {
        let frame = encode_response(1, &Response::Error(ErrorCode::None), MAX).expect("fits");
        let mut reader = &frame[..];
        match read_frame(&mut reader, HEADER_BYTES + 1) {
            Err(ReadError::Frame(error)) => assert_eq!(error.field(), "body length"),
            other => panic!("expected an oversized frame error, got {other:?}"),
        }
        assert_eq!(reader.len(), frame.len() - HEADER_BYTES, "body was read");
    }

    /// A frame sent in pieces (its payload shared, not copied) arrives
    /// whole and in order, empty pieces included, even when the socket
    /// takes it in several writes.
    #[test]
    fn vectored_writes_send_every_piece_in_order() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut sender = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (mut receiver, _) = listener.accept().expect("accept");
        let big: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8).collect();
        let pieces: [&[u8]; 4] = [b"", b"head", &big, b"tail"];
        let expected: Vec<u8> = pieces.concat();
        let reading = std::thread::spawn(move || {
            let mut all = Vec::new();
            receiver.read_to_end(&mut all).expect("read");
            all
        });
        let mut slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        write_all_vectored_by(&mut sender, &mut slices, deadline).expect("written");
        drop(sender);
        assert!(reading.join().expect("reader") == expected, "bytes differ");
    }
}
