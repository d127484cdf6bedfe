//! [`StdDisk`]: the operating system's file system, through `std::fs`.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, IoSlice, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::mmap::FileMapping;
use super::{Disk, DiskFile, LockGuard, MappedRegion, OpenMode};
use crate::sync::Mutex;

/// The real disk: every call is the `std::fs` call of the same name.
#[derive(Clone, Copy, Debug, Default)]
pub struct StdDisk;

impl StdDisk {
    /// The real disk, shared.
    pub fn shared() -> std::sync::Arc<dyn Disk> {
        std::sync::Arc::new(StdDisk)
    }
}

impl Disk for StdDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        let mut options = OpenOptions::new();
        options.read(true);
        match mode {
            OpenMode::Read => {}
            OpenMode::ReadWrite => {
                options.write(true);
            }
            OpenMode::Append => {
                options.append(true);
            }
            OpenMode::CreateAppend => {
                options.append(true).create(true);
            }
            OpenMode::CreateTruncate => {
                options.write(true).create(true).truncate(true);
            }
        }
        let file = options.open(path)?;
        Ok(Box::new(StdFile {
            file,
            path: path.into(),
            read_only: mode == OpenMode::Read,
            cursor: Mutex::new(()),
        }))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        fs::read_dir(path)?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir_all(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Box::new(StdLock { _file: file }))),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }
}

/// An advisory lock (`flock`) tied to an open file: the operating system
/// releases it when the process dies, so a crash never leaves a stale lock
/// behind, and a second open of the file, even in the same process, cannot
/// take it.
#[derive(Debug)]
struct StdLock {
    _file: File,
}

impl LockGuard for StdLock {}

/// A file of [`StdDisk`].
#[derive(Debug)]
struct StdFile {
    file: File,
    /// Where it was opened, for the messages that name it.
    path: std::sync::Arc<Path>,
    /// Opened for reading only: its file position is nobody else's, so
    /// bulk reads may seek it and `read_to_end` into an unzeroed buffer
    /// (zeroing 1 MiB costs a third of reading it from the page cache). An
    /// append handle's position moves with every write, so it reads with
    /// `read_at` instead.
    read_only: bool,
    /// Readers of one handle take turns on its file position.
    cursor: Mutex<()>,
}

impl DiskFile for StdFile {
    fn read_at(&self, position: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], position + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    fn read_vec_at(&self, position: u64, len: usize) -> io::Result<Vec<u8>> {
        if !self.read_only {
            let mut buf = vec![0; len];
            let n = self.read_at(position, &mut buf)?;
            buf.truncate(n);
            return Ok(buf);
        }
        let mut buf = Vec::with_capacity(len);
        let _turn = self.cursor.lock();
        let mut reader = &self.file;
        reader.seek(SeekFrom::Start(position))?;
        reader.take(len as u64).read_to_end(&mut buf)?;
        Ok(buf)
    }

    fn append(&self, parts: &[&[u8]]) -> io::Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut slices: [IoSlice<'_>; 2] = [IoSlice::new(&[]), IoSlice::new(&[])];
        if parts.len() <= 2 {
            for (slot, part) in slices.iter_mut().zip(parts) {
                *slot = IoSlice::new(part);
            }
        }
        let mut written = 0usize;
        while written < total {
            // Rebuild the slices past what was written: partial writes are
            // rare (signals, full disks) but legal.
            let use_fast = written == 0 && parts.len() <= 2;
            let mut rest: Vec<IoSlice<'_>> = Vec::new();
            if !use_fast {
                let mut skip = written;
                for part in parts {
                    if skip >= part.len() {
                        skip -= part.len();
                        continue;
                    }
                    rest.push(IoSlice::new(&part[skip..]));
                    skip = 0;
                }
            }
            let bufs: &[IoSlice<'_>] = if use_fast {
                &slices[..parts.len()]
            } else {
                &rest
            };
            match io::Write::write_vectored(&mut &self.file, bufs) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "wrote zero bytes")),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn write_all_at(&self, position: u64, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, position)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn reserve(&self, bytes: u64) -> io::Result<()> {
        use rustix::fs::{fallocate, FallocateFlags};
        match fallocate(&self.file, FallocateFlags::KEEP_SIZE, 0, bytes) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::NOSPC) => Err(io::Error::from(rustix::io::Errno::NOSPC)),
            Err(error) => {
                tracing::debug!(%error, path = %self.path.display(),
                    "cannot reserve a file's blocks; its writes allocate them");
                Ok(())
            }
        }
    }

    fn length_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn try_clone(&self) -> io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(StdFile {
            file: self.file.try_clone()?,
            path: std::sync::Arc::clone(&self.path),
            // A clone shares the file position: it never seeks.
            read_only: false,
            cursor: Mutex::new(()),
        }))
    }

    fn map(&self, len: u64) -> io::Result<Box<dyn MappedRegion>> {
        let mapping = FileMapping::new(&self.file)?;
        debug_assert_eq!(mapping.bytes().len() as u64, len, "the file's length");
        Ok(Box::new(mapping))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reservation keeps the file's length (the download's length check
    /// reads it) and the bytes written after it read back.
    #[test]
    fn a_reservation_keeps_the_length_and_the_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("download");
        let file = StdDisk.open(&path, OpenMode::CreateTruncate).unwrap();
        file.reserve(1 << 20).unwrap();
        assert_eq!(file.length_bytes().unwrap(), 0);
        file.write_all_at(4096, b"chunk").unwrap();
        assert_eq!(file.length_bytes().unwrap(), 4101);
        assert_eq!(file.read_vec_at(4096, 5).unwrap(), b"chunk");
    }
}
