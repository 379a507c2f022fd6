#!/usr/bin/env bash
# What a lease costs (issue 15): one Redis and one server (release build, `--echo` for the
# transport baseline) started here on free ports, then `leasehold bench` against them with the
# arguments given, e.g. `scripts/bench-lease.sh --only uncontended` or
# `scripts/bench-lease.sh --only held --held 100000 --held-ttl 1s`. Extra server flags go in
# $SERVE_ARGS. Everything started here stops on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${LEASEHOLD_BIN:-target/release/leasehold}
source scripts/bench-setup.sh

redis_port=$(free_port)
redis "$redis_port"
grpc_port=$(free_port)
# shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
"$binary" serve --listen "127.0.0.1:$grpc_port" --redis "redis://127.0.0.1:$redis_port" \
  --echo --max-leases 200000 --max-leases-per-connection 10000 ${SERVE_ARGS:-} \
  >"$work/server.log" 2>&1 &
server=$!
pids+=("$server")
until "$binary" status --server "http://127.0.0.1:$grpc_port" >/dev/null 2>&1; do sleep 0.1; done
"$binary" bench --server "http://127.0.0.1:$grpc_port" --redis "redis://127.0.0.1:$redis_port" \
  --server-pid "$server" "$@" || { echo "bench failed; the server said:" >&2; grep -m 5 -i "warn\|error" "$work/server.log" >&2; exit 1; }
