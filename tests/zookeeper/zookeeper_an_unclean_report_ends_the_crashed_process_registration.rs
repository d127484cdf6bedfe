//! SPEC G1 (review finding: an ISR expansion built before an unclean
//! restart). Under ZooKeeper a crashed process's session, and with it the
//! ephemeral znode that carries its incarnation, lives on until the
//! session expires, so a leader that checks the follower's registration
//! again after its expansion was fenced by the restarted process's
//! unclean-shutdown report still finds the crashed incarnation current.
//! `ZkCoordinator::unregister_node` only ends sessions its own client
//! holds, and a restarted process holds none. The report therefore ends
//! the registration through `Coordinator::unregister_previous_process`,
//! which `ZkCoordinator` implements by deleting the znode whichever
//! session owns it. Without it the crashed process stays live here (and
//! the restarted process could not register until the old session
//! expired).

use std::time::{Duration, Instant};

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::ZkServer;
use isrlog::{
    CasOutcome, Coordinator, LeaderEpoch, LogEnd, LogId, LogUpdate, NodeId, Offset, ZkCoordinator,
    ZkCoordinatorConfig,
};

/// Long: the crashed process's session must not expire during the test.
const SESSION_TIMEOUT: Duration = Duration::from_secs(20);
const LOG: LogId = LogId(1);
const VICTIM: NodeId = NodeId(3);

/// A coordinator client of its own: one process's.
fn connect(server: &ZkServer, chroot: &str) -> ZkCoordinator {
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = chroot.to_owned();
    config.session_timeout = SESSION_TIMEOUT;
    ZkCoordinator::connect(config).unwrap_or_else(|e| panic!("cannot connect: {e}"))
}

#[test]
fn an_unclean_report_ends_the_crashed_process_registration() {
    let server = server();
    let chroot = "/unclean-report-ends-registration";
    // The leader's process, and the victim's process that is about to
    // crash: its client is never closed, as a crashed process's is not.
    let leader = connect(&server, chroot);
    let crashed = connect(&server, chroot);
    for node in [NodeId(1), NodeId(2)] {
        leader.register_node(node, SESSION_TIMEOUT).unwrap();
    }
    let counted = crashed.register_node(VICTIM, SESSION_TIMEOUT).unwrap();
    let created = leader
        .create_log(LOG, vec![NodeId(1), NodeId(2), VICTIM])
        .unwrap();
    let shrunk = match leader
        .compare_and_set(
            LOG,
            created.leader_epoch,
            created.version,
            LogUpdate::in_sync_replicas(&created, vec![NodeId(1), NodeId(2)], 2),
        )
        .unwrap()
    {
        CasOutcome::Applied(state) => state,
        CasOutcome::Stale(state) => panic!("stale: {state:?}"),
    };
    // The leader checks the victim's registration for an expansion.
    assert!(leader
        .live_node_incarnations()
        .unwrap()
        .contains(&(VICTIM, counted)));
    let expansion = LogUpdate::in_sync_replicas(&shrunk, vec![NodeId(1), NodeId(2), VICTIM], 2);

    // The victim loses power; its new process reports the unclean
    // shutdown through a client of its own.
    let restarted = connect(&server, chroot);
    let changed = restarted
        .report_unclean_shutdown(
            VICTIM,
            &[(
                LOG,
                Some(LogEnd {
                    last_epoch: Some(LeaderEpoch(0)),
                    log_end_offset: Offset(2),
                    ..Default::default()
                }),
            )],
        )
        .unwrap();
    assert!(changed.is_empty(), "{changed:?}");

    // The expansion is refused, and the leader's next check no longer
    // finds the crashed process.
    let outcome = leader
        .compare_and_set(LOG, shrunk.leader_epoch, shrunk.version, expansion)
        .unwrap();
    assert!(!outcome.is_applied(), "{outcome:?}");
    let live = leader.live_node_incarnations().unwrap();
    assert!(
        !live.iter().any(|(node, _)| *node == VICTIM),
        "the crashed process's registration outlived the report: {live:?}"
    );

    // The restarted process registers at once, not when the crashed
    // session expires.
    let started = Instant::now();
    let incarnation = restarted.register_node(VICTIM, SESSION_TIMEOUT).unwrap();
    assert!(
        started.elapsed() < SESSION_TIMEOUT / 2,
        "{:?}",
        started.elapsed()
    );
    assert!(incarnation > counted, "{incarnation} after {counted}");
    assert!(leader
        .live_node_incarnations()
        .unwrap()
        .contains(&(VICTIM, incarnation)));
    drop(crashed);
}
