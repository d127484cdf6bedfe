//! The one module of the crate with `unsafe` code: mapping an index file
//! into memory with `memmap2` for [`StdDisk`](super::StdDisk).
//!
//! Mapping a file is unsafe because another process could change the file
//! under us. Like Kafka, we accept that: the log directory belongs to this
//! process (see the SAFETY note).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;

use memmap2::MmapMut;

use super::MappedRegion;

/// A file mapped read-write with `mmap`.
#[derive(Debug)]
pub(super) struct FileMapping {
    mmap: MmapMut,
}

impl FileMapping {
    /// Maps `file` at its current length.
    pub(super) fn new(file: &File) -> io::Result<FileMapping> {
        // SAFETY: the file is private to this log (one process owns the log
        // directory, as with Kafka, and holds its lock), so nothing else
        // truncates or rewrites it while it is mapped; the offset index only
        // changes the file's length after dropping the mapping (see
        // `OffsetIndex::resize`: touching a mapped page beyond the end of a
        // file is SIGBUS), and the mapping does not borrow the handle (the
        // kernel keeps the file referenced while it is mapped).
        let mmap = unsafe { MmapMut::map_mut(file) }?;
        Ok(FileMapping { mmap })
    }
}

impl MappedRegion for FileMapping {
    fn bytes(&self) -> &[u8] {
        &self.mmap
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.mmap
    }

    fn flush(&self) -> io::Result<()> {
        self.mmap.flush()
    }
}
