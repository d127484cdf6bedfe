//! The rules of a follower's snapshot download (SPEC 3.9), written once for
//! both of its drivers (issue 28): [`snapshot_transfer`](super::snapshot_transfer)
//! (threads, several chunks in flight, a file of the log's directory) and
//! [`stepped_snapshot`](super::stepped_snapshot) (one request at a time,
//! the chunks in memory, stepped by a simulator).
//!
//! It owns what a chunk's answer must hold to be kept ([`chunk_of`],
//! [`check_chunk`]), how often a transfer starts again when the leader no
//! longer serves the snapshot it downloads ([`RESTARTS_MAX`]), and the
//! install of a whole download ([`install_downloaded`]).
//!
//! A transfer downloads one snapshot: its first request gets the leader's
//! latest, and every later one names that snapshot
//! ([`SnapshotRequest::snapshot`](crate::transport::SnapshotRequest::snapshot)),
//! which the leader serves even after its application took a newer one, as
//! Raft's `InstallSnapshot` streams one snapshot to its end. It starts again
//! from the latest only when the leader answers that the snapshot named is
//! unavailable (its store could not read it, or the leader's log start
//! passed its offset).
//!
//! It does not own how the bytes move (requests, threads, where the chunks
//! are kept) nor a driver's own checks before the install (the threaded
//! one's file length and cancel flag): those are the drivers'. [`chunk_of`] and [`check_chunk`] do no
//! I/O; [`install_downloaded`] reaches only the replica and the
//! application's store.

use std::io::Read;

use super::replica::Replica;
use crate::snapshot::{SnapshotInfo, SnapshotStore};
use crate::transport::{ErrorCode, Response, SnapshotResponse, TransportError};
use crate::types::{LeaderEpoch, LogId, NodeId, Offset};

/// How often a transfer starts again because the leader no longer serves
/// the snapshot it downloads before it gives up (the fetcher tries again
/// later).
pub(super) const RESTARTS_MAX: u32 = 3;

/// Why a transfer gave up after the leader stopped serving the snapshot it
/// downloaded once more than [`RESTARTS_MAX`] allows.
pub(super) fn restarted_too_often() -> String {
    format!(
        "the leader stopped serving the snapshot being downloaded {} times during the transfer",
        RESTARTS_MAX + 1
    )
}

/// The chunk in the answer to a snapshot request, or why there is none:
/// the leader answered with an error, with something else, or the call
/// failed.
pub(super) fn chunk_of(
    answer: Result<Response, TransportError>,
) -> Result<SnapshotResponse, String> {
    match answer {
        Ok(Response::Snapshot(chunk)) => Ok(chunk),
        Ok(Response::Error(code)) => Err(format!("the leader answered {code}")),
        Ok(other) => Err(format!("unexpected answer {other:?}")),
        Err(error) => Err(format!("snapshot request failed: {error}")),
    }
}

/// What a chunk that passed [`check_chunk`] is.
#[derive(Clone, Copy, Debug)]
pub(super) enum ChunkCheck {
    /// A chunk of the snapshot expected (or the first chunk), checked:
    /// its `len` bytes may be kept at the position asked for.
    Fits {
        /// The snapshot the chunk names (for a later chunk, its epoch may
        /// differ from the first chunk's: [`SnapshotId::is_other`]).
        snapshot: SnapshotId,
        /// The chunk's length in bytes.
        len: u64,
    },
    /// A chunk of another snapshot than the one expected and named in the
    /// request: a leader serves only the snapshot named, so none of this
    /// version sends it; the transfer starts again. Its bytes were not
    /// checked and must not be kept.
    OtherSnapshot(SnapshotId),
    /// The leader answered that the snapshot expected and named in the
    /// request is unavailable: its store could not read it (deleted once
    /// a newer one was taken, or a read failed), or the leader's log start
    /// passed its offset. The transfer starts again from the leader's
    /// latest.
    Unavailable,
}

/// Checks `chunk`, the answer to a request for byte `position` of `log`'s
/// snapshot `expected` (the one the request named; `None` for the first
/// chunk, which names the snapshot), in this order: the log and position
/// asked for, no error code (but `SnapshotUnavailable` for a snapshot
/// named: [`ChunkCheck::Unavailable`]), the snapshot `expected`, its
/// CRC-32, a length that fits its snapshot (at most what remains, and not
/// empty while any remains: only the last chunk is short). An error says
/// why the transfer fails.
pub(super) fn check_chunk(
    log: LogId,
    position: u64,
    expected: Option<SnapshotId>,
    chunk: &SnapshotResponse,
) -> Result<ChunkCheck, String> {
    if chunk.log != log || chunk.position != position {
        return Err(format!(
            "the leader answered for log {} at byte {}, asked for log {log} at byte {position}",
            chunk.log, chunk.position
        ));
    }
    if chunk.error == ErrorCode::SnapshotUnavailable && expected.is_some() {
        return Ok(ChunkCheck::Unavailable);
    }
    if chunk.error != ErrorCode::None {
        return Err(format!("the leader answered {}", chunk.error));
    }
    let snapshot = SnapshotId::of(chunk);
    if expected.is_some_and(|known| known.is_other(snapshot)) {
        return Ok(ChunkCheck::OtherSnapshot(snapshot));
    }
    let crc = crc32fast::hash(&chunk.data);
    if crc != chunk.crc32 {
        return Err(format!(
            "chunk at byte {position} of the snapshot at {} is corrupt: CRC-32 {crc:#010x}, the leader sent {:#010x}",
            snapshot.offset, chunk.crc32
        ));
    }
    let len = chunk.data.len() as u64;
    let remaining = snapshot.size_bytes.saturating_sub(position);
    if len > remaining || (len == 0 && remaining > 0) {
        return Err(format!(
            "chunk at byte {position} has {len} bytes, {remaining} remain"
        ));
    }
    Ok(ChunkCheck::Fits { snapshot, len })
}

/// Installs the downloaded snapshot `info`, whose bytes `reader` yields,
/// for `replica`, downloaded from `leader` in `epoch`; returns its offset,
/// where the log now starts. Called once every byte was checked and the
/// driver's own checks passed. An error says why nothing was installed
/// (or why the application's install failed and kept its old state, or
/// the log could not restart past an install that succeeded).
pub(super) fn install_downloaded(
    replica: &Replica,
    store: &dyn SnapshotStore,
    leader: NodeId,
    epoch: LeaderEpoch,
    info: SnapshotId,
    reader: &mut dyn Read,
) -> Result<Offset, String> {
    // Its application reached the leader's log start since the transfer
    // began (`Replica::set_applied` cleared the flag): a snapshot would
    // replace its newer state with an older one.
    if !replica.needs_snapshot() {
        return Err("not installed: the application no longer needs a snapshot".to_string());
    }
    // SPEC 2.6, 3.9: a snapshot below this replica's log start, while its
    // log holds records, is refused before the application's state is
    // touched (`snapshot_installed` checks again: the log start can move
    // meanwhile).
    replica
        .check_snapshot_offset(leader, info.offset)
        .map_err(|e| {
            format!(
                "refused the snapshot at {} for {} before the application's install: {e}",
                info.offset,
                replica.log_id()
            )
        })?;
    store
        .install(replica.log_id(), info.info(), reader)
        .map_err(|e| {
            format!(
                "the application's install of the snapshot at {} failed: {e}",
                info.offset
            )
        })?;
    replica
        .snapshot_installed(leader, epoch, info)
        .map_err(|e| {
            format!(
                "installed the snapshot at {}, but cannot restart the log there: {e}",
                info.offset
            )
        })?;
    Ok(info.offset)
}

/// A leader's snapshot as a follower downloads it: what the chunks say of
/// it, the application's [`SnapshotInfo`] and an epoch below it. A chunk
/// naming another offset or size is of another snapshot (the transfer
/// starts again, [`SnapshotId::is_other`]); the epoch the leader names may
/// change between chunks of one snapshot (a deletion up to its offset
/// meanwhile), and the first chunk's is kept.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SnapshotId {
    /// As [`SnapshotInfo::offset`].
    pub(crate) offset: Offset,
    /// As [`SnapshotInfo::size_bytes`].
    pub(crate) size_bytes: u64,
    /// An epoch whose leader's log held the records below `offset`, as
    /// the leader named it (`SnapshotResponse::snapshot_epoch`).
    pub(crate) epoch: Option<LeaderEpoch>,
}

impl SnapshotId {
    /// The snapshot a chunk is of.
    pub(crate) fn of(chunk: &SnapshotResponse) -> SnapshotId {
        SnapshotId {
            offset: chunk.snapshot_offset,
            size_bytes: chunk.snapshot_bytes,
            epoch: chunk.snapshot_epoch,
        }
    }

    /// Whether `other` is another snapshot than this one: its offset or
    /// size differ (not only the epoch named with it).
    pub(crate) fn is_other(self, other: SnapshotId) -> bool {
        self.info() != other.info()
    }

    /// What the application's store is told of it.
    pub(crate) fn info(self) -> SnapshotInfo {
        SnapshotInfo {
            offset: self.offset,
            size_bytes: self.size_bytes,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use bytes::Bytes;

    use super::*;

    /// A chunk of log 1's snapshot at `offset` of `size` bytes, named with
    /// epoch 2, at byte `position`, holding `data` with its CRC-32.
    pub(in crate::replication) fn chunk(
        position: u64,
        data: &[u8],
        offset: u64,
        size: u64,
    ) -> SnapshotResponse {
        SnapshotResponse {
            log: LogId(1),
            error: ErrorCode::None,
            snapshot_offset: Offset(offset),
            snapshot_epoch: Some(LeaderEpoch(2)),
            snapshot_bytes: size,
            position,
            crc32: crc32fast::hash(data),
            data: Bytes::copy_from_slice(data),
        }
    }

    /// The snapshot at `offset` of `size` bytes, named with epoch 2.
    fn snapshot(offset: u64, size: u64) -> SnapshotId {
        SnapshotId {
            offset: Offset(offset),
            size_bytes: size,
            epoch: Some(LeaderEpoch(2)),
        }
    }

    /// The error `check_chunk` gives, or a panic naming what it gave.
    fn rejection(position: u64, expected: Option<SnapshotId>, chunk: &SnapshotResponse) -> String {
        match check_chunk(LogId(1), position, expected, chunk) {
            Err(why) => why,
            Ok(check) => panic!("passed: {check:?}"),
        }
    }

    /// The snapshot and length of a chunk that fits, or a panic naming
    /// what `check_chunk` gave.
    fn fits(
        position: u64,
        expected: Option<SnapshotId>,
        chunk: &SnapshotResponse,
    ) -> (SnapshotId, u64) {
        match check_chunk(LogId(1), position, expected, chunk) {
            Ok(ChunkCheck::Fits { snapshot, len }) => (snapshot, len),
            other => panic!("does not fit: {other:?}"),
        }
    }

    /// Each rejection, with its message: another log or position than
    /// asked for, an error code, a bad CRC-32, a chunk longer than what
    /// remains, an empty one while bytes remain.
    #[test]
    fn check_chunk_rejects_each_bad_answer_with_its_reason() {
        let expected = Some(snapshot(10, 6));
        let wrong_log = SnapshotResponse {
            log: LogId(2),
            ..chunk(4, b"ef", 10, 6)
        };
        assert_eq!(
            rejection(4, expected, &wrong_log),
            "the leader answered for log log-2 at byte 4, asked for log log-1 at byte 4"
        );
        assert_eq!(
            rejection(0, expected, &chunk(4, b"ef", 10, 6)),
            "the leader answered for log log-1 at byte 4, asked for log log-1 at byte 0"
        );
        let refused = SnapshotResponse {
            error: ErrorCode::NotLeader,
            ..chunk(4, b"ef", 10, 6)
        };
        assert_eq!(
            rejection(4, expected, &refused),
            format!("the leader answered {}", ErrorCode::NotLeader)
        );
        let mut flipped = chunk(4, b"ef", 10, 6);
        flipped.crc32 ^= 1;
        assert_eq!(
            rejection(4, expected, &flipped),
            format!(
                "chunk at byte 4 of the snapshot at 10 is corrupt: CRC-32 {:#010x}, the leader sent {:#010x}",
                crc32fast::hash(b"ef"),
                flipped.crc32
            )
        );
        assert_eq!(
            rejection(4, expected, &chunk(4, b"efg", 10, 6)),
            "chunk at byte 4 has 3 bytes, 2 remain"
        );
        assert_eq!(
            rejection(4, expected, &chunk(4, b"", 10, 6)),
            "chunk at byte 4 has 0 bytes, 2 remain"
        );
        // The first chunk is checked the same way.
        assert_eq!(
            rejection(0, None, &chunk(0, b"abcdefg", 10, 6)),
            "chunk at byte 0 has 7 bytes, 6 remain"
        );
    }

    /// A chunk of another snapshot is reported before its CRC-32 or its
    /// length is looked at (its bytes are not kept: the transfer starts
    /// again); one that names the same snapshot with another epoch (a
    /// deletion up to its offset meanwhile) is not another.
    #[test]
    fn check_chunk_tells_another_snapshot_apart_from_a_renamed_one() {
        let mut newer = chunk(4, b"efghijk", 12, 6);
        newer.crc32 ^= 1;
        match check_chunk(LogId(1), 4, Some(snapshot(10, 6)), &newer) {
            Ok(ChunkCheck::OtherSnapshot(now)) => {
                assert_eq!((now.offset, now.size_bytes), (Offset(12), 6));
            }
            other => panic!("{other:?}"),
        }
        let renamed = SnapshotResponse {
            snapshot_epoch: Some(LeaderEpoch(5)),
            ..chunk(4, b"ef", 10, 6)
        };
        let (now, len) = fits(4, Some(snapshot(10, 6)), &renamed);
        assert_eq!(
            (now.offset, now.epoch, len),
            (Offset(10), Some(LeaderEpoch(5)), 2)
        );
    }

    /// The first chunk names the snapshot; the last may be shorter than
    /// the others, exactly what remains; an empty snapshot's one chunk is
    /// empty.
    #[test]
    fn check_chunk_takes_the_first_chunk_and_a_short_last_one() {
        let (first, len) = fits(0, None, &chunk(0, b"abcd", 10, 6));
        assert_eq!(
            (first.offset, first.size_bytes, first.epoch, len),
            (Offset(10), 6, Some(LeaderEpoch(2)), 4)
        );
        let (last, len) = fits(4, Some(first), &chunk(4, b"ef", 10, 6));
        assert_eq!((last.offset, len), (Offset(10), 2));
        let (empty, len) = fits(0, None, &chunk(0, b"", 10, 0));
        assert_eq!((empty.size_bytes, len), (0, 0));
    }

    /// An answer without a chunk says why, as both drivers report it; a
    /// transfer gives up after `RESTARTS_MAX + 1` restarts.
    #[test]
    fn an_answer_without_a_chunk_says_why() {
        assert_eq!(
            chunk_of(Ok(Response::Error(ErrorCode::NotLeader))),
            Err(format!("the leader answered {}", ErrorCode::NotLeader))
        );
        assert!(chunk_of(Ok(Response::Snapshot(chunk(0, b"ab", 10, 2)))).is_ok());
        assert_eq!(
            restarted_too_often(),
            "the leader stopped serving the snapshot being downloaded 4 times during the transfer"
        );
    }

    /// A named snapshot the leader says is unavailable (its store deleted
    /// it, or the log start passed it) starts the transfer again; the
    /// first request's, which named none, fails it, as does any other
    /// error.
    #[test]
    fn check_chunk_starts_again_when_the_snapshot_named_is_unavailable() {
        let unavailable = SnapshotResponse {
            error: ErrorCode::SnapshotUnavailable,
            ..chunk(4, b"", 0, 0)
        };
        assert!(matches!(
            check_chunk(LogId(1), 4, Some(snapshot(10, 6)), &unavailable),
            Ok(ChunkCheck::Unavailable)
        ));
        let first = SnapshotResponse {
            position: 0,
            ..unavailable.clone()
        };
        assert_eq!(
            rejection(0, None, &first),
            format!("the leader answered {}", ErrorCode::SnapshotUnavailable)
        );
        let fenced = SnapshotResponse {
            error: ErrorCode::FencedLeaderEpoch,
            ..unavailable
        };
        assert_eq!(
            rejection(4, Some(snapshot(10, 6)), &fenced),
            format!("the leader answered {}", ErrorCode::FencedLeaderEpoch)
        );
    }
}
