//! `ZkCoordinator` against real ZooKeeper servers (feature `zookeeper`); each
//! test starts its own server on a free loopback port.
//!
//! One test binary per area (issue 22): each module is one rule's test file,
//! so `cargo test NAME` still selects a test by its file's or its own name.

#[path = "../support/zookeeper_support.rs"]
mod zookeeper_support;

mod zookeeper_a_directories_document_with_an_unknown_field_reads;
mod zookeeper_a_lost_reply_never_loses_acknowledged_records;
mod zookeeper_an_earlier_layouts_controller_epoch_moves_once;
mod zookeeper_an_earlier_versions_high_mark_keeps_up_with_the_counter;
mod zookeeper_an_emptied_data_directory_loses_nothing_acknowledged;
mod zookeeper_an_unreadable_znode_stops_only_itself;
mod zookeeper_committed_never_lost_under_random_faults;
mod zookeeper_connection_loss_is_not_session_loss;
mod zookeeper_coordinator_conforms;
mod zookeeper_deleted_counters_do_not_restart;
mod zookeeper_deleting_controller_under_idempotent_producers_keeps_ids_unique;
mod zookeeper_ensemble_leader_kill_keeps_isrlog_serving;
mod zookeeper_failover_loses_no_acknowledged_record;
mod zookeeper_lease_lapses_under_steady_changes;
mod zookeeper_membership_does_not_depend_on_the_controller_znodes;
mod zookeeper_nodes_changed_agrees_with_live_nodes;
mod zookeeper_quorum_loss_is_not_session_loss;
mod zookeeper_registration_with_a_lost_reply_is_outcome_unknown;
mod zookeeper_server_restart_loses_no_acknowledged_record;
mod zookeeper_session_expiry_fences_a_partitioned_leader;
mod zookeeper_short_outage_keeps_a_busy_nodes_session;
mod zookeeper_singleton_documents_keep_unknown_fields;
