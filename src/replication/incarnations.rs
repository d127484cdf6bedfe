//! Which incarnation of each node a leader counts fetches from (SPEC 3.2,
//! Kafka's broker epoch, KIP-903).
//!
//! A node learns every live node's current incarnation from the coordinator
//! (`Coordinator::live_node_incarnations`, read again whenever the
//! coordinator announces a change of the live nodes) and checks each fetch
//! it receives against it before the fetch reaches any log: one from an
//! earlier process of the follower (a fetch delayed from before it
//! restarted), or from a sender that does not know the follower's
//! incarnation (a stranger on a plaintext port), counts for nothing. This
//! file owns that view and the one comparison per fetch; it does not call
//! the coordinator (the node's control thread does, and reports here; so
//! do a controlled shutdown's hand-overs, while the control thread is
//! quiet).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::sync::{Mutex, RwLock};
use crate::types::{Incarnation, NodeId};

/// What the leader makes of the incarnation a fetch names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IncarnationCheck {
    /// The sender's current incarnation: the fetch counts.
    Current,
    /// Older than the sender's current one: a fetch from an earlier
    /// process of the node. Refused.
    Stale,
    /// Newer than the one this node knows, or the sender is not known as
    /// live: either the sender registered again and this node has not read
    /// it yet, or the sender made the number up. Refused, and worth reading
    /// the coordinator again (`PeerIncarnations::refresh_due`).
    ///
    /// Kafka accepts a fetch whose broker epoch is newer than its cached
    /// one (`Replica.updateFetchStateOrThrow` fences only older ones) and
    /// waits only the ISR expansion on it; here a sender that does not
    /// know the incarnation could then name any larger number, so the
    /// fetch waits until the leader has read the registration (the
    /// coordinator announces it at once). A restarted follower, which is
    /// outside the ISR anyway (SPEC 3.5), loses a fetch backoff or two.
    Unverified,
}

/// The leader's view of every live node's current incarnation.
#[derive(Debug)]
pub(crate) struct PeerIncarnations {
    current: RwLock<HashMap<NodeId, Incarnation>>,
    /// When an unverified fetch last asked for the view to be read again:
    /// such fetches come at the sender's rate, and must not turn into as
    /// many coordinator reads.
    refresh_asked_at: Mutex<Option<Instant>>,
}

/// The least time between two reads of the coordinator asked for by
/// unverified fetches.
pub(crate) const REFRESH_INTERVAL_MIN: Duration = Duration::from_millis(100);

impl PeerIncarnations {
    /// A view that knows no node yet: every fetch is unverified.
    pub(crate) fn new() -> PeerIncarnations {
        PeerIncarnations {
            current: RwLock::new(HashMap::new()),
            refresh_asked_at: Mutex::new(None),
        }
    }

    /// Replaces the view with what the coordinator listed: every live node
    /// with its current incarnation. A node not listed is not live. A
    /// listed node's incarnation never goes back: a read that started
    /// before [`learn`](Self::learn) took a later one (the node registered
    /// again in between) would otherwise put the earlier one back, and a
    /// delayed fetch of the node's previous process would count again
    /// (SPEC 3.2). Incarnations only grow, so the larger is the current.
    pub(crate) fn replace(&self, live: &[(NodeId, Incarnation)]) {
        let mut current = self.current.write();
        current.retain(|node, _| live.iter().any(|&(listed, _)| listed == *node));
        Self::learn_locked(&mut current, live);
    }

    /// Adds what the coordinator listed to the view without removing
    /// anything: a node listed with a later incarnation than the view holds
    /// (or not held at all) takes it; nothing goes back to an earlier one.
    /// For readers other than the control thread (a controlled shutdown's
    /// hand-overs, which run concurrently while the control thread reads
    /// nothing): incarnations only grow, so concurrent calls may land in
    /// any order and the view still ends with the latest each listed.
    /// A node that stopped stays until the next [`replace`](Self::replace);
    /// a fetch in its name counts for nothing more than a fetch did before
    /// it stopped (whoever reads it as a successor checks liveness again).
    pub(crate) fn learn(&self, live: &[(NodeId, Incarnation)]) {
        Self::learn_locked(&mut self.current.write(), live);
    }

    /// Takes each listed incarnation that is later than the one held (or
    /// the only one): the one rule both readers share.
    fn learn_locked(current: &mut HashMap<NodeId, Incarnation>, live: &[(NodeId, Incarnation)]) {
        for &(node, incarnation) in live {
            let held = current.entry(node).or_insert(incarnation);
            *held = (*held).max(incarnation);
        }
    }

    /// The incarnation this view holds for `node`, if it is live.
    pub(crate) fn get(&self, node: NodeId) -> Option<Incarnation> {
        self.current.read().get(&node).copied()
    }

    /// The one comparison per fetch: does `incarnation` name `node`'s
    /// current incarnation?
    pub(crate) fn check(&self, node: NodeId, incarnation: Incarnation) -> IncarnationCheck {
        match self.get(node) {
            Some(current) if current == incarnation => IncarnationCheck::Current,
            Some(current) if incarnation < current => IncarnationCheck::Stale,
            _ => IncarnationCheck::Unverified,
        }
    }

    /// Whether an unverified fetch arriving `now` should have the view read
    /// again: at most once per [`REFRESH_INTERVAL_MIN`].
    pub(crate) fn refresh_due(&self, now: Instant) -> bool {
        let mut asked = self.refresh_asked_at.lock();
        if asked.is_some_and(|at| now.saturating_duration_since(at) < REFRESH_INTERVAL_MIN) {
            return false;
        }
        *asked = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_current_incarnation_counts() {
        let (a, b, stranger) = (NodeId(1), NodeId(2), NodeId(9));
        let view = PeerIncarnations::new();
        assert_eq!(view.check(a, Incarnation(5)), IncarnationCheck::Unverified);
        view.replace(&[(a, Incarnation(5)), (b, Incarnation(7))]);
        // (node, incarnation in the fetch, verdict)
        let rows = [
            (a, 5, IncarnationCheck::Current),
            (a, 4, IncarnationCheck::Stale),
            (a, 0, IncarnationCheck::Stale),
            (a, 6, IncarnationCheck::Unverified),
            (a, u64::MAX, IncarnationCheck::Unverified),
            (b, 7, IncarnationCheck::Current),
            (b, 5, IncarnationCheck::Stale),
            (stranger, 5, IncarnationCheck::Unverified),
        ];
        for (node, incarnation, expected) in rows {
            assert_eq!(
                view.check(node, Incarnation(incarnation)),
                expected,
                "{node} {incarnation}"
            );
        }
        // Learning adds and raises, never lowers nor removes.
        view.learn(&[(a, Incarnation(4)), (stranger, Incarnation(3))]);
        assert_eq!(view.check(a, Incarnation(5)), IncarnationCheck::Current);
        assert_eq!(
            view.check(stranger, Incarnation(3)),
            IncarnationCheck::Current
        );
        view.learn(&[(b, Incarnation(8))]);
        assert_eq!(view.check(b, Incarnation(8)), IncarnationCheck::Current);
        assert_eq!(view.check(b, Incarnation(7)), IncarnationCheck::Stale);
        assert_eq!(view.check(a, Incarnation(5)), IncarnationCheck::Current);
        // A read listing an earlier incarnation than one learned since
        // (it started before the node registered again) keeps the later.
        view.replace(&[(a, Incarnation(5)), (b, Incarnation(7))]);
        assert_eq!(view.check(b, Incarnation(8)), IncarnationCheck::Current);
        assert_eq!(view.check(b, Incarnation(7)), IncarnationCheck::Stale);
        // A node that is not listed any more is not live.
        view.replace(&[(b, Incarnation(8))]);
        assert_eq!(view.check(a, Incarnation(5)), IncarnationCheck::Unverified);
        assert_eq!(view.check(b, Incarnation(7)), IncarnationCheck::Stale);
        assert_eq!(view.check(b, Incarnation(8)), IncarnationCheck::Current);
    }

    #[test]
    fn refreshes_are_rate_limited() {
        let view = PeerIncarnations::new();
        let base = Instant::now();
        assert!(view.refresh_due(base));
        assert!(!view.refresh_due(base + REFRESH_INTERVAL_MIN / 2));
        assert!(view.refresh_due(base + REFRESH_INTERVAL_MIN));
    }
}
