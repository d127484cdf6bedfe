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
mod sync;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod transport;
mod types;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Error, Result};
pub use record::{
    BatchHeader, BatchIter, Record, RecordBatch, RecordBatchBuilder, RecordData, Records,
};
pub use transport::{MemoryNetwork, MemoryTransport, RequestHandler, Transport};
pub use transport::{TcpConfig, TcpServer, TcpTransport};
pub use types::{LeaderEpoch, LogId, NodeId, Offset, ProducerEpoch, ProducerId, Sequence};
