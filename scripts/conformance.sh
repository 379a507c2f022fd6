#!/usr/bin/env bash
# Checks that every client has a test for every scenario of clients/conformance/scenarios.txt
# (the tests themselves run in each client's own suite, from scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A sources=(
  [rust]=tests/conformance.rs
  [go]=clients/go/conformance_test.go
  [python]=clients/python/tests/test_conformance.py
  [java]=clients/java/src/test/java/dev/leasehold/ConformanceTest.java
  [node]=clients/node/test/conformance.test.ts
)
declare -A patterns=(
  [rust]='fn conformance_%s('
  [go]='func TestConformance_%s('
  [python]='def test_conformance_%s('
  [java]='void conformance_%s('
  [node]='test("conformance_%s"'
)
missing=0
scenarios=$(grep -v '^#' clients/conformance/scenarios.txt | awk 'NF { print $1 }')
clients=(rust go python java node)
for client in "${clients[@]}"; do
  for scenario in $scenarios; do
    # shellcheck disable=SC2059
    name=$(printf "${patterns[$client]}" "$scenario")
    if ! grep -qF "$name" "${sources[$client]}"; then
      echo "conformance: the $client client has no test for scenario $scenario (${sources[$client]})" >&2
      missing=$((missing + 1))
    fi
  done
done
count=$(echo "$scenarios" | wc -w)
if [ "$missing" -gt 0 ]; then
  echo "conformance: $missing scenario tests missing" >&2
  exit 1
fi
echo "conformance: all ${#clients[@]} clients have all $count scenarios"
