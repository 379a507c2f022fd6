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

# Python client: a wheel built from clients/python (its stubs generated from proto/ at build time),
# installed in a venv, and tested against the binary that cargo test just built.
venv=target/py-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check pytest
rm -rf target/py-wheels
"$venv/bin/pip" wheel -q --disable-pip-version-check --no-deps -w target/py-wheels ./clients/python
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall target/py-wheels/leasehold_client-*.whl
LEASEHOLD_BIN="$PWD/target/debug/leasehold" "$venv/bin/python" -m pytest -q -p no:cacheprovider clients/python/tests

# Go client: current grpc-go from the Go module proxy (Go 1.24 or newer), stubs generated now,
# tested against the binary.
clients/go/test.sh "$PWD/target/debug/leasehold"
