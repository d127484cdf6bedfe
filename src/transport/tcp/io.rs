//! Reading whole frames off a byte stream.
//!
//! Owns the framing of a stream (where one frame ends and the next starts)
//! and the memory a frame may take while it arrives; not what a frame means
//! (`frame.rs`) nor what to do about a bad one (the connection's owner).

use std::fmt;
use std::io::{self, Read};

use bytes::Bytes;

use super::frame::{decode_header, FrameError, FrameHeader, HEADER_BYTES};

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
        }
    }
}

/// Reads the next frame: its checked header and its body, exactly
/// `header.body_bytes` long. The header is checked (magic, version, type,
/// size against `frame_bytes_max`) before any of the body is read.
pub(crate) fn read_frame<R: Read>(
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
    let mut body = Vec::with_capacity(header.body_bytes.min(BODY_BUFFER_BYTES_INITIAL));
    match reader
        .by_ref()
        .take(header.body_bytes as u64)
        .read_to_end(&mut body)
    {
        Ok(_) => {}
        // The peer stalled inside the body: a truncated frame.
        Err(error) if is_timeout(&error) => {
            return Err(ReadError::Frame(FrameError::truncated(
                "body",
                header.body_bytes,
                body.len(),
            )))
        }
        Err(error) => return Err(ReadError::Io(error)),
    }
    if body.len() < header.body_bytes {
        return Err(ReadError::Frame(FrameError::truncated(
            "body",
            header.body_bytes,
            body.len(),
        )));
    }
    Ok((header, Bytes::from(body)))
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
}
