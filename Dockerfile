# Build: docker build -t leasehold .
# Run:   docker run --rm -p 50051:50051 -e LEASEHOLD_REDIS=redis://redis:6379 leasehold
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto proto
COPY src src
# Declared in Cargo.toml: copied so every declared target exists (it is not built here).
COPY benches benches
RUN cargo build --release --locked --bin leasehold

FROM debian:bookworm-slim
RUN useradd --system --no-create-home leasehold
COPY --from=build /src/target/release/leasehold /usr/local/bin/leasehold
USER leasehold
EXPOSE 50051
ENV LEASEHOLD_LISTEN=0.0.0.0:50051
# SIGTERM (docker stop) releases every lease before the process exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["leasehold"]
CMD ["serve"]
