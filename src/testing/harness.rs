//! What the cluster harnesses ([`Cluster`](super::Cluster),
//! [`TcpCluster`](super::TcpCluster) and `ZkCluster`) share: the nodes'
//! directories under one temporary directory, the table of running nodes,
//! the settings every node gets, the handles a test asks for, crashes that
//! lose unsynced bytes, and polling until a condition holds.
//!
//! [`Harness`] is the one cluster harness: generic over a [`Wire`] (how
//! the nodes reach each other: the memory network, loopback TCP) and a
//! [`Coordination`] (what coordinator each node gets: a view of one shared
//! memory coordinator, a ZooKeeper client of its own), it starts, crashes,
//! stops and restarts nodes, creates logs and finds leaders once for every
//! harness. The public harnesses are thin faces over it that add only what
//! their wire or coordinator alone can do (partitions, TLS, proxies).
//!
//! It owns nothing of the transports and coordinators themselves: a wire
//! and a coordination only build and tear down a node's wiring, and keep,
//! next to the [`Node`], what they wired it with (a server and a client, a
//! coordinator of its own).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cluster::{cut_to_durable, Lose, SessionEnd};
use super::{CoordinatorDelay, SlowCoordinator};
use crate::clock::Clock;
use crate::config::{NodeConfig, ReplicationConfig};
use crate::coordinator::{
    assign_replicas, ControllerConfig, Coordinator, LogState, MemoryCoordinator, SteppedController,
};
use crate::error::{Error, Result};
use crate::node::{controller_config, Node, SteppedNode};
use crate::replicated_log::ReplicatedLog;
use crate::snapshot::Snapshots;
use crate::storage::disk::{Disk, SimDisk, StdDisk};
use crate::storage::LogConfig;
use crate::sync::{Arc, Mutex, MutexGuard};
use crate::transport::{MemoryNetwork, Transport};
use crate::types::{LogId, NodeId};

/// A running node as a harness keeps it: the node and whatever the harness
/// wired it with.
pub(crate) trait Hosted {
    /// The node.
    fn node(&self) -> &Node;
}

impl Hosted for Node {
    fn node(&self) -> &Node {
        self
    }
}

/// The settings every harness gives each of its nodes.
#[derive(Debug, Clone)]
pub(crate) struct NodeSettings {
    /// Number of nodes (ids 0..n).
    pub(crate) nodes: usize,
    pub(crate) replication: ReplicationConfig,
    pub(crate) log: LogConfig,
    pub(crate) session_timeout: Duration,
    pub(crate) controller: Option<ControllerConfig>,
    /// Application snapshot stores by node, kept across restarts.
    pub(crate) snapshots: BTreeMap<NodeId, Snapshots>,
    /// How often leaders apply retention; `None`: the node default.
    pub(crate) retention_check_interval: Option<Duration>,
    /// How long a clean stop may hand leadership over; `None`: the node
    /// default.
    pub(crate) controlled_shutdown_timeout: Option<Duration>,
}

impl NodeSettings {
    /// Three nodes with quick replication timeouts for tests, the default
    /// storage settings, no snapshot stores, and the given session timeout
    /// and controller.
    pub(crate) fn for_tests(
        session_timeout: Duration,
        controller: Option<ControllerConfig>,
    ) -> NodeSettings {
        NodeSettings {
            nodes: 3,
            replication: ReplicationConfig {
                replica_lag_time_max: Duration::from_secs(10),
                fetch_wait_max: Duration::from_millis(100),
                request_timeout: Duration::from_secs(5),
                fetch_backoff: Duration::from_millis(10),
                ..ReplicationConfig::default()
            },
            log: LogConfig::default(),
            session_timeout,
            controller,
            snapshots: BTreeMap::new(),
            retention_check_interval: None,
            controlled_shutdown_timeout: None,
        }
    }

    /// The configuration of node `id` with its data in `dir`.
    pub(crate) fn node_config(&self, id: NodeId, dir: PathBuf) -> NodeConfig {
        let mut config = NodeConfig::new(id, dir);
        config.replication = self.replication.clone();
        config.log = self.log.clone();
        config.session_timeout = self.session_timeout;
        config.controller = self.controller.clone();
        config.snapshots = self.snapshots.get(&id).cloned();
        if let Some(interval) = self.retention_check_interval {
            config.retention_check_interval = interval;
        }
        if let Some(timeout) = self.controlled_shutdown_timeout {
            config.controlled_shutdown_timeout = timeout;
        }
        config
    }
}

/// What a crash loses of a node's data, on whichever disks the harness
/// keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loss {
    /// A process crash: every byte written survives.
    Nothing,
    /// A power loss on the real file system: each segment file is cut back
    /// to what its last fsync covered, keeping none or a random prefix
    /// (chosen by `seed`) of the rest.
    Unsynced { seed: u64 },
    /// A power loss of a simulated disk: every unsynced byte and directory
    /// entry is lost, or, `torn`, a random prefix of each file's unsynced
    /// writes is kept (drawn by the disk).
    Power { torn: bool },
}

impl From<Lose> for Loss {
    fn from(lose: Lose) -> Loss {
        match lose {
            Lose::Nothing => Loss::Nothing,
            Lose::UnflushedBytes { seed } => Loss::Unsynced { seed },
        }
    }
}

/// Where the nodes of a harness keep their data: node `i`'s directory is
/// `node-i` under one root, on the real file system or on a simulated disk
/// of its own.
#[derive(Debug)]
pub(crate) enum Disks {
    /// The real file system, under a temporary directory that lives as
    /// long as the harness.
    Std { dir: tempfile::TempDir },
    /// One simulated disk per node (by id), each with its node's directory
    /// under `root`. Building it touches no disk: a simulated run's disks
    /// count their operations.
    Sim { root: PathBuf, disks: Vec<SimDisk> },
}

impl Disks {
    /// The real file system, under a fresh temporary directory.
    pub(crate) fn temporary() -> Result<Disks> {
        let dir = tempfile::tempdir()
            .map_err(|e| Error::io(std::env::temp_dir(), "create temp dir", e))?;
        Ok(Disks::Std { dir })
    }

    /// The root directory of all nodes.
    fn root(&self) -> &Path {
        match self {
            Disks::Std { dir } => dir.path(),
            Disks::Sim { root, .. } => root,
        }
    }

    /// The disk node `id` keeps its data on.
    fn disk(&self, id: NodeId) -> Arc<dyn Disk> {
        match self {
            Disks::Std { .. } => StdDisk::shared(),
            Disks::Sim { disks, .. } => disks[id.0 as usize].shared(),
        }
    }

    /// Node `id`'s simulated disk. Only simulated disks have one: asked of
    /// the real file system, a broken test.
    pub(crate) fn sim(&self, id: NodeId) -> &SimDisk {
        match self {
            Disks::Sim { disks, .. } => &disks[id.0 as usize],
            Disks::Std { .. } => panic!("node {id} has no simulated disk"),
        }
    }

    /// Every simulated disk, by node id; none on the real file system.
    pub(crate) fn sims(&self) -> &[SimDisk] {
        match self {
            Disks::Sim { disks, .. } => disks,
            Disks::Std { .. } => &[],
        }
    }

    /// Gives node `id` the simulated disk `disk` in place of its own (a
    /// machine whose disk was lost, while its process is down).
    pub(crate) fn replace(&mut self, id: NodeId, disk: SimDisk) {
        match self {
            Disks::Sim { disks, .. } => disks[id.0 as usize] = disk,
            Disks::Std { .. } => panic!("node {id} has no simulated disk to replace"),
        }
    }

    /// Loses what `loss` says of node `id`'s data once its process halted
    /// for a crash (`durable`: each segment file with the length its last
    /// fsync covered, which only the real file system needs). A power loss
    /// must be of the kind its disks have: a broken test otherwise.
    fn lose(&self, id: NodeId, durable: Vec<(PathBuf, u64)>, loss: Loss) {
        match (self, loss) {
            (Disks::Std { .. }, Loss::Nothing) => {}
            (Disks::Std { .. }, Loss::Unsynced { seed }) => {
                let mut rng = crate::rng::SplitMix64::new(seed ^ (u64::from(id.0) << 32));
                for (path, durable_bytes) in durable {
                    if let Err(error) = cut_to_durable(&path, durable_bytes, &mut rng) {
                        tracing::warn!(path = %path.display(), %error, "cannot simulate power loss");
                    }
                }
            }
            (Disks::Sim { disks, .. }, Loss::Nothing) => disks[id.0 as usize].crash(),
            (Disks::Sim { disks, .. }, Loss::Power { torn }) => {
                let disk = &disks[id.0 as usize];
                disk.set_torn_writes(torn);
                disk.lose_power();
            }
            (Disks::Std { .. }, Loss::Power { .. })
            | (Disks::Sim { .. }, Loss::Unsynced { .. }) => {
                panic!(
                    "node {id} cannot lose {loss:?} on {}",
                    match self {
                        Disks::Std { .. } => "the real file system",
                        Disks::Sim { .. } => "a simulated disk",
                    }
                )
            }
        }
    }
}

/// The running nodes of a harness, by id: one slot per node id, `None`
/// while that node is not running. Slots, not a map: node ids are
/// `0..count`, and the simulator looks its nodes up and walks them after
/// every event (a map's search cost it 3% of its instructions).
#[derive(Debug)]
pub(crate) struct RunningNodes<E> {
    slots: Vec<Option<E>>,
}

impl<E> RunningNodes<E> {
    /// `count` slots, all empty.
    fn new(count: usize) -> RunningNodes<E> {
        RunningNodes {
            slots: std::iter::repeat_with(|| None).take(count).collect(),
        }
    }

    /// Node `id`, if it is running.
    #[inline]
    pub(crate) fn get(&self, id: NodeId) -> Option<&E> {
        self.slots.get(id.0 as usize)?.as_ref()
    }

    /// Node `id`, if it is running.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: NodeId) -> Option<&mut E> {
        self.slots.get_mut(id.0 as usize)?.as_mut()
    }

    /// Records node `id` as running, returning what ran as `id` before.
    fn insert(&mut self, id: NodeId, running: E) -> Option<E> {
        let index = id.0 as usize;
        if index >= self.slots.len() {
            self.slots.resize_with(index + 1, || None);
        }
        self.slots[index].replace(running)
    }

    /// Takes node `id` out, if it is running.
    fn remove(&mut self, id: NodeId) -> Option<E> {
        self.slots.get_mut(id.0 as usize)?.take()
    }

    /// How many nodes are running.
    fn len(&self) -> usize {
        self.slots.iter().filter(|slot| slot.is_some()).count()
    }

    /// The running nodes with their ids, in id order.
    #[inline]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (NodeId, &E)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| Some((NodeId(index as u32), slot.as_ref()?)))
    }

    /// The running nodes, in id order.
    #[inline]
    pub(crate) fn values(&self) -> impl Iterator<Item = &E> {
        self.slots.iter().filter_map(Option::as_ref)
    }

    /// The running nodes, in id order.
    #[inline]
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut E> {
        self.slots.iter_mut().filter_map(Option::as_mut)
    }

    /// Takes every running node out, in id order.
    fn take_all(&mut self) -> Vec<E> {
        self.slots.iter_mut().filter_map(Option::take).collect()
    }
}

/// The nodes of a harness: their directories, on the harness's disks, and
/// the running ones.
#[derive(Debug)]
pub(crate) struct Nodes<E> {
    count: usize,
    disks: Disks,
    running: Mutex<RunningNodes<E>>,
}

impl<E: Hosted> Nodes<E> {
    /// `count` nodes on `disks`, none running yet.
    pub(crate) fn new(count: usize, disks: Disks) -> Nodes<E> {
        Nodes {
            count,
            disks,
            running: Mutex::new(RunningNodes::new(count)),
        }
    }

    /// The directory of node `id`.
    pub(crate) fn node_dir(&self, id: NodeId) -> PathBuf {
        self.disks.root().join(format!("node-{}", id.0))
    }

    /// The root directory of all nodes.
    pub(crate) fn root(&self) -> &Path {
        self.disks.root()
    }

    /// The disks the nodes keep their data on.
    pub(crate) fn disks(&self) -> &Disks {
        &self.disks
    }

    /// Ids of all nodes, running or not.
    pub(crate) fn ids(&self) -> Vec<NodeId> {
        (0..self.count).map(|i| NodeId(i as u32)).collect()
    }

    /// Takes node `id` out of the running ones.
    pub(crate) fn remove(&self, id: NodeId) -> Option<E> {
        self.running.lock().remove(id)
    }

    /// Takes every running node out, in id order.
    pub(crate) fn take_all(&self) -> Vec<E> {
        self.running.lock().take_all()
    }

    /// How many nodes are running.
    pub(crate) fn running_count(&self) -> usize {
        self.running.lock().len()
    }

    /// Runs `f` on every running node at once, by id (locked while it
    /// runs: `f` must not reach the harness again).
    pub(crate) fn with_each<T>(&self, f: impl FnOnce(&RunningNodes<E>) -> T) -> T {
        f(&self.running.lock())
    }

    /// Whether node `id` is running.
    pub(crate) fn is_running(&self, id: NodeId) -> bool {
        self.running.lock().get(id).is_some()
    }

    /// The running nodes, for a caller that owns the harness: no lock (a
    /// stepped harness's nodes are stepped through it on every event).
    pub(crate) fn running_mut(&mut self) -> &mut RunningNodes<E> {
        self.running.get_mut()
    }

    /// Runs `f` on what the harness keeps of node `id`, if it is running.
    pub(crate) fn with_running<T>(&self, id: NodeId, f: impl FnOnce(&E) -> T) -> Option<T> {
        self.running.lock().get(id).map(f)
    }

    /// The running nodes, locked: for a harness that must see or change
    /// them all at once (a node's new address told to every other node
    /// before it is recorded as running).
    pub(crate) fn lock(&self) -> MutexGuard<'_, RunningNodes<E>> {
        self.running.lock()
    }

    /// Runs `f` on node `id`, if it is running.
    pub(crate) fn with_node<T>(&self, id: NodeId, f: impl FnOnce(&Node) -> T) -> Option<T> {
        self.with_running(id, |running| f(running.node()))
    }

    /// The handle of `log` on `node`; `Shutdown` if the node is not running.
    pub(crate) fn log(&self, node: NodeId, log: LogId) -> Result<ReplicatedLog> {
        match self.running.lock().get(node) {
            Some(running) => running.node().log(log),
            None => Err(Error::Shutdown),
        }
    }
}

/// What only a harness of threaded nodes may do: wait, polling, for its
/// nodes to get somewhere. A stepped node gets nowhere while the caller
/// waits (and a wait inside a [`SimulationGuard`](crate::testing::SimulationGuard)
/// panics), so a stepped harness cannot name these.
impl<W, C> Nodes<Running<Node, W, C>> {
    /// The handle of `log` on `node`, once the node hosts it.
    pub(crate) fn wait_for_handle(
        &self,
        node: NodeId,
        log: LogId,
        deadline: Instant,
    ) -> Result<ReplicatedLog> {
        loop {
            match self.log(node, log) {
                Ok(handle) => return Ok(handle),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    /// The handle of `log` on the node that `log_state` names as its
    /// leader, once that node knows it leads in the epoch `log_state`
    /// names; polled every `poll` until `deadline`.
    pub(crate) fn leader_log_by(
        &self,
        log: LogId,
        deadline: Instant,
        poll: Duration,
        log_state: impl Fn() -> Option<LogState>,
    ) -> Result<ReplicatedLog> {
        loop {
            if let Some(state) = log_state() {
                if let Some(leader) = state.leader {
                    if let Ok(handle) = self.log(leader, log) {
                        if handle.is_leader() && handle.leader_epoch() == state.leader_epoch {
                            return Ok(handle);
                        }
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::LeaderNotAvailable(log));
            }
            std::thread::sleep(poll);
        }
    }
}

/// Polls `condition` on `cluster` every `poll` until it holds (true) or
/// `timeout` passes (false).
pub(crate) fn wait_until<C>(
    cluster: &C,
    timeout: Duration,
    poll: Duration,
    mut condition: impl FnMut(&C) -> bool,
) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition(cluster) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(poll);
    }
}

/// The setters of [`NodeSettings`] that every harness builder offers, for
/// a builder with a `settings: NodeSettings` field; `snapshots` adds the
/// per-node snapshot store setter.
macro_rules! node_settings_setters {
    () => {
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
        pub fn replication(mut self, replication: crate::config::ReplicationConfig) -> Self {
            self.settings.replication = replication;
            self
        }

        /// The replication settings the nodes will get, to change one field
        /// of the test defaults.
        pub fn replication_config(&self) -> crate::config::ReplicationConfig {
            self.settings.replication.clone()
        }

        /// Storage settings of every log.
        pub fn log_config(mut self, log: crate::storage::LogConfig) -> Self {
            self.settings.log = log;
            self
        }

        /// Coordinator session timeout of every node: after a crash that
        /// nobody reports, how long until the controller notices it.
        pub fn session_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.settings.session_timeout = timeout;
            self
        }

        /// The controller every node runs (`None`: no controller, leaders
        /// change only when a test writes the coordinator itself).
        pub fn controller(
            mut self,
            controller: Option<crate::coordinator::ControllerConfig>,
        ) -> Self {
            self.settings.controller = controller;
            self
        }
    };
    (snapshots) => {
        $crate::testing::harness::node_settings_setters!();

        /// Gives node `id` the application snapshot store `store`
        /// ([`NodeConfig::snapshots`](crate::NodeConfig::snapshots)), kept across its restarts.
        pub fn snapshots(
            mut self,
            id: crate::types::NodeId,
            store: crate::sync::Arc<dyn crate::snapshot::SnapshotStore>,
        ) -> Self {
            self.settings
                .snapshots
                .insert(id, crate::snapshot::Snapshots(store));
            self
        }
    };
}
pub(crate) use node_settings_setters;

/// The methods every public harness (a struct with a `harness: Harness<..>`
/// field) offers the same way: where its nodes live, which run, their log
/// handles, what the coordinator holds, polling, and a clean stop. `clock`
/// adds the clock and the nodes' incarnations.
macro_rules! harness_face {
    () => {
        /// The directory of node `id`.
        pub fn node_dir(&self, id: crate::types::NodeId) -> std::path::PathBuf {
            self.harness.nodes().node_dir(id)
        }

        /// The root directory of all nodes.
        pub fn root(&self) -> &std::path::Path {
            self.harness.nodes().root()
        }

        /// Ids of all nodes, running or not.
        pub fn node_ids(&self) -> Vec<crate::types::NodeId> {
            self.harness.nodes().ids()
        }

        /// Whether node `id` is running.
        pub fn is_running(&self, id: crate::types::NodeId) -> bool {
            self.harness.nodes().is_running(id)
        }

        /// The handle of `log` on `node`.
        pub fn log(
            &self,
            node: crate::types::NodeId,
            log: crate::types::LogId,
        ) -> crate::error::Result<crate::replicated_log::ReplicatedLog> {
            self.harness.nodes().log(node, log)
        }

        /// Runs `f` on node `id`, `None` when it is not running.
        pub fn with_node<T>(
            &self,
            id: crate::types::NodeId,
            f: impl FnOnce(&crate::node::Node) -> T,
        ) -> Option<T> {
            self.harness.nodes().with_node(id, f)
        }

        /// The in-sync replicas the coordinator holds for `log`.
        pub fn in_sync_replicas(&self, log: crate::types::LogId) -> Vec<crate::types::NodeId> {
            self.harness.in_sync_replicas(log)
        }

        /// The node the coordinator names as leader of `log`.
        pub fn leader_of(&self, log: crate::types::LogId) -> Option<crate::types::NodeId> {
            self.harness.leader_of(log)
        }

        /// The leader's handle of `log`, once that node knows it leads in the
        /// epoch the coordinator holds (up to 10 s).
        pub fn leader_log(
            &self,
            log: crate::types::LogId,
        ) -> crate::error::Result<crate::replicated_log::ReplicatedLog> {
            self.harness.leader_log(log)
        }

        /// Polls `condition` until it holds or `timeout` passes, every
        /// millisecond (every 2 ms on ZooKeeper, whose reads are slower).
        pub fn wait_until(
            &self,
            timeout: std::time::Duration,
            condition: impl FnMut(&Self) -> bool,
        ) -> bool {
            $crate::testing::harness::wait_until(self, timeout, self.harness.poll(), condition)
        }

        /// Stops every node cleanly, then closes its wiring (a TCP node's
        /// server and client, a ZooKeeper node's coordinator).
        pub fn shutdown(self) -> crate::error::Result<()> {
            self.harness.shutdown()
        }
    };
    (clock) => {
        $crate::testing::harness::harness_face!();

        /// The clock every node uses.
        pub fn clock(&self) -> crate::sync::Arc<dyn crate::clock::Clock> {
            self.harness.clock()
        }

        /// The current incarnation of node `id` (what its fetches carry), if
        /// it runs.
        pub fn incarnation(&self, id: crate::types::NodeId) -> Option<crate::types::Incarnation> {
            self.with_node(id, |node| node.incarnation())
        }
    };
}
pub(crate) use harness_face;

/// How the nodes of a harness reach each other: builds each node's
/// transport before it starts, makes it reachable once it runs, and cuts
/// and closes what it wired.
pub(crate) trait Wire: std::fmt::Debug {
    /// What the wire keeps of node `id` between building its transport and
    /// the node's start (TCP: its client, to shut down with the node).
    type Pending;
    /// What a running node holds of the wire (TCP: its server and client).
    type Held: std::fmt::Debug;

    /// The transport node `id` starts with.
    fn transport(&self, id: NodeId) -> Result<(Arc<dyn Transport>, Self::Pending)>;

    /// Makes the started `node` (node `id`) reachable. On an error the
    /// wire has released `pending`; the harness halts the node.
    fn connect(&self, id: NodeId, node: &Node, pending: Self::Pending) -> Result<Self::Held>;

    /// Tells running node `other`'s wiring where newly connected node `id`
    /// is, before `id` counts as running.
    fn announce(&self, _id: NodeId, _held: &Self::Held, _other: &Self::Held) {}

    /// The other nodes stop reaching node `id` (a crash begins, or a clean
    /// stop has ended).
    fn cut(&self, id: NodeId);

    /// Closes what a node held, once the node has stopped.
    fn release(&self, held: Self::Held);

    /// The harness is going away: lets go of every node in `ids`.
    fn close(&self, ids: &[NodeId]);
}

/// What coordinator each node of a harness gets, and the harness's own view
/// of the coordinated state.
pub(crate) trait Coordination: std::fmt::Debug {
    /// What a running node holds of its coordinator (ZooKeeper: a client of
    /// its own).
    type Held: std::fmt::Debug;
    /// How the coordinator is named in a panic on a failed read.
    const NAME: &'static str;

    /// The coordinator node `id` starts with, as a new process would get it.
    fn connect(&self, id: NodeId) -> Result<(Arc<dyn Coordinator>, Self::Held)>;

    /// Node `id` crashed (`held` is `None` if it was not running); `session`
    /// says whether the coordinator hears of it now or when its session
    /// expires.
    fn crashed(&self, id: NodeId, held: Option<Self::Held>, session: SessionEnd);

    /// Creates `log` on `replicas`, settling an unknown outcome by `deadline`.
    fn create_log(&self, log: LogId, replicas: Vec<NodeId>, deadline: Instant) -> Result<()>;

    /// The coordinator's record of `log`, as the harness's own handle reads it.
    fn log_state(&self, log: LogId) -> Result<Option<LogState>>;

    /// The harness is going away, every node halted: lets go of what the
    /// coordination still holds.
    fn close(&self) {}
}

/// The wait that ends [`Harness::create_log`] once every running replica
/// hosts the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaderWait {
    /// Until the node the coordinator names leads: the controller may move
    /// the leadership right after the create (a node's short session
    /// expiring on a loaded machine), and waiting for the first replica
    /// alone then timed out although the log had a leader (a flaky
    /// `create_log` in the fault test, whose sessions last 300 ms).
    Coordinator,
    /// Until the first replica leads, if it runs.
    FirstReplica,
}

/// How a harness's nodes run: on threads of their own ([`Threads`]), or
/// stepped by the caller ([`Stepped`], the simulator's way). A process
/// ends only through [`stop`](Self::stop), [`halt_for_crash`](Self::halt_for_crash)
/// or [`halt`](Self::halt), never by being dropped: a dropped [`Node`]
/// that was neither halted nor stopped shuts itself down cleanly.
pub(crate) trait Runtime: std::fmt::Debug {
    /// A running node process as this runtime keeps it.
    type Process: Hosted + std::fmt::Debug;

    /// Opens node `config.node_id` on `disk` with the given wiring and
    /// clock, ready to run.
    fn open(
        &self,
        disk: Arc<dyn Disk>,
        config: NodeConfig,
        transport: Arc<dyn Transport>,
        coordinator: Arc<dyn Coordinator>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self::Process>;

    /// Stops `process` cleanly; whether it wrote the clean-shutdown
    /// marker.
    fn stop(process: Self::Process) -> Result<bool>;

    /// Halts `process` as a crash does, once it was marked crashed
    /// ([`Node::mark_crashed`]); each segment file with the length its last
    /// fsync covered.
    fn halt_for_crash(process: Self::Process) -> Vec<(PathBuf, u64)>;

    /// Halts `process` as a killed process stops, losing nothing of what
    /// it wrote.
    fn halt(process: Self::Process);
}

/// Nodes on threads of their own, as in production.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Threads;

impl Runtime for Threads {
    type Process = Node;

    fn open(
        &self,
        disk: Arc<dyn Disk>,
        config: NodeConfig,
        transport: Arc<dyn Transport>,
        coordinator: Arc<dyn Coordinator>,
        clock: Arc<dyn Clock>,
    ) -> Result<Node> {
        Node::start_on_disk(disk, config, transport, coordinator, clock)
    }

    fn stop(process: Node) -> Result<bool> {
        process.shutdown_marked()
    }

    fn halt_for_crash(process: Node) -> Vec<(PathBuf, u64)> {
        process.halt_for_crash()
    }

    fn halt(process: Node) {
        process.halt();
    }
}

/// Nodes opened without threads ([`SteppedNode`]), each with its
/// controller candidate ([`SteppedController`]), that the caller steps on
/// its own thread and clock.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stepped;

/// A stepped node process: the node and its controller candidate, if it
/// runs one.
#[derive(Debug)]
pub(crate) struct SteppedProcess {
    pub(crate) node: SteppedNode,
    pub(crate) controller: Option<SteppedController>,
}

impl SteppedProcess {
    /// Whether its control or its controller would wake at `now`.
    #[inline]
    pub(crate) fn is_due(&self, now: Instant) -> bool {
        self.node.is_control_due(now)
            || self
                .controller
                .as_ref()
                .is_some_and(|controller| controller.is_due(now))
    }

    /// Whether it has work at `now`: its control or controller would wake,
    /// or completions wait to run.
    #[inline]
    pub(crate) fn has_work(&self, now: Instant) -> bool {
        self.is_due(now) || self.node.has_pending_completions()
    }
}

impl Hosted for SteppedProcess {
    fn node(&self) -> &Node {
        self.node.node()
    }
}

impl Runtime for Stepped {
    type Process = SteppedProcess;

    /// Opens the controller first: it subscribes to the coordinator before
    /// the node registers, the order a simulated run's events depend on.
    fn open(
        &self,
        disk: Arc<dyn Disk>,
        config: NodeConfig,
        transport: Arc<dyn Transport>,
        coordinator: Arc<dyn Coordinator>,
        clock: Arc<dyn Clock>,
    ) -> Result<SteppedProcess> {
        let controller = match controller_config(&config) {
            Some(controller) => Some(SteppedController::open(
                config.node_id,
                Arc::clone(&coordinator),
                controller,
                Arc::clone(&clock),
            )?),
            None => None,
        };
        let node = Node::open_on_disk(disk, config, transport, coordinator, clock)?;
        Ok(SteppedProcess { node, controller })
    }

    /// Ends the process's controlled shutdown (its hand-overs, if any, were
    /// stepped by the caller); its controller resigns nothing.
    fn stop(process: SteppedProcess) -> Result<bool> {
        process.node.finish_controlled_shutdown()
    }

    fn halt_for_crash(process: SteppedProcess) -> Vec<(PathBuf, u64)> {
        process.node.into_node().halt_for_crash()
    }

    /// Halts it as a crash does: a stepped node has no threads to stop
    /// otherwise, and its logs must let go of their files.
    fn halt(process: SteppedProcess) {
        let node = process.node.into_node();
        node.mark_crashed();
        let _durable = node.halt_for_crash();
    }
}

/// A running node process with its wiring.
#[derive(Debug)]
pub(crate) struct Running<P, W, C> {
    pub(crate) process: P,
    pub(crate) wire: W,
    pub(crate) coordinator: C,
}

impl<P: Hosted, W, C> Hosted for Running<P, W, C> {
    fn node(&self) -> &Node {
        self.process.node()
    }
}

/// The running node as a harness on wire `W`, coordination `C` and
/// runtime `R` keeps it.
pub(crate) type RunningOn<W, C, R = Threads> =
    Running<<R as Runtime>::Process, <W as Wire>::Held, <C as Coordination>::Held>;

/// N nodes on a wire and a coordination, run by a runtime: the one
/// harness that [`Cluster`](super::Cluster), [`TcpCluster`](super::TcpCluster)
/// and `ZkCluster` are faces of (on [`Threads`]). Dropping it halts every
/// node still running.
#[derive(Debug)]
pub(crate) struct Harness<W: Wire, C: Coordination, R: Runtime = Threads> {
    runtime: R,
    wire: W,
    coordination: C,
    settings: NodeSettings,
    clock: Arc<dyn Clock>,
    nodes: Nodes<RunningOn<W, C, R>>,
    leader_wait: LeaderWait,
    /// How often waits poll.
    poll: Duration,
}

impl<W: Wire, C: Coordination, R: Runtime> Harness<W, C, R> {
    /// A harness of `settings.nodes` nodes on `disks`, run by `runtime`,
    /// none started yet. Its waits poll every millisecond and a created
    /// log is waited for until its first replica leads (see
    /// [`Harness::start`] for a harness that waits otherwise).
    pub(crate) fn new(
        runtime: R,
        wire: W,
        coordination: C,
        disks: Disks,
        settings: NodeSettings,
        clock: Arc<dyn Clock>,
    ) -> Harness<W, C, R> {
        Harness {
            runtime,
            wire,
            coordination,
            nodes: Nodes::new(settings.nodes, disks),
            settings,
            clock,
            leader_wait: LeaderWait::FirstReplica,
            poll: Duration::from_millis(1),
        }
    }

    /// The coordination.
    pub(crate) fn coordination(&self) -> &C {
        &self.coordination
    }

    /// The nodes.
    pub(crate) fn nodes(&self) -> &Nodes<RunningOn<W, C, R>> {
        &self.nodes
    }

    /// The running nodes, for a caller that owns the harness: no lock.
    pub(crate) fn running_mut(&mut self) -> &mut RunningNodes<RunningOn<W, C, R>> {
        self.nodes.running_mut()
    }

    /// The settings every node opens with, to change before its next open
    /// (a node whose disk was lost gets a new snapshot store).
    pub(crate) fn settings_mut(&mut self) -> &mut NodeSettings {
        &mut self.settings
    }

    /// The disks the nodes keep their data on, to replace one of a node
    /// that is down.
    pub(crate) fn disks_mut(&mut self) -> &mut Disks {
        &mut self.nodes.disks
    }

    /// The clock every node uses.
    pub(crate) fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock)
    }

    /// How often waits poll.
    pub(crate) fn poll(&self) -> Duration {
        self.poll
    }

    /// Starts (or restarts) node `id` from its directory, with a new
    /// coordinator and transport (a new process), and makes it reachable.
    pub(crate) fn start_node(&self, id: NodeId) -> Result<()> {
        let (coordinator, coordinator_held) = self.coordination.connect(id)?;
        let (transport, pending) = self.wire.transport(id)?;
        let config = self.settings.node_config(id, self.nodes.node_dir(id));
        let process = self.runtime.open(
            self.nodes.disks.disk(id),
            config,
            transport,
            coordinator,
            Arc::clone(&self.clock),
        )?;
        let wire = match self.wire.connect(id, process.node(), pending) {
            Ok(wire) => wire,
            Err(error) => {
                R::halt(process);
                return Err(error);
            }
        };
        let mut running = self.nodes.lock();
        for (other, peer) in running.iter() {
            if other != id {
                self.wire.announce(id, &wire, &peer.wire);
            }
        }
        running.insert(
            id,
            Running {
                process,
                wire,
                coordinator: coordinator_held,
            },
        );
        Ok(())
    }

    /// Crashes node `id`: the wire stops reaching it, its threads stop,
    /// nothing is flushed or closed, `loss` says what of its data survives
    /// and `session` when the coordinator hears of it.
    pub(crate) fn crash_with(&self, id: NodeId, loss: Loss, session: SessionEnd) {
        self.wire.cut(id);
        let running = self.nodes.remove(id);
        // The crash happens before the coordinator hears of it: a node
        // still winding down must not see its session end and open a new
        // one (found as a flaky unclean-election test: the crashed node
        // re-registered and rejoined the ISR).
        if let Some(running) = &running {
            running.node().mark_crashed();
        }
        let (running, coordinator) = match running {
            Some(Running {
                process,
                wire,
                coordinator,
            }) => (Some((process, wire)), Some(coordinator)),
            None => (None, None),
        };
        self.coordination.crashed(id, coordinator, session);
        if let Some((process, wire)) = running {
            // Threads first, then the lengths: they only grow while it runs.
            let durable = R::halt_for_crash(process);
            self.nodes.disks.lose(id, durable, loss);
            self.wire.release(wire);
        }
    }

    /// Halts node `id` as a killed process stops: its threads stop, nothing
    /// is flushed, its wiring closes; the coordinator is not told (its
    /// session expires on its own). Does nothing if it is not running.
    pub(crate) fn halt(&self, id: NodeId) {
        let Some(running) = self.nodes.remove(id) else {
            return;
        };
        // Halting first wakes the node's parked long-poll fetches (they then
        // answer `Shutdown`), so a server's handler threads are free by the
        // time the server waits for them.
        R::halt(running.process);
        drop(running.coordinator);
        self.wire.release(running.wire);
    }

    /// Stops node `id` cleanly: its logs are flushed and closed and it
    /// leaves the coordinator. It stays reachable while it shuts down, as
    /// a real process does, so that its controlled shutdown lets followers
    /// catch up before it hands its leadership over.
    pub(crate) fn stop_node(&self, id: NodeId) -> Result<()> {
        self.stop_node_marked(id).map(drop)
    }

    /// [`stop_node`](Self::stop_node), telling whether the node wrote the
    /// clean-shutdown marker (`false` if it was not running).
    pub(crate) fn stop_node_marked(&self, id: NodeId) -> Result<bool> {
        let outcome = match self.nodes.remove(id) {
            Some(running) => {
                let outcome = R::stop(running.process);
                drop(running.coordinator);
                self.wire.release(running.wire);
                outcome
            }
            None => Ok(false),
        };
        self.wire.cut(id);
        outcome
    }

    /// Halts every node still running, as [`halt`](Self::halt) does one,
    /// in id order.
    pub(crate) fn halt_all(&self) {
        for running in self.nodes.take_all() {
            R::halt(running.process);
            drop(running.coordinator);
            self.wire.release(running.wire);
        }
    }

    /// The coordinator's record of `log`; `None` before the log is created.
    /// The harness's own handle is never cut off, so an error means a
    /// broken test: it panics rather than read as "no leader" or "no ISR",
    /// which an assertion could take for the outcome it waits for.
    pub(crate) fn log_state(&self, log: LogId) -> Option<LogState> {
        self.coordination
            .log_state(log)
            .unwrap_or_else(|error| panic!("cannot read {log} from {}: {error}", C::NAME))
    }

    /// The in-sync replicas the coordinator holds for `log`.
    pub(crate) fn in_sync_replicas(&self, log: LogId) -> Vec<NodeId> {
        self.log_state(log)
            .map(|state| state.in_sync_replicas)
            .unwrap_or_default()
    }

    /// The node the coordinator names as leader of `log`.
    pub(crate) fn leader_of(&self, log: LogId) -> Option<NodeId> {
        self.log_state(log).and_then(|state| state.leader)
    }

    /// Stops every node cleanly, then its wiring; the first error, if any,
    /// after all have stopped.
    pub(crate) fn shutdown(self) -> Result<()> {
        let mut outcome = Ok(());
        for running in self.nodes.take_all() {
            let stopped = R::stop(running.process).map(drop);
            drop(running.coordinator);
            self.wire.release(running.wire);
            if outcome.is_ok() {
                outcome = stopped;
            }
        }
        outcome
    }
}

/// What only a harness of threaded nodes does: start every node at once,
/// and wait for its nodes to get somewhere (see [`Nodes::wait_for_handle`]).
impl<W: Wire, C: Coordination> Harness<W, C> {
    /// A harness of `settings.nodes` nodes, every one started; `poll` is
    /// how often its waits poll.
    pub(crate) fn start(
        wire: W,
        coordination: C,
        settings: NodeSettings,
        clock: Arc<dyn Clock>,
        leader_wait: LeaderWait,
        poll: Duration,
    ) -> Result<Harness<W, C>> {
        let mut harness = Harness::new(
            Threads,
            wire,
            coordination,
            Disks::temporary()?,
            settings,
            clock,
        );
        harness.leader_wait = leader_wait;
        harness.poll = poll;
        for id in harness.nodes.ids() {
            harness.start_node(id)?;
        }
        Ok(harness)
    }

    /// Creates `log` with `replication_factor` replicas placed by
    /// [`assign_replicas`], and waits (up to 10 s) until every running
    /// replica hosts it and its leader leads, as `leader_wait` says.
    pub(crate) fn create_log(&self, log: LogId, replication_factor: usize) -> Result<Vec<NodeId>> {
        let replicas = assign_replicas(log.0, &self.nodes.ids(), replication_factor)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        self.coordination
            .create_log(log, replicas.clone(), deadline)?;
        let first = replicas[0];
        for &node in &replicas {
            if !self.nodes.is_running(node) {
                continue;
            }
            let handle = self.nodes.wait_for_handle(node, log, deadline)?;
            if self.leader_wait == LeaderWait::FirstReplica && node == first {
                handle.wait_until_leader(deadline.saturating_duration_since(Instant::now()))?;
            }
        }
        if self.leader_wait == LeaderWait::Coordinator {
            self.leader_log_by(log, deadline)?;
        }
        Ok(replicas)
    }

    /// The leader's handle of `log`, once that node knows it leads in the
    /// coordinator's current epoch (up to 10 s).
    pub(crate) fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        self.leader_log_by(log, Instant::now() + Duration::from_secs(10))
    }

    fn leader_log_by(&self, log: LogId, deadline: Instant) -> Result<ReplicatedLog> {
        self.nodes
            .leader_log_by(log, deadline, self.poll, || self.log_state(log))
    }
}

impl<W: Wire, C: Coordination, R: Runtime> Drop for Harness<W, C, R> {
    /// Halts every node still running and closes its wiring, then lets the
    /// coordination and the wire go. The memory network holds each node's
    /// request handler and each node holds a transport into the network:
    /// without this, a dropped harness would keep its nodes — their
    /// threads' state and their open log files — alive in a reference
    /// cycle (a long fault test then runs out of file descriptors).
    fn drop(&mut self) {
        // Nodes first: a node being stopped stops its fetchers, which may
        // be waiting on a peer's server.
        self.halt_all();
        self.coordination.close();
        self.wire.close(&self.nodes.ids());
    }
}

/// The nodes on one [`MemoryNetwork`] (its fault injection is the test's).
#[derive(Debug)]
pub(crate) struct MemoryWire {
    network: MemoryNetwork,
}

impl MemoryWire {
    /// The nodes on `network` (a clone of the test's).
    pub(crate) fn new(network: MemoryNetwork) -> MemoryWire {
        MemoryWire { network }
    }
}

impl Wire for MemoryWire {
    type Pending = ();
    type Held = ();

    fn transport(&self, id: NodeId) -> Result<(Arc<dyn Transport>, ())> {
        Ok((Arc::new(self.network.transport(id)), ()))
    }

    fn connect(&self, id: NodeId, node: &Node, _pending: ()) -> Result<()> {
        self.network.register(id, node.handler());
        self.network.node_up(id);
        Ok(())
    }

    fn cut(&self, id: NodeId) {
        self.network.node_down(id);
    }

    fn release(&self, _held: ()) {}

    fn close(&self, ids: &[NodeId]) {
        for &id in ids {
            self.network.unregister(id);
        }
    }
}

/// The nodes of a simulated run on one [`MemoryNetwork`] that only hands
/// out their transports and holds their request handlers: the run carries
/// every fetch itself, so nothing is routed through it. A cut node's
/// handler goes (unlike [`MemoryWire`]'s, which keeps it for `node_up`):
/// the handler holds the node and the node's transport the network, a
/// cycle that would keep every crashed process alive.
#[derive(Debug)]
pub(crate) struct SteppedWire {
    network: MemoryNetwork,
}

impl SteppedWire {
    /// The nodes on a new network seeded by `seed`.
    pub(crate) fn new(seed: u64) -> SteppedWire {
        SteppedWire {
            network: MemoryNetwork::new(seed),
        }
    }
}

impl Wire for SteppedWire {
    type Pending = ();
    type Held = ();

    fn transport(&self, id: NodeId) -> Result<(Arc<dyn Transport>, ())> {
        Ok((Arc::new(self.network.transport(id)), ()))
    }

    fn connect(&self, id: NodeId, node: &Node, _pending: ()) -> Result<()> {
        self.network.register(id, node.handler());
        Ok(())
    }

    fn cut(&self, id: NodeId) {
        self.network.unregister(id);
    }

    fn release(&self, _held: ()) {}

    fn close(&self, ids: &[NodeId]) {
        for &id in ids {
            self.network.unregister(id);
        }
    }
}

/// Every node on its own view ([`MemoryCoordinator::for_node`]) of one
/// shared [`MemoryCoordinator`], optionally through a [`SlowCoordinator`]
/// whose knob a test turns.
#[derive(Debug)]
pub(crate) struct MemoryCoordination {
    coordinator: MemoryCoordinator,
    /// Each node's [`SlowCoordinator`] knob, kept across restarts; `None`:
    /// the nodes call the coordinator directly.
    delays: Option<Mutex<BTreeMap<NodeId, CoordinatorDelay>>>,
}

impl MemoryCoordination {
    /// Nodes on views of `coordinator` (a clone of the test's), each
    /// through a [`SlowCoordinator`] if `slow`.
    pub(crate) fn new(coordinator: MemoryCoordinator, slow: bool) -> MemoryCoordination {
        MemoryCoordination {
            coordinator,
            delays: slow.then(|| Mutex::new(BTreeMap::new())),
        }
    }

    /// The shared coordinator the nodes' views are of.
    pub(crate) fn coordinator(&self) -> &MemoryCoordinator {
        &self.coordinator
    }

    /// The knob that slows node `id`'s coordinator calls down; `None` if
    /// the nodes call the coordinator directly.
    pub(crate) fn delay(&self, id: NodeId) -> Option<CoordinatorDelay> {
        let delays = self.delays.as_ref()?;
        Some(delays.lock().entry(id).or_default().clone())
    }
}

impl Coordination for MemoryCoordination {
    type Held = ();
    const NAME: &'static str = "the coordinator";

    fn connect(&self, id: NodeId) -> Result<(Arc<dyn Coordinator>, ())> {
        let view = Arc::new(self.coordinator.for_node(id));
        let coordinator: Arc<dyn Coordinator> = match self.delay(id) {
            Some(delay) => Arc::new(SlowCoordinator::new(view, delay)),
            None => view,
        };
        Ok((coordinator, ()))
    }

    fn crashed(&self, id: NodeId, _held: Option<()>, session: SessionEnd) {
        if session == SessionEnd::Immediately {
            self.coordinator.fail_node(id);
        }
    }

    fn create_log(&self, log: LogId, replicas: Vec<NodeId>, _deadline: Instant) -> Result<()> {
        self.coordinator.create_log(log, replicas).map(|_| ())
    }

    fn log_state(&self, log: LogId) -> Result<Option<LogState>> {
        self.coordinator.log_state(log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, PreviousShutdown};

    /// A harness of stepped nodes on simulated disks opens a node with its
    /// controller and no thread, stops it cleanly (the next open finds the
    /// marker), and crashes it with its machine's power (the next open
    /// finds its log without the marker).
    #[test]
    fn a_stepped_harness_opens_stops_and_crashes_a_node() {
        let clock = ManualClock::default();
        let coordinator = MemoryCoordinator::without_expiry_thread(Arc::new(clock.clone()));
        let mut settings =
            NodeSettings::for_tests(Duration::from_secs(1), Some(ControllerConfig::default()));
        settings.nodes = 1;
        settings.replication.min_insync_replicas = 1;
        let disk = SimDisk::new(1);
        let harness = Harness::new(
            Stepped,
            MemoryWire::new(MemoryNetwork::new(1)),
            MemoryCoordination::new(coordinator.clone(), false),
            Disks::Sim {
                root: PathBuf::from("/sim"),
                disks: vec![disk.clone()],
            },
            settings,
            Arc::new(clock),
        );
        let id = NodeId(0);
        let previous = |harness: &Harness<_, _, Stepped>| {
            harness.nodes().with_node(id, Node::previous_shutdown)
        };

        // Created before the open, the log is opened by it: a crash then
        // leaves data behind.
        coordinator.create_log(LogId(1), vec![id]).unwrap();
        harness.start_node(id).unwrap();
        assert_eq!(previous(&harness), Some(PreviousShutdown::Fresh));
        assert!(harness.nodes().log(id, LogId(1)).is_ok());
        let (controller, threads) = harness
            .nodes()
            .with_running(id, |running| {
                (
                    running.process.controller.is_some(),
                    running.node().fetcher_thread_count(),
                )
            })
            .unwrap();
        assert!(controller);
        assert_eq!(threads, 0);

        harness.stop_node(id).unwrap();
        assert!(!harness.nodes().is_running(id));
        harness.start_node(id).unwrap();
        assert_eq!(previous(&harness), Some(PreviousShutdown::Clean));

        harness.crash_with(id, Loss::Power { torn: false }, SessionEnd::Immediately);
        assert!(!harness.nodes().is_running(id));
        harness.start_node(id).unwrap();
        assert_eq!(previous(&harness), Some(PreviousShutdown::Unclean));
        // Nothing reached the real file system.
        assert!(!Path::new("/sim/node-0").exists());
        assert!(disk.exists(&Path::new("/sim/node-0").join("identity.properties")));
        // Dropping the harness halts the node.
    }
}
