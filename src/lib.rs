//! # isrlog
//!
//! A replicated, segmented, checksummed write-ahead log to link into a
//! database or a service, replicated the way Apache Kafka replicates a
//! partition. It is synchronous and thread-based; the application brings its
//! network (a [`Transport`]) and its metadata service (a [`Coordinator`]).
//!
//! ## The model
//!
//! - A **log** ([`LogId`]) is an append-only sequence of record batches with
//!   dense offsets. Each **node** ([`Node`]) hosts replicas of many logs; one
//!   replica of each log is its **leader**, the others **followers**.
//! - Producers append on the leader ([`ReplicatedLog::append`]) with
//!   [`Acks::None`], [`Acks::Leader`] or [`Acks::All`], blocking until the
//!   outcome is known, or without holding a thread
//!   ([`ReplicatedLog::append_pipelined`]: an [`AppendHandle`] to wait on,
//!   `.await` or give a callback; callbacks and wakers run on the node's
//!   completion thread, never on a replication thread). Followers *pull*:
//!   one fetcher thread per (follower node, leader node) pair long-polls the
//!   leader for every log it follows, and a fetch at offset `n` acknowledges
//!   everything below `n`.
//! - The **in-sync replicas** (ISR) are the leader and the followers that
//!   are caught up (a follower not caught up for `replica_lag_time_max`
//!   leaves; one that catches up rejoins). The ISR lives in the coordinator
//!   and changes only by compare-and-set.
//! - The **high watermark** (HW) is the minimum log end offset over the ISR:
//!   every offset below it is on every in-sync replica, i.e. *committed*.
//!   `acks=all` returns once the HW passes the batch; readers see only
//!   committed records by default ([`Isolation::Committed`]).
//! - Every batch carries the **leader epoch** of the leader that wrote it.
//!   On a leader change (elected by the one [`Controller`] the coordinator
//!   seats: the first live ISR member in assignment order, else the first
//!   live eligible leader replica, KIP-966) followers find
//!   where their log diverges from the new leader's with the epochs
//!   (KIP-101/KIP-279) and truncate only what was never committed — never
//!   to their HW, which loses data.
//! - On disk a log is a directory of segments with sparse offset indexes,
//!   CRC-checked batches and atomically replaced checkpoint files; a torn
//!   tail is truncated on recovery ([`Log`], [`RecoveryReport`]).
//!
//! The guarantees (no acknowledged record is lost with `acks=all`,
//! `min_insync_replicas >= 2` and unclean election off; replicas agree below
//! the HW; readers never see above it; offsets are dense) and their exact
//! conditions are in the README.
//!
//! ## Example
//!
//! Three nodes in one process on the in-memory transport and coordinator:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use isrlog::{
//!     Acks, Coordinator, Isolation, LogId, MemoryCoordinator, MemoryNetwork, Node, NodeConfig,
//!     NodeId, Offset, SystemClock,
//! };
//!
//! # fn main() -> isrlog::Result<()> {
//! let dir = tempfile::tempdir().expect("temp dir");
//! let clock = Arc::new(SystemClock);
//! let network = MemoryNetwork::new(0);
//! let coordinator = MemoryCoordinator::new(clock.clone());
//! let log = LogId(1);
//! coordinator.create_log(log, vec![NodeId(0), NodeId(1), NodeId(2)])?;
//!
//! let mut nodes = Vec::new();
//! for id in 0..3 {
//!     let mut config = NodeConfig::new(NodeId(id), dir.path().join(format!("node-{id}")));
//!     config.replication.min_insync_replicas = 2;
//!     let node = Node::start(
//!         config,
//!         Arc::new(network.transport(NodeId(id))),
//!         Arc::new(coordinator.clone()),
//!         clock.clone(),
//!     )?;
//!     network.register(NodeId(id), node.handler());
//!     nodes.push(node);
//! }
//!
//! let leader = nodes[0].wait_for_log(log, Duration::from_secs(5))?;
//! leader.wait_until_leader(Duration::from_secs(5))?;
//! // The nodes started one after another: the controller may have taken a
//! // follower that was not up yet out of the ISR (SPEC 3.5), and an
//! // `acks=all` append is refused below `min_insync_replicas`. It rejoins
//! // once it has fetched up to the leader's end.
//! let deadline = std::time::Instant::now() + Duration::from_secs(5);
//! while leader.in_sync_replicas().len() < 3 && std::time::Instant::now() < deadline {
//!     std::thread::sleep(Duration::from_millis(10));
//! }
//! let appended = leader.append_values(&[b"hello", b"world"], Acks::All)?;
//! assert_eq!(appended.base_offset, Offset(0));
//!
//! // Committed on every in-sync replica: a follower serves it once its next
//! // fetch brings the leader's high watermark.
//! let follower = nodes[1].wait_for_log(log, Duration::from_secs(5))?;
//! let batches = follower.read_blocking(Offset(1), 1 << 20, Duration::from_secs(5))?;
//! let values: Vec<_> = batches.iter().flat_map(|b| b.records()).map(|r| r.map(|r| r.value)).collect::<Result<_, _>>()?;
//! assert_eq!(values, [&b"hello"[..], &b"world"[..]]);
//!
//! for node in nodes {
//!     node.shutdown()?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## Layers
//!
//! The modules form layers; each row may import the rows below it and never
//! one above (nor has a cycle of its own):
//!
//! ```text
//! public face   replicated_log.rs (ReplicatedLog, and Node::log that hands it out),
//!               client.rs, producer.rs, builder.rs
//! node runtime  node.rs: a node's threads, request handler and coordinator protocol;
//!               it hands the face a log's parts and never names the face
//! replication/  the replica, fetcher threads, pipelined appends; its pure machines
//!               (leader, follower, isr, high_watermark) reach no thread, clock or I/O
//! config.rs     the node's and replication's settings
//! storage/  transport/  coordinator/    (none imports another)
//! base          record/, append.rs (Acks, AppendOutcome), snapshot.rs, types.rs,
//!               error.rs, clock.rs, sync.rs, rng.rs, simulation.rs
//! ```
//!
//! `testing/` sits above them all. A type that a lower layer and the face
//! both need lives in the base (as [`AppendOutcome`] does), so that the
//! runtime resolves an append without reaching up into the face.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod append;
mod builder;
mod client;
mod clock;
mod config;
mod coordinator;
mod error;
mod node;
mod producer;
mod record;
mod replicated_log;
mod replication;
mod rng;
mod simulation;
pub mod snapshot;
mod storage;
mod sync;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod transport;
mod types;

// Every Rust block of README.md, compiled (and, unless marked `no_run`,
// run) as a doctest so the README cannot rot. Its ZooKeeper and TLS blocks
// need those features, so the README is checked with both on:
// `cargo test --features zookeeper,tls --doc` (run by `.ci/run`).
#[cfg(all(doctest, feature = "zookeeper", feature = "tls"))]
#[doc = include_str!("../README.md")]
mod readme {}

pub use append::{Acks, AppendOutcome};
pub use builder::{NodeBuilder, TcpNode};
pub use client::LogClient;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{NodeConfig, ReplicationConfig};
pub use coordinator::{
    assign_replicas, AddingReplica, Assignment, CasOutcome, Controller, ControllerConfig,
    ControllerEpoch, Coordinator, CoordinatorEvent, LogEnd, LogState, LogUpdate, MemoryCoordinator,
    ReassignmentProgress, UncleanReplica,
};
#[cfg(feature = "zookeeper")]
pub use coordinator::{ZkCoordinator, ZkCoordinatorConfig};
pub use error::{Error, Result};
pub use node::{Node, NodeHandler, OPEN_RETRY_BACKOFF_MAX, UNCLEAN_REPORT_RETRY_INTERVAL};
pub use producer::{IdempotentProducer, LeaderRouter, ProducerConfig, ProducerSend, IN_FLIGHT_MAX};
pub use record::{
    BatchHeader, BatchIter, Record, RecordBatch, RecordBatchBuilder, RecordData, Records,
};
pub use replicated_log::{CommittedRecords, Isolation, ReplicatedLog};
pub use replication::{AppendHandle, DeletionBound, Role};
pub use snapshot::{SnapshotInfo, SnapshotStore, Snapshots};
pub use storage::{
    AppendInfo, DirectoryIdentity, FlushPolicy, Log, LogConfig, LogStats, PreviousShutdown,
    ReadResult, RecoveryReport, TruncatedTail,
};
#[cfg(feature = "tls")]
pub use transport::TlsConfig;
pub use transport::{MemoryNetwork, MemoryTransport, RequestHandler, Transport};
pub use transport::{TcpConfig, TcpServer, TcpServerStats, TcpTransport};
pub use types::{
    ClusterId, DirectoryId, EpochEndOffset, Incarnation, LeaderEpoch, LogId, NodeId, Offset,
    ProducerEpoch, ProducerId, Sequence, DURATION_MAX,
};

/// A read-only inspector of a log directory (what the `isrlog-inspect` binary
/// prints): see [`inspect::inspect_dir`].
pub use storage::inspect;
