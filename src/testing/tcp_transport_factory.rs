//! [`TcpTransportFactory`]: builds loopback TCP networks for the transport
//! conformance suite and for any test that wants real sockets.
//!
//! Owns the servers it binds for one check and stops them in `teardown`; it
//! owns nothing of the TCP transport itself.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::transport_suite::TransportFactory;
use crate::sync::Arc;
use crate::transport::{RequestHandler, TcpConfig, TcpServer, TcpTransport, Transport};
use crate::types::NodeId;

/// Builds networks of [`TcpServer`]s on `127.0.0.1:0` (a free port each) and
/// one [`TcpTransport`] per node that knows every node's address.
#[derive(Debug)]
pub struct TcpTransportFactory {
    config: TcpConfig,
    servers: Vec<TcpServer>,
}

impl TcpTransportFactory {
    /// A factory using [`TcpTransportFactory::test_config`].
    pub fn new() -> TcpTransportFactory {
        TcpTransportFactory::with_config(TcpTransportFactory::test_config())
    }

    /// A factory whose servers and clients use `config`.
    pub fn with_config(config: TcpConfig) -> TcpTransportFactory {
        TcpTransportFactory {
            config,
            servers: Vec::new(),
        }
    }

    /// The defaults, with the waits a test can afford: quick redials and a
    /// short shutdown bound, few handler threads.
    pub fn test_config() -> TcpConfig {
        TcpConfig {
            connect_timeout: Duration::from_secs(2),
            reconnect_backoff_min: Duration::from_millis(5),
            reconnect_backoff_max: Duration::from_millis(50),
            handler_threads: 8,
            shutdown_timeout: Duration::from_secs(2),
            ..TcpConfig::default()
        }
    }

    /// The servers of the last network built, in node order.
    pub fn servers(&self) -> &[TcpServer] {
        &self.servers
    }
}

impl Default for TcpTransportFactory {
    fn default() -> TcpTransportFactory {
        TcpTransportFactory::new()
    }
}

impl TransportFactory for TcpTransportFactory {
    fn build(&mut self, nodes: &[(NodeId, Arc<dyn RequestHandler>)]) -> Vec<Arc<dyn Transport>> {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let mut addrs = HashMap::new();
        for (node, handler) in nodes {
            let server = TcpServer::bind(loopback, Arc::clone(handler), self.config.clone())
                .unwrap_or_else(|error| panic!("binding a server for {node} failed: {error}"));
            addrs.insert(*node, server.local_addr());
            self.servers.push(server);
        }
        nodes
            .iter()
            .map(|(node, _)| {
                let transport = TcpTransport::new(*node, addrs.clone(), self.config.clone())
                    .unwrap_or_else(|error| panic!("client for {node}: {error}"));
                Arc::new(transport) as Arc<dyn Transport>
            })
            .collect()
    }

    fn deadline_preempts_handler(&self) -> bool {
        true
    }

    fn teardown(&mut self) {
        for server in self.servers.drain(..) {
            server.shutdown();
        }
    }
}
