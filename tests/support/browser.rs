//! A real browser for the console's tests: Debian's headless Chromium, driven by the Chrome
//! DevTools Protocol over `--remote-debugging-pipe` (JSON messages ended by a NUL byte, on file
//! descriptors 3 and 4 of the browser), so no WebSocket client is needed.
//!
//! The browser is started with no network but loopback: host names do not resolve and its
//! background services (updates, sync, metrics) are off.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::certs::TempDir;

/// Longest wait for the browser to answer one command.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Browser {
    child: Child,
    commands: std::fs::File,
    heard: mpsc::UnboundedReceiver<Value>,
    /// Events heard while waiting for answers, in order.
    pub events: Vec<Value>,
    next_id: u64,
    /// The page's session (`Target.attachToTarget`, flattened).
    session: String,
    _profile: TempDir,
}

/// A pipe's two ends, each first moved to a descriptor above 10 so that placing them at 3 and 4
/// in the child can never overwrite one with the other.
fn high_pipe() -> (OwnedFd, OwnedFd) {
    let mut ends = [0; 2];
    // SAFETY: `ends` has room for the two descriptors pipe2 writes.
    let made = unsafe { nix::libc::pipe2(ends.as_mut_ptr(), nix::libc::O_CLOEXEC) };
    assert_eq!(made, 0, "pipe2 failed");
    // SAFETY: both were just opened for us and are owned by nobody else.
    let (reader, writer) =
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    let high = |fd: i32| {
        // SAFETY: `fd` is open (one end of the pipe just made); F_DUPFD_CLOEXEC returns a new
        // descriptor that we own, or -1.
        let new = unsafe { nix::libc::fcntl(fd, nix::libc::F_DUPFD_CLOEXEC, 10) };
        assert!(new >= 10, "fcntl(F_DUPFD_CLOEXEC) failed");
        // SAFETY: `new` was just returned to us, open and owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(new) }
    };
    (high(reader.as_raw_fd()), high(writer.as_raw_fd()))
}

impl Browser {
    /// Starts headless Chromium with a fresh profile and attaches to its page.
    pub async fn start() -> Self {
        super::watchdog::watch();
        let profile = TempDir::new("chromium");
        // We write commands into `to_browser`, it answers into `from_browser`.
        let (browser_reads, we_write) = high_pipe();
        let (we_read, browser_writes) = high_pipe();
        let (read_fd, write_fd) = (browser_reads.as_raw_fd(), browser_writes.as_raw_fd());
        let mut command = Command::new("chromium");
        command
            .args([
                "--headless",
                "--remote-debugging-pipe",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-default-apps",
                "--metrics-recording-only",
                "--hide-scrollbars",
                "--window-size=1200,760",
                // No network: no name resolves, only loopback addresses are reached.
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(if std::env::var_os("LEASEHOLD_TEST_LOG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        // SAFETY: between fork and exec only dup2, which is async-signal-safe; the descriptors
        // are open in the parent until the spawn returns.
        unsafe {
            command.pre_exec(move || {
                if nix::libc::dup2(read_fd, 3) < 0 || nix::libc::dup2(write_fd, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .expect("chromium must be installed (scripts/redis.sh: ensure_chromium_installed)");
        drop((browser_reads, browser_writes));
        let (tx, heard) = mpsc::unbounded_channel();
        let from_browser = std::fs::File::from(we_read);
        std::thread::spawn(move || {
            let mut reader = BufReader::new(from_browser);
            loop {
                let mut message = Vec::new();
                match reader.read_until(0, &mut message) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                message.pop();
                if let Ok(value) = serde_json::from_slice::<Value>(&message)
                    && tx.send(value).is_err()
                {
                    return;
                }
            }
        });
        let mut browser = Browser {
            child,
            commands: std::fs::File::from(we_write),
            heard,
            events: Vec::new(),
            next_id: 0,
            session: String::new(),
            _profile: profile,
        };
        let targets = browser.browser_call("Target.getTargets", json!({})).await;
        let page = targets["targetInfos"]
            .as_array()
            .and_then(|targets| targets.iter().find(|t| t["type"] == "page"))
            .map(|target| target["targetId"].clone())
            .expect("a page target");
        let attached = browser
            .browser_call(
                "Target.attachToTarget",
                json!({ "targetId": page, "flatten": true }),
            )
            .await;
        browser.session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_owned();
        for domain in [
            "Page.enable",
            "Network.enable",
            "Runtime.enable",
            "Log.enable",
        ] {
            browser.call(domain, json!({})).await;
        }
        browser
    }

    /// A command to the browser itself.
    async fn browser_call(&mut self, method: &str, params: Value) -> Value {
        self.send(json!({ "method": method, "params": params }))
            .await
    }

    /// A command to the page.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(json!({ "method": method, "params": params, "sessionId": session }))
            .await
    }

    async fn send(&mut self, message: Value) -> Value {
        self.send_within(message, ANSWER_TIMEOUT).await
    }

    async fn send_within(&mut self, mut message: Value, limit: Duration) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        message["id"] = json!(id);
        let mut bytes = serde_json::to_vec(&message).expect("json");
        bytes.push(0);
        self.commands.write_all(&bytes).expect("write to chromium");
        let method = message["method"].clone();
        let deadline = Instant::now() + limit;
        loop {
            let heard = tokio::time::timeout_at(deadline, self.heard.recv())
                .await
                .unwrap_or_else(|_| panic!("chromium did not answer {method} in time"))
                .expect("chromium exited");
            if heard["id"] == json!(id) {
                if let Some(error) = heard.get("error") {
                    panic!("chromium refused {method}: {error}");
                }
                return heard["result"].clone();
            }
            self.events.push(heard);
        }
    }

    /// Opens `url` and waits for its load event.
    pub async fn open(&mut self, url: &str) {
        self.call("Page.navigate", json!({ "url": url })).await;
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        while !self
            .events
            .iter()
            .any(|event| event["method"] == "Page.loadEventFired")
        {
            let heard = tokio::time::timeout_at(deadline, self.heard.recv())
                .await
                .unwrap_or_else(|_| panic!("{url} did not load in time"))
                .expect("chromium exited");
            self.events.push(heard);
        }
    }

    /// Runs `expression` in the page (awaiting it if it is a promise); its value.
    pub async fn eval(&mut self, expression: &str) -> Value {
        self.eval_within(expression, ANSWER_TIMEOUT).await
    }

    /// As [`Browser::eval`], for an expression that may take up to `limit` itself.
    async fn eval_within(&mut self, expression: &str, limit: Duration) -> Value {
        let session = self.session.clone();
        let params =
            json!({ "expression": expression, "awaitPromise": true, "returnByValue": true });
        let asked = json!({ "method": "Runtime.evaluate", "params": params, "sessionId": session });
        let answer = self.send_within(asked, limit).await;
        if let Some(thrown) = answer.get("exceptionDetails") {
            panic!("{expression} threw: {thrown}");
        }
        answer["result"]["value"].clone()
    }

    /// Waits, in the page, until `predicate` (a JavaScript expression) is true: checked at once
    /// and on every change of the page (a MutationObserver), never by sleeping. Its value, or a
    /// panic naming `what` after `limit`.
    pub async fn until(&mut self, what: &str, predicate: &str, limit: Duration) {
        let script = format!(
            "new Promise((resolve) => {{
                const check = () => {{ if ({predicate}) {{ observer.disconnect(); resolve(true); }} }};
                const observer = new MutationObserver(check);
                observer.observe(document, {{ subtree: true, childList: true, characterData: true, attributes: true }});
                setTimeout(() => {{ observer.disconnect(); resolve(false); }}, {});
                check();
            }})",
            limit.as_millis()
        );
        // The page's own timeout answers first; the browser's answer may take a little more.
        let met = self.eval_within(&script, limit + ANSWER_TIMEOUT).await;
        assert_eq!(
            met,
            json!(true),
            "the page never showed {what} within {limit:?}"
        );
    }

    /// A PNG of the page as it is shown, down to the end of its content.
    pub async fn screenshot(&mut self) -> Vec<u8> {
        let height = self
            .eval("Math.ceil(document.body.getBoundingClientRect().bottom)")
            .await;
        let (width, height) = (json!(self.eval("window.innerWidth").await), height);
        let clip = json!({ "x": 0, "y": 0, "width": width, "height": height, "scale": 1 });
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({ "format": "png", "clip": clip }),
            )
            .await;
        base64_decode(shot["data"].as_str().expect("screenshot data"))
    }

    /// Every URL the page asked for so far.
    pub fn requested(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|event| event["method"] == "Network.requestWillBeSent")
            .filter_map(|event| event["params"]["request"]["url"].as_str())
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'=').map(value).collect();
    let mut bytes = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let mut n = 0u32;
        for (i, d) in chunk.iter().enumerate() {
            n |= u32::from(*d) << (18 - 6 * i);
        }
        for i in 0..chunk.len().saturating_sub(1) {
            bytes.push((n >> (16 - 8 * i)) as u8);
        }
    }
    bytes
}
