//! `Cluster`: N nodes in one process on a [`MemoryNetwork`] and a
//! [`MemoryCoordinator`], each with its own directory under one temporary
//! directory, so that scenario tests read like a script:
//!
//! ```
//! use isrlog::testing::Cluster;
//! use isrlog::{Acks, LogId};
//!
//! let cluster = Cluster::builder().nodes(3).min_insync_replicas(2).build().unwrap();
//! let log = LogId(1);
//! cluster.create_log(log, 3).unwrap();
//! let leader = cluster.leader_log(log).unwrap();
//! let appended = leader.append_values(&[b"a"], Acks::All).unwrap();
//! assert!(leader.high_watermark() > appended.last_offset);
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::harness::{self, NodeSettings, Nodes};
use crate::clock::{Clock, ManualClock, SystemClock};
use crate::config::ReplicationConfig;
use crate::coordinator::{
    assign_replicas, ControllerConfig, Coordinator, LogState, MemoryCoordinator,
};
use crate::error::Result;
use crate::node::Node;
use crate::replicated_log::ReplicatedLog;
use crate::storage::LogConfig;
use crate::sync::{Arc, Mutex};
use crate::testing::{CoordinatorDelay, SlowCoordinator};
use crate::transport::MemoryNetwork;
use crate::types::{LogId, NodeId};

/// What a crash loses of a node's data (see [`Cluster::crash_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lose {
    /// A process crash: the operating system keeps every byte written.
    Nothing,
    /// A power loss: bytes not covered by an fsync are gone, except a
    /// random prefix of them (chosen by `seed`) on some files: a torn write.
    UnflushedBytes {
        /// Chooses what survives of each file.
        seed: u64,
    },
}

/// When the coordinator learns that a crashed node is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// At once, as if the coordinator saw the connection drop.
    Immediately,
    /// When its session times out (heartbeats stop): how a real crash is
    /// noticed, and what failover benchmarks must measure.
    OnExpiry,
}

/// Cuts the data file at `path` to `durable_bytes`, or, with probability
/// one half, to a random length between that and its current length.
pub(crate) fn cut_to_durable(
    path: &Path,
    durable_bytes: u64,
    rng: &mut crate::transport::SplitMix64,
) -> std::io::Result<()> {
    let file = match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let length_bytes = file.metadata()?.len();
    if length_bytes <= durable_bytes {
        return Ok(());
    }
    let unsynced = length_bytes - durable_bytes;
    let kept = if rng.next_u64().is_multiple_of(2) {
        0
    } else {
        rng.next_u64() % (unsynced + 1)
    };
    tracing::debug!(path = %path.display(), durable_bytes, length_bytes, kept, "power loss");
    file.set_len(durable_bytes + kept)
}

/// Builds a [`Cluster`].
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    settings: NodeSettings,
    seed: u64,
    manual_clock: Option<ManualClock>,
    retention_check_interval: Duration,
    controlled_shutdown_timeout: Duration,
}

impl ClusterBuilder {
    /// Gives node `id` the application snapshot store `store`
    /// ([`NodeConfig::snapshots`](crate::NodeConfig::snapshots)), kept across its restarts.
    pub fn snapshots(mut self, id: NodeId, store: Arc<dyn crate::snapshot::SnapshotStore>) -> Self {
        self.settings
            .snapshots
            .insert(id, crate::snapshot::Snapshots(store));
        self
    }

    /// How long each node's clean stop may spend handing its leadership
    /// over ([`NodeConfig::controlled_shutdown_timeout`](crate::NodeConfig::controlled_shutdown_timeout); zero turns it
    /// off).
    pub fn controlled_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.controlled_shutdown_timeout = timeout;
        self
    }

    /// The controller every node runs (`None`: no controller, leaders
    /// change only when a test writes the coordinator itself).
    pub fn controller(mut self, controller: Option<ControllerConfig>) -> Self {
        self.settings.controller = controller;
        self
    }

    /// How often leaders apply retention.
    pub fn retention_check_interval(mut self, interval: Duration) -> Self {
        self.retention_check_interval = interval;
        self
    }

    /// Number of nodes (ids 0..n).
    pub fn nodes(mut self, nodes: usize) -> Self {
        self.settings.nodes = nodes;
        self
    }

    /// Seed of the network's fault injection.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
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

    /// Coordinator session timeout of every node.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.session_timeout = timeout;
        self
    }

    /// Runs every node and the coordinator on this manual clock.
    pub fn manual_clock(mut self, clock: ManualClock) -> Self {
        self.manual_clock = Some(clock);
        self
    }

    /// Starts the cluster.
    pub fn build(self) -> Result<Cluster> {
        let clock: Arc<dyn Clock> = match &self.manual_clock {
            Some(clock) => Arc::new(clock.clone()),
            None => Arc::new(SystemClock),
        };
        let cluster = Cluster {
            network: MemoryNetwork::new(self.seed),
            coordinator: MemoryCoordinator::new(Arc::clone(&clock)),
            clock,
            nodes: Nodes::new(self.settings.nodes)?,
            coordinator_delays: Mutex::new(BTreeMap::new()),
            builder: self,
        };
        for id in cluster.node_ids() {
            cluster.start_node(id)?;
        }
        Ok(cluster)
    }
}

/// N nodes in one process. Dropping it stops every node.
#[derive(Debug)]
pub struct Cluster {
    /// The network between the nodes (fault injection lives here).
    pub network: MemoryNetwork,
    /// The coordinator all nodes share.
    pub coordinator: MemoryCoordinator,
    clock: Arc<dyn Clock>,
    nodes: Nodes<Node>,
    /// Each node's coordinator calls go through a [`SlowCoordinator`]
    /// with this knob (no delay unless a test sets one); kept across
    /// restarts.
    coordinator_delays: Mutex<BTreeMap<NodeId, CoordinatorDelay>>,
    builder: ClusterBuilder,
}

impl Cluster {
    /// A builder with 3 nodes, min ISR 1, quick timeouts for tests.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder {
            settings: NodeSettings::for_tests(
                Duration::from_secs(10),
                Some(ControllerConfig::default()),
            ),
            seed: 0,
            manual_clock: None,
            retention_check_interval: Duration::from_secs(300),
            controlled_shutdown_timeout: Duration::from_secs(5),
        }
    }

    /// The directory of node `id`.
    pub fn node_dir(&self, id: NodeId) -> PathBuf {
        self.nodes.node_dir(id)
    }

    /// The root directory of all nodes.
    pub fn root(&self) -> &Path {
        self.nodes.root()
    }

    /// The clock every node uses.
    pub fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock)
    }

    /// Ids of all nodes, running or not.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.nodes.ids()
    }

    /// Starts (or restarts) node `id` from its directory.
    pub fn start_node(&self, id: NodeId) -> Result<()> {
        let mut config = self.builder.settings.node_config(id, self.node_dir(id));
        config.retention_check_interval = self.builder.retention_check_interval;
        config.controlled_shutdown_timeout = self.builder.controlled_shutdown_timeout;
        let transport = Arc::new(self.network.transport(id));
        let coordinator = SlowCoordinator::new(
            Arc::new(self.coordinator.for_node(id)),
            self.coordinator_delay(id),
        );
        let node = Node::start(
            config,
            transport,
            Arc::new(coordinator),
            Arc::clone(&self.clock),
        )?;
        self.network.register(id, node.handler());
        self.network.node_up(id);
        self.nodes.insert(id, node);
        Ok(())
    }

    /// The knob that slows node `id`'s coordinator calls down (or makes
    /// them hang): a coordinator that is slow or stuck for that node only.
    pub fn coordinator_delay(&self, id: NodeId) -> CoordinatorDelay {
        self.coordinator_delays
            .lock()
            .entry(id)
            .or_default()
            .clone()
    }

    /// Crashes node `id`: its threads stop, nothing is flushed or closed,
    /// the network stops reaching it and its coordinator session ends.
    /// The operating system keeps every byte written (a process crash).
    pub fn crash(&self, id: NodeId) {
        self.crash_with(id, Lose::Nothing, SessionEnd::Immediately);
    }

    /// Crashes node `id` with a power loss (SPEC G1b): as [`crash`](Self::crash),
    /// and then every segment file of every log of the node is cut back to
    /// what its last fsync covered, keeping, chosen by `seed`, either none
    /// or a random prefix of the unsynced bytes (a torn write). Checkpoint
    /// files are written with fsync and rename and stay as they are.
    pub fn crash_losing_unflushed(&self, id: NodeId, seed: u64) {
        self.crash_with(id, Lose::UnflushedBytes { seed }, SessionEnd::Immediately);
    }

    /// Crashes node `id`, losing what `lose` says; `session` says whether
    /// the coordinator learns of it at once or only when the session expires.
    /// Every handle of the crashed node fails from now on (its logs are
    /// poisoned), as a dead process answers nobody.
    pub fn crash_with(&self, id: NodeId, lose: Lose, session: SessionEnd) {
        self.network.node_down(id);
        let node = self.nodes.remove(id);
        // The crash happens before the coordinator hears of it: a node
        // still winding down must not see its session end and open a new
        // one (found as a flaky unclean-election test: the crashed node
        // re-registered and rejoined the ISR).
        if let Some(node) = &node {
            node.mark_crashed();
        }
        if session == SessionEnd::Immediately {
            self.coordinator.fail_node(id);
        }
        if let Some(node) = node {
            harness::halt_losing(node, id, lose);
        }
    }

    /// Stops node `id` cleanly: its logs are flushed and closed (a clean
    /// shutdown for the next open) and it leaves the coordinator.
    ///
    /// The node stays reachable while it shuts down, as a real process
    /// does: its controlled shutdown lets followers catch up before it
    /// hands its leadership over.
    pub fn stop_node(&self, id: NodeId) -> Result<()> {
        let node = self.nodes.remove(id);
        let outcome = match node {
            Some(node) => node.shutdown(),
            None => Ok(()),
        };
        self.network.node_down(id);
        outcome
    }

    /// Restarts a crashed node from its directory.
    pub fn restart(&self, id: NodeId) -> Result<()> {
        self.start_node(id)
    }

    /// Whether node `id` is running.
    pub fn is_running(&self, id: NodeId) -> bool {
        self.nodes.is_running(id)
    }

    /// Creates `log` with `replication_factor` replicas placed by
    /// [`assign_replicas`], and waits until every running replica hosts it
    /// and the coordinator's leader of it leads (up to 10 s).
    ///
    /// That leader is the first replica unless the controller moved the
    /// leadership meanwhile: on a loaded machine a node's short session can
    /// expire right after the log is created, and waiting for the first
    /// replica alone then timed out although the log had a leader (a flaky
    /// `create_log` in the fault test, whose sessions last 300 ms).
    pub fn create_log(&self, log: LogId, replication_factor: usize) -> Result<Vec<NodeId>> {
        let nodes = self.node_ids();
        let replicas = assign_replicas(log.0, &nodes, replication_factor)?;
        self.coordinator.create_log(log, replicas.clone())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        for &node in &replicas {
            if self.is_running(node) {
                self.nodes.wait_for_handle(node, log, deadline)?;
            }
        }
        self.leader_log_by(log, deadline)?;
        Ok(replicas)
    }

    /// The handle of `log` on `node`.
    pub fn log(&self, node: NodeId, log: LogId) -> Result<ReplicatedLog> {
        self.nodes.log(node, log)
    }

    /// Runs `f` on node `id`, if it is running.
    pub fn with_node<T>(&self, id: NodeId, f: impl FnOnce(&Node) -> T) -> Option<T> {
        self.nodes.with_node(id, f)
    }

    /// The coordinator's record of `log`; `None` before the log is created.
    /// The harness's own handle is never cut off, so an error means a
    /// broken test: it panics rather than read as "no leader" or "no ISR",
    /// which an assertion could take for the outcome it waits for.
    fn log_state(&self, log: LogId) -> Option<LogState> {
        self.coordinator
            .log_state(log)
            .unwrap_or_else(|error| panic!("cannot read {log} from the coordinator: {error}"))
    }

    /// The current incarnation of node `id` (what its fetches carry), if
    /// it runs.
    pub fn incarnation(&self, id: NodeId) -> Option<crate::types::Incarnation> {
        self.with_node(id, |node| node.incarnation())
    }

    /// The in-sync replicas the coordinator holds for `log`.
    pub fn in_sync_replicas(&self, log: LogId) -> Vec<NodeId> {
        self.log_state(log)
            .map(|s| s.in_sync_replicas)
            .unwrap_or_default()
    }

    /// The node the coordinator names as leader of `log`.
    pub fn leader_of(&self, log: LogId) -> Option<NodeId> {
        self.log_state(log).and_then(|s| s.leader)
    }

    /// The leader's handle of `log`, once that node knows it leads (up to 10 s).
    pub fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        self.leader_log_by(log, Instant::now() + Duration::from_secs(10))
    }

    fn leader_log_by(&self, log: LogId, deadline: Instant) -> Result<ReplicatedLog> {
        self.nodes
            .leader_log_by(log, deadline, Duration::from_millis(1), || {
                self.log_state(log)
            })
    }

    /// Polls `condition` every millisecond until it holds or `timeout` passes.
    pub fn wait_until(&self, timeout: Duration, condition: impl FnMut(&Cluster) -> bool) -> bool {
        harness::wait_until(self, timeout, Duration::from_millis(1), condition)
    }

    /// Stops every node cleanly.
    pub fn shutdown(self) -> Result<()> {
        for node in self.nodes.take_all() {
            node.shutdown()?;
        }
        Ok(())
    }
}

impl Drop for Cluster {
    /// Stops every node still running and unregisters every node from the
    /// network. The network holds each node's request handler and each
    /// node holds a transport into the network: without this, a dropped
    /// cluster would keep its nodes — their threads' state and their open
    /// log files — alive in a reference cycle (a long fault test then runs
    /// out of file descriptors).
    fn drop(&mut self) {
        for node in self.nodes.take_all() {
            node.halt();
        }
        for id in self.node_ids() {
            self.network.unregister(id);
        }
    }
}
