#!/usr/bin/env bash
# What waiting for the replica costs (issue 49, BENCHMARKS.md): one primary with one replica on
# loopback, two servers on it, one vouching only for what the replica acknowledged
# (`--redis-replicas auto`, the default: WAIT after every grant, renewal and resume) and one that
# does not wait (`--redis-replicas 0`). The two are measured in turns, ROUNDS rounds:
# - uncontended acquire + release (Lease stream and unary): p50 and p99, on over off;
# - hand-off between two clients looping on one lock: p50 and p99, on over off;
# - HELD leases held at once (TTL 30 s, renewed in batches every 10 s): the primary's CPU over the
#   bench's window, on over off (the goal: one WAIT per batch, at most 1.2x).
# Usage: scripts/bench-replication.sh [ROUNDS] [LEASEHOLD_BINARY]   (HELD=10000 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
binary=${2:-target/release/leasehold}
source scripts/bench-setup.sh

primary=$(free_port); replica=$(free_port)
redis "$primary"; redis "$replica" --replicaof 127.0.0.1 "$primary"
until [[ $(redis-cli -p "$primary" info replication) == *state=online* ]]; do sleep 0.05; done

start() { # name, --redis-replicas value
  "$binary" serve --listen 127.0.0.1:0 --max-leases 200000 --redis "redis://127.0.0.1:$primary" \
    --redis-replicas "$2" >"$work/$1.out" 2>"$work/$1.err" &
  echo $! > "$work/$1.pid"
  until grep -q "listening on" "$work/$1.out" 2>/dev/null; do sleep 0.05; done
  sed -n 's/leasehold: listening on //p' "$work/$1.out"
}
declare -A servers
servers[on]=$(start on auto)
servers[off]=$(start off 0)
held=${HELD:-10000}

for round in $(seq 1 "$rounds"); do
  # Each round in the other order, so that neither always runs on a warmer (or busier) machine.
  order="on off"; (( round % 2 == 0 )) && order="off on"
  for mode in $order; do
    "$binary" bench --only uncontended --server "http://${servers[$mode]}" \
      --redis "redis://127.0.0.1:$primary" --json "$work/$mode-$round.json" >/dev/null
    "$binary" bench --only contention --quick --server "http://${servers[$mode]}" \
      --redis "redis://127.0.0.1:$primary" --json "$work/$mode-handoff-$round.json" >/dev/null
    "$binary" bench --only held --held "$held" --server "http://${servers[$mode]}" \
      --server-pid "$(cat "$work/$mode.pid")" --redis "redis://127.0.0.1:$primary" \
      --json "$work/$mode-held-$round.json" >/dev/null
  done
done
grep -h "vouched for once" "$work/on.err" | head -n 1 | cut -c1-160 || true

python3 - "$work" "$rounds" "$held" <<'PY'
import json, statistics, sys
work, rounds, held = sys.argv[1], int(sys.argv[2]), sys.argv[3]
load = lambda name: json.load(open(f"{work}/{name}.json"))
def pair(mode, r, path, q):
    figures = load(f"{mode}-{r}")["uncontended"]["paths"]
    return next(f for f in figures if f["path"].startswith(path))[f"{q}_us"]
def handoff(mode, r, q):
    rows = load(f"{mode}-handoff-{r}")["contention"]
    return next(row for row in rows if row["clients"] == 2)["stream_handoffs"][f"{q}_us"]
def redis_cpu(mode, r):
    return load(f"{mode}-held-{r}")["held_leases"][0]["redis_cpu_share_of_one_core"]
def cell(ratios):
    return f"{statistics.median(ratios):.2f}x ({', '.join(f'{x:.2f}' for x in ratios)})"
R = range(1, rounds + 1)
print(f"Acknowledgement on (--redis-replicas auto, one replica) over off (--redis-replicas 0), same primary,")
print(f"measured in turns; median of {rounds} rounds (each round in brackets).")
print()
print("| measure | goal | on / off | on, round 1 | off, round 1 |")
print("| --- | --- | --- | --- | --- |")
for path in ("Lease stream", "unary"):
    for q, goal in (("p50", "1.3x"), ("p99", "1.5x")):
        ratios = [pair("on", r, path, q) / pair("off", r, path, q) for r in R]
        print(f"| acquire + release, {path}, {q} | at most {goal} | {cell(ratios)} | {pair('on', 1, path, q)} µs | {pair('off', 1, path, q)} µs |")
for q in ("p50", "p99"):
    ratios = [handoff("on", r, q) / handoff("off", r, q) for r in R]
    print(f"| hand-off, {q} | | {cell(ratios)} | {handoff('on', 1, q)} µs | {handoff('off', 1, q)} µs |")
ratios = [redis_cpu("on", r) / redis_cpu("off", r) for r in R]
print(f"| Redis CPU, {held} held leases renewing | at most 1.2x | {cell(ratios)} | {redis_cpu('on', 1) * 100:.2f}% of a core | {redis_cpu('off', 1) * 100:.2f}% of a core |")
PY
