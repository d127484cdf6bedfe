//! A follower's download of its leader's snapshot (SPEC 3.9): chunk after
//! chunk over the transport into a file of the log's directory, each chunk
//! checked by its CRC-32 and its position, then handed whole to the
//! application's [`SnapshotStore::install`]. Runs on a thread of its own
//! (started by the fetcher), so the other logs fetched from that leader go
//! on meanwhile.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Instant;

use super::replica::Replica;
use crate::config::ReplicationConfig;
use crate::snapshot::{SnapshotInfo, SnapshotStore};
use crate::sync::{AtomicBool, Ordering};
use crate::transport::{ErrorCode, Request, Response, SnapshotRequest, Transport};
use crate::types::{LeaderEpoch, NodeId, Offset};

/// The prefix of the file a download is written to, in the log's
/// directory; each transfer has a file of its own (a cancelled transfer
/// still finishing must not read or delete a later one's).
pub(crate) const SNAPSHOT_DOWNLOAD_FILE: &str = "snapshot-download";

/// Numbers the transfers of this process, for their file names.
static TRANSFERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How often a transfer starts again because the leader's latest snapshot
/// changed under it before it gives up (the fetcher tries again later).
const RESTARTS_MAX: u32 = 3;

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
    /// Downloads, checks and installs the leader's latest snapshot; returns
    /// its offset, where the log now starts. An error says what went wrong,
    /// for the log: nothing was installed (or the application's install
    /// failed and kept its old state).
    pub(crate) fn run(&self) -> Result<Offset, String> {
        let number = TRANSFERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self
            .replica
            .log()
            .dir()
            .join(format!("{SNAPSHOT_DOWNLOAD_FILE}-{number}"));
        let outcome = self.download_and_install(&path);
        // Whatever happened, the download is not kept: a later transfer
        // starts from the beginning (the leader's latest may differ).
        let _ = std::fs::remove_file(&path);
        outcome
    }

    fn download_and_install(&self, path: &PathBuf) -> Result<Offset, String> {
        let started = Instant::now();
        for _attempt in 0..=RESTARTS_MAX {
            let Some(info) = self.download(path)? else {
                continue;
            };
            let mut file =
                File::open(path).map_err(|e| format!("reopen {}: {e}", path.display()))?;
            let length = file
                .seek(SeekFrom::End(0))
                .map_err(|e| format!("seek {}: {e}", path.display()))?;
            if length != info.size_bytes {
                return Err(format!(
                    "{} holds {length} bytes, the snapshot has {}",
                    path.display(),
                    info.size_bytes
                ));
            }
            file.seek(SeekFrom::Start(0))
                .map_err(|e| format!("seek {}: {e}", path.display()))?;
            // A transfer cancelled (the log's leader or epoch changed, the
            // fetcher stopped) installs nothing, even when complete.
            if self.cancel.load(Ordering::SeqCst) {
                return Err("cancelled before install".to_string());
            }
            // SPEC 2.6, 3.9: a snapshot below this replica's log start,
            // while its log holds records, is refused before the
            // application's state is touched (`snapshot_installed` checks
            // again: the log start can move meanwhile).
            self.replica
                .check_snapshot_offset(self.leader, info.offset)
                .map_err(|e| {
                    format!(
                        "refused the snapshot at {} for {} before the application's install: {e}",
                        info.offset,
                        self.replica.log_id()
                    )
                })?;
            let mut reader = BufReader::new(file.take(info.size_bytes));
            self.store
                .install(self.replica.log_id(), info, &mut reader)
                .map_err(|e| {
                    format!(
                        "the application's install of the snapshot at {} failed: {e}",
                        info.offset
                    )
                })?;
            self.replica
                .snapshot_installed(self.leader, self.epoch, info.offset)
                .map_err(|e| {
                    format!(
                        "installed the snapshot at {}, but cannot restart the log there: {e}",
                        info.offset
                    )
                })?;
            tracing::info!(log = %self.replica.log_id(), leader = %self.leader, snapshot_offset = %info.offset, bytes = info.size_bytes, took = ?started.elapsed(), "snapshot transfer complete");
            return Ok(info.offset);
        }
        Err(format!(
            "the leader's latest snapshot changed {} times during the transfer",
            RESTARTS_MAX + 1
        ))
    }

    /// Downloads the whole snapshot into `path`. `Ok(None)`: the leader's
    /// latest snapshot changed under the transfer, start again.
    fn download(&self, path: &PathBuf) -> Result<Option<SnapshotInfo>, String> {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| format!("create {}: {e}", path.display()))?;
        let mut info: Option<SnapshotInfo> = None;
        let mut position = 0u64;
        loop {
            if self.cancel.load(Ordering::SeqCst) {
                return Err("cancelled".to_string());
            }
            let request = Request::Snapshot(SnapshotRequest {
                replica: self.local,
                log: self.replica.log_id(),
                current_leader_epoch: self.epoch,
                position,
                bytes_max: self.config.fetch_bytes_max,
            });
            let deadline = Instant::now() + self.config.request_timeout;
            let chunk = match self.transport.call(self.leader, request, deadline) {
                Ok(Response::Snapshot(chunk)) => chunk,
                Ok(Response::Error(code)) => return Err(format!("the leader answered {code}")),
                Ok(other) => return Err(format!("unexpected answer {other:?}")),
                Err(error) => return Err(format!("snapshot request failed: {error}")),
            };
            if chunk.log != self.replica.log_id() || chunk.position != position {
                return Err(format!(
                    "the leader answered for log {} at byte {}, asked for log {} at byte {position}",
                    chunk.log,
                    chunk.position,
                    self.replica.log_id()
                ));
            }
            if chunk.error != ErrorCode::None {
                return Err(format!("the leader answered {}", chunk.error));
            }
            let now = SnapshotInfo {
                offset: chunk.snapshot_offset,
                size_bytes: chunk.snapshot_bytes,
            };
            match info {
                None => info = Some(now),
                Some(known) if known != now => {
                    tracing::info!(log = %self.replica.log_id(), was = ?known, now = ?now, "the leader's latest snapshot changed during the transfer; starting again");
                    return Ok(None);
                }
                Some(_) => {}
            }
            let crc = crc32fast::hash(&chunk.data);
            if crc != chunk.crc32 {
                return Err(format!(
                    "chunk at byte {position} of the snapshot at {} is corrupt: CRC-32 {crc:#010x}, the leader sent {:#010x}",
                    now.offset, chunk.crc32
                ));
            }
            let remaining = now.size_bytes.saturating_sub(position);
            if chunk.data.len() as u64 > remaining || (chunk.data.is_empty() && remaining > 0) {
                return Err(format!(
                    "chunk at byte {position} has {} bytes, {remaining} remain",
                    chunk.data.len()
                ));
            }
            file.write_all(&chunk.data)
                .map_err(|e| format!("write {}: {e}", path.display()))?;
            position += chunk.data.len() as u64;
            if position == now.size_bytes {
                file.sync_all()
                    .map_err(|e| format!("sync {}: {e}", path.display()))?;
                return Ok(Some(now));
            }
        }
    }
}
