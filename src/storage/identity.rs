//! The identity and the owner of a node's data directory (SPEC 2.8).
//!
//! This module owns two files at the top of the data directory: the
//! identity file, written once, atomically, on the first start (cluster id,
//! node id, directory id: Kafka's `meta.properties` with KIP-858's
//! `directory.id`), and the lock file, on which a running node holds an
//! exclusive advisory lock for its whole life (Kafka's `.lock`). It does not
//! decide what a missing or foreign identity means for the replicas: the
//! node does that with the coordinator's records.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::disk::{Disk, LockGuard};
use crate::error::{Error, Result};
use crate::storage::write_atomically;
use crate::types::{ClusterId, DirectoryId, NodeId};

/// The identity file's name inside the data directory.
pub(crate) const IDENTITY_FILE: &str = "identity.properties";
/// The lock file's name inside the data directory.
pub(crate) const LOCK_FILE: &str = ".lock";
/// The only format of the identity file so far.
const IDENTITY_VERSION: u32 = 1;

/// What a data directory says it is (SPEC 2.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectoryIdentity {
    /// The cluster the directory belongs to.
    pub cluster_id: ClusterId,
    /// The node the directory belongs to.
    pub node_id: NodeId,
    /// The directory's own random id.
    pub directory_id: DirectoryId,
}

impl DirectoryIdentity {
    /// The identity file of `data_dir`.
    pub(crate) fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(IDENTITY_FILE)
    }

    /// Reads the identity of `data_dir`: `None` if the directory or its
    /// identity file does not exist. Writes nothing. A file that cannot be
    /// parsed is an error naming it (never taken as "no identity": that
    /// would let a damaged directory pass for an empty one and be given a
    /// new id, or worse, for another node's).
    pub(crate) fn load(disk: &dyn Disk, data_dir: &Path) -> Result<Option<DirectoryIdentity>> {
        let path = DirectoryIdentity::path(data_dir);
        let text = match disk.read(&path).and_then(|bytes| {
            String::from_utf8(bytes)
                .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e.utf8_error()))
        }) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&path, "read the directory identity", e)),
        };
        DirectoryIdentity::parse(&text)
            .map(Some)
            .map_err(|reason| Error::InvalidCheckpoint { path, reason })
    }

    /// Writes the identity file of `data_dir` atomically and durably
    /// (temporary file, fsync, rename, fsync of the directory).
    pub(crate) fn store(&self, disk: &dyn Disk, data_dir: &Path) -> Result<()> {
        write_atomically(
            disk,
            &DirectoryIdentity::path(data_dir),
            self.encode().as_bytes(),
        )
    }

    /// Errs, naming both ids, if this identity is not `cluster_id`'s node
    /// `node_id`.
    pub(crate) fn check(
        &self,
        data_dir: &Path,
        cluster_id: ClusterId,
        node_id: NodeId,
    ) -> Result<()> {
        let path = DirectoryIdentity::path(data_dir);
        if self.cluster_id != cluster_id {
            return Err(Error::DirectoryIdentityMismatch {
                path,
                field: "cluster id",
                expected: cluster_id.to_string(),
                found: self.cluster_id.to_string(),
            });
        }
        if self.node_id != node_id {
            return Err(Error::DirectoryIdentityMismatch {
                path,
                field: "node id",
                expected: node_id.0.to_string(),
                found: self.node_id.0.to_string(),
            });
        }
        Ok(())
    }

    /// The file's text: `key=value` lines, as Kafka's `meta.properties`.
    fn encode(&self) -> String {
        format!(
            "# isrlog data directory identity: never edit or copy it to another directory\nversion={IDENTITY_VERSION}\ncluster.id={}\nnode.id={}\ndirectory.id={}\n",
            self.cluster_id, self.node_id.0, self.directory_id
        )
    }

    fn parse(text: &str) -> std::result::Result<DirectoryIdentity, String> {
        let mut version = None;
        let mut cluster_id = None;
        let mut node_id = None;
        let mut directory_id = None;
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| format!("line {line:?} is not key=value"))?;
            let value = value.trim();
            match key.trim() {
                "version" => {
                    version = Some(
                        value
                            .parse::<u32>()
                            .map_err(|e| format!("version = {value:?}: {e}"))?,
                    )
                }
                "cluster.id" => {
                    cluster_id = Some(value.parse().map_err(|e| format!("cluster.id: {e}"))?)
                }
                "node.id" => {
                    node_id = Some(NodeId(
                        value
                            .parse()
                            .map_err(|e| format!("node.id = {value:?}: {e}"))?,
                    ))
                }
                "directory.id" => {
                    directory_id = Some(value.parse().map_err(|e| format!("directory.id: {e}"))?)
                }
                // Kafka ignores keys it does not know, so a newer version
                // can add some; so do we.
                _ => {}
            }
        }
        match version {
            Some(IDENTITY_VERSION) => {}
            Some(other) => {
                return Err(format!(
                    "version = {other}: only {IDENTITY_VERSION} is known"
                ))
            }
            None => return Err("version is missing".to_owned()),
        }
        Ok(DirectoryIdentity {
            cluster_id: cluster_id.ok_or("cluster.id is missing")?,
            node_id: node_id.ok_or("node.id is missing")?,
            directory_id: directory_id.ok_or("directory.id is missing")?,
        })
    }
}

/// An exclusive advisory lock on a data directory (SPEC 2.8), held until
/// dropped. It is an `flock`-style lock on [`LOCK_FILE`] (std's
/// `File::try_lock`), tied to the open file: the operating system releases
/// it when the process dies, so a crash never leaves a stale lock behind,
/// and a second open of the file, even in the same process, cannot take
/// it.
#[derive(Debug)]
pub(crate) struct DirectoryLock {
    _guard: Box<dyn LockGuard>,
}

impl DirectoryLock {
    /// Takes the lock of `data_dir` (an existing directory) without
    /// waiting: [`Error::DirectoryLocked`] naming the directory if anyone
    /// holds it.
    pub(crate) fn acquire(disk: &dyn Disk, data_dir: &Path) -> Result<DirectoryLock> {
        let lock_file = data_dir.join(LOCK_FILE);
        match disk.try_lock(&lock_file) {
            Ok(Some(guard)) => Ok(DirectoryLock { _guard: guard }),
            Ok(None) => Err(Error::DirectoryLocked {
                path: data_dir.to_path_buf(),
                lock_file,
            }),
            Err(e) => Err(Error::io(&lock_file, "lock", e)),
        }
    }
}

/// Whether `name`, a file at the top of a data directory, is one of this
/// module's files (which say nothing about whether the directory holds
/// data).
pub(crate) fn is_identity_or_lock_file(name: &std::ffi::OsStr) -> bool {
    let tmp = format!("{IDENTITY_FILE}.tmp");
    name == IDENTITY_FILE || name == LOCK_FILE || name == tmp.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::disk::StdDisk;
    use std::fs;

    fn identity() -> DirectoryIdentity {
        DirectoryIdentity {
            cluster_id: ClusterId(0xabc),
            node_id: NodeId(3),
            directory_id: DirectoryId(u128::MAX - 1),
        }
    }

    #[test]
    fn identity_round_trips_and_absent_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(DirectoryIdentity::load(&StdDisk, dir.path()).unwrap(), None);
        assert_eq!(
            DirectoryIdentity::load(&StdDisk, &dir.path().join("missing")).unwrap(),
            None
        );
        identity().store(&StdDisk, dir.path()).unwrap();
        assert_eq!(
            DirectoryIdentity::load(&StdDisk, dir.path()).unwrap(),
            Some(identity())
        );
    }

    #[test]
    fn a_bad_identity_file_is_an_error_naming_it() {
        let cases = [
            ("", "version is missing"),
            ("version=2\n", "only 1 is known"),
            ("version=1\nnode.id=1\n", "cluster.id is missing"),
            ("version=1\ncluster.id=zz\n", "cluster.id"),
            ("garbage\n", "not key=value"),
        ];
        for (text, expected) in cases {
            let dir = tempfile::tempdir().unwrap();
            fs::write(dir.path().join(IDENTITY_FILE), text).unwrap();
            let error = DirectoryIdentity::load(&StdDisk, dir.path())
                .unwrap_err()
                .to_string();
            assert!(error.contains(IDENTITY_FILE), "{error}");
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }

    #[test]
    fn check_names_both_ids() {
        let dir = Path::new("/data/n3");
        let other_node = identity()
            .check(dir, ClusterId(0xabc), NodeId(4))
            .unwrap_err()
            .to_string();
        assert!(
            other_node.contains("node id 3") && other_node.contains("node id 4"),
            "{other_node}"
        );
        let other_cluster = identity()
            .check(dir, ClusterId(0xdef), NodeId(3))
            .unwrap_err()
            .to_string();
        assert!(
            other_cluster.contains(&ClusterId(0xabc).to_string()),
            "{other_cluster}"
        );
        assert!(
            other_cluster.contains(&ClusterId(0xdef).to_string()),
            "{other_cluster}"
        );
        identity().check(dir, ClusterId(0xabc), NodeId(3)).unwrap();
    }

    #[test]
    fn a_second_lock_on_one_directory_fails_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let held = DirectoryLock::acquire(&StdDisk, dir.path()).unwrap();
        let error = DirectoryLock::acquire(&StdDisk, dir.path())
            .unwrap_err()
            .to_string();
        assert!(error.contains(&dir.path().display().to_string()), "{error}");
        drop(held);
        DirectoryLock::acquire(&StdDisk, dir.path()).unwrap();
    }
}
