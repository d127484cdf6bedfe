//! isrlog in one command: three nodes in one process (in-memory network and
//! coordinator, logs in a temporary directory), producers appending with
//! `acks=all`, then the leader crashes, a new leader takes over, and the demo
//! checks that every acknowledged record survived.
//!
//! Run with `cargo run --release --example quickstart`
//! (`-- --short` for the quick run CI does). Exits non-zero if any
//! acknowledged record is missing.

use std::collections::BTreeSet;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use isrlog::{
    Acks, Coordinator, Error, Isolation, LogId, MemoryCoordinator, MemoryNetwork, Node, NodeConfig,
    NodeId, Offset, ReplicatedLog, SystemClock,
};

const LOG: LogId = LogId(0);
const SESSION_TIMEOUT: Duration = Duration::from_millis(1000);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        // Log lines go to stdout: colours only on a terminal, never in a pipe.
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let short = std::env::args().any(|a| a == "--short");
    let run_for = if short {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(3)
    };

    // --- Three nodes: a network, a coordinator, one directory each. -------
    let dir = tempfile::tempdir()?;
    let clock = Arc::new(SystemClock);
    let network = MemoryNetwork::new(42);
    let coordinator = MemoryCoordinator::new(clock.clone());
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    coordinator.create_log(LOG, ids.to_vec())?;
    let mut nodes = Vec::new();
    for id in ids {
        let mut config = NodeConfig::new(id, dir.path().join(format!("node-{}", id.0)));
        config.replication.min_insync_replicas = 2;
        config.session_timeout = SESSION_TIMEOUT;
        // Writes caught in the crash give up after this; they are then
        // unknown, neither lost nor acknowledged.
        config.replication.request_timeout = Duration::from_secs(2);
        let node = Node::start(
            config,
            Arc::new(network.transport(id)),
            Arc::new(coordinator.clone()),
            clock.clone(),
        )?;
        network.register(id, node.handler());
        nodes.push(Some(node));
    }
    let leader_of = |coordinator: &MemoryCoordinator| -> Option<NodeId> {
        coordinator
            .log_state(LOG)
            .ok()
            .flatten()
            .and_then(|s| s.leader)
    };
    let handle_on = |nodes: &[Option<Node>], id: NodeId| -> Option<ReplicatedLog> {
        nodes[id.0 as usize]
            .as_ref()?
            .wait_for_log(LOG, Duration::from_secs(5))
            .ok()
    };
    let first_leader = leader_of(&coordinator).ok_or("no leader")?;
    let leader = handle_on(&nodes, first_leader).ok_or("leader not hosting the log")?;
    leader.wait_until_leader(Duration::from_secs(5))?;
    println!(
        "3 nodes up; {LOG} led by {first_leader}, replicas {:?}",
        leader.replicas()
    );

    // --- Producers: 4 threads, batches of 10 records, acks=all. -----------
    let acknowledged = Arc::new(parking_lot::Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let records = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let producers: Vec<_> = (0..4u64)
        .map(|p| {
            let leader = leader.clone();
            let acknowledged = Arc::clone(&acknowledged);
            let stop = Arc::clone(&stop);
            let records = Arc::clone(&records);
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let values: Vec<String> = (0..10).map(|i| format!("p{p}-{n}-{i}")).collect();
                    match leader.append_values(&values, Acks::All) {
                        Ok(_) => {
                            acknowledged.lock().extend(values);
                            records.fetch_add(10, Ordering::Relaxed);
                        }
                        // Its node was halted: this handle takes no more.
                        Err(Error::Shutdown) => break,
                        // Unknown outcome (e.g. a timeout): not counted.
                        Err(_) => {}
                    }
                    n += 1;
                }
            })
        })
        .collect();
    // On a terminal the progress line redraws in place (`\r`); in a pipe or
    // a file it is a full line once a second instead of one endless line.
    let terminal = std::io::stdout().is_terminal();
    let mut last_line = Instant::now();
    while started.elapsed() < run_for {
        std::thread::sleep(Duration::from_millis(100));
        let progress = format!(
            "  appended {:>9} records with acks=all, HW {:>9}",
            records.load(Ordering::Relaxed),
            leader.high_watermark()
        );
        if terminal {
            print!("\r{progress}");
            std::io::stdout().flush()?;
        } else if last_line.elapsed() >= Duration::from_secs(1) {
            last_line = Instant::now();
            println!("{progress}");
        }
    }
    if terminal {
        println!();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = records.load(Ordering::Relaxed);
    println!(
        "{total} records acknowledged in {elapsed:.1} s: {:.0} records/s ({:.1} MB/s of values)",
        total as f64 / elapsed,
        acknowledged.lock().iter().map(String::len).sum::<usize>() as f64 / elapsed / 1e6
    );

    // --- Crash the leader while the producers keep writing: threads stop,
    // nothing is flushed or closed. Writes in flight are never acknowledged
    // (the followers cannot reach it); they fail with `Shutdown`. -------------
    println!("crashing the leader, {first_leader}, with writes in flight ...");
    let crashed_at = Instant::now();
    network.node_down(first_leader);
    if let Some(node) = nodes[first_leader.0 as usize].take() {
        node.halt();
    }
    // The coordinator notices when the session expires; the controller then
    // elects the first live in-sync replica.
    let new_leader_id = loop {
        match leader_of(&coordinator) {
            Some(id) if id != first_leader => break id,
            _ if crashed_at.elapsed() > Duration::from_secs(30) => {
                return Err("no new leader".into())
            }
            _ => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    stop.store(true, Ordering::Relaxed);
    let new_leader = handle_on(&nodes, new_leader_id).ok_or("new leader not hosting the log")?;
    let first_write = loop {
        match new_leader.append_values(&["after failover"], Acks::All) {
            Ok(appended) => break appended,
            Err(Error::NotLeader { .. }) | Err(Error::NotEnoughReplicas { .. }) => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => return Err(e.into()),
        }
    };
    println!(
        "{new_leader_id} leads epoch {}; first acks=all write {:.0} ms after the crash (session timeout {} ms)",
        first_write.leader_epoch,
        crashed_at.elapsed().as_secs_f64() * 1e3,
        SESSION_TIMEOUT.as_millis()
    );
    // The producers stopped at the crash (their writes failed with `Shutdown`).
    for producer in producers {
        producer.join().map_err(|_| "producer panicked")?;
    }

    // --- Check: every acknowledged record is committed on the new leader. --
    let mut present = BTreeSet::new();
    let mut next = Offset(0);
    loop {
        let batches = new_leader.read(next, 4 << 20, Isolation::Committed)?;
        if batches.is_empty() {
            break;
        }
        for batch in &batches {
            for record in batch.records() {
                let record = record?;
                if record.offset >= next {
                    present.insert(String::from_utf8_lossy(&record.value).into_owned());
                }
            }
            next = batch.next_offset();
        }
    }
    let acknowledged = acknowledged.lock();
    if acknowledged.is_empty() {
        eprintln!("no write was acknowledged: nothing was checked");
        std::process::exit(1);
    }
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|v| !present.contains(*v))
        .collect();
    for node in nodes.into_iter().flatten() {
        node.shutdown()?;
    }
    if lost.is_empty() {
        println!(
            "OK: all {} acknowledged records are on the new leader",
            acknowledged.len()
        );
        Ok(())
    } else {
        eprintln!(
            "LOST {} acknowledged records, e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        );
        std::process::exit(1);
    }
}
