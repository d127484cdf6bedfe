//! The applications of the fault test's deletion mode (SPEC 3.9): one per
//! (node, log), each applying its replica's committed records into its
//! state, reporting its applied position, taking snapshots, and serving
//! and installing them through [`SnapshotStore`]. Their states count for
//! G1: a record deleted below a log's start is kept when an application
//! holds it at its offset.
//!
//! An application's state stands for one a database keeps durably (its
//! checkpoint is written before it reports the position), so it survives
//! the crashes and power losses of its node.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;

use bytes::Bytes;

use crate::error::Error;
use crate::replicated_log::{Isolation, ReplicatedLog};
use crate::snapshot::{SnapshotInfo, SnapshotStore};
use crate::sync::{Arc, Mutex};
use crate::types::{LogId, NodeId, Offset};

/// One application's state of one log.
#[derive(Clone, Debug, Default)]
struct AppState {
    applied: Offset,
    records: BTreeMap<u64, Vec<u8>>,
    snapshot: Option<(SnapshotInfo, Bytes)>,
}

impl AppState {
    fn encode(&self) -> Vec<u8> {
        let mut out = self.applied.0.to_le_bytes().to_vec();
        for (offset, value) in &self.records {
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        out
    }

    fn decode(bytes: &[u8]) -> std::io::Result<AppState> {
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "bad snapshot");
        let mut at = 0usize;
        let mut take = |n: usize| -> std::io::Result<&[u8]> {
            let slice = bytes.get(at..at + n).ok_or_else(bad)?;
            at += n;
            Ok(slice)
        };
        let u64_of = |b: &[u8]| b.try_into().map(u64::from_le_bytes).map_err(|_| bad());
        let applied = Offset(u64_of(take(8)?)?);
        let mut records = BTreeMap::new();
        while let Ok(offset) = take(8) {
            let offset = u64_of(offset)?;
            let len = take(4)?
                .try_into()
                .map(u32::from_le_bytes)
                .map_err(|_| bad())?;
            records.insert(offset, take(len as usize)?.to_vec());
        }
        Ok(AppState {
            applied,
            records,
            snapshot: None,
        })
    }
}

/// Every application of a run.
#[derive(Debug, Default)]
pub(crate) struct FaultApps {
    states: Mutex<HashMap<(NodeId, LogId), AppState>>,
    /// Snapshots installed, for the report.
    installs: Mutex<usize>,
    /// Times an application found its position below its replica's log
    /// start (the cap deleted what it had not applied).
    behind: Mutex<usize>,
}

impl FaultApps {
    /// Applies `replica`'s committed records from its application's
    /// position on and reports the new position.
    pub(crate) fn apply(&self, replica: &ReplicatedLog, log: LogId) {
        let node = replica.node_id();
        let mut from = self
            .states
            .lock()
            .get(&(node, log))
            .map_or(Offset::ZERO, |s| s.applied);
        let mut applied = Vec::new();
        loop {
            match replica.read(from, 1 << 16, Isolation::Committed) {
                Ok(batches) if batches.is_empty() => break,
                Ok(batches) => {
                    for batch in batches {
                        for record in batch.records().flatten() {
                            if record.offset >= from {
                                applied.push((record.offset.0, record.value.to_vec()));
                            }
                        }
                        from = from.max(batch.next_offset());
                    }
                }
                Err(Error::OffsetOutOfRange { log_start, .. }) if log_start > from => {
                    *self.behind.lock() += 1;
                    return;
                }
                Err(_) => return,
            }
        }
        let position = {
            let mut states = self.states.lock();
            let state = states.entry((node, log)).or_default();
            // An install may have moved the state on meanwhile.
            if state.applied > from {
                return;
            }
            state.records.extend(applied);
            state.applied = from;
            state.applied
        };
        let _ = replica.set_applied(position);
    }

    /// Every application of `node` takes a snapshot of its state.
    pub(crate) fn snapshot(&self, node: NodeId) {
        let mut states = self.states.lock();
        for ((n, _), state) in states.iter_mut() {
            if *n == node {
                let bytes = Bytes::from(state.encode());
                let info = SnapshotInfo {
                    offset: state.applied,
                    size_bytes: bytes.len() as u64,
                };
                state.snapshot = Some((info, bytes));
            }
        }
    }

    /// Whether some application holds `value` at `offset` of `log`.
    pub(crate) fn holds(&self, log: LogId, offset: Offset, value: &[u8]) -> bool {
        self.states.lock().iter().any(|((_, l), state)| {
            *l == log && state.records.get(&offset.0).map(Vec::as_slice) == Some(value)
        })
    }

    /// The applied position and state of `node`'s application of `log`
    /// (`None` before it applied anything).
    pub(crate) fn state_of(
        &self,
        node: NodeId,
        log: LogId,
    ) -> Option<(Offset, BTreeMap<u64, Vec<u8>>)> {
        self.states
            .lock()
            .get(&(node, log))
            .map(|s| (s.applied, s.records.clone()))
    }

    /// Snapshots installed and positions found below a log start.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (*self.installs.lock(), *self.behind.lock())
    }

    /// The snapshot store of `node`'s applications.
    pub(crate) fn store(self: &Arc<Self>, node: NodeId) -> Arc<dyn SnapshotStore> {
        Arc::new(NodeApps {
            node,
            apps: Arc::clone(self),
        })
    }
}

/// One node's applications, as its [`SnapshotStore`].
struct NodeApps {
    node: NodeId,
    apps: Arc<FaultApps>,
}

impl SnapshotStore for NodeApps {
    fn latest(&self, log: LogId) -> Option<SnapshotInfo> {
        let states = self.apps.states.lock();
        states
            .get(&(self.node, log))
            .and_then(|s| s.snapshot.as_ref())
            .map(|(info, _)| *info)
    }

    fn read_chunk(
        &self,
        log: LogId,
        snapshot: SnapshotInfo,
        position: u64,
        len: usize,
    ) -> std::io::Result<Bytes> {
        let states = self.apps.states.lock();
        match states
            .get(&(self.node, log))
            .and_then(|s| s.snapshot.as_ref())
        {
            Some((info, bytes)) if *info == snapshot => snapshot_chunk(bytes, position, len),
            _ => Err(std::io::Error::other("no such snapshot")),
        }
    }

    fn install(
        &self,
        log: LogId,
        snapshot: SnapshotInfo,
        data: &mut dyn Read,
    ) -> std::io::Result<()> {
        let bytes = read_whole_snapshot(snapshot, data)?;
        let mut state = AppState::decode(&bytes)?;
        if state.applied != snapshot.offset {
            return Err(std::io::Error::other("snapshot offset mismatch"));
        }
        state.snapshot = Some((snapshot, Bytes::from(bytes)));
        self.apps.states.lock().insert((self.node, log), state);
        *self.apps.installs.lock() += 1;
        Ok(())
    }
}

/// The chunk of an in-memory snapshot a [`SnapshotStore::read_chunk`]
/// answers: `len` bytes from `position`, an error past its end (the test
/// stores' shared rule).
pub(crate) fn snapshot_chunk(bytes: &[u8], position: u64, len: usize) -> std::io::Result<Bytes> {
    let past_end = || std::io::Error::other("past the snapshot's end");
    let start = usize::try_from(position).map_err(|_| past_end())?;
    let end = start.checked_add(len).ok_or_else(past_end)?;
    bytes
        .get(start..end)
        .map(Bytes::copy_from_slice)
        .ok_or_else(past_end)
}

/// Reads a snapshot handed to [`SnapshotStore::install`] whole, refusing
/// one whose size is not `snapshot`'s (the test stores' shared rule).
pub(crate) fn read_whole_snapshot(
    snapshot: SnapshotInfo,
    data: &mut dyn Read,
) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    data.read_to_end(&mut bytes)?;
    if bytes.len() as u64 != snapshot.size_bytes {
        return Err(std::io::Error::other("a torn snapshot reached install"));
    }
    Ok(bytes)
}
