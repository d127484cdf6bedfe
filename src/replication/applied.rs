//! Applied positions (SPEC 3.9): how far each replica's application has
//! made the log's records durable in its own state, and so how far the log
//! may be deleted from the front.
//!
//! Every replica reports its own position (`ReplicatedLog::set_applied`);
//! a follower carries it in each fetch and the leader records it; the
//! leader sends every position it knows back in its fetch answers, so that
//! each follower holds a copy and a new leader finds them (PostgreSQL's
//! replication slots likewise outlive the standby that is down). A
//! replica's own report is authoritative for itself (its application may
//! restart from an older checkpoint, so it can go down); the leader's view
//! is authoritative for everyone else.
//!
//! The positions are kept in the file `applied-positions` of the log's
//! directory, written (atomically) by the retention timer and at close, not
//! on every change: after a crash they come back as they were at the last
//! write, lower than or equal to the truth, which only holds deletion back
//! longer. A missing or damaged file is a log line and an empty map, never
//! a log that refuses to open: under `retain_until_applied` (the default) a
//! replica whose position is not known holds deletion at the log start
//! until it reports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use crate::error::Result;
use crate::storage::{load_pairs, store_pairs, Disk};
use crate::sync::Arc;
use crate::types::{NodeId, Offset};

/// The file, in the log's directory, holding the positions.
pub(crate) const APPLIED_POSITIONS_FILE: &str = "applied-positions";
/// The checkpoint kind written in the file's header.
const KIND: &str = "applied-positions";

/// The applied positions one replica knows of its log's replicas.
#[derive(Debug)]
pub(crate) struct AppliedPositions {
    disk: Arc<dyn Disk>,
    path: PathBuf,
    inner: Mutex<Inner>,
    /// Serialises [`store`](Self::store): its writers (the retention
    /// timer, a snapshot install, close) share the file's temporary name.
    /// Holds whether the positions are retired ([`retire`](Self::retire)).
    storing: Mutex<bool>,
}

#[derive(Debug, Default)]
struct Inner {
    positions: BTreeMap<NodeId, Offset>,
    /// Whether `positions` changed since they were last written.
    dirty: bool,
}

/// The lowest applied position over a log's replicas, and whose it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LowestApplied {
    /// The replica holding deletion back.
    pub(crate) replica: NodeId,
    /// Its position; `None` when it never reported one.
    pub(crate) applied: Option<Offset>,
}

impl AppliedPositions {
    /// Loads the positions stored in `dir`; none when the file is missing,
    /// damaged (logged) or unreadable (logged).
    pub(crate) fn open(disk: Arc<dyn Disk>, dir: &Path) -> AppliedPositions {
        let path = dir.join(APPLIED_POSITIONS_FILE);
        let positions = match load_pairs(&*disk, &path, KIND) {
            Ok(pairs) => pairs
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(node, offset)| {
                    u32::try_from(node)
                        .ok()
                        .map(|node| (NodeId(node), Offset(offset)))
                })
                .collect(),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read the applied positions; starting without them (deletion waits until every replica reports again)");
                BTreeMap::new()
            }
        };
        AppliedPositions {
            disk,
            path,
            inner: Mutex::new(Inner {
                positions,
                dirty: false,
            }),
            storing: Mutex::new(false),
        }
    }

    /// Records `node`'s own report of its position (authoritative: it may
    /// go down, when an application restarts from an older checkpoint).
    pub(crate) fn set(&self, node: NodeId, applied: Offset) {
        let mut inner = self.inner.lock();
        if inner.positions.insert(node, applied) != Some(applied) {
            inner.dirty = true;
        }
    }

    /// Takes the leader's view of every replica but `local`, whose own
    /// report stays as it is.
    pub(crate) fn adopt_leader_view(&self, local: NodeId, view: &[(NodeId, Offset)]) {
        let mut inner = self.inner.lock();
        // Called for every fetch answer: most change nothing, and are
        // checked without building a map.
        let others = view.iter().filter(|(node, _)| *node != local);
        let unchanged = others.clone().count()
            == inner
                .positions
                .keys()
                .filter(|node| **node != local)
                .count()
            && others
                .clone()
                .all(|(node, offset)| inner.positions.get(node) == Some(offset));
        if unchanged {
            return;
        }
        let mut positions: BTreeMap<NodeId, Offset> = view
            .iter()
            .filter(|(node, _)| *node != local)
            .copied()
            .collect();
        if let Some(own) = inner.positions.get(&local) {
            positions.insert(local, *own);
        }
        if positions != inner.positions {
            inner.positions = positions;
            inner.dirty = true;
        }
    }

    /// The position of `node`, if it ever reported one.
    pub(crate) fn get(&self, node: NodeId) -> Option<Offset> {
        self.inner.lock().positions.get(&node).copied()
    }

    /// Every position known, by replica.
    pub(crate) fn all(&self) -> BTreeMap<NodeId, Offset> {
        self.inner.lock().positions.clone()
    }

    /// Every position known, for a fetch answer.
    pub(crate) fn to_vec(&self) -> Vec<(NodeId, Offset)> {
        let inner = self.inner.lock();
        inner.positions.iter().map(|(n, o)| (*n, *o)).collect()
    }

    /// The lowest position over `replicas` (one that never reported counts
    /// as lowest of all); `None` for no replicas.
    pub(crate) fn lowest(&self, replicas: &[NodeId]) -> Option<LowestApplied> {
        let inner = self.inner.lock();
        replicas
            .iter()
            .map(|&replica| LowestApplied {
                replica,
                applied: inner.positions.get(&replica).copied(),
            })
            // `None` orders below every `Some`.
            .min_by_key(|lowest| lowest.applied)
    }

    /// The highest offset that at least `count` of `replicas` have applied
    /// (the `count`-th highest position; `None` when fewer than `count`
    /// reported one).
    pub(crate) fn highest_held_by(&self, replicas: &[NodeId], count: usize) -> Option<Offset> {
        let inner = self.inner.lock();
        let mut known: Vec<Offset> = replicas
            .iter()
            .filter_map(|replica| inner.positions.get(replica).copied())
            .collect();
        known.sort_unstable_by(|a, b| b.cmp(a));
        count
            .checked_sub(1)
            .and_then(|index| known.get(index).copied())
    }

    /// The first of `replicas` whose position is `applied`.
    pub(crate) fn holder_of(&self, replicas: &[NodeId], applied: Offset) -> Option<NodeId> {
        let inner = self.inner.lock();
        replicas
            .iter()
            .copied()
            .find(|replica| inner.positions.get(replica) == Some(&applied))
    }

    /// Ends this object's writes for good, before its replica's directory
    /// is deleted (see `Log::retire`): a store running now ends first,
    /// and every later one writes nothing. A removed replica's retention
    /// pass, already under way on another thread, would otherwise write
    /// its positions into the directory of the replica that re-hosts the
    /// log (review of 3898024).
    pub(crate) fn retire(&self) {
        *self.storing.lock() = true;
    }

    /// Writes the positions if they changed since the last write; nothing
    /// once [`retire`](Self::retire)d.
    pub(crate) fn store(&self) -> Result<()> {
        let storing = self.storing.lock();
        if *storing {
            return Ok(());
        }
        let pairs: Vec<(u64, u64)> = {
            let mut inner = self.inner.lock();
            if !inner.dirty {
                return Ok(());
            }
            inner.dirty = false;
            inner
                .positions
                .iter()
                .map(|(n, o)| (u64::from(n.0), o.0))
                .collect()
        };
        let stored = store_pairs(&*self.disk, &self.path, KIND, &pairs);
        if stored.is_err() {
            // Written again next time.
            self.inner.lock().dirty = true;
        }
        stored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_survive_a_reopen_and_a_damaged_file_is_an_empty_map() {
        let dir = tempfile::tempdir().unwrap();
        let positions = AppliedPositions::open(crate::storage::StdDisk::shared(), dir.path());
        positions.set(NodeId(1), Offset(10));
        positions.set(NodeId(2), Offset(7));
        positions.store().unwrap();
        let again = AppliedPositions::open(crate::storage::StdDisk::shared(), dir.path());
        assert_eq!(again.get(NodeId(1)), Some(Offset(10)));
        assert_eq!(again.get(NodeId(2)), Some(Offset(7)));
        std::fs::write(dir.path().join(APPLIED_POSITIONS_FILE), b"garbage").unwrap();
        assert!(
            AppliedPositions::open(crate::storage::StdDisk::shared(), dir.path())
                .all()
                .is_empty()
        );
    }

    /// Retired positions write nothing more, even when changed.
    #[test]
    fn retired_positions_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let positions = AppliedPositions::open(crate::storage::StdDisk::shared(), dir.path());
        positions.set(NodeId(1), Offset(10));
        positions.retire();
        positions.store().unwrap();
        assert!(!dir.path().join(APPLIED_POSITIONS_FILE).exists());
    }

    #[test]
    fn a_replica_that_never_reported_is_the_lowest() {
        let dir = tempfile::tempdir().unwrap();
        let positions = AppliedPositions::open(crate::storage::StdDisk::shared(), dir.path());
        positions.set(NodeId(1), Offset(10));
        positions.set(NodeId(2), Offset(7));
        let replicas = [NodeId(1), NodeId(2)];
        assert_eq!(
            positions.lowest(&replicas),
            Some(LowestApplied {
                replica: NodeId(2),
                applied: Some(Offset(7))
            })
        );
        let replicas = [NodeId(1), NodeId(2), NodeId(3)];
        assert_eq!(
            positions.lowest(&replicas),
            Some(LowestApplied {
                replica: NodeId(3),
                applied: None
            })
        );
        assert_eq!(positions.lowest(&[]), None);
    }

    #[test]
    fn highest_held_by_is_the_count_th_highest_position() {
        let dir = tempfile::tempdir().unwrap();
        let positions = AppliedPositions::open(crate::storage::StdDisk::shared(), dir.path());
        positions.set(NodeId(1), Offset(10));
        positions.set(NodeId(2), Offset(7));
        positions.set(NodeId(3), Offset(3));
        let all = [NodeId(1), NodeId(2), NodeId(3), NodeId(4)];
        assert_eq!(positions.highest_held_by(&all, 1), Some(Offset(10)));
        assert_eq!(positions.highest_held_by(&all, 2), Some(Offset(7)));
        assert_eq!(positions.highest_held_by(&all, 3), Some(Offset(3)));
        assert_eq!(positions.highest_held_by(&all, 4), None);
        assert_eq!(positions.highest_held_by(&all, 0), None);
        assert_eq!(
            positions.highest_held_by(&[NodeId(2), NodeId(3)], 2),
            Some(Offset(3))
        );
    }

    #[test]
    fn the_leader_view_replaces_all_but_the_own_position() {
        let dir = tempfile::tempdir().unwrap();
        let positions = AppliedPositions::open(crate::storage::StdDisk::shared(), dir.path());
        positions.set(NodeId(1), Offset(5));
        positions.set(NodeId(3), Offset(9));
        positions.adopt_leader_view(NodeId(1), &[(NodeId(1), Offset(2)), (NodeId(2), Offset(4))]);
        assert_eq!(positions.get(NodeId(1)), Some(Offset(5)));
        assert_eq!(positions.get(NodeId(2)), Some(Offset(4)));
        assert_eq!(positions.get(NodeId(3)), None);
        // Own position may go down (an application restored an older checkpoint).
        positions.set(NodeId(1), Offset(3));
        assert_eq!(positions.get(NodeId(1)), Some(Offset(3)));
    }
}
