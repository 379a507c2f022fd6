#!/usr/bin/env bash
# Generates the Go stubs from proto/ into leaseholdpb/, where they are committed (as grpc-go and
# etcd commit theirs) so that the module builds from a clone or `go get` without protoc:
# protoc from Debian's protobuf-compiler, protoc-gen-go and protoc-gen-go-grpc from the Go module
# proxy at the versions pinned here. Run it after changing proto/ and commit leaseholdpb/;
# test.sh fails while the committed stubs differ from what this generates.
# Usage: clients/go/generate.sh [output directory, default clients/go/leaseholdpb]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$here/leaseholdpb}
module=github.com/leasehold/leasehold/clients/go
if ! command -v protoc >/dev/null 2>&1; then
  echo "protoc is missing: installing Debian's protobuf-compiler with apt-get" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
fi
bin=$root/target/go/bin
mkdir -p "$bin"
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
mapping=""
for proto in lock election session; do
  mapping="$mapping,Mleasehold/v1/$proto.proto=$module/leaseholdpb"
done
mapping=${mapping#,}
# protoc writes under the module's root (module=...): into a scratch root, then to $out.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
PATH="$bin:$PATH" protoc -I "$root/proto" \
  --go_out="$scratch" --go_opt="module=$module,$mapping" \
  --go-grpc_out="$scratch" --go-grpc_opt="module=$module,$mapping" \
  "$root/proto/leasehold/v1/lock.proto" "$root/proto/leasehold/v1/election.proto" \
  "$root/proto/leasehold/v1/session.proto"
mkdir -p "$out"
cp "$scratch"/leaseholdpb/*.pb.go "$out"/
