#!/usr/bin/env bash
# The server's own CPU per unary call, driven by ghz (the common gRPC load tool, by reflection
# alone), on one server, alternating, each round a ratio:
#  - gRPC health `Check` (tonic-health, without the lock service's interceptor): the
#    transport's floor as any gRPC server has it;
#  - `Echo`: the no-op call (the bench service of `serve --echo`, behind the same layers and
#    interceptor as the lock service): the transport's floor;
#  - `Echo` with `redis`: the same plus one `PING` on the server's Redis connection: the floor
#    of any call that asks Redis once, as an uncontended `Acquire` does;
#  - `Acquire` (a fresh name each call, 100 ms TTL, so nothing piles up).
# CPU from /proc/PID/stat, divided by the calls ghz made. Also the calls per second of each at
# each concurrency: acquisitions against no-op calls.
#
#   scripts/bench-unary-cpu.sh [calls per run, default 20000] [rounds, default 3]
#
# ghz: LEASEHOLD_GHZ, else target/go/bin/ghz (installed from the Go module proxy if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${LEASEHOLD_BIN:-target/release/leasehold}
calls=${1:-20000}
rounds=${2:-3}
source scripts/bench-setup.sh
ensure_ghz

redis_port=$(free_port)
redis "$redis_port"
grpc_port=$(free_port)
"$binary" serve --echo --listen "127.0.0.1:$grpc_port" --redis "redis://127.0.0.1:$redis_port" \
  >"$work/server.log" 2>&1 &
server=$!
pids+=("$server")
until "$binary" status --server "http://127.0.0.1:$grpc_port" >/dev/null 2>&1; do sleep 0.1; done

# One ghz run; prints "<server CPU µs per call> <calls per second>".
run() { # method, data, concurrency
  ghz_cpu_per_call "$server" "127.0.0.1:$grpc_port" "$1" "$2" "$3" "$calls"
}

printf "| concurrency | round | Check: server CPU per call | Echo | Echo + PING | Acquire | Acquire / Check | Acquire / Echo | (Echo + PING) / Check | Acquire / (Echo + PING) | Echo calls/s | Acquire calls/s | ratio |\n"
printf "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
for concurrency in 50 200; do
  for round in $(seq "$rounds"); do
    read -r check_cpu _ < <(run grpc.health.v1.Health/Check '{}' "$concurrency")
    read -r echo_cpu echo_rps < <(run leasehold.bench.v1.EchoService/Echo '{}' "$concurrency")
    read -r ping_cpu _ < <(run leasehold.bench.v1.EchoService/Echo '{"redis":true}' "$concurrency")
    read -r acquire_cpu acquire_rps < <(run leasehold.v1.LockService/Acquire \
      '{"name":"ghz-'"$round"'-{{.RequestNumber}}","ttl_ms":100}' "$concurrency")
    python3 -c "
h, e, p, a, er, ar = $check_cpu, $echo_cpu, $ping_cpu, $acquire_cpu, $echo_rps, $acquire_rps
print(f'| $concurrency | $round | {h:.1f} µs | {e:.1f} µs | {p:.1f} µs | {a:.1f} µs | {a / h:.2f}x | {a / e:.2f}x | {p / h:.2f}x | {a / p:.2f}x | {er:.0f} | {ar:.0f} | {ar / er:.2f}x |')"
  done
done
