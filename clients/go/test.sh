#!/usr/bin/env bash
# Tests the Go client against the leasehold binary: the committed stubs in leaseholdpb/ are what
# generate.sh makes from proto/ (else it fails: regenerate and commit), current grpc-go and
# protobuf from the Go module proxy (go.mod, go.sum), gofmt and go vet clean.
# Usage: clients/go/test.sh [path to the leasehold binary]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
binary=${1:-$here/../../target/debug/leasehold}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$here/generate.sh" "$scratch/leaseholdpb"
# The protoc version in each file's header may differ from one machine to another: not stale.
if ! diff -r -u -I '^// *[-[:space:]] *protoc  *v' "$here/leaseholdpb" "$scratch/leaseholdpb" >"$scratch/diff" 2>&1; then
  cat "$scratch/diff" >&2
  echo "stubs are stale: run clients/go/generate.sh and commit" >&2
  exit 1
fi
cd "$here"
unformatted=$(gofmt -l .)
test -z "$unformatted" || { echo "gofmt: $unformatted" >&2; exit 1; }
go vet ./...
LEASEHOLD_BIN="$binary" go test -count=1 ./...
