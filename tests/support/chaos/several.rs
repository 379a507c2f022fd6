//! Several names at once under faults: workers on two servers hold overlapping sets of three
//! names, each asked in an order of its own, while a fault strikes (a server killed, Redis
//! paused). Each name keeps a history of its own, checked by the lock model in `tests/checker`
//! (at most one holder of a name at any instant); and no holder ever believes in part of its
//! set: every acquisition answers a fencing token for each name asked, and a hold ends for all
//! of its names at once (a lost name ends the belief in every other).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use leasehold::pb::lease_request::Action;
use leasehold::pb::lease_response::Event;
use leasehold::pb::lock_service_client::LockServiceClient;
use leasehold::pb::{LeaseAcquire, LeaseRelease, LeaseRequest, LeaseResponse};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Streaming;

use super::SERVER_FLAGS;
use crate::support::history::{History, Kind, Outcome};
use crate::support::{RedisServer, ServerProcess};

/// The names every worker's sets are drawn from.
pub const NAMES: [&str; 3] = ["several-a", "several-b", "several-c"];
const TTL_MS: u32 = 500;
const WAIT_MS: u32 = 3_000;
/// How long a worker believes in its set per turn: well inside its validity.
const TURN: Duration = Duration::from_millis(60);
/// The longest any one step of a worker may take before it counts as unknown.
const STEP: Duration = Duration::from_secs(5);

/// The run: a Redis, two servers, the workers and one history per name.
pub struct Several {
    pub redis: RedisServer,
    pub servers: Vec<ServerProcess>,
    histories: Arc<HashMap<&'static str, History>>,
    stop: CancellationToken,
    workers: Vec<JoinHandle<usize>>,
}

impl Several {
    /// Starts the processes and `workers` workers, half on each server.
    pub async fn start(workers: usize) -> Self {
        let redis = RedisServer::start();
        let servers: Vec<ServerProcess> = (0..2)
            .map(|_| ServerProcess::start(&redis, SERVER_FLAGS))
            .collect();
        let urls: Vec<String> = servers.iter().map(ServerProcess::url).collect();
        let histories: Arc<HashMap<&'static str, History>> =
            Arc::new(NAMES.iter().map(|&n| (n, History::default())).collect());
        let stop = CancellationToken::new();
        let workers = (0..workers)
            .map(|w| {
                let (urls, histories, stop) = (urls.clone(), histories.clone(), stop.clone());
                tokio::spawn(work(w, urls, histories, stop))
            })
            .collect();
        Several {
            redis,
            servers,
            histories,
            stop,
            workers,
        }
    }

    /// Kills server `i` (no chance to release anything) and starts it again.
    pub fn kill_server(&mut self, i: usize) {
        self.servers[i].kill();
        self.servers[i] =
            self.servers[i].start_again(&["--redis", &self.redis.url()], SERVER_FLAGS);
    }

    /// Stops the workers, then checks each name's history: one holder at a time. Returns how
    /// many sets were held in all.
    pub async fn finish(self, run: &str) -> usize {
        self.stop.cancel();
        let mut held = 0;
        for worker in self.workers {
            held += timeout(Duration::from_secs(20), worker)
                .await
                .expect("a worker did not stop")
                .expect("a worker saw part of its set, or panicked");
        }
        for name in NAMES {
            self.histories[name].check(&format!("single/{run}/{name}"), 1, None);
        }
        held
    }
}

/// The set a worker asks for on its `round`: two or three names, in an order of its own.
fn set(worker: usize, round: usize) -> Vec<&'static str> {
    let mut names = NAMES.to_vec();
    names.rotate_left((worker + round) % 3);
    if (worker + round / 3) % 2 == 1 {
        names.reverse();
    }
    names.truncate(2 + (worker * 5 + round) % 2);
    names
}

/// One worker: a stream per turn on its server (the other one when that fails), holding its
/// set for a turn, recording every name's acquisition and end. Returns how many sets it held.
async fn work(
    worker: usize,
    urls: Vec<String>,
    histories: Arc<HashMap<&'static str, History>>,
    stop: CancellationToken,
) -> usize {
    let mut held = 0;
    let mut round = 0;
    while !stop.is_cancelled() {
        round += 1;
        let names = set(worker, round);
        let url = &urls[(worker + round / 7) % urls.len()];
        let record = |kind, call, returned, outcome, token, name: &str| {
            histories[name].record(worker, kind, call, returned, outcome, token, 0);
        };
        let called = Instant::now();
        let Some((requests, mut events)) = open(url, &names).await else {
            sleep(Duration::from_millis(20)).await;
            continue;
        };
        let answer = timeout(STEP, first_answer(&mut events)).await;
        let acquired = match answer {
            Ok(Ok(Some(Event::Acquired(acquired)))) => acquired,
            // Refused (its wait ran out, ABORTED): nothing taken.
            Ok(Err(status)) if status.code() == tonic::Code::Aborted => {
                for name in &names {
                    record(
                        Kind::Acquire,
                        called,
                        Some(Instant::now()),
                        Outcome::Refused,
                        0,
                        name,
                    );
                }
                continue;
            }
            // Unknown: it may have been granted to nobody who heard.
            _ => {
                for name in &names {
                    record(Kind::Acquire, called, None, Outcome::Unknown, 0, name);
                }
                sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let granted = Instant::now();
        // The whole set, a token for each name, or the server broke its promise.
        let fenced: Vec<&str> = acquired.fences.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(fenced, names, "worker {worker} was given part of its set");
        for fence in &acquired.fences {
            let name = fence.name.as_str();
            record(
                Kind::Acquire,
                called,
                Some(granted),
                Outcome::Ok,
                fence.fencing_token,
                name,
            );
        }
        held += 1;
        // Believed until the turn ends, the validity runs out, or the lease is lost, for every
        // name at once.
        let valid_for = Duration::from_millis(acquired.valid_for_ms.into());
        let believe = TURN.min(valid_for.saturating_sub(Duration::from_millis(50)));
        let lost = timeout(believe, until_lost(&mut events)).await.is_ok();
        let ended = Instant::now();
        let kind = if lost { Kind::Lost } else { Kind::Release };
        if !lost {
            let release = LeaseRequest {
                action: Some(Action::Release(LeaseRelease {})),
            };
            let _ = requests.send(release).await;
            let _ = timeout(STEP, until_lost(&mut events)).await;
        }
        let returned = Instant::now();
        for fence in &acquired.fences {
            histories[fence.name.as_str()].record_end(
                worker,
                kind,
                ended,
                returned,
                fence.fencing_token,
            );
        }
    }
    held
}

type Opened = (mpsc::Sender<LeaseRequest>, Streaming<LeaseResponse>);

/// A `Lease` stream to `url` asking for `names`, or `None` if the server cannot be reached.
async fn open(url: &str, names: &[&str]) -> Option<Opened> {
    let channel = timeout(
        STEP,
        tonic::transport::Endpoint::from_shared(url.to_owned())
            .ok()?
            .connect(),
    )
    .await
    .ok()?
    .ok()?;
    let (requests, outbox) = mpsc::channel(4);
    let acquire = LeaseAcquire {
        name: names[0].to_owned(),
        more_names: names[1..].iter().map(|&n| n.to_owned()).collect(),
        ttl_ms: TTL_MS,
        wait_ms: WAIT_MS,
        holder: "several".into(),
        ..Default::default()
    };
    let first = LeaseRequest {
        action: Some(Action::Acquire(acquire)),
    };
    requests.send(first).await.ok()?;
    let mut client = LockServiceClient::new(channel);
    let call = client.lease(ReceiverStream::new(outbox));
    let events = timeout(STEP, call).await.ok()?.ok()?.into_inner();
    Some((requests, events))
}

/// The first answer that is not `waiting`.
async fn first_answer(
    events: &mut Streaming<LeaseResponse>,
) -> Result<Option<Event>, tonic::Status> {
    loop {
        match events.next().await {
            None => return Ok(None),
            Some(Err(status)) => return Err(status),
            Some(Ok(LeaseResponse {
                event: Some(Event::Waiting(_)),
            })) => continue,
            Some(Ok(response)) => return Ok(response.event),
        }
    }
}

/// Completes when the lease ends: lost, released, or its stream gone.
async fn until_lost(events: &mut Streaming<LeaseResponse>) {
    loop {
        match events.next().await {
            Some(Ok(LeaseResponse {
                event: Some(Event::Extended(_)),
            })) => continue,
            _ => return,
        }
    }
}
