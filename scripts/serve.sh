#!/usr/bin/env bash
# Starts Leasehold on 127.0.0.1:50051 against the Redis at 127.0.0.1:6379, starting that Redis
# first if nothing answers there (and installing redis-server if it is missing).
# Extra arguments go to `leasehold serve`, e.g. scripts/serve.sh --listen 0.0.0.0:50051
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh
ensure_local_redis
exec cargo run --release --bin leasehold -- serve --redis redis://127.0.0.1:6379 "$@"
