//! Configuration of one log, with Kafka's defaults where Kafka has one, and
//! its validation. Owns nothing else.

use std::time::Duration;

use super::flush::FlushPolicy;
use super::offset_index::INDEX_ENTRY_BYTES;
use crate::error::{Error, Result};
use crate::record::{BATCH_BYTES_MAX, BATCH_HEADER_BYTES};

/// How one log stores, rolls, flushes and retains its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// A segment rolls when the next batch would take it past this size (a
    /// larger batch gets a segment of its own, as in Kafka). Default 1 GiB (Kafka's `segment.bytes`); at most `u32::MAX`, since
    /// index positions are 32-bit.
    pub segment_bytes_max: u64,
    /// A segment rolls once it is older than this (measured from when this
    /// process created or opened it). Default 7 days (Kafka's `segment.ms`).
    pub segment_age_max: Duration,
    /// One index entry per this many bytes appended. Default 4096 (Kafka's
    /// `index.interval.bytes`).
    pub index_interval_bytes: u64,
    /// Size the active segment's index is preallocated to; a full index
    /// rolls the segment. Default 10 MiB (Kafka's `segment.index.bytes`).
    pub index_bytes_max: u64,
    /// When appends are fsynced. Default [`FlushPolicy::Never`], as in Kafka.
    pub flush_policy: FlushPolicy,
    /// Retention deletes old segments while the log is larger than this.
    /// Default `None`: unlike Kafka's 7 day `retention.ms`, a write-ahead log
    /// embedded in a database keeps everything unless told otherwise. A
    /// replicated log never deletes at or above its deletion bound (the
    /// high watermark and, by default, the lowest applied position:
    /// `ReplicationConfig::retain_until_applied`), whatever this says.
    pub retention_bytes: Option<u64>,
    /// Retention deletes segments whose newest record is older than this.
    /// Default `None` (see `retention_bytes`).
    pub retention_age: Option<Duration>,
    /// The largest batch an append accepts. Default 1 MiB (Kafka's
    /// `max.message.bytes` is about that); at most the codec's 64 MiB.
    pub batch_bytes_max: usize,
    /// An idempotent producer whose newest batch's timestamp is this far
    /// behind the log's clock is forgotten (its retries are no longer
    /// deduplicated). Default 1 day, Kafka's `producer.id.expiration.ms`.
    pub producer_id_expiration: Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes_max: 1024 * 1024 * 1024,
            segment_age_max: Duration::from_secs(7 * 24 * 3600),
            index_interval_bytes: 4096,
            index_bytes_max: 10 * 1024 * 1024,
            flush_policy: FlushPolicy::Never,
            retention_bytes: None,
            retention_age: None,
            batch_bytes_max: 1024 * 1024,
            producer_id_expiration: Duration::from_secs(24 * 3600),
        }
    }
}

fn invalid(field: &'static str, value: impl std::fmt::Debug, reason: &'static str) -> Error {
    Error::InvalidConfig {
        field,
        value: format!("{value:?}"),
        reason,
    }
}

impl LogConfig {
    /// Checks every field; `Error::InvalidConfig` names the first bad one.
    pub fn validate(&self) -> Result<()> {
        if self.batch_bytes_max < BATCH_HEADER_BYTES || self.batch_bytes_max > BATCH_BYTES_MAX {
            return Err(invalid(
                "batch_bytes_max",
                self.batch_bytes_max,
                "must be between the 61 byte batch header and the 64 MiB codec maximum",
            ));
        }
        if self.segment_bytes_max > u64::from(u32::MAX) {
            return Err(invalid(
                "segment_bytes_max",
                self.segment_bytes_max,
                "must fit the 32-bit positions of the offset index",
            ));
        }
        if self.segment_bytes_max == 0 {
            return Err(invalid("segment_bytes_max", 0, "must be positive"));
        }
        if self.segment_age_max.is_zero() {
            return Err(invalid(
                "segment_age_max",
                self.segment_age_max,
                "must be positive",
            ));
        }
        if self.index_bytes_max < INDEX_ENTRY_BYTES as u64 {
            return Err(invalid(
                "index_bytes_max",
                self.index_bytes_max,
                "must hold at least one 8 byte index entry",
            ));
        }
        if self.index_bytes_max > u64::from(u32::MAX) {
            return Err(invalid(
                "index_bytes_max",
                self.index_bytes_max,
                "must be below 4 GiB",
            ));
        }
        if let FlushPolicy::Every { messages, interval } = self.flush_policy {
            if messages == 0 || interval.is_zero() {
                return Err(invalid(
                    "flush_policy",
                    self.flush_policy,
                    "Every needs a positive message count and interval (use Always)",
                ));
            }
        }
        if self.retention_bytes == Some(0) {
            return Err(invalid(
                "retention_bytes",
                self.retention_bytes,
                "must be positive (None keeps everything)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_fields_are_named() {
        LogConfig::default().validate().unwrap();
        let d = LogConfig::default;
        let table: Vec<(&str, LogConfig)> = vec![
            (
                "batch_bytes_max",
                LogConfig {
                    batch_bytes_max: 10,
                    ..d()
                },
            ),
            (
                "batch_bytes_max",
                LogConfig {
                    batch_bytes_max: 65 << 20,
                    ..d()
                },
            ),
            (
                "segment_bytes_max",
                LogConfig {
                    segment_bytes_max: 1 << 33,
                    ..d()
                },
            ),
            (
                "segment_bytes_max",
                LogConfig {
                    segment_bytes_max: 0,
                    ..d()
                },
            ),
            (
                "segment_age_max",
                LogConfig {
                    segment_age_max: Duration::ZERO,
                    ..d()
                },
            ),
            (
                "index_bytes_max",
                LogConfig {
                    index_bytes_max: 7,
                    ..d()
                },
            ),
            (
                "flush_policy",
                LogConfig {
                    flush_policy: FlushPolicy::Every {
                        messages: 0,
                        interval: Duration::from_secs(1),
                    },
                    ..d()
                },
            ),
            (
                "retention_bytes",
                LogConfig {
                    retention_bytes: Some(0),
                    ..d()
                },
            ),
        ];
        for (field, config) in table {
            match config.validate() {
                Err(Error::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
