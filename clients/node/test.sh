#!/usr/bin/env bash
# Tests the Node client against the leasehold binary: dependencies as package-lock.json pins them
# (npm ci), stubs generated from proto/ now (npm run build: buf + protoc-gen-es, then tsc), a
# strict type check (tsc --noEmit), then node --test: the conformance scenarios, the client's
# own tests and the README's example, each starting its own redis-server and servers.
# Usage: clients/node/test.sh [path to the leasehold binary]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
binary=${1:-$here/../../target/debug/leasehold}
binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")
cd "$here"
npm ci --no-audit --no-fund --loglevel=error
npm run --silent build
npx tsc -p tsconfig.json --noEmit
LEASEHOLD_BIN="$binary" node --test --test-concurrency=3 dist/test/*.test.js
