//! Issue 24, item 3: a deleted counter must not restart at zero. Opening
//! the coordinator used to recreate `/producer_ids` and `/controller` at 0
//! when they were missing, so an operator who deleted them (as Kafka
//! operators delete `/controller` to force a re-election) got producer ids
//! handed out twice (breaking idempotence) and controller epochs going
//! back (breaking the fencing of a deposed controller). Now the epoch
//! record is recreated above every earlier epoch and the producer id
//! counter from its high mark; with both producer id records gone,
//! reserving ids fails and says what to do.

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

#[test]
fn deleted_counters_recover_above_every_earlier_value_on_reopen() {
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
        c.resign_controller(node).unwrap();
        (epoch, ids)
    };
    raw.delete_all("/controller").unwrap();
    raw.delete_all("/producer_ids").unwrap();

    let c = ZkCoordinator::connect(config).expect("reopen");
    c.register_node(node, Duration::from_secs(20)).unwrap();
    let epoch = c.try_become_controller(node).unwrap().expect("seat free");
    assert!(
        epoch > first_epoch,
        "epoch {epoch} after deletion, {first_epoch} before"
    );
    let id = c.allocate_producer_id().unwrap().0;
    let max = *first_ids.iter().max().unwrap();
    assert!(
        id > max,
        "producer id {id} handed out again (earlier: {first_ids:?})"
    );
}

#[test]
fn counters_deleted_while_running_keep_growing() {
    let server = server();
    let config = config(server.connect_string(), "/deleted-while-running");
    let c = ZkCoordinator::connect(config.clone()).expect("connect");
    let raw = ZkShell::connect(&server.connect_string(), &config.chroot).expect("shell");
    let (a, b) = (NodeId(1), NodeId(2));
    c.register_node(a, Duration::from_secs(20)).unwrap();
    c.register_node(b, Duration::from_secs(20)).unwrap();

    // Deleting the seat forces a re-election with a higher epoch.
    let mut last = c.try_become_controller(a).unwrap().expect("seat free");
    raw.delete_all("/controller/seat").unwrap();
    let epoch = c.try_become_controller(b).unwrap().expect("seat free");
    assert!(epoch > last, "{epoch} after {last}");
    last = epoch;

    // Deleting the whole record (zkCli's deleteall /controller) too.
    raw.delete_all("/controller").unwrap();
    let epoch = c.try_become_controller(a).unwrap().expect("seat free");
    assert!(epoch > last, "{epoch} after {last}");
    assert_eq!(c.controller().unwrap(), Some((a, epoch)));
    last = epoch;
    c.resign_controller(a).unwrap();
    let epoch = c.try_become_controller(b).unwrap().expect("seat free");
    assert!(epoch > last, "{epoch} after {last}");

    // Producer ids: the counter, then its high mark, deleted between
    // blocks (of 2): ids stay unique and growing.
    let mut ids = vec![c.allocate_producer_id().unwrap().0];
    ids.push(c.allocate_producer_id().unwrap().0);
    raw.delete_all("/producer_ids").unwrap();
    ids.push(c.allocate_producer_id().unwrap().0);
    ids.push(c.allocate_producer_id().unwrap().0);
    raw.delete_all("/producer_ids_high_mark").unwrap();
    ids.push(c.allocate_producer_id().unwrap().0);
    ids.push(c.allocate_producer_id().unwrap().0);
    assert!(raw.exists("/producer_ids_high_mark").unwrap());
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // Both gone: no id from 0 again, but an error saying what to do.
    raw.delete_all("/producer_ids").unwrap();
    raw.delete_all("/producer_ids_high_mark").unwrap();
    match c.allocate_producer_id() {
        Err(Error::Coordinator { reason }) => {
            assert!(reason.contains("create /producer_ids"), "{reason}")
        }
        other => panic!("ids must not restart at 0: {other:?}"),
    }
    let reopened = ZkCoordinator::connect(config).expect("a node still opens");
    assert!(
        !raw.exists("/producer_ids").unwrap(),
        "the counter was reset"
    );
    assert!(reopened.allocate_producer_id().is_err());
}
