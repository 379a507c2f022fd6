//! A held-lease stream's response stream, which drives its lease: no task of our own per stream.
//!
//! hyper already runs one task per HTTP/2 stream, which polls the response body; [`Drive`], the
//! stream of messages behind that body, first moves the driver on, then yields what the event
//! queue holds. The driver's life is a few phases: the taking (the driver's own future, boxed,
//! freed once held), the hold, polled by hand over exactly what the hold waits for (shutdown,
//! the client's next message, a loss the scheduler found), so an idle held lease keeps its
//! state and one boxed future of shutdown, and no future or task of its own; a message that
//! needs Redis (a campaign's proclaim) and the lease's end are short boxed phases that own the
//! hold and hand it back. Renewals never poll it: the scheduler renews and queues `extended`.
//!
//! The client gone, hyper drops the response stream: the rest of the driver then runs in a task
//! of the server's ([`Tasks::spawn`], which shutdown waits for), reading what is already in the
//! request stream and then ending the lease as a stream gone ([`End::Broken`]; a resumable
//! lease is kept for its grace, never released), a taking or an ending run to their end, as a
//! task of its own would have run them before.
//!
//! Known limit: hyper does not poll a body whose HTTP/2 send window is 0 (a client that stopped
//! reading). Its lease is still renewed (the scheduler's), but its hold hears a loss, a message
//! or shutdown only when polling resumes or the stream drops; shutdown's drain cuts such calls
//! (`server::serve`), and the drop ends the lease.
//!
//! [`Tasks::spawn`]: crate::tasks::Tasks::spawn

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use tokio_stream::Stream;
use tokio_util::sync::WaitForCancellationFutureOwned;
use tonic::Status;
use tracing::{Instrument, Span, info};

use super::super::events::{Responses, StreamItem};
use super::super::lease_stream::{Held, LeaseStream, Move, Step};
use super::{Driver, Streams, Taken, no_action, read, second_start};
use crate::error::{Error, Result};
use crate::lease::life::{End, Told};
use crate::lease::scheduler::Lost;
use crate::metrics::Counted;

/// A stream's request messages, as the driver reads them (tonic's `Streaming`).
pub(super) trait Inbound<R>:
    Stream<Item = Result<R, Status>> + Unpin + Send + Sync + 'static
{
}

impl<R, T> Inbound<R> for T where T: Stream<Item = Result<R, Status>> + Unpin + Send + Sync + 'static
{}

/// The response stream of one held-lease stream, driving it (see the module's comment).
pub(super) struct Drive<K: LeaseStream, S: Inbound<K::Request>> {
    machine: Machine<K, S>,
    responses: Responses<K::Response>,
    /// Where the rest runs if the stream drops first.
    streams: Arc<Streams>,
}

/// Where the driver is, and the open stream's count.
struct Machine<K: LeaseStream, S: Inbound<K::Request>> {
    state: State<K, S>,
    /// Counts the stream as open until its lease's end has run.
    open: Option<Counted>,
}

type Taking<K, S> = (Box<Driver<K, S>>, Result<Option<Taken<K>>>);
type Handled<K, S> = (Box<Hold<K, S>>, Result<Step<<K as LeaseStream>::Response>>);

enum State<K: LeaseStream, S> {
    /// The first message, admission to the name, waiting, acquiring, telling `acquired`.
    Taking(BoxFuture<'static, Taking<K, S>>),
    /// Held, idle: polled by hand.
    Holding(Box<Hold<K, S>>),
    /// A stream-specific message, its step running.
    Handling(BoxFuture<'static, Handled<K, S>>),
    /// The lease's end, as its life says, told to the client.
    Ending(BoxFuture<'static, ()>),
    Done,
}

/// A held lease's state while idle: the driver, the lease, and the server's shutdown signal.
struct Hold<K: LeaseStream, S> {
    driver: Driver<K, S>,
    taken: Taken<K>,
    /// Boxed: the token's future is pinned, and the rest of the hold moves between phases.
    stopping: Pin<Box<WaitForCancellationFutureOwned>>,
}

/// What the hold heard.
enum Next<M> {
    /// A stream-specific message, for its step.
    Handle(M),
    /// The lease ends; the stream too, with this error if any.
    End(End, Option<Error>),
}

impl<K, S> Drive<K, S>
where
    K: LeaseStream,
    S: Inbound<K::Request>,
{
    /// Drives `driver`, reading its events from `responses`. The taking runs in the call's span
    /// (the handler's), as the stream's task did.
    pub(super) fn new(driver: Box<Driver<K, S>>, responses: Responses<K::Response>) -> Self {
        let streams = driver.streams.clone();
        let open = streams.metrics().open_stream(K::WORDS.stream);
        let taking = driver.taking().instrument(Span::current());
        Drive {
            machine: Machine {
                state: State::Taking(Box::pin(taking)),
                open: Some(open),
            },
            responses,
            streams,
        }
    }
}

impl<K, S> Stream for Drive<K, S>
where
    K: LeaseStream,
    S: Inbound<K::Request>,
{
    type Item = StreamItem<K::Response>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        // Done or not, what it queued is read next; the queue ends once the driver is gone.
        let _ = this.machine.advance(cx, false);
        Pin::new(&mut this.responses).poll_next(cx)
    }
}

impl<K: LeaseStream, S: Inbound<K::Request>> Drop for Drive<K, S> {
    fn drop(&mut self) {
        if matches!(self.machine.state, State::Done) {
            return;
        }
        // The reader goes first: the rest hears the client gone, and tells no one.
        self.responses.close();
        if tokio::runtime::Handle::try_current().is_err() {
            // The runtime itself is gone: an armed lease's drop says so, its key expires by TTL.
            return;
        }
        let mut rest = std::mem::replace(
            &mut self.machine,
            Machine {
                state: State::Done,
                open: None,
            },
        );
        self.streams
            .tasks()
            .spawn(std::future::poll_fn(move |cx| rest.advance(cx, true)));
    }
}

impl<K: LeaseStream, S: Inbound<K::Request>> Machine<K, S> {
    /// Moves the driver on as far as it goes; `gone`: its response stream dropped, so the hold
    /// ends as a stream gone once it has read what the client sent.
    fn advance(&mut self, cx: &mut Context<'_>, gone: bool) -> Poll<()> {
        loop {
            self.state = match std::mem::replace(&mut self.state, State::Done) {
                State::Taking(mut taking) => match taking.as_mut().poll(cx) {
                    Poll::Pending => {
                        self.state = State::Taking(taking);
                        return Poll::Pending;
                    }
                    Poll::Ready((driver, Ok(Some(taken)))) => {
                        let stopping = Box::pin(driver.streams.tasks().stopping_owned());
                        State::Holding(Box::new(Hold {
                            driver: *driver,
                            taken,
                            stopping,
                        }))
                    }
                    Poll::Ready((_, Ok(None))) => State::Done,
                    Poll::Ready((driver, Err(error))) => {
                        driver.fail(error);
                        State::Done
                    }
                },
                State::Holding(mut hold) => match hold.poll(cx, gone) {
                    Poll::Pending => {
                        self.state = State::Holding(hold);
                        return Poll::Pending;
                    }
                    Poll::Ready(Next::Handle(message)) => {
                        let span = hold.taken.span();
                        State::Handling(Box::pin(handle(hold, message).instrument(span)))
                    }
                    Poll::Ready(Next::End(end, failure)) => ending(hold, end, failure),
                },
                State::Handling(mut handling) => match handling.as_mut().poll(cx) {
                    Poll::Pending => {
                        self.state = State::Handling(handling);
                        return Poll::Pending;
                    }
                    Poll::Ready((hold, Ok(Step::Reply(answer)))) => {
                        hold.driver.events.essential(Ok(answer));
                        State::Holding(hold)
                    }
                    Poll::Ready((hold, Ok(Step::Lost(reason)))) => {
                        ending(hold, End::Superseded(reason), None)
                    }
                    // Redis slow: the client still believes in the lease.
                    Poll::Ready((hold, Err(error))) => ending(hold, End::Broken, Some(error)),
                },
                State::Ending(mut ending) => match ending.as_mut().poll(cx) {
                    Poll::Pending => {
                        self.state = State::Ending(ending);
                        return Poll::Pending;
                    }
                    Poll::Ready(()) => State::Done,
                },
                State::Done => {
                    self.open = None;
                    return Poll::Ready(());
                }
            };
        }
    }
}

impl<K, S> Hold<K, S>
where
    K: LeaseStream,
    S: Inbound<K::Request>,
{
    /// What the hold loop selected on, in its order: shutdown, the client's next message, the
    /// client gone (`gone`), a loss its renewals found. Every source is polled with `cx`, so
    /// each wakes the stream's task.
    fn poll(&mut self, cx: &mut Context<'_>, gone: bool) -> Poll<Next<K::Message>> {
        if self.stopping.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Next::End(End::Shutdown, None));
        }
        if let Poll::Ready(message) = Pin::new(&mut self.driver.inbound).poll_next(cx) {
            return Poll::Ready(match read::<K>(message) {
                Move::HalfClosed => Next::End(End::HalfClosed, None),
                Move::Release => Next::End(End::ReleaseAsked, None),
                Move::Other(message) => Next::Handle(message),
                // A transport failure or an unreadable message: said, in case the client can
                // still hear it.
                Move::Broken(status) => {
                    self.taken.span().in_scope(|| {
                        info!(code = ?status.code(), message = status.message(), "client stream broke");
                    });
                    Next::End(End::Broken, Some(self.driver.broken(status)))
                }
                Move::Start(_) => Next::End(End::Refused, Some(second_start::<K>())),
                Move::NoAction => Next::End(End::Refused, Some(no_action::<K>())),
            });
        }
        if gone {
            self.taken.span().in_scope(|| info!("client went away"));
            return Poll::Ready(Next::End(End::Broken, None));
        }
        self.taken.life.poll_lost(cx).map(|lost| {
            let Lost {
                cause,
                reason,
                code,
                due,
            } = lost;
            let reason = due.explain(reason);
            Next::End(
                End::Lost {
                    cause,
                    reason,
                    code,
                },
                None,
            )
        })
    }
}

/// A stream-specific message's step, owning the hold and handing it back.
async fn handle<K, S>(mut hold: Box<Hold<K, S>>, message: K::Message) -> Handled<K, S>
where
    K: LeaseStream,
    S: Inbound<K::Request>,
{
    let step = {
        let Taken {
            name,
            more_names,
            ttl,
            stream,
            life,
            fencing_token,
            ..
        } = &mut hold.taken;
        let held = Held {
            lease: life.lease(),
            name,
            more_names,
            ttl: *ttl,
            fencing_token: *fencing_token,
            more_fences: &[],
        };
        stream.handle(message, &held).await
    };
    (hold, step)
}

/// The ending phase: `end` carried out in the lease's span.
fn ending<K, S>(hold: Box<Hold<K, S>>, end: End, failure: Option<Error>) -> State<K, S>
where
    K: LeaseStream,
    S: Inbound<K::Request>,
{
    let span = hold.taken.span();
    State::Ending(Box::pin(end_hold(hold, end, failure).instrument(span)))
}

/// Ends the lease as its life says and tells the client; the stream ends with `failure` (or
/// the release's own error) as its status.
async fn end_hold<K, S>(hold: Box<Hold<K, S>>, end: End, failure: Option<Error>)
where
    K: LeaseStream,
    S: Inbound<K::Request>,
{
    let Hold {
        driver, mut taken, ..
    } = *hold;
    let ended = match driver.end(&mut taken.life, end).await {
        Ok(told) => {
            if let Told::HandedOver { .. } = told {
                driver.streams.metrics().moved("handed_over");
            }
            failure.map_or(Ok(()), Err)
        }
        Err(error) => Err(error),
    };
    // The hold counters stop with the stream.
    drop(taken);
    if let Err(error) = ended {
        driver.fail(error);
    }
}
