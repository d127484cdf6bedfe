//! Snapshots of an application's state (SPEC 3.9): how a replica whose log
//! no longer reaches back far enough is rebuilt.
//!
//! Once records are deleted below a log's start (retention, or
//! [`ReplicatedLog::delete_records_before`](crate::ReplicatedLog::delete_records_before)),
//! a follower whose log ends below the leader's log start cannot fetch
//! them: a new replica, or one that was down or partitioned past the cap on
//! what deletion keeps for it. A live follower whose application stalled
//! past the cap fetches fine, but its application can never read what it
//! still needs: it goes the same path (a log that still holds the
//! snapshot's offset keeps what follows it; only its start moves up). An application that keeps snapshots of its state gives its
//! node a [`SnapshotStore`] ([`NodeConfig::snapshots`](crate::NodeConfig::snapshots)).
//! Such a follower then asks the leader for the leader application's
//! latest snapshot, receives it in chunks of at most
//! `ReplicationConfig::fetch_bytes_max` bytes over the node's
//! [`Transport`](crate::Transport), each checked by a CRC-32, into a file of
//! the log's directory; when all of it has arrived it hands it to
//! [`SnapshotStore::install`], restarts its log empty at the snapshot's
//! offset, records that offset as its applied position, and fetches from
//! there. A transfer reads the snapshot it began to its end: every chunk
//! after the first names it, and the leader serves it even after its
//! application took a newer one (as Raft's `InstallSnapshot` streams one
//! snapshot), so a snapshot that takes longer to send than the time
//! between two snapshots is still installed. It starts again from its
//! beginning, on the leader's latest, when the leader no longer serves
//! that snapshot (its store cannot read it any more, or the leader's log
//! start passed its offset; at most 3 times, then it gives up and tries
//! again later), and when the leadership changes; nothing is
//! installed before the whole snapshot arrived and checked. The transfer
//! runs on a thread of its own, so the other logs fetched from the same
//! leader go on meanwhile.
//!
//! Without a store, under
//! [`ReplicationConfig::retain_until_applied`](crate::ReplicationConfig::retain_until_applied)
//! (the default) the application relies on every record reaching it, so
//! such a follower stops fetching that log and says so
//! ([`ReplicatedLog::needs_snapshot`](crate::ReplicatedLog::needs_snapshot),
//! and an error in the log), instead of starting silently past a gap. With
//! `retain_until_applied = false` (Kafka's behaviour) it restarts its log
//! at the leader's log start.
//!
//! Only a follower receives a snapshot. A replica elected while its
//! application was behind its log start (a live follower in the ISR whose
//! apply loop stalled past the cap) leads on, appends included, says so
//! ([`ReplicatedLog::needs_snapshot`](crate::ReplicatedLog::needs_snapshot)
//! and a warning), and hands the leadership to a caught-up in-sync replica
//! whose application reaches the log start as soon as there is one
//! (stopping its appends for the hand-over, briefly, as a controlled
//! shutdown does); as a follower it is then rebuilt from that replica's
//! snapshot. It is out of the ISR until rebuilt: with two replicas and
//! `min_insync_replicas = 2`, `acks=all` appends fail with
//! [`Error::NotEnoughReplicas`](crate::Error::NotEnoughReplicas) meanwhile.
//!
//! This is Raft's `InstallSnapshot` (openraft streams it in chunks too) on
//! top of an ISR log; Kafka has no equivalent.

use std::fmt;
use std::io;

use bytes::Bytes;

use crate::types::{LogId, Offset};

/// One snapshot of an application's state for one log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SnapshotInfo {
    /// Every record below this offset is in the snapshot, none at or
    /// above it: the offset the installing replica's log restarts at.
    pub offset: Offset,
    /// The snapshot's length in bytes.
    pub size_bytes: u64,
}

/// Where a node's application keeps its snapshots, one series per log.
///
/// Implementations are called from the node's threads: `latest` and
/// `read_chunk` on the thread that answers a follower's request (keep them
/// quick: a read of at most `len` bytes), `install` on a transfer thread of
/// the installing node. `latest` is also asked by whoever deletes (the
/// retention timer, a `delete_records_before` caller) before the log takes
/// any lock of its own: waiting there for a lock of the application's
/// cannot close a cycle with the log's locks (as long as the calling
/// thread does not hold it itself).
///
/// A transfer to a follower begins on the snapshot that is the latest
/// when it asks for its first chunk (SPEC 3.9's "latest snapshot" is the
/// latest at that moment) and reads every later chunk from that snapshot
/// by its [`SnapshotInfo`] (`read_chunk`), even after a newer one became
/// the latest. A store that keeps the previous snapshot readable until
/// the transfers on it end (the store is not told when: keeping it for a
/// while after its last `read_chunk` is one way) lets a slow transfer
/// finish, as long as the leader's log start stays at or below that
/// snapshot's offset: the leader stops serving a snapshot its log start
/// passed, and deletion is bounded by the latest snapshot, not by the
/// ones being read (by default deletion also waits for every replica's
/// applied position, which a replica being rebuilt holds back; with
/// `retain_until_applied` off or past the cap, retention up to a newer
/// snapshot restarts such a transfer). One that deletes it as soon as a
/// newer one is the latest makes that transfer start again on the newer
/// one. A transfer that would start again more than 3 times gives up and
/// tries again later.
///
/// A snapshot is named by its offset and length together: the bytes read
/// for a [`SnapshotInfo`] must never change, and must never be another
/// snapshot's. Write a new snapshot next to the old one, then make it the
/// latest; never replace a snapshot by another with the same offset and
/// length; and answer `read_chunk` with an error when the snapshot held
/// at that offset has another length (a snapshot taken again at the same
/// offset): the follower's chunks are each checked by a CRC, not against
/// the snapshot as a whole, so bytes of two snapshots would be installed
/// as one.
pub trait SnapshotStore: Send + Sync {
    /// The latest complete snapshot of `log`, if any.
    fn latest(&self, log: LogId) -> Option<SnapshotInfo>;

    /// Up to `len` bytes of `snapshot` from byte `position` (fewer only at
    /// its end). For a transfer's first chunk `snapshot` is the latest;
    /// for the later ones it is the snapshot that transfer began on,
    /// which may no longer be the latest, nor held at all: a follower's
    /// request names it (offset and length), and a store that no longer
    /// holds exactly that snapshot must answer an error. An error, or
    /// fewer bytes, is answered to the follower as "no snapshot": a
    /// transfer that began on it starts again on the latest, and one that
    /// asked for the latest asks again later.
    fn read_chunk(
        &self,
        log: LogId,
        snapshot: SnapshotInfo,
        position: u64,
        len: usize,
    ) -> io::Result<Bytes>;

    /// Replaces the application's state of `log` by `snapshot`, whose
    /// bytes `data` yields (all of them have arrived and been checked).
    /// Should be atomic: after an error, or a crash inside it, the old
    /// state must still be whole (the node asks for the snapshot again).
    /// After it returns, the log restarts at `snapshot.offset`, and the
    /// application's apply loop continues from there.
    fn install(
        &self,
        log: LogId,
        snapshot: SnapshotInfo,
        data: &mut dyn io::Read,
    ) -> io::Result<()>;
}

/// A node's snapshot store, as [`NodeConfig::snapshots`](crate::NodeConfig::snapshots)
/// holds it (a shared handle; `Debug` names no contents).
#[derive(Clone)]
pub struct Snapshots(pub std::sync::Arc<dyn SnapshotStore>);

impl fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Snapshots(..)")
    }
}
