//! Generates the gRPC code from `proto/` with a vendored `protoc`, so a fresh
//! machine needs no system protobuf compiler; and names the commit built, for `--version`.

use std::path::Path;
use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    commit();
    // Without these, Cargo reruns the script (and rebuilds the crate) on any file change in the
    // package, README and docs included.
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=proto");
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    // The descriptor set serves gRPC reflection (grpcurl and friends need no .proto files).
    let descriptors = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("leasehold.bin");
    // Small per-stream buffers: see src/pb/codec.rs.
    tonic_prost_build::configure()
        .file_descriptor_set_path(descriptors)
        .codec_path("crate::pb::codec::SmallBufferCodec")
        .compile_with_config(
            config,
            &[
                "proto/leasehold/v1/lock.proto",
                "proto/leasehold/v1/election.proto",
                "proto/leasehold/v1/session.proto",
            ],
            &["proto"],
        )?;
    // The bench's echo has a descriptor set of its own: reflection lists it only where it is
    // served (`serve --echo`).
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    let descriptors = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("echo.bin");
    tonic_prost_build::configure()
        .file_descriptor_set_path(descriptors)
        .codec_path("crate::pb::codec::SmallBufferCodec")
        .compile_with_config(config, &["proto/leasehold/bench/v1/echo.proto"], &["proto"])?;
    Ok(())
}

/// Sets `LEASEHOLD_COMMIT` to the short hash and date of the commit built (`a097d5b 2026-12-07`),
/// or `unknown` where there is no git or no `.git` of this package's own (the Docker build copies
/// none; a packaged crate has none, and must not take the commit of a repository it sits in).
fn commit() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let git = |args: &[&str]| -> Option<String> {
        let output = Command::new("git")
            .current_dir(&dir)
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8(output.stdout).ok()?;
        (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
    };
    let found = Path::new(&dir).join(".git").exists();
    let commit = found
        .then(|| {
            let hash = git(&["rev-parse", "--short", "HEAD"])?;
            let date = git(&["show", "-s", "--format=%cd", "--date=short", "HEAD"])?;
            Some(format!("{hash} {date}"))
        })
        .flatten();
    println!(
        "cargo:rustc-env=LEASEHOLD_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
    if commit.is_none() {
        return;
    }
    // Rerun when HEAD moves (a checkout) or the branch it names does (a commit), and not on
    // every build. A path that does not exist would make Cargo rerun every time: a branch whose
    // ref is only in packed-refs is watched through its folder, where a commit writes it.
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        // Only the branch's own file: a folder would rerun on other branches' commits too.
        if let Some(loose) = git(&["rev-parse", "--git-path", &branch]) {
            let path = Path::new(&dir).join(&loose);
            match path.exists() {
                true => watched.push(Some(loose)),
                false => watched.push(path.parent().map(|p| p.display().to_string())),
            }
        }
    }
    for path in watched.into_iter().flatten() {
        let path = Path::new(&dir).join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
