//! The token check: is a fencing token the current holding of a name? For the protected
//! resource, before each write (Chubby's CheckSequencer).

use crate::pb;
use crate::pb::lock_service_client::LockServiceClient;
use crate::{Client, ClientError};

/// What a fencing token is to its name now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenState {
    /// A live holding of the name has this fencing token.
    Current,
    /// The name is held, under other fencing tokens only.
    Superseded,
    /// Nobody holds the name.
    Free,
}

/// The answer to [`Client::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenCheck {
    pub state: TokenState,
    /// The current holder's fencing token (the oldest, for several holders); 0 when free.
    pub current_fencing_token: u64,
}

impl TokenCheck {
    /// The server's answer, read; `None` for a state this client does not know (a server
    /// that predates the answer).
    pub fn of(answer: &pb::CheckResponse) -> Option<Self> {
        let state = match pb::TokenState::try_from(answer.state).ok()? {
            pb::TokenState::Current => TokenState::Current,
            pb::TokenState::Superseded => TokenState::Superseded,
            pb::TokenState::Free => TokenState::Free,
            pb::TokenState::Unspecified => return None,
        };
        Some(TokenCheck {
            state,
            current_fencing_token: answer.current_fencing_token,
        })
    }

    /// Whether the token checked is the current holding.
    pub fn is_current(&self) -> bool {
        self.state == TokenState::Current
    }
}

impl Client {
    /// Whether `fencing_token` is the current holding of lock `name` (one Redis read on the
    /// server; needs the `observe` role). Not a conditional write: the holding can end between
    /// this answer and the write it guards, so a resource that must never take a stale write
    /// fences itself (docs/contract.md).
    ///
    /// ```no_run
    /// # async fn example(client: leasehold_client::Client, fencing_token: u64) -> Result<(), leasehold_client::ClientError> {
    /// use leasehold_client::TokenState;
    ///
    /// let check = client.check("nightly-report", fencing_token).await?;
    /// match check.state {
    ///     TokenState::Current => { /* write */ }
    ///     TokenState::Superseded => eprintln!("stale: now {}", check.current_fencing_token),
    ///     TokenState::Free => eprintln!("stale: nobody holds it"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn check(
        &self,
        name: impl Into<String>,
        fencing_token: u64,
    ) -> Result<TokenCheck, ClientError> {
        let request = pb::CheckRequest {
            name: name.into(),
            fencing_token,
        };
        let answer = self
            .idempotent(|transport| {
                let request = request.clone();
                async move { LockServiceClient::new(transport).check(request).await }
            })
            .await?
            .into_inner();
        TokenCheck::of(&answer).ok_or_else(|| {
            ClientError::Protocol(format!("the check answered state {}", answer.state))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_is_read_as_its_state_and_an_unknown_one_refused() {
        let answer = |state: pb::TokenState, current| pb::CheckResponse {
            state: state.into(),
            current_fencing_token: current,
        };
        let read = |a| TokenCheck::of(&a);
        let current = read(answer(pb::TokenState::Current, 7)).unwrap();
        assert!(current.is_current());
        assert_eq!(current.current_fencing_token, 7);
        let superseded = read(answer(pb::TokenState::Superseded, 9)).unwrap();
        assert_eq!(
            (superseded.state, superseded.current_fencing_token),
            (TokenState::Superseded, 9)
        );
        assert_eq!(
            read(answer(pb::TokenState::Free, 0)).map(|c| c.state),
            Some(TokenState::Free)
        );
        assert_eq!(read(answer(pb::TokenState::Unspecified, 0)), None);
        let unknown = pb::CheckResponse {
            state: 99,
            current_fencing_token: 0,
        };
        assert_eq!(TokenCheck::of(&unknown), None);
    }
}
