//! Online reassignment of a log's replicas (SPEC 3.10, Kafka's KIP-455).
//!
//! This module owns the decisions: the update that starts (or replaces, or
//! cancels) a reassignment, the controller's update that completes one, and
//! the compare-and-set loops an admin call runs over any [`Coordinator`].
//! It does not move data: added replicas fetch as every follower does, and
//! join the ISR by rule 3.4; the node deletes a removed replica's copy once
//! the stored state no longer names it (see `Node`).
//!
//! The stored state is the whole truth of a move: `replicas` is target ∪
//! original, `adding_replicas` = target − original and `removing_replicas`
//! = original − target, so the target is `replicas − removing_replicas`
//! and the original `replicas − adding_replicas`. A controller that takes
//! over, or a node that restarts, reads the move from the state alone.

use super::{coordinator_error, first_duplicate, same_set, Assignment, CasOutcome, Coordinator};
use super::{LogState, LogUpdate};
use crate::error::{Error, Result};
use crate::types::{LogId, NodeId};

/// Compare-and-set attempts per log before an admin call gives up.
const ATTEMPTS_MAX: usize = 16;

/// A reassignment in progress, as the leader of its log sees it
/// ([`Node::reassignments`](crate::Node::reassignments)): what an
/// application exports as metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReassignmentProgress {
    /// The log.
    pub log: LogId,
    /// The replicas once the move completes.
    pub target_replicas: Vec<NodeId>,
    /// The replicas being added, each with how far it is behind.
    pub adding_replicas: Vec<AddingReplica>,
    /// The replicas being removed once every target replica is in sync.
    pub removing_replicas: Vec<NodeId>,
}

/// One replica a reassignment adds, as its log's leader sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddingReplica {
    /// The replica's node.
    pub node: NodeId,
    /// Whether it is in the ISR (then it waits only for the others).
    pub in_sync: bool,
    /// Records between its log end and the leader's, or `None` while it has
    /// not fetched in the leader's current epoch.
    pub lag_records: Option<u64>,
}

/// The update that moves `state` towards `target` (starting, replacing or,
/// with `target` = the original replicas, cancelling a reassignment), or
/// `None` when the state already has that target and nothing else to undo.
///
/// KIP-455 semantics: the original replicas stay those before the first
/// reassignment (a second one replaces the first rather than stacking on
/// it), replicas an earlier reassignment was adding and the new target
/// drops leave at once (with their ISR and ELR places), and the replicas
/// are written target first, then the original ones not in the target.
/// If the leader is among the ones leaving at once, the first replica of
/// the new list that is in the ISR and `live` leads, as Kafka's controller
/// elects on a cancellation. The leader epoch grows when the set of
/// replicas or the leader changes ([`LogState::validate_update`]).
///
/// Errs, naming the field and value, when `target` is empty, names a node
/// twice, has fewer than `min_insync_replicas` replicas (it could never
/// take an `acks=all` write), or adds a node that is not `live` (the
/// coordinator knows nodes only by their sessions: a node never started
/// cannot be told from a typo).
pub(crate) fn start_update(
    state: &LogState,
    target: &[NodeId],
    live: &[NodeId],
    min_insync_replicas: usize,
) -> Result<Option<LogUpdate>> {
    start_update_with(
        state,
        target,
        live,
        min_insync_replicas,
        min_insync_replicas,
    )
}

/// [`start_update`] with the two floors apart: `target_min`, the fewest
/// replicas the target may have (a cancellation lowers it to the original
/// replicas' number, which met the minimum when they were the log's), and
/// `holders_min`, the fewest ISR and ELR members a change that drops a
/// replica holding committed records must keep (never lowered: the
/// records acknowledged while the move ran were promised
/// `min_insync_replicas` copies; review of 845daec, finding 1).
fn start_update_with(
    state: &LogState,
    target: &[NodeId],
    live: &[NodeId],
    target_min: usize,
    holders_min: usize,
) -> Result<Option<LogUpdate>> {
    let log = state.log;
    if target.is_empty() {
        return Err(coordinator_error(format!(
            "cannot reassign {log}: target replicas is empty"
        )));
    }
    if let Some(node) = first_duplicate(target) {
        return Err(coordinator_error(format!(
            "cannot reassign {log}: target replicas {target:?} name {node} twice"
        )));
    }
    if target.len() < target_min {
        return Err(coordinator_error(format!(
            "cannot reassign {log}: target replicas {target:?} are {} replicas, fewer than min_insync_replicas {target_min}",
            target.len()
        )));
    }
    if let Some(node) = target
        .iter()
        .find(|node| !state.replicas.contains(node) && !live.contains(node))
    {
        return Err(coordinator_error(format!(
            "cannot reassign {log}: target replica {node} is not a live node (live: {live:?})"
        )));
    }
    let original = state.original_replicas();
    let replicas: Vec<NodeId> = target
        .iter()
        .copied()
        .chain(
            original
                .iter()
                .copied()
                .filter(|node| !target.contains(node)),
        )
        .collect();
    let adding_replicas: Vec<NodeId> = target
        .iter()
        .copied()
        .filter(|node| !original.contains(node))
        .collect();
    let removing_replicas: Vec<NodeId> = original
        .iter()
        .copied()
        .filter(|node| !target.contains(node))
        .collect();
    if replicas == state.replicas
        && adding_replicas == state.adding_replicas
        && removing_replicas == state.removing_replicas
    {
        return Ok(None);
    }
    let kept = |nodes: &[NodeId]| -> Vec<NodeId> {
        nodes
            .iter()
            .copied()
            .filter(|node| replicas.contains(node))
            .collect()
    };
    let in_sync_replicas = kept(&state.in_sync_replicas);
    let eligible_leader_replicas = kept(&state.eligible_leader_replicas);
    // A leaderless log's committed records may be held only by replicas
    // this update drops (the ones a move was adding, in its ISR, ELR or
    // unclean list when the others crashed): dropping them would leave
    // nobody to elect but a replica without those records, and their
    // copies would be deleted. Every ISR and ELR member holds them, so one
    // of those must stay; with both empty, the unclean replica with the
    // longest log (the one unclean recovery would elect, which holds them
    // all) must stay. Kafka's controller refuses a revert that would need
    // an unclean election; so does this.
    let isr_and_elr: Vec<NodeId> = state
        .in_sync_replicas
        .iter()
        .chain(&state.eligible_leader_replicas)
        .copied()
        .collect();
    if !isr_and_elr.is_empty() && !isr_and_elr.iter().any(|node| replicas.contains(node)) {
        return Err(coordinator_error(format!(
            "cannot reassign {log} to {target:?}: its committed records are held only by {isr_and_elr:?} (in_sync_replicas {:?}, eligible_leader_replicas {:?}), which the new replicas {replicas:?} drop; it would need an unclean election",
            state.in_sync_replicas, state.eligible_leader_replicas
        )));
    }
    // With the ISR and ELR empty, unclean recovery waits for the replicas
    // that may hold records no later member has: the reported longest log,
    // and any replica that has not reported (SPEC G1(c): it may have left
    // the ISR holding them). A move keeps every one of those; only a
    // replica that reported an empty log may go (not one whose end is not
    // known yet).
    if isr_and_elr.is_empty() {
        // Nor may it drop every replica of the unclean list, even ones that
        // reported an empty log: the list is what keeps the log in unclean
        // recovery, where the replicas that come back report and the
        // longest is elected. Emptied, the log has a leader, ISR, ELR and
        // list all empty, a state no rule elects from (simulator seed
        // 20019365: a cancel dropped the one replica left, which had
        // reported empty; the log stayed leaderless while a replica holding
        // every record was live).
        if !state.unclean_replicas.is_empty()
            && !state
                .unclean_replicas
                .iter()
                .any(|reported| replicas.contains(&reported.node))
        {
            return Err(coordinator_error(format!(
                "cannot reassign {log} to {target:?}: it has no leader, ISR or ELR member, and the new replicas {replicas:?} drop every replica of its unclean recovery (unclean replicas {:?}), which would leave nobody it could elect; retry once it has a leader",
                state.unclean_replicas
            )));
        }
        let reported_empty = |node: &NodeId| {
            state
                .unclean_replicas
                .iter()
                .any(|r| r.node == *node && r.reported_empty())
        };
        if let Some(node) = state
            .replicas
            .iter()
            .find(|node| !replicas.contains(node) && !reported_empty(node))
        {
            return Err(coordinator_error(format!(
                "cannot reassign {log} to {target:?}: it has no ISR or ELR member, and {node}, which the new replicas {replicas:?} drop, may hold committed records (unclean replicas {:?}); it would need an unclean election",
                state.unclean_replicas
            )));
        }
    }
    // Dropping ISR members (a cancellation or a new target that leaves out
    // replicas a move was adding) must not leave the records committed
    // with them on fewer than `min_insync_replicas` replicas: those added
    // replicas may be the only other copies of records committed since the
    // original ones left the ISR, and the "last member stays" rule would
    // then let the one left lead with whatever it keeps after a power loss
    // (review of the controller, finding 2). Kafka's revert has no such
    // check; SPEC G1 is stronger.
    // ELR members count too: a replica the move was adding that left an
    // ISR fallen below the minimum holds those records as well (review of
    // this check, finding 2).
    // Dropping a replica of the unclean list that may hold records counts
    // the same: each left the ISR or ELR only because its node restarted
    // uncleanly, and may be the one whose copy survives (the ELR member
    // kept instead may have lost its disk without the coordinator knowing
    // yet: simulator seed 60044893, where a cancellation dropped the added
    // replica that had led alone and then restarted uncleanly, the only
    // one left holding records acknowledged up to 559, and a replica cut
    // off at 461 was elected). Only ISR and ELR members count among the
    // holders kept: an unclean one lacks whatever was committed after it
    // left (seed 60050634: counting one that left at 927 let a
    // cancellation drop the only ISR member besides the leader, which
    // then lost its disk, with 993 acknowledged).
    let may_hold_records = |node: &NodeId| {
        state.is_in_sync(*node)
            || state.is_eligible(*node)
            || state
                .unclean_replicas
                .iter()
                .any(|r| r.node == *node && !r.reported_empty())
    };
    let dropped: Vec<NodeId> = state
        .replicas
        .iter()
        .copied()
        .filter(|node| may_hold_records(node) && !replicas.contains(node))
        .collect();
    let holders_kept: Vec<NodeId> = in_sync_replicas
        .iter()
        .chain(&eligible_leader_replicas)
        .copied()
        .collect();
    if !dropped.is_empty() && holders_kept.len() < holders_min {
        return Err(coordinator_error(format!(
            "cannot reassign {log} to {target:?}: it drops {dropped:?}, which may hold committed records (in_sync_replicas {:?}, eligible_leader_replicas {:?}, unclean replicas {:?}), leaving them on {holders_kept:?}, fewer than min_insync_replicas {holders_min}: records committed with them would keep fewer copies than an acks=all write promised; retry once more of the remaining replicas are back in the ISR, or choose a target that keeps {dropped:?}",
            state.in_sync_replicas, state.eligible_leader_replicas, state.unclean_replicas
        )));
    }
    let leader = match state.leader {
        Some(leader) if replicas.contains(&leader) => Some(leader),
        None => None,
        Some(leader) => {
            let successor = replicas
                .iter()
                .copied()
                .find(|node| in_sync_replicas.contains(node) && live.contains(node));
            if successor.is_none() {
                return Err(coordinator_error(format!(
                    "cannot reassign {log}: its leader {leader} would leave, and no replica of {replicas:?} is in in_sync_replicas {in_sync_replicas:?} and live"
                )));
            }
            successor
        }
    };
    let leader_epoch = if leader != state.leader || !same_set(&replicas, &state.replicas) {
        state.leader_epoch.next()
    } else {
        state.leader_epoch
    };
    let update = LogUpdate {
        leader,
        leader_epoch,
        eligible_leader_replicas,
        in_sync_replicas,
        unclean_report: None,
        assignment: Some(Assignment {
            replicas,
            adding_replicas,
            removing_replicas,
        }),
    };
    debug_assert!(state.validate_update(&update).is_ok(), "{update:?}");
    Ok(Some(update))
}

/// The controller's update that completes `state`'s reassignment, or
/// `None` while it cannot: no reassignment runs, some target replica is not
/// in the ISR yet, or the log has no leader (an election comes first).
///
/// It writes replicas = target and removes the others from the ISR and the
/// ELR (SPEC 3.10). A leader being removed first hands its leadership to a
/// caught-up target replica itself, as in a controlled shutdown (the
/// node's reassignment hand-over): until `hand_over_waited`, a live leader
/// being removed makes this wait. After that (or with the leader dead),
/// the same write names the first target replica in assignment order that
/// is `live` (every target replica is in the ISR, so each holds every
/// committed record), as Kafka's controller does: the log is never without
/// a leader. With none live it waits. The ELR follows the new ISR
/// ([`LogState::eligible_leader_replicas_after`]).
pub(crate) fn completion_update(
    state: &LogState,
    live: &[NodeId],
    min_insync_replicas: usize,
    hand_over_waited: bool,
) -> Option<LogUpdate> {
    if !state.is_reassigning() {
        return None;
    }
    let target = state.target_replicas();
    if !target.iter().all(|node| state.is_in_sync(*node)) {
        return None;
    }
    let current = state.leader?;
    let leader = if target.contains(&current) {
        current
    } else if !hand_over_waited && live.contains(&current) {
        return None;
    } else {
        target.iter().copied().find(|node| live.contains(node))?
    };
    let in_sync_replicas: Vec<NodeId> = state
        .in_sync_replicas
        .iter()
        .copied()
        .filter(|node| target.contains(node))
        .collect();
    let eligible_leader_replicas = state
        .eligible_leader_replicas_after(&in_sync_replicas, min_insync_replicas)
        .into_iter()
        .filter(|node| target.contains(node))
        .collect();
    let leader_epoch = if leader != current || !same_set(&target, &state.replicas) {
        state.leader_epoch.next()
    } else {
        state.leader_epoch
    };
    let update = LogUpdate {
        leader: Some(leader),
        leader_epoch,
        in_sync_replicas,
        eligible_leader_replicas,
        unclean_report: None,
        assignment: Some(Assignment {
            replicas: target,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }),
    };
    debug_assert!(state.validate_update(&update).is_ok(), "{update:?}");
    Some(update)
}

/// Starts (or replaces) the reassignment of `log` to `target` and returns
/// the stored state; see [`start_update`] for the rules. A compare-and-set
/// loop: a lost race decides again from what the winner stored; a write
/// whose answer was lost is settled by a read (SPEC 3.4).
pub(crate) fn reassign_log(
    coordinator: &dyn Coordinator,
    log: LogId,
    target: &[NodeId],
    min_insync_replicas: usize,
) -> Result<LogState> {
    write_with(coordinator, log, |state, live| {
        start_update(state, target, live, min_insync_replicas)
    })
}

/// Cancels `log`'s reassignment, if one runs: back to the original
/// replicas (the added ones leave, nothing of the original set was removed
/// yet) and returns the stored state.
pub(crate) fn cancel_reassignment(
    coordinator: &dyn Coordinator,
    log: LogId,
    min_insync_replicas: usize,
) -> Result<LogState> {
    write_with(coordinator, log, |state, live| {
        if !state.is_reassigning() {
            return Ok(None);
        }
        // The original replicas met the minimum when they were the log's.
        let original = state.original_replicas();
        start_update_with(
            state,
            &original,
            live,
            min_insync_replicas.min(original.len()),
            min_insync_replicas,
        )
    })
}

/// Reassigns every log that has `dead` as a replica (in its target, when
/// one runs) to the same replicas with `replacement` in `dead`'s place, and
/// returns the stored states. A log that already has `replacement` among
/// its target replicas cannot take it twice: `dead` just leaves it (one
/// replica fewer; refused below `min_insync_replicas`). A log whose
/// reassignment is refused or fails (`replacement` not live, a coordinator
/// error, too few replicas left) does not stop the others: each of those
/// is moved, then the call errs naming every log it could not move and
/// why. Calling it again retries just those (the moved ones no longer have
/// `dead` in their target).
pub(crate) fn replace_node(
    coordinator: &dyn Coordinator,
    dead: NodeId,
    replacement: NodeId,
    min_insync_replicas: usize,
) -> Result<Vec<LogState>> {
    if dead == replacement {
        return Err(coordinator_error(format!(
            "cannot replace node {dead} with itself"
        )));
    }
    let mut reassigned = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    for state in coordinator.logs()? {
        let target = state.target_replicas();
        if !target.contains(&dead) {
            continue;
        }
        // A log that already has `replacement` loses `dead` only (one
        // replica fewer): `replacement` cannot hold two copies.
        let target: Vec<NodeId> = if target.contains(&replacement) {
            tracing::warn!(log = %state.log, %dead, %replacement, ?target,
                "the replacement is already a replica of this log: dropping the dead node only");
            target
                .iter()
                .copied()
                .filter(|node| *node != dead)
                .collect()
        } else {
            target
                .iter()
                .map(|node| if *node == dead { replacement } else { *node })
                .collect()
        };
        match reassign_log(coordinator, state.log, &target, min_insync_replicas) {
            Ok(stored) => reassigned.push(stored),
            Err(error) => refused.push(format!("{}: {error}", state.log)),
        }
    }
    tracing::info!(%dead, %replacement, logs = reassigned.len(), refused = refused.len(),
        "replacing a node in every log it held");
    if !refused.is_empty() {
        let moved: Vec<LogId> = reassigned.iter().map(|state| state.log).collect();
        return Err(coordinator_error(format!(
            "replaced node {dead} with {replacement} in {moved:?}, but not in {} log(s): {}",
            refused.len(),
            refused.join("; ")
        )));
    }
    Ok(reassigned)
}

/// Writes `decide`'s update of `log` by compare-and-set until it is stored
/// or `decide` has nothing to write; returns the stored state.
fn write_with(
    coordinator: &dyn Coordinator,
    log: LogId,
    decide: impl Fn(&LogState, &[NodeId]) -> Result<Option<LogUpdate>>,
) -> Result<LogState> {
    let mut state = coordinator.log_state(log)?.ok_or(Error::UnknownLog(log))?;
    for _ in 0..ATTEMPTS_MAX {
        let live = coordinator.live_nodes()?;
        let Some(update) = decide(&state, &live)? else {
            return Ok(state);
        };
        match coordinator.compare_and_set(log, state.leader_epoch, state.version, update.clone()) {
            Ok(CasOutcome::Applied(stored)) => {
                tracing::info!(%log, replicas = ?stored.replicas, adding = ?stored.adding_replicas,
                    removing = ?stored.removing_replicas, epoch = %stored.leader_epoch,
                    "reassignment written");
                return Ok(stored);
            }
            Ok(CasOutcome::Stale(current)) => state = current,
            Err(error) if error.is_outcome_unknown() => {
                tracing::warn!(%log, %error, "reassignment write outcome unknown; re-reading the log");
                let stored = coordinator.log_state(log)?.ok_or(Error::UnknownLog(log))?;
                if stored.is_result_of(&state, &update) {
                    return Ok(stored);
                }
                state = stored;
            }
            Err(error) => return Err(error),
        }
    }
    Err(coordinator_error(format!(
        "cannot reassign {log}: {ATTEMPTS_MAX} compare-and-set attempts lost races"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LeaderEpoch;
    use std::sync::Arc;

    fn nodes(ids: &[u32]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    fn state(replicas: &[u32], isr: &[u32], leader: u32) -> LogState {
        let mut state = LogState::initial(LogId(1), nodes(replicas)).unwrap();
        state.in_sync_replicas = nodes(isr);
        state.leader = Some(NodeId(leader));
        state.leader_epoch = LeaderEpoch(3);
        state
    }

    fn started(state: &LogState, target: &[u32], live: &[u32]) -> LogState {
        let update = start_update(state, &nodes(target), &nodes(live), 2)
            .unwrap()
            .unwrap();
        state.validate_update(&update).unwrap();
        state.with_update(update)
    }

    /// Review of the controller, finding 2: original [0, 1], target
    /// [0, 2, 3]; 2 caught up and 1 fell behind, so records were committed
    /// with ISR {0, 2}. Cancelling would drop 2 and leave them on 0 alone:
    /// refused while that leaves the ISR below `min_insync_replicas`,
    /// allowed once 1 is back in it.
    #[test]
    fn a_change_that_drops_isr_members_below_min_insync_replicas_is_refused() {
        let s = state(&[0, 1], &[0, 1], 0);
        let mut moving = started(&s, &[0, 2, 3], &[0, 1, 2, 3]);
        moving.in_sync_replicas = nodes(&[0, 2]);
        let live = nodes(&[0, 1, 2, 3]);
        let error = start_update(&moving, &nodes(&[0, 1]), &live, 2).unwrap_err();
        assert!(
            error.to_string().contains("drops [NodeId(2)]")
                && error.to_string().contains("min_insync_replicas 2"),
            "{error}"
        );
        // The same with 2 in the ELR (it left an ISR fallen below the
        // minimum): it holds them too.
        moving.in_sync_replicas = nodes(&[0]);
        moving.eligible_leader_replicas = nodes(&[2]);
        let error = start_update(&moving, &nodes(&[0, 1]), &live, 2).unwrap_err();
        assert!(error.to_string().contains("drops [NodeId(2)]"), "{error}");
        moving.eligible_leader_replicas = Vec::new();
        moving.in_sync_replicas = nodes(&[0, 2, 1]);
        let cancelled = start_update(&moving, &nodes(&[0, 1]), &live, 2)
            .unwrap()
            .unwrap();
        assert_eq!(cancelled.in_sync_replicas, nodes(&[0, 1]));
    }

    /// Review of 714b35d: a move {0,1,2} -> {3,4,5} whose old replicas
    /// crashed left the committed records on 3 and 4 only, then the log
    /// lost its leader. Cancelling (or replacing the move by one without
    /// 3 and 4) would drop every replica holding them.
    #[test]
    fn a_change_that_drops_every_holder_of_a_leaderless_log_is_refused() {
        let s = state(&[0, 1, 2], &[0, 1, 2], 0);
        let mut moving = started(&s, &[3, 4, 5], &[0, 1, 2, 3, 4, 5]);
        moving.leader = None;
        moving.in_sync_replicas = nodes(&[4]);
        moving.eligible_leader_replicas = nodes(&[3]);
        let live = nodes(&[0, 1, 2, 3, 4, 5]);
        for target in [&[0, 1, 2][..], &[0, 1, 5][..]] {
            let error = start_update(&moving, &nodes(target), &live, 2).unwrap_err();
            assert!(
                error.to_string().contains("held only by")
                    && error.to_string().contains("unclean election"),
                "{target:?}: {error}"
            );
        }
        // Keeping one holder could elect it, but leaves the records on
        // fewer than min_insync_replicas replicas: refused too (review of
        // 963c9a9, finding 2). Keeping both is allowed.
        let error = start_update(&moving, &nodes(&[0, 1, 4]), &live, 2).unwrap_err();
        assert!(error.to_string().contains("drops [NodeId(3)]"), "{error}");
        let kept = start_update(&moving, &nodes(&[0, 3, 4]), &live, 2)
            .unwrap()
            .unwrap();
        assert_eq!(kept.in_sync_replicas, nodes(&[4]));
        assert_eq!(kept.eligible_leader_replicas, nodes(&[3]));
        // ISR and ELR empty, in unclean recovery: the replica with the
        // longest log must stay, even when a shorter one does (review of
        // 5683f2c: keeping 0, with 5 records, lost 3's 100).
        let unclean_at = |node: u32, end: u64| crate::coordinator::UncleanReplica {
            node: NodeId(node),
            acknowledged_end: None,
            log_end: Some(crate::coordinator::LogEnd {
                last_epoch: Some(LeaderEpoch(3)),
                log_end_offset: crate::types::Offset(end),
                ..Default::default()
            }),
        };
        let mut unclean = moving.clone();
        unclean.in_sync_replicas.clear();
        unclean.eligible_leader_replicas.clear();
        unclean.unclean_replicas = vec![unclean_at(3, 100), unclean_at(0, 5)];
        assert_eq!(unclean.recovery_leader().map(|r| r.node), Some(NodeId(3)));
        let error = start_update(&unclean, &nodes(&[0, 1, 2]), &live, 2).unwrap_err();
        assert!(
            error.to_string().contains("may hold committed records"),
            "{error}"
        );
        // Nor may a replica that has not reported go (review of fa7cb9a:
        // unclean recovery waits for it too): 4 and 5 here.
        assert!(start_update(&unclean, &nodes(&[0, 1, 3]), &live, 2).is_err());
        // Keeping every replica is allowed; so is dropping one that
        // reported an empty log.
        assert!(start_update(&unclean, &nodes(&[0, 1, 2, 3, 4, 5]), &live, 2).is_ok());
        let mut reported = unclean.clone();
        reported.unclean_replicas = vec![
            unclean_at(3, 100),
            unclean_at(0, 5),
            crate::coordinator::UncleanReplica {
                node: NodeId(1),
                acknowledged_end: None,
                log_end: Some(crate::coordinator::LogEnd {
                    last_epoch: None,
                    log_end_offset: crate::types::Offset(0),
                    ..Default::default()
                }),
            },
        ];
        assert!(reported.unclean_replicas[2].reported_empty());
        assert!(start_update(&reported, &nodes(&[0, 2, 3, 4, 5]), &live, 2).is_ok());
        // An added replica that reported an empty log may go (5 here); not
        // one whose end is not known yet: it may hold the most.
        let mut empty_5 = reported.clone();
        empty_5.unclean_replicas[2].node = NodeId(5);
        empty_5.check_invariants();
        assert!(start_update(&empty_5, &nodes(&[0, 1, 2, 3, 4]), &live, 2).is_ok());
        let mut unknown_5 = empty_5.clone();
        unknown_5.unclean_replicas[2].log_end = None;
        let error = start_update(&unknown_5, &nodes(&[0, 1, 2, 3, 4]), &live, 2).unwrap_err();
        assert!(error.to_string().contains("node-5"), "{error}");
        // With the ELR holding 3 and an unclean 0, keeping only 0 is
        // refused too: the ELR member holds what 0 may have lost.
        let mut elr = moving.clone();
        elr.in_sync_replicas.clear();
        elr.eligible_leader_replicas = nodes(&[3]);
        elr.unclean_replicas = vec![unclean_at(0, 5)];
        assert!(start_update(&elr, &nodes(&[0, 1, 2]), &live, 2).is_err());
        // Every replica of the unclean list reported an empty log (5 here):
        // one must stay all the same, or no rule elects a leader any more
        // (simulator seed 20019365).
        let mut only_empty = empty_5.clone();
        only_empty.unclean_replicas = vec![only_empty.unclean_replicas[2].clone()];
        let error = start_update(&only_empty, &nodes(&[0, 1, 2, 3, 4]), &live, 2).unwrap_err();
        assert!(
            error.to_string().contains("nobody it could elect"),
            "{error}"
        );
    }

    /// Simulator seed 60044893: a move from [1, 2] added 0, which then led
    /// alone (ISR [0], ELR [2]) and restarted uncleanly, holding every
    /// acknowledged record; 2 had lost its disk, unknown to the
    /// coordinator. Cancelling dropped 0, the unclean list's only holder,
    /// since it was no longer in the ISR or ELR: refused now, as dropping
    /// an ISR or ELR member below `min_insync_replicas` is. With a second
    /// holder kept, or with 0 reported empty, it may go.
    #[test]
    fn a_change_that_drops_an_unclean_holder_below_min_insync_replicas_is_refused() {
        let s = state(&[1, 2], &[1, 2], 1);
        let mut moving = started(&s, &[1, 2, 0], &[0, 1, 2]);
        moving.leader = None;
        moving.in_sync_replicas.clear();
        moving.eligible_leader_replicas = nodes(&[2]);
        let reported_end = |end: u64| crate::coordinator::UncleanReplica {
            node: NodeId(0),
            acknowledged_end: None,
            log_end: Some(crate::coordinator::LogEnd {
                last_epoch: (end > 0).then_some(LeaderEpoch(3)),
                log_end_offset: crate::types::Offset(end),
                ..Default::default()
            }),
        };
        moving.unclean_replicas = vec![reported_end(559)];
        moving.check_invariants();
        let live = nodes(&[0, 1, 2]);
        let error = start_update(&moving, &nodes(&[1, 2]), &live, 2).unwrap_err();
        assert!(
            error.to_string().contains("drops [NodeId(0)]")
                && error.to_string().contains("min_insync_replicas 2"),
            "{error}"
        );
        let mut two_eligible = moving.clone();
        two_eligible.eligible_leader_replicas = nodes(&[1, 2]);
        assert!(start_update(&two_eligible, &nodes(&[1, 2]), &live, 2).is_ok());
        let mut empty = moving.clone();
        empty.unclean_replicas = vec![reported_end(0)];
        assert!(start_update(&empty, &nodes(&[1, 2]), &live, 2).is_ok());
        // Seed 60050634: an unclean replica kept is no holder, since it
        // lacks what was committed after it left. Dropping the ISR member
        // 1 that the move was adding leaves ISR [0] and the unclean 2:
        // refused.
        let s = state(&[2, 0], &[2, 0], 0);
        let mut adding = started(&s, &[2, 1, 0], &[0, 1, 2]);
        adding.in_sync_replicas = nodes(&[0, 1]);
        adding.unclean_replicas = vec![crate::coordinator::UncleanReplica {
            node: NodeId(2),
            acknowledged_end: None,
            ..reported_end(927)
        }];
        adding.check_invariants();
        let error = start_update(&adding, &nodes(&[2, 0]), &live, 2).unwrap_err();
        assert!(error.to_string().contains("drops [NodeId(1)]"), "{error}");
    }

    /// Review of 845daec, finding 1: a log of one replica [0] moving to
    /// [0, 1] took acks=all writes with ISR [0, 1]. Its cancellation may
    /// have a target of one replica, but may not drop 1 and leave those
    /// records on 0 alone; once 1 is out of the ISR and ELR it may.
    #[test]
    fn a_cancellation_keeps_min_insync_replicas_holders_though_its_target_may_be_smaller() {
        use crate::coordinator::MemoryCoordinator;
        use std::time::Duration;
        let coordinator = MemoryCoordinator::new(Arc::new(crate::clock::SystemClock));
        for node in [0, 1] {
            coordinator
                .register_node(NodeId(node), Duration::from_secs(60))
                .unwrap();
        }
        coordinator.create_log(LogId(1), nodes(&[0])).unwrap();
        reassign_log(&coordinator, LogId(1), &nodes(&[0, 1]), 1).unwrap();
        let set_isr = |isr: &[u32]| {
            let stored = coordinator.log_state(LogId(1)).unwrap().unwrap();
            let update = LogUpdate {
                leader: stored.leader,
                leader_epoch: stored.leader_epoch,
                in_sync_replicas: nodes(isr),
                eligible_leader_replicas: Vec::new(),
                unclean_report: None,
                assignment: None,
            };
            let outcome = coordinator
                .compare_and_set(LogId(1), stored.leader_epoch, stored.version, update)
                .unwrap();
            assert!(matches!(outcome, CasOutcome::Applied(_)), "{outcome:?}");
        };
        set_isr(&[0, 1]);
        let error = cancel_reassignment(&coordinator, LogId(1), 2).unwrap_err();
        assert!(
            error.to_string().contains("drops [NodeId(1)]")
                && error.to_string().contains("min_insync_replicas 2"),
            "{error}"
        );
        set_isr(&[0]);
        let cancelled = cancel_reassignment(&coordinator, LogId(1), 2).unwrap();
        assert_eq!(cancelled.replicas, nodes(&[0]));
    }

    /// Review of 714b35d: `replace_node` stopped at the first log it could
    /// not move, and the same log came first on every retry, so the others
    /// were never moved.
    #[test]
    fn replace_node_moves_every_log_and_shrinks_one_that_holds_the_replacement() {
        use crate::coordinator::MemoryCoordinator;
        use std::time::Duration;
        let coordinator = MemoryCoordinator::new(Arc::new(crate::clock::SystemClock));
        for node in 0..4 {
            coordinator
                .register_node(NodeId(node), Duration::from_secs(60))
                .unwrap();
        }
        coordinator.create_log(LogId(1), nodes(&[0, 1, 3])).unwrap();
        coordinator.create_log(LogId(2), nodes(&[0, 1, 2])).unwrap();
        let moved = replace_node(&coordinator, NodeId(0), NodeId(3), 2).unwrap();
        assert_eq!(
            moved.iter().map(|s| s.log).collect::<Vec<_>>(),
            vec![LogId(1), LogId(2)]
        );
        let moved = coordinator.log_state(LogId(2)).unwrap().unwrap();
        assert_eq!(moved.target_replicas(), nodes(&[3, 1, 2]));
        // Log 1 held 3 already: node 0 just leaves it.
        let shrunk = coordinator.log_state(LogId(1)).unwrap().unwrap();
        assert_eq!(shrunk.target_replicas(), nodes(&[1, 3]));
    }

    #[test]
    fn start_writes_target_then_original_and_bumps_the_epoch_on_a_new_set() {
        let s = state(&[1, 2, 3], &[1, 2, 3], 1);
        let moved = started(&s, &[4, 2, 3], &[1, 2, 3, 4]);
        assert_eq!(moved.replicas, nodes(&[4, 2, 3, 1]));
        assert_eq!(moved.adding_replicas, nodes(&[4]));
        assert_eq!(moved.removing_replicas, nodes(&[1]));
        assert_eq!(moved.target_replicas(), nodes(&[4, 2, 3]));
        assert_eq!(moved.original_replicas(), nodes(&[2, 3, 1]));
        assert_eq!(moved.leader, Some(NodeId(1)));
        assert_eq!(moved.leader_epoch, LeaderEpoch(4));
        // A shrink only marks the removed replica: same set, same epoch.
        let shrunk = started(&s, &[1, 2], &[1, 2, 3]);
        assert_eq!(shrunk.replicas, nodes(&[1, 2, 3]));
        assert_eq!(shrunk.removing_replicas, nodes(&[3]));
        assert_eq!(shrunk.leader_epoch, LeaderEpoch(3));
    }

    #[test]
    fn a_second_reassignment_replaces_the_first_and_cancel_restores_the_original() {
        let s = state(&[1, 2, 3], &[1, 2, 3], 1);
        let first = started(&s, &[1, 2, 4], &[1, 2, 3, 4, 5]);
        let mut first = first;
        first.in_sync_replicas = nodes(&[1, 2, 3, 4]);
        let second = started(&first, &[1, 2, 5], &[1, 2, 3, 4, 5]);
        assert_eq!(second.replicas, nodes(&[1, 2, 5, 3]));
        assert_eq!(second.adding_replicas, nodes(&[5]));
        assert_eq!(second.removing_replicas, nodes(&[3]));
        assert_eq!(second.in_sync_replicas, nodes(&[1, 2, 3]));
        let original: Vec<u32> = second.original_replicas().iter().map(|n| n.0).collect();
        assert_eq!(original, vec![1, 2, 3]);
        let cancelled = started(&second, &original, &[1, 2, 3]);
        assert_eq!(cancelled.replicas, nodes(&[1, 2, 3]));
        assert!(!cancelled.is_reassigning());
        // Nothing left to undo: no write.
        assert_eq!(
            start_update(&cancelled, &nodes(&[1, 2, 3]), &nodes(&[1]), 2).unwrap(),
            None
        );
    }

    #[test]
    fn start_refuses_bad_targets_naming_the_field_and_value() {
        let s = state(&[1, 2, 3], &[1, 2, 3], 1);
        let cases: &[(&[u32], &str)] = &[
            (&[], "target replicas is empty"),
            (&[1, 2, 2], "name node-2 twice"),
            (&[1], "fewer than min_insync_replicas 2"),
            (&[1, 2, 9], "target replica node-9 is not a live node"),
        ];
        for (target, fragment) in cases {
            let error = start_update(&s, &nodes(target), &nodes(&[1, 2, 3]), 2).unwrap_err();
            assert!(
                error.to_string().contains(fragment),
                "{target:?}: {error} lacks {fragment:?}"
            );
        }
    }

    #[test]
    fn completion_waits_for_every_target_replica_in_the_isr() {
        let s = state(&[1, 2, 3], &[1, 2, 3], 1);
        let moving = started(&s, &[4, 2, 3], &[1, 2, 3, 4]);
        assert_eq!(
            completion_update(&moving, &nodes(&[1, 2, 3, 4]), 2, true),
            None
        );
        let mut caught_up = moving.clone();
        caught_up.in_sync_replicas = nodes(&[1, 2, 3, 4]);
        // A live leader being removed hands over itself first.
        assert_eq!(
            completion_update(&caught_up, &nodes(&[1, 2, 3, 4]), 2, false),
            None
        );
        let update = completion_update(&caught_up, &nodes(&[1, 2, 3, 4]), 2, true).unwrap();
        let done = caught_up.with_update(update);
        assert_eq!(done.replicas, nodes(&[4, 2, 3]));
        assert_eq!(done.in_sync_replicas, nodes(&[2, 3, 4]));
        // The leader was being removed: the first live target replica leads,
        // in the same write, in a new epoch.
        assert_eq!(done.leader, Some(NodeId(4)));
        assert_eq!(done.leader_epoch, caught_up.leader_epoch.next());
        assert!(!done.is_reassigning());
        // With no target replica live, it waits.
        assert_eq!(completion_update(&caught_up, &nodes(&[1]), 2, true), None);
    }

    #[test]
    fn a_growth_completes_without_a_new_epoch() {
        let s = state(&[1, 2, 3], &[1, 2, 3], 1);
        let mut growing = started(&s, &[1, 2, 3, 4, 5], &[1, 2, 3, 4, 5]);
        growing.in_sync_replicas = nodes(&[1, 2, 3, 4, 5]);
        let update = completion_update(&growing, &nodes(&[1, 2, 3, 4, 5]), 2, false).unwrap();
        assert_eq!(update.leader_epoch, growing.leader_epoch);
        let done = growing.with_update(update);
        assert_eq!(done.replicas, nodes(&[1, 2, 3, 4, 5]));
        assert!(!done.is_reassigning());
    }

    #[test]
    fn an_assignment_change_of_the_replica_set_must_raise_the_epoch() {
        let s = state(&[1, 2, 3], &[1, 2, 3], 1);
        let mut update = start_update(&s, &nodes(&[1, 2, 4]), &nodes(&[1, 2, 3, 4]), 2)
            .unwrap()
            .unwrap();
        update.leader_epoch = s.leader_epoch;
        let error = s.validate_update(&update).unwrap_err();
        assert!(error.to_string().contains("leader_epoch stays"), "{error}");
    }
}
