//! The docs held to the program: every relative link of the README and docs/ leads to a file and,
//! with `#anchor`, to one of its headings; every option the docs name exists in the binary's
//! `--help`; the exit-status table of docs/cli.md is what src/cli/ returns and what each command's
//! help says; every alert rule links to its own section of docs/operations.md; the memory a lease
//! costs is stated in one place; every test file and script is on docs/layout.md's map; the
//! tour of docs/layout.md names only files that exist and names defined in them.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::layout::{matches, root};

fn read(path: impl AsRef<Path>) -> String {
    let path = root().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// README.md and every page of docs/, as (path from the root, text).
fn pages() -> Vec<(PathBuf, String)> {
    let mut pages = vec![(PathBuf::from("README.md"), read("README.md"))];
    let mut names: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    names.sort();
    for path in names {
        let relative = path
            .strip_prefix(root())
            .expect("under the root")
            .to_owned();
        let text = read(&relative);
        pages.push((relative, text));
    }
    pages
}

/// The lines of a Markdown text outside its fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// The contents of the fenced code blocks of a Markdown text whose info string is `lang`.
fn code_blocks<'a>(text: &'a str, lang: &str) -> Vec<Vec<&'a str>> {
    let mut blocks = Vec::new();
    // Outside any block: None; inside one: whether it is `lang`'s, and its lines so far.
    let mut inside: Option<(bool, Vec<&str>)> = None;
    for line in text.lines() {
        match (line.trim_start().strip_prefix("```"), inside.take()) {
            (Some(info), None) => inside = Some((info.trim() == lang, Vec::new())),
            (Some(_), Some((wanted, block))) => {
                if wanted {
                    blocks.push(block);
                }
            }
            (None, Some((wanted, mut block))) => {
                block.push(line);
                inside = Some((wanted, block));
            }
            (None, None) => {}
        }
    }
    blocks
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor of a Markdown text (repeated headings get `-1`, `-2`... as on GitHub).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = BTreeSet::new();
    for line in prose(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let count = seen.entry(base.clone()).or_insert(0);
        anchors.insert(match *count {
            0 => base.clone(),
            n => format!("{base}-{n}"),
        });
        *count += 1;
    }
    anchors
}

/// The relative links of a Markdown text, outside code blocks: (path, anchor).
fn relative_links(text: &str) -> Vec<(String, Option<String>)> {
    let prose = prose(text).join("\n");
    prose
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
        .filter(|target| !target.contains("://") && !target.starts_with("mailto:"))
        .map(|target| match target.split_once('#') {
            Some((path, anchor)) => (path.to_owned(), Some(anchor.to_owned())),
            None => (target.to_owned(), None),
        })
        .collect()
}

#[test]
fn every_relative_link_leads_to_a_file_and_its_anchor_to_a_heading() {
    for (page, text) in pages() {
        let dir = page.parent().map(Path::to_owned).unwrap_or_default();
        for (path, anchor) in relative_links(&text) {
            let target = if path.is_empty() {
                page.clone()
            } else {
                dir.join(&path)
            };
            let full = root().join(&target);
            assert!(
                full.exists(),
                "{}: the link to {path} leads nowhere",
                page.display()
            );
            let Some(anchor) = anchor else { continue };
            assert!(
                target.extension().is_some_and(|ext| ext == "md"),
                "{}: #{anchor} on {path}, which is not a Markdown page",
                page.display()
            );
            let headings = anchors(&read(&target));
            assert!(
                headings.contains(&anchor),
                "{}: {path}#{anchor} names no heading of {} (it has {headings:?})",
                page.display(),
                target.display()
            );
        }
    }
}

/// `leasehold COMMAND --help`, as a user sees it.
fn help(command: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([command, "--help"])
        .output()
        .expect("run leasehold");
    assert!(output.status.success(), "leasehold {command} --help failed");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

const COMMANDS: [&str; 13] = [
    "serve",
    "run",
    "elect",
    "leader",
    "status",
    "watch",
    "check",
    "release",
    "revoke",
    "health",
    "bench",
    "completions",
    "manpage",
];

/// The `--options` a text names.
fn options_in(text: &str) -> BTreeSet<String> {
    let mut options = BTreeSet::new();
    for (at, _) in text.match_indices("--") {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '-') {
            continue;
        }
        let name: String = text[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        let name = name.trim_end_matches('-');
        if !name.is_empty() {
            options.insert(format!("--{name}"));
        }
    }
    options
}

/// The inline code spans (`like this`) of a text's prose.
fn inline_code(text: &str) -> Vec<String> {
    let prose = prose(text).join("\n");
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_option_the_docs_name_is_in_the_binarys_help() {
    let helps: HashMap<&str, String> = COMMANDS.iter().map(|c| (*c, help(c))).collect();
    let known: BTreeSet<String> = helps.values().flat_map(|h| options_in(h)).collect();
    // What the docs name of other programs, in inline code (`redis-server --sentinel`...).
    let others = [
        "--sentinel",
        "--tls",
        "--cacert",
        "--user",
        "--pass",
        "--set",
        "--insecure",
        "--call",
        "--data",
        "--total",
        "--save",
        "--appendonly",
        "--maxmemory",
        "--maxmemory-policy",
        "--include_imports",
        "--nocapture",
        "--test",
        "--bench",
        "--example",
        "--path",
        "--locked",
        "--version",
        "--headless",
        "--no-sandbox",
        "--no-daemon",
        "--foreground",
        "--quick",
    ];
    let pages = [
        "docs/operations.md",
        "docs/deploy-sentinel.md",
        "docs/cli.md",
        "docs/redis-modes.md",
        "docs/contract.md",
        "docs/clients.md",
        "docs/primitives.md",
        "docs/errors.md",
        "README.md",
    ];
    for page in pages {
        for span in inline_code(&read(page)) {
            for option in options_in(&span) {
                assert!(
                    known.contains(&option) || others.contains(&option.as_str()),
                    "{page} names {option} (in `{span}`), which no leasehold command has"
                );
            }
        }
    }
    // The server's options, wherever the docs write them as a config file or a serve line.
    let serve = options_in(&helps["serve"]);
    for page in ["docs/operations.md", "docs/deploy-sentinel.md"] {
        let text = read(page);
        for block in code_blocks(&text, "toml") {
            for line in block {
                if line.trim_start().starts_with('[') {
                    break; // the auth file's grants: not server options
                }
                let Some((key, _)) = line.split_once('=') else {
                    continue;
                };
                let key = key.trim();
                if key.is_empty() || key.starts_with('#') {
                    continue;
                }
                let option = format!("--{}", key.replace('_', "-"));
                assert!(
                    serve.contains(&option),
                    "{page}: the config key {key} is no option of leasehold serve"
                );
            }
        }
        for line in text
            .lines()
            .filter(|line| line.contains("leasehold serve "))
        {
            let after = line.split("leasehold serve ").nth(1).unwrap_or_default();
            let after = after.split('`').next().unwrap_or_default();
            for option in options_in(after) {
                assert!(
                    serve.contains(&option),
                    "{page}: `leasehold serve {after}` names {option}, which serve does not have"
                );
            }
        }
    }
    // docs/cli.md's table of the client commands' options: run has them all.
    let cli = read("docs/cli.md");
    let table = cli
        .split("## Reaching the server")
        .nth(1)
        .expect("a Reaching the server section");
    for line in table.lines().filter(|line| line.starts_with("| `--")) {
        let first = line.split('|').nth(1).unwrap_or_default();
        for option in options_in(first) {
            for command in [
                "run", "elect", "leader", "status", "release", "health", "bench",
            ] {
                assert!(
                    options_in(&helps[command]).contains(&option),
                    "docs/cli.md: {option} is not an option of leasehold {command}"
                );
            }
        }
    }
}

#[test]
fn the_redis_urls_the_docs_and_the_chart_pass_are_in_the_redis_help() {
    let serve = help("serve");
    let mut schemes = BTreeSet::new();
    for text in [
        read("docs/redis-modes.md"),
        read("docs/operations.md"),
        read("docs/deploy-sentinel.md"),
        read("deploy/helm/leasehold/values.yaml"),
        read("deploy/helm/leasehold/templates/_helpers.tpl"),
    ] {
        for (at, _) in text.match_indices("://") {
            let scheme: String = text[..at]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            if scheme.starts_with("redis") {
                schemes.insert(format!("{scheme}://"));
            }
        }
    }
    for scheme in [
        "redis://",
        "rediss://",
        "redis-sentinel://",
        "redis-cluster://",
    ] {
        assert!(schemes.contains(scheme), "no doc passes {scheme}");
    }
    for scheme in &schemes {
        assert!(
            serve.contains(scheme.as_str()),
            "the docs or the chart pass {scheme}, which `serve --help` does not name"
        );
    }
}

/// Every exit status src/cli/ can return: its `EXIT_*` constants, the numbers it returns, and
/// `ExitCode::SUCCESS` and `FAILURE`.
fn exit_statuses_in_the_source() -> BTreeSet<u8> {
    fn files(dir: &Path, into: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                files(&path, into);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                into.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    files(&root().join("src/cli"), &mut paths);
    let sources: Vec<String> = paths
        .iter()
        .map(|path| std::fs::read_to_string(path).expect("source"))
        .collect();
    let number = |text: &str| -> Option<u8> {
        let digits: String = text
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    let mut statuses = BTreeSet::new();
    for source in &sources {
        for line in source.lines() {
            let line = line.trim();
            if line.starts_with("//") {
                continue;
            }
            if line.starts_with("pub const EXIT_") || line.starts_with("const EXIT_") {
                if let Some(value) = line.split("u8 =").nth(1).and_then(number) {
                    statuses.insert(value);
                }
            }
            for (at, _) in line.match_indices("ExitCode::from(") {
                if let Some(value) = number(&line[at + "ExitCode::from(".len()..]) {
                    statuses.insert(value);
                }
            }
            if let Some(rest) = line.strip_prefix("return ") {
                if let Some(value) = number(rest).filter(|_| rest.trim_end().ends_with(';')) {
                    statuses.insert(value);
                }
            }
            if line.contains("ExitCode::SUCCESS") {
                statuses.insert(0);
            }
            if line.contains("ExitCode::FAILURE") {
                statuses.insert(1);
            }
        }
    }
    statuses
}

/// docs/cli.md's exit-status table: (statuses, the command cell).
fn documented_exit_statuses() -> Vec<(Vec<u8>, String)> {
    let cli = read("docs/cli.md");
    let table = cli
        .split("## Exit statuses")
        .nth(1)
        .expect("an Exit statuses section");
    table
        .lines()
        .filter(|line| line.starts_with('|'))
        .skip(2)
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let statuses = cells[1]
                .split(',')
                .filter_map(|status| status.trim().parse().ok())
                .collect();
            (statuses, cells[2].to_owned())
        })
        .collect()
}

/// Whether `text` has `number` as a number of its own (not part of a longer one).
fn names_number(text: &str, number: u8) -> bool {
    let number = number.to_string();
    text.match_indices(number.as_str()).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + number.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit())
    })
}

#[test]
fn the_exit_status_table_is_what_the_commands_return_and_their_help_says() {
    let documented = documented_exit_statuses();
    let table: BTreeSet<u8> = documented.iter().flat_map(|(s, _)| s.clone()).collect();
    let source = exit_statuses_in_the_source();
    assert_eq!(
        table, source,
        "docs/cli.md's exit statuses (left) against those src/cli/ returns (right)"
    );
    let helps: HashMap<&str, String> = COMMANDS.iter().map(|c| (*c, help(c))).collect();
    for (statuses, commands) in &documented {
        let named: Vec<&str> = COMMANDS
            .iter()
            .copied()
            .filter(|command| commands.contains(&format!("`{command}`")))
            .collect();
        // Rows for every (client) command: run's help carries the whole list.
        let named = if named.is_empty() { vec!["run"] } else { named };
        for status in statuses.iter().filter(|&&status| status != 0) {
            for command in &named {
                assert!(
                    names_number(&helps[command], *status),
                    "docs/cli.md says `{command}` exits {status}; `leasehold {command} --help` does not"
                );
            }
        }
    }
}

#[test]
fn every_alert_links_to_its_own_section_of_the_operations_page() {
    let rules = read("deploy/prometheus/alerts.yml");
    let sections = anchors(&read("docs/operations.md"));
    let mut alerts: Vec<(String, Option<String>)> = Vec::new();
    for line in rules.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("- alert:") {
            alerts.push((name.trim().to_owned(), None));
        } else if let Some(url) = line.strip_prefix("runbook_url:") {
            let (name, runbook) = alerts.last_mut().expect("a runbook_url before any alert");
            assert!(runbook.is_none(), "{name} has two runbook_urls");
            *runbook = Some(url.trim().trim_matches('"').to_owned());
        }
    }
    assert!(alerts.len() >= 10, "{alerts:?}");
    for (name, runbook) in alerts {
        let runbook = runbook.unwrap_or_else(|| panic!("{name} has no runbook_url"));
        let (page, anchor) = runbook
            .split_once('#')
            .unwrap_or_else(|| panic!("{name}: {runbook} names no section"));
        assert!(page.ends_with("/docs/operations.md"), "{name}: {runbook}");
        assert_eq!(anchor, name.to_lowercase(), "{name}: its own section");
        assert!(
            sections.contains(anchor),
            "{name}: docs/operations.md has no heading for #{anchor}"
        );
    }
}

#[test]
fn the_memory_a_lease_costs_is_stated_in_one_place() {
    let sizing = read("docs/operations.md");
    let sizing = sizing
        .split("\n## Sizing\n")
        .nth(1)
        .expect("a Sizing section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    assert!(sizing.contains(" KB"), "Sizing gives the figure");
    let mut elsewhere = vec![
        (
            "docs/operations.md".to_owned(),
            read("docs/operations.md").replace(sizing, ""),
        ),
        (
            "deploy/helm/leasehold/values.yaml".to_owned(),
            read("deploy/helm/leasehold/values.yaml"),
        ),
        (
            "deploy/prometheus/alerts.yml".to_owned(),
            read("deploy/prometheus/alerts.yml"),
        ),
    ];
    for (page, text) in pages() {
        if page != Path::new("docs/operations.md") {
            elsewhere.push((page.display().to_string(), text));
        }
    }
    for (page, text) in elsewhere {
        for line in text.lines() {
            assert!(
                !line.contains(" KB"),
                "{page} states a size in KB (link docs/operations.md#sizing instead): {line}"
            );
        }
    }
}

#[test]
fn every_test_file_and_script_is_on_the_layout_map() {
    let layout = read("docs/layout.md");
    let block = layout.split("```").nth(1).expect("the map");
    let named: Vec<&str> = block
        .split_whitespace()
        .map(|word| word.trim_matches(|c: char| "(),;:".contains(c)))
        .collect();
    let on_map = |path: &str| named.iter().any(|pattern| matches(pattern, path));
    for dir in ["tests", "scripts"] {
        for entry in std::fs::read_dir(root().join(dir)).expect(dir) {
            let path = entry.expect("entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let shown = if path.is_dir() {
                format!("{dir}/{name}/")
            } else {
                format!("{dir}/{name}")
            };
            assert!(
                on_map(&shown),
                "{shown} is missing from docs/layout.md's map"
            );
        }
    }
    for lua in std::fs::read_dir(root().join("src/store/locks")).expect("src/store/locks") {
        let path = lua.expect("entry").path();
        if path.extension().is_some_and(|ext| ext == "lua") {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            let named = block.match_indices(stem).any(|(at, _)| {
                !word(block[..at].chars().next_back())
                    && !word(block[at + stem.len()..].chars().next())
            });
            assert!(
                named,
                "src/store/locks/{stem}.lua: the map's *.lua line does not name it"
            );
        }
    }
}

/// docs/layout.md's tour: the section from its `## A ten-minute tour` heading to the next.
fn tour() -> String {
    let layout = read("docs/layout.md");
    let start = layout
        .find("\n## A ten-minute tour")
        .expect("docs/layout.md has a ten-minute tour");
    // The map stays the page's first code block: tests/layout.rs reads it there.
    let map_end = layout.match_indices("```").nth(1).map(|(at, _)| at);
    assert!(
        map_end.is_some_and(|end| end < start),
        "the tour must come after the map"
    );
    let section = &layout[start + 1..];
    let end = section.find("\n## ").unwrap_or(section.len());
    section[..end].to_owned()
}

/// The tour's paragraphs and list items, each as its inline code spans in order.
fn tour_blocks(tour: &str) -> Vec<Vec<String>> {
    let mut blocks: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in prose(tour) {
        let trimmed = line.trim_start();
        let item = trimmed.starts_with("- ")
            || trimmed
                .split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if trimmed.is_empty() || item {
            blocks.push(std::mem::take(&mut current));
        }
        current.push_str(line);
        current.push('\n');
    }
    blocks.push(current);
    blocks
        .iter()
        .map(|block| {
            block
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

/// A code span that names a file or folder of the repository: no spaces, a `/`.
fn is_path(span: &str) -> bool {
    span.contains('/')
        && span
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
}

/// A code span that names an item of a file (`fate`, `Life::take`, `fate()`): its parts.
fn item_path(span: &str) -> Option<Vec<&str>> {
    let span = span.strip_suffix("()").unwrap_or(span);
    let parts: Vec<&str> = span.split("::").collect();
    let identifier = |part: &&str| {
        part.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    parts.iter().all(identifier).then_some(parts)
}

/// Whether `text` has `word` right after `before` (`"fn "`, `"message "`), as a whole word.
fn follows(text: &str, before: &str, word: &str) -> bool {
    let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let wanted = format!("{before}{word}");
    text.match_indices(wanted.as_str()).any(|(at, _)| {
        !ident(text[..at].chars().next_back()) && !ident(text[at + wanted.len()..].chars().next())
    })
}

/// Whether the file at `path` (Rust, Lua or protobuf) defines `name`: a Rust item, an `impl`
/// of or for it, an enum variant or a field; a Lua function, or a Redis command the script
/// calls; a protobuf message, enum, service, RPC or field. Comment lines do not count.
fn defines(path: &str, text: &str, name: &str) -> bool {
    let (comment, keywords): (&str, &[&str]) = match path.rsplit('.').next() {
        Some("rs") => (
            "//",
            &[
                "fn ", "struct ", "enum ", "trait ", "type ", "const ", "static ", "mod ",
            ],
        ),
        Some("lua") => ("--", &["function "]),
        Some("proto") => ("//", &["message ", "enum ", "service ", "rpc "]),
        _ => return false,
    };
    let code: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.starts_with(comment))
        .collect();
    code.iter().any(|line| {
        let declared = keywords.iter().any(|keyword| follows(line, keyword, name));
        let rust = path.ends_with(".rs") && {
            let bare = ["pub(crate) ", "pub(super) ", "pub "]
                .iter()
                .find_map(|vis| line.strip_prefix(vis))
                .unwrap_or(line);
            let member = bare.strip_prefix(name).is_some_and(|rest| {
                rest.is_empty() || [",", "(", " {", ":"].iter().any(|p| rest.starts_with(p))
            });
            (line.starts_with("impl") && follows(line, "", name)) || member
        };
        let lua = path.ends_with(".lua") && follows(line, "redis.call('", name);
        let field = path.ends_with(".proto") && follows(line, "", &format!("{name} ="));
        declared || rust || lua || field
    })
}

#[test]
fn the_tour_of_the_code_names_files_that_exist_and_what_they_define() {
    let tour = tour();
    let lines = tour.lines().count();
    assert!(
        lines <= 150,
        "the ten-minute tour is {lines} lines; keep it short enough to read in ten minutes"
    );
    let mut paths = Vec::new();
    let mut items = 0;
    for spans in tour_blocks(&tour) {
        let mut file: Option<(String, String)> = None;
        for span in spans {
            if is_path(&span) {
                let full = root().join(&span);
                assert!(
                    full.exists(),
                    "the tour names {span}, which is not in the tree"
                );
                file = full.is_file().then(|| (span.clone(), read(&span)));
                paths.push(span);
            } else if let Some(parts) = item_path(&span) {
                let Some((path, text)) = &file else {
                    panic!(
                        "the tour names `{span}` after no file of its paragraph: name the file first"
                    );
                };
                for part in parts {
                    assert!(
                        defines(path, text, part),
                        "the tour says `{span}` is in {path}, which defines no {part}"
                    );
                }
                items += 1;
            }
        }
    }
    // One lease through every layer: proto -> server -> lease -> store -> scripts, and the client.
    for layer in [
        "proto/",
        "src/server/",
        "src/lease/",
        "src/store/",
        "clients/rust/",
    ] {
        assert!(
            paths.iter().any(|path| path.starts_with(layer)),
            "the tour never opens a file under {layer}"
        );
    }
    assert!(
        paths.iter().any(|path| path.ends_with(".lua")),
        "the tour never reaches a script"
    );
    assert!(items >= 40, "the tour names only {items} items of the code");
}

/// The README is a quick start, not the manual: the rest lives in docs/ (issue 39 set the
/// bound). A README that outgrows it is a page to move, not a limit to raise.
#[test]
fn the_readme_stays_a_quick_start_of_at_most_300_lines() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; move detail into docs/ (docs/README.md indexes it)"
    );
}
