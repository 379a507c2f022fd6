//! The CLI installed as a tool: `completions`, `manpage` and `--version`, and the README's
//! install block run as written into a scratch home. No server needed: each test is a few runs
//! of the binary.

use std::path::Path;
use std::process::Command;

fn leasehold(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .output()
        .expect("run leasehold");
    assert!(output.status.success(), "leasehold {args:?}: {output:?}");
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// Whether `program` is on this machine's PATH.
fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|output| output.status.success())
}

#[test]
fn completions_name_the_commands_and_load_in_their_shell() {
    for (shell, marker, load) in [
        (
            "bash",
            "complete -F",
            "source <(leasehold completions bash)",
        ),
        (
            "zsh",
            "#compdef leasehold",
            "autoload -U compinit && compinit -u && source <(leasehold completions zsh)",
        ),
        (
            "fish",
            "complete -c leasehold",
            "leasehold completions fish | source",
        ),
    ] {
        let script = leasehold(&["completions", shell]);
        assert!(script.contains(marker), "{shell}: no {marker}");
        for command in ["serve", "run", "status", "manpage"] {
            assert!(script.contains(command), "{shell}: {command} not completed");
        }
        assert!(
            !script.contains("run-watchdog"),
            "{shell}: offers the hidden command"
        );
        if !installed(shell) {
            continue;
        }
        let path = path_with_leasehold();
        let output = Command::new(shell)
            .args(["-c", load])
            .env("PATH", path)
            .output()
            .expect("run the shell");
        assert!(
            output.status.success() && output.stderr.is_empty(),
            "{shell}: {output:?}"
        );
    }
}

#[test]
fn the_man_page_renders_and_lists_the_commands() {
    let page = leasehold(&["manpage"]);
    assert!(page.contains(".TH LEASEHOLD 1"), "{page}");
    for command in [
        "leasehold\\-serve",
        "leasehold\\-run",
        "leasehold\\-completions",
    ] {
        assert!(page.contains(command), "the page does not list {command}");
    }
    if installed("groff") {
        let mut groff = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("groff");
        use std::io::Write;
        groff
            .stdin
            .take()
            .expect("stdin")
            .write_all(page.as_bytes())
            .expect("write");
        let output = groff.wait_with_output().expect("groff");
        assert!(
            output.status.success() && output.stderr.is_empty(),
            "groff: {output:?}"
        );
    }
    let dir = std::env::temp_dir().join(format!("leasehold-man-{}", std::process::id()));
    leasehold(&["manpage", "--out", dir.to_str().expect("UTF-8 path")]);
    let run = std::fs::read_to_string(dir.join("leasehold-run.1")).expect("leasehold-run.1");
    assert!(
        run.contains(".TH LEASEHOLD\\-RUN 1") || run.contains(".TH LEASEHOLD-RUN 1"),
        "{run}"
    );
    assert!(!dir.join("leasehold-run-watchdog.1").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_version_names_the_commit_built() {
    let version = leasehold(&["--version"]);
    assert!(
        version.starts_with(concat!("leasehold ", env!("CARGO_PKG_VERSION"), " (")),
        "{version}"
    );
    let root = env!("CARGO_MANIFEST_DIR");
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(root)
        .output();
    match head {
        Ok(head) if head.status.success() && Path::new(root).join(".git").exists() => {
            let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
            assert!(
                version.contains(&format!("({head} ")),
                "{version} is not HEAD {head}"
            );
        }
        _ => assert!(version.contains("(unknown)"), "{version}"),
    }
}

/// The README's install block (the `sh` block with `leasehold completions`), run line by line
/// as written with HOME a scratch folder: each line succeeds and leaves the files it names.
#[test]
fn the_readmes_install_block_runs_as_written() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let block = readme
        .split("```sh\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .find(|block| block.contains("leasehold completions"))
        .expect("an install block in the README");
    let home = std::env::temp_dir().join(format!("leasehold-home-{}", std::process::id()));
    std::fs::create_dir_all(&home).expect("scratch home");
    let path = path_with_leasehold();
    for line in block.lines().filter(|line| !line.trim().is_empty()) {
        let output = Command::new("sh")
            .args(["-c", line])
            .env("HOME", &home)
            .env("PATH", &path)
            .output()
            .expect("run sh");
        assert!(output.status.success(), "{line}: {output:?}");
    }
    let completion = home.join(".local/share/bash-completion/completions/leasehold");
    let page = home.join(".local/share/man/man1/leasehold.1");
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(read(&completion), leasehold(&["completions", "bash"]));
    assert!(read(&page).contains(".TH LEASEHOLD 1"));
    let _ = std::fs::remove_dir_all(&home);
}

/// `PATH` with the built `leasehold` first, as an installed one would be found.
fn path_with_leasehold() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_leasehold"))
        .parent()
        .expect("bin dir");
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}
