//! Issue 24 review, finding 2: an operator who restores a deleted
//! `/controller_epoch` while a controller still sits leaves a seat that
//! the restored record's election did not create (its creation zxid is not
//! the record's modification zxid): nobody counts as controller, and every
//! candidate's seat creation failed with `NodeExists`, read again at once
//! and spun until its deadline ("the seat kept changing"). Now the
//! restoring instructions say to delete `/controller` too, and an election
//! that finds such a seat fails at once with an error naming it and what
//! to do; once it is deleted, the next election is above the restored
//! epoch.

use std::time::{Duration, Instant};

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::ZkShell;
use isrlog::{Coordinator, Error, NodeId, ZkCoordinator, ZkCoordinatorConfig};

/// Asserts `outcome` is an error about `znode` telling to delete the seat.
fn assert_names_the_seat<T: std::fmt::Debug>(outcome: isrlog::Result<T>, znode: &str) {
    match outcome {
        Err(Error::CoordinatorDocument { path, reason }) => {
            assert_eq!(path, znode, "{reason}");
            assert!(reason.contains("deleteall /controller"), "{reason}");
        }
        other => panic!("expected an error naming {znode}, got {other:?}"),
    }
}

#[test]
fn a_seat_left_from_before_a_restore_is_named_and_deleting_it_lets_an_election_through() {
    let server = server();
    let chroot = "/restored-epoch";
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = chroot.to_owned();
    let c = ZkCoordinator::connect(config.clone()).expect("connect");
    let raw = ZkShell::connect(&server.connect_string(), chroot).expect("shell");
    let (a, b) = (NodeId(1), NodeId(2));
    c.register_node(a, Duration::from_secs(20)).unwrap();
    c.register_node(b, Duration::from_secs(20)).unwrap();
    let first = c.try_become_controller(a).unwrap().expect("seat free");

    raw.delete_all("/controller_epoch").unwrap();
    // The instructions for the missing record include the seat.
    match c.try_become_controller(b) {
        Err(Error::CoordinatorDocument { path, reason }) => {
            assert_eq!(path, "/controller_epoch", "{reason}");
            assert!(reason.contains("deleteall /controller"), "{reason}");
        }
        other => panic!("/controller_epoch deleted: expected an error naming it, got {other:?}"),
    }

    let restored = first.0 + 100;
    raw.create(
        "/controller_epoch",
        format!(r#"{{"format":1,"epoch":{restored},"controller":null,"epoch_base":{restored}}}"#)
            .as_bytes(),
    )
    .unwrap();
    assert!(
        raw.exists("/controller").unwrap(),
        "{a}'s seat is still there"
    );
    assert_eq!(c.controller().unwrap(), None, "the old seat is nobody's");
    let started = Instant::now();
    assert_names_the_seat(c.try_become_controller(b), "/controller");
    assert!(
        started.elapsed() < config.call_timeout,
        "the election spun for {:?}",
        started.elapsed()
    );

    raw.delete_all("/controller").unwrap();
    let epoch = c.try_become_controller(b).unwrap().expect("seat free");
    assert!(
        epoch.0 > restored,
        "epoch {epoch} after restoring {restored}"
    );
    assert_eq!(c.controller().unwrap(), Some((b, epoch)));
    assert_eq!(c.try_become_controller(a).unwrap(), None, "{b} sits");
}
