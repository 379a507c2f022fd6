#!/usr/bin/env bash
# Starts Leasehold on 127.0.0.1:50051 against the Redis at 127.0.0.1:6379, in the foreground;
# Ctrl-C (or SIGTERM) stops it cleanly. If no Redis answers on :6379, a redis-server is started
# for the session (installed with apt-get if missing) and stopped when the server stops.
# The first run builds the release binary: about 5 minutes on 2 cores.
# Extra arguments go to `leasehold serve`, e.g. scripts/serve.sh --listen 0.0.0.0:50051
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh
cargo build --release --bin leasehold
start_redis_if_none_answers
stop_redis() {
  if [ -n "$session_redis" ]; then
    kill "$session_redis" 2>/dev/null && wait "$session_redis" 2>/dev/null || true
    echo "stopped the Redis this script started" >&2
  fi
}
trap stop_redis EXIT
# In the background so that this script can pass a Ctrl-C or SIGTERM on and still stop its Redis
# afterwards (a background child of a script does not get the terminal's Ctrl-C itself).
target/release/leasehold serve --redis redis://127.0.0.1:6379 "$@" &
server=$!
trap 'kill -TERM "$server" 2>/dev/null || true' INT TERM
status=0
# `wait` returns early when a signal's trap runs: wait again until the server has exited.
while kill -0 "$server" 2>/dev/null; do
  wait "$server" || status=$?
done
exit "$status"
