# Build: docker build -t leasehold .
# Run:   docker run --rm -p 50051:50051 -e LEASEHOLD_REDIS=redis://redis:6379 leasehold
# compose.yaml runs Redis and two replicas. scripts/check-containers.sh runs this file's build
# stage as a script, and checks compose.yaml, on machines without a Docker engine (CI).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto proto
COPY src src
# The Rust client, a member of the workspace (the CLI uses it); its stubs come from proto/.
COPY clients/rust/Cargo.toml clients/rust/build.rs clients/rust/README.md clients/rust/
COPY clients/rust/src clients/rust/src
# Its build.rs reads clients/rust/proto (a symlink in the repository, so the packaged crate
# carries the contract): the same files here.
COPY proto clients/rust/proto
# fred, patched (see vendor/README.md).
COPY vendor vendor
# Declared in Cargo.toml: copied so every declared target exists (it is not built here).
COPY benches benches
# Symbols stripped: 19.7 MB instead of 26.2 (x86_64). A panic still names its file and line.
RUN CARGO_PROFILE_RELEASE_STRIP=symbols cargo build --release --locked --bin leasehold

# The runtime: distroless cc (Debian 12, as the build stage): glibc, libgcc_s, CA certificates
# (tonic's native roots read them), no shell and no package manager. The binary needs nothing
# else (TLS is rustls): scripts/check-containers.sh fails if `ldd` shows it a library beyond
# glibc and libgcc_s. Its nonroot user is uid 65532, given as numbers so that Kubernetes'
# runAsNonRoot can check it (the Helm chart runs as the same uid).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/leasehold /usr/local/bin/leasehold
USER 65532:65532
EXPOSE 50051
ENV LEASEHOLD_LISTEN=0.0.0.0:50051
# gRPC health (SERVING while Redis answers), through the binary itself: no extra probe tool.
# Exec form only (here and below): the image has no shell to run a string through.
# With --tls-cert, override it: leasehold health --server https://localhost:50051 --tls-ca CA.pem
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/leasehold", "health", "--server", "http://127.0.0.1:50051"]
# SIGTERM (docker stop): health turns NOT_SERVING, the listening socket closes, leases with a
# resume grace are handed over (their clients resume them on another replica), the others are
# released and their holders told Lost, and the process exits 0 within the drain. The drain is
# 8 s so that it ends inside docker stop's default grace of 10 s (raise both together:
# `docker stop -t`, compose's stop_grace_period).
ENV LEASEHOLD_DRAIN=8s
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/leasehold"]
CMD ["serve"]
