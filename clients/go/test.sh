#!/usr/bin/env bash
# Tests the Go client against the leasehold binary: stubs generated from proto/ (generate.sh),
# current grpc-go and protobuf from the Go module proxy (go.mod, go.sum), gofmt and go vet clean.
# Usage: clients/go/test.sh [path to the leasehold binary]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
binary=${1:-$here/../../target/debug/leasehold}
"$here/generate.sh"
cd "$here"
unformatted=$(gofmt -l .)
test -z "$unformatted" || { echo "gofmt: $unformatted" >&2; exit 1; }
go vet ./...
LEASEHOLD_BIN="$binary" go test -count=1 ./...
