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

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::harness::{self, Harness, LeaderWait, MemoryCoordination, NodeSettings, Wire};
use crate::clock::{Clock, SystemClock};
use crate::coordinator::{ControllerConfig, MemoryCoordinator};
#[cfg(feature = "tls")]
use crate::error::Error;
use crate::error::Result;
use crate::node::Node;
use crate::sync::{Arc, Mutex};
use crate::transport::{TcpConfig, TcpServer, TcpServerStats, TcpTransport, Transport};
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
    harness::node_settings_setters!(snapshots);

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
        let coordinator = MemoryCoordinator::new(Arc::clone(&clock));
        let wire = TcpWire {
            tcp: self.tcp,
            #[cfg(feature = "tls")]
            tls: self.tls,
            addrs: Mutex::new(BTreeMap::new()),
        };
        let harness = Harness::start(
            wire,
            MemoryCoordination::new(coordinator.clone(), false),
            self.settings,
            clock,
            LeaderWait::FirstReplica,
            Duration::from_millis(1),
        )?;
        Ok(TcpCluster {
            harness,
            coordinator,
        })
    }
}

/// Loopback TCP: each node a [`TcpServer`] on a fresh port and a
/// [`TcpTransport`] told every other node's address.
#[derive(Debug)]
struct TcpWire {
    tcp: TcpConfig,
    /// Each node's TLS settings; `None`: plain TCP.
    #[cfg(feature = "tls")]
    tls: Option<BTreeMap<NodeId, crate::transport::TlsConfig>>,
    /// The last address each node listened on, running or not.
    addrs: Mutex<BTreeMap<NodeId, SocketAddr>>,
}

/// The sockets a running node owns.
#[derive(Debug)]
struct Sockets {
    server: TcpServer,
    transport: Arc<TcpTransport>,
}

impl TcpWire {
    #[cfg(not(feature = "tls"))]
    fn client(&self, id: NodeId, peers: HashMap<NodeId, SocketAddr>) -> Result<TcpTransport> {
        TcpTransport::new(id, peers, self.tcp.clone())
    }

    #[cfg(not(feature = "tls"))]
    fn bind(
        &self,
        _id: NodeId,
        addr: SocketAddr,
        handler: Arc<dyn crate::transport::RequestHandler>,
    ) -> Result<TcpServer> {
        TcpServer::bind(addr, handler, self.tcp.clone())
    }

    /// Node `id`'s TLS settings, if the cluster runs TLS.
    #[cfg(feature = "tls")]
    fn tls_config(&self, id: NodeId) -> Result<Option<crate::transport::TlsConfig>> {
        let Some(configs) = &self.tls else {
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
    fn client(&self, id: NodeId, peers: HashMap<NodeId, SocketAddr>) -> Result<TcpTransport> {
        let tcp = self.tcp.clone();
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
    ) -> Result<TcpServer> {
        let tcp = self.tcp.clone();
        match self.tls_config(id)? {
            Some(tls) => TcpServer::bind_tls(addr, handler, tcp, tls),
            None => TcpServer::bind(addr, handler, tcp),
        }
    }
}

impl Wire for TcpWire {
    type Pending = Arc<TcpTransport>;
    type Held = Sockets;

    fn transport(&self, id: NodeId) -> Result<(Arc<dyn Transport>, Arc<TcpTransport>)> {
        let peers = self
            .addrs
            .lock()
            .iter()
            .filter(|(node, _)| **node != id)
            .map(|(node, addr)| (*node, *addr))
            .collect();
        let transport = Arc::new(self.client(id, peers)?);
        Ok((Arc::clone(&transport) as Arc<dyn Transport>, transport))
    }

    /// Binds the node's server on a fresh loopback port. The node starts
    /// before its server is bound, because the server needs the node's
    /// handler. Meanwhile other nodes cannot reach it yet: their fetches to
    /// it fail as unreachable and are retried after `fetch_backoff`, as
    /// they would while a real process boots.
    fn connect(&self, id: NodeId, node: &Node, transport: Arc<TcpTransport>) -> Result<Sockets> {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let server = match self.bind(id, loopback, node.handler()) {
            Ok(server) => server,
            Err(error) => {
                transport.shutdown();
                return Err(error);
            }
        };
        self.addrs.lock().insert(id, server.local_addr());
        Ok(Sockets { server, transport })
    }

    fn announce(&self, id: NodeId, held: &Sockets, other: &Sockets) {
        other.transport.set_peer(id, held.server.local_addr());
    }

    /// Nothing: a TCP node stops being reached when its server shuts down
    /// (in [`release`](Self::release)).
    fn cut(&self, _id: NodeId) {}

    fn release(&self, sockets: Sockets) {
        sockets.server.shutdown();
        sockets.transport.shutdown();
    }

    fn close(&self, _ids: &[NodeId]) {}
}

/// N nodes in one process on loopback TCP. Dropping it stops every node.
#[derive(Debug)]
pub struct TcpCluster {
    /// First, so that it halts the nodes before the rest goes.
    harness: Harness<TcpWire, MemoryCoordination>,
    /// The coordinator all nodes share.
    pub coordinator: MemoryCoordinator,
}

impl TcpCluster {
    harness::harness_face!(clock);

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

    /// The address node `id` listens on, if it is running.
    pub fn addr(&self, id: NodeId) -> Option<SocketAddr> {
        self.harness
            .nodes()
            .with_running(id, |running| running.wire.server.local_addr())
    }

    /// The limit counters of node `id`'s server, if it is running.
    pub fn server_stats(&self, id: NodeId) -> Option<TcpServerStats> {
        self.harness
            .nodes()
            .with_running(id, |running| running.wire.server.stats())
    }

    /// Starts (or restarts) node `id` from its directory, on a fresh port,
    /// and tells every running node's client the new address.
    ///
    /// The node starts before its server is bound, because the server needs
    /// the node's handler. Meanwhile other nodes cannot reach it yet: their
    /// fetches to it fail as unreachable and are retried after
    /// `fetch_backoff`, as they would while a real process boots.
    pub fn start_node(&self, id: NodeId) -> Result<()> {
        self.harness.start_node(id)
    }

    /// Crashes node `id` as a killed process would: its threads stop,
    /// nothing is flushed or closed, its server stops answering and its
    /// connections close. The coordinator is *not* told: the node's session
    /// expires after the session timeout, and only then does the controller
    /// elect a new leader. Does nothing if the node is not running.
    pub fn crash(&self, id: NodeId) {
        self.harness.halt(id);
    }

    /// Restarts a crashed node from its directory on a new port.
    pub fn restart(&self, id: NodeId) -> Result<()> {
        self.start_node(id)
    }

    /// Creates `log` with `replication_factor` replicas placed by
    /// [`assign_replicas`](crate::coordinator::assign_replicas), and waits
    /// until its leader leads and every running replica hosts it.
    pub fn create_log(&self, log: LogId, replication_factor: usize) -> Result<Vec<NodeId>> {
        self.harness.create_log(log, replication_factor)
    }
}
