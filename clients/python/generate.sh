#!/usr/bin/env bash
# Generates the gRPC stubs from the repository's proto/ into leasehold_client/_gen (not committed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
proto=$(cd "$here/../../proto" && pwd)
out="$here/leasehold_client/_gen"
rm -rf "$out" && mkdir -p "$out"
python -m grpc_tools.protoc -I "$proto" --python_out="$out" --grpc_python_out="$out" \
  "$proto/leasehold/v1/lock.proto" "$proto/leasehold/v1/election.proto"
