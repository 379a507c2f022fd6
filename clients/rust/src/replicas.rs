//! The servers a client may use, and the one it uses now.
//!
//! A client is given one address, a comma-separated list of them, or a DNS name with several
//! addresses: every replica of a Leasehold deployment serves every lock, because the leases live
//! in Redis. Calls go to one replica at a time (one HTTP/2 connection, as with one address);
//! when a call finds it unreachable or going away, [`Replicas::failed`] moves the client to the
//! next. No balancing: one connection keeps a client's streams together, and moving only on
//! failure keeps the order predictable (grpc's `pick_first` does the same).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::{ClientTlsConfig, Endpoint};

use crate::{BearerToken, ClientError, Transport};

/// How long a connection attempt to one replica may take before the client tries the next.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// HTTP/2 pings on every connection, idle or not: a replica whose host died or was cut off
/// without a reset is noticed within interval + timeout, and its leases resume elsewhere while
/// still valid, instead of running out by the client's clock.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Every replica a client may use. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Replicas(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    /// One channel per replica, connected lazily and reconnected by tonic on its own.
    replicas: Vec<Transport>,
    /// Where every replica's address came from, for errors.
    names: Vec<String>,
    current: Mutex<usize>,
}

/// One replica, as a call uses it: its transport, and which it is (for [`Replicas::failed`]).
#[derive(Clone, Debug)]
pub struct Replica {
    pub transport: Transport,
    index: usize,
}

impl Replicas {
    /// The replicas `urls` names (a comma-separated list; each entry `http://host:port`,
    /// `https://host:port`, or `host:port` for plain HTTP/2), each host name expanded to every
    /// address it resolves to. Connects to the first that answers, so a client with no
    /// reachable replica is told at once.
    pub async fn connect(
        urls: &str,
        tls: Option<ClientTlsConfig>,
        token: BearerToken,
    ) -> Result<Self, ClientError> {
        let mut endpoints = Vec::new();
        for url in urls.split(',').map(str::trim).filter(|url| !url.is_empty()) {
            for (name, endpoint) in expand(url, tls.clone()).await? {
                endpoints.push((name, endpoint));
            }
        }
        if endpoints.is_empty() {
            return Err(ClientError::Protocol(format!(
                "no server address in {urls:?}"
            )));
        }
        let mut first_error = None;
        let mut connected = None;
        for (index, (name, endpoint)) in endpoints.iter().enumerate() {
            match endpoint.connect().await {
                Ok(channel) => {
                    connected = Some((index, channel));
                    break;
                }
                Err(source) => {
                    first_error.get_or_insert(ClientError::Connect {
                        url: name.clone(),
                        source,
                    });
                }
            }
        }
        let Some((current, channel)) = connected else {
            return Err(first_error.unwrap_or_else(|| ClientError::Protocol("no server".into())));
        };
        let mut channel = Some(channel);
        let replicas = endpoints
            .iter()
            .enumerate()
            .map(|(index, (_, endpoint))| {
                let channel = match (index == current).then(|| channel.take()).flatten() {
                    Some(channel) => channel,
                    None => endpoint.connect_lazy(),
                };
                InterceptedService::new(channel, token.clone())
            })
            .collect();
        Ok(Replicas(Arc::new(Shared {
            replicas,
            names: endpoints.into_iter().map(|(name, _)| name).collect(),
            current: Mutex::new(current),
        })))
    }

    /// The replica calls go to now.
    pub fn current(&self) -> Replica {
        let index = *self.lock();
        Replica {
            transport: self.0.replicas[index].clone(),
            index,
        }
    }

    /// A call found `replica` unreachable or going away: later calls go to the next one (unless
    /// another call already moved on).
    pub fn failed(&self, replica: &Replica) {
        let mut current = self.lock();
        if *current == replica.index {
            *current = (replica.index + 1) % self.0.replicas.len();
            tracing::debug!(
                from = %self.0.names[replica.index],
                to = %self.0.names[*current],
                "moving to another server"
            );
        }
    }

    /// How many replicas there are.
    pub fn len(&self) -> usize {
        self.0.replicas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.replicas.is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, usize> {
        self.0
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The endpoints of one entry of the list: one per address its host resolves to (an IP address
/// is one), each keeping the host's name for TLS.
async fn expand(
    url: &str,
    tls: Option<ClientTlsConfig>,
) -> Result<Vec<(String, Endpoint)>, ClientError> {
    let url = if url.contains("://") {
        url.to_owned()
    } else {
        format!("http://{url}")
    };
    let bad_url = |source| ClientError::Url {
        url: url.clone(),
        source,
    };
    let endpoint = Endpoint::from_shared(url.clone()).map_err(bad_url)?;
    let uri = endpoint.uri().clone();
    let scheme = uri.scheme_str().unwrap_or("http");
    let tls = match (tls, scheme) {
        (Some(tls), _) => Some(tls),
        (None, "https") => Some(ClientTlsConfig::new().with_enabled_roots()),
        (None, _) => None,
    };
    let configure = |endpoint: Endpoint| -> Result<Endpoint, ClientError> {
        let endpoint = endpoint
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        match &tls {
            Some(tls) => {
                let host = uri.host().unwrap_or_default().to_owned();
                endpoint
                    .tls_config(tls.clone().domain_name(host))
                    .map_err(bad_url)
            }
            None => Ok(endpoint),
        }
    };
    let host = uri.host().unwrap_or_default();
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    // An IP address is one replica; a name is every address it resolves to now (a headless
    // service, a round-robin record).
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<std::net::IpAddr>().is_ok() {
        return Ok(vec![(url.clone(), configure(endpoint)?)]);
    }
    let addresses: Vec<std::net::SocketAddr> = match tokio::net::lookup_host((host, port)).await {
        Ok(addresses) => addresses.collect(),
        // Unresolvable now: keep the name, tonic resolves it again on every connect.
        Err(_) => Vec::new(),
    };
    if addresses.len() <= 1 {
        return Ok(vec![(url.clone(), configure(endpoint)?)]);
    }
    let mut endpoints = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for address in addresses {
        if !seen.insert(address) {
            continue;
        }
        let at = format!("{scheme}://{address}");
        let endpoint = Endpoint::from_shared(at.clone()).map_err(bad_url)?;
        // The certificate names the host, not the address.
        let endpoint = if tls.is_some() {
            endpoint.origin(uri.clone())
        } else {
            endpoint
        };
        endpoints.push((format!("{url} ({address})"), configure(endpoint)?));
    }
    Ok(endpoints)
}
