//! Configuration of a node and of the logs it hosts, with Kafka's defaults
//! where Kafka has one.

use std::path::PathBuf;
use std::time::Duration;

use crate::coordinator::ControllerConfig;
use crate::error::{Error, Result};
use crate::storage::LogConfig;
use crate::types::{NodeId, DURATION_MAX};

/// Configuration of one [`Node`](crate::Node).
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's id; unique in the cluster.
    pub node_id: NodeId,
    /// Directory holding one sub-directory per hosted log.
    pub data_dir: PathBuf,
    /// Storage settings of every hosted log.
    pub log: LogConfig,
    /// Replication settings of every hosted log.
    pub replication: ReplicationConfig,
    /// Coordinator session timeout: a node whose heartbeats stop for this
    /// long is considered gone. Default 6 s (Kafka's ZooKeeper session
    /// default is 18 s; we pick a shorter one for an embedded library).
    pub session_timeout: Duration,
    /// The node's controller candidate: every node runs one by default and
    /// the coordinator seats exactly one of them (SPEC 3.5). `None` leaves
    /// leader election to a controller the application runs elsewhere.
    pub controller: Option<ControllerConfig>,
    /// How often a leader applies the retention limits of its logs
    /// (`LogConfig::retention_bytes`, `retention_age`), never deleting at or
    /// above the high watermark nor, by default, the lowest applied
    /// position over the log's replicas
    /// ([`ReplicationConfig::retain_until_applied`]). Kafka's
    /// `log.retention.check.interval.ms`, default 5 minutes.
    pub retention_check_interval: Duration,
    /// How long [`Node::shutdown`](crate::Node::shutdown) may spend, in
    /// all, moving the leadership of its logs to other in-sync replicas,
    /// leaving the in-sync replica sets it is in and ending its session
    /// before it stops anyway (Kafka's controlled shutdown). Usually it
    /// takes one fetch round and a few coordinator calls; this bounds it
    /// when followers lag or the coordinator is slow. Logs hand over
    /// concurrently, and each coordinator call gets at most the time left
    /// (ending the session gets at least 200 ms more): a call still running
    /// at the deadline is not waited for. The logs not handed over by then
    /// are left as after an uncontrolled stop: their followers elect a new
    /// leader once the node's session ends (when ending it completes, or
    /// when it expires). Their data is flushed and closed all the same, so
    /// the node's next start is a clean one. From the shutdown's start the
    /// node's control thread makes no coordinator call of its own
    /// (heartbeats, ISR changes), so stopping the threads afterwards waits
    /// for none; a coordinator call of the controller thread still running
    /// at the deadline is not waited for either. Zero turns controlled
    /// shutdown off: the node just
    /// stops, and the controller moves leadership once its session ends.
    /// Default 5 s.
    pub controlled_shutdown_timeout: Duration,
    /// The application's snapshots (SPEC 3.9, [`crate::snapshot`]): with
    /// them, a follower whose log ends below its leader's log start is
    /// rebuilt from the leader application's latest snapshot, and this
    /// node, as a leader, sends its own. Default `None`.
    pub snapshots: Option<crate::snapshot::Snapshots>,
}

impl NodeConfig {
    /// A configuration with every default, for node `node_id` storing its
    /// logs under `data_dir`.
    pub fn new(node_id: NodeId, data_dir: impl Into<PathBuf>) -> NodeConfig {
        NodeConfig {
            node_id,
            data_dir: data_dir.into(),
            log: LogConfig::default(),
            replication: ReplicationConfig::default(),
            session_timeout: Duration::from_secs(6),
            controller: Some(ControllerConfig::default()),
            retention_check_interval: Duration::from_secs(300),
            controlled_shutdown_timeout: Duration::from_secs(5),
            snapshots: None,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        self.replication.validate()?;
        for (field, duration) in [
            ("session_timeout", self.session_timeout),
            ("retention_check_interval", self.retention_check_interval),
            (
                "controlled_shutdown_timeout",
                self.controlled_shutdown_timeout,
            ),
        ] {
            at_most_duration_max(field, duration)?;
        }
        if self.session_timeout.is_zero() {
            return Err(Error::InvalidConfig {
                field: "session_timeout",
                value: format!("{:?}", self.session_timeout),
                reason: "must be positive",
            });
        }
        Ok(())
    }
}

/// `Ok` if `duration`, the value of `field`, is at most [`DURATION_MAX`].
fn at_most_duration_max(field: &'static str, duration: Duration) -> Result<()> {
    if duration > DURATION_MAX {
        return Err(Error::InvalidConfig {
            field,
            value: format!("{duration:?}"),
            reason: "must be at most a year (DURATION_MAX)",
        });
    }
    Ok(())
}

/// Replication settings (Kafka's names in the docs of each field).
#[derive(Clone, Debug)]
pub struct ReplicationConfig {
    /// `min.insync.replicas`: an `acks=all` append needs an ISR at least this
    /// large. Default 1, as in Kafka; use 2 or more with a replication factor
    /// of 3 for the no-loss guarantee G1.
    pub min_insync_replicas: usize,
    /// `replica.lag.time.max.ms`: a follower not caught up for this long
    /// leaves the ISR. Default 30 s (Kafka 3.x).
    pub replica_lag_time_max: Duration,
    /// `replica.fetch.wait.max.ms`: how long a leader holds a fetch that
    /// finds no new data. Default 500 ms.
    pub fetch_wait_max: Duration,
    /// `replica.fetch.max.bytes`: bytes per log in one fetch. Default 1 MiB.
    pub fetch_bytes_max: u32,
    /// `replica.fetch.response.max.bytes`: bytes per fetch response. Default 10 MiB.
    pub fetch_response_bytes_max: u32,
    /// `request.timeout.ms`: the longest an `acks=all` append waits for its
    /// commit, and the deadline of a replication request beyond its wait.
    /// Default 30 s.
    pub request_timeout: Duration,
    /// `replica.fetch.backoff.ms`: pause after a failed fetch. Default 1 s in
    /// Kafka; 100 ms here, where failover speed matters more.
    pub fetch_backoff: Duration,
    /// How long a waiting thread spins before it parks. Waking a parked
    /// thread costs tens of microseconds; a short spin saves that on a hot
    /// path. The spin yields the core on every check, so it costs the
    /// threads it waits for almost nothing, and a waiter skips it when
    /// others are already parked on the same value (heavy load). It also
    /// bounds how long a pipelined append's handle, awaited as a future
    /// with no other pipelined append of its log in flight (and at most
    /// one resolved by the latest resolution pass), spins in its first
    /// poll for the outcome before it registers the task's waker
    /// (so an executor's thread may be held that long). Default 50 µs;
    /// zero disables spinning.
    pub spin_before_park: Duration,
    /// Kafka's `buffer.memory`, per log: the most bytes of batches that
    /// [`ReplicatedLog::append_pipelined`](crate::ReplicatedLog::append_pipelined)
    /// may hold in flight (appended, outcome not yet known). Past it a
    /// pipelined append blocks, up to `pipelined_block_max`; blocked
    /// appends get room first come first, and a later one waits behind
    /// them even if it would fit. Default 32 MiB, Kafka's default.
    pub pipelined_bytes_max: usize,
    /// Kafka's `max.block.ms`: how long a pipelined append may block for
    /// room under `pipelined_bytes_max` before it fails with
    /// [`Error::PipelineFull`]. Default 60 s, Kafka's default.
    pub pipelined_block_max: Duration,
    /// Whether deletion waits for the applications (SPEC 2.6, 3.9): with
    /// it, retention and [`ReplicatedLog::delete_records_before`](crate::ReplicatedLog::delete_records_before)
    /// delete only below `min(high watermark, lowest applied position over
    /// the log's replicas)`, where each replica's application reports its
    /// position with [`ReplicatedLog::set_applied`](crate::ReplicatedLog::set_applied);
    /// a replica that is down keeps the position it last reported
    /// (PostgreSQL's replication slots). A follower whose log ends below
    /// its leader's log start (the cap let the leader delete past it, or
    /// it is new: a replica a reassignment adds, or one whose disk was
    /// replaced, after records were deleted), or whose application has
    /// applied less than that start, installs a snapshot if its node has a
    /// [`SnapshotStore`](crate::SnapshotStore), and otherwise reports that
    /// it needs one ([`ReplicatedLog::needs_snapshot`](crate::ReplicatedLog::needs_snapshot))
    /// and waits for an operator: it never starts silently at the leader's
    /// log start. So a log that deletes records needs a snapshot store on
    /// every node for such a replica to be rebuilt (a reassignment adding
    /// one completes only then). The leader decides deletion, so set it
    /// alike on every node.
    ///
    /// Default `true`, as SPEC 3.9 requires; only the cap
    /// (`applied_hold_bytes_max`, `applied_hold_age_max`) is off by
    /// default. So an application that never calls `set_applied` holds
    /// deletion at the log start: retention deletes nothing on that log,
    /// and `delete_records_before` answers `DeletionHeldBack`, until every
    /// replica's application has reported, as a PostgreSQL replication
    /// slot holds WAL until its standby confirms it. A log whose records
    /// were deleted under `false` and whose application never reports
    /// counts that application as behind the log start: set `false` again
    /// to keep Kafka's behaviour for such an application.
    ///
    /// `false` gives Kafka's behaviour: deletion does not wait for the
    /// applied positions (it stops at the high watermark and, with a
    /// snapshot store, at the application's latest snapshot), and a
    /// follower below its leader's log start on a node without a store
    /// restarts its log, empty, at that start.
    pub retain_until_applied: bool,
    /// With `retain_until_applied`: once the records kept only because a
    /// replica has not applied them pass this many bytes, the leader
    /// deletes past the lagging positions anyway, and those replicas will
    /// need a snapshot (PostgreSQL's `max_slot_wal_keep_size`); but never
    /// past what the leader's own application and `min_insync_replicas`
    /// in-sync applications have applied, so that a deleted record lives
    /// in as many applications' states as an acknowledged one lives in
    /// logs. Default `None`: no cap.
    pub applied_hold_bytes_max: Option<u64>,
    /// With `retain_until_applied`: once the oldest record kept only
    /// because a replica has not applied it is older than this (by its
    /// segment's newest timestamp), the leader deletes past the lagging
    /// positions anyway, within the same limits as with
    /// `applied_hold_bytes_max`. Default `None`: no cap.
    pub applied_hold_age_max: Option<Duration>,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            min_insync_replicas: 1,
            replica_lag_time_max: Duration::from_secs(30),
            fetch_wait_max: Duration::from_millis(500),
            fetch_bytes_max: 1024 * 1024,
            fetch_response_bytes_max: 10 * 1024 * 1024,
            request_timeout: Duration::from_secs(30),
            fetch_backoff: Duration::from_millis(100),
            spin_before_park: Duration::from_micros(50),
            pipelined_bytes_max: 32 * 1024 * 1024,
            pipelined_block_max: Duration::from_secs(60),
            retain_until_applied: true,
            applied_hold_bytes_max: None,
            applied_hold_age_max: None,
        }
    }
}

impl ReplicationConfig {
    pub(crate) fn validate(&self) -> Result<()> {
        let positive = |field: &'static str, d: Duration| {
            if d.is_zero() {
                Err(Error::InvalidConfig {
                    field,
                    value: format!("{d:?}"),
                    reason: "must be positive",
                })
            } else {
                Ok(())
            }
        };
        for (field, duration) in [
            ("replica_lag_time_max", self.replica_lag_time_max),
            ("fetch_wait_max", self.fetch_wait_max),
            ("request_timeout", self.request_timeout),
            ("fetch_backoff", self.fetch_backoff),
            ("spin_before_park", self.spin_before_park),
            ("pipelined_block_max", self.pipelined_block_max),
        ] {
            at_most_duration_max(field, duration)?;
        }
        if let Some(age) = self.applied_hold_age_max {
            at_most_duration_max("applied_hold_age_max", age)?;
        }
        positive("replica_lag_time_max", self.replica_lag_time_max)?;
        positive("request_timeout", self.request_timeout)?;
        // As Kafka requires of replica.fetch.wait.max.ms: a fetch held in a
        // long poll vouches for its follower only as of its arrival (SPEC
        // 3.4), so on an idle log a wait this long would drop in-sync
        // followers from the ISR between their fetches.
        if self.fetch_wait_max >= self.replica_lag_time_max {
            return Err(Error::InvalidConfig {
                field: "fetch_wait_max",
                value: format!("{:?}", self.fetch_wait_max),
                reason: "must be below replica_lag_time_max",
            });
        }
        if self.min_insync_replicas == 0 {
            return Err(Error::InvalidConfig {
                field: "min_insync_replicas",
                value: "0".into(),
                reason: "must be at least 1",
            });
        }
        if self.pipelined_bytes_max == 0 {
            return Err(Error::InvalidConfig {
                field: "pipelined_bytes_max",
                value: "0".into(),
                reason: "must be positive",
            });
        }
        if self.fetch_bytes_max == 0 || self.fetch_response_bytes_max == 0 {
            return Err(Error::InvalidConfig {
                field: "fetch_bytes_max",
                value: format!("{}/{}", self.fetch_bytes_max, self.fetch_response_bytes_max),
                reason: "must be positive",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_past_a_year_is_refused_and_named() {
        let huge = Duration::MAX;
        let cases: Vec<(&str, ReplicationConfig)> = vec![
            (
                "spin_before_park",
                ReplicationConfig {
                    spin_before_park: huge,
                    ..ReplicationConfig::default()
                },
            ),
            (
                "request_timeout",
                ReplicationConfig {
                    request_timeout: huge,
                    ..ReplicationConfig::default()
                },
            ),
            (
                "pipelined_block_max",
                ReplicationConfig {
                    pipelined_block_max: huge,
                    ..ReplicationConfig::default()
                },
            ),
            (
                "applied_hold_age_max",
                ReplicationConfig {
                    applied_hold_age_max: Some(huge),
                    ..ReplicationConfig::default()
                },
            ),
        ];
        for (name, config) in cases {
            match config.validate() {
                Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, name),
                other => panic!("{name}: {other:?}"),
            }
        }
        let mut node = NodeConfig::new(NodeId(1), "/nonexistent");
        node.controlled_shutdown_timeout = huge;
        assert!(matches!(
            node.validate(),
            Err(Error::InvalidConfig {
                field: "controlled_shutdown_timeout",
                ..
            })
        ));
        let year = ReplicationConfig {
            request_timeout: DURATION_MAX,
            ..ReplicationConfig::default()
        };
        assert!(year.validate().is_ok());
    }

    #[test]
    fn a_fetch_wait_not_below_the_lag_limit_is_refused() {
        assert!(matches!(ReplicationConfig::default().validate(), Ok(())));
        for wait_ms in [30_000, 60_000] {
            let config = ReplicationConfig {
                fetch_wait_max: Duration::from_millis(wait_ms),
                ..ReplicationConfig::default()
            };
            match config.validate() {
                Err(Error::InvalidConfig { field, reason, .. }) => {
                    assert_eq!(field, "fetch_wait_max");
                    assert!(reason.contains("replica_lag_time_max"), "{reason}");
                }
                other => panic!("fetch_wait_max {wait_ms} ms: {other:?}"),
            }
        }
    }
}
