//! The README's example programs, one per language, are complete programs that a new user can
//! copy: the README quotes each file verbatim, and each language's suite runs its own against a
//! real server (the Rust one here; Go, Python, Java and Node in their clients' tests).

use crate::support;

use support::*;

/// Every example program the README quotes.
const QUOTED: [&str; 6] = [
    "examples/hold_lock.rs",
    "clients/go/examples/hold/main.go",
    "clients/python/examples/hold_lock.py",
    "clients/python/examples/hold_lock_async.py",
    "clients/java/src/test/java/dev/leasehold/examples/HoldLock.java",
    "clients/node/examples/hold.ts",
];

#[test]
fn the_readme_quotes_every_example_program_verbatim() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    for path in QUOTED {
        let program = std::fs::read_to_string(root.join(path)).expect(path);
        assert!(
            readme.contains(program.trim_end()),
            "the README does not quote {path} as it is in the tree"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_example_holds_the_lock_and_releases_it() {
    let redis = RedisServer::start();
    let server = ServerProcess::start(&redis, &[]);
    let exe = std::env::current_exe().expect("test binary path");
    let examples = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .join("examples");
    let output = tokio::process::Command::new(examples.join("hold_lock"))
        .env("LEASEHOLD_SERVER", server.url())
        .output()
        .await
        .expect("run examples/hold_lock (built by cargo test)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(lines[0].starts_with("holding nightly-report, fencing token "));
    assert_eq!(&lines[1..], ["work done", "released: true"]);
}
