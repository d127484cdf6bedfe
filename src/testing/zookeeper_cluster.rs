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
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::cluster::{Lose, SessionEnd};
use super::harness::{self, Hosted, NodeSettings, Nodes};
use super::zookeeper::{ZkProxy, ZkServerError};
use crate::append::{Acks, AppendOutcome};
use crate::clock::{Clock, SystemClock};
use crate::config::ReplicationConfig;
use crate::coordinator::{
    assign_replicas, ControllerConfig, Coordinator, LogState, ZkCoordinator, ZkCoordinatorConfig,
};
use crate::error::{Error, Result};
use crate::node::Node;
use crate::producer::{harness_append, harness_leader_log, LeaderRouter};
use crate::record::RecordBatch;
use crate::replicated_log::ReplicatedLog;
use crate::storage::LogConfig;
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

    /// Number of nodes (ids 0..n).
    pub fn nodes(mut self, nodes: usize) -> Self {
        self.settings.nodes = nodes;
        self
    }

    /// `min_insync_replicas` of every log.
    pub fn min_insync_replicas(mut self, min: usize) -> Self {
        self.settings.replication.min_insync_replicas = min;
        self
    }

    /// Replication settings of every node.
    pub fn replication(mut self, replication: ReplicationConfig) -> Self {
        self.settings.replication = replication;
        self
    }

    /// Storage settings of every log.
    pub fn log_config(mut self, log: LogConfig) -> Self {
        self.settings.log = log;
        self
    }

    /// The ZooKeeper session timeout of every node.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.session_timeout = timeout;
        self
    }

    /// How long each coordinator call may wait for ZooKeeper.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The controller every node runs.
    pub fn controller(mut self, controller: Option<ControllerConfig>) -> Self {
        self.settings.controller = controller;
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
        let admin = ZkCoordinator::connect(self.coordinator_config(&self.connect, &chroot))?;
        let cluster = ZkCluster {
            network: MemoryNetwork::new(self.seed),
            admin,
            chroot,
            proxies,
            nodes: Nodes::new(self.settings.nodes)?,
            halted: Mutex::new(BTreeMap::new()),
            builder: self,
        };
        for id in cluster.node_ids() {
            cluster.start_node(id)?;
        }
        Ok(cluster)
    }

    fn coordinator_config(&self, connect: &str, chroot: &str) -> ZkCoordinatorConfig {
        let mut config = ZkCoordinatorConfig::new(connect);
        config.chroot = chroot.to_owned();
        config.session_timeout = self.settings.session_timeout;
        config.call_timeout = self.call_timeout;
        config
    }
}

fn proxy_error(error: ZkServerError) -> Error {
    Error::Coordinator {
        reason: format!("cannot start a ZooKeeper proxy: {error}"),
    }
}

/// One running node and the coordinator it alone uses.
#[derive(Debug)]
struct RunningNode {
    node: Node,
    coordinator: ZkCoordinator,
}

impl Hosted for RunningNode {
    fn node(&self) -> &Node {
        &self.node
    }
}

/// N nodes in one process, each with its own ZooKeeper coordinator.
/// Dropping it halts every node and closes every session.
#[derive(Debug)]
pub struct ZkCluster {
    /// The network between the nodes.
    pub network: MemoryNetwork,
    /// The harness's own coordinator (never cut off), for reading state.
    admin: ZkCoordinator,
    chroot: String,
    proxies: BTreeMap<NodeId, ZkProxy>,
    nodes: Nodes<RunningNode>,
    /// Coordinators of crashed nodes: kept open, unheartbeated, until the
    /// node restarts (a new process) or the cluster is dropped.
    halted: Mutex<BTreeMap<NodeId, ZkCoordinator>>,
    builder: ZkClusterBuilder,
}

impl ZkCluster {
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
        &self.chroot
    }

    /// The harness's own coordinator.
    pub fn coordinator(&self) -> &ZkCoordinator {
        &self.admin
    }

    /// The directory of node `id`.
    pub fn node_dir(&self, id: NodeId) -> PathBuf {
        self.nodes.node_dir(id)
    }

    /// The root directory of all nodes.
    pub fn root(&self) -> &Path {
        self.nodes.root()
    }

    /// Ids of all nodes, running or not.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.nodes.ids()
    }

    /// Starts (or restarts) node `id` from its directory, with a new
    /// coordinator (a new process).
    pub fn start_node(&self, id: NodeId) -> Result<()> {
        // A restarted process: whatever its previous incarnation left open
        // is gone now.
        drop(self.halted.lock().remove(&id));
        let connect = match self.proxies.get(&id) {
            Some(proxy) => proxy.connect_string(),
            None => self.builder.connect.clone(),
        };
        let coordinator =
            ZkCoordinator::connect(self.builder.coordinator_config(&connect, &self.chroot))?;
        let config = self.builder.settings.node_config(id, self.node_dir(id));
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let node = Node::start(
            config,
            Arc::new(self.network.transport(id)),
            Arc::new(coordinator.clone()),
            clock,
        )?;
        self.network.register(id, node.handler());
        self.network.node_up(id);
        self.nodes.insert(id, RunningNode { node, coordinator });
        Ok(())
    }

    /// Crashes node `id`: its threads stop, nothing is flushed or closed,
    /// the network stops reaching it, and `lose` says what of its data
    /// survives (as [`super::Cluster::crash_with`]). `session` says when its
    /// ZooKeeper sessions end: at once (as when ZooKeeper sees a process
    /// die), or one session timeout later (its coordinator stays open but
    /// nothing renews the node's lease, as in a hung process).
    pub fn crash_with(&self, id: NodeId, lose: Lose, session: SessionEnd) {
        self.network.node_down(id);
        let running = self.nodes.remove(id);
        let Some(RunningNode { node, coordinator }) = running else {
            return;
        };
        node.mark_crashed();
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
        harness::halt_losing(node, id, lose);
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
        let running = self.nodes.remove(id);
        let outcome = match running {
            Some(RunningNode { node, coordinator }) => {
                let outcome = node.shutdown();
                drop(coordinator);
                outcome
            }
            None => Ok(()),
        };
        self.network.node_down(id);
        outcome
    }

    /// Restarts a crashed or stopped node from its directory.
    pub fn restart(&self, id: NodeId) -> Result<()> {
        self.start_node(id)
    }

    /// Runs `f` on node `id`, `None` when it is not running.
    pub fn with_node<T>(&self, id: NodeId, f: impl FnOnce(&Node) -> T) -> Option<T> {
        self.nodes.with_node(id, f)
    }

    /// Whether node `id` is running.
    pub fn is_running(&self, id: NodeId) -> bool {
        self.nodes.is_running(id)
    }

    /// The ZooKeeper session id of running node `id`, if it has a session.
    pub fn session_id(&self, id: NodeId) -> Option<i64> {
        self.nodes
            .with_running(id, |running| running.coordinator.session_id(id))
            .flatten()
    }

    /// Node `id`'s proxy to ZooKeeper, if the cluster was built
    /// [`proxied`](ZkClusterBuilder::proxied): to cut it off or to lose a
    /// reply ([`ZkProxy::lose_reply_to_next_write`]).
    pub fn proxy(&self, id: NodeId) -> Option<&ZkProxy> {
        self.proxies.get(&id)
    }

    /// Cuts node `id`'s connections to ZooKeeper (or restores them): every
    /// open connection through its proxy is closed and new ones are refused
    /// while cut. Errs unless the cluster was built [`proxied`](ZkClusterBuilder::proxied).
    pub fn cut_from_zookeeper(&self, id: NodeId, cut: bool) -> Result<()> {
        match self.proxies.get(&id) {
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
        self.builder
            .outage
            .as_ref()
            .is_some_and(|hook| (hook.0)(down))
    }

    /// Creates `log` with `replication_factor` replicas placed by
    /// [`assign_replicas`], and waits until its leader leads and every
    /// running replica hosts it.
    pub fn create_log(&self, log: LogId, replication_factor: usize) -> Result<Vec<NodeId>> {
        let replicas = assign_replicas(log.0, &self.node_ids(), replication_factor)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        // A create whose reply was lost (a loaded machine's ZooKeeper
        // connection dropping, SPEC 3.4) is settled by reading the log: it
        // was created if it is there, and is tried again if not.
        let mut unknown = false;
        loop {
            match self.admin.create_log(log, replicas.clone()) {
                Ok(_) => break,
                // After an unknown outcome, "already exists" may be the
                // earlier create, applied late: the read decides.
                Err(error) if error.is_outcome_unknown() || unknown => {
                    unknown = true;
                    if matches!(self.admin.log_state(log), Ok(Some(_))) {
                        break;
                    }
                    if Instant::now() >= deadline {
                        return Err(error);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(error) => return Err(error),
            }
        }
        let leader = replicas[0];
        for &node in &replicas {
            if !self.is_running(node) {
                continue;
            }
            let handle = self.nodes.wait_for_handle(node, log, deadline)?;
            if node == leader {
                handle.wait_until_leader(deadline.saturating_duration_since(Instant::now()))?;
            }
        }
        Ok(replicas)
    }

    /// The handle of `log` on `node`.
    pub fn log(&self, node: NodeId, log: LogId) -> Result<ReplicatedLog> {
        self.nodes.log(node, log)
    }

    /// The coordinator's record of `log`; `None` before it is created.
    /// Panics if ZooKeeper cannot be read: an assertion must not take a
    /// failed read for "no leader".
    pub fn log_state(&self, log: LogId) -> Option<LogState> {
        self.admin
            .log_state(log)
            .unwrap_or_else(|error| panic!("cannot read {log} from ZooKeeper: {error}"))
    }

    /// The in-sync replicas ZooKeeper holds for `log`.
    pub fn in_sync_replicas(&self, log: LogId) -> Vec<NodeId> {
        self.log_state(log)
            .map(|state| state.in_sync_replicas)
            .unwrap_or_default()
    }

    /// The node ZooKeeper names as leader of `log`.
    pub fn leader_of(&self, log: LogId) -> Option<NodeId> {
        self.log_state(log).and_then(|state| state.leader)
    }

    /// The leader epoch ZooKeeper holds for `log`.
    pub fn leader_epoch_of(&self, log: LogId) -> LeaderEpoch {
        self.log_state(log)
            .map(|state| state.leader_epoch)
            .unwrap_or_default()
    }

    /// The leader's handle of `log`, once that node knows it leads in the
    /// epoch ZooKeeper holds (up to 10 s).
    pub fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        let deadline = Instant::now() + Duration::from_secs(10);
        self.nodes
            .leader_log_by(log, deadline, Duration::from_millis(2), || {
                self.log_state(log)
            })
    }

    /// The handle of `log` on the running node that believes it leads in
    /// the highest epoch, asking the nodes, not ZooKeeper (which may be
    /// down): a traffic generator's view.
    pub fn believed_leader_log(&self, log: LogId) -> Option<ReplicatedLog> {
        let nodes = self.nodes.lock();
        nodes
            .values()
            .filter_map(|running| running.node.log(log).ok())
            .filter(|handle| handle.is_leader())
            .max_by_key(|handle| handle.leader_epoch())
    }

    /// Polls `condition` every 2 ms until it holds or `timeout` passes.
    pub fn wait_until(&self, timeout: Duration, condition: impl FnMut(&ZkCluster) -> bool) -> bool {
        harness::wait_until(self, timeout, Duration::from_millis(2), condition)
    }

    /// Stops every node cleanly.
    pub fn shutdown(self) -> Result<()> {
        let nodes = self.nodes.take_all();
        for RunningNode { node, coordinator } in nodes {
            node.shutdown()?;
            drop(coordinator);
        }
        Ok(())
    }
}

impl LeaderRouter for ZkCluster {
    /// ZooKeeper's leader, once it knows it leads; no waiting (the
    /// producer's backoff does that), as for [`super::Cluster`].
    /// While ZooKeeper cannot be read (an outage), no leader is known:
    /// the producer backs off, as with any retriable error.
    fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        let leader = match self.admin.log_state(log) {
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

impl Drop for ZkCluster {
    /// Halts every node still running and unregisters it from the network
    /// (breaking the cycle between the network and the nodes' handlers).
    fn drop(&mut self) {
        let nodes = self.nodes.take_all();
        for RunningNode { node, coordinator } in nodes {
            node.halt();
            drop(coordinator);
        }
        // Crashed nodes' coordinators close their sessions while the
        // proxies still carry them (fields drop in declaration order,
        // proxies first): otherwise each would wait out its close timeout.
        for proxy in self.proxies.values() {
            proxy.set_cut(false);
        }
        drop(std::mem::take(&mut *self.halted.lock()));
        for id in self.node_ids() {
            self.network.unregister(id);
        }
    }
}
