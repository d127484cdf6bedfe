//! The znode layout under the chroot and the JSON documents stored in it.
//!
//! ```text
//! /cluster_id            persistent: the cluster id (SPEC 2.8)
//! /controller_epoch      persistent: {"format":1,"epoch":E,"controller":N}
//!                        the last controller epoch and who won it;
//!                        created with the cluster, never recreated
//! /controller            ephemeral: the seat, owned by the sitting
//!                        controller's session: {"format":1,"epoch":E,
//!                        "controller":N}, created in the transaction that
//!                        wrote `/controller_epoch`
//! /nodes                persistent; its data version counts registrations:
//!                        each moves it in the transaction that creates its
//!                        node's znode, so that deleting a given-up
//!                        session's znode can be conditional on no
//!                        registration since (ZooKeeper cannot condition a
//!                        delete on a znode's owner)
//! /nodes/<node id>       ephemeral, one per live node, owned by its session
//! /logs/<log id>         persistent: one log's state; its ZooKeeper version
//!                        is the state's compare-and-set version
//! /producer_ids          persistent: {"format":1,"next_block_start":P};
//!                        created with the cluster, never recreated
//! /producer_ids_high_mark  an earlier version's copy of /producer_ids,
//!                        never created, kept equal to it while it exists
//! /directories/<node id> persistent: where the node placed its replicas
//! ```
//!
//! Kafka's layout: the epoch lives in the persistent `/controller_epoch`,
//! the seat is the ephemeral `/controller`, so deleting `/controller` (an
//! operator's way to force a re-election) only empties the seat. The epoch
//! record's epoch is `epoch_base` (absent means 0) plus its ZooKeeper
//! version: every election bumps both in one conditional write, so a
//! controller's writes check its epoch by the record's version. That check
//! is sound only because the record is never recreated: a recreated znode
//! starts again at version 0, and a node that read version `v` before would
//! pass a conditional write once the new znode reached `v` again (issue 24,
//! item 3). The two counters (`/controller_epoch`, `/producer_ids`) are
//! therefore created once, with the cluster id, and a missing one is an
//! error naming it, never a reset.
//!
//! A store written by an earlier version keeps the epoch in a persistent
//! `/controller` (with the seat as its child `/controller/seat`): the
//! coordinator moves it to `/controller_epoch` once, in one conditional
//! transaction ([`OLD_CONTROLLER_SEAT`]).
//!
//! This module owns the names and the encoding; it does no I/O. Every
//! decoder takes bytes another process wrote and answers a clear error,
//! never a panic, for anything it does not accept.

use serde::{Deserialize, Serialize};

use crate::coordinator::{ControllerEpoch, LogEnd, LogState, UncleanReplica};
use crate::error::{Error, Result};
use crate::types::{ClusterId, DirectoryId, LeaderEpoch, LogId, NodeId, Offset};

/// The parent of the live nodes' ephemeral znodes.
pub(super) const NODES: &str = "/nodes";
/// The controller seat (ephemeral, owned by the sitting controller's
/// session). In a store of an earlier version, the persistent epoch record.
pub(super) const CONTROLLER: &str = "/controller";
/// The controller epoch record (persistent, never recreated).
pub(super) const CONTROLLER_EPOCH: &str = "/controller_epoch";
/// The seat in a store of an earlier version, child of the persistent
/// `/controller` record: deleted with that record when its epoch moves to
/// [`CONTROLLER_EPOCH`].
pub(super) const OLD_CONTROLLER_SEAT: &str = "/controller/seat";
/// The parent of the logs' znodes.
pub(super) const LOGS: &str = "/logs";
/// The producer id counter (persistent, never recreated).
pub(super) const PRODUCER_IDS: &str = "/producer_ids";
/// An earlier version's second copy of [`PRODUCER_IDS`], from which that
/// version recreates a missing counter. This version never creates it, but
/// while it exists every reservation moves it with the counter, in the same
/// transaction: a mark left behind would let an earlier-version node in a
/// rolling upgrade recreate the counter below ids already handed out.
pub(super) const PRODUCER_IDS_HIGH_MARK: &str = "/producer_ids_high_mark";
/// The cluster id (SPEC 2.8; Kafka's `/cluster/id`), created with the
/// layout. A store set up by a version without it gets one at the next
/// connect.
pub(super) const CLUSTER_ID: &str = "/cluster_id";
/// The parent of the per-node replica directory documents (SPEC 2.8). A
/// node without a document has no replica placed on a directory yet.
pub(super) const DIRECTORIES: &str = "/directories";

pub(super) fn directories_path(node: NodeId) -> String {
    format!("{DIRECTORIES}/{}", node.0)
}

/// The only document format this version reads and writes.
const FORMAT: u32 = 1;

pub(super) fn node_path(node: NodeId) -> String {
    format!("{NODES}/{}", node.0)
}

pub(super) fn log_path(log: LogId) -> String {
    format!("{LOGS}/{}", log.0)
}

/// What a znode path (relative to the chroot) is about, for the watcher.
/// The order of the variants is the order the watcher re-reads them in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Subject {
    /// The live node set and the controller, read together.
    Membership,
    /// One log.
    Log(LogId),
}

/// The subject a changed path belongs to, if any.
pub(super) fn subject_of(path: &str) -> Option<Subject> {
    if path == NODES
        || path.starts_with("/nodes/")
        || path == CONTROLLER
        || path == CONTROLLER_EPOCH
        || path == OLD_CONTROLLER_SEAT
    {
        return Some(Subject::Membership);
    }
    path.strip_prefix("/logs/")
        .and_then(|id| id.parse::<u32>().ok())
        .map(|id| Subject::Log(LogId(id)))
}

/// Parses a child name of `/nodes` or `/logs`: a decimal id. A name that is
/// not one (a znode someone else put there) is an error naming it; bulk
/// readers skip it rather than fail.
pub(super) fn parse_id(parent: &str, name: &str) -> Result<u32> {
    name.parse::<u32>().map_err(|_| Error::CoordinatorDocument {
        path: format!("{parent}/{name}"),
        reason: "unexpected znode: expected a decimal id".to_owned(),
    })
}

fn decode_error(path: &str, reason: impl std::fmt::Display) -> Error {
    Error::CoordinatorDocument {
        path: path.to_owned(),
        reason: format!("cannot read it: {reason}"),
    }
}

fn encode<T: Serialize>(document: &T) -> Vec<u8> {
    // Serialising a struct of integers, options and vectors to a Vec cannot
    // fail; the fallback only keeps the library free of panics.
    serde_json::to_vec(document).unwrap_or_default()
}

/// The fields of a document this version does not know, by name (nested
/// ones as `outer[index].inner`); empty for a document it fully knows.
///
/// Documents are read forward-compatibly (Kafka also ignores the fields of
/// its ZooKeeper JSON it does not know): a field added by a newer version
/// must not make an older node, during a rolling upgrade, unable to read the
/// document. A log or directories document holding one is never written
/// back by this version, though (see [`refuse_unknown_fields`]); the two
/// singleton counters write theirs back unchanged (see
/// `ControllerDocument`).
pub(super) type UnknownFields = Vec<String>;

/// Unknown fields of a document, collected by `#[serde(flatten)]`.
pub(super) type Extra = std::collections::BTreeMap<String, serde_json::Value>;

/// The error for a write over a document holding fields this version does
/// not know, or `Ok` if it holds none.
///
/// Why refuse rather than keep or drop them: dropping them would let a
/// compare-and-set erase a newer node's data in silence. Keeping them (a
/// flatten map written back verbatim) is no safer: a field this version
/// does not know may depend on fields it changes, as the eligible leader
/// replicas depend on the ISR (an older node that kept a newer node's ELR
/// while changing the ISR would store an ELR overlapping the ISR, a state
/// the newer node then rejects or, worse, trusts). Refusing costs only
/// availability of that one document's changes until a node that knows the
/// field (an upgraded one) makes them, and the error says so.
pub(super) fn refuse_unknown_fields(path: &str, unknown: &[String], what: &str) -> Result<()> {
    if unknown.is_empty() {
        return Ok(());
    }
    Err(Error::CoordinatorDocument {
        path: path.to_owned(),
        reason: format!(
            "refusing to {what}: it holds fields this version does not know ({}), \
             written by a newer isrlog; writing it back would drop or misread them. \
             Let an upgraded node make the change, or finish the rolling upgrade",
            unknown.join(", ")
        ),
    })
}

fn decode<'a, T: Deserialize<'a> + Formatted>(path: &str, bytes: &'a [u8]) -> Result<T> {
    let document: T = serde_json::from_slice(bytes).map_err(|e| decode_error(path, e))?;
    if document.format() != FORMAT {
        return Err(decode_error(
            path,
            format!(
                "document format {} is not the supported {FORMAT}",
                document.format()
            ),
        ));
    }
    Ok(document)
}

trait Formatted {
    fn format(&self) -> u32;
}

/// A log's state as stored: everything of [`LogState`] but the id (the
/// znode's name) and the version (the znode's version).
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct LogDocument {
    format: u32,
    replicas: Vec<u32>,
    leader: Option<u32>,
    leader_epoch: u32,
    in_sync_replicas: Vec<u32>,
    /// Added with eligible leader replicas (KIP-966). Documents written
    /// before it lack the field and read as an empty ELR; an empty ELR is
    /// not written, so a document without one stays readable by a version
    /// that predates the field (which denies unknown fields), as during a
    /// rolling upgrade.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    eligible_leader_replicas: Vec<u32>,
    /// Added with unclean recovery ([`LogState::unclean_replicas`]); absent
    /// and empty read the same, as for the ELR.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    unclean_replicas: Vec<UncleanReplicaDocument>,
    /// Added with reassignment ([`LogState::adding_replicas`], SPEC 3.10,
    /// KIP-455's field of the same name); absent and empty read the same,
    /// and an empty list is not written, as for the ELR. A version that
    /// predates the field refuses to write over a document that has it:
    /// it would end the move in silence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    adding_replicas: Vec<u32>,
    /// Added with reassignment ([`LogState::removing_replicas`]), as
    /// `adding_replicas`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    removing_replicas: Vec<u32>,
    /// Fields of a newer version, only read to refuse writing over them.
    #[serde(flatten, skip_serializing)]
    unknown: Extra,
}

/// One entry of [`LogState::unclean_replicas`] as stored.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct UncleanReplicaDocument {
    node: u32,
    last_epoch: Option<u32>,
    log_end_offset: u64,
    /// Added with unknown log ends ([`UncleanReplica::log_end`] `None`):
    /// then `true`, with `last_epoch` null and `log_end_offset` 0. Absent
    /// and `false` read the same, and `false` is not written, so a
    /// document without an unknown end reads the same to a version that
    /// predates the field; such a version does not write over a document
    /// that has it (a newer version's field).
    #[serde(default, skip_serializing_if = "is_false")]
    log_end_unknown: bool,
    /// Added with line epochs ([`LogEnd::line_epoch`]): absent reads as
    /// none (recovery then falls back on `last_epoch`), and none is not
    /// written. A version that predates it does not write over a
    /// document that has it: during a rolling upgrade, once an upgraded
    /// node reported an unclean restart of a log, nodes and controllers
    /// of the older version leave that log's document alone (no election,
    /// no ISR change by them) until they are upgraded too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    line_epoch: Option<u32>,
    /// Added with line epochs too ([`LogEnd::log_start_offset`]): absent
    /// and 0 read the same, and 0 is not written.
    #[serde(default, skip_serializing_if = "is_zero")]
    log_start_offset: u64,
    /// Added with line epochs too ([`LogEnd::high_watermark`]), as
    /// `log_start_offset`.
    #[serde(default, skip_serializing_if = "is_zero")]
    high_watermark: u64,
    /// Added with line epochs too ([`LogEnd::epochs`]): `[epoch, start
    /// offset]` pairs, oldest first; absent and empty read the same, and
    /// empty is not written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    epochs: Vec<(u32, u64)>,
    /// Added with start lines ([`LogEnd::start_line`]): absent reads as
    /// none, and none is not written. A version that predates it does
    /// not write over a document that has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start_line: Option<u32>,
    /// Added with resigning leaders' entries
    /// ([`UncleanReplica::acknowledged_end`]): absent reads as none, and
    /// none is not written. A version that predates it does not write
    /// over a document that has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    acknowledged_end: Option<u64>,
    /// Fields of a newer version, only read to refuse writing over them.
    #[serde(flatten, skip_serializing)]
    unknown: Extra,
}

impl Formatted for LogDocument {
    fn format(&self) -> u32 {
        self.format
    }
}

pub(super) fn encode_log(state: &LogState) -> Vec<u8> {
    encode(&LogDocument {
        format: FORMAT,
        replicas: state.replicas.iter().map(|node| node.0).collect(),
        leader: state.leader.map(|node| node.0),
        leader_epoch: state.leader_epoch.0,
        in_sync_replicas: state.in_sync_replicas.iter().map(|node| node.0).collect(),
        eligible_leader_replicas: state
            .eligible_leader_replicas
            .iter()
            .map(|node| node.0)
            .collect(),
        unclean_replicas: state
            .unclean_replicas
            .iter()
            .map(|r| {
                let end = r.log_end.clone().unwrap_or_default();
                UncleanReplicaDocument {
                    node: r.node.0,
                    last_epoch: end.last_epoch.map(|epoch| epoch.0),
                    log_end_offset: end.log_end_offset.0,
                    log_end_unknown: r.log_end.is_none(),
                    line_epoch: end.line_epoch.map(|epoch| epoch.0),
                    log_start_offset: end.log_start_offset.0,
                    high_watermark: end.high_watermark.0,
                    epochs: end
                        .epochs
                        .iter()
                        .map(|(epoch, start)| (epoch.0, start.0))
                        .collect(),
                    start_line: end.start_line.map(|epoch| epoch.0),
                    acknowledged_end: r.acknowledged_end.map(|end| end.0),
                    unknown: Extra::new(),
                }
            })
            .collect(),
        adding_replicas: state.adding_replicas.iter().map(|node| node.0).collect(),
        removing_replicas: state.removing_replicas.iter().map(|node| node.0).collect(),
        unknown: Extra::new(),
    })
}

/// Decodes the state of `log` stored with ZooKeeper version `version`, and
/// checks the invariants of [`LogState`] (a state that breaks them is an
/// error naming the rule, not a panic: another process wrote it). Also
/// answers the fields it did not know.
pub(super) fn decode_log(
    log: LogId,
    bytes: &[u8],
    version: i32,
) -> Result<(LogState, UnknownFields)> {
    let path = log_path(log);
    let document: LogDocument = decode(&path, bytes)?;
    let mut unknown: UnknownFields = document.unknown.keys().cloned().collect();
    for (i, replica) in document.unclean_replicas.iter().enumerate() {
        let ordered = replica
            .epochs
            .windows(2)
            .all(|pair| pair[0].0 < pair[1].0 && pair[0].1 < pair[1].1);
        let within = replica
            .epochs
            .iter()
            .all(|(_, start)| *start <= replica.log_end_offset);
        if !ordered || !within {
            return Err(decode_error(
                &path,
                format!(
                    "unclean_replicas[{i}].epochs {:?} is not increasing in epoch and start offset, each start at most log_end_offset {}",
                    replica.epochs, replica.log_end_offset
                ),
            ));
        }
        if replica.log_start_offset > replica.log_end_offset
            || replica.high_watermark > replica.log_end_offset
        {
            return Err(decode_error(
                &path,
                format!(
                    "unclean_replicas[{i}].log_start_offset {} or high_watermark {} is above its log_end_offset {}",
                    replica.log_start_offset, replica.high_watermark, replica.log_end_offset
                ),
            ));
        }
        // A resigning leader writes its acknowledged end with its known
        // log end, at most that (`LogState::validate_update`).
        if let Some(acknowledged_end) = replica.acknowledged_end {
            if replica.log_end_unknown || acknowledged_end > replica.log_end_offset {
                return Err(decode_error(
                    &path,
                    format!(
                        "unclean_replicas[{i}].acknowledged_end {acknowledged_end} is above its log_end_offset {} or its log end is unknown",
                        replica.log_end_offset
                    ),
                ));
            }
        }
        unknown.extend(
            replica
                .unknown
                .keys()
                .map(|key| format!("unclean_replicas[{i}].{key}")),
        );
    }
    let version =
        u64::try_from(version).map_err(|_| decode_error(&path, format!("version {version}")))?;
    let nodes = |ids: &[u32]| ids.iter().copied().map(NodeId).collect::<Vec<_>>();
    let state = LogState {
        log,
        replicas: nodes(&document.replicas),
        leader: document.leader.map(NodeId),
        leader_epoch: LeaderEpoch(document.leader_epoch),
        in_sync_replicas: nodes(&document.in_sync_replicas),
        eligible_leader_replicas: nodes(&document.eligible_leader_replicas),
        unclean_replicas: document
            .unclean_replicas
            .iter()
            .map(|r| UncleanReplica {
                node: NodeId(r.node),
                acknowledged_end: r.acknowledged_end.map(Offset),
                log_end: (!r.log_end_unknown).then(|| LogEnd {
                    last_epoch: r.last_epoch.map(LeaderEpoch),
                    log_end_offset: Offset(r.log_end_offset),
                    line_epoch: r.line_epoch.map(LeaderEpoch),
                    log_start_offset: Offset(r.log_start_offset),
                    high_watermark: Offset(r.high_watermark),
                    epochs: r
                        .epochs
                        .iter()
                        .map(|(epoch, start)| (LeaderEpoch(*epoch), Offset(*start)))
                        .collect(),
                    start_line: r.start_line.map(LeaderEpoch),
                }),
            })
            .collect(),
        version,
        adding_replicas: nodes(&document.adding_replicas),
        removing_replicas: nodes(&document.removing_replicas),
    };
    check_log_state(&state).map_err(|reason| decode_error(&path, reason))?;
    Ok((state, unknown))
}

/// The invariants of [`LogState`], as an error instead of an assertion.
fn check_log_state(state: &LogState) -> std::result::Result<(), String> {
    let repeats = |nodes: &[NodeId]| {
        nodes
            .iter()
            .enumerate()
            .any(|(i, node)| nodes[..i].contains(node))
    };
    if state.replicas.is_empty() {
        return Err("no replicas".to_owned());
    }
    if repeats(&state.replicas) {
        return Err(format!("replicas {:?} repeat a node", state.replicas));
    }
    if repeats(&state.in_sync_replicas) {
        return Err(format!(
            "in_sync_replicas {:?} repeat a node",
            state.in_sync_replicas
        ));
    }
    if let Some(node) = state
        .in_sync_replicas
        .iter()
        .find(|node| !state.replicas.contains(node))
    {
        return Err(format!(
            "in_sync_replicas {:?} contain {node}, not one of the replicas {:?}",
            state.in_sync_replicas, state.replicas
        ));
    }
    if let Some(leader) = state.leader {
        if !state.in_sync_replicas.contains(&leader) {
            return Err(format!(
                "leader {leader} is not in in_sync_replicas {:?}",
                state.in_sync_replicas
            ));
        }
    }
    let elr = &state.eligible_leader_replicas;
    if repeats(elr) {
        return Err(format!("eligible_leader_replicas {elr:?} repeat a node"));
    }
    if let Some(node) = elr
        .iter()
        .find(|node| !state.replicas.contains(node) || state.in_sync_replicas.contains(node))
    {
        return Err(format!(
            "eligible_leader_replicas {elr:?} contain {node}, not one of the replicas {:?} outside in_sync_replicas {:?}",
            state.replicas, state.in_sync_replicas
        ));
    }
    let unclean: Vec<NodeId> = state.unclean_replicas.iter().map(|r| r.node).collect();
    if repeats(&unclean) {
        return Err(format!("unclean_replicas {unclean:?} repeat a node"));
    }
    if let Some(node) = unclean.iter().find(|node| {
        !state.replicas.contains(node)
            || state.in_sync_replicas.contains(node)
            || elr.contains(node)
    }) {
        return Err(format!(
            "unclean_replicas {unclean:?} contain {node}, not one of the replicas {:?} outside in_sync_replicas {:?} and eligible_leader_replicas {elr:?}",
            state.replicas, state.in_sync_replicas
        ));
    }
    let assignment = crate::coordinator::Assignment {
        replicas: state.replicas.clone(),
        adding_replicas: state.adding_replicas.clone(),
        removing_replicas: state.removing_replicas.clone(),
    };
    if let Err(error) = assignment.validate(state.log) {
        return Err(error.to_string());
    }
    Ok(())
}

/// The controller epoch record (and the seat's data, and the epoch record
/// of an earlier version's `/controller`): the last controller epoch and
/// who won it.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct ControllerDocument {
    format: u32,
    epoch: u64,
    controller: Option<u32>,
    /// The epoch at the record's version 0: 0 for the record created with
    /// the cluster (and then not written), the epoch moved over from an
    /// earlier version's record otherwise.
    #[serde(default, skip_serializing_if = "is_zero")]
    epoch_base: u64,
    /// Fields of a newer version, written back unchanged: the record is
    /// one per cluster, and refusing to write over them would stop every
    /// election until the whole cluster runs the newer version.
    #[serde(flatten)]
    unknown: Extra,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// What the controller epoch record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ControllerRecord {
    /// The last controller epoch.
    pub(super) epoch: ControllerEpoch,
    /// The node that won it, if any election happened on this record.
    pub(super) controller: Option<NodeId>,
    /// The epoch at version 0 (the record's epoch minus its version).
    pub(super) epoch_base: u64,
    /// Fields a newer version wrote, to write back unchanged.
    pub(super) unknown: Extra,
}

impl Formatted for ControllerDocument {
    fn format(&self) -> u32 {
        self.format
    }
}

/// The controller epoch record after `controller` won `epoch` (or, with
/// `None`, a record nobody won yet) on a record whose epoch at version 0
/// is `epoch_base`, keeping the fields `unknown` a newer version wrote.
/// Also the seat's data.
pub(super) fn encode_controller(
    epoch: ControllerEpoch,
    controller: Option<NodeId>,
    epoch_base: u64,
    unknown: &Extra,
) -> Vec<u8> {
    encode(&ControllerDocument {
        format: FORMAT,
        epoch: epoch.0,
        controller: controller.map(|node| node.0),
        epoch_base,
        unknown: unknown.clone(),
    })
}

/// The epoch of a controller epoch record created in a store that may
/// have handed out controller epochs before (a store half-created by an
/// earlier version), given `zxid`, a zxid read before the creation (the
/// chroot's `pzxid`).
///
/// Every election sets the epoch to one more than the last in its own
/// ZooKeeper transaction, and a record starts at a zxid read before its
/// creation; zxids grow by at least one per transaction, so by induction
/// every epoch is at most the zxid of the transaction that set it, and one
/// more than a zxid read after every such transaction is above all of them.
pub(super) fn controller_epoch_floor(zxid: i64) -> u64 {
    u64::try_from(zxid).unwrap_or(0).saturating_add(1)
}

/// Decodes the controller epoch record at `path` stored with ZooKeeper
/// version `version`. The epoch must equal the base plus the version
/// (every election bumps both in one conditional write), which is what
/// lets a controller's writes check its epoch by the record's version.
pub(super) fn decode_controller(
    path: &str,
    bytes: &[u8],
    version: i32,
) -> Result<ControllerRecord> {
    let document: ControllerDocument = decode(path, bytes)?;
    let expected = u64::try_from(version)
        .ok()
        .and_then(|version| document.epoch_base.checked_add(version));
    if expected != Some(document.epoch) {
        return Err(decode_error(
            path,
            format!(
                "controller epoch {} differs from the epoch base {} plus the znode's version {version}",
                document.epoch, document.epoch_base
            ),
        ));
    }
    Ok(ControllerRecord {
        epoch: ControllerEpoch(document.epoch),
        controller: document.controller.map(NodeId),
        epoch_base: document.epoch_base,
        unknown: document.unknown,
    })
}

/// The next block of producer ids to hand out.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct ProducerIdsDocument {
    format: u32,
    next_block_start: i64,
    /// Fields of a newer version, written back unchanged: the counter is
    /// one per cluster, and refusing to write over them would stop every
    /// allocation until the whole cluster runs the newer version.
    #[serde(flatten)]
    unknown: Extra,
}

impl Formatted for ProducerIdsDocument {
    fn format(&self) -> u32 {
        self.format
    }
}

/// The producer id counter at `next_block_start`, keeping the fields
/// `unknown` a newer version wrote.
pub(super) fn encode_producer_ids(next_block_start: i64, unknown: &Extra) -> Vec<u8> {
    encode(&ProducerIdsDocument {
        format: FORMAT,
        next_block_start,
        unknown: unknown.clone(),
    })
}

/// Decodes the producer id counter: the next block's start and the fields
/// this version does not know (to write back unchanged).
pub(super) fn decode_producer_ids(bytes: &[u8]) -> Result<(i64, Extra)> {
    let document: ProducerIdsDocument = decode(PRODUCER_IDS, bytes)?;
    if document.next_block_start < 0 {
        return Err(decode_error(
            PRODUCER_IDS,
            format!("negative next_block_start {}", document.next_block_start),
        ));
    }
    Ok((document.next_block_start, document.unknown))
}

/// The cluster id, as 32 hex digits.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct ClusterIdDocument {
    format: u32,
    cluster_id: String,
}

impl Formatted for ClusterIdDocument {
    fn format(&self) -> u32 {
        self.format
    }
}

pub(super) fn encode_cluster_id(cluster_id: ClusterId) -> Vec<u8> {
    encode(&ClusterIdDocument {
        format: FORMAT,
        cluster_id: cluster_id.to_string(),
    })
}

pub(super) fn decode_cluster_id(bytes: &[u8]) -> Result<ClusterId> {
    let document: ClusterIdDocument = decode(CLUSTER_ID, bytes)?;
    document
        .cluster_id
        .parse()
        .map_err(|reason| decode_error(CLUSTER_ID, format!("cluster_id: {reason}")))
}

/// The directory each replica of one node was placed on: log id to
/// directory id (32 hex digits). Only that node writes it.
///
/// Read forward-compatibly, as the log documents are: a newer node that
/// shares the store during a rolling upgrade may add a field, and a node
/// that cannot read its own document cannot start. Writing over such a
/// document is refused ([`refuse_unknown_fields`]): what the field says
/// about the placements it does not know.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
struct DirectoriesDocument {
    format: u32,
    #[serde(default)]
    replicas: std::collections::BTreeMap<u32, String>,
    /// Fields of a newer version, only read to refuse writing over them.
    #[serde(flatten, skip_serializing)]
    unknown: Extra,
}

impl Formatted for DirectoriesDocument {
    fn format(&self) -> u32 {
        self.format
    }
}

pub(super) fn encode_directories(directories: &[(LogId, DirectoryId)]) -> Vec<u8> {
    encode(&DirectoriesDocument {
        format: FORMAT,
        replicas: directories
            .iter()
            .map(|(log, dir)| (log.0, dir.to_string()))
            .collect(),
        unknown: Extra::new(),
    })
}

/// Decodes `node`'s directories document: the placements, and the fields
/// this version does not know.
pub(super) fn decode_directories(
    node: NodeId,
    bytes: &[u8],
) -> Result<(Vec<(LogId, DirectoryId)>, UnknownFields)> {
    let path = directories_path(node);
    let document: DirectoriesDocument = decode(&path, bytes)?;
    let unknown = document.unknown.keys().cloned().collect();
    let placements = document
        .replicas
        .into_iter()
        .map(|(log, dir)| {
            dir.parse()
                .map(|dir| (LogId(log), dir))
                .map_err(|reason| decode_error(&path, format!("log {log}: {reason}")))
        })
        .collect::<Result<_>>()?;
    Ok((placements, unknown))
}

/// What a live node's znode holds: nothing anyone relies on, but useful to
/// an operator looking with zkCli.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct NodeDocument {
    format: u32,
    session_timeout_ms: u64,
}

pub(super) fn encode_node(session_timeout: std::time::Duration) -> Vec<u8> {
    encode(&NodeDocument {
        format: FORMAT,
        session_timeout_ms: u64::try_from(session_timeout.as_millis()).unwrap_or(u64::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> LogState {
        LogState {
            log: LogId(7),
            replicas: vec![NodeId(3), NodeId(1), NodeId(2)],
            leader: Some(NodeId(1)),
            leader_epoch: LeaderEpoch(4),
            in_sync_replicas: vec![NodeId(1), NodeId(3)],
            eligible_leader_replicas: Vec::new(),
            version: 9,
            unclean_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    #[test]
    fn log_state_round_trips_with_the_znode_version() {
        let bytes = encode_log(&state());
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"format":1,"replicas":[3,1,2],"leader":1,"leader_epoch":4,"in_sync_replicas":[1,3]}"#
        );
        assert_eq!(decode_log(LogId(7), &bytes, 9).unwrap().0, state());
        let leaderless = LogState {
            leader: None,
            ..state()
        };
        let bytes = encode_log(&leaderless);
        assert_eq!(decode_log(LogId(7), &bytes, 9).unwrap().0, leaderless);
        let with_elr = LogState {
            leader: Some(NodeId(1)),
            in_sync_replicas: vec![NodeId(1)],
            eligible_leader_replicas: vec![NodeId(3), NodeId(2)],
            ..state()
        };
        let bytes = encode_log(&with_elr);
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"format":1,"replicas":[3,1,2],"leader":1,"leader_epoch":4,"in_sync_replicas":[1],"eligible_leader_replicas":[3,2]}"#
        );
        assert_eq!(decode_log(LogId(7), &bytes, 9).unwrap().0, with_elr);
        let recovering = LogState {
            leader: None,
            in_sync_replicas: Vec::new(),
            unclean_replicas: vec![
                UncleanReplica {
                    node: NodeId(3),
                    acknowledged_end: Some(Offset(11)),
                    log_end: Some(LogEnd {
                        last_epoch: Some(LeaderEpoch(4)),
                        log_end_offset: Offset(12),
                        log_start_offset: Offset(3),
                        high_watermark: Offset(11),
                        line_epoch: Some(LeaderEpoch(4)),
                        epochs: vec![(LeaderEpoch(2), Offset(3)), (LeaderEpoch(3), Offset(9))],
                        start_line: Some(LeaderEpoch(2)),
                    }),
                },
                UncleanReplica {
                    node: NodeId(1),
                    acknowledged_end: None,
                    log_end: Some(LogEnd::default()),
                },
                UncleanReplica {
                    node: NodeId(2),
                    acknowledged_end: None,
                    log_end: None,
                },
            ],
            ..state()
        };
        let bytes = encode_log(&recovering);
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"format":1,"replicas":[3,1,2],"leader":null,"leader_epoch":4,"in_sync_replicas":[],"unclean_replicas":[{"node":3,"last_epoch":4,"log_end_offset":12,"line_epoch":4,"log_start_offset":3,"high_watermark":11,"epochs":[[2,3],[3,9]],"start_line":2,"acknowledged_end":11},{"node":1,"last_epoch":null,"log_end_offset":0},{"node":2,"last_epoch":null,"log_end_offset":0,"log_end_unknown":true}]}"#
        );
        assert_eq!(decode_log(LogId(7), &bytes, 9).unwrap().0, recovering);
        // Epochs out of order, or starting past the log end, are named.
        for (from, bad, named) in [
            (
                r#"[[2,3],[3,9]]"#,
                r#"[[3,3],[2,9]]"#,
                "unclean_replicas[0].epochs",
            ),
            (
                r#"[[2,3],[3,9]]"#,
                r#"[[2,3],[3,13]]"#,
                "unclean_replicas[0].epochs",
            ),
            (
                r#""log_start_offset":3"#,
                r#""log_start_offset":13"#,
                "unclean_replicas[0].log_start_offset 13",
            ),
            (
                r#""high_watermark":11"#,
                r#""high_watermark":14"#,
                "high_watermark 14 is above",
            ),
            (
                r#""acknowledged_end":11"#,
                r#""acknowledged_end":13"#,
                "unclean_replicas[0].acknowledged_end 13 is above",
            ),
        ] {
            let text = std::str::from_utf8(&bytes).unwrap().replace(from, bad);
            let error = decode_log(LogId(7), text.as_bytes(), 9)
                .unwrap_err()
                .to_string();
            assert!(error.contains(named), "{error}");
        }
    }

    /// A log in the middle of a reassignment (SPEC 3.10) stores KIP-455's
    /// `adding_replicas` and `removing_replicas`; a document without them
    /// (every one written before reassignment existed) reads as no move,
    /// as the round trip above shows; one whose lists break the rules is
    /// an error naming the field.
    #[test]
    fn a_reassigning_log_document_round_trips_and_a_bad_one_is_named() {
        let moving = LogState {
            replicas: vec![NodeId(4), NodeId(1), NodeId(2), NodeId(3)],
            adding_replicas: vec![NodeId(4)],
            removing_replicas: vec![NodeId(3)],
            ..state()
        };
        let bytes = encode_log(&moving);
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"format":1,"replicas":[4,1,2,3],"leader":1,"leader_epoch":4,"in_sync_replicas":[1,3],"adding_replicas":[4],"removing_replicas":[3]}"#
        );
        assert_eq!(decode_log(LogId(7), &bytes, 9).unwrap().0, moving);
        let bad = br#"{"format":1,"replicas":[1,2],"leader":1,"leader_epoch":4,"in_sync_replicas":[1],"adding_replicas":[5]}"#;
        let error = decode_log(LogId(7), bad, 9).unwrap_err().to_string();
        assert!(
            error.contains("adding_replicas [NodeId(5)] contains node-5"),
            "{error}"
        );
    }

    /// Documents written before unclean recovery existed (with or without
    /// an ELR) have no `unclean_replicas` field: they read as an empty
    /// list, not as an error, so a cluster upgrades in place.
    #[test]
    fn a_log_document_without_the_unclean_field_reads_as_an_empty_list() {
        let old = br#"{"format":1,"replicas":[3,1,2],"leader":1,"leader_epoch":4,"in_sync_replicas":[1],"eligible_leader_replicas":[3,2]}"#;
        let decoded = decode_log(LogId(7), old, 9).unwrap().0;
        assert!(decoded.unclean_replicas.is_empty());
        assert_eq!(decoded.eligible_leader_replicas, vec![NodeId(3), NodeId(2)]);
    }

    /// Documents written before eligible leader replicas existed have no
    /// such field: they read as an empty ELR, not as an error.
    #[test]
    fn a_log_document_without_the_elr_field_reads_as_an_empty_elr() {
        let old = br#"{"format":1,"replicas":[3,1,2],"leader":1,"leader_epoch":4,"in_sync_replicas":[1,3]}"#;
        let decoded = decode_log(LogId(7), old, 9).unwrap().0;
        assert_eq!(decoded, state());
        assert!(decoded.eligible_leader_replicas.is_empty());
    }

    #[test]
    fn a_bad_log_document_is_an_error_naming_what_is_wrong() {
        let cases: &[(&[u8], i32, &str)] = &[
            (b"", 0, "EOF"),
            (b"{", 0, "EOF"),
            (b"\xff\xfe", 0, "expected value"),
            (
                br#"{"format":2,"replicas":[1],"leader":1,"leader_epoch":0,"in_sync_replicas":[1]}"#,
                0,
                "format 2",
            ),
            (
                br#"{"format":1,"replicas":[],"leader":null,"leader_epoch":0,"in_sync_replicas":[]}"#,
                0,
                "no replicas",
            ),
            (
                br#"{"format":1,"replicas":[1,1],"leader":1,"leader_epoch":0,"in_sync_replicas":[1]}"#,
                0,
                "repeat",
            ),
            (
                br#"{"format":1,"replicas":[1,2],"leader":2,"leader_epoch":0,"in_sync_replicas":[1]}"#,
                0,
                "leader node-2 is not in",
            ),
            (
                br#"{"format":1,"replicas":[1,2],"leader":1,"leader_epoch":0,"in_sync_replicas":[1,5]}"#,
                0,
                "contain node-5",
            ),
            (
                br#"{"format":1,"replicas":[1,2],"leader":1,"leader_epoch":0,"in_sync_replicas":[1],"eligible_leader_replicas":[2,2]}"#,
                0,
                "eligible_leader_replicas [NodeId(2), NodeId(2)] repeat",
            ),
            (
                br#"{"format":1,"replicas":[1,2],"leader":1,"leader_epoch":0,"in_sync_replicas":[1],"eligible_leader_replicas":[1]}"#,
                0,
                "contain node-1, not one of the replicas",
            ),
            (
                br#"{"format":1,"replicas":[1,2],"leader":1,"leader_epoch":0,"in_sync_replicas":[1],"eligible_leader_replicas":[9]}"#,
                0,
                "contain node-9",
            ),
            (
                br#"{"format":1,"replicas":[1,2],"leader":1,"leader_epoch":0,"in_sync_replicas":[1],"unclean_replicas":[{"node":2,"last_epoch":null,"log_end_offset":0},{"node":2,"last_epoch":0,"log_end_offset":3}]}"#,
                0,
                "unclean_replicas [NodeId(2), NodeId(2)] repeat",
            ),
            (
                br#"{"format":1,"replicas":[1,2],"leader":1,"leader_epoch":0,"in_sync_replicas":[1],"unclean_replicas":[{"node":1,"last_epoch":null,"log_end_offset":0}]}"#,
                0,
                "unclean_replicas [NodeId(1)] contain node-1",
            ),
            (
                br#"{"format":1,"replicas":[1],"leader":1,"leader_epoch":-1,"in_sync_replicas":[1]}"#,
                0,
                "invalid value",
            ),
            (
                br#"{"format":1,"replicas":[1],"leader":1,"leader_epoch":0,"in_sync_replicas":[1]}"#,
                -1,
                "version -1",
            ),
        ];
        for (bytes, version, fragment) in cases {
            match decode_log(LogId(7), bytes, *version) {
                Err(Error::CoordinatorDocument { path, reason }) => {
                    assert_eq!(path, "/logs/7");
                    assert!(reason.contains(fragment), "{reason:?} lacks {fragment:?}");
                }
                other => panic!(
                    "{:?}: expected an error, got {other:?}",
                    String::from_utf8_lossy(bytes)
                ),
            }
        }
    }

    /// A newer version's fields (top-level and nested) are read, not an
    /// error, and reported so that no write drops them.
    #[test]
    fn a_log_document_with_unknown_fields_reads_and_names_them() {
        let newer = br#"{"format":1,"replicas":[1,2],"leader":1,"leader_epoch":0,"in_sync_replicas":[1],"unclean_replicas":[{"node":2,"last_epoch":null,"log_end_offset":0,"y":1}],"x":{"a":[1]}}"#;
        let (state, unknown) = decode_log(LogId(7), newer, 0).unwrap();
        assert_eq!(state.in_sync_replicas, vec![NodeId(1)]);
        assert_eq!(
            unknown,
            vec!["x".to_owned(), "unclean_replicas[0].y".to_owned()]
        );
        let error = refuse_unknown_fields("/logs/7", &unknown, "update log-7")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("/logs/7") && error.contains("x, unclean_replicas[0].y"),
            "{error}"
        );
        assert!(refuse_unknown_fields("/logs/7", &[], "update log-7").is_ok());
        // Encoding never writes what it did not know.
        assert!(!String::from_utf8(encode_log(&state)).unwrap().contains('x'));
    }

    #[test]
    fn controller_record_epoch_must_equal_its_base_plus_version() {
        let record = |epoch, controller, epoch_base| ControllerRecord {
            epoch: ControllerEpoch(epoch),
            controller,
            epoch_base,
            unknown: Extra::new(),
        };
        let none = Extra::new();
        let bytes = encode_controller(ControllerEpoch(3), Some(NodeId(2)), 0, &none);
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"format":1,"epoch":3,"controller":2}"#
        );
        assert_eq!(
            decode_controller(CONTROLLER_EPOCH, &bytes, 3).unwrap(),
            record(3, Some(NodeId(2)), 0)
        );
        let err = decode_controller(CONTROLLER_EPOCH, &bytes, 4).unwrap_err();
        assert!(
            err.to_string().contains("/controller_epoch")
                && err.to_string().contains("plus the znode's version 4"),
            "{err}"
        );
        let initial = encode_controller(ControllerEpoch(0), None, 0, &none);
        assert_eq!(
            decode_controller(CONTROLLER_EPOCH, &initial, 0).unwrap(),
            record(0, None, 0)
        );
        let moved = encode_controller(ControllerEpoch(500), None, 500, &none);
        assert_eq!(
            decode_controller(CONTROLLER_EPOCH, &moved, 0).unwrap(),
            record(500, None, 500)
        );
        let elected = encode_controller(ControllerEpoch(502), Some(NodeId(1)), 500, &none);
        assert_eq!(
            decode_controller(CONTROLLER_EPOCH, &elected, 2).unwrap(),
            record(502, Some(NodeId(1)), 500)
        );
        assert!(controller_epoch_floor(41) > 41);
        assert_eq!(controller_epoch_floor(-1), 1);
    }

    /// A newer version's fields in the two singleton counters are kept and
    /// written back unchanged (issue 24 review): refusing to write over
    /// them would stop every election or allocation of the cluster.
    #[test]
    fn singleton_documents_write_unknown_fields_back() {
        let newer = br#"{"format":1,"epoch":1,"controller":2,"term":{"a":[9]}}"#;
        let record = decode_controller(CONTROLLER_EPOCH, newer, 1).unwrap();
        assert_eq!(record.unknown.keys().collect::<Vec<_>>(), vec!["term"]);
        let next = encode_controller(ControllerEpoch(2), Some(NodeId(3)), 0, &record.unknown);
        assert_eq!(
            std::str::from_utf8(&next).unwrap(),
            r#"{"format":1,"epoch":2,"controller":3,"term":{"a":[9]}}"#
        );
        let newer = br#"{"format":1,"next_block_start":10,"owner":"x"}"#;
        let (start, unknown) = decode_producer_ids(newer).unwrap();
        assert_eq!(start, 10);
        assert_eq!(
            std::str::from_utf8(&encode_producer_ids(20, &unknown)).unwrap(),
            r#"{"format":1,"next_block_start":20,"owner":"x"}"#
        );
    }

    #[test]
    fn cluster_id_and_directories_round_trip() {
        let id = ClusterId(0x1234_5678);
        assert_eq!(decode_cluster_id(&encode_cluster_id(id)).unwrap(), id);
        let dirs = vec![
            (LogId(1), DirectoryId(7)),
            (LogId(9), DirectoryId(u128::MAX)),
        ];
        assert_eq!(
            decode_directories(NodeId(2), &encode_directories(&dirs)).unwrap(),
            (dirs, Vec::new())
        );
        let bad = br#"{"format":1,"replicas":{"3":"nope"}}"#;
        let error = decode_directories(NodeId(2), bad).unwrap_err().to_string();
        assert!(
            error.contains("/directories/2") && error.contains("log 3"),
            "{error}"
        );
        let empty = br#"{"format":1}"#;
        assert_eq!(
            decode_directories(NodeId(2), empty).unwrap(),
            (vec![], Vec::new())
        );
        let newer =
            br#"{"format":1,"replicas":{"3":"0000000000000000000000000000000a"},"tier":"ssd"}"#;
        let (placements, unknown) = decode_directories(NodeId(2), newer).unwrap();
        assert_eq!(placements, vec![(LogId(3), DirectoryId(10))]);
        assert_eq!(unknown, vec!["tier".to_owned()]);
    }

    #[test]
    fn producer_ids_round_trip_and_refuse_negative_starts() {
        let none = Extra::new();
        assert_eq!(
            decode_producer_ids(&encode_producer_ids(4000, &none)).unwrap(),
            (4000, Extra::new())
        );
        let err = decode_producer_ids(&encode_producer_ids(-5, &none)).unwrap_err();
        assert!(err.to_string().contains("negative"), "{err}");
    }

    #[test]
    fn paths_map_to_subjects() {
        assert_eq!(subject_of("/nodes"), Some(Subject::Membership));
        assert_eq!(subject_of("/nodes/3"), Some(Subject::Membership));
        assert_eq!(subject_of("/controller"), Some(Subject::Membership));
        assert_eq!(subject_of("/controller/seat"), Some(Subject::Membership));
        assert_eq!(subject_of("/controller_epoch"), Some(Subject::Membership));
        assert_eq!(subject_of("/logs/12"), Some(Subject::Log(LogId(12))));
        assert_eq!(subject_of("/logs/x"), None);
        assert_eq!(subject_of("/logs"), None);
        assert_eq!(subject_of("/producer_ids"), None);
        assert_eq!(node_path(NodeId(4)), "/nodes/4");
        assert_eq!(log_path(LogId(5)), "/logs/5");
    }
}
