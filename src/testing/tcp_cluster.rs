//! `TcpCluster`: N nodes in one process that talk over loopback TCP (each
//! with its own [`TcpServer`] on `127.0.0.1:0` and its own [`TcpTransport`]),
//! sharing one [`MemoryCoordinator`], so that a scenario test or a bench runs
//! the real wire path:
//!
//! ```
//! use isrlog::testing::TcpCluster;
//! use isrlog::{Acks, LogId};
//!
//! let cluster = TcpCluster::builder().nodes(3).min_insync_replicas(2).build().unwrap();
//! let log = LogId(1);
//! cluster.create_log(log, 3).unwrap();
//! let leader = cluster.leader_log(log).unwrap();
//! let appended = leader.append_values(&[b"a"], Acks::All).unwrap();
//! assert!(leader.high_watermark() > appended.last_offset);
//! ```
//!
//! This module owns the wiring of nodes, servers, clients and addresses; it
//! owns nothing of the TCP transport itself. Unlike [`super::Cluster`] it has
//! no fault injection on the network: a crash is a node that stops answering
//! (its server and client are shut down, its threads halted) and whose
//! coordinator session runs out on its own, as a killed process's would.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::harness::{self, Hosted, NodeSettings, Nodes};
use crate::clock::{Clock, SystemClock};
use crate::config::ReplicationConfig;
use crate::coordinator::{
    assign_replicas, ControllerConfig, Coordinator, LogState, MemoryCoordinator,
};
#[cfg(feature = "tls")]
use crate::error::Error;
use crate::error::Result;
use crate::node::Node;
use crate::replicated_log::ReplicatedLog;
use crate::storage::LogConfig;
use crate::sync::{Arc, Mutex};
use crate::transport::{TcpConfig, TcpServer, TcpServerStats, TcpTransport};
use crate::types::{LogId, NodeId};

/// Builds a [`TcpCluster`].
#[derive(Debug, Clone)]
pub struct TcpClusterBuilder {
    settings: NodeSettings,
    tcp: TcpConfig,
    /// Each node's TLS settings; `None`: plain TCP.
    #[cfg(feature = "tls")]
    tls: Option<BTreeMap<NodeId, crate::transport::TlsConfig>>,
}

impl TcpClusterBuilder {
    /// Gives node `id` the application snapshot store `store`
    /// ([`NodeConfig::snapshots`](crate::NodeConfig::snapshots)), kept across its restarts.
    pub fn snapshots(mut self, id: NodeId, store: Arc<dyn crate::snapshot::SnapshotStore>) -> Self {
        self.settings
            .snapshots
            .insert(id, crate::snapshot::Snapshots(store));
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

    /// The replication settings the nodes will get, to change one field
    /// of the test defaults.
    pub fn replication_config(&self) -> ReplicationConfig {
        self.settings.replication.clone()
    }

    /// Storage settings of every log.
    pub fn log_config(mut self, log: LogConfig) -> Self {
        self.settings.log = log;
        self
    }

    /// Coordinator session timeout of every node: how long after a crash the
    /// controller notices it.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.session_timeout = timeout;
        self
    }

    /// The controller every node runs (`None`: no controller).
    pub fn controller(mut self, controller: Option<ControllerConfig>) -> Self {
        self.settings.controller = controller;
        self
    }

    /// Settings of every server and client.
    pub fn tcp_config(mut self, tcp: TcpConfig) -> Self {
        self.tcp = tcp;
        self
    }

    /// Runs every server and client over mutual TLS, node `n` with
    /// `configs[n]` (whose certificate must name `n`). Every node id must
    /// have one; a node without one fails to start.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, configs: BTreeMap<NodeId, crate::transport::TlsConfig>) -> Self {
        self.tls = Some(configs);
        self
    }

    /// Starts the cluster.
    pub fn build(self) -> Result<TcpCluster> {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let cluster = TcpCluster {
            coordinator: MemoryCoordinator::new(Arc::clone(&clock)),
            clock,
            nodes: Nodes::new(self.settings.nodes)?,
            addrs: Mutex::new(BTreeMap::new()),
            builder: self,
        };
        for id in cluster.node_ids() {
            cluster.start_node(id)?;
        }
        Ok(cluster)
    }
}

/// One running node and the sockets it owns.
#[derive(Debug)]
struct RunningNode {
    node: Node,
    server: TcpServer,
    transport: Arc<TcpTransport>,
}

impl Hosted for RunningNode {
    fn node(&self) -> &Node {
        &self.node
    }
}

/// N nodes in one process on loopback TCP. Dropping it stops every node.
#[derive(Debug)]
pub struct TcpCluster {
    /// The coordinator all nodes share.
    pub coordinator: MemoryCoordinator,
    clock: Arc<dyn Clock>,
    nodes: Nodes<RunningNode>,
    /// The last address each node listened on, running or not.
    addrs: Mutex<BTreeMap<NodeId, SocketAddr>>,
    builder: TcpClusterBuilder,
}

impl TcpCluster {
    /// A builder with 3 nodes, min ISR 1, quick timeouts for tests and the
    /// TCP settings of [`super::TcpTransportFactory::test_config`].
    pub fn builder() -> TcpClusterBuilder {
        TcpClusterBuilder {
            settings: NodeSettings::for_tests(
                Duration::from_secs(10),
                Some(ControllerConfig::default()),
            ),
            tcp: super::TcpTransportFactory::test_config(),
            #[cfg(feature = "tls")]
            tls: None,
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

    /// The address node `id` listens on, if it is running.
    pub fn addr(&self, id: NodeId) -> Option<SocketAddr> {
        self.nodes
            .with_running(id, |running| running.server.local_addr())
    }

    /// The limit counters of node `id`'s server, if it is running.
    pub fn server_stats(&self, id: NodeId) -> Option<TcpServerStats> {
        self.nodes
            .with_running(id, |running| running.server.stats())
    }

    /// Starts (or restarts) node `id` from its directory, on a fresh port,
    /// and tells every running node's client the new address.
    ///
    /// The node starts before its server is bound, because the server needs
    /// the node's handler. Meanwhile other nodes cannot reach it yet: their
    /// fetches to it fail as unreachable and are retried after
    /// `fetch_backoff`, as they would while a real process boots.
    pub fn start_node(&self, id: NodeId) -> Result<()> {
        let tcp = self.builder.tcp.clone();
        let peers = self
            .addrs
            .lock()
            .iter()
            .filter(|(node, _)| **node != id)
            .map(|(node, addr)| (*node, *addr))
            .collect();
        let transport = Arc::new(self.transport(id, peers, tcp.clone())?);
        let config = self.builder.settings.node_config(id, self.node_dir(id));
        let node = Node::start(
            config,
            Arc::clone(&transport) as Arc<dyn crate::transport::Transport>,
            Arc::new(self.coordinator.for_node(id)),
            Arc::clone(&self.clock),
        )?;
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let server = match self.bind(id, loopback, node.handler(), tcp) {
            Ok(server) => server,
            Err(error) => {
                node.halt();
                transport.shutdown();
                return Err(error);
            }
        };
        let addr = server.local_addr();
        let mut running = self.nodes.lock();
        for (other, peer) in running.iter() {
            if *other != id {
                peer.transport.set_peer(id, addr);
            }
        }
        self.addrs.lock().insert(id, addr);
        running.insert(
            id,
            RunningNode {
                node,
                server,
                transport,
            },
        );
        Ok(())
    }

    #[cfg(not(feature = "tls"))]
    fn transport(
        &self,
        id: NodeId,
        peers: std::collections::HashMap<NodeId, SocketAddr>,
        tcp: TcpConfig,
    ) -> Result<TcpTransport> {
        TcpTransport::new(id, peers, tcp)
    }

    #[cfg(not(feature = "tls"))]
    fn bind(
        &self,
        _id: NodeId,
        addr: SocketAddr,
        handler: Arc<dyn crate::transport::RequestHandler>,
        tcp: TcpConfig,
    ) -> Result<TcpServer> {
        TcpServer::bind(addr, handler, tcp)
    }

    /// Node `id`'s TLS settings, if the cluster runs TLS.
    #[cfg(feature = "tls")]
    fn tls_config(&self, id: NodeId) -> Result<Option<crate::transport::TlsConfig>> {
        let Some(configs) = &self.builder.tls else {
            return Ok(None);
        };
        configs
            .get(&id)
            .cloned()
            .map(Some)
            .ok_or_else(|| Error::InvalidConfig {
                field: "tls",
                value: id.to_string(),
                reason: "the TLS cluster has no TLS settings for this node",
            })
    }

    #[cfg(feature = "tls")]
    fn transport(
        &self,
        id: NodeId,
        peers: std::collections::HashMap<NodeId, SocketAddr>,
        tcp: TcpConfig,
    ) -> Result<TcpTransport> {
        match self.tls_config(id)? {
            Some(tls) => TcpTransport::with_tls(id, peers, tcp, tls),
            None => TcpTransport::new(id, peers, tcp),
        }
    }

    #[cfg(feature = "tls")]
    fn bind(
        &self,
        id: NodeId,
        addr: SocketAddr,
        handler: Arc<dyn crate::transport::RequestHandler>,
        tcp: TcpConfig,
    ) -> Result<TcpServer> {
        match self.tls_config(id)? {
            Some(tls) => TcpServer::bind_tls(addr, handler, tcp, tls),
            None => TcpServer::bind(addr, handler, tcp),
        }
    }

    /// Crashes node `id` as a killed process would: its threads stop,
    /// nothing is flushed or closed, its server stops answering and its
    /// connections close. The coordinator is *not* told: the node's session
    /// expires after the session timeout, and only then does the controller
    /// elect a new leader. Does nothing if the node is not running.
    pub fn crash(&self, id: NodeId) {
        let Some(running) = self.nodes.remove(id) else {
            return;
        };
        // Halting first wakes the node's parked long-poll fetches (they then
        // answer `Shutdown`), so the server's handler threads are free by the
        // time the server waits for them.
        running.node.halt();
        running.server.shutdown();
        running.transport.shutdown();
    }

    /// Restarts a crashed node from its directory on a new port.
    pub fn restart(&self, id: NodeId) -> Result<()> {
        self.start_node(id)
    }

    /// Whether node `id` is running.
    pub fn is_running(&self, id: NodeId) -> bool {
        self.nodes.is_running(id)
    }

    /// Creates `log` with `replication_factor` replicas placed by
    /// [`assign_replicas`], and waits until its leader leads and every
    /// running replica hosts it.
    pub fn create_log(&self, log: LogId, replication_factor: usize) -> Result<Vec<NodeId>> {
        let replicas = assign_replicas(log.0, &self.node_ids(), replication_factor)?;
        self.coordinator.create_log(log, replicas.clone())?;
        let leader = replicas[0];
        let deadline = Instant::now() + Duration::from_secs(10);
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

    /// The leader's handle of `log`, once that node knows it leads in the
    /// coordinator's current epoch (up to 10 s).
    pub fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        let deadline = Instant::now() + Duration::from_secs(10);
        self.nodes
            .leader_log_by(log, deadline, Duration::from_millis(1), || {
                self.log_state(log)
            })
    }

    /// Polls `condition` every millisecond until it holds or `timeout` passes.
    pub fn wait_until(
        &self,
        timeout: Duration,
        condition: impl FnMut(&TcpCluster) -> bool,
    ) -> bool {
        harness::wait_until(self, timeout, Duration::from_millis(1), condition)
    }

    /// Stops every node cleanly, then its server and client.
    pub fn shutdown(self) -> Result<()> {
        let running = self.nodes.take_all();
        let mut result = Ok(());
        for RunningNode {
            node,
            server,
            transport,
        } in running
        {
            if let Err(error) = node.shutdown() {
                result = Err(error);
            }
            server.shutdown();
            transport.shutdown();
        }
        result
    }
}

impl Drop for TcpCluster {
    fn drop(&mut self) {
        // Nodes first: a node being dropped stops its fetchers, which may be
        // waiting on a peer's server.
        for running in self.nodes.take_all() {
            drop(running.node);
            running.server.shutdown();
            running.transport.shutdown();
        }
    }
}
