#!/usr/bin/env bash
# Leasehold beside the locks a user could pick instead, in ONE run on ONE Redis (BENCHMARKS.md's
# first table): one client, one lock, acquire + release back to back, through
#   - direct Redis (SET NX PX + the compare-and-delete script), the baseline, from each language
#     measured (Rust fred, Go go-redis, Java Lettuce, Node ioredis), so each peer also stands
#     beside Redis reached through its own language's client;
#   - Leasehold: the Lease stream and unary Acquire/Release (`leasehold bench`, Rust client), the
#     Lease stream from Go, Java and Node, and a no-op gRPC call (`serve --echo`) as the transport
#     floor;
#   - etcd 3.4 (Debian's etcd-server, installed here if missing): concurrency.Mutex over one
#     session and the v3lock API, from etcd's Go client (benches/peers/go);
#   - redsync with one Redis (benches/peers/go);
#   - Redisson's RLock, beside Redisson's own SET NX + script (benches/peers/redisson);
#   - node-redlock (clients/node/bench);
# and, contended, the hand-off (one holder, one waiter; from the holder's release to the waiter
# holding, the release landing 50-450 ms into the wait): Leasehold's pushed wake-up (Go and Node
# clients) against node-redlock's and redsync's retries, Redisson's pub/sub and
# etcd's watch. Prints one table: every figure beside direct Redis from the same language,
# measured in the same program in alternating rounds (a client library's own cost is a large
# part of a lock's, and differs between languages several times over), and beside direct Redis
# from Rust measured minutes apart in the same run.
#
# Usage: scripts/bench-peers.sh [--quick] [--rust]     (--rust: only `cargo bench --bench peers`,
# every service in a process of its own and the client pattern the same for all, with contention
# and hand-off against etcd's lock API; etcd installed first as below. --quick: 1,000 pairs a path and 10 hand-offs,
# about 1.5 minutes once built; else 5,000 and 30, about 2.5 minutes). LEASEHOLD_BIN picks the server binary (default target/release/
# leasehold, built if missing). A peer whose toolchain is missing is reported "not measured".
# The machine is named and its load (`uptime`) printed before and after: on a shared machine
# only ratios within one run mean anything. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
binary=${LEASEHOLD_BIN:-target/release/leasehold}
mode="" ops=5000 handoffs=30 rust_only=false
for arg in "$@"; do
  case $arg in
    --quick) mode=" --quick" ops=1000 handoffs=10 ;;
    --rust) rust_only=true ;;
    *) echo "usage: scripts/bench-peers.sh [--quick] [--rust]" >&2; exit 2 ;;
  esac
done
source scripts/bench-setup.sh
rows=$work/rows.tsv  # language<TAB>path<TAB>ops<TAB>p50_us<TAB>p99_us<TAB>ops_per_s
: >"$rows"
missing=()
say() { echo "bench-peers: $*" >&2; }

# Peers' builds first, so the measured part runs on its own.
if ! command -v etcd >/dev/null 2>&1; then
  say "etcd is missing: installing Debian's etcd-server with apt-get"
  { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq etcd-server >/dev/null; } || true
fi
command -v etcd >/dev/null 2>&1 || missing+=("etcd: no etcd binary (apt-get install etcd-server failed)")
if $rust_only; then
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); Redis $(redis-server --version | grep -o 'v=[0-9.]*' | cut -d= -f2)$(command -v etcd >/dev/null && echo ", etcd $(etcd --version | head -1 | awk '{print $3}')")."
  echo "Load before: $(uptime | sed 's/.*load average: //')"
  cargo bench --bench peers -- $mode
  echo "Load after: $(uptime | sed 's/.*load average: //')"
  exit 0
fi
go_bin=""
if command -v go >/dev/null 2>&1; then
  say "building benches/peers/go (redsync, etcd client)"
  (cd benches/peers/go && go build -o "$work/peers-go" .) && go_bin=$work/peers-go \
    || missing+=("redsync, etcd: go build failed")
else
  missing+=("redsync, etcd: no Go toolchain")
fi
java_cp=""
if command -v mvn >/dev/null 2>&1 && command -v java >/dev/null 2>&1; then
  say "building clients/java (installed in the local Maven repository) and benches/peers/redisson"
  if (cd clients/java && mvn -q -B install -DskipTests >"$work/mvn.log" 2>&1) &&
    (cd benches/peers/redisson && mvn -q -B package -DskipTests >"$work/mvn.log" 2>&1 &&
    mvn -q -B dependency:build-classpath -Dmdep.outputFile="$work/classpath.txt" >>"$work/mvn.log" 2>&1); then
    java_cp="$root/benches/peers/redisson/target/classes:$(cat "$work/classpath.txt")"
  else
    missing+=("Redisson: mvn install (clients/java) or package failed (see below)"); tail -n 20 "$work/mvn.log" >&2
  fi
else
  missing+=("Redisson: no Java 17 + Maven")
fi
node_ok=false
if command -v npm >/dev/null 2>&1; then
  say "building clients/node (its bench measures node-redlock)"
  if (cd clients/node && { [ -d node_modules ] || npm ci --no-audit --no-fund >/dev/null; } &&
    npm run build >/dev/null); then
    node_ok=true
  else
    missing+=("node-redlock: npm ci / npm run build failed in clients/node")
  fi
else
  missing+=("node-redlock: no Node/npm")
fi

# One Redis and one server for every path.
redis_port=$(free_port)
redis "$redis_port"
grpc_port=$(free_port)
"$binary" serve --listen "127.0.0.1:$grpc_port" --redis "redis://127.0.0.1:$redis_port" --echo \
  >"$work/server.log" 2>&1 &
server=$!
pids+=("$server")
until "$binary" status --server "http://127.0.0.1:$grpc_port" >/dev/null 2>&1; do sleep 0.1; done
etcd_url=""
if command -v etcd >/dev/null 2>&1; then
  # Its data on tmpfs where there is one: our Redis keeps nothing on disk either, so neither
  # pays for fsync.
  etcd_dir=$( [ -d /dev/shm ] && mktemp -d /dev/shm/bench-etcd.XXXXXX || mktemp -d )
  etcd_port=$(free_port) etcd_peer=$(free_port)
  etcd_url=http://127.0.0.1:$etcd_port
  etcd --data-dir "$etcd_dir" --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "default=http://127.0.0.1:$etcd_peer" >"$work/etcd.log" 2>&1 &
  pids+=($!)
  trap 'cleanup; rm -rf "$etcd_dir"' EXIT
  for _ in $(seq 1 200); do
    curl -fs "$etcd_url/health" 2>/dev/null | grep -q '"health":"true"' && break
    sleep 0.1
  done
fi

load_before=$(uptime)
say "measuring: Rust (direct fred, Leasehold stream/unary, no-op gRPC)"
"$binary" bench --server "http://127.0.0.1:$grpc_port" --redis "redis://127.0.0.1:$redis_port" \
  --only uncontended --json "$work/rust.json" >"$work/rust.txt"
python3 - "$work/rust.json" >>"$rows" <<'EOF'
import json, sys
for p in json.load(open(sys.argv[1]))["uncontended"]["paths"]:
    print("\t".join(["Rust", p["path"], str(p["operations"]), str(p["p50_us"]), str(p["p99_us"]),
                     f'{p["per_second"]:.0f}']))
EOF
if [ -n "$go_bin" ]; then
  say "measuring: Go (direct go-redis, Leasehold, redsync${etcd_url:+, etcd})"
  "$go_bin" -redis "127.0.0.1:$redis_port" -leasehold "127.0.0.1:$grpc_port" ${etcd_url:+-etcd "$etcd_url"} \
    -ops "$ops" -handoffs "$handoffs" | sed -n 's/^ROW\t/Go\t/p' >>"$rows" \
    || missing+=("Go's rows (redsync, etcd, Leasehold from Go): the program failed, see above")
fi
if [ -n "$java_cp" ]; then
  say "measuring: Java (direct Lettuce, Redisson, Leasehold)"
  java -cp "$java_cp" Peers 127.0.0.1 "$redis_port" "$ops" "$handoffs" "127.0.0.1:$grpc_port" \
    | sed -n 's/^ROW\t/Java\t/p' >>"$rows" \
    || missing+=("Java's rows (Redisson, Leasehold from Java): the program failed, see above")
fi
if $node_ok; then
  say "measuring: Node (direct ioredis, Leasehold stream, node-redlock, hand-off)"
  (cd clients/node && LEASEHOLD_SERVER="127.0.0.1:$grpc_port" LEASEHOLD_REDIS_PORT=$redis_port \
    node dist/bench/bench.js "$ops" "$handoffs") | sed -n 's/^ROW\t/Node\t/p' >>"$rows" \
    || missing+=("Node's rows (node-redlock, Leasehold from Node): the bench failed, see above")
fi
load_after=$(uptime)

echo "## Leasehold beside its peers ($(date -u +%Y-%m-%d), scripts/bench-peers.sh$mode)"
echo
echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); Redis $(redis-server --version | grep -o 'v=[0-9.]*' | cut -d= -f2)${etcd_url:+, etcd $(etcd --version | head -1 | awk '{print $3}')}."
echo "Load before: ${load_before#*load average: }; after: ${load_after#*load average: } (1, 5, 15 min)."
echo
python3 - "$rows" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
rows = [dict(lang=r[0], path=r[1], ops=int(r[2]), p50=float(r[3]), p99=float(r[4]),
             ops_s=None if r[5] == "-" else float(r[5])) for r in rows]
pairs = [r for r in rows if not r["path"].startswith("hand-off")]
handoff = [r for r in rows if r["path"].startswith("hand-off")]
base = next(r for r in pairs if r["lang"] == "Rust")  # direct Redis through fred
def own(r):
    """The same language's direct Redis: the first row it printed, except that Redisson's lock
    stands beside Redisson's own SET NX + script (the same client's overhead)."""
    same = [x for x in pairs if x["lang"] == r["lang"]]
    if r["path"].startswith("Redisson RLock"):
        return next(x for x in same if x["path"].startswith("Redisson bucket"))
    return same[0]
print("| client | path | p50 | p99 | ops/s | p50 vs direct | p99 vs direct | ops/s vs direct | direct Redis it is set beside | p50 vs direct Redis from Rust (fred) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in pairs:
    o = own(r)
    print("| %s | %s | %.3f ms | %.3f ms | %.0f | %.2fx | %.2fx | %.2fx | %s | %.2fx |" % (
        r["lang"], r["path"], r["p50"] / 1e3, r["p99"] / 1e3, r["ops_s"],
        r["p50"] / o["p50"], r["p99"] / o["p99"], r["ops_s"] / o["ops_s"],
        "(itself)" if o is r else o["path"], r["p50"] / base["p50"]))
if handoff:
    print("\nContended: hand-off, one holder and one waiter (from the holder's release to the waiter holding;")
    print("the release lands 50-450 ms into the wait)\n")
    print("| client | path | p50 | p99 | samples |\n| --- | --- | --- | --- | --- |")
    for r in handoff:
        print("| %s | %s | %.3f ms | %.3f ms | %d |" % (
            r["lang"], r["path"][len("hand-off: "):], r["p50"] / 1e3, r["p99"] / 1e3, r["ops"]))
EOF
echo
echo "Leasehold in the same run (\`leasehold bench --only uncontended\`): what Redis spends, and the"
echo "Lease stream against the round trips it cannot avoid (direct Redis + a no-op gRPC stream)."
echo
sed -n '/^| path | Redis CPU/,$p' "$work/rust.txt"
if [ ${#missing[@]} -gt 0 ]; then
  echo
  for m in "${missing[@]}"; do echo "Not measured: $m"; done
fi
