//! Replica assignment: which nodes host the replicas of a new log (seeds
//! 002/003, SPEC §5). Owns only the placement arithmetic; creating the log
//! at the coordinator is the caller's job.
//!
//! Kafka's `AdminUtils.assignReplicasToBrokers` starts at a random node and
//! shifts followers by a random amount to spread leaders and followers; the
//! seed articles describe the deterministic round-robin form kept here, so
//! that a test (or an operator) can predict placement.

use crate::error::{Error, Result};
use crate::types::NodeId;

/// Replicas of the log with index `log_index` over `nodes`: with `n` nodes,
/// the log goes to `nodes[log_index mod n]` (its preferred leader) and its
/// `j`-th replica to `nodes[(log_index + j) mod n]`.
///
/// Errors: a replication factor of 0 or nodes named twice are
/// [`Error::InvalidConfig`]; a replication factor above the node count is
/// [`Error::ReplicationFactorTooLarge`] (two replicas of one log on one node
/// would share its fate).
pub fn assign_replicas(
    log_index: u32,
    nodes: &[NodeId],
    replication_factor: usize,
) -> Result<Vec<NodeId>> {
    if replication_factor == 0 {
        return Err(Error::InvalidConfig {
            field: "replication_factor",
            value: "0".to_owned(),
            reason: "a log needs at least one replica",
        });
    }
    if replication_factor > nodes.len() {
        return Err(Error::ReplicationFactorTooLarge {
            replication_factor,
            nodes: nodes.len(),
        });
    }
    if nodes
        .iter()
        .enumerate()
        .any(|(i, node)| nodes[..i].contains(node))
    {
        return Err(Error::InvalidConfig {
            field: "nodes",
            value: format!("{nodes:?}"),
            reason: "node ids must be distinct",
        });
    }
    let first = log_index as usize % nodes.len();
    Ok((0..replication_factor)
        .map(|j| nodes[(first + j) % nodes.len()])
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(ids: &[u32]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    #[test]
    fn assign_replicas_table() {
        // (log index, nodes, replication factor, expected replicas)
        let cases: &[(u32, &[u32], usize, &[u32])] = &[
            (0, &[0, 1, 2], 1, &[0]),
            (0, &[0, 1, 2], 3, &[0, 1, 2]),
            (1, &[0, 1, 2], 2, &[1, 2]),
            (2, &[0, 1, 2], 2, &[2, 0]),
            (3, &[0, 1, 2], 2, &[0, 1]),
            (4, &[0, 1, 2], 3, &[1, 2, 0]),
            // Node ids need not be dense: positions in `nodes` count.
            (1, &[10, 20, 30, 40], 3, &[20, 30, 40]),
            (3, &[10, 20, 30, 40], 3, &[40, 10, 20]),
            (u32::MAX, &[0, 1, 2], 2, &[0, 1]),
            (5, &[7], 1, &[7]),
        ];
        for (log_index, ids, replication_factor, expected) in cases {
            assert_eq!(
                assign_replicas(*log_index, &nodes(ids), *replication_factor).unwrap(),
                nodes(expected),
                "log {log_index} over {ids:?} with factor {replication_factor}"
            );
        }
    }

    #[test]
    fn leaders_spread_round_robin() {
        let all = nodes(&[0, 1, 2]);
        let leaders: Vec<NodeId> = (0..6)
            .map(|i| assign_replicas(i, &all, 2).unwrap()[0])
            .collect();
        assert_eq!(leaders, nodes(&[0, 1, 2, 0, 1, 2]));
    }

    #[test]
    fn assign_replicas_errors() {
        assert!(matches!(
            assign_replicas(0, &nodes(&[0, 1, 2]), 4),
            Err(Error::ReplicationFactorTooLarge {
                replication_factor: 4,
                nodes: 3
            })
        ));
        assert!(matches!(
            assign_replicas(0, &[], 1),
            Err(Error::ReplicationFactorTooLarge {
                replication_factor: 1,
                nodes: 0
            })
        ));
        assert!(matches!(
            assign_replicas(0, &nodes(&[0, 1]), 0),
            Err(Error::InvalidConfig {
                field: "replication_factor",
                ..
            })
        ));
        assert!(matches!(
            assign_replicas(0, &nodes(&[0, 1, 0]), 2),
            Err(Error::InvalidConfig { field: "nodes", .. })
        ));
    }
}
