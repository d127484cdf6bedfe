//! Issue 27: an `IdempotentProducer` keeps up to 5 batches in flight per
//! log. Through a leader crash with batches in flight, every pipelined send
//! is acknowledged, offsets follow call order, and the log holds each value
//! exactly once, in call order: nothing duplicated, nothing lost.

use isrlog::IdempotentProducer;

use crate::support_idempotent::{cluster, committed_values, quick, LOG};

#[test]
fn pipelined_sends_keep_order_and_offsets_through_a_leader_failover_with_nothing_duplicated_or_lost(
) {
    let cluster = cluster();
    let producer = IdempotentProducer::init(&cluster.coordinator, &cluster, quick()).unwrap();
    let values: Vec<Vec<u8>> = (0..20).map(|i| format!("v{i}").into_bytes()).collect();
    let mut sends: Vec<isrlog::ProducerSend<_>> = Vec::new();
    let mut outcomes = Vec::new();
    let mut crashed = None;
    for (i, value) in values.iter().enumerate() {
        if sends.len() == isrlog::IN_FLIGHT_MAX {
            outcomes.push(sends.remove(0).wait());
        }
        sends.push(producer.send_values_pipelined(LOG, &[value]).unwrap());
        if i == 7 {
            // Batches in flight (some not committed yet) lose their leader.
            let leader = cluster.leader_of(LOG).unwrap();
            cluster.crash(leader);
            crashed = Some(leader);
        }
    }
    outcomes.extend(sends.into_iter().map(|send| send.wait()));
    let offsets: Vec<u64> = outcomes
        .iter()
        .map(|outcome| {
            outcome
                .as_ref()
                .expect("every send acknowledged")
                .base_offset
                .0
        })
        .collect();
    assert_eq!(
        offsets,
        (0..20).collect::<Vec<u64>>(),
        "offsets follow call order"
    );
    assert_eq!(committed_values(&cluster, 20), values);
    cluster.restart(crashed.unwrap()).unwrap();
    assert_eq!(committed_values(&cluster, 20), values);
    cluster.shutdown().unwrap();
}
