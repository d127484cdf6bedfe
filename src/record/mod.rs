//! Record batches: the byte layout every layer agrees on (storage writes it,
//! the network carries it, followers append it unchanged), the builder that
//! makes one, and the zero-copy reader that takes one apart.

mod batch;
mod builder;

pub use batch::{BatchHeader, BatchIter, Record, RecordBatch, Records};
// Used by the storage layer and the transport codecs.
#[allow(unused_imports)]
pub(crate) use batch::{
    compute_crc, decode_header_fields, merge_records, parse_header, parse_whole_header, seal_crc,
    set_base_offset, set_leader_epoch, HeaderError, BATCH_BYTES_MAX, BATCH_HEADER_BYTES,
    BATCH_OVERHEAD_BYTES,
};
pub use builder::{RecordBatchBuilder, RecordData};
