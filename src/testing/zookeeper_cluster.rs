//! `ZkCluster`: N nodes in one process on a [`MemoryNetwork`], each with
//! its own [`ZkCoordinator`] — as N processes on N machines would have —
//! all on one ZooKeeper ensemble under a chroot of their own, so that a
//! scenario test runs replication against a real ZooKeeper:
//!
//! ```no_run
//! use isrlog::testing::zookeeper::ZkServer;
//! use isrlog::testing::ZkCluster;
//! use isrlog::{Acks, LogId};
//!
//! let server = ZkServer::start().unwrap();
//! let cluster = ZkCluster::builder(server.connect_string()).nodes(3).build().unwrap();
//! cluster.create_log(LogId(1), 3).unwrap();
//! let leader = cluster.leader_log(LogId(1)).unwrap();
//! leader.append_values(&[b"a"], Acks::All).unwrap();
//! ```
//!
//! This module owns the wiring of nodes, coordinators, optional per-node
//! [`ZkProxy`]s (to cut one node off from ZooKeeper) and directories; it
//! owns nothing of ZooKeeper itself (see [`super::zookeeper`]). A crash is a
//! halted node whose coordinator is dropped (its sessions close at once) or
//! left to lose its lease (its sessions close one session timeout later).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::cluster::{Lose, SessionEnd};
use super::harness::{self, Coordination, Harness, LeaderWait, MemoryWire, NodeSettings};
use super::zookeeper::{ZkProxy, ZkServerError};
use crate::append::{Acks, AppendOutcome};
use crate::clock::{Clock, SystemClock};
use crate::coordinator::{
    ControllerConfig, Coordinator, LogState, ZkCoordinator, ZkCoordinatorConfig,
};
use crate::error::{Error, Result};
use crate::producer::{harness_append, harness_leader_log, LeaderRouter};
use crate::record::RecordBatch;
use crate::replicated_log::ReplicatedLog;
use crate::sync::{Arc, Mutex};
use crate::transport::MemoryNetwork;
use crate::types::{LeaderEpoch, LogId, NodeId};

/// Makes every cluster's chroot unique within the process.
static CLUSTERS: AtomicU64 = AtomicU64::new(0);

/// Builds a [`ZkCluster`].
#[derive(Debug, Clone)]
pub struct ZkClusterBuilder {
    connect: String,
    chroot: Option<String>,
    settings: NodeSettings,
    call_timeout: Duration,
    proxied: bool,
    seed: u64,
    outage: Option<OutageHook>,
}

/// Takes the whole ZooKeeper service away (`true`: as when the ensemble
/// loses its quorum) or brings it back (`false`); returns whether it did.
/// Given by a test that controls the servers, with
/// [`ZkClusterBuilder::outage_hook`].
#[derive(Clone)]
pub struct OutageHook(pub std::sync::Arc<dyn Fn(bool) -> bool + Send + Sync>);

impl std::fmt::Debug for OutageHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutageHook")
    }
}

impl ZkClusterBuilder {
    harness::node_settings_setters!();

    /// How [`ZkCluster::set_zookeeper_outage`] takes ZooKeeper away and
    /// brings it back (by default it cannot).
    pub fn outage_hook(mut self, hook: OutageHook) -> Self {
        self.outage = Some(hook);
        self
    }

    /// Seed of the memory network's fault injection.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// How long each coordinator call may wait for ZooKeeper.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The chroot (default: a fresh one per cluster).
    pub fn chroot(mut self, chroot: impl Into<String>) -> Self {
        self.chroot = Some(chroot.into());
        self
    }

    /// Connect every node to ZooKeeper through a [`ZkProxy`] of its own, so
    /// that [`ZkCluster::cut_from_zookeeper`] can partition it away. Only
    /// for a connect string naming one server.
    pub fn proxied(mut self, proxied: bool) -> Self {
        self.proxied = proxied;
        self
    }

    /// Starts the cluster.
    pub fn build(self) -> Result<ZkCluster> {
        let chroot = self.chroot.clone().unwrap_or_else(|| {
            format!(
                "/isrlog-test-{}-{}",
                std::process::id(),
                CLUSTERS.fetch_add(1, Ordering::SeqCst)
            )
        });
        let mut proxies = BTreeMap::new();
        if self.proxied {
            for id in 0..self.settings.nodes {
                let proxy = ZkProxy::start(&self.connect).map_err(proxy_error)?;
                proxies.insert(NodeId(id as u32), proxy);
            }
        }
        let mut config = ZkCoordinatorConfig::new(self.connect);
        config.chroot = chroot;
        config.session_timeout = self.settings.session_timeout;
        config.call_timeout = self.call_timeout;
        let coordination = ZkCoordination {
            admin: ZkCoordinator::connect(config.clone())?,
            config,
            proxies,
            halted: Mutex::new(BTreeMap::new()),
        };
        let network = MemoryNetwork::new(self.seed);
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let harness = Harness::start(
            MemoryWire::new(network.clone()),
            coordination,
            self.settings,
            clock,
            LeaderWait::FirstReplica,
            Duration::from_millis(2),
        )?;
        Ok(ZkCluster {
            harness,
            network,
            outage: self.outage,
        })
    }
}

fn proxy_error(error: ZkServerError) -> Error {
    Error::Coordinator {
        reason: format!("cannot start a ZooKeeper proxy: {error}"),
    }
}

/// Every node on a [`ZkCoordinator`] of its own — as N processes on N
/// machines would have — optionally through a [`ZkProxy`] of its own.
#[derive(Debug)]
struct ZkCoordination {
    /// What every coordinator connects with, to the ensemble itself.
    config: ZkCoordinatorConfig,
    /// The harness's own coordinator (never cut off), for reading state.
    admin: ZkCoordinator,
    /// Each node's proxy to ZooKeeper, if the cluster is proxied.
    proxies: BTreeMap<NodeId, ZkProxy>,
    /// Coordinators of crashed nodes: kept open, unheartbeated, until the
    /// node restarts (a new process) or the cluster is dropped.
    halted: Mutex<BTreeMap<NodeId, ZkCoordinator>>,
}

impl Coordination for ZkCoordination {
    type Held = ZkCoordinator;
    const NAME: &'static str = "ZooKeeper";

    fn connect(&self, id: NodeId) -> Result<(Arc<dyn Coordinator>, ZkCoordinator)> {
        // A restarted process: whatever its previous incarnation left open
        // is gone now.
        drop(self.halted.lock().remove(&id));
        let mut config = self.config.clone();
        if let Some(proxy) = self.proxies.get(&id) {
            config.connect = proxy.connect_string();
        }
        let coordinator = ZkCoordinator::connect(config)?;
        Ok((Arc::new(coordinator.clone()), coordinator))
    }

    fn crashed(&self, id: NodeId, coordinator: Option<ZkCoordinator>, session: SessionEnd) {
        let Some(coordinator) = coordinator else {
            return;
        };
        match session {
            // As ZooKeeper ending a session it saw die: the node's znode and
            // any seat it held go now. (The halted node still holds its
            // coordinator, so dropping ours would not close anything.)
            SessionEnd::Immediately => {
                if let Err(error) = coordinator.unregister_node(id) {
                    tracing::warn!(node = %id, %error, "cannot end a crashed node's session");
                }
            }
            SessionEnd::OnExpiry => {}
        }
        self.halted.lock().insert(id, coordinator);
    }

    fn create_log(&self, log: LogId, replicas: Vec<NodeId>, deadline: Instant) -> Result<()> {
        let admin = &self.admin;
        // A create whose reply was lost (a loaded machine's ZooKeeper
        // connection dropping, SPEC 3.4) is settled by reading the log: it
        // was created if it is there, and is tried again if not.
        let mut unknown = false;
        loop {
            match admin.create_log(log, replicas.clone()) {
                Ok(_) => return Ok(()),
                // After an unknown outcome, "already exists" may be the
                // earlier create, applied late: the read decides.
                Err(error) if error.is_outcome_unknown() || unknown => {
                    unknown = true;
                    if matches!(admin.log_state(log), Ok(Some(_))) {
                        return Ok(());
                    }
                    if Instant::now() >= deadline {
                        return Err(error);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(error) => return Err(error),
            }
        }
    }

    fn log_state(&self, log: LogId) -> Result<Option<LogState>> {
        self.admin.log_state(log)
    }

    /// Crashed nodes' coordinators close their sessions while the proxies
    /// still carry them: otherwise each would wait out its close timeout.
    fn close(&self) {
        for proxy in self.proxies.values() {
            proxy.set_cut(false);
        }
        drop(std::mem::take(&mut *self.halted.lock()));
    }
}

/// N nodes in one process, each with its own ZooKeeper coordinator.
/// Dropping it halts every node and closes every session.
#[derive(Debug)]
pub struct ZkCluster {
    /// First, so that it halts the nodes before the rest goes.
    harness: Harness<MemoryWire, ZkCoordination>,
    /// The network between the nodes.
    pub network: MemoryNetwork,
    outage: Option<OutageHook>,
}

impl ZkCluster {
    harness::harness_face!();

    /// A builder for a cluster on the ensemble at `connect`: 3 nodes, min
    /// ISR 1, 2 s sessions, 10 s coordinator calls, quick replication
    /// timeouts for tests.
    pub fn builder(connect: impl Into<String>) -> ZkClusterBuilder {
        ZkClusterBuilder {
            connect: connect.into(),
            chroot: None,
            settings: NodeSettings::for_tests(
                Duration::from_secs(2),
                Some(ControllerConfig {
                    poll_interval: Duration::from_millis(200),
                    ..ControllerConfig::default()
                }),
            ),
            // Generous: a test machine under load can stall the JVM.
            call_timeout: Duration::from_secs(10),
            proxied: false,
            seed: 0,
            outage: None,
        }
    }

    /// The chroot this cluster lives under.
    pub fn chroot(&self) -> &str {
        &self.harness.coordination().config.chroot
    }

    /// The harness's own coordinator.
    pub fn coordinator(&self) -> &ZkCoordinator {
        &self.harness.coordination().admin
    }

    /// Starts (or restarts) node `id` from its directory, with a new
    /// coordinator (a new process).
    pub fn start_node(&self, id: NodeId) -> Result<()> {
        self.harness.start_node(id)
    }

    /// Crashes node `id`: its threads stop, nothing is flushed or closed,
    /// the network stops reaching it, and `lose` says what of its data
    /// survives (as [`super::Cluster::crash_with`]). `session` says when its
    /// ZooKeeper sessions end: at once (as when ZooKeeper sees a process
    /// die), or one session timeout later (its coordinator stays open but
    /// nothing renews the node's lease, as in a hung process).
    pub fn crash_with(&self, id: NodeId, lose: Lose, session: SessionEnd) {
        self.harness.crash_with(id, lose.into(), session);
    }

    /// Crashes node `id` (a process crash), its sessions closing at once.
    pub fn crash(&self, id: NodeId) {
        self.crash_with(id, Lose::Nothing, SessionEnd::Immediately);
    }

    /// Stops node `id` cleanly: its logs are flushed and closed, it leaves
    /// the coordinator, and its coordinator is dropped.
    ///
    /// The node stays reachable while it shuts down, as a real process
    /// does: its controlled shutdown lets followers catch up before it
    /// hands its leadership over.
    pub fn stop_node(&self, id: NodeId) -> Result<()> {
        self.harness.stop_node(id)
    }

    /// Restarts a crashed or stopped node from its directory.
    pub fn restart(&self, id: NodeId) -> Result<()> {
        self.start_node(id)
    }

    /// The ZooKeeper session id of running node `id`, if it has a session.
    pub fn session_id(&self, id: NodeId) -> Option<i64> {
        self.harness
            .nodes()
            .with_running(id, |running| running.coordinator.session_id(id))
            .flatten()
    }

    /// Node `id`'s proxy to ZooKeeper, if the cluster was built
    /// [`proxied`](ZkClusterBuilder::proxied): to cut it off or to lose a
    /// reply ([`ZkProxy::lose_reply_to_next_write`]).
    pub fn proxy(&self, id: NodeId) -> Option<&ZkProxy> {
        self.harness.coordination().proxies.get(&id)
    }

    /// Cuts node `id`'s connections to ZooKeeper (or restores them): every
    /// open connection through its proxy is closed and new ones are refused
    /// while cut. Errs unless the cluster was built [`proxied`](ZkClusterBuilder::proxied).
    pub fn cut_from_zookeeper(&self, id: NodeId, cut: bool) -> Result<()> {
        match self.proxy(id) {
            Some(proxy) => {
                proxy.set_cut(cut);
                Ok(())
            }
            None => Err(Error::Coordinator {
                reason: format!("{id} has no ZooKeeper proxy: build the cluster proxied"),
            }),
        }
    }

    /// Takes the whole ZooKeeper service away (`true`) or brings it back,
    /// through the builder's [`OutageHook`]; false without one, or if the
    /// hook did nothing.
    pub fn set_zookeeper_outage(&self, down: bool) -> bool {
        self.outage.as_ref().is_some_and(|hook| (hook.0)(down))
    }

    /// Creates `log` with `replication_factor` replicas placed by
    /// [`assign_replicas`](crate::coordinator::assign_replicas), and waits
    /// until its leader leads and every running replica hosts it.
    /// A create whose reply was lost is settled by reading the log back.
    pub fn create_log(&self, log: LogId, replication_factor: usize) -> Result<Vec<NodeId>> {
        self.harness.create_log(log, replication_factor)
    }

    /// The coordinator's record of `log`; `None` before it is created.
    /// Panics if ZooKeeper cannot be read: an assertion must not take a
    /// failed read for "no leader".
    pub fn log_state(&self, log: LogId) -> Option<LogState> {
        self.harness.log_state(log)
    }

    /// The leader epoch ZooKeeper holds for `log`.
    pub fn leader_epoch_of(&self, log: LogId) -> LeaderEpoch {
        self.log_state(log)
            .map(|state| state.leader_epoch)
            .unwrap_or_default()
    }

    /// The handle of `log` on the running node that believes it leads in
    /// the highest epoch, asking the nodes, not ZooKeeper (which may be
    /// down): a traffic generator's view.
    pub fn believed_leader_log(&self, log: LogId) -> Option<ReplicatedLog> {
        let nodes = self.harness.nodes().lock();
        nodes
            .values()
            .filter_map(|running| running.process.log(log).ok())
            .filter(|handle| handle.is_leader())
            .max_by_key(|handle| handle.leader_epoch())
    }
}

impl LeaderRouter for ZkCluster {
    /// ZooKeeper's leader, once it knows it leads; no waiting (the
    /// producer's backoff does that), as for [`super::Cluster`].
    /// While ZooKeeper cannot be read (an outage), no leader is known:
    /// the producer backs off, as with any retriable error.
    fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        let leader = match self.coordinator().log_state(log) {
            Ok(state) => state.and_then(|state| state.leader),
            Err(_) => None,
        };
        harness_leader_log(log, leader, |node| self.log(node, log))
    }

    /// Appends on the leader; a leader that crashed during the call is a
    /// retriable `Transport` error with an unknown outcome, as over a
    /// network.
    fn append(&self, log: LogId, batch: &RecordBatch, acks: Acks) -> Result<AppendOutcome> {
        let handle = LeaderRouter::leader_log(self, log)?;
        harness_append(&handle, batch, acks, |node| self.is_running(node))
    }

    /// Appends pipelined on the leader; a leader that crashed during the
    /// call is a retriable `Transport` error, as for [`append`](Self::append).
    fn append_pipelined(
        &self,
        log: LogId,
        batch: &RecordBatch,
        acks: Acks,
    ) -> Result<crate::AppendHandle> {
        let handle = LeaderRouter::leader_log(self, log)?;
        crate::producer::harness_append_pipelined(&handle, batch, acks, |node| {
            self.is_running(node)
        })
    }
}
