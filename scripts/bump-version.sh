#!/usr/bin/env bash
# One version for every Leasehold package: the server, the Rust, Python, Node, Java and Go clients.
#
#   scripts/bump-version.sh NEW_VERSION   rewrite every place the version lives (Cargo.lock too, so
#                                         builds with --locked still pass), then freeze the contract
#                                         as proto/images/leasehold-vNEW_VERSION.binpb (buf build)
#   scripts/bump-version.sh --check       print each place's version; fail unless they all agree
#                                         and the contract's image of that version is committed
#                                         (.ci/run runs it: files read only, well under a second)
#
# A bump refuses to run until CHANGELOG.md has a "## [NEW_VERSION]" section: the changelog is
# written by people, not by this script. The new image is what `buf breaking` in .ci/run checks
# the contract against from then on. Tags (vX.Y.Z, clients/go/vX.Y.Z) are made by hand on main after
# the bump lands; nothing here, nor in CI, reads a tag.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# Every place a version lives: FILE PLACE, PLACE naming the lines of FILE that hold it (see
# version_lines). An optional place may be absent (the root's dependency on the Rust client names
# no version while it is a path dependency only).
places=(
  "Cargo.toml package"
  "Cargo.toml client-dependency optional"
  "clients/rust/Cargo.toml package"
  "Cargo.lock lock"
  "clients/python/pyproject.toml project"
  "clients/node/package.json json"
  "clients/node/package-lock.json json-lock"
  "clients/java/pom.xml pom"
  "clients/go/version.go go"
)

# With NEW empty, prints the version on each of FILE's lines that PLACE names, one a line; with
# NEW set, prints FILE with those versions replaced by NEW.
version_lines() {
  local file=$1 place=$2 new=${3:-}
  awk -v place="$place" -v new="$new" '
    /^\[/ { section = $0 }
    /^    "": \{/ { root_package = 1 }
    /^    \}/ { root_package = 0 }
    {
      pick = 0
      if (place == "package") pick = section == "[package]" && /^version = "/
      else if (place == "project") pick = section == "[project]" && /^version = "/
      else if (place == "client-dependency") pick = /^leasehold-client = \{.*version = "/
      else if (place == "lock") pick = previous ~ /^name = "leasehold(-client)?"$/ && /^version = "/
      else if (place == "json") pick = /^  "version": "/
      else if (place == "json-lock")
        pick = /^  "version": "/ || (root_package && /^      "version": "/)
      else if (place == "pom") pick = /^  <version>/
      else if (place == "go") pick = /^const Version = "/
      previous = $0
      if (pick && match($0, /(version = "|"version": "|<version>|Version = ")[^"<]*/)) {
        start = RSTART; length_ = RLENGTH
        value = substr($0, start, length_); sub(/.*["> ]/, "", value)
        if (new == "") { print value; next }
        $0 = substr($0, 1, start + length_ - length(value) - 1) new substr($0, start + length_)
      }
      if (new != "") print
    }' "$file"
}

check() {
  local expected="" failed=0 entry file place optional versions version
  for entry in "${places[@]}"; do
    read -r file place optional <<<"$entry"
    versions=$(version_lines "$file" "$place")
    if [ -z "$versions" ]; then
      [ -n "$optional" ] && continue
      printf '%-36s NO VERSION FOUND (%s)\n' "$file" "$place"
      failed=1
      continue
    fi
    for version in $versions; do
      expected=${expected:-$version}
      if [ "$version" = "$expected" ]; then
        printf '%-36s %s\n' "$file" "$version"
      else
        printf '%-36s %s  MISMATCH (expected %s)\n' "$file" "$version" "$expected"
        failed=1
      fi
    done
  done
  local image="proto/images/leasehold-v$expected.binpb"
  if [ -f "$image" ]; then
    printf '%-36s present\n' "$image"
  else
    printf '%-36s MISSING (the contract frozen at %s)\n' "$image" "$expected"
    failed=1
  fi
  if [ "$failed" -ne 0 ]; then
    echo "versions disagree: scripts/bump-version.sh NEW_VERSION sets them all" >&2
    return 1
  fi
}

bump() {
  local new=$1 entry file place optional
  if ! [[ "$new" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
    echo "not a version (X.Y.Z or X.Y.Z-pre): $new" >&2
    exit 2
  fi
  if ! grep -qF "## [$new]" CHANGELOG.md; then
    echo "CHANGELOG.md has no \"## [$new]\" section: write it first, under Unreleased" >&2
    exit 1
  fi
  for entry in "${places[@]}"; do
    read -r file place optional <<<"$entry"
    version_lines "$file" "$place" "$new" >"$file.bump"
    cat "$file.bump" >"$file" # keeps the file's mode
    rm "$file.bump"
  done
  source scripts/redis.sh
  ensure_buf_installed
  target/buf/node_modules/.bin/buf build --path proto/leasehold/v1 \
    -o "proto/images/leasehold-v$new.binpb"
  check
  echo "commit these; once merged, tag main v$new and clients/go/v$new" >&2
}

case "${1:-}" in
  --check) check ;;
  "" | -h | --help) usage ;;
  -*) usage ;;
  *) bump "$1" ;;
esac
