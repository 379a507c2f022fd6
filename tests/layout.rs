//! The README's layout section is the map a newcomer reads first: every path it names exists,
//! and every source file is on it.

use std::path::{Path, PathBuf};

/// Words of the README's `## Layout` code block that name paths in the repository.
fn layout_paths() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## Layout\n")
        .nth(1)
        .expect("a ## Layout section");
    let block = section.split("```").nth(1).expect("a code block in it");
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

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether `path` matches `pattern`, where `*` stands for any run of characters but `/`.
fn matches(pattern: &str, path: &str) -> bool {
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
            "the README's layout names {path}, which is not in the tree"
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
            "{file} is missing from the README's layout section"
        );
    }
}
