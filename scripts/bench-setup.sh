# Shared by the bench scripts (sourced after `cd` to the repository, with $binary set): Redis
# installed, the release binary built if missing, a work directory and every process started
# here stopped on exit, and helpers to start Redis on free ports.
source scripts/redis.sh
ensure_redis_server_installed
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
# User + system CPU seconds of process PID so far (100 ticks per second on Linux).
cpu_seconds() { awk '{ printf "%.4f\n", ($14 + $15) / 100 }' "/proc/$1/stat"; }
# ghz at target/go/bin/ghz (LEASEHOLD_GHZ to use another), installed from the Go module proxy.
ensure_ghz() {
  ghz=${LEASEHOLD_GHZ:-target/go/bin/ghz}
  if [ ! -x "$ghz" ]; then
    GOBIN="$PWD/target/go/bin" go install github.com/bojand/ghz/cmd/ghz@v0.93.0
    ghz=target/go/bin/ghz
  fi
}
# One ghz run of CALLS calls against the server PID at ADDR; prints "<its CPU µs per call>
# <calls per second>", and fails unless every call succeeded.
ghz_cpu_per_call() { # pid, addr, method, data, concurrency, calls
  local before after
  before=$(cpu_seconds "$1")
  "$ghz" --insecure --call "$3" -d "$4" -n "$6" -c "$5" --connections 10 \
    --format json -o "$work/report.json" "$2"
  after=$(cpu_seconds "$1")
  python3 - "$before" "$after" "$work/report.json" <<'PY'
import json, sys
before, after, report = float(sys.argv[1]), float(sys.argv[2]), json.load(open(sys.argv[3]))
ok = report["statusCodeDistribution"].get("OK", 0)
assert ok == report["count"], f"not every call succeeded: {report['statusCodeDistribution']}"
print(f"{(after - before) * 1e6 / ok:.1f} {report['rps']:.0f}")
PY
}
