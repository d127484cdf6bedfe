//! What an append asks for ([`Acks`]) and what it returns
//! ([`AppendOutcome`]). It owns these two types and nothing else.
//!
//! They live below both the public face (`ReplicatedLog`, the producers)
//! and the runtime (the node, the replica's pipelined appends, the
//! completion hand-off), because both need them: the runtime resolves a
//! pipelined append with an `AppendOutcome` without naming the face that
//! handed the append in.

use crate::types::{LeaderEpoch, Offset};

/// How many replicas must have a batch before an append returns (SPEC 3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Acks {
    /// `acks=0`: return once the batch is handed to the log; errors of the
    /// write itself are not reported.
    None,
    /// `acks=1`: return once the leader appended it (and flushed it under
    /// `FlushPolicy::Always`).
    Leader,
    /// `acks=all`: return once the batch is committed: below the high
    /// watermark, so on every in-sync replica.
    All,
}

/// Where an appended batch landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Offset of the batch's first record.
    pub base_offset: Offset,
    /// Offset of the batch's last record.
    pub last_offset: Offset,
    /// The leader epoch the batch was written in.
    pub leader_epoch: LeaderEpoch,
    /// Whether the batch was an idempotent producer's retry of a batch the
    /// log already held (SPEC 4): nothing was appended, the offsets and
    /// epoch are the original's, and `acks=all` waited for them.
    pub duplicate: bool,
}
