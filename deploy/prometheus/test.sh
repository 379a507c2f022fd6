#!/usr/bin/env bash
# The monitoring files, proven:
#  1. promtool check rules + promtool test rules (alerts.yml, alerts.test.yml);
#  2. a real Prometheus (Debian's package) scraping two real servers every second, with the alert
#     rules loaded: under a small load (leasehold run, and deploy/prometheus/load for a campaign,
#     an observer and a session) and a rolling restart of one replica, every query of every panel
#     of deploy/grafana/leasehold.json returns data through the HTTP API; then Redis stops and
#     LeaseholdRedisUnreachable fires for both replicas, Redis returns and it resolves.
# Everything listens on free loopback ports and stops on exit. About a minute.
# Usage: deploy/prometheus/test.sh [path to the leasehold binary, default target/debug/leasehold]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
binary=${1:-$root/target/debug/leasehold}
binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")
dashboard=$root/deploy/grafana/leasehold.json
start=$SECONDS
say() { printf '[%3ds] %s\n' $((SECONDS - start)) "$*"; }
fail() { say "FAILED: $*" >&2; exit 1; }

# Prometheus and promtool: Debian's package, its own service kept from starting.
# shellcheck source=scripts/redis.sh
source "$root/scripts/redis.sh"
ensure_prometheus_installed
command -v redis-server >/dev/null 2>&1 || fail "redis-server is missing"
command -v go >/dev/null 2>&1 || fail "go is missing (for deploy/prometheus/load)"
[ -x "$binary" ] || fail "no leasehold binary at $binary"

# --- 1. the rules, offline --------------------------------------------------------------------
say "promtool check rules, promtool test rules ($(promtool --version 2>&1 | head -n 1))"
(cd "$here" && promtool check rules alerts.yml && promtool test rules alerts.test.yml)

# --- 2. a real Prometheus ---------------------------------------------------------------------
work=$(mktemp -d)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "${keep_logs:-}" ]; then
    for log in "$work"/*.log; do echo "--- $log" >&2; tail -n 20 "$log" >&2; done
  fi
  rm -rf "$work"
}
keep_logs=1
trap cleanup EXIT
trap 'exit 143' INT TERM

# Free ports below the kernel's ephemeral range: they are chosen before the processes start (and
# replica a restarts on its own), and one the kernel hands out to an outgoing connection
# (redis-cli's, curl's) could be taken by then.
read -r redis_port grpc_a metrics_a grpc_b metrics_b prom_port < <(python3 -c '
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
ports = []
while len(ports) < 6:
    port = random.randint(max(1024, low - 20000), low - 1)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    if port not in ports:
        ports.append(port)
print(" ".join(map(str, ports)))')
prom=http://127.0.0.1:$prom_port
servers=http://127.0.0.1:$grpc_a,http://127.0.0.1:$grpc_b

# Waits up to $1 seconds for the command after it to succeed.
within() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

start_redis() {
  redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no --dir "$work" \
    >>"$work/redis.log" 2>&1 &
  redis_pid=$!
  pids+=("$redis_pid")
  within 10 redis-cli -p "$redis_port" ping || fail "Redis did not start"
}

# start_server NAME GRPC_PORT METRICS_PORT: a replica, its pid in server_pid_NAME.
start_server() {
  "$binary" serve --redis "redis://127.0.0.1:$redis_port" --listen "127.0.0.1:$2" \
    --metrics "127.0.0.1:$3" --drain 3s >"$work/server-$1.out" 2>>"$work/server-$1.log" &
  local pid=$!
  pids+=("$pid")
  printf -v "server_pid_$1" %s "$pid"
  within 15 grep -q "^leasehold: listening" "$work/server-$1.out" || fail "server $1 did not start"
  within 5 curl -fsS "http://127.0.0.1:$3/metrics" || fail "server $1 serves no metrics"
}

start_redis
start_server a "$grpc_a" "$metrics_a"
start_server b "$grpc_b" "$metrics_b"
say "Redis on :$redis_port; replicas a (gRPC :$grpc_a, metrics :$metrics_a) and b (:$grpc_b, :$metrics_b)"

cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  - $here/alerts.yml
scrape_configs:
  - job_name: leasehold
    static_configs:
      - targets: ["127.0.0.1:$metrics_a", "127.0.0.1:$metrics_b"]
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)
within 30 curl -fsS "$prom/-/ready" || fail "Prometheus did not become ready"
# Prints the value of the instant query $1 (its first sample; nothing for no data).
value_of() {
  curl -fsS "$prom/api/v1/query" --data-urlencode "query=$1" | python3 -c '
import json, sys
result = json.load(sys.stdin)["data"]["result"]
print(result[0]["value"][1] if result else "")'
}
# Scrapes begin a few seconds after "ready" (service discovery settles first): the load starts
# once both replicas have been scraped, so that Prometheus sees every counter rise.
both_scraped() { test "$(value_of 'count(up{job="leasehold"} == 1)')" = 2; }
within 30 both_scraped || fail "Prometheus did not scrape both replicas"
say "Prometheus $(prometheus --version 2>&1 | head -n 1 | cut -d' ' -f3) on :$prom_port, scraping both every 1 s"

(cd "$here/load" && go build -o "$work/load" .)

# --- the load ---------------------------------------------------------------------------------
# lh COMMAND SERVER ARGS...: a client command in the foreground. Background clients run the
# binary itself, so that the pid kept for the cleanup is theirs.
lh() { "$binary" "$1" --server "$2" "${@:3}"; }
# Expects the exit status $1 of the command after it.
expect_exit() {
  local want=$1 got=0
  shift
  "$@" >>"$work/clients.log" 2>&1 || got=$?
  [ "$got" -eq "$want" ] || fail "exit $got, not $want: $*"
}

# A holder on a (the first of the list), renewing every second.
"$binary" run --server "$servers" --ttl 3s load/held -- sh -c "touch $work/held; exec sleep 600" \
  >>"$work/clients.log" 2>&1 &
holder=$!
pids+=("$holder")
within 10 test -e "$work/held" || fail "load/held was not acquired"
# The campaign, observer and session (on b, which stays up), held for 6 s.
"$work/load" -server "127.0.0.1:$grpc_b" -hold 6s >>"$work/clients.log" 2>&1 &
load_pid=$!
pids+=("$load_pid")
expect_exit 75 lh run "http://127.0.0.1:$grpc_a" load/held -- true              # refused
expect_exit 75 lh run "http://127.0.0.1:$grpc_a" --wait 1s load/held -- true    # timed out
# A hand-off: one holds load/turn for 1.5 s, the next waits for it.
"$binary" run --server "http://127.0.0.1:$grpc_b" load/turn -- sh -c "touch $work/turn; sleep 1.5" \
  >>"$work/clients.log" 2>&1 &
pids+=($!)
within 10 test -e "$work/turn" || fail "load/turn was not acquired"
expect_exit 0 lh run "http://127.0.0.1:$grpc_b" --wait 10s load/turn -- true
# A lease lost: its key deleted behind the server's back.
"$binary" run --server "http://127.0.0.1:$grpc_b" --ttl 3s load/lost -- sh -c "touch $work/lost; exec sleep 600" \
  >>"$work/clients.log" 2>&1 &
lost=$!
pids+=("$lost")
within 10 test -e "$work/lost" || fail "load/lost was not acquired"
redis-cli -p "$redis_port" del "leasehold:{load/lost}:lock" >/dev/null
got=0; wait "$lost" || got=$?
[ "$got" -eq 76 ] || fail "the holder of a deleted lock exited $got, not 76 (lost)"
# A rolling restart of a: the holder's lease is handed over and resumes on b.
kill -TERM "$server_pid_a"
wait "$server_pid_a" || fail "replica a did not stop cleanly"
start_server a "$grpc_a" "$metrics_a"
kill -0 "$holder" 2>/dev/null || fail "the holder of load/held lost it in the restart"
expect_exit 0 lh run "http://127.0.0.1:$grpc_a" load/after-restart -- true
within 20 bash -c "! kill -0 $load_pid 2>/dev/null" || fail "deploy/prometheus/load did not finish"
wait "$load_pid" || fail "deploy/prometheus/load failed (see clients.log)"
say "load done: acquired, refused, timed out, handed off, lost, moved between replicas; campaign, observe, session"

# --- every panel's query returns data ---------------------------------------------------------
# The latest scrapes in, then each query as Grafana sends it, the variables at "All" and a rate
# interval covering the whole run.
sleep 3
python3 - "$prom" "$dashboard" <<'EOF'
import json, math, re, sys, urllib.parse, urllib.request
prom, path = sys.argv[1], sys.argv[2]
dashboard = json.load(open(path))
def panels(items):
    for p in items:
        yield p
        yield from panels(p.get("panels", []))
queries = [(p["title"], t["refId"], t["expr"]) for p in panels(dashboard["panels"]) for t in p.get("targets", [])]
assert queries, "no queries in the dashboard"
failures = []
for title, ref, expr in queries:
    q = (expr.replace("$job", "leasehold").replace("$replica", ".*")
         .replace("$__rate_interval", "5m"))
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    try:
        answer = json.load(urllib.request.urlopen(url, timeout=10))
    except urllib.error.HTTPError as error:
        answer = json.load(error)
    result = answer.get("data", {}).get("result", [])
    values = [float(r["value"][1]) for r in result]
    if answer.get("status") != "success":
        failures.append(f"{title} [{ref}]: {answer.get('error')}: {q}")
    elif not values:
        failures.append(f"{title} [{ref}]: no data: {q}")
    elif all(math.isnan(v) for v in values):
        # A quantile is NaN for a replica that observed nothing in the window; not for all.
        failures.append(f"{title} [{ref}]: only NaN: {q}")
# The replica and job variables: label_values(SELECTOR, LABEL) as Grafana asks it.
variables = [v for v in dashboard["templating"]["list"] if v["type"] == "query"]
for v in variables:
    selector, label = re.fullmatch(r"label_values\((.*), (\w+)\)", v["definition"]).groups()
    selector = selector.replace("$job", "leasehold")
    url = f"{prom}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": selector})
    if not json.load(urllib.request.urlopen(url, timeout=10))["data"]:
        failures.append(f"variable {v['name']}: no values: {v['definition']}")
print(f"{len(queries)} panel queries and {len(variables)} variables asked: "
      f"{len(failures) or 'none'} without data")
for failure in failures:
    print("  " + failure)
sys.exit(1 if failures else 0)
EOF

# --- Redis stops: the alert fires; Redis returns: it resolves ---------------------------------
# Prints the instances for which LeaseholdRedisUnreachable is in state $1.
alert_instances() {
  curl -fsS "$prom/api/v1/alerts" | python3 -c '
import json, sys
alerts = json.load(sys.stdin)["data"]["alerts"]
print(" ".join(sorted(a["labels"]["instance"] for a in alerts
    if a["labels"]["alertname"] == "LeaseholdRedisUnreachable" and a["state"] == sys.argv[1])))' "$1"
}
both=$(printf '127.0.0.1:%s\n' "$metrics_a" "$metrics_b" | LC_ALL=C sort | paste -sd ' ')
for_both() { test "$(alert_instances "$1")" = "$both"; }
inactive() { test -z "$(alert_instances firing)$(alert_instances pending)"; }
inactive || fail "LeaseholdRedisUnreachable active while Redis is up"
kill -TERM "$redis_pid"
wait "$redis_pid" || true
say "Redis stopped: waiting for LeaseholdRedisUnreachable (for: 30s) to fire"
within 15 for_both pending || fail "LeaseholdRedisUnreachable never pending"
say "pending for both replicas"
within 45 for_both firing || fail "LeaseholdRedisUnreachable did not fire"
say "firing for both replicas"
start_redis
within 20 inactive || fail "LeaseholdRedisUnreachable did not resolve once Redis returned"
say "Redis back: resolved"

keep_logs=""
say "deploy/prometheus/test.sh passed"
