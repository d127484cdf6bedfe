//! Test support, compiled for the crate's own tests and, with the `testing`
//! feature, for downstream crates' tests: request handlers with known
//! behaviour, sample messages, and the conformance suites every
//! implementation of a trait must pass.
//!
//! This module owns nothing the library needs at run time; nothing outside
//! `#[cfg(test)]` code may depend on it.

pub mod cluster;
pub mod coordinator_suite;
mod fault_apps;
pub mod fault_test;
pub mod fuzz;
mod harness;
#[allow(dead_code)] // Run from the crate's tests only; the network model waits for the fetch step.
pub(crate) mod sim;
#[cfg(test)]
mod sim_disk_node;
pub mod slow_coordinator;
#[cfg(test)]
mod stepped_node;
pub mod tcp_cluster;
mod tcp_transport_factory;
pub mod transport_suite;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;
#[cfg(feature = "zookeeper")]
mod zookeeper_cluster;

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::record::RecordBatchBuilder;
use crate::sync::{Arc, Condvar, Mutex};
use crate::transport::{
    EpochAnswer, EpochEndOffset, EpochEndOffsetsRequest, EpochEndOffsetsResponse, EpochQuery,
    ErrorCode, FetchLog, FetchRequest, FetchResponse, FetchedLog, Request, RequestHandler,
    Response, SnapshotResponse,
};
use crate::types::{Incarnation, LeaderEpoch, LogId, NodeId, Offset};

pub use crate::simulation::SimulationGuard;
pub use crate::storage::disk::{
    Disk, DiskFile, DiskOperation, EioPlan, FlippedBit, Latency, LockGuard, MappedRegion, OpenMode,
    SimDisk, SimDiskStats, StdDisk,
};
pub use cluster::{Cluster, ClusterBuilder, Lose, SessionEnd};
pub use slow_coordinator::{CoordinatorDelay, HeldCall, SlowCoordinator};
pub use tcp_cluster::{TcpCluster, TcpClusterBuilder};
pub use tcp_transport_factory::TcpTransportFactory;
pub use transport_suite::{MemoryTransportFactory, TransportFactory};
#[cfg(feature = "zookeeper")]
pub use zookeeper_cluster::{OutageHook, ZkCluster, ZkClusterBuilder};

/// The thread hand-offs modelled with loom in `tests/loom.rs`.
pub mod loom_models {
    pub use crate::replication::{
        AppendHandle, Combine, Combiner, Completion, CompletionRunner, Deferral, PendingAppends,
        WaitOutcome, Watch,
    };
}

/// A handler made from a closure.
pub struct FnHandler<F> {
    answer: F,
}

impl<F> FnHandler<F>
where
    F: Fn(NodeId, Request) -> Response + Send + Sync + 'static,
{
    /// A handler that answers every request with `answer(from, request)`.
    pub fn new(answer: F) -> FnHandler<F> {
        FnHandler { answer }
    }
}

impl<F> RequestHandler for FnHandler<F>
where
    F: Fn(NodeId, Request) -> Response + Send + Sync + 'static,
{
    fn handle(&self, from: NodeId, request: Request) -> Response {
        (self.answer)(from, request)
    }
}

/// A handler that answers at once with [`echo_response`], a pure function of
/// the request and both node ids, so a caller can check that it got the
/// answer to *its* request and that the callee saw the right caller.
#[derive(Debug)]
pub struct EchoHandler {
    me: NodeId,
}

impl EchoHandler {
    /// An echo handler for node `me`.
    pub fn new(me: NodeId) -> EchoHandler {
        EchoHandler { me }
    }
}

impl RequestHandler for EchoHandler {
    fn handle(&self, from: NodeId, request: Request) -> Response {
        echo_response(self.me, from, &request)
    }
}

/// The answer [`EchoHandler`] on node `me` gives `request` from `from`.
///
/// Every field of the response depends on the request or on the two nodes;
/// `records` is a real record batch whose one record names the callee, the
/// caller and the request's first log and offset.
pub fn echo_response(me: NodeId, from: NodeId, request: &Request) -> Response {
    match request {
        Request::Fetch(fetch) => Response::Fetch(FetchResponse {
            logs: fetch
                .logs
                .iter()
                .map(|log| FetchedLog {
                    log: log.log,
                    error: ErrorCode::None,
                    high_watermark: Offset(u64::from(from.0)),
                    log_start_offset: log.log_start_offset,
                    log_end_offset: log.fetch_offset,
                    log_start_epoch: None,
                    log_end_epoch: None,
                    diverging: log.last_fetched_epoch.map(|epoch| EpochEndOffset {
                        epoch,
                        end_offset: Offset(u64::from(me.0)),
                    }),
                    records: single_record_batch(
                        format!(
                            "{me}<-{from} {} @{} x{}",
                            log.log, log.fetch_offset, log.bytes_max
                        )
                        .as_bytes(),
                    ),
                    applied_offsets: log
                        .applied_offset
                        .map(|applied| vec![(from, applied)])
                        .unwrap_or_default(),
                })
                .collect(),
        }),
        Request::EpochEndOffsets(query) => Response::EpochEndOffsets(EpochEndOffsetsResponse {
            logs: query
                .logs
                .iter()
                .map(|q| EpochAnswer {
                    log: q.log,
                    error: ErrorCode::None,
                    end: Some(EpochEndOffset {
                        epoch: q.epoch,
                        end_offset: Offset(
                            (u64::from(q.current_leader_epoch.0) << 32)
                                | (u64::from(me.0) << 16)
                                | u64::from(from.0),
                        ),
                    }),
                })
                .collect(),
        }),
        Request::Snapshot(snapshot) => {
            let data = bytes::Bytes::from(format!(
                "{me}<-{from} {} @{} x{}",
                snapshot.log, snapshot.position, snapshot.bytes_max
            ));
            Response::Snapshot(SnapshotResponse {
                log: snapshot.log,
                error: ErrorCode::None,
                snapshot_offset: Offset(u64::from(snapshot.current_leader_epoch.0)),
                snapshot_epoch: None,
                snapshot_bytes: snapshot.position + data.len() as u64,
                position: snapshot.position,
                crc32: crc32fast::hash(&data),
                data,
            })
        }
    }
}

/// A record batch holding one record with `value`, as opaque bytes.
pub fn single_record_batch(value: &[u8]) -> Bytes {
    let mut builder = RecordBatchBuilder::new(1_700_000_000_000);
    builder.push(value);
    builder
        .build()
        .expect("a one-record test batch is always valid")
        .into_bytes()
}

/// A fetch of one log whose `fetch_offset` carries `id`, sent by `replica`.
pub fn sample_fetch_request(replica: NodeId, id: u64) -> Request {
    Request::Fetch(FetchRequest {
        replica,
        incarnation: Incarnation(id * 3 + 1),
        wait_max: Duration::ZERO,
        bytes_max: 1 << 20,
        logs: vec![FetchLog {
            log: LogId((id % 7) as u32),
            current_leader_epoch: LeaderEpoch(3),
            fetch_offset: Offset(id),
            last_fetched_epoch: Some(LeaderEpoch(2)),
            line_epoch: Some(LeaderEpoch(3)),
            log_start_offset: Offset(0),
            bytes_max: 1 << 16,
            applied_offset: Some(Offset(id / 2)),
        }],
    })
}

/// An epoch query for one log whose epoch carries `id`, sent by `replica`.
pub fn sample_epoch_request(replica: NodeId, id: u32) -> Request {
    Request::EpochEndOffsets(EpochEndOffsetsRequest {
        replica,
        logs: vec![EpochQuery {
            log: LogId(1),
            current_leader_epoch: LeaderEpoch(5),
            epoch: LeaderEpoch(id),
        }],
    })
}

/// Wraps a handler and records every request it receives, with its sender.
pub struct RecordingHandler {
    inner: Arc<dyn RequestHandler>,
    received: Mutex<Vec<(NodeId, Request)>>,
}

impl RecordingHandler {
    /// Records what reaches `inner`, then lets `inner` answer.
    pub fn new(inner: Arc<dyn RequestHandler>) -> RecordingHandler {
        RecordingHandler {
            inner,
            received: Mutex::new(Vec::new()),
        }
    }

    /// Every `(sender, request)` received so far, oldest first.
    pub fn received(&self) -> Vec<(NodeId, Request)> {
        self.received.lock().clone()
    }

    /// Number of requests received so far.
    pub fn received_count(&self) -> usize {
        self.received.lock().len()
    }
}

impl RequestHandler for RecordingHandler {
    fn handle(&self, from: NodeId, request: Request) -> Response {
        self.received.lock().push((from, request.clone()));
        self.inner.handle(from, request)
    }
}

/// A handler that holds every fetch like a leader with no new data: until
/// [`LongPollHandler::release`] is called or the fetch's `wait_max` passes,
/// whichever comes first. Other requests are echoed at once. Answers are
/// [`echo_response`].
#[derive(Debug)]
pub struct LongPollHandler {
    me: NodeId,
    state: Mutex<PollState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct PollState {
    released: bool,
    /// Fetches currently held.
    holding: usize,
}

impl LongPollHandler {
    /// A long-poll handler for node `me`, not released.
    pub fn new(me: NodeId) -> LongPollHandler {
        LongPollHandler {
            me,
            state: Mutex::new(PollState::default()),
            changed: Condvar::new(),
        }
    }

    /// Lets every held fetch, and every later one, answer at once.
    pub fn release(&self) {
        self.state.lock().released = true;
        self.changed.notify_all();
    }

    /// Number of fetches being held right now.
    pub fn holding(&self) -> usize {
        self.state.lock().holding
    }

    /// Waits until at least `count` fetches are held; false if `deadline`
    /// passes first.
    pub fn wait_until_holding(&self, count: usize, deadline: Instant) -> bool {
        let mut state = self.state.lock();
        while state.holding < count {
            if self.changed.wait_until(&mut state, deadline).timed_out() {
                return state.holding >= count;
            }
        }
        true
    }
}

impl RequestHandler for LongPollHandler {
    fn handle(&self, from: NodeId, request: Request) -> Response {
        if let Request::Fetch(fetch) = &request {
            let deadline = Instant::now() + fetch.wait_max;
            let mut state = self.state.lock();
            state.holding += 1;
            self.changed.notify_all();
            while !state.released {
                if self.changed.wait_until(&mut state, deadline).timed_out() {
                    break;
                }
            }
            state.holding -= 1;
            self.changed.notify_all();
        }
        echo_response(self.me, from, &request)
    }
}
