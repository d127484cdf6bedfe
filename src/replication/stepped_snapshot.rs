//! A follower's snapshot transfer without a thread (SPEC 3.9, issue 28):
//! what [`Transfer`](super::snapshot_transfer::Transfer) does on its own
//! thread, as a state machine a simulator steps. The stepped fetcher
//! (`Fetcher::stepped`) keeps one per log whose replica needs a snapshot;
//! the simulator asks it for the next chunk request, carries the request
//! over its own network to the leader's handler, and hands the answer (or
//! the call's failure) back.
//!
//! The rules are the threaded transfer's, one code for both (issue 28,
//! [`snapshot_download`](super::snapshot_download)): each chunk is checked
//! by [`check_chunk`] (the log and position asked for, no error, its
//! CRC-32, a length that fits its snapshot; a snapshot that the leader no
//! longer serves starts the transfer again, at most [`RESTARTS_MAX`]
//! times), every request after the first names the snapshot the first
//! chunk named, and the fetcher installs the whole download with the same
//! [`install_downloaded`](super::snapshot_download::install_downloaded).
//! Only how the bytes move is this module's: one request at a time, the
//! chunks kept in memory (a simulated snapshot is small) instead of a file
//! of the log's directory.

// Only a simulator (tests, the `testing` feature) steps a transfer.
#![cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]

use super::snapshot_download::SnapshotId;
use super::snapshot_download::{
    check_chunk, chunk_of, restarted_too_often, ChunkCheck, RESTARTS_MAX,
};
use crate::transport::{Response, SnapshotRequest, SnapshotResponse, TransportError};
use crate::types::{LeaderEpoch, LogId, NodeId};

/// One log's snapshot download, stepped.
#[derive(Debug)]
pub(crate) struct SteppedTransfer {
    /// The leader epoch the transfer began in: it installs only in it.
    epoch: LeaderEpoch,
    /// The snapshot being downloaded, once the first chunk said which.
    snapshot: Option<SnapshotId>,
    /// Every byte checked so far, from the snapshot's start.
    received: Vec<u8>,
    /// Times the transfer started again because the leader no longer
    /// served its snapshot.
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
    /// out: after the first chunk, for the snapshot that chunk named.
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
            snapshot: self.snapshot.map(SnapshotId::info),
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
        match chunk_of(answer) {
            Ok(chunk) => self.take_chunk(log, chunk),
            Err(why) => ChunkStep::Failed(why),
        }
    }

    /// Starts the transfer again from the leader's latest, unless it did
    /// so [`RESTARTS_MAX`] times already: the leader no longer serves the
    /// snapshot being downloaded (it answered with `other`, or, `None`,
    /// that it is unavailable).
    fn start_again(&mut self, log: LogId, other: Option<SnapshotId>) -> ChunkStep {
        self.restarts += 1;
        if self.restarts > RESTARTS_MAX {
            return ChunkStep::Failed(restarted_too_often());
        }
        tracing::info!(%log, was = ?self.snapshot, answered = ?other, "the leader no longer serves the snapshot being downloaded; starting again from its latest");
        self.snapshot = None;
        self.received.clear();
        ChunkStep::More
    }

    /// Checks `chunk` ([`check_chunk`], as `Transfer::fetch_chunk` does)
    /// and keeps its bytes.
    fn take_chunk(&mut self, log: LogId, chunk: SnapshotResponse) -> ChunkStep {
        let position = self.received.len() as u64;
        let now = match check_chunk(log, position, self.snapshot, &chunk) {
            Ok(ChunkCheck::Fits { snapshot, .. }) => snapshot,
            Ok(ChunkCheck::OtherSnapshot(other)) => return self.start_again(log, Some(other)),
            Ok(ChunkCheck::Unavailable) => return self.start_again(log, None),
            Err(why) => return ChunkStep::Failed(why),
        };
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
    use super::*;
    use crate::snapshot::SnapshotInfo;
    use crate::transport::ErrorCode;
    use crate::types::Offset;

    /// `snapshot_download`'s test chunk as a transport answer.
    fn chunk(position: u64, data: &[u8], offset: u64, size: u64) -> Response {
        Response::Snapshot(super::super::snapshot_download::tests::chunk(
            position, data, offset, size,
        ))
    }

    /// Chunks are asked for one at a time and taken in order, each after
    /// the first naming the snapshot the first named; a stale copy is
    /// ignored, a snapshot the leader no longer serves starts again from
    /// byte 0 and the latest, and a bad CRC fails the transfer.
    #[test]
    fn a_stepped_transfer_checks_each_chunk_and_completes_with_every_byte() {
        let log = LogId(1);
        let mut transfer = SteppedTransfer::new(LeaderEpoch(3));
        let first = transfer.next_request(1, NodeId(2), log, 4).unwrap();
        assert_eq!(
            (first.position, first.current_leader_epoch, first.snapshot),
            (0, LeaderEpoch(3), None)
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
        assert_eq!(
            (second.position, second.snapshot),
            (
                4,
                Some(SnapshotInfo {
                    offset: Offset(10),
                    size_bytes: 6
                })
            )
        );
        // The leader's store no longer reads it: start again from the
        // latest.
        let Response::Snapshot(mut unavailable) = chunk(4, b"", 10, 6) else {
            unreachable!()
        };
        unavailable.error = ErrorCode::SnapshotUnavailable;
        assert!(matches!(
            transfer.on_answer(3, log, Ok(Response::Snapshot(unavailable))),
            ChunkStep::More
        ));
        let again = transfer.next_request(4, NodeId(2), log, 4).unwrap();
        assert_eq!((again.position, again.snapshot), (0, None));
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

    /// A transfer starts again at most `RESTARTS_MAX` times, whether the
    /// snapshot named is unavailable or another one answers; the next
    /// time it fails.
    #[test]
    fn a_stepped_transfer_gives_up_after_restarts_max_restarts() {
        let log = LogId(1);
        let mut transfer = SteppedTransfer::new(LeaderEpoch(3));
        let mut token = 0;
        let mut ask = |transfer: &mut SteppedTransfer, answer: Response| {
            token += 1;
            transfer.next_request(token, NodeId(2), log, 4).unwrap();
            transfer.on_answer(token, log, Ok(answer))
        };
        for restart in 0..=RESTARTS_MAX {
            assert!(matches!(
                ask(&mut transfer, chunk(0, b"abcd", 10, 6)),
                ChunkStep::More
            ));
            let step = if restart % 2 == 0 {
                let Response::Snapshot(mut unavailable) = chunk(4, b"", 10, 6) else {
                    unreachable!()
                };
                unavailable.error = ErrorCode::SnapshotUnavailable;
                ask(&mut transfer, Response::Snapshot(unavailable))
            } else {
                ask(&mut transfer, chunk(4, b"ef", 12, 6))
            };
            match (restart < RESTARTS_MAX, step) {
                (true, ChunkStep::More) => {}
                (false, ChunkStep::Failed(why)) => assert_eq!(why, restarted_too_often()),
                (_, other) => panic!("restart {restart}: {other:?}"),
            }
        }
    }
}
