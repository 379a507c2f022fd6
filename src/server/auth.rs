//! Who may call, and on which names: bearer tokens (or, with mutual TLS, certificate subjects),
//! each granted a role on lock-name and election-name prefixes.
//!
//! The auth file holds only SHA-256 digests of tokens, so reading it (or a backup of it) gives
//! nobody a token. Every decision is made before any Redis command: a refused call changes
//! nothing and costs Redis nothing.
//!
//! ```toml
//! [[grant]]
//! name = "billing jobs"           # for logs
//! token_sha256 = "9f86d081884c…"  # sha256 of the bearer token, hex
//! role = "hold"                   # observe < hold < admin
//! locks = ["billing/"]            # lock-name prefixes ("" for every name)
//! elections = ["billing/"]        # election-name prefixes
//!
//! [[grant]]
//! name = "ops"
//! subject = "CN=ops-console"      # a client certificate's subject instead of a token (mTLS)
//! role = "admin"
//! locks = [""]
//! elections = [""]
//! ```

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::error::{Error, Result};

/// What a grant lets its holder do; each role includes the ones before it.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// `Describe`, `Leader`, `Observe`.
    Observe,
    /// Also `Lease`, `Acquire`, `Extend`, `Release`, `Campaign`.
    Hold,
    /// Also `List` (which shows only names under the grant's prefixes).
    Admin,
}

/// Which names a call touches.
#[derive(Clone, Copy, Debug)]
pub enum Scope {
    Lock,
    Election,
}

impl Scope {
    fn word(self) -> &'static str {
        match self {
            Scope::Lock => "lock",
            Scope::Election => "election",
        }
    }
}

/// One entry of the auth file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    pub name: String,
    #[serde(default)]
    token_sha256: Option<String>,
    #[serde(default)]
    subject: Option<String>,
    pub role: Role,
    #[serde(default)]
    locks: Vec<String>,
    #[serde(default)]
    elections: Vec<String>,
}

impl Grant {
    /// Refuses unless this grant has `role` (or more).
    pub fn has(&self, role: Role) -> Result<()> {
        if self.role < role {
            return Err(Error::PermissionDenied(format!(
                "grant {:?} has role {:?}; this call needs {:?}",
                self.name, self.role, role
            )));
        }
        Ok(())
    }

    /// Refuses unless this grant has `role` (or more) on `name`.
    pub fn allow(&self, scope: Scope, name: &str, role: Role) -> Result<()> {
        self.has(role)?;
        if !self.covers(scope, name) {
            return Err(Error::PermissionDenied(format!(
                "grant {:?} does not cover {} {name:?} (its {} prefixes: {:?})",
                self.name,
                scope.word(),
                scope.word(),
                self.prefixes(scope)
            )));
        }
        Ok(())
    }

    /// Whether `name` is under one of this grant's prefixes.
    pub fn covers(&self, scope: Scope, name: &str) -> bool {
        self.prefixes(scope)
            .iter()
            .any(|prefix| name.starts_with(prefix.as_str()))
    }

    fn prefixes(&self, scope: Scope) -> &[String] {
        match scope {
            Scope::Lock => &self.locks,
            Scope::Election => &self.elections,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthFile {
    #[serde(default)]
    grant: Vec<Grant>,
}

/// Every grant of the auth file, by token digest and by certificate subject.
#[derive(Debug, Default)]
pub struct AuthPolicy {
    by_token: HashMap<[u8; 32], Arc<Grant>>,
    by_subject: HashMap<String, Arc<Grant>>,
}

impl AuthPolicy {
    /// Reads and checks the auth file; the server refuses to start on any mistake in it.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            Error::invalid(format!("cannot read auth file {}: {error}", path.display()))
        })?;
        Self::parse(&text)
            .map_err(|problem| Error::invalid(format!("auth file {}: {problem}", path.display())))
    }

    fn parse(text: &str) -> Result<Self, String> {
        let file: AuthFile = toml::from_str(text).map_err(|error| error.to_string())?;
        let mut policy = AuthPolicy::default();
        for grant in file.grant {
            let grant = Arc::new(grant);
            match (&grant.token_sha256, &grant.subject) {
                (Some(hex), None) => {
                    let digest = parse_digest(hex).ok_or_else(|| {
                        format!("grant {:?}: token_sha256 must be 64 hex digits", grant.name)
                    })?;
                    if policy.by_token.insert(digest, grant.clone()).is_some() {
                        return Err(format!("grant {:?}: a token listed twice", grant.name));
                    }
                }
                (None, Some(subject)) => {
                    if policy
                        .by_subject
                        .insert(subject.clone(), grant.clone())
                        .is_some()
                    {
                        return Err(format!("grant {:?}: subject listed twice", grant.name));
                    }
                }
                _ => {
                    return Err(format!(
                        "grant {:?}: give exactly one of token_sha256 and subject",
                        grant.name
                    ));
                }
            }
        }
        Ok(policy)
    }

    /// The grant of the caller: its bearer token, else its client certificate's subject.
    fn identify<T>(&self, request: &Request<T>) -> Result<Arc<Grant>, Status> {
        if let Some(value) = request.metadata().get("authorization") {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or_else(|| {
                    Status::unauthenticated("the authorization header must be \"Bearer <token>\"")
                })?;
            let digest: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
            return self
                .by_token
                .get(&digest)
                .cloned()
                .ok_or_else(|| Status::unauthenticated("unknown bearer token"));
        }
        if let Some(certificates) = request.peer_certs() {
            if let Some(subject) = certificates.first().and_then(|c| subject(c)) {
                return self.by_subject.get(&subject).cloned().ok_or_else(|| {
                    Status::unauthenticated(format!(
                        "no grant for the client certificate subject {subject:?}, and no bearer token"
                    ))
                });
            }
        }
        Err(Status::unauthenticated(
            "this server requires a bearer token (authorization: Bearer <token>)",
        ))
    }
}

/// The hex SHA-256 of a token, as the auth file lists it.
pub fn token_digest(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(digest)
}

/// A certificate's subject as the auth file names it (`CN=ops-console, O=Example`).
fn subject(certificate: &[u8]) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate).ok()?;
    Some(parsed.subject().to_string())
}

/// Who is calling, as the interceptor found out; every service reads it from the request.
#[derive(Clone, Debug)]
pub enum Caller {
    /// Auth is off: everyone may do everything.
    Anyone,
    Granted(Arc<Grant>),
}

impl Caller {
    /// Refuses unless the caller has `role` (or more) on `name`. A request that did not pass
    /// the interceptor is refused: never open by mistake.
    pub fn of<T>(request: &Request<T>) -> Caller {
        request
            .extensions()
            .get::<Caller>()
            .cloned()
            .unwrap_or_else(|| {
                Caller::Granted(Arc::new(Grant {
                    name: "nobody".into(),
                    token_sha256: None,
                    subject: None,
                    role: Role::Observe,
                    locks: Vec::new(),
                    elections: Vec::new(),
                }))
            })
    }

    pub fn allow(&self, scope: Scope, name: &str, role: Role) -> Result<()> {
        match self {
            Caller::Anyone => Ok(()),
            Caller::Granted(grant) => grant.allow(scope, name, role),
        }
    }

    /// Refuses unless the caller has `role` (or more), whatever the names.
    pub fn has(&self, role: Role) -> Result<()> {
        match self {
            Caller::Anyone => Ok(()),
            Caller::Granted(grant) => grant.has(role),
        }
    }

    /// Who is calling, for an audit line: the grant's name and, for a client certificate, its
    /// subject (never a token).
    pub fn who(&self) -> String {
        match self {
            Caller::Anyone => "anyone (auth off)".to_owned(),
            Caller::Granted(grant) => match &grant.subject {
                Some(subject) => format!("{} ({subject})", grant.name),
                None => grant.name.clone(),
            },
        }
    }

    /// Whether a listed name may be shown to this caller.
    pub fn sees(&self, scope: Scope, name: &str) -> bool {
        match self {
            Caller::Anyone => true,
            Caller::Granted(grant) => grant.covers(scope, name),
        }
    }
}

/// The interceptor in front of both services: finds the caller, or answers UNAUTHENTICATED
/// before the service runs.
#[derive(Clone, Default)]
pub struct Authenticate(pub Option<Arc<AuthPolicy>>);

impl Interceptor for Authenticate {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let caller = match &self.0 {
            None => Caller::Anyone,
            Some(policy) => Caller::Granted(policy.identify(&request)?),
        };
        request.extensions_mut().insert(caller);
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> AuthPolicy {
        AuthPolicy::parse(&format!(
            r#"
            [[grant]]
            name = "billing"
            token_sha256 = "{}"
            role = "hold"
            locks = ["billing/"]
            "#,
            token_digest("s3cret")
        ))
        .unwrap()
    }

    fn with_token(token: &str) -> Request<()> {
        let mut request = Request::new(());
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        request
    }

    #[test]
    fn a_token_is_granted_its_role_on_its_prefixes_only() {
        let grant = policy().identify(&with_token("s3cret")).unwrap();
        grant.allow(Scope::Lock, "billing/run", Role::Hold).unwrap();
        let outside = grant.allow(Scope::Lock, "reports/run", Role::Hold);
        assert!(matches!(outside, Err(Error::PermissionDenied(_))));
        let election = grant.allow(Scope::Election, "billing/run", Role::Observe);
        assert!(matches!(election, Err(Error::PermissionDenied(_))));
        let admin = grant.allow(Scope::Lock, "billing/run", Role::Admin);
        assert!(matches!(admin, Err(Error::PermissionDenied(_))));
    }

    #[test]
    fn unknown_missing_or_malformed_tokens_are_unauthenticated() {
        let policy = policy();
        for request in [with_token("wrong"), Request::new(())] {
            let refused = policy.identify(&request).unwrap_err();
            assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        }
        let mut basic = Request::new(());
        basic
            .metadata_mut()
            .insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(
            policy.identify(&basic).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
    }

    #[test]
    fn the_file_is_checked_when_loaded() {
        for broken in [
            "[[grant]]\nname = \"x\"\nrole = \"hold\"\n",
            "[[grant]]\nname = \"x\"\ntoken_sha256 = \"abc\"\nrole = \"hold\"\n",
            "[[grant]]\nname = \"x\"\nsubject = \"CN=a\"\nrole = \"root\"\n",
            "[[grant]]\nname = \"x\"\nsubject = \"CN=a\"\nrole = \"hold\"\nlock = [\"a\"]\n",
        ] {
            assert!(AuthPolicy::parse(broken).is_err(), "{broken}");
        }
    }

    #[test]
    fn a_request_that_skipped_the_interceptor_is_refused() {
        let caller = Caller::of(&Request::new(()));
        assert!(caller.allow(Scope::Lock, "a", Role::Observe).is_err());
    }
}
