//! # isrlog
//!
//! A replicated, segmented, checksummed write-ahead log in the manner of an
//! Apache Kafka partition, to link into a database or a service.
//!
//! (The crate page with the full model and a runnable example is written as
//! the replication layer lands.)

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod clock;
mod config;
mod coordinator;
mod error;
mod node;
mod producer;
mod record;
mod replicated_log;
mod replication;
mod storage;
mod sync;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod transport;
mod types;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{NodeConfig, ReplicationConfig};
pub use coordinator::{
    assign_replicas, CasOutcome, Controller, ControllerConfig, ControllerEpoch, Coordinator,
    CoordinatorEvent, LogState, LogUpdate, MemoryCoordinator,
};
pub use error::{Error, Result};
pub use node::{Node, NodeHandler};
pub use producer::{IdempotentProducer, LeaderRouter, ProducerConfig};
pub use record::{
    BatchHeader, BatchIter, Record, RecordBatch, RecordBatchBuilder, RecordData, Records,
};
pub use replicated_log::{Acks, AppendOutcome, CommittedRecords, Isolation, ReplicatedLog};
pub use replication::Role;
pub use storage::{
    AppendInfo, FlushPolicy, Log, LogConfig, LogStats, ReadResult, RecoveryReport, TruncatedTail,
};
pub use transport::{MemoryNetwork, MemoryTransport, RequestHandler, Transport};
pub use types::{
    EpochEndOffset, LeaderEpoch, LogId, NodeId, Offset, ProducerEpoch, ProducerId, Sequence,
};
