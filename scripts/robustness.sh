#!/usr/bin/env bash
# The long fault run, for before a release (CI runs every fault once, in scripts/test.sh): every
# chaos case (single Redis and Redlock, histories checked by Porcupine) ROUNDS times, plus the
# tests too slow or too load-sensitive for CI (`#[ignore]`d, each saying why). A failed round keeps
# its histories and visualisations in target/robustness-runs/round-N/.
#
#   ROUNDS=10 scripts/robustness.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh
ensure_redis_server_installed
rounds=${ROUNDS:-5}
cargo test --test integration --no-run
failed=0
for round in $(seq 1 "$rounds"); do
  echo "== round $round of $rounds"
  rm -rf target/tmp/robustness
  if cargo test --test integration -- chaos:: redlock::chaos_ && \
     cargo test --test integration -- --ignored; then
    echo "== round $round: passed"
  else
    echo "== round $round: FAILED; histories kept in target/robustness-runs/round-$round"
    mkdir -p target/robustness-runs
    rm -rf "target/robustness-runs/round-$round"
    cp -r target/tmp/robustness "target/robustness-runs/round-$round" 2>/dev/null || true
    failed=$((failed + 1))
  fi
done
echo "== $failed of $rounds rounds failed"
[ "$failed" -eq 0 ]
