//! Test harness: real `redis-server` processes on free loopback ports, the Leasehold server
//! in-process or as a child process, a gRPC client helper and a TCP proxy that can freeze.
#![allow(dead_code)]

pub mod browser;
pub mod certs;
pub mod chaos;
pub mod cluster;
pub mod faketime;
pub mod history;
pub mod netns;
pub mod newer_redis;
pub mod permits;
pub mod proxy;
pub mod sentinel;
pub mod watchdog;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fred::prelude::{Builder, ClientLike, Config};
use leasehold::pb::lease_request::Action;
use leasehold::pb::lease_response::Event;
use leasehold::pb::lock_service_client::LockServiceClient;
use leasehold::pb::{LeaseAcquire, LeaseRelease, LeaseRequest, LeaseResponse};
use leasehold::server::{ServerConfig, serve};
use leasehold::store::{RedisSettings, Store};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Status, Streaming};

/// Longest any single awaited event may take before a test fails instead of hanging.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis-server` of the test's own, on a free port; killed on drop.
pub struct RedisServer {
    child: Child,
    /// The server binary: `redis-server` from the PATH, or a newer one ([`newer_redis`]).
    program: PathBuf,
    port: u16,
    dir: PathBuf,
    /// The network namespace it runs in, if not the test's own.
    ns: Option<String>,
    ip: std::net::IpAddr,
    /// Its extra arguments (`--replicaof …`), kept for a restart.
    extra: Vec<String>,
}

pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

fn answers_ping(ip: std::net::IpAddr, port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&(ip, port).into(), Duration::from_millis(500))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

/// `redis-cli -p port args…`, its output trimmed ("" if it could not run).
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    redis_cli_at([127, 0, 0, 1].into(), port, args)
}

/// `redis-cli -h ip -p port args…`, its output trimmed ("" if it could not run).
pub fn redis_cli_at(ip: std::net::IpAddr, port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-h", &ip.to_string(), "-p", &port.to_string()])
        .args(args)
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Runs `redis-cli -p port args…` until `done` accepts its output (at most 20 s).
pub fn until_redis_cli(port: u16, args: &[&str], done: impl Fn(&str) -> bool) {
    let started = std::time::Instant::now();
    while !done(&redis_cli(port, args)) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "redis node {port} never answered {args:?} as expected"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `program`, in network namespace `ns` if there is one (`ip netns exec` execs it: same pid).
fn command_in(ns: Option<&str>, program: impl AsRef<std::ffi::OsStr>) -> Command {
    match ns {
        Some(ns) => {
            let mut command = Command::new("ip");
            command.args(["netns", "exec", ns]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// Starts `program` (redis-server or a compatible server) on `ip:port` (in namespace `ns`) and
/// waits until it answers; `None` if it exited (port taken).
fn spawn_redis(
    program: &Path,
    ns: Option<&str>,
    ip: std::net::IpAddr,
    port: u16,
    dir: &PathBuf,
    extra: &[String],
) -> Option<Child> {
    watchdog::watch();
    std::fs::create_dir_all(dir).expect("temp dir");
    let mut child = command_in(ns, program)
        .args(["--port", &port.to_string(), "--bind", &ip.to_string()])
        // Off its loopback (in a namespace) Redis answers only with protected mode off.
        .args(["--protected-mode", if ns.is_some() { "no" } else { "yes" }])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| {
            panic!(
                "{} must be installed (apt-get install -y redis-server): {error}",
                program.display()
            )
        });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if answers_ping(ip, port) {
            return Some(child);
        }
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// As [`RedisServer::start`], with extra `redis-server` arguments (`--maxmemory-policy
    /// allkeys-lru`, `--rename-command CONFIG ""`), kept for a restart.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_program(Path::new("redis-server"), extra)
    }

    /// As [`RedisServer::start_with`], running `program` instead of the `redis-server` on the
    /// PATH (a newer server: [`newer_redis::start_with`]).
    pub fn start_program(program: &Path, extra: &[&str]) -> Self {
        let extra: Vec<String> = extra.iter().map(|arg| arg.to_string()).collect();
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!(
                "leasehold-test-redis-{}-{port}",
                std::process::id()
            ));
            let ip = [127, 0, 0, 1].into();
            if let Some(child) = spawn_redis(program, None, ip, port, &dir, &extra) {
                return RedisServer {
                    child,
                    program: program.to_owned(),
                    port,
                    dir,
                    ns: None,
                    ip,
                    extra,
                };
            }
        }
        panic!("could not start {}", program.display());
    }

    /// A Redis in network namespace `host`, on its link to the Redis bridge.
    pub fn start_in(host: &netns::Host) -> Self {
        Self::start_in_with(host, Vec::new())
    }

    /// As [`RedisServer::start_in`], with extra arguments (`--replicaof IP PORT`).
    pub fn start_in_with(host: &netns::Host, extra: Vec<String>) -> Self {
        let port = 6379;
        let ip = host.addr(netns::Side::Redis).into();
        let dir = std::env::temp_dir().join(format!("leasehold-test-redis-{}", host.name));
        let program = PathBuf::from("redis-server");
        let child = spawn_redis(&program, Some(&host.name), ip, port, &dir, &extra)
            .unwrap_or_else(|| panic!("could not start redis-server in {}", host.name));
        RedisServer {
            child,
            program,
            port,
            dir,
            ns: Some(host.name.clone()),
            ip,
            extra,
        }
    }

    /// Kills Redis (SIGKILL) and starts it again, empty, on the same port.
    pub fn restart_empty(&mut self) {
        self.kill_and_start_again();
    }

    /// Kills Redis (SIGKILL) and starts it again on the same port, in the same directory and
    /// with the same arguments: empty, unless they keep an append-only file, which it reloads.
    pub fn kill_and_start_again(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for _ in 0..50 {
            let (ns, ip, port) = (self.ns.as_deref(), self.ip, self.port);
            let program = &self.program;
            if let Some(child) = spawn_redis(program, ns, ip, port, &self.dir, &self.extra) {
                self.child = child;
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("could not restart redis-server on port {}", self.port);
    }

    /// Kills Redis (SIGKILL) and starts it again, empty, on the same port with `extra` arguments
    /// instead of its own (a Redis restarted with another configuration).
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.extra = extra.iter().map(|arg| arg.to_string()).collect();
        self.restart_empty();
    }

    /// Kills Redis (SIGKILL) and leaves it down.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://{}:{}", self.ip, self.port)
    }

    pub fn ip(&self) -> std::net::IpAddr {
        self.ip
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A direct Redis client, to look at and tamper with keys behind the server's back; each
    /// of its commands is bounded by `EVENT_TIMEOUT` (a command to a Redis that never answers
    /// fails the test rather than hanging it).
    pub async fn client(&self) -> fred::prelude::Client {
        let client = Builder::from_config(Config::from_url(&self.url()).expect("url"))
            .with_performance_config(|p| p.default_command_timeout = EVENT_TIMEOUT)
            .build()
            .expect("client");
        client.init().await.expect("connect to test redis");
        client
    }

    /// Freezes the process (SIGSTOP), as a stalled or partitioned Redis would look.
    pub fn pause(&self) {
        signal(self.pid(), "STOP");
    }

    pub fn resume(&self) {
        signal(self.pid(), "CONT");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Still running (maybe paused): let it go on to its kill. A killed one has exited.
        if let Ok(None) = self.child.try_wait() {
            signal(self.pid(), "CONT");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// The key holding a lock's token, as the server lays it out with the default prefix.
pub fn lock_key(name_tag: &str) -> String {
    format!("leasehold:{{{name_tag}}}:lock")
}

/// Settings that make keepalive failures show within a second.
pub fn fast_keepalive() -> ServerConfig {
    ServerConfig {
        keepalive_interval: Duration::from_millis(200),
        keepalive_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    }
}

/// Redis settings for in-process test servers: a short command timeout, so faults show fast.
fn test_settings(url: &str) -> RedisSettings {
    let mut settings = RedisSettings::new(url);
    settings.command_timeout = Duration::from_secs(1);
    settings
}

/// A Leasehold server running in this process; stops (gracefully) on drop or `stop`.
pub struct TestServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    pub async fn start(redis: &RedisServer) -> Self {
        Self::start_with(redis, "leasehold:", fast_keepalive()).await
    }

    pub async fn start_with(redis: &RedisServer, prefix: &str, config: ServerConfig) -> Self {
        Self::start_at(&redis.url(), prefix, config).await
    }

    /// As [`TestServer::start_with`], its Redis commands given [`EVENT_TIMEOUT`] rather than a
    /// second: for a test that loads the server on purpose (a benchmark), where a command
    /// queued behind many may wait past a second on a busy machine, and a fault is not the point.
    pub async fn start_unhurried(redis: &RedisServer, config: ServerConfig) -> Self {
        let mut settings = test_settings(&redis.url());
        settings.command_timeout = EVENT_TIMEOUT;
        let store = Store::connect(&settings, "leasehold:", Default::default())
            .await
            .expect("connect store");
        Self::serve(store, config).await
    }

    /// A server on the Redis (or Redis Cluster) at `url`.
    pub async fn start_at(url: &str, prefix: &str, config: ServerConfig) -> Self {
        let store = Store::connect(&test_settings(url), prefix, Default::default())
            .await
            .expect("connect store");
        Self::serve(store, config).await
    }

    /// A server on Redlock's independent primaries at `urls`.
    pub async fn start_redlock(urls: &[String], config: ServerConfig) -> Self {
        let settings = test_settings("");
        let store = Store::connect_redlock(&settings, urls, "leasehold:", Default::default())
            .await
            .expect("connect to the Redlock primaries");
        Self::serve(store, config).await
    }

    async fn serve(store: Store, config: ServerConfig) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            serve(listener, store, config, shutdown)
                .await
                .expect("server failed");
        });
        TestServer {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn client(&self) -> LockServiceClient<Channel> {
        connect(&self.url()).await
    }

    /// Graceful stop; returns once the server has finished.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(EVENT_TIMEOUT, task)
                .await
                .expect("server did not stop in time")
                .expect("server task panicked");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The real `leasehold` binary as a child process, for tests that kill or pause it.
pub struct ServerProcess {
    child: Child,
    stdout: BufReader<std::process::ChildStdout>,
    pub addr: SocketAddr,
    /// The network namespace it runs in, if not the test's own.
    ns: Option<String>,
    /// Extra environment (a fake clock's), kept for [`ServerProcess::start_again`].
    env: Vec<(String, String)>,
}

impl ServerProcess {
    pub fn start(redis: &RedisServer, extra: &[&str]) -> Self {
        Self::start_with_url(&redis.url(), extra)
    }

    pub fn start_with_url(redis_url: &str, extra: &[&str]) -> Self {
        Self::spawn(&["--redis", redis_url], extra)
    }

    /// As [`ServerProcess::start`], with extra environment.
    pub fn start_with_env(redis: &RedisServer, extra: &[&str], env: Vec<(String, String)>) -> Self {
        Self::spawn_at(None, "127.0.0.1:0", &["--redis", &redis.url()], extra, env)
    }

    /// A server listening on `addr` (a replica started again where it was).
    pub fn start_at(redis_url: &str, addr: SocketAddr, extra: &[&str]) -> Self {
        Self::spawn_at(
            None,
            &addr.to_string(),
            &["--redis", redis_url],
            extra,
            Vec::new(),
        )
    }

    /// A server in network namespace `host`, listening on its link to the clients' bridge;
    /// `redis` as for the `serve` command (`--redis URL` or `--redlock URLS`).
    pub fn start_in(host: &netns::Host, redis: &[&str], extra: &[&str]) -> Self {
        Self::start_in_with_env(host, redis, extra, Vec::new())
    }

    /// As [`ServerProcess::start_in`], with extra environment (a fake clock's).
    pub fn start_in_with_env(
        host: &netns::Host,
        redis: &[&str],
        extra: &[&str],
        env: Vec<(String, String)>,
    ) -> Self {
        let listen = format!("{}:0", host.addr(netns::Side::Clients));
        Self::spawn_at(Some(&host.name), &listen, redis, extra, env)
    }

    /// A server started again where this one was (same namespace, address and environment).
    pub fn start_again(&self, redis: &[&str], extra: &[&str]) -> Self {
        let (ns, listen) = (self.ns.as_deref(), self.addr.to_string());
        Self::spawn_at(ns, &listen, redis, extra, self.env.clone())
    }

    /// Sends SIGTERM (a deploy's stop) and waits for the process to exit by itself.
    pub async fn stop(&mut self) -> std::process::ExitStatus {
        signal(self.pid(), "TERM");
        self.exited_within(Duration::from_secs(15))
            .await
            .expect("the server did not exit within 15 s of SIGTERM")
    }

    /// A server on Redlock's independent primaries at `urls`.
    pub fn start_redlock(urls: &[String], extra: &[&str]) -> Self {
        Self::spawn(&["--redlock", &urls.join(",")], extra)
    }

    fn spawn(redis: &[&str], extra: &[&str]) -> Self {
        Self::spawn_at(None, "127.0.0.1:0", redis, extra, Vec::new())
    }

    fn spawn_at(
        ns: Option<&str>,
        listen: &str,
        redis: &[&str],
        extra: &[&str],
        env: Vec<(String, String)>,
    ) -> Self {
        let mut child = command_in(ns, env!("CARGO_BIN_EXE_leasehold"))
            .args(["serve", "--listen", listen])
            .args(redis)
            .args(extra)
            .envs(env.iter().map(|(key, value)| (key, value)))
            .env(
                "RUST_LOG",
                std::env::var("LEASEHOLD_TEST_RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            // Faults make servers log warnings by design; show them only when asked.
            .stderr(if std::env::var_os("LEASEHOLD_TEST_LOG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("start leasehold");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read listening line");
        let addr = line
            .trim()
            .strip_prefix("leasehold: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .expect("address");
        ServerProcess {
            child,
            stdout,
            addr,
            ns: ns.map(str::to_owned),
            env,
        }
    }

    /// The next line the server prints on stdout (after the listening line).
    pub fn next_line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read a line");
        line.trim().to_owned()
    }

    /// Where a server started with `--metrics` serves them (`host:port`): its next line.
    pub fn metrics_addr(&mut self) -> String {
        let line = self.next_line();
        line.strip_prefix("leasehold: metrics on http://")
            .and_then(|rest| rest.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("{line}"))
            .to_owned()
    }

    /// Waits for the process to exit by itself, up to `limit`: its status, or `None`.
    pub async fn exited_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let started = tokio::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if started.elapsed() > limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill(); // SIGKILL: no chance to release anything.
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        signal_quietly(self.child.id(), "CONT");
        self.kill();
    }
}

fn signal_quietly(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

pub async fn connect(url: &str) -> LockServiceClient<Channel> {
    let channel = Endpoint::from_shared(url.to_owned())
        .expect("endpoint")
        .connect()
        .await
        .expect("connect to leasehold");
    LockServiceClient::new(channel)
}

pub fn acquire_request(name: &str, ttl_ms: u32, wait_ms: u32, holder: &str) -> LeaseRequest {
    LeaseRequest {
        action: Some(Action::Acquire(LeaseAcquire {
            name: name.to_owned(),
            ttl_ms,
            wait_ms,
            holder: holder.to_owned(),
            fair: None,
            ..Default::default()
        })),
    }
}

pub fn release_request() -> LeaseRequest {
    LeaseRequest {
        action: Some(Action::Release(LeaseRelease {})),
    }
}

/// One open `Lease` stream, seen from the client.
pub struct LeaseStream {
    pub requests: Option<mpsc::Sender<LeaseRequest>>,
    pub events: Streaming<LeaseResponse>,
}

impl LeaseStream {
    /// Opens a stream and sends `first`.
    pub async fn open(client: &mut LockServiceClient<Channel>, first: LeaseRequest) -> Self {
        let (tx, rx) = mpsc::channel(4);
        tx.send(first).await.expect("queue first request");
        let events = client
            .lease(ReceiverStream::new(rx))
            .await
            .expect("lease call")
            .into_inner();
        LeaseStream {
            requests: Some(tx),
            events,
        }
    }

    pub async fn acquire(
        client: &mut LockServiceClient<Channel>,
        name: &str,
        ttl_ms: u32,
        wait_ms: u32,
        holder: &str,
    ) -> Self {
        Self::open(client, acquire_request(name, ttl_ms, wait_ms, holder)).await
    }

    pub async fn send(&self, request: LeaseRequest) {
        self.requests
            .as_ref()
            .expect("stream half-closed")
            .send(request)
            .await
            .expect("send request");
    }

    /// Half-closes the client's side.
    pub fn half_close(&mut self) {
        self.requests = None;
    }

    /// The next message: `Ok(Some(event))`, `Ok(None)` when the stream ended cleanly, or the
    /// status that ended it.
    pub async fn next(&mut self) -> Result<Option<Event>, Status> {
        match tokio::time::timeout(EVENT_TIMEOUT, self.events.next()).await {
            Err(_) => panic!("no lease event within {EVENT_TIMEOUT:?}"),
            Ok(None) => Ok(None),
            Ok(Some(Err(status))) => Err(status),
            Ok(Some(Ok(response))) => Ok(Some(response.event.expect("event without body"))),
        }
    }

    /// The next event that is not `Extended` (renewals are best-effort progress), within
    /// `EVENT_TIMEOUT` in all: a lease renewed for ever (a broken build renewing a key that is
    /// not its own) must fail the test, not hang it one renewal at a time.
    pub async fn next_significant(&mut self) -> Result<Option<Event>, Status> {
        let skip_renewals = async {
            loop {
                match self.next().await? {
                    Some(Event::Extended(_)) => continue,
                    other => return Ok(other),
                }
            }
        };
        within(
            EVENT_TIMEOUT,
            "a lease event other than Extended",
            skip_renewals,
        )
        .await
    }

    /// Sends `release` and expects `Released`; returns whether the lock was still held.
    pub async fn release(&mut self) -> bool {
        self.send(release_request()).await;
        match self.next_significant().await {
            Ok(Some(Event::Released(released))) => released.was_held,
            other => panic!("expected Released, got {other:?}"),
        }
    }

    /// Expects `Waiting` (the lock is taken; this stream is in line) and returns it.
    pub async fn waiting(&mut self) -> leasehold::pb::Waiting {
        match self.next_significant().await {
            Ok(Some(Event::Waiting(waiting))) => waiting,
            other => panic!("expected Waiting, got {other:?}"),
        }
    }

    /// Expects `Acquired` (after any `Waiting` updates) and returns it.
    pub async fn acquired(&mut self) -> leasehold::pb::Acquired {
        loop {
            match self.next_significant().await {
                Ok(Some(Event::Acquired(acquired))) => return acquired,
                Ok(Some(Event::Waiting(_))) => continue,
                other => panic!("expected Acquired, got {other:?}"),
            }
        }
    }

    /// Expects the stream to end with a status and returns it.
    pub async fn status(&mut self) -> Status {
        match self.next_significant().await {
            Err(status) => status,
            other => panic!("expected an error status, got {other:?}"),
        }
    }
}

/// Polls Redis until `key` is gone (bounded), returning how long that took.
pub async fn wait_until_gone(
    redis: &fred::prelude::Client,
    key: &str,
    limit: Duration,
) -> Duration {
    use fred::prelude::KeysInterface;
    let started = Instant::now();
    loop {
        let exists: i64 = redis.exists(key).await.expect("exists");
        if exists == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{key} still exists after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The value of `key`, if any.
pub async fn get(redis: &fred::prelude::Client, key: &str) -> Option<String> {
    use fred::prelude::KeysInterface;
    let value: Option<String> = redis.get(key).await.expect("get");
    value.map(|value| lease_value(&value).token)
}

/// A lock key's value as the scripts write it: `<token>:<fencing token>:<attachment>:<holder>`.
pub struct LeaseValue {
    pub token: String,
    pub fencing_token: u64,
    pub attachment: u64,
    pub holder: String,
}

/// Reads a lock key's value (a value written by hand is all token).
pub fn lease_value(value: &str) -> LeaseValue {
    let mut fields = value.splitn(4, ':');
    let mut next = || fields.next().unwrap_or_default().to_owned();
    LeaseValue {
        token: next(),
        fencing_token: next().parse().unwrap_or(0),
        attachment: next().parse().unwrap_or(0),
        holder: next(),
    }
}

/// What most tests start with: a Redis of their own, a server on it, a direct Redis client to
/// look (and tamper) behind the server's back, and a gRPC client of the server. Keep the first
/// two alive (`_redis`, `_server`) for as long as the test runs.
pub async fn setup() -> (
    RedisServer,
    TestServer,
    fred::prelude::Client,
    LockServiceClient<Channel>,
) {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let client = server.client().await;
    (redis, server, direct, client)
}

/// Cancels `stop` and waits (bounded) for every worker task to end; a panic in one fails the test.
pub async fn stop_workers(
    stop: &tokio_util::sync::CancellationToken,
    workers: Vec<tokio::task::JoinHandle<()>>,
) {
    stop.cancel();
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(15), worker)
            .await
            .expect("worker did not stop")
            .expect("worker panicked");
    }
}

pub async fn within<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {limit:?}"))
}

/// A unary `Acquire` request.
pub fn unary_acquire(
    name: &str,
    ttl_ms: u32,
    wait_ms: u32,
    holder: &str,
) -> leasehold::pb::AcquireRequest {
    leasehold::pb::AcquireRequest {
        name: name.into(),
        ttl_ms,
        wait_ms,
        holder: holder.into(),
        fair: None,
        ..Default::default()
    }
}

/// A unary `Release` request of one name.
pub fn unary_release(name: &str, token: &str) -> leasehold::pb::ReleaseRequest {
    leasehold::pb::ReleaseRequest {
        name: name.into(),
        token: token.into(),
        ..Default::default()
    }
}

/// Polls the line's length (a Redis sorted set; no event tells when a remote waiter joins).
/// Waits (bounded) until the sorted set `line` (a lock's or an election's line of waiters)
/// holds `length` waiters.
pub async fn wait_for_line(direct: &fred::prelude::Client, line: &str, length: i64) {
    within(EVENT_TIMEOUT, "candidates in line", async {
        loop {
            let waiting: i64 = fred::prelude::SortedSetsInterface::zcard(direct, line)
                .await
                .unwrap();
            if waiting == length {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// A load balancer's health watch on a server (`service`: "" for the whole server).
pub struct HealthWatch(Streaming<tonic_health::pb::HealthCheckResponse>);

impl HealthWatch {
    pub async fn open(url: &str, service: &str) -> Self {
        let channel = Endpoint::from_shared(url.to_owned())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let request = tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        };
        let watch = tonic_health::pb::health_client::HealthClient::new(channel)
            .watch(request)
            .await
            .unwrap()
            .into_inner();
        HealthWatch(watch)
    }

    /// The next status the server reports, which must come within `limit`.
    pub async fn next(
        &mut self,
        limit: Duration,
    ) -> tonic_health::pb::health_check_response::ServingStatus {
        let message = within(limit, "a health change", self.0.next()).await;
        let status = message.expect("the health watch ended").unwrap().status;
        tonic_health::pb::health_check_response::ServingStatus::try_from(status).unwrap()
    }
}

/// Several replicas of the real binary on one Redis, each on an address of its own that it
/// keeps across restarts (as a deployment's replicas do behind their names).
pub struct Replicas {
    redis_url: String,
    flags: Vec<String>,
    pub servers: Vec<ServerProcess>,
}

impl Replicas {
    pub fn start(redis: &RedisServer, count: usize, flags: &[&str]) -> Self {
        let redis_url = redis.url();
        let servers = (0..count)
            .map(|_| ServerProcess::start_with_url(&redis_url, flags))
            .collect();
        Replicas {
            redis_url,
            flags: flags.iter().map(|f| f.to_string()).collect(),
            servers,
        }
    }

    /// Every replica's URL, comma-separated, starting with replica `first`.
    pub fn urls_from(&self, first: usize) -> String {
        let n = self.servers.len();
        (0..n)
            .map(|i| self.servers[(first + i) % n].url())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn urls(&self) -> String {
        self.urls_from(0)
    }

    /// Stops replica `i` as a deploy does (SIGTERM, waiting for its exit); returns its status.
    pub async fn stop(&mut self, i: usize) -> std::process::ExitStatus {
        self.servers[i].stop().await
    }

    /// Starts replica `i` again where it was, and waits until it serves.
    pub async fn start_again(&mut self, i: usize) {
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        self.servers[i] = ServerProcess::start_at(&self.redis_url, self.servers[i].addr, &flags);
        let url = self.servers[i].url();
        within(EVENT_TIMEOUT, "the replica serves again", async {
            loop {
                if let Ok(client) = leasehold_client::Client::connect(url.clone()).await
                    && client.serving().await.unwrap_or(false)
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }

    /// SIGKILL: the replica hands nothing over.
    pub fn kill(&mut self, i: usize) {
        self.servers[i].kill();
    }
}

/// A lease taken through `a` (its client knowing `a` and `b`) moves to `b` when `a` stops as a
/// deploy stops it: never reported lost, the same fencing token, nobody else let in; whatever
/// the Redis mode behind both.
pub async fn a_lease_moves_when_its_server_stops(a: TestServer, b: &TestServer) {
    let ttl = Duration::from_secs(2);
    let client = leasehold_client::Client::connect(format!("{},{}", a.url(), b.url()))
        .await
        .unwrap();
    let guard = client.lease("moving").ttl(ttl).acquire().await.unwrap();
    a.stop().await;
    // Past the validity it had when its server stopped: not resumed, it would be lost by now.
    tokio::time::sleep(ttl).await;
    assert!(!guard.is_lost(), "lost: {}", guard.lost().await);
    let via_b = leasehold_client::Client::connect(b.url()).await.unwrap();
    let described = via_b.describe("moving").await.unwrap();
    assert_eq!(described.fencing_token, guard.fencing_token());
    let thief = via_b.acquire_once("moving", ttl).await.unwrap();
    assert!(!thief.acquired, "a thief took the lease between servers");
    assert!(guard.release().await.unwrap());
    assert!(!via_b.describe("moving").await.unwrap().held);
}
