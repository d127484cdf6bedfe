//! Issue 24, item 3: a deleted counter must not restart at zero. Opening
//! the coordinator used to recreate `/producer_ids` and the controller
//! epoch record when they were missing; a recreated znode starts again at
//! version 0, so producer ids could be handed out twice (breaking
//! idempotence) and a node that read the record's version before the
//! deletion could pass its conditional write once the new znode reached
//! that version again (controller epochs going back). Now, as in Kafka's
//! layout, the epoch lives in `/controller_epoch` and the seat is the
//! ephemeral `/controller`: deleting `/controller` only forces a
//! re-election. The two counters are created once, with the cluster: a
//! missing one is an error naming it (no election, no allocation) until an
//! operator restores it, and nodes still open meanwhile.

use std::time::Duration;

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::ZkShell;
use isrlog::{Coordinator, Error, NodeId, ZkCoordinator, ZkCoordinatorConfig};

fn config(connect: String, chroot: &str) -> ZkCoordinatorConfig {
    let mut config = ZkCoordinatorConfig::new(connect);
    config.chroot = chroot.to_owned();
    config.producer_id_block_size = 2;
    config
}

/// Asserts that `outcome` is a clear error naming `znode`.
fn assert_missing<T: std::fmt::Debug>(outcome: isrlog::Result<T>, znode: &str) {
    match outcome {
        Err(Error::CoordinatorDocument { path, reason }) => {
            assert_eq!(path, znode, "{reason}");
            assert!(reason.contains("missing"), "{reason}");
        }
        other => panic!("{znode} deleted: expected an error naming it, got {other:?}"),
    }
}

#[test]
fn deleted_counters_are_an_error_not_a_reset_on_reopen() {
    let server = server();
    let config = config(server.connect_string(), "/deleted-counters");
    let node = NodeId(1);
    let raw;
    let (first_epoch, first_ids) = {
        let c = ZkCoordinator::connect(config.clone()).expect("connect");
        raw = ZkShell::connect(&server.connect_string(), &config.chroot).expect("shell");
        c.register_node(node, Duration::from_secs(20)).unwrap();
        let mut epoch = c.try_become_controller(node).unwrap().expect("seat free");
        for _ in 0..3 {
            c.resign_controller(node).unwrap();
            epoch = c.try_become_controller(node).unwrap().expect("seat free");
        }
        let ids: Vec<i64> = (0..5)
            .map(|_| c.allocate_producer_id().unwrap().0)
            .collect();
        (epoch, ids)
    };
    // The seat (as `deleteall /controller`) goes with the session anyway;
    // the counters are deleted by hand.
    let _ = raw.delete_all("/controller");
    raw.delete_all("/controller_epoch").unwrap();
    raw.delete_all("/producer_ids").unwrap();

    let c = ZkCoordinator::connect(config.clone()).expect("a node still opens");
    assert!(!raw.exists("/controller_epoch").unwrap(), "epoch recreated");
    assert!(!raw.exists("/producer_ids").unwrap(), "counter recreated");
    c.register_node(node, Duration::from_secs(20)).unwrap();
    assert_missing(c.try_become_controller(node), "/controller_epoch");
    assert_missing(c.allocate_producer_id(), "/producer_ids");
    assert!(!raw.exists("/controller").unwrap(), "a seat without epoch");

    // The operator restores both above every earlier value.
    let restored = first_epoch.0 + 100;
    raw.create(
        "/controller_epoch",
        format!(r#"{{"format":1,"epoch":{restored},"controller":null,"epoch_base":{restored}}}"#)
            .as_bytes(),
    )
    .unwrap();
    let max = *first_ids.iter().max().unwrap();
    raw.create(
        "/producer_ids",
        format!(r#"{{"format":1,"next_block_start":{}}}"#, max + 10).as_bytes(),
    )
    .unwrap();
    let epoch = c.try_become_controller(node).unwrap().expect("seat free");
    assert!(
        epoch.0 > restored,
        "epoch {epoch} after restoring {restored}"
    );
    let id = c.allocate_producer_id().unwrap().0;
    assert!(id > max, "producer id {id} handed out again: {first_ids:?}");
}

#[test]
fn counters_deleted_while_running_keep_growing_or_stop() {
    let server = server();
    let config = config(server.connect_string(), "/deleted-while-running");
    let c = ZkCoordinator::connect(config.clone()).expect("connect");
    let raw = ZkShell::connect(&server.connect_string(), &config.chroot).expect("shell");
    let (a, b) = (NodeId(1), NodeId(2));
    c.register_node(a, Duration::from_secs(20)).unwrap();
    c.register_node(b, Duration::from_secs(20)).unwrap();

    // Deleting the seat (`deleteall /controller`, Kafka's habit) forces a
    // re-election with a higher epoch, each time; the epoch record's
    // version only grows (a recreated record would start again at 0).
    let mut last = c.try_become_controller(a).unwrap().expect("seat free");
    let mut version = raw.get("/controller_epoch").unwrap().1;
    for (round, next) in [b, a, b].into_iter().enumerate() {
        raw.delete_all("/controller").unwrap();
        assert_eq!(c.controller().unwrap(), None, "round {round}");
        let epoch = c.try_become_controller(next).unwrap().expect("seat free");
        assert!(epoch > last, "round {round}: {epoch} after {last}");
        assert_eq!(c.controller().unwrap(), Some((next, epoch)));
        let now = raw.get("/controller_epoch").unwrap().1;
        assert!(
            now > version,
            "round {round}: version {now} after {version}"
        );
        (last, version) = (epoch, now);
    }

    // Producer ids: unique and growing across blocks (of 2); a deleted
    // counter stops allocation rather than restarting it.
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(c.allocate_producer_id().unwrap().0);
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // Use up the block this coordinator holds, then delete the counter.
    ids.push(c.allocate_producer_id().unwrap().0);
    raw.delete_all("/producer_ids").unwrap();
    assert_missing(c.allocate_producer_id(), "/producer_ids");
    assert!(
        !raw.exists("/producer_ids").unwrap(),
        "the counter was reset"
    );
    let reopened = ZkCoordinator::connect(config).expect("a node still opens");
    assert_missing(reopened.allocate_producer_id(), "/producer_ids");
    assert!(!raw.exists("/producer_ids").unwrap());

    // Deleting the epoch record: no election until it is restored (the
    // seat is emptied too, as an operator forcing a re-election would).
    raw.delete_all("/controller_epoch").unwrap();
    raw.delete_all("/controller").unwrap();
    assert_missing(c.try_become_controller(a), "/controller_epoch");
    assert!(!raw.exists("/controller_epoch").unwrap());
}
