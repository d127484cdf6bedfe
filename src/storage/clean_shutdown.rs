//! The clean-shutdown marker of a node's data directory (SPEC 3.5; Kafka's
//! `.kafka_cleanshutdown`): the last thing a clean shutdown writes, after
//! every log is flushed and closed, and the first thing a start removes. A
//! node that starts and finds its directory non-empty but the marker
//! missing cannot prove it stopped cleanly: it may have lost bytes it never
//! fsynced (a power loss), so it must not be trusted as a holder of every
//! committed record.
//!
//! This module owns the marker file only; what a node does about an
//! unclean shutdown (telling the coordinator) lives in the node.

use std::io::ErrorKind;
use std::path::Path;

use super::disk::Disk;
use crate::error::{Error, Result};
use crate::storage::{is_identity_or_lock_file, sync_dir, write_atomically};

/// The marker's file name inside the data directory.
pub(crate) const CLEAN_SHUTDOWN_MARKER: &str = ".isrlog_clean_shutdown";

/// How a node's previous run ended, as its data directory tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreviousShutdown {
    /// The directory was empty and the coordinator places no replica that
    /// ever held data on this node: a new node, with nothing to lose.
    Fresh,
    /// The marker was there: the last run flushed and closed every log.
    Clean,
    /// Data but no marker: the last run crashed (or its shutdown failed),
    /// and bytes it had not fsynced may be gone. Kafka treats every crash
    /// this way, whatever the flush policy, and so does isrlog: a process
    /// cannot tell a process crash from a power loss.
    Unclean,
    /// The coordinator places replicas on this node that its directory
    /// does not hold: the directory is empty, missing or another one
    /// (another directory id, SPEC 2.8), or a replica's log is gone from
    /// it. Reported to the coordinator exactly like [`Unclean`], with an
    /// empty log end for each lost replica, and never taken for
    /// [`Fresh`].
    ///
    /// [`Unclean`]: PreviousShutdown::Unclean
    /// [`Fresh`]: PreviousShutdown::Fresh
    LostData,
}

impl PreviousShutdown {
    /// Whether the node reports this start to the coordinator as an
    /// unclean shutdown before it registers ([`Unclean`] and [`LostData`]):
    /// its replicas then count as ones that may have lost data (SPEC 3.5).
    ///
    /// [`Unclean`]: PreviousShutdown::Unclean
    /// [`LostData`]: PreviousShutdown::LostData
    pub(crate) fn is_reported_unclean(self) -> bool {
        matches!(self, PreviousShutdown::Unclean | PreviousShutdown::LostData)
    }
}

/// Reads and removes the marker of `data_dir` (an existing directory),
/// making the removal durable before returning, so that a crash from here
/// on is seen as unclean by the next start. A start that finds no marker
/// makes its absence durable too: a start before it may have removed it
/// and failed to sync the directory, and a power loss would bring it back.
pub(crate) fn take_clean_shutdown_marker(
    disk: &dyn Disk,
    data_dir: &Path,
) -> Result<PreviousShutdown> {
    let marker = data_dir.join(CLEAN_SHUTDOWN_MARKER);
    match disk.remove_file(&marker) {
        Ok(()) => {
            sync_dir(disk, data_dir)?;
            return Ok(PreviousShutdown::Clean);
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(&marker, "remove the clean-shutdown marker", e)),
    }
    // The identity and lock files (SPEC 2.8) hold no data: a directory
    // with nothing else is empty.
    let names = disk
        .list_dir(data_dir)
        .map_err(|e| Error::io(data_dir, "list the data directory", e))?;
    for name in names {
        if !is_identity_or_lock_file(&name) {
            // The marker's removal may not be durable: the start that
            // removed it may have failed at the directory's sync, and this
            // one, finding it gone, went on as unclean; a power loss then
            // brought it back and the next start was taken for clean, so
            // the node led without the records the power loss had taken,
            // and its next leader's appends were acknowledged at their
            // offsets (simulator seed 61015624, G1: r2371 and r2399 both
            // acknowledged at 567).
            sync_dir(disk, data_dir)?;
            return Ok(PreviousShutdown::Unclean);
        }
    }
    Ok(PreviousShutdown::Fresh)
}

/// Writes the marker into `data_dir` durably (temporary file, fsync,
/// rename, fsync of the directory). Call it only after every log of the
/// node is flushed and closed.
pub(crate) fn write_clean_shutdown_marker(disk: &dyn Disk, data_dir: &Path) -> Result<()> {
    write_atomically(
        disk,
        &data_dir.join(CLEAN_SHUTDOWN_MARKER),
        b"isrlog clean shutdown v1\n",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::disk::{DiskOperation, EioPlan, SimDisk, StdDisk};
    use std::fs;

    /// A start whose sync of the marker's removal failed leaves the
    /// removal to the next start: after a power loss, the start after that
    /// one is unclean, never clean (simulator seed 61015624).
    #[test]
    fn a_removal_whose_sync_failed_is_made_durable_by_the_next_start() {
        let disk = SimDisk::new(7);
        let dir = Path::new("/data");
        disk.create_dir_all(&dir.join("log-1")).unwrap();
        sync_dir(&disk, Path::new("/")).unwrap();
        sync_dir(&disk, dir).unwrap();
        write_clean_shutdown_marker(&disk, dir).unwrap();
        disk.fail_with_eio(EioPlan::Nth(1), &[DiskOperation::SyncDirectory]);
        assert!(take_clean_shutdown_marker(&disk, dir).is_err());
        disk.fail_with_eio(EioPlan::Never, &[]);
        assert_eq!(
            take_clean_shutdown_marker(&disk, dir).unwrap(),
            PreviousShutdown::Unclean
        );
        disk.lose_power();
        assert_eq!(
            take_clean_shutdown_marker(&disk, dir).unwrap(),
            PreviousShutdown::Unclean,
            "the marker came back"
        );
    }

    #[test]
    fn marker_lifecycle_table() {
        // (name, set up the directory, expected verdict)
        type Case = (&'static str, fn(&Path), PreviousShutdown);
        let cases: [Case; 4] = [
            (
                "empty directory: a new node",
                |_| {},
                PreviousShutdown::Fresh,
            ),
            (
                "marker written at the last shutdown",
                |dir| {
                    fs::create_dir(dir.join("log-1")).unwrap();
                    write_clean_shutdown_marker(&StdDisk, dir).unwrap();
                },
                PreviousShutdown::Clean,
            ),
            (
                "data without the marker: a crash",
                |dir| fs::create_dir(dir.join("log-1")).unwrap(),
                PreviousShutdown::Unclean,
            ),
            (
                "a leftover temporary file is data too",
                |dir| fs::write(dir.join("something.tmp"), b"x").unwrap(),
                PreviousShutdown::Unclean,
            ),
        ];
        for (name, set_up, expected) in cases {
            let dir = tempfile::tempdir().unwrap();
            set_up(dir.path());
            assert_eq!(
                take_clean_shutdown_marker(&StdDisk, dir.path()).unwrap(),
                expected,
                "{name}"
            );
            assert!(
                !dir.path().join(CLEAN_SHUTDOWN_MARKER).exists(),
                "{name}: the marker is gone after a start"
            );
            if expected == PreviousShutdown::Clean {
                // Taken once: a crash after this start is unclean.
                assert_eq!(
                    take_clean_shutdown_marker(&StdDisk, dir.path()).unwrap(),
                    PreviousShutdown::Unclean,
                    "{name}: second start"
                );
            }
        }
    }
}
