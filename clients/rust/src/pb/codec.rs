//! The protobuf codec of every generated client (and, through the server crate's re-export, every
//! service): prost's, with small buffers.
//!
//! tonic gives each stream an 8 KiB encode and an 8 KiB decode buffer up front. Our messages are
//! tens of bytes and a server holds tens of thousands of lease streams, so those buffers were
//! most of a held lease's memory. Buffers still grow on demand for a larger message.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::ProstCodec;

/// Initial size of a stream's encode and decode buffers.
const BUFFER_SIZE: usize = 256;
/// tonic's default: how much encoded data a stream may batch before yielding.
const YIELD_THRESHOLD: usize = 32 * 1024;

/// [`ProstCodec`] with [`BUFFER_SIZE`] buffers; named by `build.rs` as the generated code's codec.
#[derive(Debug, Clone)]
pub struct SmallBufferCodec<T, U> {
    _messages: PhantomData<(T, U)>,
}

impl<T, U> Default for SmallBufferCodec<T, U> {
    fn default() -> Self {
        SmallBufferCodec {
            _messages: PhantomData,
        }
    }
}

impl<T, U> Codec for SmallBufferCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = <ProstCodec<T, U> as Codec>::Decoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::new(BUFFER_SIZE, YIELD_THRESHOLD))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(BufferSettings::new(BUFFER_SIZE, YIELD_THRESHOLD))
    }
}
