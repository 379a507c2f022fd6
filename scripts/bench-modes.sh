#!/usr/bin/env bash
# Uncontended acquire + release through one Leasehold server per Redis mode (single, Sentinel,
# Cluster), each p50 over the direct-Redis p50 of its own run (against the single Redis), then
# over single's in the same round: what a mode costs the lock path (BENCHMARKS.md).
# Usage: scripts/bench-modes.sh [ROUNDS] [LEASEHOLD_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh
ensure_redis_server_installed
rounds=${1:-3}
binary=${2:-target/release/leasehold}
[ -x "$binary" ] || cargo build --release --bin leasehold
work=$(mktemp -d)
pids=()
# Servers start in command substitutions (subshells): their pids are kept in files.
cleanup() { kill "${pids[@]}" $(cat "$work"/*.pid 2>/dev/null) 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
redis() { # port, extra args...
  local port=$1; shift
  mkdir -p "$work/$port"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work/$port" "$@" >/dev/null &
  pids+=($!)
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
}

single=$(free_port); redis "$single"

primary=$(free_port); replica=$(free_port)
redis "$primary"; redis "$replica" --replicaof 127.0.0.1 "$primary"
sentinels=()
for _ in 1 2 3; do
  port=$(free_port)
  printf 'port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor leasehold 127.0.0.1 %s 2\n' \
    "$port" "$work" "$primary" > "$work/sentinel-$port.conf"
  redis-server "$work/sentinel-$port.conf" --sentinel >/dev/null &
  pids+=($!); sentinels+=("127.0.0.1:$port")
done
# (No `| grep -q` in these loops: with pipefail, grep's early exit fails the pipeline.)
until [[ $(redis-cli -p "$replica" info replication) == *master_link_status:up* ]]; do sleep 0.05; done

nodes=()
for _ in 1 2 3 4 5 6; do
  port=$(free_port); redis "$port" --cluster-enabled yes --cluster-config-file nodes.conf
  nodes+=("127.0.0.1:$port")
done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >/dev/null
for node in "${nodes[@]}"; do
  until [[ $(redis-cli -p "${node##*:}" cluster info) == *cluster_state:ok* ]]; do sleep 0.05; done
done

start() { # name, redis url
  "$binary" serve --listen 127.0.0.1:0 --redis "$2" >"$work/$1.out" 2>/dev/null &
  echo $! > "$work/$1.pid"
  until grep -q "listening on" "$work/$1.out" 2>/dev/null; do sleep 0.05; done
  sed -n 's/leasehold: listening on //p' "$work/$1.out"
}
declare -A servers
servers[single]=$(start single "redis://127.0.0.1:$single")
servers[sentinel]=$(start sentinel "redis-sentinel://$(IFS=,; echo "${sentinels[*]}")/leasehold")
servers[cluster]=$(start cluster "redis-cluster://$(IFS=,; echo "${nodes[*]}")")

for round in $(seq 1 "$rounds"); do
  for mode in single sentinel cluster; do
    "$binary" bench --only uncontended --server "http://${servers[$mode]}" \
      --redis "redis://127.0.0.1:$single" --json "$work/$mode-$round.json" >/dev/null
  done
done
python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def p50(mode, r, path):
    figures = json.load(open(f"{work}/{mode}-{r}.json"))["uncontended"]
    return next(f for f in figures if f["path"].startswith(path))["p50_us"]
cost = lambda mode, r, path: p50(mode, r, path) / p50(mode, r, "direct")
print(f"p50 per acquire + release over direct Redis in its own run, then over single's; median of {rounds} rounds")
print()
print("| mode | Lease stream vs single | unary vs single | Lease stream p50 (µs, round 1) |")
print("| --- | --- | --- | --- |")
for mode in ("single", "sentinel", "cluster"):
    cells = []
    for path in ("Lease stream", "unary"):
        ratios = [cost(mode, r, path) / cost("single", r, path) for r in range(1, rounds + 1)]
        cells.append(f"{statistics.median(ratios):.2f}x ({', '.join(f'{x:.2f}' for x in ratios)})")
    print(f"| {mode} | {cells[0]} | {cells[1]} | {p50(mode, 1, 'Lease stream')} |")
PY
