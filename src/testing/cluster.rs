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

use std::path::Path;
use std::time::Duration;

use super::harness::{self, Harness, LeaderWait, MemoryCoordination, MemoryWire, NodeSettings};
use crate::clock::{Clock, ManualClock, SystemClock};
use crate::coordinator::{ControllerConfig, MemoryCoordinator};
use crate::error::Result;
use crate::sync::Arc;
use crate::testing::CoordinatorDelay;
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
    rng: &mut crate::rng::SplitMix64,
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
}

impl ClusterBuilder {
    harness::node_settings_setters!(snapshots);

    /// How long each node's clean stop may spend handing its leadership
    /// over ([`NodeConfig::controlled_shutdown_timeout`](crate::NodeConfig::controlled_shutdown_timeout); zero turns it
    /// off).
    pub fn controlled_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.settings.controlled_shutdown_timeout = Some(timeout);
        self
    }

    /// How often leaders apply retention.
    pub fn retention_check_interval(mut self, interval: Duration) -> Self {
        self.settings.retention_check_interval = Some(interval);
        self
    }

    /// Seed of the network's fault injection.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
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
        let network = MemoryNetwork::new(self.seed);
        let coordinator = MemoryCoordinator::new(Arc::clone(&clock));
        let harness = Harness::start(
            MemoryWire::new(network.clone()),
            MemoryCoordination::new(coordinator.clone(), true),
            self.settings,
            clock,
            LeaderWait::Coordinator,
            Duration::from_millis(1),
        )?;
        Ok(Cluster {
            harness,
            network,
            coordinator,
        })
    }
}

/// N nodes in one process. Dropping it stops every node.
#[derive(Debug)]
pub struct Cluster {
    /// First, so that it halts the nodes before the rest goes.
    harness: Harness<MemoryWire, MemoryCoordination>,
    /// The network between the nodes (fault injection lives here).
    pub network: MemoryNetwork,
    /// The coordinator all nodes share.
    pub coordinator: MemoryCoordinator,
}

impl Cluster {
    harness::harness_face!(clock);

    /// A builder with 3 nodes, min ISR 1, quick timeouts for tests.
    pub fn builder() -> ClusterBuilder {
        let mut settings =
            NodeSettings::for_tests(Duration::from_secs(10), Some(ControllerConfig::default()));
        settings.retention_check_interval = Some(Duration::from_secs(300));
        settings.controlled_shutdown_timeout = Some(Duration::from_secs(5));
        ClusterBuilder {
            settings,
            seed: 0,
            manual_clock: None,
        }
    }

    /// Starts (or restarts) node `id` from its directory.
    pub fn start_node(&self, id: NodeId) -> Result<()> {
        self.harness.start_node(id)
    }

    /// The knob that slows node `id`'s coordinator calls down (or makes
    /// them hang): a coordinator that is slow or stuck for that node only.
    pub fn coordinator_delay(&self, id: NodeId) -> CoordinatorDelay {
        // Every node of a `Cluster` calls through a `SlowCoordinator`.
        self.harness.coordination().delay(id).unwrap_or_default()
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
        self.harness.crash_with(id, lose.into(), session);
    }

    /// Stops node `id` cleanly: its logs are flushed and closed (a clean
    /// shutdown for the next open) and it leaves the coordinator.
    ///
    /// The node stays reachable while it shuts down, as a real process
    /// does: its controlled shutdown lets followers catch up before it
    /// hands its leadership over.
    pub fn stop_node(&self, id: NodeId) -> Result<()> {
        self.harness.stop_node(id)
    }

    /// Restarts a crashed node from its directory.
    pub fn restart(&self, id: NodeId) -> Result<()> {
        self.start_node(id)
    }

    /// Creates `log` with `replication_factor` replicas placed by
    /// [`assign_replicas`](crate::coordinator::assign_replicas), and waits
    /// until every running replica hosts it and the coordinator's leader of
    /// it leads (up to 10 s).
    ///
    /// That leader is the first replica unless the controller moved the
    /// leadership meanwhile: on a loaded machine a node's short session can
    /// expire right after the log is created, and waiting for the first
    /// replica alone then timed out although the log had a leader (a flaky
    /// `create_log` in the fault test, whose sessions last 300 ms).
    pub fn create_log(&self, log: LogId, replication_factor: usize) -> Result<Vec<NodeId>> {
        self.harness.create_log(log, replication_factor)
    }
}
