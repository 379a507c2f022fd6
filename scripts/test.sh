#!/usr/bin/env bash
# Runs every test. The tests start their own redis-server processes on free loopback ports;
# this script only makes sure the tools exist (Debian: apt-get; Python packages: pip in a venv).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh
ensure_redis_server_installed
ensure_python_venv

# Rust: unit, integration (tests/), and doc tests.
cargo test "$@"

# Python client: stubs generated from proto/ now (never committed), tested against the binary
# that cargo test just built.
venv=target/py-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check grpcio grpcio-tools pytest
PATH="$PWD/$venv/bin:$PATH" clients/python/generate.sh
LEASEHOLD_BIN="$PWD/target/debug/leasehold" "$venv/bin/python" -m pytest -q -p no:cacheprovider clients/python/tests

# Go client: current grpc-go from the Go module proxy (Go 1.24 or newer), stubs generated now,
# tested against the binary.
clients/go/test.sh "$PWD/target/debug/leasehold"
