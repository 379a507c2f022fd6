#!/usr/bin/env bash
# Fuzzes what a client can send the server, with cargo fuzz (libFuzzer) and the targets in
# fuzz/: request messages through the validation layer (request_spec), names through the key
# layout (name_keys), gRPC request bodies through the codec (codec). Each target runs for
# FUZZ_SECONDS seconds (default 60); the script fails if any target finds a crash.
#
# For before a release, run by hand; not for CI: it needs a nightly toolchain and builds the
# server and its whole dependency tree with AddressSanitizer and coverage instrumentation
# (minutes on a 2-core machine), then spends FUZZ_SECONDS of CPU per target.
#
#   scripts/fuzz.sh                       every target
#   scripts/fuzz.sh codec name_keys       only these
#   FUZZ_SECONDS=600 scripts/fuzz.sh      longer
#
# It installs cargo-fuzz (pinned) into fuzz/target/tools if it is not there, and builds into
# fuzz/target (never ./target), at the lowest CPU priority. Inputs that found new coverage are
# kept in fuzz/corpus/<target> (untracked) and reused by the next run; the hand-written seeds in
# fuzz/seeds/<target> are read, never written. A crash leaves its input in
# fuzz/artifacts/<target>/; replay it with the command the run prints
# (`cargo +nightly fuzz run <target> fuzz/artifacts/<target>/crash-…`, with
# fuzz/target/tools/bin on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
seconds=${FUZZ_SECONDS:-60}
toolchain=${FUZZ_TOOLCHAIN:-nightly}
tools=$PWD/fuzz/target/tools
logs=fuzz/target/logs

if ! cargo "+$toolchain" --version >/dev/null 2>&1; then
  echo "fuzz.sh: no $toolchain toolchain (cargo fuzz needs nightly's -Z flags): rustup toolchain install $toolchain" >&2
  exit 1
fi

if ! "$tools/bin/cargo-fuzz" --version 2>/dev/null | grep -qx "cargo-fuzz $CARGO_FUZZ_VERSION"; then
  echo "=== installing cargo-fuzz $CARGO_FUZZ_VERSION into $tools"
  # Its own temporary build directory, not the fuzz targets'.
  env -u CARGO_TARGET_DIR nice -n 19 cargo install cargo-fuzz --locked \
    --version "$CARGO_FUZZ_VERSION" --root "$tools"
fi
export PATH="$tools/bin:$PATH"
export CARGO_TARGET_DIR=$PWD/fuzz/target

all=()
for source in fuzz/fuzz_targets/*.rs; do
  all+=("$(basename "$source" .rs)")
done
if [ $# -gt 0 ]; then
  targets=("$@")
  for target in "${targets[@]}"; do
    if [ ! -f "fuzz/fuzz_targets/$target.rs" ]; then
      echo "fuzz.sh: no target $target; the targets: ${all[*]}" >&2
      exit 2
    fi
  done
else
  targets=("${all[@]}")
fi

# Release builds with AddressSanitizer (cargo fuzz's default) and debug assertions, so an
# arithmetic overflow is a crash too.
fuzz_flags=(--fuzz-dir fuzz --debug-assertions)

# Build first, timed apart from the fuzzing (the runs below then find it built).
echo "=== building ${targets[*]} (nightly, AddressSanitizer)"
start=$SECONDS
if [ $# -eq 0 ]; then
  nice -n 19 cargo "+$toolchain" fuzz build "${fuzz_flags[@]}"
else
  for target in "${targets[@]}"; do
    nice -n 19 cargo "+$toolchain" fuzz build "${fuzz_flags[@]}" "$target"
  done
fi
echo "=== built in $((SECONDS - start)) s"

mkdir -p "$logs"
failed=()
summary=()
for target in "${targets[@]}"; do
  echo "=== fuzzing $target for $seconds s"
  mkdir -p "fuzz/corpus/$target" "fuzz/seeds/$target"
  # The first corpus directory is where libFuzzer writes; the seeds are only read.
  if nice -n 19 cargo "+$toolchain" fuzz run "${fuzz_flags[@]}" "$target" \
    "fuzz/corpus/$target" "fuzz/seeds/$target" \
    -- -max_total_time="$seconds" -print_final_stats=1 2>&1 | tee "$logs/$target.log"; then
    outcome=ok
  else
    outcome=FAILED
    failed+=("$target")
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$target.log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$logs/$target.log" | tail -n 1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$logs/$target.log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$logs/$target.log" | tail -n 1 || true)
  summary+=("$(printf '%-14s %-6s %12s execs %8s execs/s  %s  peak RSS %s MB' \
    "$target" "$outcome" "${runs:-?}" "${rate:-?}" "${cov:-cov: ?}" "${rss:-?}")")
done

echo
echo "=== summary ($seconds s per target; logs in $logs/)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: crashes in ${failed[*]}: see fuzz/artifacts/<target>/ and $logs/<target>.log" >&2
  exit 1
fi
