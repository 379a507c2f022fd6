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
