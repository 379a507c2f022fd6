#!/usr/bin/env bash
# What TLS, auth and metrics cost on uncontended acquire + release (BENCHMARKS.md): four servers
# of one release build on one Redis (plaintext; TLS; a bearer token checked against an auth file;
# metrics on), measured two ways, each figure a ratio against the plaintext server:
#  1. latency: `leasehold bench --only uncontended` in alternating rounds (wall clock: noisy on a
#     shared machine);
#  2. instructions: each server under callgrind, serving one and then three quick bench runs;
#     the difference over the 800 extra acquire + release pairs is the cost of one, with start-up,
#     shutdown and the connection's set-up (TLS handshake included) cancelled out. Repeatable
#     whatever else the machine does.
# Usage: scripts/bench-operations.sh [ROUNDS] [LEASEHOLD_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
binary=${2:-target/release/leasehold}
source scripts/bench-setup.sh

port=$(free_port); redis "$port"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench-ca \
  -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
  -keyout "$work/server.key" -out "$work/server.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$work/ext"
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
  -days 1 -extfile "$work/ext" -out "$work/server.pem" 2>/dev/null
printf 'bench-token' > "$work/token"
printf '[[grant]]\nname = "bench"\ntoken_sha256 = "%s"\nrole = "admin"\nlocks = [""]\nelections = [""]\n' \
  "$(printf bench-token | sha256sum | cut -d' ' -f1)" > "$work/auth.toml"

start() { # name, serve args...
  local name=$1; shift
  "$binary" serve --listen 127.0.0.1:0 --redis "redis://127.0.0.1:$port" "$@" >"$work/$name.out" 2>/dev/null &
  echo $! > "$work/$name.pid"
  until grep -q "listening on" "$work/$name.out" 2>/dev/null; do sleep 0.05; done
  sed -n 's/leasehold: listening on //p' "$work/$name.out"
}
plain=$(start plain)
tls=$(start tls --tls-cert "$work/server.pem" --tls-key "$work/server.key")
auth=$(start auth --auth-file "$work/auth.toml")
metrics=$(start metrics --metrics 127.0.0.1:0)

cpu_ticks() { # a process's user + system CPU, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}
bench() { # name, round, bench args...: figures as JSON, and the server's CPU ticks meanwhile
  local name=$1 round=$2; shift 2
  local pid; pid=$(cat "$work/$name.pid")
  local before; before=$(cpu_ticks "$pid")
  "$binary" bench --only uncontended --redis "redis://127.0.0.1:$port" --json "$work/$name-$round.json" "$@" >/dev/null
  echo $(( $(cpu_ticks "$pid") - before )) > "$work/$name-$round.cpu"
}
# LEASEHOLD_BENCH_ONLY=instructions skips the wall-clock part.
[ "${LEASEHOLD_BENCH_ONLY:-}" = instructions ] && rounds=0
for round in $(seq 1 "$rounds"); do
  bench plain "$round" --server "http://$plain"
  bench tls "$round" --server "https://localhost:${tls##*:}" --tls-ca "$work/ca.pem"
  LEASEHOLD_TOKEN=bench-token bench auth "$round" --server "http://$auth"
  bench metrics "$round" --server "http://$metrics"
done
[ "$rounds" -gt 0 ] && python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def p50(name, round, path):
    figures = json.load(open(f"{work}/{name}-{round}.json"))["uncontended"]["paths"]
    return next(f for f in figures if f["path"].startswith(path))["p50_us"]
def cost(name, round, path):
    # Each run measures direct Redis in the same seconds: the path's p50 over it cancels what
    # the shared machine did to that run as a whole.
    return p50(name, round, path) / p50(name, round, "direct")
print("p50 per acquire + release, each over direct Redis in its own run, then over plaintext's;")
print(f"median of {rounds} alternating rounds (each round's ratio in brackets).")
print()
print("| server | Lease stream vs plaintext | unary Acquire+Release vs plaintext |")
print("| --- | --- | --- |")
for name in ("tls", "auth", "metrics"):
    cells = []
    for path in ("Lease stream", "unary"):
        ratios = [cost(name, r, path) / cost("plain", r, path) for r in range(1, rounds + 1)]
        cells.append(f"{statistics.median(ratios):.3f}x ({', '.join(f'{x:.2f}' for x in ratios)})")
    print(f"| {name} | {cells[0]} | {cells[1]} |")
print()
print("Server CPU (user + system) while serving one bench run (the stream and the unary path), over")
print("the plaintext server's in the same round:")
print()
print("| server | CPU vs plaintext | rounds |")
print("| --- | --- | --- |")
cpu = lambda name, r: int(open(f"{work}/{name}-{r}.cpu").read())
for name in ("tls", "auth", "metrics"):
    ratios = [cpu(name, r) / cpu("plain", r) for r in range(1, rounds + 1)]
    print(f"| {name} | {statistics.median(ratios):.3f}x | {', '.join(f'{x:.3f}' for x in ratios)} |")
PY

# 2. Instructions per acquire + release, under callgrind.
command -v valgrind >/dev/null || as_root apt-get install -y -qq valgrind >/dev/null
instructions() { # name, runs, serve args... -> instructions the server executed in all
  local name=$1 runs=$2; shift 2
  local out="$work/cg-$name-$runs"
  valgrind --tool=callgrind --callgrind-out-file="$out.cg" "$binary" serve --listen 127.0.0.1:0 \
    --redis "redis://127.0.0.1:$port" --key-prefix "cg-$name-$runs:" "$@" >"$out.out" 2>/dev/null &
  local pid=$!
  until grep -q "listening on" "$out.out" 2>/dev/null; do sleep 0.1; done
  local addr; addr=$(sed -n 's/leasehold: listening on //p' "$out.out")
  local server=(--server "http://$addr")
  [ "$name" = tls ] && server=(--server "https://localhost:${addr##*:}" --tls-ca "$work/ca.pem")
  for _ in $(seq 1 "$runs"); do
    LEASEHOLD_TOKEN=bench-token "$binary" bench --quick --only uncontended "${server[@]}" \
      --redis "redis://127.0.0.1:$port" >/dev/null
  done
  kill -TERM "$pid"; wait "$pid" || true
  sed -n 's/^summary: //p' "$out.cg"
}
declare -A per_op
for variant in "plain" "tls --tls-cert $work/server.pem --tls-key $work/server.key" \
  "auth --auth-file $work/auth.toml" "metrics --metrics 127.0.0.1:0"; do
  read -r name args <<<"$variant"
  # shellcheck disable=SC2086
  one=$(instructions "$name" 1 $args)
  # shellcheck disable=SC2086
  three=$(instructions "$name" 3 $args)
  per_op[$name]=$(( (three - one) / 800 ))
done
echo
echo "Server instructions per uncontended acquire + release (callgrind; half Lease stream, half unary):"
echo
echo "| server | instructions per acquire + release | vs plaintext |"
echo "| --- | --- | --- |"
for name in plain tls auth metrics; do
  python3 -c "import sys; n, v, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]); print(f'| {n} | {v:,} | {v / b:.3f}x |')" \
    "$name" "${per_op[$name]}" "${per_op[plain]}"
done
