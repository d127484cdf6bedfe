//! A follower's download of its leader's snapshot (SPEC 3.9), the threaded
//! driver: chunk after chunk over the transport into a file of the log's
//! directory, several requests in flight, then handed whole to the
//! application's [`SnapshotStore::install`]. Runs on a thread of its own
//! (started by the fetcher), so the other logs fetched from that leader go
//! on meanwhile.
//!
//! The rules are not its own (issue 28): each chunk is checked by
//! [`check_chunk`], every request after the first names the snapshot the
//! first chunk named, the restarts are bounded by [`RESTARTS_MAX`] and the
//! download is installed by [`install_downloaded`], all in
//! [`snapshot_download`](super::snapshot_download), which the simulator's
//! driver ([`stepped_snapshot`](super::stepped_snapshot)) calls too. This
//! module owns only how the bytes move: the asker threads, the file, its
//! length and the cancel flag checked before the install.
//!
//! Memory: a transfer holds at most `REQUESTS_IN_FLIGHT_MAX` chunks of
//! `fetch_bytes_max` bytes (the leader's chunk size) at once: one per
//! request out, held by the asker thread that checks and writes it until
//! its bytes are in the download. With the defaults, 3 × 1 MiB (a chunk
//! read into a connection's reused body buffer holds at most twice its
//! length). The leader holds, per transfer, one chunk per request it is
//! answering (at most `REQUESTS_IN_FLIGHT_MAX`).

use std::collections::VecDeque;
use std::io::{BufReader, Read};
use std::path::Path;
use std::time::Instant;

use super::replica::Replica;
use super::snapshot_download::SnapshotId;
use super::snapshot_download::{
    check_chunk, chunk_of, install_downloaded, restarted_too_often, ChunkCheck, RESTARTS_MAX,
};
use crate::config::ReplicationConfig;
use crate::snapshot::SnapshotStore;
use crate::storage::disk::{Disk, DiskFile, OpenMode};
use crate::storage::SNAPSHOT_DOWNLOAD_PREFIX;
use crate::sync::{AtomicBool, Mutex, Ordering};
use crate::transport::{Request, SnapshotRequest, SnapshotResponse, Transport};
use crate::types::{LeaderEpoch, NodeId, Offset};

/// Numbers the transfers of this process, for their file names.
static TRANSFERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Deletes a download when dropped, on every way out of a transfer.
struct DiscardOnDrop<'a>(&'a dyn Disk, &'a Path);

impl Drop for DiscardOnDrop<'_> {
    fn drop(&mut self) {
        if let Err(error) = self.0.remove_file(self.1) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %self.1.display(), %error,
                    "cannot delete a snapshot download; the next recovery of the log deletes it");
            }
        }
    }
}

/// Everything a transfer needs.
pub(crate) struct Transfer<'a> {
    pub(crate) replica: &'a Replica,
    pub(crate) store: &'a dyn SnapshotStore,
    pub(crate) transport: &'a dyn Transport,
    pub(crate) local: NodeId,
    pub(crate) leader: NodeId,
    pub(crate) epoch: LeaderEpoch,
    pub(crate) config: &'a ReplicationConfig,
    /// Set to end the transfer early (the fetcher stops, or stops
    /// fetching the log).
    pub(crate) cancel: &'a AtomicBool,
}

impl Transfer<'_> {
    /// Downloads, checks and installs the snapshot that is the leader's
    /// latest when the transfer begins (or, if the leader stops serving
    /// it, starts again); returns its offset, where the log now starts. An
    /// error says what went wrong, for the log: nothing was installed (or
    /// the application's install failed and kept its old state).
    pub(crate) fn run(&self) -> Result<Offset, String> {
        let number = TRANSFERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self
            .replica
            .log()
            .dir()
            .join(format!("{SNAPSHOT_DOWNLOAD_PREFIX}-{number}"));
        // Whatever happens, the download is not kept, even if the
        // application's install panics: a later transfer starts from the
        // beginning (the leader's latest may differ).
        let _discard = DiscardOnDrop(self.disk(), &path);
        self.download_and_install(&path)
    }

    /// The disk of the replica's log: the download is a file of the log's
    /// directory, reached as every stored file is (issue 28: through one
    /// small interface, which a simulated disk can stand in for).
    fn disk(&self) -> &dyn Disk {
        &**self.replica.log().disk()
    }

    fn download_and_install(&self, path: &Path) -> Result<Offset, String> {
        let started = Instant::now();
        for _attempt in 0..=RESTARTS_MAX {
            let Some(info) = self.download(path)? else {
                continue;
            };
            let file = self
                .disk()
                .open(path, OpenMode::Read)
                .map_err(|e| format!("reopen {}: {e}", path.display()))?;
            let length = file
                .length_bytes()
                .map_err(|e| format!("stat {}: {e}", path.display()))?;
            if length != info.size_bytes {
                return Err(format!(
                    "{} holds {length} bytes, the snapshot has {}",
                    path.display(),
                    info.size_bytes
                ));
            }
            // A transfer cancelled (the log's leader or epoch changed, the
            // fetcher stopped) installs nothing, even when complete.
            if self.cancel.load(Ordering::SeqCst) {
                return Err("cancelled before install".to_string());
            }
            let mut reader = BufReader::new(
                FileReader {
                    file: &*file,
                    position: 0,
                }
                .take(info.size_bytes),
            );
            install_downloaded(
                self.replica,
                self.store,
                self.leader,
                self.epoch,
                info,
                &mut reader,
            )?;
            tracing::info!(log = %self.replica.log_id(), leader = %self.leader, snapshot_offset = %info.offset, bytes = info.size_bytes, took = ?started.elapsed(), "snapshot transfer complete");
            return Ok(info.offset);
        }
        Err(restarted_too_often())
    }

    /// Downloads the whole snapshot into `path`. `Ok(None)`: the leader no
    /// longer serves the snapshot, start again from its latest.
    ///
    /// Each chunk is written at its own offset of the file by the thread
    /// that asked for it, once checked (see [`receive`](Self::receive)), so
    /// the network, the checks and the disk overlap without a hand-off per
    /// chunk. The file is fsynced once whole, before the install reads it
    /// back, only to learn of a failed writeback: a crash before the
    /// install ends discards it (recovery deletes a log directory's
    /// downloads), so only the application's install makes anything
    /// durable.
    fn download(&self, path: &Path) -> Result<Option<SnapshotId>, String> {
        let file = self
            .disk()
            .open(path, OpenMode::CreateTruncate)
            .map_err(|e| format!("create {}: {e}", path.display()))?;
        let download = Download {
            file,
            writing: Mutex::new(()),
            path,
        };
        let received = self.receive(&download)?;
        if received.is_some() {
            // The install reads the file back: a page whose writeback failed
            // may then be read from the disk, with bytes the chunk CRCs never
            // checked. The fsync, on the descriptor that wrote, reports such
            // a failure (EIO) first.
            download
                .file
                .sync_data()
                .map_err(|e| format!("fsync {}: {e}", path.display()))?;
        }
        Ok(received)
    }

    /// Asks for the snapshot chunk after chunk into `download`; takes the
    /// answers in order, and ends once every byte of the snapshot was
    /// checked and written. `Ok(None)`: the leader no longer serves the
    /// snapshot (see [`ChunkCheck::Unavailable`]).
    ///
    /// Once the first chunk told the chunk size the leader serves (every
    /// chunk but the last has it: `answer_snapshot`), up to
    /// [`REQUESTS_IN_FLIGHT_MAX`] requests are out at once, so that the
    /// leader reads and sends the next chunks while this one is checked
    /// and written. They are made by as many asker threads, started once
    /// per transfer (not once per chunk), each taking the next position to
    /// ask for from a queue, checking the answer's CRC-32 and writing its
    /// bytes at their position of the file (`write_all_at`), and handing
    /// back only what the answer said (one-slot channel per request). This
    /// thread takes those in the order they were asked for, so the
    /// transfer is complete only when every chunk before the last was
    /// checked and written; a chunk written past a failed one is discarded
    /// with the download.
    fn receive(&self, download: &Download<'_>) -> Result<Option<SnapshotId>, String> {
        // Set once the transfer ends: positions still queued are not asked
        // for (a leader change would otherwise cost their requests and hold
        // the join up to `request_timeout`).
        let stopped = AtomicBool::new(false);
        crate::simulation::forbid_in_simulation("spawning snapshot transfer askers");
        std::thread::scope(|scope| {
            // Positions to ask for, each with the snapshot the transfer
            // expects and names (`None` for the first chunk) and where its
            // answer goes. The askers end when this sender is dropped (on
            // the way out of this closure, before the scope joins them);
            // one still waiting for an answer then ends within
            // `request_timeout`.
            let (asks, asked) = crossbeam_channel::bounded::<Ask>(REQUESTS_IN_FLIGHT_MAX);
            for _ in 0..REQUESTS_IN_FLIGHT_MAX {
                let asked = asked.clone();
                let stopped = &stopped;
                scope.spawn(move || {
                    for ask in asked {
                        let answered = if stopped.load(Ordering::SeqCst) {
                            Err("the transfer stopped".to_string())
                        } else {
                            // A transport that panics fails this transfer
                            // (which the fetcher retries) instead of
                            // unwinding through the scope past the
                            // download's clean-up.
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                self.fetch_chunk(ask.position, ask.expected, download)
                            }))
                            .unwrap_or_else(|_| {
                                Err(format!(
                                    "the snapshot request for byte {} panicked",
                                    ask.position
                                ))
                            })
                        };
                        // The receiver is gone only when the transfer
                        // stopped early; nothing waits for this answer.
                        let _ = ask.answer.send(answered);
                    }
                });
            }
            drop(asked);
            let ask = |position: u64, expected: Option<SnapshotId>| {
                let (answer, answered) = crossbeam_channel::bounded(1);
                asks.send(Ask {
                    position,
                    expected,
                    answer,
                })
                .map(|()| (position, answered))
                .map_err(|_| "the snapshot askers stopped".to_string())
            };
            let outcome = (|| {
                let mut in_flight = VecDeque::with_capacity(REQUESTS_IN_FLIGHT_MAX);
                let mut info: Option<SnapshotId> = None;
                let mut position = 0u64;
                // The next position to ask for, once the chunk size is known.
                let mut asked_to = 0u64;
                let mut chunk_bytes: Option<u64> = None;
                loop {
                    if self.cancel.load(Ordering::SeqCst) {
                        return Err("cancelled".to_string());
                    }
                    match (chunk_bytes, info) {
                        (Some(size), Some(known)) => {
                            while in_flight.len() < REQUESTS_IN_FLIGHT_MAX
                                && asked_to < known.size_bytes
                            {
                                in_flight.push_back(ask(asked_to, Some(known))?);
                                asked_to += size;
                            }
                        }
                        _ if in_flight.is_empty() => in_flight.push_back(ask(position, info)?),
                        _ => {}
                    }
                    debug_assert!(in_flight.len() <= REQUESTS_IN_FLIGHT_MAX);
                    let Some((at, answered)) = in_flight.pop_front() else {
                        return Err(format!("nothing asked for at byte {position}"));
                    };
                    debug_assert_eq!(at, position, "chunks are asked for and taken in order");
                    // Every ask ends by its deadline (`request_timeout`), so
                    // this wait does too.
                    let chunk = answered
                        .recv()
                        .unwrap_or_else(|_| Err("a snapshot asker stopped".to_string()))?;
                    let (snapshot, len) = match chunk {
                        Chunk::Written { snapshot, len } => (snapshot, len),
                        Chunk::Unserved(other) => {
                            tracing::info!(log = %self.replica.log_id(), was = ?info, answered = ?other, "the leader no longer serves the snapshot being downloaded; starting again from its latest");
                            return Ok(None);
                        }
                    };
                    match info {
                        None => {
                            info = Some(snapshot);
                            download.reserve(snapshot.size_bytes)?;
                        }
                        // `check_chunk` let through only chunks of the
                        // snapshot expected.
                        Some(known) => debug_assert!(!known.is_other(snapshot)),
                    }
                    // The first chunk's, with the epoch it named.
                    let Some(now) = info else {
                        return Err(format!("no snapshot known at byte {position}"));
                    };
                    let remaining = now.size_bytes.saturating_sub(position);
                    debug_assert!(len <= remaining && (len > 0 || remaining == 0));
                    match chunk_bytes {
                        None => {
                            chunk_bytes = Some(len);
                            asked_to = position + len;
                        }
                        // Only the last chunk may be shorter: the requests
                        // already out asked for positions a chunk apart.
                        Some(size) if len != size && len != remaining => {
                            return Err(format!(
                                "chunk at byte {position} has {len} bytes, the leader's earlier chunks {size}"
                            ));
                        }
                        Some(_) => {}
                    }
                    position += len;
                    if position == now.size_bytes {
                        return Ok(Some(now));
                    }
                }
            })();
            stopped.store(true, Ordering::SeqCst);
            outcome
        })
    }

    /// Asks for the chunk at byte `position` of the snapshot `expected`
    /// (named in the request; `None` for the first chunk, which gets the
    /// leader's latest) and checks the answer ([`check_chunk`]: the log
    /// and position asked for, no error, its CRC-32, a length that fits
    /// its snapshot). A chunk of the snapshot `expected` (or of any, for
    /// the first chunk) that passes is written at `position` of the
    /// download; an answer that the snapshot is unavailable, or a chunk of
    /// another, writes nothing and says so ([`Chunk::Unserved`]), so that
    /// the transfer starts again. Every byte in the download was thus
    /// checked.
    fn fetch_chunk(
        &self,
        position: u64,
        expected: Option<SnapshotId>,
        download: &Download<'_>,
    ) -> Result<Chunk, String> {
        let chunk = self.ask(position, expected)?;
        let (now, len) = match check_chunk(self.replica.log_id(), position, expected, &chunk)? {
            ChunkCheck::Fits { snapshot, len } => (snapshot, len),
            ChunkCheck::OtherSnapshot(other) => return Ok(Chunk::Unserved(Some(other))),
            ChunkCheck::Unavailable => return Ok(Chunk::Unserved(None)),
        };
        let _writing = download.writing.lock();
        download
            .file
            .write_all_at(position, &chunk.data)
            .map_err(|e| format!("write {}: {e}", download.path.display()))?;
        Ok(Chunk::Written { snapshot: now, len })
    }

    /// One request for the chunk at byte `position` of the snapshot
    /// `expected` (`None`: of the leader's latest).
    fn ask(&self, position: u64, expected: Option<SnapshotId>) -> Result<SnapshotResponse, String> {
        let request = Request::Snapshot(SnapshotRequest {
            replica: self.local,
            log: self.replica.log_id(),
            current_leader_epoch: self.epoch,
            position,
            bytes_max: self.config.fetch_bytes_max,
            snapshot: expected.map(SnapshotId::info),
        });
        let deadline = Instant::now() + self.config.request_timeout;
        chunk_of(self.transport.call(self.leader, request, deadline))
    }
}

/// The file a transfer downloads into, and its path (for errors).
struct Download<'a> {
    file: Box<dyn DiskFile>,
    /// Held by the asker writing a chunk. Writes to one file take turns in
    /// the kernel anyway (its inode lock), where the waiting askers spun:
    /// about 5% of a transfer's CPU time on 2 cores (issue 25). Here they
    /// sleep instead.
    writing: Mutex<()>,
    path: &'a Path,
}

impl Download<'_> {
    /// Reserves the disk blocks of a `bytes`-long download at once
    /// (`fallocate`, the file's length unchanged): the chunks' page-cache
    /// writes then skip ext4's per-block delayed-allocation bookkeeping
    /// (reservation, quota, extent status), which cost more than copying
    /// the bytes (about 40% of a 256 MiB download's write time, issue 25),
    /// and a disk without room fails the transfer before any chunk is
    /// asked for past the first. A file system without `fallocate` is
    /// written as the chunks arrive ([`DiskFile::reserve`]).
    fn reserve(&self, bytes: u64) -> Result<(), String> {
        self.file.reserve(bytes).map_err(|e| {
            format!(
                "no room for the snapshot's {bytes} bytes in {}: {e}",
                self.path.display()
            )
        })
    }
}

/// Reads a file from its start, for the application's install
/// ([`SnapshotStore::install`] takes a reader).
struct FileReader<'a> {
    file: &'a dyn DiskFile,
    position: u64,
}

impl Read for FileReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.file.read_at(self.position, buf)?;
        self.position += read as u64;
        Ok(read)
    }
}

/// One chunk request for an asker thread.
struct Ask {
    position: u64,
    /// The snapshot the transfer is downloading; `None` before its first
    /// chunk told which.
    expected: Option<SnapshotId>,
    answer: crossbeam_channel::Sender<Result<Chunk, String>>,
}

/// What an asker hands back of one chunk it asked for and checked.
enum Chunk {
    /// Its bytes are in the download.
    Written {
        /// The snapshot the leader answered from.
        snapshot: SnapshotId,
        /// The chunk's length in bytes.
        len: u64,
    },
    /// Nothing was written: the leader no longer serves the snapshot the
    /// transfer expected; it starts again. Holds the snapshot the leader
    /// answered with instead ([`ChunkCheck::OtherSnapshot`]), `None` when
    /// it answered that the snapshot is unavailable
    /// ([`ChunkCheck::Unavailable`]).
    Unserved(Option<SnapshotId>),
}

/// How many chunk requests a transfer has out at once. With 2 the
/// transfer waited on the round trip (request, the leader's read, CRC and
/// write, the answer's hand-offs) more often than on any thread's work; 3
/// measured about 14% faster on 2 cores (issue 25), 4 no faster than 3.
const REQUESTS_IN_FLIGHT_MAX: usize = 3;
