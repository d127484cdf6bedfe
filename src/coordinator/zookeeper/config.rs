//! [`ZkCoordinatorConfig`]: where the ZooKeeper ensemble is, where under it
//! isrlog keeps its znodes, and the coordinator's own timeouts and bounds.

use std::time::Duration;

use crate::error::{Error, Result};

/// Settings of a [`super::ZkCoordinator`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkCoordinatorConfig {
    /// The ensemble, as ZooKeeper's own clients spell it:
    /// `host:port[,host:port...]`.
    pub connect: String,
    /// The znode under which every isrlog znode lives (default `/isrlog`).
    /// Several clusters can share one ensemble under different roots.
    pub chroot: String,
    /// The timeout of the coordinator's own session, which carries its
    /// reads, its watch and the writes not made on behalf of one node. Each
    /// node's session has the node's own timeout (`register_node`).
    pub session_timeout: Duration,
    /// How long one call may take, including waiting through a lost
    /// connection for the client to reconnect. A call that runs out fails
    /// with a retriable [`Error::Coordinator`] that says so — or, for a
    /// write whose request was sent, [`Error::CoordinatorOutcomeUnknown`].
    pub call_timeout: Duration,
    /// Capacity of each subscriber's event queue; when full, further events
    /// are replaced by one `Resync`.
    pub subscriber_events_max: usize,
    /// How many producer ids one compare-and-set on the shared counter
    /// reserves for this coordinator (Kafka reserves 1000).
    pub producer_id_block_size: u32,
}

impl ZkCoordinatorConfig {
    /// Defaults for `connect`: chroot `/isrlog`, a 10 s session, 5 s calls,
    /// 1024 events per subscriber, producer id blocks of 1000.
    pub fn new(connect: impl Into<String>) -> ZkCoordinatorConfig {
        ZkCoordinatorConfig {
            connect: connect.into(),
            chroot: "/isrlog".to_owned(),
            session_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(5),
            subscriber_events_max: 1024,
            producer_id_block_size: 1000,
        }
    }

    /// Checks every field, naming the first one that is wrong.
    pub fn validate(&self) -> Result<()> {
        if self.connect.trim().is_empty() {
            return Err(invalid(
                "connect",
                &self.connect,
                "name at least one host:port",
            ));
        }
        if self.connect.contains('/') {
            return Err(invalid(
                "connect",
                &self.connect,
                "give the root znode in `chroot`, not in the connect string",
            ));
        }
        let chroot_ok = self.chroot.starts_with('/')
            && self.chroot.len() > 1
            && !self.chroot.ends_with('/')
            && !self.chroot.contains("//");
        if !chroot_ok {
            return Err(invalid(
                "chroot",
                &self.chroot,
                "an absolute znode path other than `/`, without a trailing or doubled `/`",
            ));
        }
        if self.session_timeout.is_zero() {
            return Err(invalid(
                "session_timeout",
                &format!("{:?}", self.session_timeout),
                "a session must last longer than zero",
            ));
        }
        // ZooKeeper's session timeout is an `int` of milliseconds on the
        // wire: a longer one would wrap (the server clamps to its
        // `maxSessionTimeout` anyway, 40 s by default).
        if self.session_timeout > Duration::from_millis(i32::MAX as u64) {
            return Err(invalid(
                "session_timeout",
                &format!("{:?}", self.session_timeout),
                "ZooKeeper takes at most 2^31 - 1 ms (about 24.8 days)",
            ));
        }
        // Deadlines are now plus the call timeout (see `DURATION_MAX`).
        if self.call_timeout > crate::types::DURATION_MAX {
            return Err(invalid(
                "call_timeout",
                &format!("{:?}", self.call_timeout),
                "must be at most a year (DURATION_MAX)",
            ));
        }
        if self.call_timeout.is_zero() {
            return Err(invalid(
                "call_timeout",
                &format!("{:?}", self.call_timeout),
                "a call needs time to reach ZooKeeper",
            ));
        }
        if self.subscriber_events_max == 0 {
            return Err(invalid(
                "subscriber_events_max",
                "0",
                "a subscriber's queue must hold at least one event",
            ));
        }
        if self.producer_id_block_size == 0 {
            return Err(invalid(
                "producer_id_block_size",
                "0",
                "a block must hold at least one producer id",
            ));
        }
        Ok(())
    }
}

fn invalid(field: &'static str, value: &str, reason: &'static str) -> Error {
    Error::InvalidConfig {
        field,
        value: value.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        ZkCoordinatorConfig::new("127.0.0.1:2181")
            .validate()
            .unwrap();
    }

    #[test]
    fn each_bad_field_is_named() {
        type Breaks = fn(&mut ZkCoordinatorConfig);
        let cases: Vec<(&str, Breaks)> = vec![
            ("connect", |c| c.connect = " ".to_owned()),
            ("connect", |c| {
                c.connect = "127.0.0.1:2181/isrlog".to_owned()
            }),
            ("chroot", |c| c.chroot = "isrlog".to_owned()),
            ("chroot", |c| c.chroot = "/".to_owned()),
            ("chroot", |c| c.chroot = "/isrlog/".to_owned()),
            ("chroot", |c| c.chroot = "/a//b".to_owned()),
            ("session_timeout", |c| c.session_timeout = Duration::ZERO),
            ("call_timeout", |c| c.call_timeout = Duration::ZERO),
            ("session_timeout", |c| {
                c.session_timeout = Duration::from_millis(i32::MAX as u64 + 1)
            }),
            ("call_timeout", |c| c.call_timeout = Duration::MAX),
            ("subscriber_events_max", |c| c.subscriber_events_max = 0),
            ("producer_id_block_size", |c| c.producer_id_block_size = 0),
        ];
        for (expected, break_it) in cases {
            let mut config = ZkCoordinatorConfig::new("127.0.0.1:2181");
            break_it(&mut config);
            match config.validate() {
                Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, expected),
                other => panic!("{expected}: expected InvalidConfig, got {other:?}"),
            }
        }
    }
}
