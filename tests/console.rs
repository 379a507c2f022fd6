//! The web console (`serve --console`): its API over plain HTTP (the same auth as gRPC, names
//! outside the token's prefixes never shown, Redis down shown as an error), and the page in a
//! real browser (headless Chromium, tests/support/browser.rs): loads with no network, shows a
//! lock within a second, escapes what it shows, and its Revoke button reaches LockService.Revoke.

use crate::support;

use std::time::Duration;

use leasehold::pb::LostReason;
use leasehold::pb::lease_response::Event;
use leasehold::server::auth::token_digest;
use leasehold_client::{Client, ConnectOptions};
use support::browser::Browser;
use support::certs::TempDir;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

const ADMIN: &str = "console-admin-secret";
const HOLD: &str = "console-hold-secret";

/// A server with the console on, and an auth file: an admin on `app/` names, a holder on all.
struct Console {
    server: ServerProcess,
    /// `127.0.0.1:port`
    addr: String,
    _dir: TempDir,
}

impl Console {
    fn start(redis: &RedisServer) -> Self {
        let dir = TempDir::new("console");
        let grants = format!(
            "[[grant]]\nname = \"ops\"\ntoken_sha256 = \"{}\"\nrole = \"admin\"\n\
             locks = [\"app/\"]\nelections = [\"app/\"]\n\n\
             [[grant]]\nname = \"worker\"\ntoken_sha256 = \"{}\"\nrole = \"hold\"\n\
             locks = [\"\"]\nelections = [\"\"]\n",
            token_digest(ADMIN),
            token_digest(HOLD),
        );
        let auth = dir.write("auth.toml", &grants);
        let auth = auth.to_str().expect("path");
        let mut server =
            ServerProcess::start(redis, &["--console", "127.0.0.1:0", "--auth-file", auth]);
        let line = server.next_line();
        let addr = line
            .strip_prefix("leasehold: console on http://")
            .and_then(|rest| rest.strip_suffix('/'))
            .unwrap_or_else(|| panic!("{line}"))
            .to_owned();
        Console {
            server,
            addr,
            _dir: dir,
        }
    }

    async fn client(&self) -> Client {
        let options = ConnectOptions::new(self.server.url()).token(Some(HOLD.into()));
        Client::connect_with(options).await.expect("connect")
    }

    /// One HTTP/1.1 request: the status and the body.
    async fn http(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> (u16, String) {
        let response = within(EVENT_TIMEOUT, "an HTTP answer", async {
            let mut stream = TcpStream::connect(&self.addr).await.expect("connect");
            stream
                .write_all(request(method, path, token, body).as_bytes())
                .await
                .expect("send");
            let mut response = Vec::new();
            stream.read_to_end(&mut response).await.expect("read");
            String::from_utf8(response).expect("utf-8")
        })
        .await;
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("not HTTP: {response}"));
        let body = response.split_once("\r\n\r\n").map(|(_, body)| body);
        (status, body.unwrap_or_default().to_owned())
    }

    /// `/api/state` as `token` sees it, parsed.
    async fn state(&self, token: &str, prefix: &str) -> serde_json::Value {
        let path = format!("/api/state?prefix={prefix}");
        let (status, body) = self.http("GET", &path, Some(token), "").await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).expect("json")
    }
}

fn request(method: &str, path: &str, token: Option<&str>, body: &str) -> String {
    let authorization = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    format!(
        "{method} {path} HTTP/1.1\r\nHost: console\r\nConnection: close\r\n{authorization}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The names of a state's locks, or of its elections.
fn names(state: &serde_json::Value, list: &str, field: &str) -> Vec<String> {
    state[list]
        .as_array()
        .expect("a list")
        .iter()
        .map(|item| item[field].as_str().expect("a name").to_owned())
        .collect()
}

/// A page expression: whether a holder cell shows exactly `holder`.
fn shown_holder(holder: &str) -> String {
    format!(
        "[...document.querySelectorAll('#locks td.holder')].some(td => td.textContent === {})",
        serde_json::json!(holder)
    )
}

/// A `Lease` stream opened with the holder's token.
async fn lease(console: &Console, name: &str, holder: &str) -> LeaseStream {
    let mut client = connect(&console.server.url()).await;
    let (tx, rx) = mpsc::channel(4);
    tx.send(acquire_request(name, 30_000, 0, holder))
        .await
        .expect("queue");
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    let bearer = format!("Bearer {HOLD}").parse().expect("header");
    request.metadata_mut().insert("authorization", bearer);
    let events = client.lease(request).await.expect("lease").into_inner();
    let mut stream = LeaseStream {
        requests: Some(tx),
        events,
    };
    stream.acquired().await;
    stream
}

/// A live `/api/events` stream, read as raw text.
struct Events {
    stream: TcpStream,
    text: String,
}

impl Events {
    async fn open(console: &Console, token: &str) -> Self {
        let mut stream = TcpStream::connect(&console.addr).await.expect("connect");
        let asked = request("GET", "/api/events", Some(token), "");
        stream.write_all(asked.as_bytes()).await.expect("send");
        Events {
            stream,
            text: String::new(),
        }
    }

    /// Reads until an event `kind` whose data satisfies `test`; each event is looked at once.
    async fn until(&mut self, kind: &str, test: impl Fn(&str) -> bool) {
        let marker = format!("event: {kind}\n");
        within(EVENT_TIMEOUT, &format!("a {kind} event"), async {
            loop {
                while let Some(at) = self.text.find("event: ") {
                    let rest = &self.text[at..];
                    let Some(end) = rest.find("\n\n") else { break };
                    let event = rest[..end].to_owned();
                    self.text = rest[end + 2..].to_owned();
                    if event.starts_with(&marker) && test(&event) {
                        return;
                    }
                }
                let mut chunk = [0u8; 4096];
                let read = self.stream.read(&mut chunk).await.expect("read events");
                assert!(read > 0, "the event stream ended");
                self.text.push_str(&String::from_utf8_lossy(&chunk[..read]));
            }
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_answers_as_the_grpc_port_would_and_shows_redis_down() {
    let mut redis = RedisServer::start();
    let console = Console::start(&redis);

    let (status, page) = console.http("GET", "/", None, "").await;
    assert_eq!(status, 200);
    assert!(page.contains("<script src=\"console.js\""), "{page}");
    for token in [None, Some("wrong-token")] {
        let (status, body) = console.http("GET", "/api/state", token, "").await;
        assert_eq!(status, 401, "{body}");
        assert!(body.contains("UNAUTHENTICATED"), "{body}");
    }
    // Listing names needs the admin role, as LockService.List does.
    let (status, body) = console.http("GET", "/api/state", Some(HOLD), "").await;
    assert_eq!(
        (status, body.contains("PERMISSION_DENIED")),
        (403, true),
        "{body}"
    );

    let client = console.client().await;
    let inside = client
        .lease("app/report")
        .holder("reporter")
        .acquire()
        .await
        .unwrap();
    let _outside = client.lease("other/report").acquire().await.unwrap();
    let mut leader = client
        .campaign("app/leader", "node-1", Duration::from_secs(30))
        .await
        .unwrap();
    let term = within(EVENT_TIMEOUT, "elected", leader.elected())
        .await
        .unwrap();
    let mut hidden = client
        .campaign("other/leader", "x", Duration::from_secs(30))
        .await
        .unwrap();
    within(EVENT_TIMEOUT, "elected", hidden.elected())
        .await
        .unwrap();

    // The admin sees its prefixes' names only, and the page's prefix narrows them.
    let state = console.state(ADMIN, "").await;
    assert_eq!(names(&state, "locks", "name"), ["app/report"]);
    assert_eq!(state["locks"][0]["holders"][0]["holder"], "reporter");
    assert_eq!(
        state["locks"][0]["holders"][0]["fencing_token"],
        inside.fencing_token().to_string()
    );
    assert_eq!(names(&state, "elections", "election"), ["app/leader"]);
    assert_eq!(state["elections"][0]["value"], "node-1");
    assert_eq!(state["elections"][0]["term"], term.to_string());
    let narrowed = console.state(ADMIN, "app%2Fleader").await;
    assert_eq!(names(&narrowed, "locks", "name"), Vec::<String>::new());

    // Revoke is LockService.Revoke with the caller's token: a hold grant may not, nor an admin
    // outside its prefixes; nothing changes.
    let asked = format!(
        r#"{{"kind":"lock","name":"app/report","fencing_token":"{}"}}"#,
        inside.fencing_token()
    );
    let outside = r#"{"kind":"lock","name":"other/report"}"#;
    for (token, asked) in [(HOLD, asked.as_str()), (ADMIN, outside)] {
        let (status, body) = console
            .http("POST", "/api/revoke", Some(token), asked)
            .await;
        assert_eq!(
            (status, body.contains("PERMISSION_DENIED")),
            (403, true),
            "{body}"
        );
    }
    assert!(!inside.is_lost());
    let (status, body) = console
        .http("POST", "/api/revoke", Some(ADMIN), "{\"kind\":1}")
        .await;
    assert_eq!(status, 400, "{body}");

    // Live: a revoke is pushed; Redis gone is pushed as a problem, and /api/state says 503.
    let mut events = Events::open(&console, ADMIN).await;
    events
        .until("state", |data| data.contains("app/report"))
        .await;
    let (status, body) = console
        .http("POST", "/api/revoke", Some(ADMIN), &asked)
        .await;
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(answer["revoked"][0]["holder"], "reporter");
    let token = inside.fencing_token().to_string();
    assert_eq!(answer["revoked"][0]["fencing_token"], token);
    within(Duration::from_secs(2), "the holder told", inside.lost()).await;
    events
        .until("state", |data| !data.contains("app/report"))
        .await;
    let asked = format!(r#"{{"kind":"election","name":"app/leader","term":"{term}"}}"#);
    let (status, body) = console
        .http("POST", "/api/revoke", Some(ADMIN), &asked)
        .await;
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(answer["revoked"], true, "{body}");
    assert_eq!(answer["term"], term.to_string(), "{body}");
    within(Duration::from_secs(2), "the leader told", leader.lost()).await;
    redis.kill();
    events
        .until("problem", |data| data.contains("UNAVAILABLE"))
        .await;
    let (status, body) = console.http("GET", "/api/state", Some(ADMIN), "").await;
    assert_eq!(status, 503, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_a_lock_shows_within_a_second_escaped_and_its_revoke_button_is_heard() {
    let redis = RedisServer::start();
    let console = Console::start(&redis);
    let origin = format!("http://{}/", console.addr);
    let mut browser = Browser::start().await;
    browser.open(&origin).await;
    // No token yet: the server's refusal, in words.
    browser
        .until(
            "the refusal without a token",
            "document.getElementById('problem').textContent.includes('requires a bearer token')",
            EVENT_TIMEOUT,
        )
        .await;
    browser
        .eval(&format!(
            "document.getElementById('token').value = '{ADMIN}';
             document.getElementById('token-form').requestSubmit();"
        ))
        .await;
    browser
        .until(
            "the live state",
            "document.getElementById('status').classList.contains('live')",
            EVENT_TIMEOUT,
        )
        .await;

    // A lock taken through gRPC shows within a second (the server reads every 500 ms).
    let name = "app/billing/nightly-report";
    let mut held = lease(&console, name, "report-runner@host-7").await;
    let taken = Instant::now();
    browser
        .until(
            "the lock taken",
            &shown_holder("report-runner@host-7"),
            Duration::from_secs(1),
        )
        .await;
    let shown_after = taken.elapsed();
    assert!(
        shown_after < Duration::from_secs(1),
        "shown after {shown_after:?}"
    );

    // A name and holder that are HTML are shown as text, never run.
    let client = console.client().await;
    let html = "<script>window.pwned=1</script>";
    let hostile = client
        .lease("app/<img src=x onerror=\"window.pwned=1\">")
        .holder(html)
        .acquire()
        .await
        .unwrap();
    browser
        .until("the HTML holder", &shown_holder(html), EVENT_TIMEOUT)
        .await;
    let escaped = browser
        .eval("window.pwned === undefined && document.querySelectorAll('main img, main script').length === 0")
        .await;
    assert_eq!(escaped, serde_json::json!(true));
    assert!(hostile.release().await.unwrap());
    let gone = format!("!({})", shown_holder(html));
    browser
        .until("the HTML holder gone", &gone, EVENT_TIMEOUT)
        .await;

    // Every holder of a semaphore; an election's leader, term and the candidate in line.
    let mut permits = Vec::new();
    for holder in ["trainer-1", "trainer-2"] {
        let permit = client.lease("app/gpu-slots").limit(3).holder(holder);
        permits.push(permit.acquire().await.unwrap());
    }
    let ttl = Duration::from_secs(30);
    let mut leader = client
        .campaign("app/scheduler", "scheduler@node-1", ttl)
        .await
        .unwrap();
    let term = within(EVENT_TIMEOUT, "elected", leader.elected())
        .await
        .unwrap();
    let _next = client
        .campaign("app/scheduler", "scheduler@node-2", ttl)
        .await
        .unwrap();
    let leads = format!(
        "[...document.querySelectorAll('#elections tr')].some(tr => tr.textContent.includes('scheduler@node-1') && tr.textContent.includes('{term}') && tr.cells[4].textContent === '1')"
    );
    browser.until("the election", &leads, EVENT_TIMEOUT).await;
    browser
        .until("both permits", &shown_holder("trainer-2"), EVENT_TIMEOUT)
        .await;
    assert!(
        browser.eval(&shown_holder("trainer-1")).await == serde_json::json!(true),
        "every holder of the semaphore is shown"
    );

    // The page as docs/operations.md shows it, when asked for.
    if let Ok(path) = std::env::var("LEASEHOLD_CONSOLE_SCREENSHOT") {
        std::fs::write(path, browser.screenshot().await).expect("write the screenshot");
    }

    // Revoke: armed by the first click, sent by the second.
    browser
        .eval(&format!(
            "const button = [...document.querySelectorAll('#locks button.revoke')]
                 .find(b => b.dataset.name === {});
             button.click(); button.click();",
            serde_json::json!(name)
        ))
        .await;
    // The holder's stream ends with Lost (REVOKED), and the page says what it revoked.
    let lost = within(Duration::from_secs(2), "the holder told", async {
        loop {
            match held.next().await {
                Ok(Some(Event::Extended(_))) => continue,
                Ok(Some(Event::Lost(lost))) => return lost,
                other => panic!("expected Lost, got {other:?}"),
            }
        }
    })
    .await;
    assert_eq!(lost.code, LostReason::Revoked as i32, "{lost:?}");
    browser
        .until(
            "the revoke's outcome",
            "document.getElementById('outcome').textContent.includes('Revoked')",
            EVENT_TIMEOUT,
        )
        .await;
    let gone = format!("!({})", shown_holder("report-runner@host-7"));
    browser
        .until("the revoked lock gone", &gone, EVENT_TIMEOUT)
        .await;
    assert!(leader.resign().await.unwrap());

    // Everything the page loaded came from the console itself, and nothing broke its policy.
    for url in browser.requested() {
        assert!(url.starts_with(&origin), "the page asked for {url}");
    }
    for event in &browser.events {
        let method = event["method"].as_str().unwrap_or_default();
        assert_ne!(method, "Runtime.exceptionThrown", "{event}");
        let source = &event["params"]["entry"]["source"];
        assert_ne!(source, "security", "{event}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_console_answers_with_the_grpc_ports_certificate() {
    use std::sync::Arc;
    use support::certs::TestCa;
    let redis = RedisServer::start();
    let dir = TempDir::new("console-tls");
    let ca = TestCa::new("console test CA");
    let files = ca.server_files(&dir, None);
    let (cert, key) = (files.cert.to_str().unwrap(), files.key.to_str().unwrap());
    let mut server = ServerProcess::start(
        &redis,
        &[
            "--console",
            "127.0.0.1:0",
            "--tls-cert",
            cert,
            "--tls-key",
            key,
        ],
    );
    let line = server.next_line();
    let addr = line
        .strip_prefix("leasehold: console on https://")
        .and_then(|rest| rest.strip_suffix('/'))
        .unwrap_or_else(|| panic!("{line}"));
    let trusted = leasehold::tls::client_config(&dir.write("ca.pem", &ca.pem())).unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(trusted));
    let answer = within(EVENT_TIMEOUT, "an answer over TLS", async {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = connector.connect(name, tcp).await.expect("TLS handshake");
        let asked = request("GET", "/api/state", None, "");
        tls.write_all(asked.as_bytes()).await.expect("send");
        let mut answer = Vec::new();
        // The server may end TLS without close_notify once it has answered.
        let _ = tls.read_to_end(&mut answer).await;
        String::from_utf8(answer).expect("utf-8")
    })
    .await;
    // Without an auth file everyone may list, as through gRPC.
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"locks\":[]"), "{answer}");
}
