//! `SimNetwork`: the simulator's network as a fault model. It decides, for
//! each message one node sends another, whether it arrives, when, and
//! whether it arrives twice; the simulator carries the message itself on its
//! [`Schedule`](super::schedule::Schedule).
//!
//! Faults, all drawn from the run's seed: loss, a delay between a minimum
//! and a maximum (which reorders messages whose delays cross), duplication,
//! and partitions (directed: a link can be cut one way only, as a firewall
//! rule can). It owns no messages and no clock.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::rng::SplitMix64;
use crate::types::NodeId;

/// How the network treats the messages it carries. The default is a
/// perfect network: nothing lost, nothing twice, one microsecond per
/// message.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NetworkFaults {
    /// Probability that a message is lost.
    pub(crate) loss: f64,
    /// Probability that a message that arrives arrives a second time.
    pub(crate) duplication: f64,
    /// The shortest time a message travels.
    pub(crate) delay_min: Duration,
    /// The longest time a message travels; delays are uniform between the
    /// two, so messages on one link overtake each other when it is above
    /// `delay_min`.
    pub(crate) delay_max: Duration,
}

impl Default for NetworkFaults {
    fn default() -> Self {
        NetworkFaults {
            loss: 0.0,
            duplication: 0.0,
            delay_min: Duration::from_micros(1),
            delay_max: Duration::from_micros(1),
        }
    }
}

/// Messages that take far longer than the others (a stalled TCP
/// connection's retransmissions, a long GC pause of a proxy): drawn from a
/// stream of their own, so that a network without them draws what it drew
/// before.
#[derive(Clone, Debug)]
pub(crate) struct SlowMessages {
    /// Probability that a message that arrives is slow.
    pub(crate) probability: f64,
    /// The shortest time a slow message travels.
    pub(crate) delay_min: Duration,
    /// The longest.
    pub(crate) delay_max: Duration,
    /// Draws which messages are slow, and how slow.
    pub(crate) rng: SplitMix64,
}

/// The fate of one message: when each copy of it arrives, counted from
/// when it was sent. No copy: lost.
pub(crate) type Arrivals = Vec<Duration>;

/// The network; see the module docs.
#[derive(Debug)]
pub(crate) struct SimNetwork {
    faults: NetworkFaults,
    /// Directed links that carry nothing: `(from, to)`.
    cut: BTreeSet<(NodeId, NodeId)>,
    rng: SplitMix64,
    slow: Option<SlowMessages>,
    sent: u64,
    lost: u64,
    duplicated: u64,
}

impl SimNetwork {
    /// A network whose draws are fixed by `seed`.
    pub(crate) fn new(seed: u64, faults: NetworkFaults) -> SimNetwork {
        debug_assert!(
            faults.delay_min <= faults.delay_max,
            "delay_min above delay_max"
        );
        SimNetwork {
            faults,
            cut: BTreeSet::new(),
            rng: SplitMix64::new(seed),
            slow: None,
            sent: 0,
            lost: 0,
            duplicated: 0,
        }
    }

    /// Replaces the fault settings (a run may calm the network to check
    /// that it recovers).
    pub(crate) fn set_faults(&mut self, faults: NetworkFaults) {
        debug_assert!(
            faults.delay_min <= faults.delay_max,
            "delay_min above delay_max"
        );
        self.faults = faults;
    }

    /// Makes some messages slow (`None`: none).
    pub(crate) fn set_slow(&mut self, slow: Option<SlowMessages>) {
        self.slow = slow;
    }

    /// Whether a message with these `arrivals` is lost, or late: one of
    /// its copies travels longer than the fault settings' longest delay
    /// (a slow message, see [`SlowMessages`]).
    pub(crate) fn is_lost_or_late(&self, arrivals: &[Duration]) -> bool {
        arrivals.is_empty() || arrivals.iter().any(|delay| *delay > self.faults.delay_max)
    }

    /// Cuts every link between `side_a` and `side_b`, both ways.
    pub(crate) fn partition(&mut self, side_a: &[NodeId], side_b: &[NodeId]) {
        for &a in side_a {
            for &b in side_b {
                self.cut.insert((a, b));
                self.cut.insert((b, a));
            }
        }
    }

    /// Cuts the link from `from` to `to` only.
    pub(crate) fn cut_one_way(&mut self, from: NodeId, to: NodeId) {
        self.cut.insert((from, to));
    }

    /// Restores every link.
    pub(crate) fn heal(&mut self) {
        self.cut.clear();
    }

    /// Whether `from` can reach `to` now.
    pub(crate) fn is_linked(&self, from: NodeId, to: NodeId) -> bool {
        !self.cut.contains(&(from, to))
    }

    /// Decides the fate of a message `from` sends `to` now. Draws the same
    /// number of random values whatever the outcome, so that a change in
    /// one message's fate does not shift every later draw.
    pub(crate) fn send(&mut self, from: NodeId, to: NodeId) -> Arrivals {
        self.sent += 1;
        let lost = self.rng.chance(self.faults.loss);
        let duplicated = self.rng.chance(self.faults.duplication);
        let first = self.delay();
        let second = self.delay();
        if lost || !self.is_linked(from, to) {
            self.lost += 1;
            return Vec::new();
        }
        // Drawn only for a message that arrives, from the slow messages'
        // own stream: the draws above stay those of a network without them.
        let first = match self.slow.as_mut() {
            Some(slow) => {
                let (is_slow, draw) = (slow.rng.chance(slow.probability), slow.rng.next_u64());
                let spread = (slow.delay_max - slow.delay_min).as_nanos() as u64;
                if is_slow {
                    slow.delay_min + Duration::from_nanos(draw % (spread + 1))
                } else {
                    first
                }
            }
            None => first,
        };
        if duplicated {
            self.duplicated += 1;
            return vec![first, second];
        }
        vec![first]
    }

    fn delay(&mut self) -> Duration {
        let NetworkFaults {
            delay_min,
            delay_max,
            ..
        } = self.faults;
        let spread = (delay_max - delay_min).as_nanos() as u64;
        let draw = self.rng.next_u64();
        if spread == 0 {
            return delay_min;
        }
        delay_min + Duration::from_nanos(draw % (spread + 1))
    }

    /// Messages sent, lost (including to cut links) and duplicated so far.
    pub(crate) fn counts(&self) -> (u64, u64, u64) {
        (self.sent, self.lost, self.duplicated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = NodeId(0);
    const B: NodeId = NodeId(1);
    const C: NodeId = NodeId(2);

    #[test]
    fn a_perfect_network_delivers_each_message_once_after_the_minimum_delay() {
        let mut network = SimNetwork::new(1, NetworkFaults::default());
        for _ in 0..100 {
            assert_eq!(network.send(A, B), [Duration::from_micros(1)]);
        }
        assert_eq!(network.counts(), (100, 0, 0));
    }

    #[test]
    fn partitions_cut_both_ways_a_one_way_cut_only_one_and_heal_restores() {
        let mut network = SimNetwork::new(1, NetworkFaults::default());
        network.partition(&[A], &[B, C]);
        assert!(network.send(A, B).is_empty());
        assert!(network.send(C, A).is_empty());
        assert_eq!(network.send(B, C).len(), 1);
        network.heal();
        network.cut_one_way(B, C);
        assert!(network.send(B, C).is_empty());
        assert_eq!(network.send(C, B).len(), 1);
        network.heal();
        assert_eq!(network.send(A, B).len(), 1);
        assert_eq!(network.counts(), (6, 3, 0));
    }

    #[test]
    fn loss_duplication_and_delays_follow_their_settings_and_the_seed() {
        let faults = NetworkFaults {
            loss: 0.2,
            duplication: 0.1,
            delay_min: Duration::from_micros(100),
            delay_max: Duration::from_micros(900),
        };
        let run = |seed| {
            let mut network = SimNetwork::new(seed, faults.clone());
            let fates: Vec<Arrivals> = (0..10_000).map(|_| network.send(A, B)).collect();
            (fates, network.counts())
        };
        let (fates, (sent, lost, duplicated)) = run(7);
        assert_eq!(sent, 10_000);
        // Within a wide band of the expected 2,000 lost and 800 twice.
        assert!((1_700..2_300).contains(&lost), "lost {lost}");
        assert!(
            (600..1_000).contains(&duplicated),
            "duplicated {duplicated}"
        );
        let delays: Vec<Duration> = fates.iter().flatten().copied().collect();
        assert!(delays
            .iter()
            .all(|d| (faults.delay_min..=faults.delay_max).contains(d)));
        // Delays spread: messages overtake each other.
        assert!(delays.windows(2).any(|w| w[0] > w[1]));
        // The same seed, the same fates; another seed, others.
        assert_eq!(run(7).0, fates);
        assert_ne!(run(8).0, fates);
    }

    #[test]
    fn a_lost_message_draws_as_many_values_as_a_delivered_one() {
        // Cutting a link changes that link's fates only: the draws of later
        // messages on other links stay the same.
        let faults = NetworkFaults {
            delay_max: Duration::from_micros(50),
            ..NetworkFaults::default()
        };
        let mut open = SimNetwork::new(3, faults.clone());
        let mut cut = SimNetwork::new(3, faults);
        cut.cut_one_way(A, B);
        assert_eq!(open.send(A, B).len(), 1);
        assert!(cut.send(A, B).is_empty());
        assert_eq!(open.send(B, C), cut.send(B, C));
    }

    /// A slow message takes its slow delay, and counts as late; the draws
    /// of the network's own faults stay those of a network without slow
    /// messages.
    #[test]
    fn slow_messages_are_late_and_leave_the_other_draws_as_they_were() {
        let faults = NetworkFaults {
            loss: 0.3,
            duplication: 0.3,
            delay_min: Duration::from_micros(100),
            delay_max: Duration::from_millis(2),
        };
        let (mut plain, mut slowed) = (
            SimNetwork::new(5, faults.clone()),
            SimNetwork::new(5, faults),
        );
        slowed.set_slow(Some(SlowMessages {
            probability: 0.5,
            delay_min: Duration::from_millis(500),
            delay_max: Duration::from_secs(3),
            rng: SplitMix64::new(9),
        }));
        let mut late = 0;
        for _ in 0..200 {
            let (usual, maybe_slow) = (plain.send(A, B), slowed.send(A, B));
            assert_eq!(usual.len(), maybe_slow.len(), "lost or duplicated alike");
            assert!(!plain.is_lost_or_late(&usual) || usual.is_empty());
            if usual != maybe_slow {
                late += 1;
                assert!(slowed.is_lost_or_late(&maybe_slow));
                let delay = maybe_slow[0];
                assert!(delay >= Duration::from_millis(500) && delay <= Duration::from_secs(3));
                assert_eq!(usual[1..], maybe_slow[1..], "only the first copy is slow");
            }
        }
        assert!(late > 0, "half the messages that arrive are slow");
        assert_eq!(plain.counts(), slowed.counts());
    }
}
