//! Generates the client stubs from the repository's `proto/` (the one contract every client and
//! the server are built from) with a vendored `protoc`, so a fresh machine needs no system
//! protobuf compiler. `proto` here is a symlink to the repository's, which `cargo package`
//! copies into the crate as files: the packaged crate builds on its own.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=proto");
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    // Clients only; small per-stream buffers: see src/pb/codec.rs.
    tonic_prost_build::configure()
        .build_server(false)
        .codec_path("crate::pb::codec::SmallBufferCodec")
        .compile_with_config(
            config,
            &[
                "proto/leasehold/v1/lock.proto",
                "proto/leasehold/v1/election.proto",
                "proto/leasehold/v1/session.proto",
                "proto/leasehold/bench/v1/echo.proto",
            ],
            &["proto"],
        )?;
    Ok(())
}
