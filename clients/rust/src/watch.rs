//! Watching a lock: its state now, then on every change, as a `Stream`, across server restarts.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_stream::Stream;
use tonic::Streaming;

use crate::held::resumable;
use crate::observation::reopen;
use crate::pb;
use crate::pb::lock_service_client::LockServiceClient;
use crate::{Client, ClientError};

impl Client {
    /// Watches lock `name`: a [`Stream`] of its states (as [`Client::describe`] answers them:
    /// `held`, `holders` with their fencing tokens, `waiting`), the state now first, then one
    /// per change. No state comes twice in a row; changes closer together than a round trip to
    /// Redis may come as one (the newest), and a reader slower than the changes gets the newest
    /// state, not a backlog. When its server stops or fails the watch goes on through another
    /// (or the same one back); a state it then starts with is skipped if it is the last one
    /// yielded. It ends after an error it cannot get past (`None` next), e.g. PERMISSION_DENIED.
    ///
    /// ```no_run
    /// # async fn example(client: leasehold_client::Client) -> Result<(), leasehold_client::ClientError> {
    /// use tokio_stream::StreamExt;
    ///
    /// let mut states = client.watch("nightly-report").await?;
    /// while let Some(state) = states.next().await {
    ///     let state = state?;
    ///     match state.holders.first() {
    ///         Some(first) => println!("held by {} ({} waiting)", first.holder, state.waiting),
    ///         None => println!("free"),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn watch(&self, name: impl Into<String>) -> Result<Watch, ClientError> {
        let request = pb::WatchRequest { name: name.into() };
        let responses = self.watching(request.clone()).await?;
        let follower = Follower {
            client: self.clone(),
            request,
            responses,
            shown: None,
            resumed: false,
        };
        Ok(Watch {
            follower: Some(follower),
            pending: None,
        })
    }

    async fn watching(
        &self,
        request: pb::WatchRequest,
    ) -> Result<Streaming<pb::WatchResponse>, ClientError> {
        let responses = self
            .idempotent(|transport| {
                let request = request.clone();
                async move { LockServiceClient::new(transport).watch(request).await }
            })
            .await?;
        Ok(responses.into_inner())
    }
}

/// Two states are the same when the same holders hold with the same fencing tokens, in the same
/// mode, with as many waiting (the time left is not part of a state).
pub fn same_state(a: &pb::DescribeResponse, b: &pb::DescribeResponse) -> bool {
    let holders = |d: &pb::DescribeResponse| {
        d.holders
            .iter()
            .map(|h| (h.holder.clone(), h.fencing_token))
            .collect::<Vec<_>>()
    };
    (a.held, a.limit, a.mode, a.waiting) == (b.held, b.limit, b.mode, b.waiting)
        && holders(a) == holders(b)
}

/// The states of a watched lock (see [`Client::watch`]); dropping it stops watching.
pub struct Watch {
    /// `None` while its next state is being awaited (inside `pending`), or once ended.
    follower: Option<Follower>,
    pending: Option<Pending>,
}

type Pending =
    Pin<Box<dyn Future<Output = (Follower, Result<pb::DescribeResponse, ClientError>)> + Send>>;

impl Stream for Watch {
    type Item = Result<pb::DescribeResponse, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.pending.is_none() {
            let Some(mut follower) = self.follower.take() else {
                return Poll::Ready(None);
            };
            self.pending = Some(Box::pin(async move {
                let state = follower.next().await;
                (follower, state)
            }));
        }
        let Some(pending) = self.pending.as_mut() else {
            return Poll::Ready(None);
        };
        let (follower, state) = std::task::ready!(pending.as_mut().poll(cx));
        self.pending = None;
        // An error ends the stream: the caller has seen why.
        if state.is_ok() {
            self.follower = Some(follower);
        }
        Poll::Ready(Some(state))
    }
}

/// The watch's stream and what it needs to start again.
struct Follower {
    client: Client,
    request: pb::WatchRequest,
    responses: Streaming<pb::WatchResponse>,
    shown: Option<pb::DescribeResponse>,
    /// Watching again after a break: the first state may repeat the last one shown.
    resumed: bool,
}

impl Follower {
    async fn next(&mut self) -> Result<pb::DescribeResponse, ClientError> {
        loop {
            match self.responses.message().await {
                Ok(Some(response)) => {
                    let state = response.state.unwrap_or_default();
                    let resumed = std::mem::take(&mut self.resumed);
                    if resumed && self.shown.as_ref().is_some_and(|s| same_state(s, &state)) {
                        continue;
                    }
                    self.shown = Some(state.clone());
                    return Ok(state);
                }
                Err(status) if resumable(&status) => {}
                Err(status) => return Err(status.into()),
                Ok(None) => {}
            }
            // The stream broke or ended: watch again, on another server if this one is gone.
            let (client, request) = (&self.client, &self.request);
            self.responses = reopen(|| client.watching(request.clone())).await?;
            self.resumed = true;
        }
    }
}
