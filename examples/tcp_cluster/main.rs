//! Three isrlog nodes talking over loopback TCP, in one process or in three.
//!
//! ```text
//! cargo run --release --example tcp_cluster              # one process, 3 nodes
//! cargo run --release --example tcp_cluster -- --short   # the quick run CI does
//!
//! # or one process per node, plus the demo coordinator's own process. Run
//! # the BUILT binary, not `cargo run ... &`, so that a kill hits the node:
//! cargo build --release --example tcp_cluster
//! bin=target/release/examples/tcp_cluster
//! $bin --coordinator &                      # demo metadata service: never kill it
//! $bin --node 0 --data-dir /tmp/isr > /tmp/isr-0.log &
//! $bin --node 1 --data-dir /tmp/isr > /tmp/isr-1.log &   # the first leader
//! $bin --node 2 --data-dir /tmp/isr > /tmp/isr-2.log &
//! cat /tmp/isr/node-*.status                # role, epoch, LEO, HW, ISR, acks
//! kill -9 $(pgrep -f -- '--node 1 ')     # the first leader; then restart it:
//! $bin --node 1 --data-dir /tmp/isr >> /tmp/isr-1.log &
//! kill -9 $(pgrep -f -- '--node 2 ')     # or lose node 2 for good, and
//! $bin --node 3 --replace 2 --data-dir /tmp/isr > /tmp/isr-3.log &  # replace it
//! touch /tmp/isr/stop                       # the writers stop; wait for quiesced=1
//! $bin verify --data-dir /tmp/isr           # every acknowledged write on every node?
//!
//! # on a real ZooKeeper instead of the demo coordinator (any node may die):
//! cargo run --release --features zookeeper --example tcp_cluster -- --zookeeper 127.0.0.1:2181
//! cargo run --release --features zookeeper --example tcp_cluster -- --node 0 --zookeeper 127.0.0.1:2181
//! ```
//!
//! Each node has a [`TcpServer`] (127.0.0.1:7000+N in the multi-process mode,
//! `--port-base P` moves it to P+N; a free port otherwise) and a
//! [`TcpTransport`] that knows the others' addresses. In the one-process
//! mode node 0 hosts a [`MemoryCoordinator`] and serves it to the other
//! nodes over a tiny line-based protocol (`coordinator_shim.rs`); in the
//! multi-process mode a `--coordinator` process of its own does (on
//! 127.0.0.1:7100, or P+100), so that every node process may be killed.
//!
//! **Demo only:** the coordinator shim is not fault tolerant — its process
//! *is* the metadata service, so do not kill it. It stays only as the
//! zero-dependency default: with `--zookeeper HOST:PORT[,HOST:PORT...]`
//! (feature `zookeeper`) every node instead has its own `ZkCoordinator` on
//! that ensemble, under the chroot `/isrlog-tcp-cluster` (one per run in the
//! one-process mode), as a production deployment would.
//!
//! Multi-process mode: each node keeps its log in `--data-dir DIR`
//! (`DIR/node-N/`; several nodes may share DIR), so a node restarted on the
//! same DIR comes back with its data (without `--data-dir`, a fresh
//! temporary directory). There is no append request over the wire, so the
//! writer is in the leader's process: while a node leads it appends batches
//! of unique values (`n<node>-<process start ms>-<sequence>`) with
//! `acks=all`, min ISR 2, and appends each acknowledged `offset value` to
//! `DIR/acks-node-N.journal` before the next batch, in one unbuffered write:
//! a `kill -9` loses nothing it journaled. Each node rewrites
//! `DIR/node-N.status` ten times a second. `touch DIR/stop` stops the
//! writers; the leader's status says `quiesced=1` once every replica holds
//! its whole log. `verify --data-dir DIR [--nodes 0,1,2]` then reads the
//! listed nodes' log directories read-only (it recovers a copy) and exits
//! non-zero listing every journaled write missing from its offset on any of
//! them. A node lost for good is replaced by the spare node 3: `--node 3
//! --replace N` reassigns the log to 3 in N's place (SPEC 3.10); once node
//! 3 is in sync and N is gone from `replicas=` in the status files, `verify
//! --nodes` the new set. `.ci/tcp_cluster_kill_test` does all this with
//! three `kill -9`s of the leader and one of a follower, replaced.
//!
//! The one-process mode runs producers with `acks=all`, kills the leader
//! after a while (`--no-kill-leader` turns that off), watches another node
//! take over, and checks that every acknowledged record is committed on the
//! new leader: it exits non-zero if one is missing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
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
/// Node ids the multi-process mode accepts: the log's three and one spare
/// (node 3) to replace a dead one with (`--node 3 --replace N`). Every node
/// knows all their addresses; a node not running is simply unreachable.
const NODES_MAX: u32 = 4;
/// Node 0 hosts the coordinator, so it is the last replica: the leader is
/// the first live in-sync replica in this order, so node 1 leads first.
const REPLICAS: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(0)];
const NODE_PORT_BASE: u16 = 7000;
/// The coordinator of the multi-process mode listens this far above `--port-base`.
const COORDINATOR_PORT_OFFSET: u16 = 100;
const SESSION_TIMEOUT: Duration = Duration::from_millis(1000);

fn main() -> Result<(), BoxError> {
    use std::io::IsTerminal as _;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        // Log lines go to stdout: colours only on a terminal, never in a pipe.
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let args: Vec<String> = std::env::args().collect();
    let value_of = |flag: &str| -> Result<Option<&String>, BoxError> {
        match args.iter().position(|a| a == flag) {
            Some(i) => Ok(Some(
                args.get(i + 1)
                    .ok_or_else(|| format!("{flag} needs a value"))?,
            )),
            None => Ok(None),
        }
    };
    let short = args.iter().any(|a| a == "--short");
    let kill_leader = !args.iter().any(|a| a == "--no-kill-leader");
    let zookeeper = value_of("--zookeeper")?.cloned();
    let processes = Processes {
        port_base: match value_of("--port-base")? {
            Some(p) => p.parse().map_err(|e| format!("--port-base {p}: {e}"))?,
            None => NODE_PORT_BASE,
        },
        data_dir: value_of("--data-dir")?.map(std::path::PathBuf::from),
        replace: None,
    };
    if processes.port_base > u16::MAX - COORDINATOR_PORT_OFFSET {
        return Err("--port-base is too high: the coordinator listens 100 above it".into());
    }
    if args.get(1).is_some_and(|a| a == "verify") {
        let data_dir = processes
            .data_dir
            .as_deref()
            .ok_or("verify needs --data-dir DIR")?;
        let nodes: Vec<u32> = match value_of("--nodes")? {
            Some(list) => list
                .split(',')
                .map(|n| n.parse().map_err(|e| format!("--nodes {list}: {e}")))
                .collect::<Result<_, _>>()?,
            None => (0..NODES).collect(),
        };
        return run_verify(data_dir, &nodes);
    }
    if args.iter().any(|a| a == "--coordinator") {
        return run_coordinator_process(&processes);
    }
    match value_of("--node")? {
        Some(id) => {
            let id: u32 = id.parse().map_err(|e| format!("--node {id}: {e}"))?;
            if id >= NODES_MAX {
                return Err(format!("--node must be below {NODES_MAX}").into());
            }
            let replace = match value_of("--replace")? {
                Some(dead) => Some(NodeId(
                    dead.parse().map_err(|e| format!("--replace {dead}: {e}"))?,
                )),
                None => None,
            };
            if replace == Some(NodeId(id)) {
                return Err(format!("--replace {id}: a node cannot replace itself").into());
            }
            let processes = Processes {
                replace,
                ..processes
            };
            match zookeeper {
                Some(connect) => {
                    run_one_node_per_process_on_zookeeper(NodeId(id), &connect, &processes)
                }
                None => run_one_node_per_process(NodeId(id), &processes),
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
fn run_one_node_per_process_on_zookeeper(
    id: NodeId,
    connect: &str,
    processes: &Processes,
) -> Result<(), BoxError> {
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
    serve_one_node(id, coordinator, processes)
}

/// Where the processes of the multi-process mode listen and keep their data.
struct Processes {
    /// Node N listens on `port_base + N`, the coordinator on `port_base + 100`.
    port_base: u16,
    /// The nodes' data (`node-N/`), the writers' acknowledgement journals
    /// (`acks-node-N.journal`), the status files (`node-N.status`) and the
    /// stop file (`stop`). `None`: a fresh temporary directory per process,
    /// so a restarted node comes back empty.
    data_dir: Option<std::path::PathBuf>,
    /// `--node N --replace DEAD`: once started, node N takes the place of
    /// node DEAD, gone for good, in every log ([`Node::replace_node`]).
    replace: Option<NodeId>,
}

impl Processes {
    fn node_addr(&self, n: u32) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port_base + n as u16))
    }

    fn coordinator_addr(&self) -> SocketAddr {
        SocketAddr::from((
            Ipv4Addr::LOCALHOST,
            self.port_base + COORDINATOR_PORT_OFFSET,
        ))
    }
}

/// The demo coordinator in a process of its own (`--coordinator`), so that
/// every node process may be killed: the log is created once all three
/// nodes are live, so that node 1, its preferred leader, leads it first.
/// Demo only: this process *is* the metadata service; do not kill it.
fn run_coordinator_process(processes: &Processes) -> Result<(), BoxError> {
    let coordinator = MemoryCoordinator::new(Arc::new(SystemClock));
    let addr = coordinator_shim::serve(coordinator.clone(), processes.coordinator_addr())?;
    println!("coordinator on {addr} (demo only; do not kill it)");
    loop {
        if coordinator
            .live_nodes()
            .is_ok_and(|live| live.len() == NODES as usize)
        {
            match coordinator.create_log(LOG, REPLICAS.to_vec()) {
                Ok(_) => println!("all {NODES} nodes live: {LOG} created"),
                Err(e) => eprintln!("cannot create {LOG}: {e}"),
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The shim serves from its own threads; this process only has to live.
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn run_one_node_per_process(id: NodeId, processes: &Processes) -> Result<(), BoxError> {
    let coordinator_addr = processes.coordinator_addr();
    let remote = coordinator_shim::RemoteCoordinator::new(coordinator_addr);
    // The coordinator's process may not be up yet.
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(error) = remote.live_nodes() {
        if Instant::now() >= deadline {
            return Err(format!(
                "no coordinator at {coordinator_addr} (start `tcp_cluster --coordinator` first): {error}"
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    serve_one_node(id, Arc::new(remote), processes)
}

/// Appends acknowledged `(offset, value)` pairs to a journal file, one
/// `offset value` line each. Each batch's lines go out in one `write` on an
/// unbuffered `O_APPEND` file, so once `record` returns they are in the
/// kernel: a `kill -9` of this process cannot lose them (a power loss could;
/// that would need an fsync per batch).
struct AckJournal(std::fs::File);

impl AckJournal {
    fn open(path: &std::path::Path) -> Result<AckJournal, BoxError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open the journal {}: {e}", path.display()))?;
        Ok(AckJournal(file))
    }

    fn record(&mut self, first: Offset, values: &[String]) -> std::io::Result<()> {
        use std::io::Write as _;
        let mut lines = String::new();
        for (i, value) in values.iter().enumerate() {
            lines.push_str(&format!("{} {value}\n", first.0 + i as u64));
        }
        self.0.write_all(lines.as_bytes())
    }
}

/// Runs node `id` of the multi-process mode on `coordinator` until killed.
/// While it leads (and `DATA_DIR/stop` does not exist) it is also the
/// writer: it appends batches of 10 unique values (`n<id>-<start ms>-<seq>`)
/// with `acks=all` and journals each acknowledged one.
fn serve_one_node(
    id: NodeId,
    coordinator: Arc<dyn Coordinator>,
    processes: &Processes,
) -> Result<(), BoxError> {
    let temp;
    let dir = match &processes.data_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.clone()
        }
        None => {
            temp = tempfile::tempdir()?;
            println!(
                "{id}: no --data-dir, so its data is in {} and lost when it stops",
                temp.path().display()
            );
            temp.path().to_path_buf()
        }
    };
    let listener = bind(processes.node_addr(id.0))?;
    let peers = (0..NODES_MAX)
        .filter(|n| *n != id.0)
        .map(|n| (NodeId(n), processes.node_addr(n)))
        .collect();
    let node = start_node(id, listener, peers, coordinator, &dir)?;
    println!(
        "{id} listening on {}, data in {}; waiting for all {NODES} nodes",
        processes.node_addr(id.0),
        dir.join(format!("node-{}", id.0)).display()
    );
    if let Some(dead) = processes.replace {
        // SPEC 3.10: every log with the dead node among its replicas moves
        // to this node in its place. This node fetches the log from the
        // leader, joins the ISR, and the controller then drops the dead
        // node from the log. Retried while the coordinator refuses (this
        // node's session may not be visible yet).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match node.node.replace_node(dead, id) {
                Ok(states) => {
                    println!("{id} replaces {dead} in {} log(s)", states.len());
                    break;
                }
                Err(error) if Instant::now() < deadline => {
                    println!("{id} cannot replace {dead} yet ({error}); retrying");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(error) => return Err(format!("{id} cannot replace {dead}: {error}").into()),
            }
        }
    }
    let log = node.node.wait_for_log(LOG, Duration::from_secs(600))?;
    println!(
        "{id} hosts {LOG} (replicas {REPLICAS:?}), LEO {} after restart",
        log.log_end_offset()
    );

    let mut journal = AckJournal::open(&dir.join(format!("acks-node-{}.journal", id.0)))?;
    let status_path = dir.join(format!("node-{}.status", id.0));
    let stop_path = dir.join("stop");
    let writer = format!(
        "n{}-{}",
        id.0,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    let mut seq = 0u64;
    let mut acknowledged = 0u64;
    let mut last_report = Instant::now();
    let mut last_status = Instant::now() - Duration::from_secs(1);
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
        let stopped = stop_path.exists();
        if leader && !stopped {
            let values: Vec<String> = (0..10)
                .map(|i| format!("{writer}-{:08}", seq * 10 + i))
                .collect();
            seq += 1;
            // Only an `Ok` is an acknowledgement; a failed append has an
            // unknown outcome and is not journaled.
            if let Ok(outcome) = log.append_values(&values, Acks::All) {
                journal.record(outcome.base_offset, &values)?;
                acknowledged += values.len() as u64;
            }
            // At most ~10 000 records a second: at full speed a node left
            // running fills its --data-dir by tens of MB a second.
            std::thread::sleep(Duration::from_millis(1));
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
        if last_status.elapsed() >= Duration::from_millis(100) {
            last_status = Instant::now();
            let isr = log.in_sync_replicas();
            let (leo, hw) = (log.log_end_offset(), log.high_watermark());
            // Quiesced: writes stopped, and every replica is in sync with the
            // leader's whole log (HW = LEO = the smallest in-sync LEO).
            let replicas = log.replicas();
            let quiesced = leader && stopped && hw == leo && isr.len() == replicas.len();
            let list = |nodes: &[NodeId]| {
                nodes
                    .iter()
                    .map(|n| n.0.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let status = format!(
                "role={} epoch={} leo={} hw={} replicas={} isr={} acked={} quiesced={}\n",
                if leader { "leader" } else { "follower" },
                log.leader_epoch(),
                leo.0,
                hw.0,
                list(&replicas),
                list(&isr),
                acknowledged,
                u8::from(quiesced)
            );
            // Written whole then renamed, so a reader never sees half of it.
            let partial = status_path.with_extension("status.tmp");
            std::fs::write(&partial, status)?;
            std::fs::rename(&partial, &status_path)?;
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            println!(
                "  {id}: {:?}, LEO {}, HW {}, ISR {:?}, {acknowledged} records acknowledged by this process",
                log.role(),
                log.log_end_offset(),
                log.high_watermark(),
                log.in_sync_replicas(),
            );
        }
    }
}

// ---- verify ---------------------------------------------------------------------------

/// `verify --data-dir DIR [--nodes 0,1,2]`: checks that every value the
/// writers journaled as acknowledged is at its offset in the log of every
/// listed node. It reads the nodes' data directories without touching them:
/// each log directory is copied and the copy opened (recovery then runs on
/// the copy only), so it is safe on a live node's files. Run it once writes
/// have stopped and the survivors have caught up (`touch DIR/stop`, wait for
/// `quiesced=1` in the leader's `node-N.status`), or a lagging survivor is
/// reported as missing the newest writes. Exits non-zero listing every
/// missing value.
fn run_verify(data_dir: &std::path::Path, nodes: &[u32]) -> Result<(), BoxError> {
    // The acknowledged writes, from every writer's journal.
    let mut acknowledged: Vec<(u64, String)> = Vec::new();
    let mut journals = 0;
    for entry in std::fs::read_dir(data_dir)
        .map_err(|e| format!("cannot read --data-dir {}: {e}", data_dir.display()))?
    {
        let path = entry?.path();
        let is_journal = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("acks-node-") && n.ends_with(".journal"));
        if !is_journal {
            continue;
        }
        journals += 1;
        let text = std::fs::read_to_string(&path)?;
        // A last line without its newline was being written when the writer
        // died, so it was never reported as acknowledged; `lines()` on the
        // complete part only.
        let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        for (n, line) in complete.lines().enumerate() {
            let (offset, value) = line
                .split_once(' ')
                .ok_or_else(|| format!("{} line {}: not `offset value`", path.display(), n + 1))?;
            acknowledged.push((offset.parse()?, value.to_owned()));
        }
    }
    if journals == 0 {
        return Err(format!("no acks-node-*.journal in {}", data_dir.display()).into());
    }
    let unique: BTreeSet<&str> = acknowledged.iter().map(|(_, v)| v.as_str()).collect();
    if unique.len() != acknowledged.len() {
        return Err("a value was journaled twice: values are not unique".into());
    }

    let mut missing: Vec<String> = Vec::new();
    for &n in nodes {
        let log_dir = data_dir
            .join(format!("node-{n}"))
            .join(format!("log-{}", LOG.0));
        let records = read_log_copy(&log_dir)?;
        let mut missing_here = 0;
        for (offset, value) in &acknowledged {
            let found = records.get(offset);
            if found != Some(value) {
                missing_here += 1;
                missing.push(format!(
                    "node {n}: offset {offset} value {value} (found {})",
                    found.map_or("nothing", |f| f.as_str())
                ));
            }
        }
        println!(
            "node {n}: {} records up to offset {}, {} of {} acknowledged writes present",
            records.len(),
            records.keys().next_back().map_or(0, |o| o + 1),
            acknowledged.len() - missing_here,
            acknowledged.len()
        );
    }
    if missing.is_empty() {
        println!(
            "OK: all {} acknowledged writes ({journals} journals) are on nodes {nodes:?}",
            acknowledged.len()
        );
        Ok(())
    } else {
        for line in &missing {
            eprintln!("MISSING {line}");
        }
        eprintln!(
            "LOST: {} acknowledged writes missing (of {} on each of {} nodes)",
            missing.len(),
            acknowledged.len(),
            nodes.len()
        );
        std::process::exit(1);
    }
}

/// Every record of the log in `log_dir`, by offset, read from a copy.
fn read_log_copy(log_dir: &std::path::Path) -> Result<BTreeMap<u64, String>, BoxError> {
    let copy = tempfile::tempdir()?;
    copy_dir(log_dir, copy.path())
        .map_err(|e| format!("cannot copy {}: {e}", log_dir.display()))?;
    let log = isrlog::Log::open(
        copy.path(),
        isrlog::LogConfig::default(),
        Arc::new(SystemClock),
    )?;
    let mut records = BTreeMap::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let read = log.read(next, 4 << 20)?;
        let Some(after) = read.next_offset() else {
            break;
        };
        for batch in read.batches() {
            for record in batch?.records() {
                let record = record?;
                if record.offset >= next {
                    records.insert(
                        record.offset.0,
                        String::from_utf8_lossy(&record.value).into_owned(),
                    );
                }
            }
        }
        next = after;
    }
    Ok(records)
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
