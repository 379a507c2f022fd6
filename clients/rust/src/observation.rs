//! Following an election: every change of its leader, in order, across server restarts.

use std::time::Duration;

use tonic::Streaming;

use crate::election::{Leader, leader};
use crate::held::resumable;
use crate::pb;
use crate::pb::election_service_client::ElectionServiceClient;
use crate::{Client, ClientError};

impl Client {
    /// Follows `election`: the first [`Observation::next`] is the current leader, each later
    /// one a change, in the order they happened.
    pub async fn observe(&self, election: impl Into<String>) -> Result<Observation, ClientError> {
        let request = pb::ObserveRequest {
            election: election.into(),
        };
        let responses = self.observation(request.clone()).await?;
        Ok(Observation {
            client: self.clone(),
            request,
            responses,
            shown: None,
            resumed: false,
        })
    }

    async fn observation(
        &self,
        request: pb::ObserveRequest,
    ) -> Result<Streaming<pb::ObserveResponse>, ClientError> {
        let responses = self
            .idempotent(|transport| {
                let request = request.clone();
                async move { ElectionServiceClient::new(transport).observe(request).await }
            })
            .await?;
        Ok(responses.into_inner())
    }
}

/// A stream of an election's states. When its server stops or fails, it follows the election
/// again on another (the state it then starts with is skipped if it is the one last shown).
pub struct Observation {
    client: Client,
    request: pb::ObserveRequest,
    responses: Streaming<pb::ObserveResponse>,
    shown: Option<Option<Leader>>,
    /// Following again after a break: the first state may repeat the last one shown.
    resumed: bool,
}

impl Observation {
    /// The next state: the leader, or `None` when there is none.
    pub async fn next(&mut self) -> Result<Option<Leader>, ClientError> {
        loop {
            match self.responses.message().await {
                Ok(Some(state)) => {
                    let state = leader(state.has_leader, state.term, state.value);
                    if std::mem::take(&mut self.resumed) && self.shown.as_ref() == Some(&state) {
                        continue;
                    }
                    self.shown = Some(state.clone());
                    return Ok(state);
                }
                Err(status) if resumable(&status) => {}
                Err(status) => return Err(status.into()),
                Ok(None) => {}
            }
            // The stream broke or ended: follow again, on another server if this one is gone.
            let (client, request) = (&self.client, &self.request);
            self.responses = reopen(|| client.observation(request.clone())).await?;
            self.resumed = true;
        }
    }
}

/// Opens a broken follower's stream again (`open`), on another server if its own is gone:
/// retried with a growing delay while the answer says the service may come back, about 25 s in
/// all.
pub(crate) async fn reopen<T, F: Future<Output = Result<T, ClientError>>>(
    mut open: impl FnMut() -> F,
) -> Result<T, ClientError> {
    let mut backoff = Duration::from_millis(20);
    let mut tries = 0;
    loop {
        match open().await {
            Ok(opened) => return Ok(opened),
            Err(ClientError::Status(status)) if resumable(&status) && tries < 50 => {
                tries += 1;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            Err(error) => return Err(error),
        }
    }
}
