#!/usr/bin/env bash
# Tests the Go client against the leasehold binary, offline, with Debian's Go packages: builds
# protoc-gen-go from Debian's sources, generates the stubs from proto/ (never committed) and runs
# `go test` in GOPATH mode. Usage: clients/go/test.sh [path to the leasehold binary]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
binary=${1:-$root/target/debug/leasehold}
packages=(golang-go golang-google-grpc-dev golang-google-protobuf-dev protoc-gen-go-grpc protobuf-compiler)
if ! dpkg -s "${packages[@]}" >/dev/null 2>&1; then
  echo "installing ${packages[*]} with apt-get" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
fi
gopath=$root/target/go
mkdir -p "$gopath/bin" "$gopath/src"
ln -sfn "$root/clients/go" "$gopath/src/leasehold"
GO111MODULE=off GOPATH=/usr/share/gocode \
  go build -o "$gopath/bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
mapping=Mleasehold/v1/lock.proto=leasehold/leaseholdpb
protoc -I "$root/proto" \
  --plugin=protoc-gen-go="$gopath/bin/protoc-gen-go" \
  --go_out="$gopath/src" --go_opt="$mapping" \
  --go-grpc_out="$gopath/src" --go-grpc_opt="$mapping" \
  "$root/proto/leasehold/v1/lock.proto"
cd "$gopath/src/leasehold"
test -z "$(gofmt -l *.go)" || { echo "gofmt: $(gofmt -l *.go)" >&2; exit 1; }
GO111MODULE=off GOPATH="$gopath:/usr/share/gocode" LEASEHOLD_BIN="$binary" go vet leasehold
GO111MODULE=off GOPATH="$gopath:/usr/share/gocode" LEASEHOLD_BIN="$binary" go test -count=1 leasehold
