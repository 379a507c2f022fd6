#!/usr/bin/env bash
# Runs every test. The tests start their own redis-server processes on free loopback ports;
# this script only makes sure the redis-server binary is installed (Debian: apt-get).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh
ensure_redis_server_installed
exec cargo test "$@"
