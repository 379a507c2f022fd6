#!/usr/bin/env bash
# What each Redis mode (single, Sentinel, Cluster, Redlock over five primaries) costs the lock
# path, one Leasehold server per mode (BENCHMARKS.md):
# - uncontended acquire + release, p50 over the direct-Redis p50 of its own run (against the
#   single Redis), then over single's in the same round;
# - hand-off p50 between two clients looping on one lock, over single's in the same round;
# - 100,000 held leases on the cluster and on the single Redis: renewal scripts (each one round
#   trip) per renewal period, against the goal of one per node plus one per 100 leases.
# Usage: scripts/bench-modes.sh [ROUNDS] [LEASEHOLD_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
binary=${2:-target/release/leasehold}
source scripts/bench-setup.sh

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
  # Its own bus port: the default (port + 10000) is past 65535 for much of the ephemeral range.
  port=$(free_port); redis "$port" --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-port "$(free_port)"
  nodes+=("127.0.0.1:$port")
done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >/dev/null
for node in "${nodes[@]}"; do
  until [[ $(redis-cli -p "${node##*:}" cluster info) == *cluster_state:ok* ]]; do sleep 0.05; done
done

primaries=()
for _ in 1 2 3 4 5; do
  port=$(free_port); redis "$port"; primaries+=("redis://127.0.0.1:$port")
done

start() { # name, redis option, its value
  "$binary" serve --listen 127.0.0.1:0 --max-leases 200000 "$2" "$3" >"$work/$1.out" 2>/dev/null &
  echo $! > "$work/$1.pid"
  until grep -q "listening on" "$work/$1.out" 2>/dev/null; do sleep 0.05; done
  sed -n 's/leasehold: listening on //p' "$work/$1.out"
}
declare -A servers
servers[single]=$(start single --redis "redis://127.0.0.1:$single")
servers[sentinel]=$(start sentinel --redis "redis-sentinel://$(IFS=,; echo "${sentinels[*]}")/leasehold")
servers[cluster]=$(start cluster --redis "redis-cluster://$(IFS=,; echo "${nodes[*]}")")
servers[redlock]=$(start redlock --redlock "$(IFS=,; echo "${primaries[*]}")")
modes=(single sentinel cluster redlock)

for round in $(seq 1 "$rounds"); do
  for mode in "${modes[@]}"; do
    "$binary" bench --only uncontended --server "http://${servers[$mode]}" \
      --redis "redis://127.0.0.1:$single" --json "$work/$mode-$round.json" >/dev/null
    "$binary" bench --only contention --quick --server "http://${servers[$mode]}" \
      --redis "redis://127.0.0.1:$single" --json "$work/$mode-handoff-$round.json" >/dev/null
  done
done

# Held leases: the bench reads the renewal scripts from every primary of the Redis it is given
# (fred's form of a cluster URL).
held=${HELD:-100000}
cluster_url="redis-cluster://${nodes[0]}?$(printf 'node=%s&' "${nodes[@]:1}")"
"$binary" bench --only held --held "$held" --server "http://${servers[cluster]}" \
  --server-pid "$(cat "$work/cluster.pid")" --redis "${cluster_url%&}" \
  --json "$work/held-cluster.json" >/dev/null
"$binary" bench --only held --held "$held" --server "http://${servers[single]}" \
  --server-pid "$(cat "$work/single.pid")" --redis "redis://127.0.0.1:$single" \
  --json "$work/held-single.json" >/dev/null

python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
modes = ("single", "sentinel", "cluster", "redlock")
def p50(mode, r, path):
    figures = json.load(open(f"{work}/{mode}-{r}.json"))["uncontended"]["paths"]
    return next(f for f in figures if f["path"].startswith(path))["p50_us"]
def handoff(mode, r):
    rows = json.load(open(f"{work}/{mode}-handoff-{r}.json"))["contention"]
    return next(row for row in rows if row["clients"] == 2)["stream_handoffs"]["p50_us"]
cost = lambda mode, r, path: p50(mode, r, path) / p50(mode, r, "direct")
def cell(ratios):
    return f"{statistics.median(ratios):.2f}x ({', '.join(f'{x:.2f}' for x in ratios)})"
print(f"Each a ratio against single Redis in the same round; median of {rounds} rounds (the rounds in brackets).")
print("Acquire + release: p50 over direct Redis in its own run, then over single's. Hand-off: p50 between two")
print("clients looping on one lock (Lease stream), over single's.")
print()
print("| mode | acquire + release, Lease stream | acquire + release, unary | hand-off | Lease stream p50 (µs, round 1) | hand-off p50 (µs, round 1) |")
print("| --- | --- | --- | --- | --- | --- |")
for mode in modes:
    cells = []
    for path in ("Lease stream", "unary"):
        cells.append(cell([cost(mode, r, path) / cost("single", r, path) for r in range(1, rounds + 1)]))
    cells.append(cell([handoff(mode, r) / handoff("single", r) for r in range(1, rounds + 1)]))
    print(f"| {mode} | {' | '.join(cells)} | {p50(mode, 1, 'Lease stream')} | {handoff(mode, 1)} |")
print()
print("| held leases (TTL 30 s, renewal period 10 s) | nodes | renewal scripts (round trips) per period | goal: nodes + leases/100 | leases per script | server RSS per lease | server CPU |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for mode, nodes in (("cluster", 3), ("single", 1)):
    row = json.load(open(f"{work}/held-{mode}.json"))["held_leases"][0]
    leases, per_period = row["leases"], row["renewal_scripts_per_period"]
    rss = row["rss_growth_bytes"] / leases if row["rss_growth_bytes"] else float("nan")
    cpu = (row["cpu_share_of_one_core"] or 0) * 100
    print(f"| {leases} on {mode} | {nodes} | {per_period:.0f} | {nodes + leases // 100} | {leases / max(per_period, 1):.0f} | {rss:.0f} B | {cpu:.1f}% of a core |")
PY
