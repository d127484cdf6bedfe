//! What the cluster harnesses ([`Cluster`](super::Cluster),
//! [`TcpCluster`](super::TcpCluster) and `ZkCluster`) share: the nodes'
//! directories under one temporary directory, the table of running nodes,
//! the settings every node gets, the handles a test asks for, crashes that
//! lose unsynced bytes, and polling until a condition holds.
//!
//! It owns nothing of how the nodes reach each other or the coordinator:
//! each harness starts a node on its own transport and coordinator and
//! keeps, next to the [`Node`], what it wired it with (a server and a
//! client, a coordinator of its own).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cluster::{cut_to_durable, Lose};
use crate::config::{NodeConfig, ReplicationConfig};
use crate::coordinator::{ControllerConfig, LogState};
use crate::error::{Error, Result};
use crate::node::Node;
use crate::replicated_log::ReplicatedLog;
use crate::snapshot::Snapshots;
use crate::storage::LogConfig;
use crate::sync::{Mutex, MutexGuard};
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
        config
    }
}

/// The nodes of a harness: their directories, each under one temporary
/// directory that lives as long as the harness, and the running ones.
#[derive(Debug)]
pub(crate) struct Nodes<R> {
    count: usize,
    root: PathBuf,
    _dir: tempfile::TempDir,
    running: Mutex<BTreeMap<NodeId, R>>,
}

impl<R: Hosted> Nodes<R> {
    /// `count` nodes, none running yet, in a fresh temporary directory.
    pub(crate) fn new(count: usize) -> Result<Nodes<R>> {
        let dir = tempfile::tempdir()
            .map_err(|e| Error::io(std::env::temp_dir(), "create temp dir", e))?;
        Ok(Nodes {
            count,
            root: dir.path().to_path_buf(),
            _dir: dir,
            running: Mutex::new(BTreeMap::new()),
        })
    }

    /// The directory of node `id`.
    pub(crate) fn node_dir(&self, id: NodeId) -> PathBuf {
        self.root.join(format!("node-{}", id.0))
    }

    /// The root directory of all nodes.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Ids of all nodes, running or not.
    pub(crate) fn ids(&self) -> Vec<NodeId> {
        (0..self.count).map(|i| NodeId(i as u32)).collect()
    }

    /// Records node `id` as running.
    pub(crate) fn insert(&self, id: NodeId, running: R) {
        self.running.lock().insert(id, running);
    }

    /// Takes node `id` out of the running ones.
    pub(crate) fn remove(&self, id: NodeId) -> Option<R> {
        self.running.lock().remove(&id)
    }

    /// Takes every running node out, in id order.
    pub(crate) fn take_all(&self) -> Vec<R> {
        std::mem::take(&mut *self.running.lock())
            .into_values()
            .collect()
    }

    /// Whether node `id` is running.
    pub(crate) fn is_running(&self, id: NodeId) -> bool {
        self.running.lock().contains_key(&id)
    }

    /// Runs `f` on what the harness keeps of node `id`, if it is running.
    pub(crate) fn with_running<T>(&self, id: NodeId, f: impl FnOnce(&R) -> T) -> Option<T> {
        self.running.lock().get(&id).map(f)
    }

    /// The running nodes, locked: for a harness that must see or change
    /// them all at once (a node's new address told to every other node
    /// before it is recorded as running).
    pub(crate) fn lock(&self) -> MutexGuard<'_, BTreeMap<NodeId, R>> {
        self.running.lock()
    }

    /// Runs `f` on node `id`, if it is running.
    pub(crate) fn with_node<T>(&self, id: NodeId, f: impl FnOnce(&Node) -> T) -> Option<T> {
        self.with_running(id, |running| f(running.node()))
    }

    /// The handle of `log` on `node`; `Shutdown` if the node is not running.
    pub(crate) fn log(&self, node: NodeId, log: LogId) -> Result<ReplicatedLog> {
        let running = self.running.lock();
        let running = running.get(&node).ok_or(Error::Shutdown)?;
        running.node().log(log)
    }

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

/// Halts `node` (node `id`) as a crash does, and then loses what `lose`
/// says of its data: under a power loss every segment file is cut back to
/// what its last fsync covered, keeping none or a random prefix of the
/// rest (see [`Cluster::crash_losing_unflushed`](super::Cluster::crash_losing_unflushed)).
pub(crate) fn halt_losing(node: Node, id: NodeId, lose: Lose) {
    // Threads first, then the lengths: they only grow while it runs.
    let durable = node.halt_for_crash();
    if let Lose::UnflushedBytes { seed } = lose {
        let mut rng = crate::transport::SplitMix64::new(seed ^ (u64::from(id.0) << 32));
        for (path, durable_bytes) in durable {
            if let Err(error) = cut_to_durable(&path, durable_bytes, &mut rng) {
                tracing::warn!(path = %path.display(), %error, "cannot simulate power loss");
            }
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
