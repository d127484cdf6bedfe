//! What the pipelined idempotent producer tests share: a 3-node cluster
//! with min ISR 2, quick retry budgets, and the committed values of a log.

use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{Isolation, LogId, ProducerConfig};

pub const LOG: LogId = LogId(0);

pub fn cluster() -> Cluster {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    cluster
}

pub fn quick() -> ProducerConfig {
    ProducerConfig {
        retries_max: 1_000,
        delivery_timeout: Duration::from_secs(15),
        retry_backoff: Duration::from_millis(5),
    }
}

/// Every committed record value of `LOG`, read from its leader, waiting
/// (bounded) for a leader whose high watermark reached `at_least` values.
pub fn committed_values(cluster: &Cluster, at_least: usize) -> Vec<Vec<u8>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(leader) = cluster.leader_log(LOG) {
            let hw = leader.high_watermark();
            let mut values = Vec::new();
            let mut next = leader.log_start_offset();
            let mut complete = true;
            while next < hw {
                let Ok(batches) = leader.read(next, 1 << 20, Isolation::Committed) else {
                    complete = false;
                    break;
                };
                if batches.is_empty() {
                    complete = false;
                    break;
                }
                for batch in batches {
                    for record in batch.records() {
                        let record = record.unwrap();
                        if record.offset >= next {
                            values.push(record.value.to_vec());
                        }
                    }
                    next = batch.next_offset();
                }
            }
            if complete && values.len() >= at_least {
                return values;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no leader committed {at_least} values in time"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
