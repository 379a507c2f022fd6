//! Any bytes as the body of a gRPC request, read the way the server reads one: tonic's
//! `Streaming` with our codec's decoder (src/pb/codec.rs, `SmallBufferCodec`) and the server's
//! message size limit, in chunks as the transport may cut them. Input: one byte picks the
//! request type, one the chunk size (0: one chunk), the rest is the body.
//!
//! No panic, and every outcome as a model of the gRPC framing predicts it: each 5-byte header
//! (flag 0, big-endian length) and its message decoded as prost decodes it alone, then checked
//! as the server checks it; an oversized length refused so that `message_size::oversized` names
//! the limit (RESOURCE_EXHAUSTED), any other unreadable frame an error the driver reports as
//! UNREADABLE_REQUEST. The server stops reading a stream at its first error; so does this.
#![no_main]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use leasehold::error::Error;
use leasehold::pb::codec::SmallBufferCodec;
use leasehold::server::MAX_REQUEST_BYTES;
use leasehold::server::message_size::oversized;
use leasehold_fuzz::{
    ClientRequest, EachRequest, check_refusal, check_round_trip, now, with_request,
};
use libfuzzer_sys::fuzz_target;
use tonic::Code;
use tonic::codec::Codec;

const HEADER: usize = 5;

/// A request body already received, in chunks.
struct Chunks(VecDeque<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(
            self.get_mut()
                .0
                .pop_front()
                .map(|chunk| Ok(Frame::data(chunk))),
        )
    }
}

/// What reading the next message must give.
#[derive(Debug)]
enum Expected<R> {
    End,
    Message(R, usize),
    /// Over the size limit: the length the header announced.
    TooLarge(usize),
    /// Unreadable: broken framing, or a message prost cannot decode.
    Unreadable(Code),
}

/// The gRPC framing, as the spec writes it, over the whole body.
struct Model<'a> {
    body: &'a [u8],
}

impl Model<'_> {
    fn next<R: ClientRequest>(&mut self) -> Expected<R> {
        let rest = self.body;
        if rest.is_empty() {
            return Expected::End;
        }
        if rest.len() < HEADER {
            return Expected::Unreadable(Code::Internal);
        }
        if rest[0] != 0 {
            // 1: compressed, but the server accepts no compression; anything else: no such flag.
            return Expected::Unreadable(Code::Internal);
        }
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        if len > MAX_REQUEST_BYTES {
            return Expected::TooLarge(len);
        }
        let payload = &rest[HEADER..];
        if payload.is_empty() && len > 0 {
            // tonic: a header whose message never comes reads as the end of the stream (the
            // header was taken from the buffer, and an empty buffer at the end is a clean end).
            return Expected::End;
        }
        if payload.len() < len {
            return Expected::Unreadable(Code::Internal);
        }
        self.body = &payload[len..];
        match R::decode(&payload[..len]) {
            Ok(message) => Expected::Message(message, len),
            Err(_) => Expected::Unreadable(Code::Internal),
        }
    }
}

struct Read<'a> {
    chunk: usize,
    body: &'a [u8],
}

impl EachRequest for Read<'_> {
    fn each<R: ClientRequest>(&mut self) {
        let chunks: VecDeque<Bytes> = match self.chunk {
            0 => [self.body]
                .into_iter()
                .filter(|body| !body.is_empty())
                .map(Bytes::copy_from_slice)
                .collect(),
            size => self.body.chunks(size).map(Bytes::copy_from_slice).collect(),
        };
        // The server's codec for this request type (the encoded type does not matter here).
        let decoder = SmallBufferCodec::<R, R>::default().decoder();
        let mut stream =
            tonic::Streaming::new_request(decoder, Chunks(chunks), None, Some(MAX_REQUEST_BYTES));
        let mut model = Model { body: self.body };
        loop {
            let read = now(stream.message());
            let expected = model.next::<R>();
            match (read, expected) {
                (Ok(None), Expected::End) => break,
                (Ok(Some(message)), Expected::Message(decoded, len)) => {
                    assert_eq!(
                        message,
                        decoded,
                        "{}: the codec and prost disagree",
                        R::NAME
                    );
                    check_round_trip(&message, len);
                    message.validate();
                }
                (Err(status), Expected::TooLarge(len)) => {
                    // As the driver and `NameTheLimit` read it: a named limit.
                    match oversized(&status, MAX_REQUEST_BYTES) {
                        Some(Error::MessageTooLarge { size, limit }) => {
                            assert_eq!((size, limit), (len, MAX_REQUEST_BYTES), "{status:?}");
                        }
                        other => panic!(
                            "{}: an oversized message ({len} bytes) not named as such: {status:?} -> {other:?}",
                            R::NAME
                        ),
                    }
                    let error = oversized(&status, MAX_REQUEST_BYTES).unwrap();
                    check_refusal(R::NAME, error, Code::ResourceExhausted);
                    break;
                }
                (Err(status), Expected::Unreadable(code)) => {
                    assert_eq!(status.code(), code, "{}: {status:?}", R::NAME);
                    assert!(
                        oversized(&status, MAX_REQUEST_BYTES).is_none(),
                        "{}: {status:?} read as an oversized message",
                        R::NAME
                    );
                    check_refusal(R::NAME, Error::Unreadable(status), Code::InvalidArgument);
                    break;
                }
                (read, expected) => panic!(
                    "{}: read {read:?}, the framing says {expected:?} (chunks of {})",
                    R::NAME,
                    self.chunk
                ),
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [kind, chunk, body @ ..] = data else {
        return;
    };
    let mut read = Read {
        chunk: usize::from(*chunk),
        body,
    };
    with_request(usize::from(*kind), &mut read);
});
