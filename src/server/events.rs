//! The server's side of a response stream: what a stream task sends, without ever blocking.

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

/// One message of a server stream: a response, or the status that ends the stream.
pub type StreamItem<T> = Result<T, Status>;

/// The response stream a streaming RPC hands to tonic.
pub type ResponseStream<T> = std::pin::Pin<Box<dyn Stream<Item = StreamItem<T>> + Send>>;

/// Room for events not yet read by the client. Two slots are kept for the lease's first answer
/// (`Acquired`, `Elected`) and the final message; progress events (`Waiting`, `Extended`) are
/// dropped when only those remain.
pub const EVENT_BUFFER: usize = 8;
const RESERVED_SLOTS: usize = 2;

/// What travels on a stream's channel. Boxed because tokio's channel allocates 32 slots at once
/// whatever its bound: 32 pointers instead of 32 items is 1 KiB less per held lease, and the few
/// events a lease sends can afford an allocation each.
pub type Boxed<T> = Box<StreamItem<T>>;

/// The sending side of a stream that holds a lease. It never blocks: renewal must not wait on a
/// slow reader.
pub struct Events<T> {
    tx: mpsc::Sender<Boxed<T>>,
}

impl<T> Clone for Events<T> {
    fn clone(&self) -> Self {
        Events {
            tx: self.tx.clone(),
        }
    }
}

impl<T> Events<T> {
    /// A channel of [`EVENT_BUFFER`] events and the response stream that reads it.
    pub fn channel() -> (Self, ResponseStream<T>)
    where
        T: Send + 'static,
    {
        Self::with_room(EVENT_BUFFER)
    }

    /// A channel of `room` events (a session's, which answers many leases).
    pub fn with_room(room: usize) -> (Self, ResponseStream<T>)
    where
        T: Send + 'static,
    {
        let (tx, rx) = mpsc::channel(room);
        let stream = ReceiverStream::new(rx).map(|item: Boxed<T>| *item);
        (Events { tx }, Box::pin(stream))
    }

    /// Best effort: a reader that falls behind misses progress, never the lease itself.
    pub fn progress(&self, item: T) {
        if self.tx.capacity() > RESERVED_SLOTS {
            let _ = self.tx.try_send(Box::new(Ok(item)));
        }
    }

    /// Fits in the reserved slots; `false` only if the client is gone.
    pub fn essential(&self, item: StreamItem<T>) -> bool {
        self.tx.try_send(Box::new(item)).is_ok()
    }

    /// Waits for room if the client is slow to read (a session's answers are many, and each must
    /// arrive); `false` only if the client is gone. Renewals never wait on it: they tell through
    /// [`Events::progress`].
    pub async fn send(&self, item: StreamItem<T>) -> bool {
        self.tx.send(Box::new(item)).await.is_ok()
    }

    /// Completes when the client stopped listening (cancelled call, broken connection).
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}
