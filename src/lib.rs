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
mod coordinator;
mod error;
mod record;
mod sync;
mod types;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use clock::{Clock, ManualClock, SystemClock};
pub use coordinator::{
    assign_replicas, CasOutcome, Controller, ControllerConfig, ControllerEpoch, Coordinator,
    CoordinatorEvent, LogState, LogUpdate, MemoryCoordinator,
};
pub use error::{Error, Result};
pub use record::{
    BatchHeader, BatchIter, Record, RecordBatch, RecordBatchBuilder, RecordData, Records,
};
pub use types::{LeaderEpoch, LogId, NodeId, Offset, ProducerEpoch, ProducerId, Sequence};
