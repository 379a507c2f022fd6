//! Any bytes, decoded as each message a client can send (`Message::decode`), then through the
//! checks the server runs before anything touches Redis: no panic, every accepted request
//! within the documented limits and carried unchanged, every refused one refused as
//! INVALID_ARGUMENT and only when it breaks a limit (see src/lib.rs).
#![no_main]

use leasehold_fuzz::{
    ClientRequest, EachRequest, check_constants, check_round_trip, for_each_request,
};
use libfuzzer_sys::fuzz_target;

/// Decodes the input as each request type in turn.
struct Decode<'a>(&'a [u8]);

impl EachRequest for Decode<'_> {
    fn each<R: ClientRequest>(&mut self) {
        if let Ok(message) = R::decode(self.0) {
            check_round_trip(&message, self.0.len());
            message.validate();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check_constants();
    for_each_request(&mut Decode(data));
});
