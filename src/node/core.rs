//! The node's decisions as a core that takes inputs and returns actions
//! (issue 28: one node core, two drivers). It has no thread of its own,
//! reads no clock and does no I/O: every coordinator call it wants is an
//! [`Action::Call`] that carries a [`Continuation`], and the call's answer
//! comes back to [`NodeCore::handle`] as an [`Input::Answered`] with that
//! continuation, so no table of calls in flight is kept. The threaded
//! runtime drives it (`NodeShared::drive`, which makes each call on the
//! calling thread and hands the answer straight back, depth-first in the
//! order the actions came), and so does the simulator, through the same
//! `NodeShared` steps.
//!
//! What the core owns so far is the node's session with the coordinator:
//! the heartbeat and registering again after a failed one, this node's own
//! incarnation, and its view of every live node's incarnation, against
//! which fetches are checked (SPEC 3.2). What it does not own yet (roles,
//! ISR changes, hand-overs, fetch serving, timers) still lives in
//! `node.rs` and calls the coordinator inline. The core names neither the
//! public face (`ReplicatedLog`) nor the `Coordinator` or the `Transport`:
//! the drivers do.

use std::time::Duration;

use crate::error::Result;
use crate::replication::PeerIncarnations;
use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering};
use crate::types::{Incarnation, NodeId};

/// A coordinator call the core asks its driver to make for this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CoordinatorCall {
    /// `Coordinator::heartbeat`: renews this node's session.
    Heartbeat,
    /// `Coordinator::register_node`: a new session, a new incarnation.
    RegisterNode {
        /// The session timeout to register with.
        session_timeout: Duration,
    },
    /// `Coordinator::live_node_incarnations`: every live node with its
    /// current incarnation.
    LiveNodeIncarnations,
}

/// What a [`CoordinatorCall`] returned, as its driver hands it back. Each
/// call has one kind of answer: `Heartbeat` gives `Done`, `RegisterNode`
/// gives `Registered`, `LiveNodeIncarnations` gives `Incarnations`.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A call that returns nothing but whether it worked.
    Done(Result<()>),
    /// This node's incarnation from a registration.
    Registered(Result<Incarnation>),
    /// The live nodes with their current incarnations.
    Incarnations(Result<Vec<(NodeId, Incarnation)>>),
}

/// What a coordinator call's answer is for: it travels with the call
/// ([`Action::Call`]) and comes back with the answer
/// ([`Input::Answered`]), as a fetcher's request in flight does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Continuation {
    /// A heartbeat's answer: a failure registers again.
    Heartbeat,
    /// Registering again after a failed heartbeat: a new incarnation.
    RegisterAgain,
    /// A read of the live nodes' incarnations that replaces the view.
    RefreshIncarnations,
}

impl Continuation {
    /// Whether `call` is one whose answer this continuation takes: the
    /// pairing every [`Action::Call`] the core emits holds.
    fn takes_answer_of(self, call: &CoordinatorCall) -> bool {
        matches!(
            (self, call),
            (Continuation::Heartbeat, CoordinatorCall::Heartbeat)
                | (
                    Continuation::RegisterAgain,
                    CoordinatorCall::RegisterNode { .. }
                )
                | (
                    Continuation::RefreshIncarnations,
                    CoordinatorCall::LiveNodeIncarnations
                )
        )
    }
}

/// What the core asks its driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Make `call` and hand its answer back as [`Input::Answered`] with
    /// `then`.
    Call {
        /// The call to make.
        call: CoordinatorCall,
        /// What its answer is for.
        then: Continuation,
    },
}

/// What happened, as a driver hands it to [`NodeCore::handle`].
#[derive(Debug)]
pub(crate) enum Input {
    /// A coordinator call of an [`Action::Call`] returned (or failed).
    Answered {
        /// The call's continuation, as the action carried it.
        then: Continuation,
        /// What the call returned.
        answer: Answer,
    },
}

/// The node's core (see the module doc). Shared by the node's threads
/// (`&self` throughout): its state sits behind its own atomics and locks,
/// none of which is held while a driver carries out an action.
#[derive(Debug)]
pub(crate) struct NodeCore {
    /// This node.
    node: NodeId,
    /// The session timeout this node registers with.
    session_timeout: Duration,
    /// The node's stop (`NodeShared::stop`): a stopping node does not
    /// register again.
    stop: Arc<AtomicBool>,
    /// This node's own incarnation, from its latest registration (0 before
    /// the first); its fetchers send it with every fetch (SPEC 3.2).
    incarnation: Arc<AtomicU64>,
    /// Every live node's current incarnation, as last read from the
    /// coordinator: a fetch counts only from its sender's (SPEC 3.2).
    /// Invariant (kept by [`PeerIncarnations`]): a listed node's
    /// incarnation never goes back.
    peer_incarnations: PeerIncarnations,
}

impl NodeCore {
    /// The core of node `node`, which registers with `session_timeout` and
    /// stops when `stop` is raised. It knows no incarnation yet, its own
    /// (0) or any other node's.
    pub(crate) fn new(node: NodeId, session_timeout: Duration, stop: Arc<AtomicBool>) -> NodeCore {
        NodeCore {
            node,
            session_timeout,
            stop,
            incarnation: Arc::new(AtomicU64::new(0)),
            peer_incarnations: PeerIncarnations::new(),
        }
    }

    /// This node's current incarnation: what its latest registration with
    /// the coordinator handed out (0 before the first).
    pub(crate) fn incarnation(&self) -> Incarnation {
        Incarnation(self.incarnation.load(Ordering::SeqCst))
    }

    /// The cell holding this node's incarnation, for its fetchers, which
    /// read it for every fetch they send.
    pub(crate) fn incarnation_cell(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.incarnation)
    }

    /// Takes the incarnation of the registration at the node's start
    /// (start-up registers inline, outside the core).
    pub(crate) fn registered(&self, incarnation: Incarnation) {
        self.incarnation.store(incarnation.0, Ordering::SeqCst);
    }

    /// The view of the live nodes' incarnations, for the steps not moved
    /// into the core yet: the fetch check on the handler threads, and the
    /// controlled shutdown's hand-overs, which learn from their own reads
    /// ([`PeerIncarnations::learn`]).
    pub(crate) fn peer_incarnations(&self) -> &PeerIncarnations {
        &self.peer_incarnations
    }

    /// The heartbeat is due (the control pass's timer): renew the session.
    pub(crate) fn heartbeat(&self, out: &mut Vec<Action>) {
        Self::call(out, CoordinatorCall::Heartbeat, Continuation::Heartbeat);
    }

    /// Read every live node's current incarnation to replace the view
    /// (SPEC 3.2): on a coordinator's notification that nodes came or
    /// went, on a resync, before the first reconcile, and when a fetch or
    /// an ISR expansion named an incarnation the view does not hold.
    pub(crate) fn refresh_incarnations(&self, out: &mut Vec<Action>) {
        Self::call(
            out,
            CoordinatorCall::LiveNodeIncarnations,
            Continuation::RefreshIncarnations,
        );
    }

    /// Takes one input and pushes onto `out` the actions it asks for, in
    /// the order they are to be carried out.
    pub(crate) fn handle(&self, input: Input, out: &mut Vec<Action>) {
        let Input::Answered { then, answer } = input;
        match (then, answer) {
            (Continuation::Heartbeat, Answer::Done(Ok(()))) => {}
            (Continuation::Heartbeat, Answer::Done(Err(error))) => {
                tracing::warn!(node = %self.node, %error, "heartbeat failed");
                // An expired session: register again, as a restarted
                // ZooKeeper client re-creates its ephemeral node — unless
                // this node is stopping: a node on its way down must not
                // come back to life in the coordinator's eyes. (A
                // `ZkCoordinator` whose session is only suspended, cut off
                // from ZooKeeper for a session timeout, keeps it: this call
                // then waits for ZooKeeper to say whether it lives.)
                //
                // Known limitation: `Coordinator::register_node` takes no
                // deadline, and may block the control thread for the
                // coordinator's own call timeout (a `ZkCoordinator` opening
                // a session, or waiting on a suspended one, while ZooKeeper
                // is unreachable: 5 s by default). Events, ISR proposals
                // and failed-leader checks wait meanwhile; the node's
                // leadership is already fenced, since its session is gone
                // or suspended. Running it elsewhere would race with `stop`
                // (a late registration would revive a stopped node).
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
                Self::call(
                    out,
                    CoordinatorCall::RegisterNode {
                        session_timeout: self.session_timeout,
                    },
                    Continuation::RegisterAgain,
                );
            }
            // A new registration, a new incarnation: the fetchers send it
            // from their next fetch on.
            (Continuation::RegisterAgain, Answer::Registered(Ok(incarnation))) => {
                self.registered(incarnation);
                tracing::info!(node = %self.node, %incarnation, "registered again with the coordinator");
            }
            (Continuation::RegisterAgain, Answer::Registered(Err(error))) => {
                tracing::warn!(node = %self.node, %error, "registering again failed; will retry");
            }
            // On failure the view stays as it was: fetches from the
            // incarnations it holds still count, and the next event or
            // unverified fetch asks again.
            (Continuation::RefreshIncarnations, Answer::Incarnations(Ok(live))) => {
                self.peer_incarnations.replace(&live);
            }
            (Continuation::RefreshIncarnations, Answer::Incarnations(Err(error))) => {
                tracing::warn!(node = %self.node, %error, "cannot read the live nodes' incarnations; keeping the last view");
            }
            (then, answer) => {
                // A driver bug: every call's answer comes back with the
                // continuation the core sent with it (`Continuation::takes_answer_of`).
                panic!("{then:?} answered with {answer:?}: the driver paired a call with another call's continuation")
            }
        }
    }

    /// Pushes a call and its continuation, which must take its answer.
    fn call(out: &mut Vec<Action>, call: CoordinatorCall, then: Continuation) {
        debug_assert!(
            then.takes_answer_of(&call),
            "{then:?} cannot take the answer of {call:?}"
        );
        out.push(Action::Call { call, then });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::replication::IncarnationCheck;

    const SESSION: Duration = Duration::from_secs(6);

    fn core() -> NodeCore {
        NodeCore::new(NodeId(1), SESSION, Arc::new(AtomicBool::new(false)))
    }

    /// Hands `core` the answer `answer` to a call continued by `then`;
    /// returns the actions it asked for.
    fn answer(core: &NodeCore, then: Continuation, answer: Answer) -> Vec<Action> {
        let mut out = Vec::new();
        core.handle(Input::Answered { then, answer }, &mut out);
        out
    }

    fn coordinator_error() -> Error {
        Error::Coordinator {
            reason: "session expired".into(),
        }
    }

    fn register_again() -> Action {
        Action::Call {
            call: CoordinatorCall::RegisterNode {
                session_timeout: SESSION,
            },
            then: Continuation::RegisterAgain,
        }
    }

    #[test]
    fn a_due_heartbeat_asks_for_one_heartbeat_call() {
        let mut out = Vec::new();
        core().heartbeat(&mut out);
        assert_eq!(
            out,
            vec![Action::Call {
                call: CoordinatorCall::Heartbeat,
                then: Continuation::Heartbeat,
            }]
        );
    }

    #[test]
    fn a_heartbeat_that_worked_asks_for_nothing() {
        assert_eq!(
            answer(&core(), Continuation::Heartbeat, Answer::Done(Ok(()))),
            vec![]
        );
    }

    #[test]
    fn a_failed_heartbeat_registers_again_with_the_session_timeout() {
        let out = answer(
            &core(),
            Continuation::Heartbeat,
            Answer::Done(Err(coordinator_error())),
        );
        assert_eq!(out, vec![register_again()]);
    }

    /// A node on its way down must not come back to life in the
    /// coordinator's eyes: a failed heartbeat of a stopped node registers
    /// nothing.
    #[test]
    fn a_stopped_node_does_not_register_again_after_a_failed_heartbeat() {
        let core = core();
        core.stop.store(true, Ordering::SeqCst);
        let out = answer(
            &core,
            Continuation::Heartbeat,
            Answer::Done(Err(coordinator_error())),
        );
        assert_eq!(out, vec![]);
    }

    #[test]
    fn registering_again_takes_the_new_incarnation_and_a_failure_keeps_the_old() {
        let core = core();
        core.registered(Incarnation(3));
        let out = answer(
            &core,
            Continuation::RegisterAgain,
            Answer::Registered(Err(coordinator_error())),
        );
        assert_eq!((out, core.incarnation()), (vec![], Incarnation(3)));
        let out = answer(
            &core,
            Continuation::RegisterAgain,
            Answer::Registered(Ok(Incarnation(8))),
        );
        assert_eq!((out, core.incarnation()), (vec![], Incarnation(8)));
        // The fetchers read the same cell.
        assert_eq!(core.incarnation_cell().load(Ordering::SeqCst), 8);
    }

    #[test]
    fn a_refresh_asks_for_the_live_nodes_incarnations() {
        let mut out = Vec::new();
        core().refresh_incarnations(&mut out);
        assert_eq!(
            out,
            vec![Action::Call {
                call: CoordinatorCall::LiveNodeIncarnations,
                then: Continuation::RefreshIncarnations,
            }]
        );
    }

    /// SPEC 3.2: the view a refresh reads replaces the last one (a node
    /// not listed is not live), but never lowers a listed node's
    /// incarnation: a read that started before a later registration was
    /// learnt must not make the earlier process's fetches count again.
    #[test]
    fn a_refresh_replaces_the_view_but_never_lowers_an_incarnation() {
        let (a, b, gone) = (NodeId(2), NodeId(3), NodeId(4));
        let core = core();
        core.peer_incarnations()
            .learn(&[(a, Incarnation(7)), (gone, Incarnation(1))]);
        let out = answer(
            &core,
            Continuation::RefreshIncarnations,
            Answer::Incarnations(Ok(vec![(a, Incarnation(5)), (b, Incarnation(2))])),
        );
        assert_eq!(out, vec![]);
        let view = core.peer_incarnations();
        assert_eq!(view.get(a), Some(Incarnation(7)));
        assert_eq!(view.check(a, Incarnation(5)), IncarnationCheck::Stale);
        assert_eq!(view.get(b), Some(Incarnation(2)));
        assert_eq!(view.get(gone), None);
    }

    #[test]
    fn a_failed_refresh_keeps_the_view() {
        let a = NodeId(2);
        let core = core();
        core.peer_incarnations().learn(&[(a, Incarnation(7))]);
        let out = answer(
            &core,
            Continuation::RefreshIncarnations,
            Answer::Incarnations(Err(coordinator_error())),
        );
        assert_eq!(out, vec![]);
        assert_eq!(core.peer_incarnations().get(a), Some(Incarnation(7)));
    }

    #[test]
    #[should_panic(expected = "answered with")]
    fn an_answer_paired_with_another_calls_continuation_is_a_driver_bug() {
        answer(
            &core(),
            Continuation::Heartbeat,
            Answer::Registered(Ok(Incarnation(1))),
        );
    }
}
