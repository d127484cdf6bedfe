//! Domain newtypes shared by every layer: offsets, epochs and identifiers
//! (and the longest duration a setting may take, [`DURATION_MAX`]).
//!
//! No bare `u64`/`u32` crosses a module boundary when it means one of these:
//! mixing up an offset and a byte position, or a leader epoch and a producer
//! epoch, is a class of bug the compiler can rule out.

use std::fmt;
use std::time::Duration;

/// The longest duration any setting takes: a year. Deadlines are the
/// current instant plus a setting (a node's or a coordinator's), and an
/// instant that far out cannot be represented (a panic in
/// `Instant + Duration`); Kafka's own time settings stop at about 24.8
/// days (`Integer.MAX_VALUE` milliseconds).
pub const DURATION_MAX: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Position of a record in a log. Dense, starting at 0 (or at the log start
/// offset once retention has deleted the front).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Offset(pub u64);

impl Offset {
    /// The offset of the very first record of a fresh log.
    pub const ZERO: Offset = Offset(0);

    /// The offset after this one.
    #[inline]
    pub fn next(self) -> Offset {
        Offset(self.0 + 1)
    }

    /// This offset moved forward by `count` records.
    #[inline]
    pub fn plus(self, count: u64) -> Offset {
        Offset(self.0 + count)
    }

    /// Number of records from `earlier` (inclusive) to `self` (exclusive);
    /// zero when `earlier` is not earlier.
    #[inline]
    pub fn distance_from(self, earlier: Offset) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A leader epoch: grows by one on every leader change of a log. Every batch
/// carries the epoch of the leader that wrote it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaderEpoch(pub u32);

impl LeaderEpoch {
    /// The epoch of a log's first leader.
    pub const ZERO: LeaderEpoch = LeaderEpoch(0);

    /// The epoch after this one.
    #[inline]
    pub fn next(self) -> LeaderEpoch {
        LeaderEpoch(self.0 + 1)
    }
}

impl fmt::Display for LeaderEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One process (a Kafka broker) hosting replicas of many logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node-{}", self.0)
    }
}

/// One registration of a node with the coordinator (Kafka's broker epoch,
/// KIP-903): handed out by [`crate::Coordinator::register_node`], larger for
/// every registration that opens a new session of the node, so a process
/// that restarted has a larger one than every earlier process of the node.
/// A follower's fetches carry it, and a leader counts them only when it is
/// the follower's current one (SPEC §3.2). It is not a secret: it fences
/// fetches from a follower's previous life and from senders that do not
/// know it, not a peer that can read the coordinator (TLS authenticates).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Incarnation(pub u64);

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "incarnation-{}", self.0)
    }
}

/// One replicated log (a Kafka partition).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogId(pub u32);

impl fmt::Display for LogId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "log-{}", self.0)
    }
}

/// Identity of an idempotent producer. `ProducerId::NONE` marks a batch
/// written without idempotence (Kafka uses -1 the same way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProducerId(pub i64);

impl ProducerId {
    /// "No producer": the batch takes no part in deduplication.
    pub const NONE: ProducerId = ProducerId(-1);

    /// Whether this id names a real idempotent producer.
    #[inline]
    pub fn is_some(self) -> bool {
        self.0 >= 0
    }
}

impl Default for ProducerId {
    fn default() -> Self {
        ProducerId::NONE
    }
}

impl fmt::Display for ProducerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "producer-{}", self.0)
    }
}

/// Epoch of an idempotent producer; a newer one fences older ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProducerEpoch(pub i16);

impl fmt::Display for ProducerEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Per-producer sequence number of a batch's first record (Kafka's
/// `baseSequence`). `Sequence::NONE` for non-idempotent batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sequence(pub i32);

impl Sequence {
    /// "No sequence": the batch takes no part in deduplication.
    pub const NONE: Sequence = Sequence(-1);
}

impl Default for Sequence {
    fn default() -> Self {
        Sequence::NONE
    }
}

impl fmt::Display for Sequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The answer to "where does epoch `e` end?" (Kafka's
/// `OffsetsForLeaderEpoch`): the largest epoch `<= e` the replica knows, and
/// the offset at which that epoch's records end on this replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EpochEndOffset {
    /// The largest known epoch not above the epoch asked about.
    pub epoch: LeaderEpoch,
    /// The first offset after that epoch's records on this replica.
    pub end_offset: Offset,
}

/// The id of a cluster (SPEC 2.8): chosen at random by the coordinator the
/// first time it is asked, and written into every node's data directory, so
/// that a directory of another cluster is refused at start (Kafka's
/// `cluster.id` in `meta.properties`). Printed as 32 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterId(pub u128);

/// The id of one data directory (SPEC 2.8, Kafka's KIP-858 directory id):
/// chosen at random when a node first writes the directory's identity, and
/// kept by the coordinator for every replica placed on it, so that a
/// replaced, emptied or swapped directory is noticed. Printed as 32 hex
/// digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DirectoryId(pub u128);

impl DirectoryId {
    /// Recorded for a replica whose copy its node deleted (a reassignment
    /// removed it): placed on no directory, so it holds no record, as a
    /// replica never placed (Kafka's `DirectoryId.UNASSIGNED`, KIP-858).
    /// No data directory has this id.
    pub const UNASSIGNED: DirectoryId = DirectoryId(0);

    /// A new random id for a data directory: never
    /// [`UNASSIGNED`](Self::UNASSIGNED).
    pub fn random_for_directory() -> DirectoryId {
        loop {
            let id = DirectoryId::random();
            if id != DirectoryId::UNASSIGNED {
                return id;
            }
        }
    }
}

macro_rules! random_hex_id {
    ($name:ident) => {
        impl $name {
            /// A new random id (128 bits from the standard library's
            /// randomly keyed hasher, the clock and the process id: ids
            /// must differ, not be secret). Inside a simulation
            /// (`testing::SimulationGuard`) they come from its seed.
            pub fn random() -> $name {
                $name(random_u128())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:032x}", self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            /// Parses 32 hex digits, as [`fmt::Display`] prints them.
            fn from_str(text: &str) -> Result<$name, String> {
                if text.len() != 32 {
                    return Err(format!("{text:?} is not 32 hex digits"));
                }
                u128::from_str_radix(text, 16)
                    .map($name)
                    .map_err(|e| format!("{text:?} is not 32 hex digits: {e}"))
            }
        }
    };
}

random_hex_id!(ClusterId);
random_hex_id!(DirectoryId);

/// 128 random bits without a random-number crate: two hashers with
/// distinct random keys (std seeds them from the operating system), fed the
/// time, the process id and a counter. Inside a simulation the bits come
/// from the simulation's seeded id stream instead, so that a seed replays
/// with the same ids.
fn random_u128() -> u128 {
    if let (Some(high), Some(low)) = (
        crate::simulation::seeded_u64(),
        crate::simulation::seeded_u64(),
    ) {
        return (u128::from(high) << 64) | u128::from(low);
    }
    use std::collections::hash_map::RandomState;
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let half = || RandomState::new().hash_one((nanos, std::process::id(), count));
    (u128::from(half()) << 64) | u128::from(half())
}
