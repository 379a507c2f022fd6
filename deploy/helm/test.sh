#!/usr/bin/env bash
# The Helm chart (deploy/helm/leasehold): helm lint and helm template for every Redis mode, TLS
# and auth, and the ServiceMonitor; the rendered objects checked; then each rendered Deployment's
# container args and env given to the real binary against real redis-server processes (single,
# Redlock, Sentinel, Cluster, TLS), which must pass its probes, take a lock, answer on its metrics
# port and stop on SIGTERM within the pod's grace. Everything it starts is stopped on exit.
#
# Usage: deploy/helm/test.sh [BINARY]   (default: target/debug/leasehold)
# helm comes from the Go module proxy into target/go/bin (about 2 minutes the first time).
set -euo pipefail
cd "$(dirname "$0")/../.."
binary=${1:-target/debug/leasehold}
[ -x "$binary" ] || { echo "no binary at $binary (cargo build first)" >&2; exit 1; }

helm=target/go/bin/helm
if [ ! -x "$helm" ]; then
  mkdir -p target/go/bin
  echo "installing helm v4.3.2 from the Go module proxy into target/go/bin" >&2
  if ! GOBIN="$PWD/target/go/bin" go install helm.sh/helm/v4/cmd/helm@v4.3.2 >target/go/helm-install.log 2>&1; then
    cat target/go/helm-install.log >&2
    exit 1
  fi
fi
# Helm's own files (cache, config) under target/, not the user's home.
export HELM_CACHE_HOME="$PWD/target/helm/cache" HELM_CONFIG_HOME="$PWD/target/helm/config" \
  HELM_DATA_HOME="$PWD/target/helm/data"

for tool in redis-server redis-cli openssl; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (scripts/redis.sh installs it)" >&2; exit 1; }
done

# PyYAML to read helm's output: the system python3's, else a venv of our own.
python=python3
if ! python3 -c 'import yaml' 2>/dev/null; then
  venv=target/helm-venv
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check pyyaml==6.0.3
  python="$venv/bin/python"
fi

exec "$python" deploy/helm/test_chart.py "$helm" "$binary"
