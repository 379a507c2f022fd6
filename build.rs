//! Generates the gRPC code from `proto/` with a vendored `protoc`, so a fresh
//! machine needs no system protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
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
