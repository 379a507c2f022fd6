//! `completions` and `manpage`: what installing the binary as a tool takes besides the binary.
//! Both are made from the same clap definition as `--help`, so they cannot drift from it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_parser = ["bash", "zsh", "fish"])]
    shell: String,
}

#[derive(clap::Args)]
pub struct ManpageArgs {
    /// Write a page per command into this folder (leasehold.1, leasehold-run.1...) instead of
    /// the one page, leasehold(1), to stdout.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Prints the shell's completion script to stdout.
pub fn completions(args: CompletionsArgs) -> ExitCode {
    // The value parser admits only these three; no shell beyond them is offered.
    let shell = match args.shell.as_str() {
        "zsh" => Shell::Zsh,
        "fish" => Shell::Fish,
        _ => Shell::Bash,
    };
    // Into a buffer first: clap_complete panics on a failed write (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut visible(), "leasehold", &mut script);
    written(std::io::stdout().write_all(&script))
}

/// The command line without its hidden commands, which clap_complete would offer otherwise.
fn visible() -> clap::Command {
    let full = Cli::command();
    let shown = full
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .cloned();
    clap::Command::new("leasehold")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommand_required(true)
        .subcommands(shown.collect::<Vec<_>>())
}

/// Prints leasehold(1) to stdout, or writes a page per command into `--out`.
pub fn manpage(args: ManpageArgs) -> ExitCode {
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    match &args.out {
        None => written(page(command).render(&mut std::io::stdout())),
        Some(dir) => written(
            std::fs::create_dir_all(dir)
                .and_then(|()| pages(command, dir))
                .map_err(|error| {
                    std::io::Error::new(error.kind(), format!("{}: {error}", dir.display()))
                }),
        ),
    }
}

/// A command's page: LEASEHOLD(1), LEASEHOLD-RUN(1)..., dated by the commit built.
fn page(command: clap::Command) -> clap_mangen::Man {
    let name = command.get_display_name().unwrap_or(command.get_name());
    let title = name.to_uppercase();
    let date = env!("LEASEHOLD_COMMIT")
        .split(' ')
        .nth(1)
        .unwrap_or_default();
    clap_mangen::Man::new(command)
        .title(title)
        .date(date)
        .source(concat!("leasehold ", env!("CARGO_PKG_VERSION")))
}

/// The pages of a command and of each of its visible subcommands, into `dir`.
fn pages(command: clap::Command, dir: &Path) -> std::io::Result<()> {
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        pages(sub.clone(), dir)?;
    }
    page(command).generate_to(dir).map(drop)
}

/// Exit 0 if the output was written, else 1 with one sentence (a closed pipe: just 1).
fn written(result: std::io::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            if error.kind() != std::io::ErrorKind::BrokenPipe {
                eprintln!("leasehold: cannot write the output: {error}");
            }
            ExitCode::FAILURE
        }
    }
}
