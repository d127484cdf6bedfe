//! One obvious way to start a node: [`Node::builder`] gathers the node's
//! id, data directory, coordinator and settings, and starts it over the
//! network the application uses in one call:
//! - [`NodeBuilder::start_in_memory`] on a [`MemoryNetwork`] (tests, or
//!   several nodes in one process): the node is registered with it;
//! - [`NodeBuilder::start_tcp`]: the listener is bound *before* the node
//!   starts (peers can reach the address as soon as it is known) and
//!   answers "not ready" until the node's handler exists, then serves it;
//!   the returned [`TcpNode`] owns the server and the client transport and
//!   shuts all three down together;
//! - [`NodeBuilder::start`] with any [`Transport`]; the caller then routes
//!   requests to [`Node::handler`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::clock::{Clock, SystemClock};
use crate::config::NodeConfig;
use crate::coordinator::Coordinator;
use crate::error::{Error, Result};
use crate::node::Node;
use crate::sync::Arc;
use crate::transport::{
    ErrorCode, MemoryNetwork, Request, RequestHandler, Response, TcpConfig, TcpServer,
    TcpTransport, Transport,
};
use crate::types::NodeId;

/// Builds and starts a [`Node`]; see [`Node::builder`].
pub struct NodeBuilder {
    config: NodeConfig,
    coordinator: Option<Arc<dyn Coordinator>>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for NodeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBuilder")
            .field("config", &self.config)
            .field("coordinator", &self.coordinator.is_some())
            .finish_non_exhaustive()
    }
}

impl Node {
    /// A builder for node `id` keeping its logs under `data_dir`, with
    /// every default of [`NodeConfig::new`] and the system clock. Name its
    /// coordinator with [`NodeBuilder::coordinator`], then start it with
    /// one of the `start` methods.
    pub fn builder(id: NodeId, data_dir: impl Into<PathBuf>) -> NodeBuilder {
        NodeBuilder {
            config: NodeConfig::new(id, data_dir),
            coordinator: None,
            clock: Arc::new(SystemClock),
        }
    }
}

impl NodeBuilder {
    /// The coordinator this node registers with and follows (the same
    /// service for every node of the cluster).
    pub fn coordinator(mut self, coordinator: impl Coordinator + 'static) -> Self {
        self.coordinator = Some(Arc::new(coordinator));
        self
    }

    /// As [`coordinator`](Self::coordinator), for one already shared.
    pub fn shared_coordinator(mut self, coordinator: Arc<dyn Coordinator>) -> Self {
        self.coordinator = Some(coordinator);
        self
    }

    /// Changes settings of the node's [`NodeConfig`] (its id and data
    /// directory are the builder's):
    /// `.configure(|c| c.replication.min_insync_replicas = 2)`.
    pub fn configure(mut self, change: impl FnOnce(&mut NodeConfig)) -> Self {
        let (id, dir) = (self.config.node_id, self.config.data_dir.clone());
        change(&mut self.config);
        self.config.node_id = id;
        self.config.data_dir = dir;
        self
    }

    /// The clock the node reads (tests pass a `ManualClock`).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The configuration the node will start with.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    fn take_coordinator(&self) -> Result<Arc<dyn Coordinator>> {
        self.coordinator.clone().ok_or(Error::InvalidConfig {
            field: "coordinator",
            value: "none".to_owned(),
            reason: "name the node's coordinator with NodeBuilder::coordinator before starting it",
        })
    }

    /// Starts the node calling its peers through `transport`. The caller
    /// must route the requests other nodes send it to [`Node::handler`].
    pub fn start(self, transport: Arc<dyn Transport>) -> Result<Node> {
        let coordinator = self.take_coordinator()?;
        Node::start(self.config, transport, coordinator, self.clock)
    }

    /// Starts the node on `network`, registered with it and reachable.
    pub fn start_in_memory(self, network: &MemoryNetwork) -> Result<Node> {
        let id = self.config.node_id;
        let coordinator = self.take_coordinator()?;
        let node = Node::start(
            self.config,
            Arc::new(network.transport(id)),
            coordinator,
            self.clock,
        )?;
        network.register(id, node.handler());
        network.node_up(id);
        Ok(node)
    }

    /// Binds a [`TcpServer`] on `listen` (port 0 picks a free one; see
    /// [`TcpNode::local_addr`]), starts the node with a [`TcpTransport`]
    /// that knows `peers`' addresses, and serves the node's handler on the
    /// server. Requests that arrive in between are answered "not ready"
    /// (the caller backs off and retries, as with a booting process).
    pub fn start_tcp(
        self,
        listen: SocketAddr,
        peers: HashMap<NodeId, SocketAddr>,
        tcp: TcpConfig,
    ) -> Result<TcpNode> {
        let id = self.config.node_id;
        let coordinator = self.take_coordinator()?;
        let late = Arc::new(LateHandler(OnceLock::new()));
        let server = TcpServer::bind(listen, late.clone(), tcp.clone())?;
        let transport = Arc::new(TcpTransport::new(id, peers, tcp)?);
        let node = match Node::start(self.config, transport.clone(), coordinator, self.clock) {
            Ok(node) => node,
            Err(error) => {
                server.shutdown();
                transport.shutdown();
                return Err(error);
            }
        };
        // Set once, here, right after the node exists: cannot fail.
        let _ = late.0.set(node.handler());
        Ok(TcpNode {
            node: Some(node),
            server,
            transport,
        })
    }
}

/// The handler a server is bound with before its node exists.
struct LateHandler(OnceLock<Arc<dyn RequestHandler>>);

impl RequestHandler for LateHandler {
    fn handle(&self, from: NodeId, request: Request) -> Response {
        match self.0.get() {
            Some(handler) => handler.handle(from, request),
            None => Response::Error(ErrorCode::Shutdown),
        }
    }
}

/// A node started by [`NodeBuilder::start_tcp`], with its server and
/// client transport. It dereferences to the [`Node`];
/// [`shutdown`](Self::shutdown) stops the node (handing its leadership
/// over first), then the server and the transport. Dropping it stops all
/// three without the controlled hand-over.
pub struct TcpNode {
    node: Option<Node>,
    server: TcpServer,
    transport: Arc<TcpTransport>,
}

impl std::fmt::Debug for TcpNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpNode")
            .field("node", &self.node)
            .field("local_addr", &self.server.local_addr())
            .finish_non_exhaustive()
    }
}

impl TcpNode {
    /// The address the node's server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// The client transport: [`TcpTransport::set_peer`] when a peer moves.
    pub fn transport(&self) -> &TcpTransport {
        &self.transport
    }

    /// The node.
    pub fn node(&self) -> &Node {
        self.node
            .as_ref()
            .expect("a TcpNode holds its node until shutdown consumes it")
    }

    /// Stops the node cleanly ([`Node::shutdown`]), then the server and
    /// the transport.
    pub fn shutdown(mut self) -> Result<()> {
        let outcome = match self.node.take() {
            Some(node) => node.shutdown(),
            None => Ok(()),
        };
        self.server.shutdown();
        self.transport.shutdown();
        outcome
    }
}

impl std::ops::Deref for TcpNode {
    type Target = Node;

    fn deref(&self) -> &Node {
        self.node()
    }
}

impl Drop for TcpNode {
    fn drop(&mut self) {
        drop(self.node.take());
        self.server.shutdown();
        self.transport.shutdown();
    }
}
