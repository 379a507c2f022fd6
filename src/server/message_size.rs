//! The request size limit, answered as a limit.
//!
//! tonic refuses a message above `max_decoding_message_size` with OUT_OF_RANGE. The gRPC spec,
//! grpc-go and grpc-java say RESOURCE_EXHAUSTED, and that is what our clients treat as "a limit
//! of the server", so the answer is rewritten here, with the limit's name in it: on a stream
//! by the driver ([`oversized`]), on a unary call by [`NameTheLimit`] around every service.

use http::HeaderMap;
use tonic::{Code, Status};

use crate::error::Error;

/// tonic's words for a decoded message over the limit.
const TONIC_TOO_LARGE: &str = "decoded message length too large: found ";

/// Our error for tonic's refusal of an oversized message; `None` for any other status.
pub fn oversized(status: &Status, limit: usize) -> Option<Error> {
    if status.code() != Code::OutOfRange {
        return None;
    }
    let (_, rest) = status.message().split_once(TONIC_TOO_LARGE)?;
    let size = rest.split(' ').next()?.parse().ok()?;
    Some(Error::MessageTooLarge { size, limit })
}

/// Rewrites a trailers-only response (how tonic answers a unary request it could not decode)
/// whose status is tonic's oversized refusal.
#[derive(Clone, Copy)]
pub struct NameTheLimit {
    pub limit: usize,
}

impl NameTheLimit {
    pub fn rewrite<B>(self, mut response: http::Response<B>) -> http::Response<B> {
        if let Some(error) = Status::from_header_map(response.headers())
            .and_then(|status| oversized(&status, self.limit))
        {
            let headers: &mut HeaderMap = response.headers_mut();
            headers.remove("grpc-status");
            headers.remove("grpc-message");
            let _ = Status::from(error).add_header(headers);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tonic_s_refusal_becomes_a_named_limit_and_nothing_else_does() {
        let tonic_s = Status::out_of_range(
            "Error, decoded message length too large: found 1048585 bytes, the limit is: 66560 bytes",
        );
        let error = oversized(&tonic_s, 66_560).unwrap();
        let status = Status::from(error);
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(status.message().contains("1048585 bytes"), "{status:?}");
        assert!(status.message().contains("max-message-bytes"), "{status:?}");
        assert!(oversized(&Status::out_of_range("ttl too long"), 10).is_none());
        assert!(oversized(&Status::internal(tonic_s.message()), 10).is_none());
    }
}
