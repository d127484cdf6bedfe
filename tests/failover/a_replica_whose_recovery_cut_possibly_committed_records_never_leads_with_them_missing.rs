//! SPEC 2.3 with 3.5 (review of c6bd2e8, finding 1): a node back from an
//! unclean stop whose recovery cut records that may have been committed
//! (damage above the recovery point with valid batches after it: a power
//! loss during a roll's background flush) reports that replica with its log
//! end not known, and its end after the cut once it opens with the cut,
//! which it does only once that report is stored. The coordinator keeps a reporting
//! replica that is the last ISR member and has a non-empty log end; had it
//! reported the end after the cut, it would have stayed the only ISR member
//! and led with records missing, and the others, which hold them, would
//! have truncated them away on their return. It leaves the ISR instead,
//! the log waits for unclean recovery, the replicas that hold every record
//! lead, and nothing acknowledged is lost.
//!
//! The cut reaches the disk only once the coordinator holds that report
//! (review of 0379721): cut first, a start that failed before its report
//! left a consistent log that the next start reported with its end after
//! the cut; and a report that waits for a document this node cannot read
//! yet carries no end, not the end after a cut.

use std::time::Duration;

use std::path::{Path, PathBuf};

use isrlog::testing::{Cluster, Lose, SessionEnd};
use isrlog::{
    Acks, Coordinator, LogConfig, LogId, NodeId, Offset, PreviousShutdown, ReplicationConfig,
};

use crate::failover_support::committed_values;

const LOG: LogId = LogId(1);
const RECORDS: usize = 100;
const WAIT: Duration = Duration::from_secs(20);

/// A cluster whose log's only ISR member, `victim`, lost power with its
/// checkpoint gone and its second segment torn, valid batches after it;
/// the other replicas are down and hold every acknowledged record.
struct Damaged {
    cluster: Cluster,
    victim: NodeId,
    others: Vec<NodeId>,
    acknowledged: Vec<String>,
    dir: PathBuf,
    /// The torn segment and its length after the tear.
    torn: (PathBuf, u64),
}

fn damaged() -> Damaged {
    let cluster = Cluster::builder()
        .nodes(3)
        .replication(ReplicationConfig {
            min_insync_replicas: 1,
            replica_lag_time_max: Duration::from_secs(1),
            ..ReplicationConfig::default()
        })
        .log_config(LogConfig {
            segment_bytes_max: 1024,
            ..LogConfig::default()
        })
        .session_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let mut acknowledged = Vec::new();
    for i in 0..RECORDS {
        let value = format!("record-{i:03}");
        leader
            .append_values(&[value.as_bytes()], Acks::All)
            .unwrap();
        acknowledged.push(value);
    }
    drop(leader);
    let victim = cluster.leader_of(LOG).unwrap();
    let others: Vec<NodeId> = cluster
        .node_ids()
        .into_iter()
        .filter(|n| *n != victim)
        .collect();
    // The others go down: the victim is left the only ISR member (with
    // `min_insync_replicas` 1 nobody joins the ELR).
    for node in &others {
        cluster.crash_with(*node, Lose::Nothing, SessionEnd::Immediately);
    }
    assert!(
        cluster.wait_until(WAIT, |c| c.in_sync_replicas(LOG) == vec![victim]),
        "ISR {:?}",
        cluster.in_sync_replicas(LOG)
    );

    // The victim loses power: its checkpoint is gone (every record may
    // have been committed) and its second segment is torn, with valid
    // batches in the segments after it.
    cluster.crash_with(victim, Lose::Nothing, SessionEnd::Immediately);
    let dir = cluster.node_dir(victim).join(format!("log-{}", LOG.0));
    std::fs::remove_file(dir.join("log-state.checkpoint")).unwrap();
    let segments = segment_files(&dir);
    assert!(segments.len() >= 4, "segments: {segments:?}");
    let torn = &segments[1];
    let length = std::fs::metadata(torn).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(torn)
        .unwrap()
        .set_len(length - 1)
        .unwrap();
    let torn = (torn.clone(), length - 1);
    Damaged {
        cluster,
        victim,
        others,
        acknowledged,
        dir,
        torn,
    }
}

/// The log's segment files, in offset order.
fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut segments: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segments.sort();
    segments
}

/// Asserts that the damage is still on disk: nothing was cut yet.
fn assert_not_cut(damaged: &Damaged, segments: &[PathBuf]) {
    let (torn, length) = &damaged.torn;
    assert_eq!(
        std::fs::metadata(torn).unwrap().len(),
        *length,
        "the torn segment was cut"
    );
    assert_eq!(
        segment_files(&damaged.dir),
        segments,
        "segments after the damage were deleted"
    );
}

/// Asserts that `victim` left the ISR, reported as a lost replica, and
/// that once its replica opened with the cut its recorded log end became
/// the end after the cut (review of the controller, finding 3: an empty
/// end would lose unclean recovery to a replica that holds nothing), then
/// restarts the others and checks that every node ends with every
/// acknowledged record.
fn assert_reported_lost_and_recovered(damaged: Damaged) {
    let Damaged {
        cluster,
        victim,
        others,
        acknowledged,
        ..
    } = damaged;
    let state = cluster.coordinator.log_state(LOG).unwrap().unwrap();
    assert!(!state.is_in_sync(victim), "{state:?}");
    assert_ne!(state.leader, Some(victim), "{state:?}");
    let cut_end = cluster.log(victim, LOG).unwrap().log_end_offset();
    assert!(cut_end > Offset::ZERO && cut_end < Offset(RECORDS as u64));
    assert!(
        cluster.wait_until(WAIT, |c| {
            let state = c.coordinator.log_state(LOG).unwrap().unwrap();
            state.unclean_replicas.iter().any(|u| {
                u.node == victim
                    && u.log_end
                        .as_ref()
                        .is_some_and(|end| end.log_end_offset == cut_end)
            })
        }),
        "the victim's recorded end is not its end after the cut ({cut_end}): {:?}",
        cluster.coordinator.log_state(LOG).unwrap()
    );
    assert!(!cluster.in_sync_replicas(LOG).contains(&victim));

    // The others come back; unclean recovery elects one of them, which
    // holds every record, and the victim fetches them again.
    for node in &others {
        cluster.restart(*node).unwrap();
    }
    let end = Offset(RECORDS as u64);
    let recovered = cluster.wait_until(Duration::from_secs(60), |c| {
        c.leader_of(LOG).is_some()
            && c.node_ids().into_iter().all(|n| {
                c.log(n, LOG)
                    .is_ok_and(|h| h.log_end_offset() >= end && h.high_watermark() >= end)
            })
    });
    assert!(
        recovered,
        "leader {:?}, ISR {:?}, high watermarks {:?}",
        cluster.leader_of(LOG),
        cluster.in_sync_replicas(LOG),
        cluster
            .node_ids()
            .into_iter()
            .map(|n| cluster.log(n, LOG).map(|h| h.high_watermark()).ok())
            .collect::<Vec<_>>()
    );
    for node in cluster.node_ids() {
        let values: Vec<String> = committed_values(&cluster.log(node, LOG).unwrap())
            .into_iter()
            .map(|(_, value)| value)
            .collect();
        assert_eq!(values, acknowledged, "{node}");
    }
    cluster.shutdown().unwrap();
}

#[test]
fn a_replica_whose_recovery_cut_possibly_committed_records_never_leads_with_them_missing() {
    let damaged = damaged();
    let (cluster, victim) = (&damaged.cluster, damaged.victim);
    cluster.restart(victim).unwrap();
    assert_eq!(
        cluster.with_node(victim, |n| n.previous_shutdown()),
        Some(PreviousShutdown::Unclean)
    );
    // It opened (the cut), and reported its end as not known first: out
    // of the ISR, not leading.
    let handle = cluster
        .log(victim, LOG)
        .expect("the victim's replica opened");
    assert!(handle.log_end_offset() < Offset(RECORDS as u64));
    assert_reported_lost_and_recovered(damaged);
}

/// A start that fails after recovery but before its report is known to be
/// stored (here the report's compare-and-set is applied but its answer
/// lost, which cuts the node off) leaves the damage on disk: had recovery
/// cut it, the next start would find a consistent log and report its end
/// after the cut, not an empty one.
#[test]
fn the_cut_reaches_the_disk_only_once_the_report_is_stored() {
    let damaged = damaged();
    let (cluster, victim) = (&damaged.cluster, damaged.victim);
    let segments = segment_files(&damaged.dir);
    cluster.coordinator.lose_compare_and_set_replies(victim, 1);
    let failed = cluster.restart(victim);
    assert!(
        failed.is_err(),
        "the start ended without knowing its report was stored"
    );
    assert_not_cut(&damaged, &segments);

    cluster.coordinator.set_node_unavailable(victim, false);
    cluster.restart(victim).unwrap();
    let handle = cluster
        .log(victim, LOG)
        .expect("the victim's replica opened once its report was stored");
    assert!(handle.log_end_offset() < Offset(RECORDS as u64));
    assert_reported_lost_and_recovered(damaged);
}

/// A report that must wait (the log's document cannot be read or changed
/// by this node yet, issue 24) carries no end (not known) for a replica whose
/// recovery would cut records that may have been committed, and the
/// replica stays uncut and closed until the report is stored. Reporting
/// the end after a cut would have kept the victim, the last ISR member, in
/// the ISR.
#[test]
fn a_pending_report_for_a_replica_that_needs_the_cut_carries_no_end() {
    let damaged = damaged();
    let (cluster, victim) = (&damaged.cluster, damaged.victim);
    let segments = segment_files(&damaged.dir);
    let document = cluster.coordinator_delay(victim);
    document.refuse_document(LOG);
    cluster.restart(victim).unwrap();
    assert_eq!(
        cluster.with_node(victim, |n| n.pending_unclean_reports()),
        Some(vec![(LOG, None)])
    );
    assert!(
        cluster
            .with_node(victim, |n| n.logs_not_opened())
            .unwrap()
            .iter()
            .any(|(log, _)| *log == LOG),
        "the replica opened before its report was stored"
    );
    assert_not_cut(&damaged, &segments);

    document.accept_document(LOG);
    assert!(
        cluster.wait_until(WAIT, |c| c
            .with_node(victim, |n| n.pending_unclean_reports().is_empty())
            .unwrap_or(false)
            && c.log(victim, LOG).is_ok()),
        "the report was not stored, or the replica did not open after it"
    );
    assert_reported_lost_and_recovered(damaged);
}
