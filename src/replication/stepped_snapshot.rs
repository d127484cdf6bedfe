//! A follower's snapshot transfer without a thread (SPEC 3.9, issue 28):
//! what [`Transfer`](super::snapshot_transfer::Transfer) does on its own
//! thread, as a state machine a simulator steps. The stepped fetcher
//! (`Fetcher::stepped`) keeps one per log whose replica needs a snapshot;
//! the simulator asks it for the next chunk request, carries the request
//! over its own network to the leader's handler, and hands the answer (or
//! the call's failure) back.
//!
//! It checks each chunk as the threaded transfer does (the log and
//! position asked for, no error, its CRC-32, a length that fits its
//! snapshot; a snapshot that changed between chunks starts the transfer
//! again, at most [`RESTARTS_MAX`] times), one request at a time, and keeps
//! the chunks in memory (a simulated snapshot is small) instead of a file
//! of the log's directory. Installing it is the fetcher's: the same
//! [`Replica::check_snapshot_offset`](super::Replica::check_snapshot_offset),
//! [`SnapshotStore::install`](crate::SnapshotStore::install) and
//! [`Replica::snapshot_installed`](super::Replica::snapshot_installed) the
//! threaded transfer calls.

// Only a simulator (tests, the `testing` feature) steps a transfer.
#![cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]

use crate::snapshot::SnapshotId;
use crate::transport::{ErrorCode, Response, SnapshotRequest, SnapshotResponse, TransportError};
use crate::types::{LeaderEpoch, LogId, NodeId};

/// How often a transfer starts again because the leader's latest snapshot
/// changed under it before it gives up (as the threaded transfer).
const RESTARTS_MAX: u32 = 3;

/// One log's snapshot download, stepped.
#[derive(Debug)]
pub(crate) struct SteppedTransfer {
    /// The leader epoch the transfer began in: it installs only in it.
    epoch: LeaderEpoch,
    /// The snapshot being downloaded, once the first chunk said which.
    snapshot: Option<SnapshotId>,
    /// Every byte checked so far, from the snapshot's start.
    received: Vec<u8>,
    /// Times the leader's snapshot changed under the transfer.
    restarts: u32,
    /// The request out, by the driver's token: one at a time.
    asked: Option<u64>,
}

/// What an answer did to a transfer.
#[derive(Debug)]
pub(crate) enum ChunkStep {
    /// More to ask for.
    More,
    /// The whole snapshot arrived and was checked: install it.
    Complete(SnapshotId, Vec<u8>),
    /// The transfer failed; it ends (the follower asks again later).
    Failed(String),
    /// Not the answer the transfer waits for (a late or duplicated
    /// copy): ignored.
    Stale,
}

impl SteppedTransfer {
    /// A transfer beginning in `epoch`.
    pub(crate) fn new(epoch: LeaderEpoch) -> SteppedTransfer {
        SteppedTransfer {
            epoch,
            snapshot: None,
            received: Vec::new(),
            restarts: 0,
            asked: None,
        }
    }

    /// The leader epoch the transfer began in.
    pub(crate) fn epoch(&self) -> LeaderEpoch {
        self.epoch
    }

    /// The next chunk's request, under the driver's `token`, unless one is
    /// out.
    pub(crate) fn next_request(
        &mut self,
        token: u64,
        local: NodeId,
        log: LogId,
        bytes_max: u32,
    ) -> Option<SnapshotRequest> {
        if self.asked.is_some() {
            return None;
        }
        self.asked = Some(token);
        Some(SnapshotRequest {
            replica: local,
            log,
            current_leader_epoch: self.epoch,
            position: self.received.len() as u64,
            bytes_max,
        })
    }

    /// Takes the answer to the request made under `token`.
    pub(crate) fn on_answer(
        &mut self,
        token: u64,
        log: LogId,
        answer: Result<Response, TransportError>,
    ) -> ChunkStep {
        if self.asked != Some(token) {
            return ChunkStep::Stale;
        }
        self.asked = None;
        let chunk = match answer {
            Ok(Response::Snapshot(chunk)) => chunk,
            Ok(Response::Error(code)) => {
                return ChunkStep::Failed(format!("the leader answered {code}"))
            }
            Ok(other) => return ChunkStep::Failed(format!("unexpected answer {other:?}")),
            Err(error) => return ChunkStep::Failed(format!("snapshot request failed: {error}")),
        };
        self.take_chunk(log, chunk)
    }

    /// Checks `chunk` (as `Transfer::fetch_chunk` does) and keeps its bytes.
    fn take_chunk(&mut self, log: LogId, chunk: SnapshotResponse) -> ChunkStep {
        let position = self.received.len() as u64;
        if chunk.log != log || chunk.position != position {
            return ChunkStep::Failed(format!(
                "the leader answered for log {} at byte {}, asked for log {log} at byte {position}",
                chunk.log, chunk.position
            ));
        }
        if chunk.error != ErrorCode::None {
            return ChunkStep::Failed(format!("the leader answered {}", chunk.error));
        }
        let now = SnapshotId::of(&chunk);
        if self.snapshot.is_some_and(|known| known.is_other(now)) {
            self.restarts += 1;
            if self.restarts > RESTARTS_MAX {
                return ChunkStep::Failed(format!(
                    "the leader's latest snapshot changed {} times during the transfer",
                    self.restarts
                ));
            }
            tracing::info!(%log, was = ?self.snapshot, now = ?now, "the leader's latest snapshot changed during the transfer; starting again");
            self.snapshot = None;
            self.received.clear();
            return ChunkStep::More;
        }
        let crc = crc32fast::hash(&chunk.data);
        if crc != chunk.crc32 {
            return ChunkStep::Failed(format!(
                "chunk at byte {position} of the snapshot at {} is corrupt: CRC-32 {crc:#010x}, the leader sent {:#010x}",
                now.offset, chunk.crc32
            ));
        }
        let len = chunk.data.len() as u64;
        let remaining = now.size_bytes.saturating_sub(position);
        if len > remaining || (len == 0 && remaining > 0) {
            return ChunkStep::Failed(format!(
                "chunk at byte {position} has {len} bytes, {remaining} remain"
            ));
        }
        // The first chunk's, with the epoch it named.
        let now = *self.snapshot.get_or_insert(now);
        self.received.extend_from_slice(&chunk.data);
        if self.received.len() as u64 == now.size_bytes {
            return ChunkStep::Complete(now, std::mem::take(&mut self.received));
        }
        ChunkStep::More
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::types::Offset;

    fn chunk(position: u64, data: &[u8], offset: u64, size: u64) -> Response {
        Response::Snapshot(SnapshotResponse {
            log: LogId(1),
            error: ErrorCode::None,
            snapshot_offset: Offset(offset),
            snapshot_epoch: Some(LeaderEpoch(2)),
            snapshot_bytes: size,
            position,
            crc32: crc32fast::hash(data),
            data: Bytes::copy_from_slice(data),
        })
    }

    /// Chunks are asked for one at a time and taken in order; a stale
    /// copy is ignored, a changed snapshot starts again from byte 0, and
    /// a bad CRC fails the transfer.
    #[test]
    fn a_stepped_transfer_checks_each_chunk_and_completes_with_every_byte() {
        let log = LogId(1);
        let mut transfer = SteppedTransfer::new(LeaderEpoch(3));
        let first = transfer.next_request(1, NodeId(2), log, 4).unwrap();
        assert_eq!(
            (first.position, first.current_leader_epoch),
            (0, LeaderEpoch(3))
        );
        assert!(
            transfer.next_request(2, NodeId(2), log, 4).is_none(),
            "one at a time"
        );
        assert!(matches!(
            transfer.on_answer(1, log, Ok(chunk(0, b"abcd", 10, 6))),
            ChunkStep::More
        ));
        assert!(matches!(
            transfer.on_answer(1, log, Ok(chunk(0, b"abcd", 10, 6))),
            ChunkStep::Stale
        ));
        let second = transfer.next_request(3, NodeId(2), log, 4).unwrap();
        assert_eq!(second.position, 4);
        // The leader took a newer snapshot: start again.
        assert!(matches!(
            transfer.on_answer(3, log, Ok(chunk(4, b"ef", 12, 6))),
            ChunkStep::More
        ));
        assert_eq!(
            transfer
                .next_request(4, NodeId(2), log, 4)
                .unwrap()
                .position,
            0
        );
        assert!(matches!(
            transfer.on_answer(4, log, Ok(chunk(0, b"wxyz", 12, 6))),
            ChunkStep::More
        ));
        transfer.next_request(5, NodeId(2), log, 4).unwrap();
        // A deletion up to the snapshot meanwhile changed the epoch the
        // leader names with it: the same snapshot, the first chunk's epoch.
        let Response::Snapshot(mut renamed) = chunk(4, b"uv", 12, 6) else {
            unreachable!()
        };
        renamed.snapshot_epoch = Some(LeaderEpoch(5));
        match transfer.on_answer(5, log, Ok(Response::Snapshot(renamed))) {
            ChunkStep::Complete(info, bytes) => {
                assert_eq!(info.offset, Offset(12));
                assert_eq!(info.epoch, Some(LeaderEpoch(2)));
                assert_eq!(bytes, b"wxyzuv");
            }
            other => panic!("{other:?}"),
        }
        let mut bad = SteppedTransfer::new(LeaderEpoch(3));
        bad.next_request(1, NodeId(2), log, 4).unwrap();
        let Response::Snapshot(mut flipped) = chunk(0, b"abcd", 10, 6) else {
            unreachable!()
        };
        flipped.crc32 ^= 1;
        assert!(matches!(
            bad.on_answer(1, log, Ok(Response::Snapshot(flipped))),
            ChunkStep::Failed(_)
        ));
    }
}
