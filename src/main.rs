//! The `leasehold` binary: the lock server and its client commands (see `src/cli/`).

mod cli;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    cli::main().await
}
