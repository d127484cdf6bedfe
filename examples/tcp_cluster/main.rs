//! Three isrlog nodes talking over loopback TCP, in one process or in three.
//!
//! ```text
//! cargo run --release --example tcp_cluster              # one process, 3 nodes
//! cargo run --release --example tcp_cluster -- --short   # the quick run CI does
//!
//! # or one process per node, each in its own terminal (node 0 first):
//! cargo run --release --example tcp_cluster -- --node 0
//! cargo run --release --example tcp_cluster -- --node 1
//! cargo run --release --example tcp_cluster -- --node 2
//! # then kill the leader's process (node 1 at first) with Ctrl-C and watch
//! # another node take over.
//!
//! # on a real ZooKeeper instead of the demo coordinator (any node may die):
//! cargo run --release --features zookeeper --example tcp_cluster -- --zookeeper 127.0.0.1:2181
//! cargo run --release --features zookeeper --example tcp_cluster -- --node 0 --zookeeper 127.0.0.1:2181
//! ```
//!
//! Each node has a [`TcpServer`] (127.0.0.1:7000+N in the multi-process mode,
//! a free port otherwise) and a [`TcpTransport`] that knows the others'
//! addresses. The nodes share one coordinator: node 0 hosts a
//! [`MemoryCoordinator`] and serves it to the other nodes over a tiny
//! line-based protocol (`coordinator_shim.rs`).
//!
//! **Demo only:** the coordinator shim is not fault tolerant — node 0's
//! process *is* the metadata service, so the log is created with node 0 as
//! its *last* replica (node 1 leads first) and you should not kill node 0. It
//! stays only as the zero-dependency default: with `--zookeeper
//! HOST:PORT[,HOST:PORT...]` (feature `zookeeper`) every node instead has its
//! own `ZkCoordinator` on that ensemble, under the chroot
//! `/isrlog-tcp-cluster` (one per run in the one-process mode), as a
//! production deployment would.
//!
//! The one-process mode runs producers with `acks=all`, kills the leader
//! after a while (`--no-kill-leader` turns that off), watches another node
//! take over, and checks that every acknowledged record is committed on the
//! new leader: it exits non-zero if one is missing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use isrlog::transport::{ErrorCode, Request, Response};
use isrlog::{
    Acks, Coordinator, Isolation, LogId, MemoryCoordinator, Node, NodeConfig, NodeId, Offset,
    ReplicatedLog, RequestHandler, SystemClock, TcpConfig, TcpServer, TcpTransport,
};

mod coordinator_shim;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const LOG: LogId = LogId(0);
const NODES: u32 = 3;
/// Node 0 hosts the coordinator, so it is the last replica: the leader is
/// the first live in-sync replica in this order, so node 1 leads first.
const REPLICAS: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(0)];
const NODE_PORT_BASE: u16 = 7000;
const COORDINATOR_PORT: u16 = 7100;
const SESSION_TIMEOUT: Duration = Duration::from_millis(1000);

fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let args: Vec<String> = std::env::args().collect();
    let short = args.iter().any(|a| a == "--short");
    let kill_leader = !args.iter().any(|a| a == "--no-kill-leader");
    let zookeeper = match args.iter().position(|a| a == "--zookeeper") {
        Some(i) => Some(
            args.get(i + 1)
                .ok_or("--zookeeper needs HOST:PORT[,HOST:PORT...]")?
                .clone(),
        ),
        None => None,
    };
    match args.iter().position(|a| a == "--node") {
        Some(i) => {
            let id: u32 = args.get(i + 1).ok_or("--node needs a number")?.parse()?;
            if id >= NODES {
                return Err(format!("--node must be below {NODES}").into());
            }
            match zookeeper {
                Some(connect) => run_one_node_per_process_on_zookeeper(NodeId(id), &connect),
                None => run_one_node_per_process(NodeId(id)),
            }
        }
        None => run_all_in_one_process(short, kill_leader, zookeeper.as_deref()),
    }
}

/// The chroot the nodes share on ZooKeeper.
const ZOOKEEPER_CHROOT: &str = "/isrlog-tcp-cluster";

/// A coordinator of its own for one process, on the ZooKeeper ensemble at
/// `connect`, under `chroot`.
#[cfg(feature = "zookeeper")]
fn zookeeper_coordinator(connect: &str, chroot: &str) -> Result<Arc<dyn Coordinator>, BoxError> {
    let mut config = isrlog::ZkCoordinatorConfig::new(connect);
    config.chroot = chroot.to_owned();
    config.session_timeout = SESSION_TIMEOUT * 10;
    Ok(Arc::new(isrlog::ZkCoordinator::connect(config)?))
}

#[cfg(not(feature = "zookeeper"))]
fn zookeeper_coordinator(_connect: &str, _chroot: &str) -> Result<Arc<dyn Coordinator>, BoxError> {
    Err("--zookeeper needs the `zookeeper` feature: cargo run --features zookeeper --example tcp_cluster -- ...".into())
}

// ---- Wiring one node ----------------------------------------------------------

/// A node with its server and client.
struct TcpNode {
    node: Node,
    server: TcpServer,
    transport: Arc<TcpTransport>,
    coordinator: Arc<dyn Coordinator>,
}

impl TcpNode {
    /// A crash, as far as the others can tell: the node stops without
    /// closing anything, its sockets close, its heartbeats stop and its
    /// coordinator session expires after `SESSION_TIMEOUT`. Returns its
    /// coordinator, for the caller to keep until the end: a dead process
    /// does not close its ZooKeeper sessions, ZooKeeper times them out.
    fn kill(self) -> Arc<dyn Coordinator> {
        self.node.halt();
        self.server.shutdown();
        self.transport.shutdown();
        self.coordinator
    }

    fn shutdown(self) -> Result<(), BoxError> {
        self.node.shutdown()?;
        self.server.shutdown();
        self.transport.shutdown();
        Ok(())
    }
}

/// The server must be listening before the node starts (the others may call
/// at once), but the node's handler exists only once it has started: the
/// server is bound with this handler and pointed at the node afterwards.
#[derive(Default)]
struct LateHandler(OnceLock<Arc<dyn RequestHandler>>);

impl RequestHandler for LateHandler {
    fn handle(&self, from: NodeId, request: Request) -> Response {
        match self.0.get() {
            Some(handler) => handler.handle(from, request),
            // The caller backs off and retries, as when a process is booting.
            None => Response::Error(ErrorCode::Shutdown),
        }
    }
}

/// Binds node `id`'s listener on `addr`.
fn bind(addr: SocketAddr) -> Result<(TcpServer, Arc<LateHandler>), BoxError> {
    let handler = Arc::new(LateHandler::default());
    let server = TcpServer::bind(addr, handler.clone(), TcpConfig::default())?;
    Ok((server, handler))
}

/// Starts node `id` behind an already bound `server`, calling its peers at
/// `peers` and using `coordinator`.
fn start_node(
    id: NodeId,
    (server, handler): (TcpServer, Arc<LateHandler>),
    peers: HashMap<NodeId, SocketAddr>,
    coordinator: Arc<dyn Coordinator>,
    data_dir: &std::path::Path,
) -> Result<TcpNode, BoxError> {
    let transport = Arc::new(TcpTransport::new(id, peers, TcpConfig::default())?);
    let mut config = NodeConfig::new(id, data_dir.join(format!("node-{}", id.0)));
    // With 3 replicas, min ISR 2 and acks=all, an acknowledged record is on
    // two nodes before the producer hears back: one crash cannot lose it.
    config.replication.min_insync_replicas = 2;
    config.replication.request_timeout = Duration::from_secs(1);
    config.session_timeout = SESSION_TIMEOUT;
    let node = Node::start(
        config,
        transport.clone(),
        Arc::clone(&coordinator),
        Arc::new(SystemClock),
    )?;
    if handler.0.set(node.handler()).is_err() {
        return Err("handler set twice".into());
    }
    Ok(TcpNode {
        node,
        server,
        transport,
        coordinator,
    })
}

// ---- One process, three nodes ---------------------------------------------------

fn run_all_in_one_process(
    short: bool,
    kill_leader: bool,
    zookeeper: Option<&str>,
) -> Result<(), BoxError> {
    let run_for = Duration::from_secs(if short { 2 } else { 6 });
    let dir = tempfile::tempdir()?;
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));

    // Without ZooKeeper, node 0 "hosts" the coordinator; nodes 1 and 2
    // reach it over TCP, as they would from their own processes. With it,
    // every node has its own session, and so has this harness (`coordinator`).
    let chroot = format!("{ZOOKEEPER_CHROOT}-{}", std::process::id());
    let (coordinator, coordinator_addr): (Arc<dyn Coordinator>, Option<SocketAddr>) =
        match zookeeper {
            Some(connect) => {
                let coordinator = zookeeper_coordinator(connect, &chroot)?;
                println!("coordinator: ZooKeeper at {connect}, chroot {chroot}");
                (coordinator, None)
            }
            None => {
                let memory = MemoryCoordinator::new(Arc::new(SystemClock));
                let addr = coordinator_shim::serve(memory.clone(), loopback)?;
                (Arc::new(memory), Some(addr))
            }
        };

    let ids: Vec<NodeId> = (0..NODES).map(NodeId).collect();
    let mut listeners = Vec::new();
    for _ in &ids {
        listeners.push(bind(loopback)?);
    }
    let addrs: HashMap<NodeId, SocketAddr> = ids
        .iter()
        .zip(&listeners)
        .map(|(id, (server, _))| (*id, server.local_addr()))
        .collect();
    let mut nodes: BTreeMap<NodeId, TcpNode> = BTreeMap::new();
    for (id, listener) in ids.iter().zip(listeners) {
        let coordinator: Arc<dyn Coordinator> = match (zookeeper, coordinator_addr) {
            (Some(connect), _) => zookeeper_coordinator(connect, &chroot)?,
            (None, Some(addr)) if *id != NodeId(0) => {
                Arc::new(coordinator_shim::RemoteCoordinator::new(addr))
            }
            (None, _) => Arc::clone(&coordinator),
        };
        let peers = addrs.clone().into_iter().filter(|(p, _)| p != id).collect();
        nodes.insert(
            *id,
            start_node(*id, listener, peers, coordinator, dir.path())?,
        );
        println!("{id} listening on {}", addrs[id]);
    }

    // Created once every node is live, so that the controller does not
    // move the leadership away from a preferred leader still booting.
    coordinator.create_log(LOG, REPLICAS.to_vec())?;

    // Handles of the log on every live node; producers write to whichever
    // the coordinator names leader.
    let handles: Arc<Mutex<BTreeMap<NodeId, ReplicatedLog>>> = Arc::default();
    for (id, node) in &nodes {
        handles
            .lock()
            .insert(*id, node.node.wait_for_log(LOG, Duration::from_secs(5))?);
    }
    let first_leader = wait_for_leader(&*coordinator, None)?;
    println!("{LOG} led by {first_leader}; replicas {REPLICAS:?}");

    let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let (coordinator, handles) = (Arc::clone(&coordinator), Arc::clone(&handles));
            let (acknowledged, stop) = (Arc::clone(&acknowledged), Arc::clone(&stop));
            std::thread::spawn(move || produce(p, &*coordinator, &handles, &acknowledged, &stop))
        })
        .collect();

    std::thread::sleep(run_for / 2);
    let acknowledged_before = acknowledged.lock().len();
    println!("{acknowledged_before} records acknowledged with acks=all over TCP");
    let mut leader = first_leader;
    let mut killed = Vec::new();
    if kill_leader {
        println!("killing the leader, {first_leader} ...");
        let killed_at = Instant::now();
        handles.lock().remove(&first_leader);
        if let Some(node) = nodes.remove(&first_leader) {
            killed.push(node.kill());
        }
        leader = wait_for_leader(&*coordinator, Some(first_leader))?;
        let elected = killed_at.elapsed();
        while acknowledged.lock().len() == acknowledged_before {
            if killed_at.elapsed() > Duration::from_secs(30) {
                return Err("no write acknowledged after the failover".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        println!(
            "{leader} elected {:.0} ms after the kill (session timeout {} ms); writes resumed after {:.0} ms",
            elected.as_secs_f64() * 1e3,
            SESSION_TIMEOUT.as_millis(),
            killed_at.elapsed().as_secs_f64() * 1e3
        );
    }
    std::thread::sleep(run_for / 2);
    stop.store(true, Ordering::Relaxed);
    for producer in producers {
        producer.join().map_err(|_| "producer panicked")?;
    }

    let new_leader = handles.lock().get(&leader).cloned().ok_or("no leader")?;
    let present = committed_values(&new_leader)?;
    let acknowledged = acknowledged.lock();
    let lost: Vec<&String> = acknowledged.difference(&present).collect();
    drop(new_leader);
    handles.lock().clear();
    for (_, node) in nodes {
        node.shutdown()?;
    }
    drop(killed);
    if lost.is_empty() {
        println!(
            "OK: all {} acknowledged records are committed on {leader}",
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

/// Appends batches of 10 records with `acks=all` to the current leader until
/// `stop`. Only a batch whose append returned `Ok` counts as acknowledged; a
/// failed one (leader gone, ISR too small, timeout) has an unknown outcome
/// and is simply not counted.
fn produce(
    producer: u32,
    coordinator: &dyn Coordinator,
    handles: &Mutex<BTreeMap<NodeId, ReplicatedLog>>,
    acknowledged: &Mutex<BTreeSet<String>>,
    stop: &AtomicBool,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let leader = coordinator
            .log_state(LOG)
            .ok()
            .flatten()
            .and_then(|s| s.leader)
            .and_then(|l| handles.lock().get(&l).cloned());
        let Some(leader) = leader else {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        let values: Vec<String> = (0..10).map(|i| format!("p{producer}-{n}-{i}")).collect();
        n += 1;
        match leader.append_values(&values, Acks::All) {
            Ok(_) => acknowledged.lock().extend(values),
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn wait_for_leader(coordinator: &dyn Coordinator, not: Option<NodeId>) -> Result<NodeId, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let leader = coordinator.log_state(LOG)?.and_then(|s| s.leader);
        match leader {
            Some(leader) if Some(leader) != not => return Ok(leader),
            _ if Instant::now() >= deadline => return Err("no leader within 30 s".into()),
            _ => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

fn committed_values(log: &ReplicatedLog) -> Result<BTreeSet<String>, BoxError> {
    let mut values = BTreeSet::new();
    let mut next = Offset(0);
    loop {
        let batches = log.read(next, 4 << 20, Isolation::Committed)?;
        if batches.is_empty() {
            return Ok(values);
        }
        for batch in &batches {
            for record in batch.records() {
                let record = record?;
                if record.offset >= next {
                    values.insert(String::from_utf8_lossy(&record.value).into_owned());
                }
            }
            next = batch.next_offset();
        }
    }
}

// ---- One process per node ---------------------------------------------------------

/// One node per process on ZooKeeper: every process has its own
/// coordinator, and whichever sees all three nodes live first creates the
/// log (the others find it created). Any process may be killed.
fn run_one_node_per_process_on_zookeeper(id: NodeId, connect: &str) -> Result<(), BoxError> {
    let coordinator = zookeeper_coordinator(connect, ZOOKEEPER_CHROOT)?;
    println!("{id}: coordinator on ZooKeeper at {connect}, chroot {ZOOKEEPER_CHROOT}");
    let creator = Arc::clone(&coordinator);
    std::thread::spawn(move || loop {
        if creator
            .live_nodes()
            .is_ok_and(|live| live.len() == NODES as usize)
        {
            match creator.create_log(LOG, REPLICAS.to_vec()) {
                Ok(_) => println!("all {NODES} nodes live: {LOG} created"),
                // Another process created it first (or an earlier run did).
                Err(e) => println!("{LOG} not created here: {e}"),
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    });
    serve_one_node(id, coordinator)
}

fn run_one_node_per_process(id: NodeId) -> Result<(), BoxError> {
    let coordinator_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, COORDINATOR_PORT));
    let coordinator: Arc<dyn Coordinator> = if id == NodeId(0) {
        let coordinator = MemoryCoordinator::new(Arc::new(SystemClock));
        coordinator_shim::serve(coordinator.clone(), coordinator_addr)?;
        println!("{id} hosts the coordinator on {coordinator_addr} (demo only; do not kill it)");
        // The log is created once all three nodes are live, so that node 1,
        // its preferred leader, leads it first.
        let creator = coordinator.clone();
        std::thread::spawn(move || loop {
            if creator
                .live_nodes()
                .is_ok_and(|live| live.len() == NODES as usize)
            {
                match creator.create_log(LOG, REPLICAS.to_vec()) {
                    Ok(_) => println!("all {NODES} nodes live: {LOG} created"),
                    Err(e) => eprintln!("cannot create {LOG}: {e}"),
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        });
        Arc::new(coordinator)
    } else {
        let remote = coordinator_shim::RemoteCoordinator::new(coordinator_addr);
        // Node 0's process may not be up yet.
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Err(error) = remote.live_nodes() {
            if Instant::now() >= deadline {
                return Err(format!("no coordinator at {coordinator_addr}: {error}").into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Arc::new(remote)
    };
    serve_one_node(id, coordinator)
}

/// Runs node `id` of the multi-process mode on `coordinator` until killed.
fn serve_one_node(id: NodeId, coordinator: Arc<dyn Coordinator>) -> Result<(), BoxError> {
    let addr_of = |n: u32| SocketAddr::from((Ipv4Addr::LOCALHOST, NODE_PORT_BASE + n as u16));
    let dir = tempfile::tempdir()?;
    let listener = bind(addr_of(id.0))?;
    let peers = (0..NODES)
        .filter(|n| *n != id.0)
        .map(|n| (NodeId(n), addr_of(n)))
        .collect();
    let node = start_node(id, listener, peers, coordinator, dir.path())?;
    println!(
        "{id} listening on {}; waiting for all {NODES} nodes",
        addr_of(id.0)
    );
    let log = node.node.wait_for_log(LOG, Duration::from_secs(600))?;
    println!("{id} hosts {LOG} (replicas {REPLICAS:?}); Ctrl-C to stop");

    // Produce while this node leads; report once a second.
    let records = AtomicU64::new(0);
    let mut last_report = Instant::now();
    let mut was_leader = false;
    loop {
        let leader = log.is_leader();
        if leader != was_leader {
            println!(
                "{id} is now {} in epoch {}",
                if leader { "the leader" } else { "a follower" },
                log.leader_epoch()
            );
            was_leader = leader;
        }
        if leader {
            let values: Vec<String> = (0..10).map(|i| format!("{id}-{i}")).collect();
            if log.append_values(&values, Acks::All).is_ok() {
                records.fetch_add(10, Ordering::Relaxed);
            }
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            println!(
                "  {id}: {:?}, LEO {}, HW {}, ISR {:?}, {} records acknowledged here",
                log.role(),
                log.log_end_offset(),
                log.high_watermark(),
                log.in_sync_replicas(),
                records.load(Ordering::Relaxed)
            );
        }
    }
}
