//! The server's side of a response stream: what a stream task sends, without ever blocking.
//!
//! A small queue of our own rather than tokio's `mpsc`: every held lease has one for its whole
//! life, and tokio's bounded channel allocates its shared state and a first block of 32 slots up
//! front, about 1 KB per channel (measured: 988 B of RSS each for 100,000 `channel(8)`s),
//! where a lease sends a few messages per TTL. This one is a mutex, a `VecDeque` that allocates
//! on its first message, and the wakers of the two sides: about 150 bytes.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio_stream::Stream;
use tonic::Status;

/// One message of a server stream: a response, or the status that ends the stream.
pub type StreamItem<T> = Result<T, Status>;

/// The response stream a streaming RPC hands to tonic.
pub type ResponseStream<T> = Pin<Box<dyn Stream<Item = StreamItem<T>> + Send>>;

/// Room for events not yet read by the client. Two slots are kept for the lease's first answer
/// (`Acquired`, `Elected`) and the final message; progress events (`Waiting`, `Extended`) are
/// dropped when only those remain.
pub const EVENT_BUFFER: usize = 8;
const RESERVED_SLOTS: usize = 2;

/// What waits in the queue. Boxed: the queue's slots stay one pointer each, and the few events a
/// lease sends can afford an allocation each.
pub type Boxed<T> = Box<StreamItem<T>>;

/// The sending side of a stream that holds a lease. It never blocks: renewal must not wait on a
/// slow reader.
pub struct Events<T> {
    outbox: Arc<Outbox<T>>,
}

/// What both sides share.
struct Outbox<T> {
    /// Most events waiting to be read.
    room: usize,
    queue: Mutex<Queue<T>>,
}

struct Queue<T> {
    items: VecDeque<Boxed<T>>,
    /// Live [`Events`]: the stream ends once none is left and the queue is read.
    senders: usize,
    /// The response stream was dropped: the client stopped listening.
    reader_gone: bool,
    /// The response stream's task, waiting for an item.
    reader: Option<Waker>,
    /// Tasks waiting for room ([`Events::send`]).
    room_waiters: Vec<Waker>,
    /// Tasks waiting for the client to stop listening ([`Events::closed`]).
    close_waiters: Vec<Waker>,
}

impl<T> Outbox<T> {
    fn queue(&self) -> MutexGuard<'_, Queue<T>> {
        // A panic while holding the lock leaves plain data behind; carry on with it.
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<T> Queue<T> {
    fn push(&mut self, item: Boxed<T>) {
        self.items.push_back(item);
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
    }
}

/// Keeps `waker` among `waiters` once, however often its task polls. Room for one at first:
/// nearly always the stream's own task is the only one (a `Vec`'s first push would make room for
/// four, 48 bytes more on every held lease).
fn register(waiters: &mut Vec<Waker>, waker: &Waker) {
    if !waiters.iter().any(|waiting| waiting.will_wake(waker)) {
        waiters.reserve_exact(1);
        waiters.push(waker.clone());
    }
}

fn wake_all(waiters: &mut Vec<Waker>) {
    for waker in waiters.drain(..) {
        waker.wake();
    }
}

impl<T> Clone for Events<T> {
    fn clone(&self) -> Self {
        self.outbox.queue().senders += 1;
        Events {
            outbox: self.outbox.clone(),
        }
    }
}

impl<T> Drop for Events<T> {
    fn drop(&mut self) {
        let mut queue = self.outbox.queue();
        queue.senders -= 1;
        if queue.senders == 0
            && let Some(reader) = queue.reader.take()
        {
            reader.wake();
        }
    }
}

impl<T> Events<T> {
    /// A queue of `room` events (a session's, which answers many leases).
    pub fn with_room(room: usize) -> (Self, ResponseStream<T>)
    where
        T: Send + 'static,
    {
        let (events, responses) = Self::pair(room);
        (events, Box::pin(responses))
    }

    /// A queue of `room` events and its reading side, unboxed: for a response stream that
    /// drives its lease itself ([`super::driver`]) and reads this queue.
    pub fn pair(room: usize) -> (Self, Responses<T>) {
        let outbox = Arc::new(Outbox {
            room,
            queue: Mutex::new(Queue {
                items: VecDeque::new(),
                senders: 1,
                reader_gone: false,
                reader: None,
                room_waiters: Vec::new(),
                close_waiters: Vec::new(),
            }),
        });
        let responses = Responses {
            outbox: outbox.clone(),
        };
        (Events { outbox }, responses)
    }

    /// Best effort: a reader that falls behind misses progress, never the lease itself.
    pub fn progress(&self, item: T) {
        let mut queue = self.outbox.queue();
        if !queue.reader_gone && self.outbox.room - queue.items.len() > RESERVED_SLOTS {
            queue.push(Box::new(Ok(item)));
        }
    }

    /// Fits in the reserved slots; `false` only if the client is gone.
    pub fn essential(&self, item: StreamItem<T>) -> bool {
        let mut queue = self.outbox.queue();
        if queue.reader_gone || queue.items.len() >= self.outbox.room {
            return false;
        }
        queue.push(Box::new(item));
        true
    }

    /// Waits for room if the client is slow to read (a session's answers are many, and each must
    /// arrive); `false` only if the client is gone. Renewals never wait on it: they tell through
    /// [`Events::progress`].
    pub async fn send(&self, item: StreamItem<T>) -> bool {
        let mut item = Some(Box::new(item));
        std::future::poll_fn(|cx| {
            let mut queue = self.outbox.queue();
            if queue.reader_gone {
                return Poll::Ready(false);
            }
            if queue.items.len() < self.outbox.room {
                if let Some(item) = item.take() {
                    queue.push(item);
                }
                return Poll::Ready(true);
            }
            register(&mut queue.room_waiters, cx.waker());
            Poll::Pending
        })
        .await
    }

    /// Completes once the reading side is gone, registering no waker: only for a driver that its
    /// own response stream polls ([`super::driver`]). That stream is gone only once dropped, and
    /// then the driver's rest runs in a task of its own, whose first poll finds it gone; a
    /// waker kept meanwhile would be a held lease's allocation for nothing.
    pub async fn gone(&self) {
        std::future::poll_fn(|_| {
            if self.outbox.queue().reader_gone {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// Completes when the client stopped listening (cancelled call, broken connection).
    pub async fn closed(&self) {
        std::future::poll_fn(|cx| {
            let mut queue = self.outbox.queue();
            if queue.reader_gone {
                return Poll::Ready(());
            }
            register(&mut queue.close_waiters, cx.waker());
            Poll::Pending
        })
        .await
    }
}

/// The reading side, handed to tonic as the response stream (or read by one).
pub struct Responses<T> {
    outbox: Arc<Outbox<T>>,
}

impl<T> Responses<T> {
    /// The reader stops listening: what dropping it does, before it drops.
    pub fn close(&self) {
        let mut queue = self.outbox.queue();
        queue.reader_gone = true;
        queue.items.clear();
        wake_all(&mut queue.room_waiters);
        wake_all(&mut queue.close_waiters);
    }
}

impl<T> Stream for Responses<T> {
    type Item = StreamItem<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut queue = self.outbox.queue();
        if let Some(item) = queue.items.pop_front() {
            wake_all(&mut queue.room_waiters);
            return Poll::Ready(Some(*item));
        }
        if queue.senders == 0 {
            return Poll::Ready(None);
        }
        match &queue.reader {
            Some(reader) if reader.will_wake(cx.waker()) => {}
            _ => queue.reader = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<T> Drop for Responses<T> {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_stream::StreamExt;

    #[tokio::test]
    async fn progress_keeps_room_for_the_essential_and_the_stream_ends_with_its_senders() {
        let (events, mut responses) = Events::<u32>::with_room(EVENT_BUFFER);
        for i in 0..20 {
            events.progress(i);
        }
        // Progress stops two short of the room; the first answer and the last still fit.
        assert!(events.essential(Ok(100)));
        assert!(events.essential(Ok(101)));
        assert!(!events.essential(Ok(102)), "past the room");
        let renewals = events.clone();
        drop(events);
        let mut read = Vec::new();
        for _ in 0..EVENT_BUFFER {
            read.push(responses.next().await.unwrap().unwrap());
        }
        assert_eq!(read, [0, 1, 2, 3, 4, 5, 100, 101]);
        // One sender left (the renewals'): still open, nothing to read.
        renewals.progress(7);
        assert_eq!(responses.next().await.unwrap().unwrap(), 7);
        drop(renewals);
        assert!(responses.next().await.is_none());
    }

    #[tokio::test]
    async fn send_waits_for_room_and_closed_hears_the_reader_go() {
        let (events, mut responses) = Events::<u32>::with_room(1);
        assert!(events.send(Ok(1)).await);
        let waiting = tokio::spawn({
            let events = events.clone();
            async move { events.send(Ok(2)).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "sent past the room");
        assert_eq!(responses.next().await.unwrap().unwrap(), 1);
        assert!(waiting.await.unwrap());
        assert_eq!(responses.next().await.unwrap().unwrap(), 2);
        let closing = tokio::spawn({
            let events = events.clone();
            async move { events.closed().await }
        });
        drop(responses);
        closing.await.unwrap();
        assert!(!events.send(Ok(3)).await);
        assert!(!events.essential(Ok(4)));
    }
}
