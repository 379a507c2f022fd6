#!/usr/bin/env bash
# What traces cost (`serve --otlp-endpoint`), as the server's own CPU per unary `Acquire` (ghz,
# 50 concurrent, a fresh name each call), servers side by side on one Redis, alternating, each
# round a ratio:
#  - off: this build without the flag, against `Echo` + one PING on the same server (the floor
#    of a call that asks Redis once) and, given LEASEHOLD_BEFORE (a binary built from the commit
#    before traces), against that build: "no cost when off";
#  - on: this build exporting every span to a receiver of its own (examples/otlp_sink.rs, which
#    only counts them), against off.
#
#   LEASEHOLD_BEFORE=path/to/leasehold scripts/bench-traces.sh [calls per run, default 20000] [rounds, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${LEASEHOLD_BIN:-target/release/leasehold}
calls=${1:-20000}
rounds=${2:-3}
source scripts/bench-setup.sh
sink_bin=target/release/examples/otlp_sink
[ -x "$sink_bin" ] || cargo build --release --example otlp_sink
ensure_ghz

redis_port=$(free_port)
redis "$redis_port"
"$sink_bin" "$work/spans" >"$work/sink.out" &
pids+=($!)
until grep -q "listening on" "$work/sink.out" 2>/dev/null; do sleep 0.05; done
sink=$(sed -n 's/^otlp sink: listening on //p' "$work/sink.out")

declare -A server_pid server_addr
start() { # label, binary, extra flags...
  local label=$1 bin=$2 port
  shift 2
  port=$(free_port)
  "$bin" serve --echo --listen "127.0.0.1:$port" --redis "redis://127.0.0.1:$redis_port" \
    --key-prefix "$label:" "$@" >"$work/$label.log" 2>&1 &
  pids+=($!)
  server_pid[$label]=$!
  server_addr[$label]=127.0.0.1:$port
  until "$binary" status --server "http://127.0.0.1:$port" >/dev/null 2>&1; do sleep 0.1; done
}
labels=(off on)
start off "$binary"
start on "$binary" --otlp-endpoint "$sink"
if [ -n "${LEASEHOLD_BEFORE:-}" ]; then
  start before "$LEASEHOLD_BEFORE"
  labels=(before off on)
fi

acquire() { # label, round
  ghz_cpu_per_call "${server_pid[$1]}" "${server_addr[$1]}" leasehold.v1.LockService/Acquire \
    '{"name":"ghz-'"$2"'-{{.RequestNumber}}","ttl_ms":100}' 50 "$calls"
}
printf "| round | Echo + PING (off) | before | off | on | off / (Echo + PING) | off / before | on / off | spans received |\n"
printf "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
for round in $(seq "$rounds"); do
  read -r ping_cpu _ < <(ghz_cpu_per_call "${server_pid[off]}" "${server_addr[off]}" \
    leasehold.bench.v1.EchoService/Echo '{"redis":true}' 50 "$calls")
  declare -A cpu=([before]=0)
  # Each round starts with another server, so no build is always first (or always warmest).
  for i in "${!labels[@]}"; do
    label=${labels[$(((i + round) % ${#labels[@]}))]}
    read -r cpu[$label] _ < <(acquire "$label" "$round")
  done
  echo "$ping_cpu ${cpu[before]} ${cpu[off]} ${cpu[on]}" >>"$work/rounds"
  python3 -c "
p, b, f, o = $ping_cpu, ${cpu[before]}, ${cpu[off]}, ${cpu[on]}
print(f'| $round | {p:.1f} µs | ' + (f'{b:.1f} µs' if b else '-') + f' | {f:.1f} µs | {o:.1f} µs | {f / p:.2f}x | ' + (f'{f / b:.2f}x' if b else '-') + f' | {o / f:.2f}x | $(cat "$work/spans" 2>/dev/null || echo 0) |')"
done
# The rounds' medians: on a shared machine one round can be off by a third either way.
python3 - "$work/rounds" <<'PY'
import statistics, sys
rows = [list(map(float, line.split())) for line in open(sys.argv[1])]
median = lambda values: statistics.median(values)
off_floor = median([f / p for p, b, f, o in rows])
on_off = median([o / f for p, b, f, o in rows])
off_before = median([f / b for p, b, f, o in rows]) if rows[0][1] else None
print(f"| median | | | | | {off_floor:.2f}x | " + (f"{off_before:.2f}x" if off_before else "-") + f" | {on_off:.2f}x | |")
PY
