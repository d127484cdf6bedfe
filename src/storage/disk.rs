//! The one interface through which storage reaches files and directories
//! (issue 28): [`Disk`] for a directory tree, [`DiskFile`] for an open file,
//! [`MappedRegion`] for a file mapped into memory (the offset index).
//!
//! This module owns the interface and its two implementations: [`StdDisk`],
//! the operating system's file system (the default everywhere, and the only
//! one production code builds), and, for tests, [`SimDisk`], an in-memory
//! file system that keeps what was written apart from what was made durable
//! and can lose power, tear writes, flip bits, fail with `EIO` or run out
//! of space. It does not know what the files mean: segments, indexes and
//! checkpoints are the other storage modules'.
//!
//! Every operation returns `std::io::Result`, so callers keep naming the
//! file and the operation in their [`Error::Io`](crate::Error) as before.
//! Everything is object safe: storage holds an `Arc<dyn Disk>`, so nothing
//! above it becomes generic.

mod mmap;
#[cfg(any(test, feature = "testing"))]
mod sim;
mod std_disk;

use std::ffi::OsString;
use std::fmt::Debug;
use std::io;
use std::path::Path;

#[cfg(any(test, feature = "testing"))]
pub use sim::{DiskOperation, EioPlan, FlippedBit, Latency, SimDisk, SimDiskStats};
pub use std_disk::StdDisk;

/// How [`Disk::open`] opens a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Reading only; the file must exist.
    Read,
    /// Reading and writing at any position; the file must exist.
    ReadWrite,
    /// Reading, and writing only at the end ([`DiskFile::append`]); the
    /// file must exist.
    Append,
    /// As [`Append`](OpenMode::Append), creating the file when missing.
    CreateAppend,
    /// Reading and writing, creating the file when missing and emptying
    /// it when not.
    CreateTruncate,
}

/// A file system: the directory operations storage needs, and opening
/// files. Shared between threads.
pub trait Disk: Debug + Send + Sync {
    /// Opens the file at `path` as `mode` says.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>>;

    /// Reads the whole file at `path`.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let file = self.open(path, OpenMode::Read)?;
        let len = file.length_bytes()?;
        file.read_vec_at(0, usize::try_from(len).unwrap_or(usize::MAX))
    }

    /// Creates `path` and every missing parent directory (no error if it
    /// exists). The new entries are durable only once their parents are
    /// synced ([`sync_dir`](Disk::sync_dir)).
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;

    /// Whether `path` names an existing file or directory.
    fn exists(&self, path: &Path) -> bool;

    /// The names of the entries of the directory `path` (files and
    /// directories), in no particular order.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<OsString>>;

    /// Renames `from` to `to`, replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Removes the file at `path`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Removes the directory `path` and everything under it.
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;

    /// Makes the entries of the directory `path` durable: files created,
    /// renamed into or removed from it survive a power loss only after
    /// this (as on ext4 and POSIX).
    fn sync_dir(&self, path: &Path) -> io::Result<()>;

    /// Takes an exclusive advisory lock on the file at `path` (created when
    /// missing) without waiting: `Ok(None)` if someone holds it. The lock
    /// lasts as long as the returned guard.
    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>>;
}

/// An open file. Shared between threads (`&self` everywhere): positioned
/// reads and writes need no cursor.
pub trait DiskFile: Debug + Send + Sync {
    /// Reads up to `buf.len()` bytes at `position`; returns how many were
    /// read (fewer only at the end of the file).
    fn read_at(&self, position: u64, buf: &mut [u8]) -> io::Result<usize>;

    /// Reads up to `len` bytes at `position` into a new buffer (shorter at
    /// the end of the file), without zeroing it first where the
    /// implementation can (bulk reads of segment data).
    fn read_vec_at(&self, position: u64, len: usize) -> io::Result<Vec<u8>>;

    /// Appends `parts`, back to back, at the end of the file (opened with
    /// [`OpenMode::Append`] or [`OpenMode::CreateAppend`]). Returns the
    /// bytes written: fewer than asked only together with an error, which
    /// is then returned instead (a partial write is reported through
    /// `Err`, and what was written stays written).
    fn append(&self, parts: &[&[u8]]) -> io::Result<()>;

    /// Writes all of `bytes` at `position`.
    fn write_all_at(&self, position: u64, bytes: &[u8]) -> io::Result<()>;

    /// Cuts or extends (with zeros) the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Reserves the blocks of the file's first `bytes` bytes without
    /// changing its length (`fallocate` with `FALLOC_FL_KEEP_SIZE`), so
    /// that a disk without room fails here, before the writes. `Ok(())`
    /// where the file system cannot reserve: the writes then allocate as
    /// they go. The default reserves nothing.
    fn reserve(&self, bytes: u64) -> io::Result<()> {
        let _ = bytes;
        Ok(())
    }

    /// The file's current length.
    fn length_bytes(&self) -> io::Result<u64>;

    /// Makes the file's data and length durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;

    /// Makes the file's data and metadata durable (`fsync`).
    fn sync_all(&self) -> io::Result<()>;

    /// A second handle on the same file (to fsync it from another thread).
    fn try_clone(&self) -> io::Result<Box<dyn DiskFile>>;

    /// Maps the file's first `len` bytes (its current length) into memory
    /// for reading and writing. Writes through the mapping reach the file
    /// as the page cache does: a crash of the process keeps them, a power
    /// loss keeps them only after [`MappedRegion::flush`]. The caller never
    /// changes the file's length while the mapping lives.
    fn map(&self, len: u64) -> io::Result<Box<dyn MappedRegion>>;
}

/// A file mapped into memory (the offset index's file).
pub trait MappedRegion: Debug + Send + Sync {
    /// The mapped bytes.
    fn bytes(&self) -> &[u8];

    /// The mapped bytes, for writing.
    fn bytes_mut(&mut self) -> &mut [u8];

    /// Writes the mapped bytes back to the file and waits until they are
    /// durable (`msync`).
    fn flush(&self) -> io::Result<()>;
}

/// Holds an advisory lock taken with [`Disk::try_lock`]; dropping it
/// releases the lock.
pub trait LockGuard: Debug + Send + Sync {}
