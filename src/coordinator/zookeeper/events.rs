//! The event fan-out of the ZooKeeper coordinator: subscribers, their
//! bounded queues, the `Resync` each is owed after a dropped event, and the
//! ordering of what is announced.
//!
//! Two sources report changes: the coordinator's own writes (which know the
//! exact state they stored) and the watcher (which re-reads what a watch
//! said changed, or everything after a reconnection). They can report the
//! same change twice, or an older view after a newer one. Each subject (the
//! live node set, the controller, each log) therefore carries the ZooKeeper
//! zxid of the last change announced for it, and a report is announced only
//! if its zxid is newer: every subscriber sees each subject's changes in
//! the order ZooKeeper applied them, without repeats. Changes the watcher
//! coalesced (several writes before one re-read) arrive as their latest
//! state, which is all a receiver needs: events are hints to re-read.
//!
//! This module owns no I/O; the caller holds its lock while it sends, which
//! `try_send` never blocks.

use std::collections::BTreeMap;

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::coordinator::{ControllerEpoch, CoordinatorEvent, LogState};
use crate::types::{LogId, NodeId};

/// The subscribers and the last zxid announced per subject.
#[derive(Debug)]
pub(super) struct Dispatcher {
    subscribers: Vec<Subscriber>,
    events_max: usize,
    /// Zxid and replicas of the last announced change of each log: a
    /// replica a reassignment removes hears of the change that removed it.
    logs: BTreeMap<LogId, (i64, Vec<NodeId>)>,
    /// Zxid of the last announced change of the live node set.
    nodes: i64,
    /// The last announced live node set.
    live: Vec<NodeId>,
    /// Zxid of the last announced change of the controller seat or record.
    controller: i64,
}

#[derive(Debug)]
struct Subscriber {
    node: NodeId,
    /// Gets `LogChanged` for every log, not only those `node` hosts.
    every_log: bool,
    sender: Sender<CoordinatorEvent>,
    /// An event was dropped (queue full) or may have been missed (the
    /// coordinator was disconnected) and the `Resync` that says so is not
    /// yet delivered.
    missed_events: bool,
}

impl Dispatcher {
    /// No subscribers; each will get queues of `events_max` events.
    pub(super) fn new(events_max: usize) -> Dispatcher {
        Dispatcher {
            subscribers: Vec::new(),
            events_max: events_max.max(1),
            logs: BTreeMap::new(),
            nodes: i64::MIN,
            live: Vec::new(),
            controller: i64::MIN,
        }
    }

    /// A new receiver of events for `node` (of every log's changes if
    /// `every_log`).
    pub(super) fn subscribe(
        &mut self,
        node: NodeId,
        every_log: bool,
    ) -> Receiver<CoordinatorEvent> {
        let (sender, receiver) = crossbeam_channel::bounded(self.events_max);
        self.subscribers.push(Subscriber {
            node,
            every_log,
            sender,
            missed_events: false,
        });
        receiver
    }

    /// Notes `state`, as of the transaction `zxid`, as the last one known of
    /// its log without announcing it, unless one is known already: what a
    /// coordinator reads when it connects, so that a later change that
    /// removes a replica reaches that replica ([`Dispatcher::log_changed`]
    /// tells the replicas of the last known state). A process that started
    /// after a move added a replica knew none, and the replica that a
    /// completion or a cancellation then removed never heard of it
    /// (helper-153's review).
    pub(super) fn know_log(&mut self, zxid: i64, state: &LogState) {
        self.logs
            .entry(state.log)
            .or_insert_with(|| (zxid, state.replicas.clone()));
    }

    /// Announces `state`, changed by the transaction `zxid`, unless a change
    /// at least as new was announced already.
    pub(super) fn log_changed(&mut self, zxid: i64, state: &LogState) {
        let last = self.logs.entry(state.log).or_insert((i64::MIN, Vec::new()));
        if zxid <= last.0 {
            return;
        }
        // SPEC 3.10: the replicas of the last announced state that this one
        // removed hear of it too, to stop and delete their copies.
        let previous = std::mem::replace(last, (zxid, state.replicas.clone())).1;
        let hosts: Vec<NodeId> = state.replicas.iter().chain(&previous).copied().collect();
        let event = CoordinatorEvent::LogChanged(state.clone());
        self.notify(
            |subscriber| subscriber.every_log || hosts.contains(&subscriber.node),
            event,
        );
    }

    /// Announces the live node set as of `zxid` (the `pzxid` of the
    /// nodes' parent), unless a newer one was announced, or one of the same
    /// zxid and the same set: a read at the announced zxid that differs
    /// from the announced set differs only by the nodes whose sessions
    /// ended (or came back) here, and is newer than that set.
    pub(super) fn nodes_changed(&mut self, zxid: i64, live: Vec<NodeId>) {
        if zxid < self.nodes || (zxid == self.nodes && live == self.live) {
            return;
        }
        self.nodes = zxid;
        self.live.clone_from(&live);
        self.notify(|_| true, CoordinatorEvent::NodesChanged { live });
    }

    /// Announces that `node` left the live set because this coordinator
    /// ended its session (a lapsed lease) or suspended it (cut off from
    /// ZooKeeper for a session timeout), before ZooKeeper can be read: the last announced
    /// set without `node`, at the same zxid. The caller leaves `node` out
    /// of every later set it reads until ZooKeeper stops listing it, so a
    /// read at that zxid is the same set and is not announced again, and
    /// `NodesChanged` never says the node is live again while
    /// `live_nodes` says it is not (issue 24, item 5).
    pub(super) fn node_left(&mut self, node: NodeId) {
        if !self.live.contains(&node) {
            return;
        }
        self.live.retain(|&live| live != node);
        let live = self.live.clone();
        self.notify(|_| true, CoordinatorEvent::NodesChanged { live });
    }

    /// Announces the controller as of `zxid`, unless a newer view was
    /// announced.
    pub(super) fn controller_changed(
        &mut self,
        zxid: i64,
        controller: Option<NodeId>,
        epoch: ControllerEpoch,
    ) {
        if zxid <= self.controller {
            return;
        }
        self.controller = zxid;
        self.notify(
            |_| true,
            CoordinatorEvent::ControllerChanged { controller, epoch },
        );
    }

    /// Every subscriber may have missed events (the coordinator lost its
    /// connection or session): each is owed a `Resync`, sent now if its
    /// queue has room, else by a later [`Dispatcher::flush_resyncs`].
    pub(super) fn resync_all(&mut self) {
        for subscriber in &mut self.subscribers {
            subscriber.missed_events = true;
        }
        self.flush_resyncs();
    }

    /// Hands owed `Resync` events to subscribers whose queues have room,
    /// forgetting those of them whose receivers were dropped.
    pub(super) fn flush_resyncs(&mut self) {
        self.subscribers.retain_mut(|subscriber| {
            if !subscriber.missed_events {
                return true;
            }
            match subscriber.sender.try_send(CoordinatorEvent::Resync) {
                Ok(()) => {
                    subscriber.missed_events = false;
                    true
                }
                Err(TrySendError::Full(_)) => true,
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
    }

    /// Whether some subscriber still waits for a `Resync`.
    pub(super) fn resync_owed(&self) -> bool {
        self.subscribers
            .iter()
            .any(|subscriber| subscriber.missed_events)
    }

    /// The number of receivers still subscribed (dropped ones are forgotten
    /// at the next event sent to them).
    pub(super) fn subscriber_count(&self) -> usize {
        self.subscribers.len()
    }

    /// Sends `event` to every subscriber that `wants` it, never blocking: a
    /// full queue loses the event and owes its subscriber a `Resync`, which
    /// goes before any later event.
    fn notify(&mut self, wants: impl Fn(&Subscriber) -> bool, event: CoordinatorEvent) {
        self.subscribers.retain_mut(|subscriber| {
            if !wants(subscriber) {
                return true;
            }
            if subscriber.missed_events {
                match subscriber.sender.try_send(CoordinatorEvent::Resync) {
                    Ok(()) => subscriber.missed_events = false,
                    // The owed Resync already covers this event.
                    Err(TrySendError::Full(_)) => return true,
                    Err(TrySendError::Disconnected(_)) => return false,
                }
            }
            match subscriber.sender.try_send(event.clone()) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    subscriber.missed_events = true;
                    true
                }
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LeaderEpoch;

    fn state(log: u32, version: u64, replicas: &[u32]) -> LogState {
        let replicas: Vec<NodeId> = replicas.iter().copied().map(NodeId).collect();
        LogState {
            log: LogId(log),
            leader: Some(replicas[0]),
            leader_epoch: LeaderEpoch(0),
            in_sync_replicas: replicas.clone(),
            eligible_leader_replicas: Vec::new(),
            replicas,
            version,
            unclean_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    fn drain(receiver: &Receiver<CoordinatorEvent>) -> Vec<CoordinatorEvent> {
        receiver.try_iter().collect()
    }

    #[test]
    fn each_subject_is_announced_once_per_change_in_zxid_order() {
        let mut dispatcher = Dispatcher::new(16);
        let hosting = dispatcher.subscribe(NodeId(1), false);
        let elsewhere = dispatcher.subscribe(NodeId(9), false);
        let everything = dispatcher.subscribe(NodeId(9), true);
        dispatcher.log_changed(10, &state(1, 0, &[1, 2]));
        // The same change reported again, and an older view, are dropped.
        dispatcher.log_changed(10, &state(1, 0, &[1, 2]));
        dispatcher.log_changed(12, &state(1, 1, &[1, 2]));
        dispatcher.log_changed(11, &state(1, 0, &[1, 2]));
        // Another log has its own order.
        dispatcher.log_changed(5, &state(2, 0, &[2]));
        dispatcher.nodes_changed(7, vec![NodeId(1)]);
        dispatcher.nodes_changed(7, vec![NodeId(1)]);
        dispatcher.controller_changed(8, Some(NodeId(1)), ControllerEpoch(1));
        dispatcher.controller_changed(6, None, ControllerEpoch(0));
        let logs = |events: Vec<CoordinatorEvent>| -> Vec<(u32, u64)> {
            events
                .into_iter()
                .filter_map(|event| match event {
                    CoordinatorEvent::LogChanged(state) => Some((state.log.0, state.version)),
                    _ => None,
                })
                .collect()
        };
        let for_hosting = drain(&hosting);
        assert_eq!(logs(for_hosting.clone()), vec![(1, 0), (1, 1)]);
        assert!(for_hosting.contains(&CoordinatorEvent::NodesChanged {
            live: vec![NodeId(1)]
        }));
        assert_eq!(
            for_hosting
                .iter()
                .filter(|e| matches!(e, CoordinatorEvent::ControllerChanged { .. }))
                .count(),
            1
        );
        assert_eq!(logs(drain(&elsewhere)), vec![]);
        assert_eq!(logs(drain(&everything)), vec![(1, 0), (1, 1), (2, 0)]);
    }

    #[test]
    fn a_node_that_left_is_announced_at_once_and_not_revived_by_a_read_at_the_same_zxid() {
        let mut dispatcher = Dispatcher::new(16);
        let events = dispatcher.subscribe(NodeId(1), false);
        // Not in the announced set: nothing to say.
        dispatcher.node_left(NodeId(2));
        assert_eq!(drain(&events), vec![]);
        dispatcher.nodes_changed(7, vec![NodeId(1), NodeId(2)]);
        drain(&events);
        dispatcher.node_left(NodeId(1));
        dispatcher.node_left(NodeId(1));
        assert_eq!(
            drain(&events),
            vec![CoordinatorEvent::NodesChanged {
                live: vec![NodeId(2)]
            }]
        );
        // ZooKeeper may not have seen the session end yet; the caller
        // leaves the node out, and the same set at the same zxid is not
        // announced again.
        dispatcher.nodes_changed(7, vec![NodeId(2)]);
        assert_eq!(drain(&events), vec![]);
        // The node's session came back (the caller lists it again): a
        // different set at the announced zxid is newer than the announced
        // one.
        dispatcher.nodes_changed(7, vec![NodeId(1), NodeId(2)]);
        assert_eq!(
            drain(&events),
            vec![CoordinatorEvent::NodesChanged {
                live: vec![NodeId(1), NodeId(2)]
            }]
        );
        // ZooKeeper deleted the znode: a newer zxid is announced.
        dispatcher.nodes_changed(9, vec![NodeId(2)]);
        assert_eq!(
            drain(&events),
            vec![CoordinatorEvent::NodesChanged {
                live: vec![NodeId(2)]
            }]
        );
    }

    #[test]
    fn a_full_queue_owes_a_resync_delivered_before_the_next_event() {
        let mut dispatcher = Dispatcher::new(2);
        let events = dispatcher.subscribe(NodeId(1), false);
        for zxid in 1..=4 {
            dispatcher.log_changed(zxid, &state(1, zxid as u64, &[1]));
        }
        assert!(dispatcher.resync_owed());
        assert_eq!(drain(&events).len(), 2);
        dispatcher.log_changed(5, &state(1, 5, &[1]));
        assert_eq!(
            drain(&events),
            vec![
                CoordinatorEvent::Resync,
                CoordinatorEvent::LogChanged(state(1, 5, &[1]))
            ]
        );
        assert!(!dispatcher.resync_owed());
    }

    #[test]
    fn resync_all_reaches_everyone_and_dropped_receivers_are_forgotten() {
        let mut dispatcher = Dispatcher::new(1);
        let kept = dispatcher.subscribe(NodeId(1), false);
        let full = dispatcher.subscribe(NodeId(2), false);
        let dropped = dispatcher.subscribe(NodeId(3), false);
        drop(dropped);
        dispatcher.nodes_changed(1, vec![]);
        assert_eq!(dispatcher.subscriber_count(), 2);
        drain(&kept);
        dispatcher.resync_all();
        assert_eq!(drain(&kept), vec![CoordinatorEvent::Resync]);
        // `full` still holds the NodesChanged: its Resync waits for room.
        assert!(dispatcher.resync_owed());
        assert_eq!(drain(&full).len(), 1);
        dispatcher.flush_resyncs();
        assert_eq!(drain(&full), vec![CoordinatorEvent::Resync]);
        assert!(!dispatcher.resync_owed());
    }
}
