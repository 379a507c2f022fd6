//! The map of the tree (docs/layout.md) names only paths that exist, and every source file is on
//! it; the README links every page of docs/, and every relative link of the README and docs/
//! leads somewhere.

use std::path::{Path, PathBuf};

/// Words of docs/layout.md's code block that name paths in the repository.
fn layout_paths() -> Vec<String> {
    let layout = std::fs::read_to_string(root().join("docs/layout.md")).expect("docs/layout.md");
    let block = layout.split("```").nth(1).expect("a code block in it");
    let roots = [
        "src/",
        "tests/",
        "proto/",
        "benches/",
        "examples/",
        "clients/",
    ];
    block
        .split_whitespace()
        .map(|word| word.trim_matches(|c: char| "(),;:".contains(c)))
        .filter(|word| roots.iter().any(|root| word.starts_with(root)))
        .map(str::to_owned)
        .collect()
}

pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether `path` matches `pattern`, where `*` stands for any run of characters but `/`.
pub(crate) fn matches(pattern: &str, path: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == path,
        Some((head, tail)) => {
            path.starts_with(head)
                && path.ends_with(tail)
                && path.len() >= head.len() + tail.len()
                && !path[head.len()..path.len() - tail.len()].contains('/')
        }
    }
}

fn files_under(dir: &Path, into: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files_under(&path, into);
        } else {
            let relative = path.strip_prefix(root()).expect("under the root");
            into.push(relative.to_string_lossy().into_owned());
        }
    }
}

#[test]
fn every_path_the_readme_layout_names_exists() {
    let mut files = Vec::new();
    files_under(&root().join("src"), &mut files);
    for path in layout_paths() {
        let exists = if path.contains('*') {
            files.iter().any(|file| matches(&path, file))
        } else {
            root().join(&path).exists()
        };
        assert!(
            exists,
            "docs/layout.md names {path}, which is not in the tree"
        );
    }
}

#[test]
fn every_source_file_is_on_the_readme_layout() {
    let named = layout_paths();
    let mut files = Vec::new();
    files_under(&root().join("src"), &mut files);
    for file in files {
        assert!(
            named.iter().any(|pattern| matches(pattern, &file)),
            "{file} is missing from docs/layout.md"
        );
    }
}

/// The relative links of a Markdown file: `[text](target)` with no scheme, without `#anchor`.
fn relative_links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')'))
        .map(|(target, _)| target.split('#').next().unwrap_or_default().to_owned())
        .filter(|target| !target.is_empty() && !target.contains("://"))
        .collect()
}

#[test]
fn the_readme_links_every_page_of_docs_and_no_link_is_broken() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let mut pages = Vec::new();
    for entry in std::fs::read_dir(root().join("docs")).expect("docs/") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".md") {
            pages.push(name);
        }
    }
    assert!(!pages.is_empty());
    let linked = relative_links(&readme);
    for page in &pages {
        assert!(
            linked.contains(&format!("docs/{page}")),
            "the README does not link docs/{page}"
        );
    }
    let mut files = vec![(root(), readme)];
    for page in &pages {
        let text = std::fs::read_to_string(root().join("docs").join(page)).expect("page");
        files.push((root().join("docs"), text));
    }
    for (dir, text) in files {
        for link in relative_links(&text) {
            assert!(
                dir.join(&link).exists(),
                "a link to {link} (from {}) leads nowhere",
                dir.display()
            );
        }
    }
}

/// With `autotests = false`, a test file that tests/integration.rs does not name as a module
/// would never be compiled, let alone run: every one must be named.
#[test]
fn every_test_file_is_a_module_of_the_one_test_binary() {
    let binary =
        std::fs::read_to_string(root().join("tests/integration.rs")).expect("tests/integration.rs");
    for entry in std::fs::read_dir(root().join("tests")).expect("tests/") {
        let path = entry.expect("entry").path();
        let Some(stem) = path.file_stem().and_then(|stem| stem.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|ext| ext == "rs") && stem != "integration" {
            assert!(
                binary.lines().any(|line| line == format!("mod {stem};")),
                "tests/{stem}.rs is not a module of tests/integration.rs, so it never runs"
            );
        }
    }
}
