//! What one kind of held-lease stream (`Lease`, `Campaign`) declares for the driver: how it
//! reads its messages, names its parts, and says what the lease's life tells; the driver
//! ([`super::driver`]) runs every kind's stream the same way.

use std::convert::Infallible;
use std::time::Duration;

use tonic::Status;

use super::auth::Scope;
use crate::error::{Error, Result};
use crate::lease::acquire::WaitingState;
use crate::lease::held::{HeldLease, Holding};
use crate::lease::life::{LostCode, Vouched};
use crate::lease::spec::{LeaseSpec, LockName};
use crate::pb;

/// A client message, as the driver sees it.
pub enum Move<S, M> {
    /// The message that opens the lease (`acquire`, `start`).
    Start(S),
    /// Let go (`release`, `resign`).
    Release,
    /// A message of this kind of stream alone (`proclaim`).
    Other(M),
    NoAction,
    HalfClosed,
    /// The request could not be read, or the transport failed.
    Broken(Status),
}

/// What a stream-specific step came to.
pub enum Step<R> {
    /// Still held; send this.
    Reply(R),
    /// The lease is gone, for this reason.
    Lost(String),
}

/// How a kind of stream names its parts, in logs and in the errors its clients read.
#[derive(Clone, Copy)]
pub struct Words {
    /// The stream: "lease", "campaign".
    pub stream: &'static str,
    /// Its first message: "acquire", "start".
    pub start: &'static str,
    /// Its letting go: "release", "resign".
    pub release: &'static str,
    /// Every action a request may set.
    pub actions: &'static str,
    /// What it holds: "lock", "leadership".
    pub held: &'static str,
}

impl Words {
    /// The words in the order the fields list them.
    pub const fn new(
        stream: &'static str,
        start: &'static str,
        release: &'static str,
        actions: &'static str,
        held: &'static str,
    ) -> Self {
        Words {
            stream,
            start,
            release,
            actions,
            held,
        }
    }
}

/// Something the driver tells the client; each kind says it in its own message, or not at all
/// (progress it does not report).
pub enum Tell<'a> {
    /// Still waiting: the holder and the place in line.
    Waiting(&'a WaitingState),
    /// Renewed: vouched for this long. `resumable`: the client asked for a resume grace (and so
    /// needs to know how long it may believe in the lease between streams).
    Extended {
        ttl: Duration,
        vouched: Vouched,
        resumable: bool,
    },
    /// Let go at the client's request; `false` if it was not held (any more).
    Released { was_held: bool },
    /// Gone, for this reason.
    Lost(String, LostCode),
}

/// A loss as the protocol says it (every stream and a session's leases).
pub fn lost(reason: String, code: LostCode) -> pb::Lost {
    let code = match code {
        LostCode::Taken => pb::LostReason::Taken,
        LostCode::Unreachable => pb::LostReason::Unreachable,
        LostCode::Shutdown => pb::LostReason::Shutdown,
        LostCode::Revoked => pb::LostReason::Revoked,
        LostCode::MaxHold => pb::LostReason::MaxHold,
    };
    pb::Lost {
        reason,
        code: code.into(),
    }
}

/// A held lease, as a kind of stream sees it.
pub struct Held<'a, H: Holding> {
    pub lease: &'a HeldLease<H>,
    /// What a held lease keeps of its [`LeaseSpec`]: its names and TTL (the rest served the
    /// taking; the hold keeps no whole spec, issue 43).
    pub name: &'a LockName,
    pub more_names: &'a [LockName],
    pub ttl: Duration,
    pub fencing_token: u64,
    /// The fencing tokens of `more_names`, in the order asked (empty for one name).
    pub more_fences: &'a [u64],
}

impl<'a, H: Holding> Held<'a, H> {
    /// A lease held with the whole of its `spec` at hand (the taking, a session's member).
    pub fn of(
        lease: &'a HeldLease<H>,
        spec: &'a LeaseSpec,
        fencing_token: u64,
        more_fences: &'a [u64],
    ) -> Self {
        Held {
            lease,
            name: &spec.name,
            more_names: &spec.more_names,
            ttl: spec.ttl,
            fencing_token,
            more_fences,
        }
    }

    /// Every name of the lease, as [`LeaseSpec::names`].
    pub fn names(&self) -> impl Iterator<Item = &LockName> {
        std::iter::once(self.name).chain(self.more_names)
    }
}

/// One kind of held-lease stream: its messages, what it holds, and its answers.
pub trait LeaseStream: Sized + Send + 'static {
    type Request: Send + 'static;
    type Response: Send + 'static;
    /// The first message's content.
    type Start: Send;
    /// Messages of this kind alone ([`Infallible`] for none).
    type Message: Send;
    type Holding: Holding;

    const WORDS: Words;
    /// Which names this kind holds, for authorisation.
    const SCOPE: Scope;
    /// After the longest wait, wait again (candidates) instead of giving up (locks).
    const WAITS_AGAIN: bool = false;

    fn read(request: Self::Request) -> Move<Self::Start, Self::Message>;
    /// The name of a stream-specific message, for errors.
    fn message_name(message: &Self::Message) -> &'static str;
    /// Checks the first message: the lease it asks for, and this stream's own state.
    fn open(start: Self::Start) -> Result<(LeaseSpec, Self)>;
    /// Why a stream-specific message is refused while the lease is not held yet.
    fn refuse_while_waiting(message: Self::Message) -> Error;

    /// The lease was just taken, vouched for as `vouched` says: the answer to send, once the
    /// stream's own work is done.
    fn acquired(
        &mut self,
        held: &Held<'_, Self::Holding>,
        vouched: Vouched,
    ) -> impl Future<Output = Result<Step<Self::Response>>> + Send;
    /// A stream-specific message while held.
    fn handle(
        &mut self,
        message: Self::Message,
        held: &Held<'_, Self::Holding>,
    ) -> impl Future<Output = Result<Step<Self::Response>>> + Send;

    /// This kind's message for what the driver has to tell; `None` for progress it does not
    /// report. `Released` and `Lost` must be told.
    fn tell(event: Tell<'_>) -> Option<Self::Response>;
}

/// For kinds without messages of their own.
pub fn no_message(message: &Infallible) -> ! {
    match *message {}
}
