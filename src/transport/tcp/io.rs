//! Reading whole frames off a byte stream.
//!
//! Owns the framing of a stream (where one frame ends and the next starts)
//! and the memory a frame may take while it arrives; not what a frame means
//! (`frame.rs`) nor what to do about a bad one (the connection's owner).

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
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

/// Bodies at least this long are read into a [`BodyPool`]'s buffers.
/// Shorter ones are cheap to allocate, and may be held for long (a fetch
/// response's records) where a pooled buffer would be held with them.
const POOLED_BODY_BYTES_MIN: usize = 64 * 1024;

/// Bodies at most this long are read into a [`BodyPool`]'s buffers, and
/// buffers at most this large are kept: a snapshot chunk of the default
/// `fetch_bytes_max` (1 MiB) and its fields fit.
const POOLED_BODY_BYTES_MAX: usize = 2 << 20;

/// Buffers a [`BodyPool`] keeps for reuse.
const POOLED_BODIES_MAX: usize = 4;

/// Buffers for one client connection's large response bodies, handed back
/// when the last slice of a body is dropped (wherever that is: a snapshot
/// chunk is dropped by the download's writer) and reused for the next
/// ones. A buffer freshly allocated for each 1 MiB snapshot chunk had its
/// pages faulted in (and zeroed by the kernel) for every chunk, and given
/// back to the system after it; a reused one is already there.
///
/// Memory: a pool keeps at most `POOLED_BODIES_MAX` (4) buffers of at most
/// `POOLED_BODY_BYTES_MAX` (2 MiB) each, 8 MiB per connection, besides the
/// bodies in use; a body in use holds a buffer at most twice its length. A body read into a pooled buffer gets its whole length
/// reserved when its header arrives (at most 2 MiB); longer bodies grow as
/// bytes arrive, as without a pool.
pub(crate) struct BodyPool {
    free: crossbeam_channel::Receiver<Vec<u8>>,
    give_back: crossbeam_channel::Sender<Vec<u8>>,
}

impl BodyPool {
    /// An empty pool.
    pub(crate) fn new() -> BodyPool {
        let (give_back, free) = crossbeam_channel::bounded(POOLED_BODIES_MAX);
        BodyPool { free, give_back }
    }

    /// A buffer for a body of `len` bytes, empty, with room for all of it.
    /// A free buffer more than twice as large is freed rather than used: a
    /// body is held as long as any slice of it (a fetch response's
    /// records), and would hold all of that buffer with it.
    fn take(&self, len: usize) -> Vec<u8> {
        debug_assert!((POOLED_BODY_BYTES_MIN..=POOLED_BODY_BYTES_MAX).contains(&len));
        let mut buffer = self
            .free
            .try_recv()
            .ok()
            .filter(|free| free.capacity() <= len.saturating_mul(2))
            .unwrap_or_default();
        buffer.clear();
        buffer.reserve_exact(len);
        buffer
    }

    /// `body` as `Bytes` whose buffer comes back to this pool once the
    /// last slice of it is dropped.
    fn wrap(&self, body: Vec<u8>) -> Bytes {
        Bytes::from_owner(PooledBody {
            body,
            give_back: self.give_back.clone(),
        })
    }
}

/// A body read into a pooled buffer; gives the buffer back when dropped.
struct PooledBody {
    body: Vec<u8>,
    give_back: crossbeam_channel::Sender<Vec<u8>>,
}

impl AsRef<[u8]> for PooledBody {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        let body = std::mem::take(&mut self.body);
        if body.capacity() <= POOLED_BODY_BYTES_MAX {
            // A full pool, or one whose connection is gone, frees it.
            let _ = self.give_back.try_send(body);
        }
    }
}

/// Reads the next frame: its checked header and its body, exactly
/// `header.body_bytes` long. The header is checked (magic, version, type,
/// size against `frame_bytes_max`) before any of the body is read.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn read_frame<R: ReadBody>(
    reader: &mut R,
    frame_bytes_max: usize,
) -> Result<(FrameHeader, Bytes), ReadError> {
    read_frame_pooled(reader, frame_bytes_max, None)
}

/// As [`read_frame`]; a body of `POOLED_BODY_BYTES_MIN` to
/// `POOLED_BODY_BYTES_MAX` bytes is read into a buffer of `pool`, if any.
pub(crate) fn read_frame_pooled<R: ReadBody>(
    reader: &mut R,
    frame_bytes_max: usize,
    pool: Option<&BodyPool>,
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
    // Outside a pool the buffer grows as bytes arrive (a peer that
    // announces a large body and stalls pins little memory).
    let expected = header.body_bytes;
    let pool = pool.filter(|_| (POOLED_BODY_BYTES_MIN..=POOLED_BODY_BYTES_MAX).contains(&expected));
    let mut body = match pool {
        Some(pool) => pool.take(expected),
        None => Vec::with_capacity(expected.min(BODY_BUFFER_BYTES_INITIAL)),
    };
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
    let body = match pool {
        Some(pool) => pool.wrap(body),
        None => Bytes::from(body),
    };
    Ok((header, body))
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
    write_all_pieces_by(socket, &[buf], deadline)
}

/// As `write_all_by`, for `pieces` one after the other: a
/// frame whose payload is a buffer of its own (`EncodedFrame`) goes out
/// without being copied into one first. Pieces shorter than
/// [`COALESCED_PIECE_BYTES_MAX`] next to each other are copied together
/// and sent with one `write`, so a frame of small fields is one send.
///
/// Not `write_vectored`: on Linux std's `TcpStream::write` is `send` with
/// `MSG_NOSIGNAL`, but `write_vectored` is a plain `writev`, which raises
/// SIGPIPE when the peer has closed the connection, and kills a host
/// process that has not ignored that signal (a C or FFI host) instead of
/// returning `EPIPE`.
pub(crate) fn write_all_pieces_by(
    socket: &mut TcpStream,
    pieces: &[&[u8]],
    deadline: Instant,
) -> io::Result<()> {
    let restore = socket.write_timeout()?;
    let outcome = write_pieces_by(socket, pieces, deadline);
    // Fails only on a dead socket, which the next use reports.
    let _ = socket.set_write_timeout(restore);
    outcome
}

/// Pieces shorter than this are copied together before they are sent (a
/// frame's header and fields); longer ones (payloads) are sent from their
/// own buffer.
const COALESCED_PIECE_BYTES_MAX: usize = 4 * 1024;

fn write_pieces_by(socket: &mut TcpStream, pieces: &[&[u8]], deadline: Instant) -> io::Result<()> {
    let mut small: Vec<u8> = Vec::new();
    for (index, &piece) in pieces.iter().enumerate() {
        let next_is_small = pieces
            .get(index + 1)
            .is_some_and(|next| next.len() < COALESCED_PIECE_BYTES_MAX);
        if piece.len() < COALESCED_PIECE_BYTES_MAX && (next_is_small || !small.is_empty()) {
            small.extend_from_slice(piece);
            if next_is_small {
                continue;
            }
            write_piece_by(socket, &small, deadline)?;
            small.clear();
            continue;
        }
        debug_assert!(
            small.is_empty(),
            "small pieces are sent before the next one"
        );
        write_piece_by(socket, piece, deadline)?;
    }
    Ok(())
}

/// Writes all of `buf`, each `write` bounded by the time left before
/// `deadline`.
fn write_piece_by(socket: &mut TcpStream, mut buf: &[u8], deadline: Instant) -> io::Result<()> {
    while !buf.is_empty() {
        let now = Instant::now();
        if now >= deadline {
            return Err(io::ErrorKind::TimedOut.into());
        }
        socket.set_write_timeout(Some((deadline - now).max(READ_TIMEOUT_LEAST)))?;
        match socket.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => buf = &buf[written..],
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

    /// A small large body is not read into a much larger free buffer,
    /// which it would hold for as long as any slice of it lives.
    #[test]
    fn a_body_never_holds_a_pooled_buffer_over_twice_its_length() {
        let pool = BodyPool::new();
        drop(pool.wrap(vec![1u8; POOLED_BODY_BYTES_MAX]));
        let small = pool.take(POOLED_BODY_BYTES_MIN);
        assert!(small.capacity() >= POOLED_BODY_BYTES_MIN);
        assert!(
            small.capacity() <= 2 * POOLED_BODY_BYTES_MIN,
            "capacity {}",
            small.capacity()
        );
        drop(pool.wrap(vec![1u8; POOLED_BODY_BYTES_MAX]));
        let large = pool.take(POOLED_BODY_BYTES_MAX);
        assert!(large.capacity() >= POOLED_BODY_BYTES_MAX);
    }

    /// A frame sent in pieces (its payload shared, not copied) arrives
    /// whole and in order, empty pieces included, even when the socket
    /// takes it in several writes.
    #[test]
    fn a_frame_in_pieces_arrives_whole_and_in_order() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut sender = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (mut receiver, _) = listener.accept().expect("accept");
        let big: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8).collect();
        let mid = vec![7u8; COALESCED_PIECE_BYTES_MAX];
        // Small pieces before, between and after large ones, and a large
        // one at exactly the bound.
        let pieces: [&[u8]; 9] = [
            b"", b"head", b"er", &big, b"fields", &mid, &big, b"t", b"ail",
        ];
        let expected: Vec<u8> = pieces.concat();
        let reading = std::thread::spawn(move || {
            let mut all = Vec::new();
            receiver.read_to_end(&mut all).expect("read");
            all
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        write_all_pieces_by(&mut sender, &pieces, deadline).expect("written");
        drop(sender);
        assert!(reading.join().expect("reader") == expected, "bytes differ");
    }

    /// A large body's buffer comes back to its connection's pool when the
    /// last slice of it is dropped, and the next large body is read into
    /// it: a fresh buffer per 1 MiB snapshot chunk had its pages faulted
    /// in for every chunk.
    #[test]
    fn large_bodies_reuse_pooled_buffers() {
        use crate::transport::SnapshotResponse;
        use crate::types::{LogId, Offset};
        let chunk = |position: u64| {
            let data = Bytes::from(vec![position as u8; POOLED_BODY_BYTES_MIN]);
            Response::Snapshot(SnapshotResponse {
                log: LogId(1),
                error: ErrorCode::None,
                snapshot_offset: Offset(5),
                snapshot_epoch: None,
                snapshot_bytes: 1 << 20,
                position,
                crc32: crc32fast::hash(&data),
                data,
            })
        };
        let max = 1 << 20;
        let mut stream = Vec::new();
        for id in 0..3u64 {
            stream.extend(encode_response(id, &chunk(id), max).expect("fits"));
        }
        stream.extend(encode_response(3, &Response::Error(ErrorCode::None), max).expect("fits"));
        let pool = BodyPool::new();
        let mut reader = &stream[..];
        let mut read = || {
            let (header, body) = read_frame_pooled(&mut reader, max, Some(&pool)).expect("frame");
            let Message::Response(response) = decode_body(&header, body).expect("decodes") else {
                panic!("expected a response");
            };
            response
        };
        let first = read();
        assert_eq!(first, chunk(0));
        let Response::Snapshot(first) = first else {
            panic!("expected a snapshot chunk");
        };
        let first_data = first.data.as_ptr();
        // Held: the next body gets a buffer of its own.
        let second = read();
        let Response::Snapshot(second) = second else {
            panic!("expected a snapshot chunk");
        };
        assert_ne!(second.data.as_ptr(), first_data);
        drop(first);
        let third = read();
        assert_eq!(third, chunk(2));
        let Response::Snapshot(third) = third else {
            panic!("expected a snapshot chunk");
        };
        assert_eq!(
            third.data.as_ptr(),
            first_data,
            "the freed buffer was not reused"
        );
        // A small body is not read into a pooled buffer.
        assert_eq!(read(), Response::Error(ErrorCode::None));
        drop(second);
    }
}
