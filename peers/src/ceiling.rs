//! The machine's ceiling for a replicated write, measured in the same run as the systems:
//! the bytes three replicas would write, with no replication logic at all.
//!
//! Three threads (one per replica) each append the records' bytes, back to back, to fresh
//! files of their own in a new temporary directory, in 64 KiB `write` calls (no record
//! framing, no checksum, no fsync, no network, no coordination), rolling to a new file every
//! 1 GiB as isrlog's default `segment_bytes_max` does. A record counts once all three copies
//! of it are written, so the figure is the slowest writer's records per second over the
//! measured window. Writing *new* data is what costs on this machine (memory the VM handed
//! back to its host must be faulted in again), so no replicated log that keeps its records in
//! files can go faster; every throughput figure can be read as a fraction of this one.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Replicas whose writes the ceiling makes.
pub const REPLICAS: usize = 3;
/// Bytes of one `write` call: many records at once, the cheapest way to write them.
const WRITE_BYTES: usize = 64 * 1024;
/// Bytes after which a writer starts a new file (isrlog's default segment size).
const FILE_BYTES_MAX: u64 = 1 << 30;

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// What one ceiling phase measured.
#[derive(Debug, Clone)]
pub struct CeilingSample {
    /// Records per second whose three copies were written in the window (the slowest
    /// writer's rate).
    pub ops_per_s: f64,
    /// Bytes per second written by all three writers together, 1 MB = 1e6 B.
    pub mb_per_s: f64,
    /// Records the slowest writer wrote in the window.
    pub ok: u64,
}

/// Writes `payload`-byte records with [`REPLICAS`] writers for `warmup` (not counted) and
/// then `measure`, in a fresh temporary directory under `parent` (or the system's), which is
/// deleted before returning, so that its dirty pages are dropped, not written back.
pub fn ceiling_run(
    parent: Option<&Path>,
    payload: usize,
    warmup: Duration,
    measure: Duration,
) -> std::io::Result<CeilingSample> {
    assert!(
        payload > 0 && payload <= WRITE_BYTES,
        "payload {payload} bytes"
    );
    let dir = match parent {
        Some(p) => tempfile::Builder::new()
            .prefix("ceiling-bench-")
            .tempdir_in(p)?,
        None => tempfile::Builder::new()
            .prefix("ceiling-bench-")
            .tempdir()?,
    };
    let records_per_write = WRITE_BYTES / payload;
    let phase = Arc::new(AtomicU8::new(WARMUP));
    let written: Vec<Arc<AtomicU64>> = (0..REPLICAS).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let mut writers = Vec::with_capacity(REPLICAS);
    for (replica, records) in written.iter().enumerate() {
        let dir = dir.path().join(format!("replica-{replica}"));
        std::fs::create_dir(&dir)?;
        let phase = phase.clone();
        let records = records.clone();
        writers.push(std::thread::spawn(move || -> std::io::Result<()> {
            let buffer = vec![0x5Au8; records_per_write * payload];
            let mut file_number = 0u64;
            let mut file = File::create(dir.join(format!("{file_number:020}.log")))?;
            let mut file_bytes = 0u64;
            while phase.load(Ordering::Relaxed) != STOP {
                if file_bytes >= FILE_BYTES_MAX {
                    file_number += 1;
                    file = File::create(dir.join(format!("{file_number:020}.log")))?;
                    file_bytes = 0;
                }
                file.write_all(&buffer)?;
                file_bytes += buffer.len() as u64;
                records.fetch_add(records_per_write as u64, Ordering::Relaxed);
            }
            Ok(())
        }));
    }
    std::thread::sleep(warmup);
    let at_start: Vec<u64> = written.iter().map(|w| w.load(Ordering::Relaxed)).collect();
    phase.store(MEASURE, Ordering::Relaxed);
    let start = Instant::now();
    std::thread::sleep(measure);
    let at_end: Vec<u64> = written.iter().map(|w| w.load(Ordering::Relaxed)).collect();
    let secs = start.elapsed().as_secs_f64();
    phase.store(STOP, Ordering::Relaxed);
    for writer in writers {
        writer
            .join()
            .map_err(|_| std::io::Error::other("a ceiling writer panicked"))??;
    }
    let per_writer: Vec<u64> = at_start.iter().zip(&at_end).map(|(a, b)| b - a).collect();
    let slowest = per_writer.iter().copied().min().unwrap_or(0);
    let total: u64 = per_writer.iter().sum();
    dir.close()?;
    Ok(CeilingSample {
        ops_per_s: slowest as f64 / secs,
        mb_per_s: (total * payload as u64) as f64 / secs / 1e6,
        ok: slowest,
    })
}

/// The machine's ceiling for closed-loop clients that are OS threads blocking on each
/// append, measured in the same run: `clients` threads each hand one record to a single
/// committer thread and block (`thread::park`) until it says the record is done; the
/// committer takes everything queued at once (a group commit that copies and writes
/// nothing), marks each done and wakes its thread (`Thread::unpark`). No bytes, no
/// replication, no coordination: only the hand-off and the wake-up that any design in which
/// an OS thread waits for another thread to decide its append must pay. No blocking client
/// of a replicated log on this machine can go faster; the "threads" rows read as a
/// fraction of it, and where it is below another system's figure, that figure is out of
/// reach for blocking thread clients here.
pub fn hand_off_ceiling_run(
    clients: usize,
    warmup: Duration,
    measure: Duration,
) -> std::io::Result<CeilingSample> {
    use std::sync::atomic::AtomicBool;
    use std::sync::{Condvar, Mutex};
    use std::thread::Thread;

    struct Queue {
        waiting: Mutex<Vec<(Thread, Arc<AtomicBool>)>>,
        ready: Condvar,
    }
    let queue = Arc::new(Queue {
        waiting: Mutex::new(Vec::with_capacity(clients)),
        ready: Condvar::new(),
    });
    let phase = Arc::new(AtomicU8::new(WARMUP));
    let done_total = Arc::new(AtomicU64::new(0));
    // Clients still running: the committer serves until every one has seen STOP, so
    // that none is left parked on a record pushed just before it.
    let running = Arc::new(AtomicU64::new(clients as u64));
    let committer = {
        let (queue, running, done_total) = (queue.clone(), running.clone(), done_total.clone());
        std::thread::spawn(move || {
            let mut batch = Vec::with_capacity(clients);
            loop {
                {
                    let mut waiting = queue.waiting.lock().unwrap_or_else(|e| e.into_inner());
                    while waiting.is_empty() {
                        if running.load(Ordering::Acquire) == 0 {
                            return;
                        }
                        waiting = queue
                            .ready
                            .wait_timeout(waiting, Duration::from_millis(10))
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                    std::mem::swap(&mut *waiting, &mut batch);
                }
                done_total.fetch_add(batch.len() as u64, Ordering::Relaxed);
                for (thread, done) in batch.drain(..) {
                    done.store(true, Ordering::Release);
                    thread.unpark();
                }
            }
        })
    };
    let mut threads = Vec::with_capacity(clients);
    for _ in 0..clients {
        let (queue, phase, running) = (queue.clone(), phase.clone(), running.clone());
        threads.push(std::thread::spawn(move || {
            let done = Arc::new(AtomicBool::new(false));
            while phase.load(Ordering::Relaxed) != STOP {
                done.store(false, Ordering::Relaxed);
                let was_empty = {
                    let mut waiting = queue.waiting.lock().unwrap_or_else(|e| e.into_inner());
                    let was_empty = waiting.is_empty();
                    waiting.push((std::thread::current(), done.clone()));
                    was_empty
                };
                if was_empty {
                    queue.ready.notify_one();
                }
                while !done.load(Ordering::Acquire) {
                    std::thread::park();
                }
            }
            running.fetch_sub(1, Ordering::Release);
        }));
    }
    std::thread::sleep(warmup);
    let at_start = done_total.load(Ordering::Relaxed);
    phase.store(MEASURE, Ordering::Relaxed);
    let start = Instant::now();
    std::thread::sleep(measure);
    let at_end = done_total.load(Ordering::Relaxed);
    let secs = start.elapsed().as_secs_f64();
    phase.store(STOP, Ordering::Relaxed);
    for thread in threads {
        thread
            .join()
            .map_err(|_| std::io::Error::other("a hand-off client panicked"))?;
    }
    committer
        .join()
        .map_err(|_| std::io::Error::other("the hand-off committer panicked"))?;
    let ok = at_end - at_start;
    Ok(CeilingSample {
        ops_per_s: ok as f64 / secs,
        mb_per_s: 0.0,
        ok,
    })
}
