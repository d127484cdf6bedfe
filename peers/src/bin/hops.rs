//! isrlog alone, for finding where time goes (issue 27): no openraft phase, one 3-node bench
//! cluster, one measurement per run so that `perf stat` / `perf sched` / `perf record` see
//! only it.
//!
//!   hops                 1 KiB acks=all appends one at a time, the outcome read five ways:
//!                        blocking `append` (its wait spins), `append_pipelined` + `wait`,
//!                        + `on_complete` (when the callback ran), + `.await` on tokio with
//!                        1 and with 2 workers; p50/p90/p99 of each
//!   hops block|wait|cb|tokio1|tokio2      one of them, 5 rounds
//!   hops tput<clients>x<bytes>            e.g. tput256x100: closed-loop tokio tasks (2
//!                        workers) awaiting `append_pipelined`, 3 s (SECS=...): ops/s,
//!                        appends per leader write and per fetch, CPU microseconds per op
//!                        (process user + system time over the window)
//!   hops threads<clients>x<bytes>         e.g. threads64x1024: the same with OS threads
//!                        calling the blocking `append_values` (side_by_side's thread clients)
//!   TIMELINE_MS=250 hops tput256x100      also a line per 250 ms slice of the window: its
//!                        end (unix ms), ops/s, appends per leader write, and per kind of
//!                        thread (tokio workers, fetchers, completion runner, ...) CPU use
//!                        and voluntary/involuntary context switches a second (from
//!                        /proc/self/task)
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use isrlog::{Acks, RecordBatchBuilder};
use peers::isrlog_peer::{IsrCluster, IsrOptions};

const N: usize = 20000;

fn batch() -> isrlog::RecordBatch {
    let mut b = RecordBatchBuilder::with_capacity(0, 1100);
    b.push(&[0xA5u8; 1024]);
    b.build().unwrap()
}

fn p(mut v: Vec<u64>) -> String {
    v.sort_unstable();
    format!(
        "p50 {:6.1} us  p90 {:6.1}  p99 {:6.1}",
        v[v.len() / 2] as f64 / 1e3,
        v[v.len() * 9 / 10] as f64 / 1e3,
        v[v.len() * 99 / 100] as f64 / 1e3
    )
}

fn main() {
    let c = IsrCluster::start(&IsrOptions::default(), None).unwrap();
    let log = c.leader_log();
    let b = batch();
    let epoch = Instant::now();
    let ns = move |t: Instant| t.duration_since(epoch).as_nanos() as u64;
    let only: Option<String> = std::env::args().nth(1);
    if let Some(m) = only.as_deref().and_then(|m| m.strip_prefix("threads")) {
        // threads<clients>x<payload>: closed loop OS threads, blocking appends, 3 s
        let (clients, payload) = m.split_once('x').unwrap();
        let (clients, payload): (usize, usize) =
            (clients.parse().unwrap(), payload.parse().unwrap());
        let done = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..clients)
            .map(|_| {
                let log = log.clone();
                let done = done.clone();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let value = vec![0x5Au8; payload];
                    while stop.load(Ordering::Relaxed) == 0 {
                        log.append_values(&[&value], Acks::All).unwrap();
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        measure(&c, &log, &done, clients, payload);
        stop.store(1, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        c.shutdown().unwrap();
        return;
    }
    if let Some(m) = only.as_deref().and_then(|m| m.strip_prefix("tput")) {
        // tput<clients>x<payload>: closed loop tokio tasks, 2 workers, 3 s
        let (clients, payload) = m.split_once('x').unwrap();
        let (clients, payload): (usize, usize) =
            (clients.parse().unwrap(), payload.parse().unwrap());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let done = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicU64::new(0));
        for _ in 0..clients {
            let log = log.clone();
            let done = done.clone();
            let stop = stop.clone();
            rt.spawn(async move {
                let value = vec![0x5Au8; payload];
                while stop.load(Ordering::Relaxed) == 0 {
                    let mut b = RecordBatchBuilder::with_capacity(0, payload + 32);
                    b.push(&value);
                    let h = log
                        .append_pipelined(&b.build().unwrap(), Acks::All)
                        .unwrap();
                    h.await.unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        measure(&c, &log, &done, clients, payload);
        stop.store(1, Ordering::Relaxed);
        drop(rt);
        c.shutdown().unwrap();
        return;
    }
    let want = |m: &str| only.as_deref().is_none_or(|o| o == m);
    let rounds = if only.is_some() { 5 } else { 2 };
    for round in 0..rounds {
        if want("block") {
            // 1. blocking append
            let mut v = Vec::new();
            for _ in 0..N {
                let t0 = Instant::now();
                log.append(&b, Acks::All).unwrap();
                v.push(t0.elapsed().as_nanos() as u64);
            }
            println!("{round} append (blocking, spins)        {}", p(v));
        }
        if want("wait") {
            // 2. pipelined + wait (condvar wake from the resolver)
            let mut v = Vec::new();
            let mut call = Vec::new();
            for _ in 0..N {
                let t0 = Instant::now();
                let h = log.append_pipelined(&b, Acks::All).unwrap();
                call.push(t0.elapsed().as_nanos() as u64);
                h.wait().unwrap();
                v.push(t0.elapsed().as_nanos() as u64);
            }
            println!("{round} append_pipelined call             {}", p(call));
            println!("{round} pipelined + wait                  {}", p(v));
        }
        if want("cb") {
            // 3. pipelined + callback on the runner; the caller spins on a flag
            let done = Arc::new(AtomicU64::new(0));
            let mut v = Vec::new();
            let mut cb = Vec::new();
            for _ in 0..N {
                done.store(0, Ordering::SeqCst);
                let t0 = Instant::now();
                let h = log.append_pipelined(&b, Acks::All).unwrap();
                let d = done.clone();
                h.on_complete(move |_| d.store(ns(Instant::now()), Ordering::SeqCst));
                let mut at;
                loop {
                    at = done.load(Ordering::SeqCst);
                    if at != 0 {
                        break;
                    }
                    std::hint::spin_loop();
                }
                cb.push(at - ns(t0));
                v.push(t0.elapsed().as_nanos() as u64);
            }
            println!("{round} pipelined + callback (runs at)    {}", p(cb));
        }
        // 4. tokio, 2 workers, one task awaiting
        for workers in [1usize, 2] {
            if !want(&format!("tokio{workers}")) {
                continue;
            }
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()
                .unwrap();
            let log2 = log.clone();
            let b2 = b.clone();
            let v = rt.block_on(async move {
                tokio::spawn(async move {
                    let mut v = Vec::new();
                    for _ in 0..N {
                        let t0 = Instant::now();
                        let h = log2.append_pipelined(&b2, Acks::All).unwrap();
                        h.await.unwrap();
                        v.push(t0.elapsed().as_nanos() as u64);
                    }
                    v
                })
                .await
                .unwrap()
            });
            println!("{round} tokio {workers} workers, await          {}", p(v));
        }
    }
    c.shutdown().unwrap();
}

/// Per thread kind (the name up to its first digit): CPU seconds, voluntary and
/// involuntary context switches, from /proc/self/task.
fn thread_stats() -> std::collections::BTreeMap<String, (f64, u64, u64)> {
    let mut kinds = std::collections::BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let path = task.path();
        let (Ok(stat), Ok(status)) = (
            std::fs::read_to_string(path.join("stat")),
            std::fs::read_to_string(path.join("status")),
        ) else {
            continue;
        };
        let name = stat[stat.find('(').unwrap() + 1..stat.rfind(')').unwrap()].to_string();
        let kind: String = name.chars().take_while(|c| !c.is_ascii_digit()).collect();
        let kind = kind.trim_end_matches('-').to_string();
        let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
            .split_whitespace()
            .collect();
        let cpu = (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0;
        let field = |key: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map_or(0, |v| v.trim().parse().unwrap())
        };
        let entry = kinds.entry(kind).or_insert((0.0, 0, 0));
        entry.0 += cpu;
        entry.1 += field("voluntary_ctxt_switches:");
        entry.2 += field("nonvoluntary_ctxt_switches:");
    }
    kinds
}

/// CPU seconds of this process (user + system), from /proc/self/stat.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// Waits 0.5 s, then measures a window of `SECS` (default 3) seconds and prints ops/s,
/// appends per leader write and per fetch, and CPU microseconds per op.
fn measure(
    c: &IsrCluster,
    log: &isrlog::ReplicatedLog,
    done: &AtomicU64,
    clients: usize,
    payload: usize,
) {
    let secs: f64 = std::env::var("SECS")
        .ok()
        .map_or(3.0, |s| s.parse().unwrap());
    std::thread::sleep(std::time::Duration::from_millis(500));
    let d0 = done.load(Ordering::Relaxed);
    let s0 = log.log_stats();
    let n0 = c.memory_network_calls();
    let cpu0 = cpu_secs();
    let t0 = Instant::now();
    // TIMELINE_MS=<ms>: also print each slice of the window (ops/s, appends per leader
    // write, and per kind of thread its CPU and context switches), to see whether a run
    // keeps one speed or changes speed within the run, and what changes with it.
    match std::env::var("TIMELINE_MS")
        .ok()
        .map(|ms| ms.parse::<u64>().unwrap())
    {
        Some(slice_ms) => {
            let slice = std::time::Duration::from_millis(slice_ms);
            let (mut d, mut s, mut at) = (d0, s0.appends, t0);
            let mut threads = thread_stats();
            let mut line = String::new();
            while t0.elapsed().as_secs_f64() < secs {
                std::thread::sleep(slice);
                let (d2, s2, at2) = (
                    done.load(Ordering::Relaxed),
                    log.log_stats().appends,
                    Instant::now(),
                );
                let threads2 = thread_stats();
                let dt = at2.duration_since(at).as_secs_f64();
                // Wall-clock milliseconds (to line slices up with another process's record).
                let wall_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis();
                line.push_str(&format!(
                    "{wall_ms} {:5.0}k/s {:3.0}/write |",
                    (d2 - d) as f64 / dt / 1e3,
                    (d2 - d) as f64 / (s2 - s).max(1) as f64
                ));
                for (name, (cpu, vol, invol)) in &threads2 {
                    let (c0, v0, i0) = threads.get(name).copied().unwrap_or_default();
                    if cpu - c0 < 0.005 * dt {
                        continue;
                    }
                    line.push_str(&format!(
                        " {name} {:3.0}% {:4.0}k {:4.0}k |",
                        (cpu - c0) / dt * 100.0,
                        (vol - v0) as f64 / dt / 1e3,
                        (invol - i0) as f64 / dt / 1e3
                    ));
                }
                line.push('\n');
                (d, s, at, threads) = (d2, s2, at2, threads2);
            }
            println!(
                "timeline: unix ms, ops/s, appends per leader write | per kind of thread: CPU, \
                 voluntary and involuntary context switches a second\n{line}"
            );
        }
        None => std::thread::sleep(std::time::Duration::from_secs_f64(secs)),
    }
    let d1 = done.load(Ordering::Relaxed);
    let s1 = log.log_stats();
    let n1 = c.memory_network_calls();
    let cpu1 = cpu_secs();
    let dt = t0.elapsed().as_secs_f64();
    let ops = (d1 - d0) as f64;
    println!(
            "{clients} x {payload} B: {:.0} ops/s; per leader write {:.1} appends, {:.2} batches; per fetch {:.1} appends; cpu {:.2} us/op",
            ops / dt,
            ops / (s1.appends - s0.appends) as f64,
            (s1.batches_appended - s0.batches_appended) as f64 / (s1.appends - s0.appends) as f64,
            ops / (n1 - n0) as f64,
            (cpu1 - cpu0) * 1e6 / ops,
        );
    // For `perf stat` over the whole run: divide its counts by this.
    println!(
        "acknowledged in the whole run: {}",
        done.load(Ordering::Relaxed)
    );
}
