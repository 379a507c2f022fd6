//! The protobuf codec of every generated service: the client crate's
//! (`leasehold_client::pb::codec`), prost's with small per-stream buffers, so that both ends of a
//! lease stream are built alike and a server holding tens of thousands of streams does not spend
//! most of a held lease's memory on 8 KiB buffers.

pub use leasehold_client::pb::codec::SmallBufferCodec;
