//! Leases that outlive their server: replicas on one Redis are stopped for a deploy (SIGTERM),
//! started again, or killed (SIGKILL), while clients that know every replica hold leases, lead
//! an election and run a `leasehold run` job. Nobody is told `lost`, every fencing token and
//! term stays the same, and nobody else gets a lock in between.

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use fred::prelude::ClientLike;
use leasehold_client::{Client, LeaseGuard};
use support::*;
use tokio::time::{Instant, sleep_until};

const TTL: Duration = Duration::from_secs(2);
const LEASES: usize = 9;

/// A client per replica, each starting with its own, so the leases spread over all three.
async fn clients(replicas: &Replicas) -> Vec<Client> {
    let mut clients = Vec::new();
    for first in 0..replicas.servers.len() {
        clients.push(Client::connect(replicas.urls_from(first)).await.unwrap());
    }
    clients
}

async fn hold(clients: &[Client]) -> Vec<(String, LeaseGuard)> {
    let mut held = Vec::new();
    for k in 0..LEASES {
        let name = format!("lease-{k}");
        let guard = clients[k % clients.len()]
            .lease(&name)
            .ttl(TTL)
            .acquire()
            .await
            .unwrap();
        held.push((name, guard));
    }
    held
}

/// Every lease still believed held, its key holding its token, and Redis reporting the fencing
/// token it was acquired with.
async fn assert_all_held(
    held: &[(String, LeaseGuard)],
    client: &Client,
    direct: &fred::prelude::Client,
) {
    for (name, guard) in held {
        assert!(!guard.is_lost(), "{name} was reported lost");
        assert_eq!(
            get(direct, &lock_key(name)).await.as_deref(),
            Some(guard.token()),
            "{name}'s key"
        );
        let described = client.describe(name.clone()).await.unwrap();
        assert_eq!(described.fencing_token, guard.fencing_token(), "{name}");
    }
}

/// A thief with no wait, through `replica`, gets none of the names.
async fn assert_thief_refused(replica: &ServerProcess, held: &[(String, LeaseGuard)]) {
    let thief = Client::connect(replica.url()).await.unwrap();
    for (name, _) in held {
        let answer = thief.acquire_once(name.clone(), TTL).await.unwrap();
        assert!(
            !answer.acquired,
            "a thief took {name} through {}",
            replica.url()
        );
    }
}

/// `leasehold run` holding `job` until `done` exists, through every replica.
fn start_job(replicas: &Replicas, done: &std::path::Path) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "run",
            "--server",
            &replicas.urls(),
            "--ttl",
            "2s",
            "job",
            "--",
        ])
        .args(["sh", "-c", &job_script(done)])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The job's command: says it started (`started` beside `done`), then runs until `done` exists.
fn job_script(done: &std::path::Path) -> String {
    format!(
        ": > {}; until [ -e {} ]; do sleep 0.05; done",
        started(done).display(),
        done.display()
    )
}

fn started(done: &std::path::Path) -> std::path::PathBuf {
    done.with_file_name("started")
}

/// Waits for the job's command to run: `run` starts it only once told `acquired`. (The key
/// alone is not enough: a server killed between taking the key and answering leaves a client
/// that never heard it holds the lease, and cannot resume it.)
async fn job_started(direct: &fred::prelude::Client, done: &std::path::Path) {
    within(EVENT_TIMEOUT, "the job's command", async {
        while !started(done).exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        get(direct, &lock_key("job")).await.is_some(),
        "the job runs without its lease"
    );
}

async fn job_exits_zero(mut job: tokio::process::Child, done: &std::path::Path) {
    std::fs::write(done, b"").unwrap();
    let output = within(EVENT_TIMEOUT, "the job's exit", async {
        job.wait().await.unwrap()
    })
    .await;
    let mut stderr = String::new();
    if let Some(mut pipe) = job.stderr.take() {
        use tokio::io::AsyncReadExt;
        let _ = pipe.read_to_string(&mut stderr).await;
    }
    assert!(output.success(), "the job exited {output:?}: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_every_replica_loses_no_lease_leadership_or_job() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let mut replicas = Replicas::start(&redis, 3, &[]);
    let clients = clients(&replicas).await;
    let held = hold(&clients).await;

    // A leader on replica 0, an observer on replica 1.
    let mut candidate = clients[0]
        .campaign("scheduler", "host-a", TTL)
        .await
        .unwrap();
    let term = candidate.elected().await.unwrap();
    let mut observation = clients[1].observe("scheduler").await.unwrap();
    let first = observation.next().await.unwrap().expect("a leader");
    assert_eq!(first.term, term);
    let (changes_tx, mut changes) = tokio::sync::mpsc::unbounded_channel();
    let observer = tokio::spawn(async move {
        while let Ok(state) = observation.next().await {
            let _ = changes_tx.send(state);
        }
    });
    let (lost_tx, mut leader_lost) = tokio::sync::oneshot::channel();
    let leader = tokio::spawn(async move {
        let reason = candidate.lost().await;
        let _ = lost_tx.send(reason);
    });

    let dir = tempdir();
    let done = dir.join("done");
    let job = start_job(&replicas, &done);
    job_started(&direct, &done).await;

    for i in 0..3 {
        let status = replicas.stop(i).await;
        assert!(status.success(), "replica {i} exited {status:?}");
        let up = (i + 1) % 3;
        let client = Client::connect(replicas.servers[up].url()).await.unwrap();
        assert_all_held(&held, &client, &direct).await;
        for j in (0..3).filter(|&j| j != i) {
            assert_thief_refused(&replicas.servers[j], &held).await;
        }
        replicas.start_again(i).await;
    }
    // Past a whole TTL since the last restart: any lease not resumed would be lost by now.
    sleep_until(Instant::now() + TTL).await;
    let client = Client::connect(replicas.urls()).await.unwrap();
    assert_all_held(&held, &client, &direct).await;
    let now = client.leader("scheduler").await.unwrap().expect("a leader");
    assert_eq!(now.term, term, "the leader's term changed");
    assert!(leader_lost.try_recv().is_err(), "the leader was told lost");
    assert!(changes.try_recv().is_err(), "observers saw a leader change");
    job_exits_zero(job, &done).await;

    for (name, guard) in held {
        assert!(
            guard.release().await.unwrap(),
            "{name} was not held at release"
        );
        assert_eq!(get(&direct, &lock_key(&name)).await, None);
    }
    leader.abort();
    observer.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_two_of_three_replicas_loses_no_lease_or_job() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let mut replicas = Replicas::start(&redis, 3, &[]);
    let clients = clients(&replicas).await;
    let held = hold(&clients).await;
    let dir = tempdir();
    let done = dir.join("done");
    let job = start_job(&replicas, &done);
    job_started(&direct, &done).await;

    replicas.kill(0);
    replicas.kill(1);
    let killed_at = Instant::now();
    // Every lease resumes on the survivor: each resume counts an attachment in Redis.
    within(
        EVENT_TIMEOUT,
        "every lease resumed on the survivor",
        async {
            loop {
                let mut resumed = 0;
                for (name, _) in &held {
                    let value = redis_cli(redis.port(), &["GET", &lock_key(name)]);
                    resumed += usize::from(support::lease_value(&value).attachment > 0);
                }
                if resumed >= LEASES * 2 / 3 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await;
    // Past the validity the leases had when their servers died.
    sleep_until(killed_at + TTL).await;
    let survivor = &replicas.servers[2];
    let client = Client::connect(survivor.url()).await.unwrap();
    assert_all_held(&held, &client, &direct).await;
    assert_thief_refused(survivor, &held).await;
    job_exits_zero(job, &done).await;
    for (_, guard) in held {
        assert!(guard.release().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_cannot_be_resumed_is_lost_before_redis_could_free_it() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let mut replicas = Replicas::start(&redis, 2, &[]);
    let ttl = Duration::from_secs(3);

    // Deleted behind the server's back, then its server dies: the resume finds nothing and
    // says so at once, long before the validity would have run out.
    let client = Client::connect(replicas.urls()).await.unwrap();
    let guard = client.lease("deleted").ttl(ttl).acquire().await.unwrap();
    signal(replicas.servers[0].pid(), "STOP"); // No renewal finds the deletion first.
    let _: i64 = fred::prelude::KeysInterface::del(&direct, lock_key("deleted"))
        .await
        .unwrap();
    replicas.kill(0);
    let killed_at = Instant::now();
    let reason = within(EVENT_TIMEOUT, "lost", guard.lost()).await;
    assert!(
        killed_at.elapsed() < ttl / 2,
        "told after {:?}: {reason}",
        killed_at.elapsed()
    );
    assert!(reason.contains("no lease of lock"), "{reason}");

    // No replica left: lost by the client's own clock, while Redis still holds the key.
    replicas.start_again(0).await;
    let client = Client::connect(replicas.urls()).await.unwrap();
    let guard = client.lease("stranded").ttl(ttl).acquire().await.unwrap();
    replicas.kill(0);
    replicas.kill(1);
    // Nobody renews it now: Redis frees it at this moment (Unix ms, the same machine's clock).
    let expires_at: i64 = direct
        .custom(fred::cmd!("PEXPIRETIME"), vec![lock_key("stranded")])
        .await
        .unwrap();
    let reason = within(EVENT_TIMEOUT, "lost", guard.lost()).await;
    assert!(reason.contains("could not resume"), "{reason}");
    // The guard believed in the lease until this moment, no longer: never past the key.
    let believed_until =
        unix_ms() - as_ms(Instant::now().saturating_duration_since(guard.valid_until()));
    assert!(
        believed_until < expires_at,
        "believed {} ms past the moment Redis could free the lock",
        believed_until - expires_at
    );
}

fn as_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap()
}

fn unix_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(now.as_millis()).unwrap()
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "leasehold-handover-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A draining server closes its listening socket at once, even while a call that never ends by
/// itself keeps it draining: a client connecting then is refused and moves to another replica,
/// rather than waiting in a backlog nobody accepts from, past its leases' validity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_refuses_new_connections_at_once() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let redis = RedisServer::start();
    // A drain far longer than the test: a loaded machine's slow steps never reach its end (the
    // server is killed when the test ends).
    let mut server = ServerProcess::start(&redis, &["--drain", "60s"]);
    let mut watch = HealthWatch::open(&server.url(), "").await;
    assert_eq!(watch.next(EVENT_TIMEOUT).await, ServingStatus::Serving);
    signal(server.pid(), "TERM");
    assert_eq!(watch.next(EVENT_TIMEOUT).await, ServingStatus::NotServing);
    within(EVENT_TIMEOUT, "the listener closed", async {
        while tokio::net::TcpStream::connect(server.addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Still draining (the watch holds it), yet no longer listening.
    assert!(
        server
            .exited_within(Duration::from_millis(100))
            .await
            .is_none(),
        "the server exited before its drain ended"
    );
}

/// A DNS name with several addresses stands for every replica: `leasehold run` given one name
/// (two replicas behind it, on 127.0.0.1 and 127.0.0.2) keeps its command running while each is
/// restarted in turn. The name lives in a hosts file of the job's own mount namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_with_several_addresses_is_every_replica() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let port = free_port();
    let addrs: Vec<std::net::SocketAddr> = ["127.0.0.1", "127.0.0.2"]
        .iter()
        .map(|ip| format!("{ip}:{port}").parse().unwrap())
        .collect();
    let mut servers: Vec<ServerProcess> = addrs
        .iter()
        .map(|addr| ServerProcess::start_at(&redis.url(), *addr, &[]))
        .collect();
    let dir = tempdir();
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "127.0.0.1 replicas.test\n127.0.0.2 replicas.test\n").unwrap();
    let done = dir.join("done");
    let script = format!(
        "mount --bind {} /etc/hosts && exec {} run --server http://replicas.test:{port} --ttl 2s job -- sh -c '{}'",
        hosts.display(),
        env!("CARGO_BIN_EXE_leasehold"),
        job_script(&done)
    );
    let job = tokio::process::Command::new("unshare")
        .args(["--mount", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    job_started(&direct, &done).await;
    let token = get(&direct, &lock_key("job")).await;
    for (i, addr) in addrs.iter().enumerate() {
        let status = servers[i].stop().await;
        assert!(status.success(), "{status:?}");
        servers[i] = ServerProcess::start_at(&redis.url(), *addr, &[]);
        assert_eq!(
            get(&direct, &lock_key("job")).await,
            token,
            "the job's lease changed"
        );
    }
    // A whole TTL on: had the job's lease not resumed, the job would have been stopped by now.
    sleep_until(Instant::now() + TTL).await;
    assert_eq!(get(&direct, &lock_key("job")).await, token);
    job_exits_zero(job, &done).await;
    assert_eq!(get(&direct, &lock_key("job")).await, None);
}

/// A client that holds a lease and follows an election on one connection, through a deploy's
/// stop of its server (SIGTERM, a drain far longer than the test): the server ends the
/// `Observe` stream as it hands the lease over and exits at once (an open `Observe` does not
/// hold its drain), the lease resumes on the other replica within its 500 ms TTL, and the
/// observation follows the election there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_lets_a_client_that_observes_move_on_with_its_lease() {
    let ttl = Duration::from_millis(500);
    let redis = RedisServer::start();
    let mut replicas = Replicas::start(&redis, 2, &["--drain", "10s"]);
    // One client, replica 0 first: the lease and the observation share its connection.
    let client = Client::connect(replicas.urls()).await.unwrap();
    let guard = client.lease("held").ttl(ttl).acquire().await.unwrap();
    let leader_client = Client::connect(replicas.servers[1].url()).await.unwrap();
    let mut candidate = leader_client
        .campaign("scheduler", "host-a", TTL)
        .await
        .unwrap();
    let term = candidate.elected().await.unwrap();
    let mut observation = client.observe("scheduler").await.unwrap();
    let first = within(EVENT_TIMEOUT, "the first observation", observation.next())
        .await
        .unwrap();
    assert_eq!(first.map(|leader| leader.term), Some(term));
    let (changes_tx, mut changes) = tokio::sync::mpsc::unbounded_channel();
    let observer = tokio::spawn(async move {
        loop {
            let state = observation.next().await;
            let failed = state.is_err();
            let _ = changes_tx.send(state.map_err(|error| error.to_string()));
            if failed {
                return;
            }
        }
    });

    let stopped_at = Instant::now();
    signal(replicas.servers[0].pid(), "TERM");
    let status = replicas.servers[0]
        .exited_within(Duration::from_secs(5))
        .await
        .expect("the server did not exit within 5 s of SIGTERM (drain 10 s): a call held it");
    assert!(status.success(), "replica 0 exited {status:?}");
    let exited_after = stopped_at.elapsed();

    // Past the lease's whole TTL since the stop: not resumed, it would be lost by now.
    sleep_until(stopped_at + ttl * 2).await;
    if guard.is_lost() {
        panic!("the lease was lost: {}", guard.lost().await);
    }
    let outages = guard.outages();
    assert_eq!(outages.len(), 1, "resumes: {outages:?}");
    assert!(
        outages[0].duration() < ttl,
        "the lease was between servers for {:?}",
        outages[0].duration()
    );

    // The observation follows the election on replica 1 now: the leader's resignation shows.
    assert!(
        candidate.resign().await.unwrap(),
        "the leader was not leading"
    );
    let change = within(EVENT_TIMEOUT, "the resignation observed", changes.recv())
        .await
        .expect("the observer ended");
    assert_eq!(
        change,
        Ok(None),
        "after the stop (exited after {exited_after:?})"
    );
    assert!(
        guard.release().await.unwrap(),
        "the lease was not held at release"
    );
    observer.abort();
}
