//! Real Apache ZooKeeper servers for tests (features `testing` and
//! `zookeeper`): [`ZkServer`] starts a standalone server, [`ZkEnsemble`]
//! three quorum peers, each a `java` child process on free loopback ports
//! with a private data directory, and kills them on drop.
//!
//! This module owns finding `java` and the ZooKeeper jars, writing each
//! server's `zoo.cfg`, waiting until a server serves and stopping it; it owns
//! nothing of the coordinator that talks to it. A missing `java` or missing
//! jars is an error that says what to install: a test against ZooKeeper must
//! fail, never skip, where ZooKeeper cannot run.
//!
//! Where the jars are looked for, in order: `$ISRLOG_ZOOKEEPER_CLASSPATH`
//! (a Java class path), `$ZOOKEEPER_HOME/lib/*.jar` (the upstream tarball),
//! `/usr/share/java/zookeeper.jar` (Debian's `zookeeper` package; its
//! manifest names the jars it needs) and `/usr/share/zookeeper/lib/*.jar`.
//! `java` is `$JAVA` or the first `java` on `PATH`.
//!
//! Servers run with `tickTime=50` so that sessions as short as 100 ms can be
//! negotiated (ZooKeeper's minimum is two ticks) and an expired session is
//! noticed within 50 ms, and with `maxSessionTimeout=60000`.

use std::fmt;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to start serving (a cold JVM on a busy
/// two-core machine takes a few seconds).
const START_WAIT_MAX: Duration = Duration::from_secs(60);
/// How long one four-letter-word probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// How many times a server is started on fresh ports when the first ones
/// turned out to be taken (free ports are picked, then bound by the JVM:
/// another process may bind them in between).
const PORT_ATTEMPTS: usize = 3;
/// The server's tick: sessions of 2 ticks (100 ms) and more are accepted.
const TICK: Duration = Duration::from_millis(50);

/// Why a ZooKeeper server could not be started or reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkServerError {
    /// What went wrong, with what to do about it.
    pub reason: String,
}

impl fmt::Display for ZkServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for ZkServerError {}

fn error(reason: impl Into<String>) -> ZkServerError {
    ZkServerError {
        reason: reason.into(),
    }
}

/// What is needed to run a server: the `java` binary and the class path.
#[derive(Debug, Clone)]
struct Runtime {
    java: PathBuf,
    class_path: String,
}

impl Runtime {
    /// Finds `java` and the ZooKeeper jars, or says what is missing.
    fn find() -> Result<Runtime, ZkServerError> {
        let java = find_java()?;
        let class_path = find_class_path()?;
        Ok(Runtime { java, class_path })
    }
}

fn find_java() -> Result<PathBuf, ZkServerError> {
    let java = std::env::var_os("JAVA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("java"));
    match Command::new(&java)
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => Ok(java),
        Ok(status) => Err(error(format!(
            "`{} -version` failed ({status}): install a Java runtime (Debian: apt-get install -y default-jre-headless) or set $JAVA",
            java.display()
        ))),
        Err(e) => Err(error(format!(
            "cannot run `{}` ({e}): install a Java runtime (Debian: apt-get install -y default-jre-headless) or set $JAVA",
            java.display()
        ))),
    }
}

fn jars_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut jars: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "jar"))
        .collect();
    jars.sort();
    jars
}

fn class_path_of(jars: &[PathBuf]) -> String {
    jars.iter()
        .map(|jar| jar.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

fn find_class_path() -> Result<String, ZkServerError> {
    if let Some(class_path) = std::env::var_os("ISRLOG_ZOOKEEPER_CLASSPATH") {
        return Ok(class_path.to_string_lossy().into_owned());
    }
    let mut looked = Vec::new();
    if let Some(home) = std::env::var_os("ZOOKEEPER_HOME") {
        let lib = PathBuf::from(home).join("lib");
        let jars = jars_in(&lib);
        if jars.iter().any(|jar| is_zookeeper_jar(jar)) {
            return Ok(class_path_of(&jars));
        }
        looked.push(format!("{}/*.jar", lib.display()));
    }
    let debian = Path::new("/usr/share/java/zookeeper.jar");
    if debian.is_file() {
        return Ok(debian.display().to_string());
    }
    looked.push(debian.display().to_string());
    let lib = Path::new("/usr/share/zookeeper/lib");
    let jars = jars_in(lib);
    if jars.iter().any(|jar| is_zookeeper_jar(jar)) {
        return Ok(class_path_of(&jars));
    }
    looked.push(format!("{}/*.jar", lib.display()));
    Err(error(format!(
        "no ZooKeeper jars found (looked at {}): install them (Debian: apt-get update && apt-get install -y zookeeper), \
         or set $ZOOKEEPER_HOME to an unpacked ZooKeeper release, or $ISRLOG_ZOOKEEPER_CLASSPATH to a class path",
        looked.join(", ")
    )))
}

fn is_zookeeper_jar(jar: &Path) -> bool {
    jar.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with("zookeeper-") || name == "zookeeper.jar")
}

/// A loopback port nobody listens on right now.
fn free_port() -> Result<u16, ZkServerError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| {
        error(format!(
            "cannot bind a loopback port to find a free one: {e}"
        ))
    })?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|e| error(format!("cannot read a bound port: {e}")))
}

/// Sends a four-letter word to a server and returns its answer.
fn four_letter_word(port: u16, word: &str) -> std::io::Result<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
    stream.write_all(word.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// The server's `srvr` answer if it serves clients (standalone, leader or
/// follower of a quorum), else `None`.
fn serving_mode(port: u16) -> Option<String> {
    let answer = four_letter_word(port, "srvr").ok()?;
    answer
        .lines()
        .find_map(|line| line.strip_prefix("Mode: "))
        .map(|mode| mode.trim().to_owned())
}

/// One `java` server process and its files.
#[derive(Debug)]
struct Process {
    name: String,
    dir: PathBuf,
    client_port: u16,
    child: Option<Child>,
}

impl Process {
    fn config_path(&self) -> PathBuf {
        self.dir.join("zoo.cfg")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    fn spawn(&mut self, runtime: &Runtime, main_class: &str) -> Result<(), ZkServerError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| error(format!("cannot open {}: {e}", self.log_path().display())))?;
        let log_err = log
            .try_clone()
            .map_err(|e| error(format!("cannot open {}: {e}", self.log_path().display())))?;
        let child = Command::new(&runtime.java)
            .args([
                "-Xms32m",
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Dzookeeper.admin.enableServer=false",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-cp",
                &runtime.class_path,
                main_class,
            ])
            .arg(self.config_path())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| {
                error(format!(
                    "cannot start {} ({} {main_class}): {e}",
                    self.name,
                    runtime.java.display()
                ))
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// The last lines of the server's output, for error messages.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(20);
        lines[from..].join("\n")
    }

    /// `Some(status)` if the process has exited.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Already exited is fine; anything else leaves a process the
            // wait below reaps anyway.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until every process of `processes` serves, or fails naming the
/// first that died or the ones still not serving at the deadline.
fn wait_serving(processes: &mut [&mut Process], timeout: Duration) -> Result<(), ZkServerError> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut waiting = Vec::new();
        for process in processes.iter_mut() {
            if let Some(status) = process.exited() {
                return Err(error(format!(
                    "{} exited ({status}) before serving; its output ends with:\n{}",
                    process.name,
                    process.log_tail()
                )));
            }
            if serving_mode(process.client_port).is_none() {
                waiting.push(process.name.clone());
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let tails: Vec<String> = processes
                .iter()
                .map(|p| format!("{}:\n{}", p.name, p.log_tail()))
                .collect();
            return Err(error(format!(
                "{} not serving within {timeout:?}; output:\n{}",
                waiting.join(", "),
                tails.join("\n")
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn write_file(path: &Path, text: &str) -> Result<(), ZkServerError> {
    std::fs::write(path, text).map_err(|e| error(format!("cannot write {}: {e}", path.display())))
}

fn common_config(data_dir: &Path, client_port: u16) -> String {
    format!(
        "tickTime={tick}\n\
         dataDir={data}\n\
         clientPort={client_port}\n\
         clientPortAddress=127.0.0.1\n\
         minSessionTimeout={min_session}\n\
         maxSessionTimeout=60000\n\
         maxClientCnxns=0\n\
         4lw.commands.whitelist=*\n\
         admin.enableServer=false\n\
         snapCount=100000\n",
        tick = TICK.as_millis(),
        data = data_dir.display(),
        min_session = (TICK * 2).as_millis(),
    )
}

/// A standalone ZooKeeper server (`ZooKeeperServerMain`) on a free loopback
/// port with its own data directory, killed (and its directory removed) on
/// drop.
#[derive(Debug)]
pub struct ZkServer {
    runtime: Runtime,
    process: Process,
    _dir: tempfile::TempDir,
}

impl ZkServer {
    /// Starts a server and waits until it serves. Errs naming what is
    /// missing (`java`, the jars) or why the server did not come up.
    pub fn start() -> Result<ZkServer, ZkServerError> {
        let runtime = Runtime::find()?;
        let mut last_error = error("no attempt made");
        for _ in 0..PORT_ATTEMPTS {
            let dir = tempfile::Builder::new()
                .prefix("isrlog-zookeeper-")
                .tempdir()
                .map_err(|e| error(format!("cannot create a temporary directory: {e}")))?;
            let data_dir = dir.path().join("data");
            std::fs::create_dir_all(&data_dir)
                .map_err(|e| error(format!("cannot create {}: {e}", data_dir.display())))?;
            let mut server = ZkServer {
                runtime: runtime.clone(),
                process: Process {
                    name: "standalone ZooKeeper server".to_owned(),
                    dir: dir.path().to_path_buf(),
                    client_port: free_port()?,
                    child: None,
                },
                _dir: dir,
            };
            write_file(
                &server.process.config_path(),
                &common_config(&data_dir, server.process.client_port),
            )?;
            match server.resume() {
                Ok(()) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    /// The connect string of this server: `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.process.client_port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.process.client_port
    }

    /// Kills the server (SIGKILL: a crash), keeping its data directory.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the server again after [`ZkServer::kill`], on the same port
    /// and data directory, and waits until it serves: its sessions and data
    /// survive, as after a real restart.
    pub fn resume(&mut self) -> Result<(), ZkServerError> {
        if self.process.is_running() {
            return Ok(());
        }
        self.process.spawn(
            &self.runtime,
            "org.apache.zookeeper.server.ZooKeeperServerMain",
        )?;
        let outcome = wait_serving(&mut [&mut self.process], START_WAIT_MAX);
        if outcome.is_err() {
            self.process.kill();
        }
        outcome
    }

    /// Whether the server answers `srvr` as serving right now.
    pub fn is_serving(&self) -> bool {
        serving_mode(self.process.client_port).is_some()
    }
}

/// Three ZooKeeper quorum peers (`QuorumPeerMain`) on loopback, each with
/// its own ports and data directory, killed (and their directories
/// removed) on drop.
#[derive(Debug)]
pub struct ZkEnsemble {
    runtime: Runtime,
    peers: Vec<Process>,
    _dir: tempfile::TempDir,
}

/// Number of peers of a [`ZkEnsemble`].
pub const ENSEMBLE_PEERS: usize = 3;

impl ZkEnsemble {
    /// Starts three peers and waits until each serves (a quorum formed).
    pub fn start() -> Result<ZkEnsemble, ZkServerError> {
        let runtime = Runtime::find()?;
        let mut last_error = error("no attempt made");
        for _ in 0..PORT_ATTEMPTS {
            match ZkEnsemble::start_once(&runtime) {
                Ok(ensemble) => return Ok(ensemble),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    fn start_once(runtime: &Runtime) -> Result<ZkEnsemble, ZkServerError> {
        let dir = tempfile::Builder::new()
            .prefix("isrlog-zookeeper-ensemble-")
            .tempdir()
            .map_err(|e| error(format!("cannot create a temporary directory: {e}")))?;
        // Three ports per peer: clients, followers to the leader, election.
        let mut ports = Vec::with_capacity(ENSEMBLE_PEERS * 3);
        let mut holders = Vec::new();
        while ports.len() < ENSEMBLE_PEERS * 3 {
            // Hold each listener until all are picked, so no port repeats.
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .map_err(|e| error(format!("cannot bind a loopback port: {e}")))?;
            let port = listener
                .local_addr()
                .map_err(|e| error(format!("cannot read a bound port: {e}")))?
                .port();
            ports.push(port);
            holders.push(listener);
        }
        drop(holders);
        let servers: String = (0..ENSEMBLE_PEERS)
            .map(|i| {
                format!(
                    "server.{}=127.0.0.1:{}:{}\n",
                    i + 1,
                    ports[i * 3 + 1],
                    ports[i * 3 + 2]
                )
            })
            .collect();
        let mut peers = Vec::with_capacity(ENSEMBLE_PEERS);
        for i in 0..ENSEMBLE_PEERS {
            let peer_dir = dir.path().join(format!("peer-{}", i + 1));
            let data_dir = peer_dir.join("data");
            std::fs::create_dir_all(&data_dir)
                .map_err(|e| error(format!("cannot create {}: {e}", data_dir.display())))?;
            write_file(&data_dir.join("myid"), &format!("{}\n", i + 1))?;
            let config = format!(
                "{}initLimit=100\nsyncLimit=40\n{servers}",
                common_config(&data_dir, ports[i * 3])
            );
            let process = Process {
                name: format!("ZooKeeper peer {}", i + 1),
                dir: peer_dir,
                client_port: ports[i * 3],
                child: None,
            };
            write_file(&process.config_path(), &config)?;
            peers.push(process);
        }
        let mut ensemble = ZkEnsemble {
            runtime: runtime.clone(),
            peers,
            _dir: dir,
        };
        for peer in 0..ENSEMBLE_PEERS {
            ensemble.peers[peer].spawn(
                &ensemble.runtime,
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            )?;
        }
        let mut all: Vec<&mut Process> = ensemble.peers.iter_mut().collect();
        wait_serving(&mut all, START_WAIT_MAX)?;
        Ok(ensemble)
    }

    /// The connect string naming every peer.
    pub fn connect_string(&self) -> String {
        self.peers
            .iter()
            .map(|peer| format!("127.0.0.1:{}", peer.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index (0-based) of the peer that leads the quorum right now.
    pub fn leader(&self) -> Option<usize> {
        self.peers.iter().position(|peer| {
            peer.is_running() && serving_mode(peer.client_port).as_deref() == Some("leader")
        })
    }

    /// Kills peer `index` (SIGKILL), keeping its data directory.
    pub fn kill(&mut self, index: usize) {
        if let Some(peer) = self.peers.get_mut(index) {
            peer.kill();
        }
    }

    /// Starts peer `index` again after [`ZkEnsemble::kill`] and waits until
    /// it serves.
    pub fn resume(&mut self, index: usize) -> Result<(), ZkServerError> {
        let runtime = self.runtime.clone();
        let peer = self.peers.get_mut(index).ok_or_else(|| {
            error(format!(
                "no peer {index} in a {ENSEMBLE_PEERS}-peer ensemble"
            ))
        })?;
        if peer.is_running() {
            return Ok(());
        }
        peer.spawn(
            &runtime,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        )?;
        wait_serving(&mut [peer], START_WAIT_MAX)
    }

    /// Waits until every running peer serves again (after a leader was
    /// killed, the others elect a new one), up to `timeout`.
    pub fn wait_serving(&mut self, timeout: Duration) -> Result<(), ZkServerError> {
        let mut running: Vec<&mut Process> =
            self.peers.iter_mut().filter(|p| p.is_running()).collect();
        wait_serving(&mut running, timeout)
    }
}

/// How long a [`ZkProxy`] waits to connect to the server for a client.
const PROXY_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a [`ZkProxy`]'s acceptor looks for new clients and for stop.
const PROXY_POLL: Duration = Duration::from_millis(5);

/// A TCP proxy on a free loopback port in front of one ZooKeeper server,
/// which a test can cut: every connection through it is closed and new ones
/// are refused until it is restored. Give one node's coordinator the
/// proxy's connect string to partition that node alone from ZooKeeper.
/// Dropping it stops it and closes every connection.
#[derive(Debug)]
pub struct ZkProxy {
    port: u16,
    shared: std::sync::Arc<ProxyShared>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

#[derive(Debug)]
struct ProxyShared {
    target: SocketAddr,
    cut: std::sync::atomic::AtomicBool,
    stop: std::sync::atomic::AtomicBool,
    /// A handle of each side of every open connection, to close them.
    connections: std::sync::Mutex<Vec<TcpStream>>,
    /// Armed by [`ZkProxy::lose_reply_to_next_write`]: the path fragment
    /// to look for and how long to hold the connection silent.
    lose_reply: std::sync::Mutex<Option<LoseReply>>,
    /// How many replies were lost so far.
    replies_lost: std::sync::atomic::AtomicUsize,
    /// Armed by [`ZkProxy::hold_requests_from_next_write`]: the path
    /// fragment to look for.
    hold_from: std::sync::Mutex<Option<Vec<u8>>>,
    /// The connections holding their requests, each with its server side,
    /// for [`ZkProxy::release_held_requests`].
    held: std::sync::Mutex<Vec<(HeldRequests, TcpStream)>>,
    /// The first request of each connection, by opcode, leaving out
    /// pings, authentication and watch restoration.
    first_requests: std::sync::Mutex<Vec<i32>>,
}

/// The requests one connection holds back (see
/// [`ZkProxy::hold_requests_from_next_write`]).
type HeldRequests = std::sync::Arc<std::sync::Mutex<Held>>;

#[derive(Debug, Default)]
struct Held {
    holding: bool,
    frames: Vec<u8>,
}

/// Locks `mutex`, poisoned or not (a test thread that panicked holding it
/// must not hide the test's own failure).
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// What [`ZkProxy::lose_reply_to_next_write`] armed.
#[derive(Clone, Debug)]
struct LoseReply {
    path_fragment: Vec<u8>,
    hold: Duration,
}

/// ZooKeeper's opcodes of the writes a [`ZkProxy`] can lose the reply of:
/// `create`, `delete`, `setData`, `create2` and `multi`.
const WRITE_OPCODES: [i32; 5] = [1, 2, 5, 15, 14];

impl ProxyShared {
    fn close_all(&self) {
        let streams = match self.connections.lock() {
            Ok(mut streams) => std::mem::take(&mut *streams),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        for stream in streams {
            // Already closed by the other side is fine.
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl ZkProxy {
    /// Starts a proxy to the server at `connect` (`host:port`, one server).
    pub fn start(connect: &str) -> Result<ZkProxy, ZkServerError> {
        use std::net::ToSocketAddrs;
        use std::sync::atomic::{AtomicBool, Ordering};

        let target = connect
            .to_socket_addrs()
            .map_err(|e| error(format!("cannot resolve {connect}: {e}")))?
            .next()
            .ok_or_else(|| error(format!("{connect} resolves to no address")))?;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| error(format!("cannot bind a loopback port for a proxy: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| error(format!("cannot read a bound port: {e}")))?
            .port();
        listener.set_nonblocking(true).map_err(|e| {
            error(format!(
                "cannot make the proxy's listener non-blocking: {e}"
            ))
        })?;
        let shared = std::sync::Arc::new(ProxyShared {
            target,
            cut: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            connections: std::sync::Mutex::new(Vec::new()),
            lose_reply: std::sync::Mutex::new(None),
            replies_lost: std::sync::atomic::AtomicUsize::new(0),
            hold_from: std::sync::Mutex::new(None),
            held: std::sync::Mutex::new(Vec::new()),
            first_requests: std::sync::Mutex::new(Vec::new()),
        });
        let for_thread = std::sync::Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name(format!("zk-proxy-{port}"))
            .spawn(move || {
                while !for_thread.stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            if !for_thread.cut.load(Ordering::SeqCst) {
                                forward(&for_thread, client);
                            }
                        }
                        Err(_) => std::thread::sleep(PROXY_POLL),
                    }
                }
            })
            .map_err(|e| error(format!("cannot start the proxy thread: {e}")))?;
        Ok(ZkProxy {
            port,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The connect string of the proxy: `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Arms the proxy to lose one reply (SPEC 3.4, a write whose outcome
    /// is unknown): the next write request (`create`, `delete`, `setData`,
    /// `create2` or `multi`) whose bytes contain `path_fragment` is
    /// forwarded to the server, which applies it, but from then on nothing
    /// the server sends on that connection reaches the client — as a
    /// network that drops packets silently — and after `hold` the
    /// connection is closed, so the client reconnects (to the same session)
    /// through the proxy. Other connections are not affected.
    pub fn lose_reply_to_next_write(&self, path_fragment: &str, hold: Duration) {
        let armed = LoseReply {
            path_fragment: path_fragment.as_bytes().to_vec(),
            hold,
        };
        match self.shared.lose_reply.lock() {
            Ok(mut slot) => *slot = Some(armed),
            Err(poisoned) => *poisoned.into_inner() = Some(armed),
        }
    }

    /// How many replies the proxy has lost (see
    /// [`ZkProxy::lose_reply_to_next_write`]).
    pub fn replies_lost(&self) -> usize {
        self.shared
            .replies_lost
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Arms the proxy to delay a write in the network: the next write
    /// request (as for [`ZkProxy::lose_reply_to_next_write`]) whose bytes
    /// contain `path_fragment`, and everything its connection sends after
    /// it, is held back — nothing reaches the server, pings included — until
    /// [`ZkProxy::release_held_requests`] forwards it all, in order, on the
    /// same connection (if the server still has it open). Other
    /// connections, new ones included, are not affected.
    pub fn hold_requests_from_next_write(&self, path_fragment: &str) {
        *lock(&self.shared.hold_from) = Some(path_fragment.as_bytes().to_vec());
    }

    /// Forwards what every connection held back (see
    /// [`ZkProxy::hold_requests_from_next_write`]) and lets them through
    /// again.
    pub fn release_held_requests(&self) {
        use std::io::Write;

        for (held, server) in std::mem::take(&mut *lock(&self.shared.held)) {
            let mut held = lock(&held);
            // A connection the server closed meanwhile takes nothing.
            let _ = (&server).write_all(&held.frames);
            held.frames.clear();
            held.holding = false;
        }
    }

    /// How many connections hold their requests back (see
    /// [`ZkProxy::hold_requests_from_next_write`]): each armed write that
    /// came, until [`ZkProxy::release_held_requests`].
    pub fn holding_connections(&self) -> usize {
        lock(&self.shared.held).len()
    }

    /// The first request of every connection made through the proxy so
    /// far, by ZooKeeper opcode (`sync` is 9), in the order they came;
    /// pings, authentication and watch restoration are left out.
    pub fn first_requests(&self) -> Vec<i32> {
        lock(&self.shared.first_requests).clone()
    }

    /// Cuts every connection and refuses new ones (`true`), or lets
    /// clients through again (`false`).
    pub fn set_cut(&self, cut: bool) {
        self.shared
            .cut
            .store(cut, std::sync::atomic::Ordering::SeqCst);
        if cut {
            self.shared.close_all();
        }
    }
}

/// Connects `client` to the proxy's target and pumps bytes both ways on two
/// threads, which end when either side closes (or the proxy closes both).
fn forward(shared: &std::sync::Arc<ProxyShared>, client: TcpStream) {
    let Ok(server) = TcpStream::connect_timeout(&shared.target, PROXY_CONNECT_TIMEOUT) else {
        return;
    };
    let handles = (
        client.try_clone(),
        server.try_clone(),
        client.try_clone(),
        server.try_clone(),
    );
    let (Ok(client_in), Ok(server_out), Ok(client_keep), Ok(server_keep)) = handles else {
        return;
    };
    if client.set_nonblocking(false).is_err() {
        return;
    }
    match shared.connections.lock() {
        Ok(mut streams) => streams.extend([client_keep, server_keep]),
        Err(_) => return,
    }
    // Set once a reply on this connection is being lost: the server's
    // bytes are dropped from then on.
    let silenced = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let up = {
        let shared = std::sync::Arc::clone(shared);
        let silenced = std::sync::Arc::clone(&silenced);
        move || {
            // Either side closing ends the copy; then close both.
            let _ = pump_requests(&shared, &silenced, &client_in, &server);
            let _ = client_in.shutdown(std::net::Shutdown::Both);
            let _ = server.shutdown(std::net::Shutdown::Both);
        }
    };
    let down = move || {
        let _ = pump_replies(&silenced, &server_out, &client);
        let _ = server_out.shutdown(std::net::Shutdown::Both);
        let _ = client.shutdown(std::net::Shutdown::Both);
    };
    // A pump that cannot start leaves its connection to be closed by the
    // other pump or by the proxy.
    let _ = std::thread::Builder::new()
        .name("zk-proxy-up".to_owned())
        .spawn(up);
    let _ = std::thread::Builder::new()
        .name("zk-proxy-down".to_owned())
        .spawn(down);
}

/// Copies the client's frames (a 4-byte big-endian length, then the
/// request) to the server, one whole frame at a time, so that it can see
/// the write whose reply it must lose before sending it on. The first frame
/// is the session handshake, which has no request header.
fn pump_requests(
    shared: &std::sync::Arc<ProxyShared>,
    silenced: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    mut from: &TcpStream,
    mut to: &TcpStream,
) -> std::io::Result<()> {
    use std::io::{Read, Write};

    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let mut handshake_done = false;
    let mut first_recorded = false;
    let held: HeldRequests = std::sync::Arc::default();
    loop {
        let read = from.read(&mut chunk)?;
        if read == 0 {
            return Ok(());
        }
        pending.extend_from_slice(&chunk[..read]);
        loop {
            if pending.len() < 4 {
                break;
            }
            let length = u32::from_be_bytes([pending[0], pending[1], pending[2], pending[3]]);
            let frame_end = 4 + length as usize;
            if pending.len() < frame_end {
                break;
            }
            let frame: Vec<u8> = pending.drain(..frame_end).collect();
            let is_request = handshake_done;
            if is_request {
                maybe_lose_reply(shared, silenced, &frame, from, to);
                if !first_recorded {
                    first_recorded = record_first_request(shared, &frame);
                }
            }
            handshake_done = true;
            let mut held_now = lock(&held);
            if is_request && !held_now.holding {
                let mut armed = lock(&shared.hold_from);
                if armed
                    .as_ref()
                    .is_some_and(|fragment| is_write_naming(&frame, fragment))
                {
                    armed.take();
                    held_now.holding = true;
                    if let Ok(server) = to.try_clone() {
                        lock(&shared.held).push((std::sync::Arc::clone(&held), server));
                    }
                }
            }
            if held_now.holding {
                held_now.frames.extend_from_slice(&frame);
            } else {
                to.write_all(&frame)?;
            }
        }
    }
}

/// Whether `frame` (length, xid, opcode, body) is a write request whose
/// body contains `fragment`.
fn is_write_naming(frame: &[u8], fragment: &[u8]) -> bool {
    if frame.len() < 12 {
        return false;
    }
    let opcode = i32::from_be_bytes([frame[8], frame[9], frame[10], frame[11]]);
    WRITE_OPCODES.contains(&opcode)
        && frame[12..]
            .windows(fragment.len().max(1))
            .any(|window| window == fragment)
}

/// Records `frame`'s opcode as its connection's first request, unless it
/// is a ping (11), authentication (100) or watch restoration (101, 105);
/// returns whether it recorded it.
fn record_first_request(shared: &ProxyShared, frame: &[u8]) -> bool {
    if frame.len() < 12 {
        return false;
    }
    let opcode = i32::from_be_bytes([frame[8], frame[9], frame[10], frame[11]]);
    if [11, 100, 101, 105].contains(&opcode) {
        return false;
    }
    lock(&shared.first_requests).push(opcode);
    true
}

/// If a lost reply is armed and `frame` is the write it names, silences the
/// connection (before the write goes on to the server) and closes it after
/// the hold.
fn maybe_lose_reply(
    shared: &std::sync::Arc<ProxyShared>,
    silenced: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    frame: &[u8],
    client: &TcpStream,
    server: &TcpStream,
) {
    use std::sync::atomic::Ordering;

    // Frame: length (4), xid (4), opcode (4), body.
    if frame.len() < 12 {
        return;
    }
    let opcode = i32::from_be_bytes([frame[8], frame[9], frame[10], frame[11]]);
    if !WRITE_OPCODES.contains(&opcode) {
        return;
    }
    let mut slot = match shared.lose_reply.lock() {
        Ok(slot) => slot,
        Err(poisoned) => poisoned.into_inner(),
    };
    let matches = slot.as_ref().is_some_and(|armed| {
        frame[12..]
            .windows(armed.path_fragment.len().max(1))
            .any(|window| window == armed.path_fragment.as_slice())
    });
    if !matches {
        return;
    }
    let Some(armed) = slot.take() else {
        return;
    };
    drop(slot);
    silenced.store(true, Ordering::SeqCst);
    shared.replies_lost.fetch_add(1, Ordering::SeqCst);
    let handles = (client.try_clone(), server.try_clone());
    if let (Ok(client), Ok(server)) = handles {
        let _ = std::thread::Builder::new()
            .name("zk-proxy-hold".to_owned())
            .spawn(move || {
                std::thread::sleep(armed.hold);
                let _ = client.shutdown(std::net::Shutdown::Both);
                let _ = server.shutdown(std::net::Shutdown::Both);
            });
    }
}

/// Copies the server's bytes to the client until either side closes,
/// dropping them once the connection is `silenced`.
fn pump_replies(
    silenced: &std::sync::atomic::AtomicBool,
    mut from: &TcpStream,
    mut to: &TcpStream,
) -> std::io::Result<()> {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;

    let mut chunk = [0u8; 64 * 1024];
    loop {
        let read = from.read(&mut chunk)?;
        if read == 0 {
            return Ok(());
        }
        if !silenced.load(Ordering::SeqCst) {
            to.write_all(&chunk[..read])?;
        }
    }
}

impl Drop for ZkProxy {
    fn drop(&mut self) {
        self.shared
            .stop
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.shared.close_all();
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// What an operator (or another process) does to the store behind the
/// coordinators' back, as with `zkCli.sh`: create, read, overwrite and
/// delete znodes under one chroot. Runs a plain ZooKeeper client on a
/// private executor thread, as [`crate::ZkCoordinator`] does.
pub struct ZkShell {
    executor: crate::coordinator::zookeeper::Executor,
    client: zookeeper_client::Client,
}

impl fmt::Debug for ZkShell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkShell").finish_non_exhaustive()
    }
}

/// How long one shell command may take.
const SHELL_TIMEOUT: Duration = Duration::from_secs(10);

impl ZkShell {
    /// Connects to `connect` under `chroot` (which must exist).
    pub fn connect(connect: &str, chroot: &str) -> crate::Result<ZkShell> {
        let executor = crate::coordinator::zookeeper::Executor::start("isrlog-zk-shell")?;
        let (connect_owned, chroot_owned) = (connect.to_owned(), chroot.to_owned());
        let client = executor.call(
            &format!("connect to {connect}"),
            crate::coordinator::zookeeper::Effect::Read,
            Instant::now() + SHELL_TIMEOUT,
            async move {
                let client = zookeeper_client::Client::connect(&connect_owned)
                    .await
                    .map_err(|e| shell_error("connect", &connect_owned, e))?;
                client
                    .chroot(chroot_owned.clone())
                    .map_err(|_| crate::Error::Coordinator {
                        reason: format!("{chroot_owned} is not a valid chroot"),
                    })
            },
        )?;
        Ok(ZkShell { executor, client })
    }

    fn run<T: Send + 'static, F>(&self, what: &str, path: &str, op: F) -> crate::Result<T>
    where
        F: FnOnce(
            zookeeper_client::Client,
            String,
        ) -> futures::future::BoxFuture<'static, crate::Result<T>>,
    {
        let job = op(self.client.clone(), path.to_owned());
        self.executor.call(
            &format!("{what} {path}"),
            crate::coordinator::zookeeper::Effect::Read,
            Instant::now() + SHELL_TIMEOUT,
            job,
        )
    }

    /// Creates a persistent znode holding `data` (`create path data`).
    pub fn create(&self, path: &str, data: &[u8]) -> crate::Result<()> {
        let data = data.to_vec();
        self.run("create", path, move |client, path| {
            Box::pin(async move {
                let options = zookeeper_client::CreateMode::Persistent
                    .with_acls(zookeeper_client::Acls::anyone_all());
                client
                    .create(&path, &data, &options)
                    .await
                    .map(|_| ())
                    .map_err(|e| shell_error("create", &path, e))
            })
        })
    }

    /// The data and the version of `path` (`get -s path`).
    pub fn get(&self, path: &str) -> crate::Result<(Vec<u8>, i32)> {
        self.run("read", path, |client, path| {
            Box::pin(async move {
                client
                    .get_data(&path)
                    .await
                    .map(|(data, stat)| (data, stat.version))
                    .map_err(|e| shell_error("read", &path, e))
            })
        })
    }

    /// Whether `path` exists (`stat path`).
    pub fn exists(&self, path: &str) -> crate::Result<bool> {
        self.run("check", path, |client, path| {
            Box::pin(async move {
                client
                    .check_stat(&path)
                    .await
                    .map(|stat| stat.is_some())
                    .map_err(|e| shell_error("check", &path, e))
            })
        })
    }

    /// Overwrites `path` whatever its version (`set path data`) and answers
    /// its new version.
    pub fn set(&self, path: &str, data: &[u8]) -> crate::Result<i32> {
        let data = data.to_vec();
        self.run("write", path, move |client, path| {
            Box::pin(async move {
                client
                    .set_data(&path, &data, None)
                    .await
                    .map(|stat| stat.version)
                    .map_err(|e| shell_error("write", &path, e))
            })
        })
    }

    /// Deletes `path` and everything under it (`deleteall path`); a
    /// missing `path` is not an error.
    pub fn delete_all(&self, path: &str) -> crate::Result<()> {
        self.run("delete", path, |client, path| {
            Box::pin(async move {
                let mut pending = vec![(path, false)];
                while let Some((path, listed)) = pending.pop() {
                    if !listed {
                        match client.list_children(&path).await {
                            Ok(children) => {
                                pending.push((path.clone(), true));
                                let parent = path.trim_end_matches('/').to_owned();
                                pending.extend(
                                    children
                                        .into_iter()
                                        .map(|child| (format!("{parent}/{child}"), false)),
                                );
                                continue;
                            }
                            Err(zookeeper_client::Error::NoNode) => continue,
                            Err(e) => return Err(shell_error("list", &path, e)),
                        }
                    }
                    match client.delete(&path, None).await {
                        Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
                        Err(e) => return Err(shell_error("delete", &path, e)),
                    }
                }
                Ok(())
            })
        })
    }
}

fn shell_error(what: &str, path: &str, error: zookeeper_client::Error) -> crate::Error {
    crate::Error::Coordinator {
        reason: format!("cannot {what} {path}: {error}"),
    }
}
