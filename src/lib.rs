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
mod error;
mod record;
mod storage;
mod sync;
mod types;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Error, Result};
pub use record::{
    BatchHeader, BatchIter, Record, RecordBatch, RecordBatchBuilder, RecordData, Records,
};
pub use storage::{
    AppendInfo, FlushPolicy, Log, LogConfig, LogStats, ReadResult, RecoveryReport, TruncatedTail,
};
pub use types::{
    EpochEndOffset, LeaderEpoch, LogId, NodeId, Offset, ProducerEpoch, ProducerId, Sequence,
};
