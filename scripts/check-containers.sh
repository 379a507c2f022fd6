#!/usr/bin/env bash
# Checks the Dockerfile and compose.yaml where no Docker engine runs (CI, these machines):
#  1. the Dockerfile's build stage, run as a script: its COPY lines fill a fresh context (so a
#     file the build needs but the Dockerfile forgets fails here), then its RUN lines run in it;
#  2. the final stage, as far as it can be read without its base image: every library the binary
#     loads (`ldd`) is one the base ships, the USER is a numeric non-root uid, HEALTHCHECK,
#     ENTRYPOINT and CMD are exec form (no shell in the image) and run a file the stage copies
#     in; then its HEALTHCHECK command, run as written against the binary just built, says
#     healthy with Redis up and unhealthy with Redis down;
#  3. compose.yaml: Redis and at least two replicas, every LEASEHOLD_* variable one that
#     `leasehold serve` reads, and the replicas started with their environment share one Redis
#     (a lock taken through one is refused through the other).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh
ensure_redis_server_installed
ensure_python_venv

work=target/container-check
rm -rf "$work/context" && mkdir -p "$work/context"

# 1. The build stage, as a script.
python3 - "$work/stage.sh" <<'PY'
import shlex, sys
lines, stage = open("Dockerfile").read().replace("\\\n", " ").splitlines(), []
for line in lines:
    words = line.split()
    if not words or words[0].startswith("#"):
        continue
    if words[0] == "FROM" and stage:
        break  # the build stage ends at the next FROM
    if words[0] == "COPY" and not any(w.startswith("--from") for w in words):
        *sources, dest = words[1:]
        # Docker's rules: a folder's contents go into dest; files go into dest if it is a
        # folder (ends in / or several sources), else become dest.
        for source in sources:
            src, dst = f"$ROOT/{source}", shlex.quote(dest)
            stage.append(f'if [ -d "{src}" ]; then mkdir -p {dst} && cp -r "{src}/." {dst}; '
                         f'else mkdir -p "$(dirname {dst}/x)" && cp "{src}" {dst}; fi')
    elif words[0] == "RUN":
        stage.append(line.split(None, 1)[1])
    elif words[0] == "FROM":
        stage.append("# " + line)
open(sys.argv[1], "w").write("set -euxo pipefail\n" + "\n".join(stage) + "\n")
PY
echo "--- the Dockerfile's build stage as a script:"; cat "$work/stage.sh"
# Its commands run as written, but unoptimised: this checks that the image builds and its
# binary serves, not how fast it runs, and optimising takes CI's 2 cores minutes more.
(cd "$work/context" && ROOT="$OLDPWD" CARGO_TARGET_DIR="$OLDPWD/$work/target" \
  CARGO_PROFILE_RELEASE_OPT_LEVEL=0 bash "$OLDPWD/$work/stage.sh")
binary="$work/target/release/leasehold"
[ -x "$binary" ]

# 2. The final stage: what its base must hold, its user, its commands' form and paths (each
# failure one sentence); then the HEALTHCHECK as written.
ldd "$binary" >"$work/ldd.txt"
python3 - "$work/ldd.txt" <<'PY'
import json, os, re, sys
# What this check counts on each runtime base to ship, of what a Rust binary links: glibc's
# parts (the loader, libc, libm, the libdl/libpthread/librt stubs) and libgcc_s; the kernel's
# vDSO is in every process. A library beyond these (libssl from a crate's default features, say)
# builds fine and may be missing from the image, which would die at its first start: look first.
GLIBC = {"linux-vdso.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libc.so.6",
         "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"}
BASES = {"gcr.io/distroless/cc-debian12": GLIBC | {"libgcc_s.so.1"}}
def fail(sentence):
    sys.exit(f"Dockerfile: {sentence}")
text = open("Dockerfile").read().replace("\\\n", " ")
stage = re.split(r"^FROM +", text, flags=re.M)[-1]
base = stage.split()[0]
shipped = BASES.get(re.split(r"[:@]", base)[0])
if shipped is None:
    fail(f"the runtime base {base} is not one whose libraries this check knows (add it to BASES)")
needed = {os.path.basename(line.split()[0]) for line in open(sys.argv[1]) if line.strip()}
if needed - shipped:
    fail(f"the binary now needs {', '.join(sorted(needed - shipped))}, beyond what this check "
         f"counts on {base} to ship: drop the dependency (a crate's feature), or check that "
         "the base ships it and add it to BASES")
users = re.findall(r"^USER +(\S+)", stage, re.M)
if not users or not re.fullmatch(r"[1-9][0-9]*(:[0-9]+)?", users[-1]):
    fail(f"the final stage must run as USER uid:gid, numeric and not root (Kubernetes' "
         f"runAsNonRoot can check only a number), not {users[-1] if users else 'root'}")
copied = set(re.findall(r"^COPY .* (/\S+)$", stage, re.M))
for word, pattern in [("HEALTHCHECK", r"^HEALTHCHECK .*?CMD +(.*)$"),
                      ("ENTRYPOINT", r"^ENTRYPOINT +(.*)$"), ("CMD", r"^CMD +(.*)$")]:
    found = re.search(pattern, stage, re.M)
    try:
        argv = json.loads(found.group(1)) if found else None
    except ValueError:
        argv = None
    if not isinstance(argv, list) or not argv:
        fail(f"{word} must be in exec form, a JSON list: the image has no shell to run a string")
    if word != "CMD" and argv[0] not in copied:
        fail(f"{word} runs {argv[0]}, which is not an absolute path the final stage copies in")
print(f"final stage: {base} ships all the binary loads ({', '.join(sorted(needed))});",
      f"USER {users[-1]}; HEALTHCHECK, ENTRYPOINT and CMD in exec form, running {' '.join(copied)}")
PY
healthcheck=$(python3 -c '
import json, re
text = open("Dockerfile").read().replace("\\\n", " ")
cmd = re.search(r"^HEALTHCHECK .*?CMD (\[.*\])", text, re.M).group(1)
print(" ".join(json.loads(cmd)[1:]))')
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --pidfile "$PWD/$work/redis.pid" --logfile "$PWD/$work/redis.log" --dir "$PWD/$work"
cleanup() {
  [ -n "${servers:-}" ] && kill $servers 2>/dev/null || true
  [ -f "$work/redis.pid" ] && kill "$(cat "$work/redis.pid")" 2>/dev/null || true
}
trap cleanup EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done

start_replica() { # env file -> "pid addr"
  # A previous run's output would answer the wait below before the new process truncates it.
  rm -f "$1.out" "$1.err"
  env -i PATH="$PATH" $(cat "$1") LEASEHOLD_REDIS="redis://127.0.0.1:$port" \
    LEASEHOLD_LISTEN=127.0.0.1:0 LEASEHOLD_METRICS=127.0.0.1:0 "$binary" serve >"$1.out" 2>"$1.err" &
  local pid=$!
  until grep -q "listening on" "$1.out" 2>/dev/null; do sleep 0.05; kill -0 "$pid"; done
  echo "$pid $(sed -n 's/leasehold: listening on //p' "$1.out")"
}

# 3. compose.yaml: its replicas' environments, started for real against one Redis.
# A venv of its own: CI runs this script beside the test suites, which install into theirs.
venv=$work/venv
"$venv/bin/python" -c 'import yaml' 2>/dev/null || {
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check pyyaml
}
"$binary" serve --help > "$work/serve-help.txt"
"$venv/bin/python" - "$work" <<'PY'
import re, sys, yaml
work = sys.argv[1]
compose = yaml.safe_load(open("compose.yaml"))
services = compose["services"]
known = set(re.findall(r"env: (LEASEHOLD_[A-Z_]+)", open(f"{work}/serve-help.txt").read()))
replicas = [n for n, s in services.items() if s.get("build") == "."]
assert any("redis" in s.get("image", "") for s in services.values()), "no Redis service"
assert len(replicas) >= 2, f"two replicas wanted, found {replicas}"
ports = [p.split(":")[0] for n in replicas for p in services[n].get("ports", [])]
assert len(ports) == len(set(ports)), f"host ports used twice: {ports}"
for name in replicas:
    env = services[name]["environment"]
    unknown = set(env) - known
    assert not unknown, f"{name}: variables leasehold serve does not read: {unknown}"
    assert services[name].get("depends_on"), f"{name}: starts before Redis"
    with open(f"{work}/{name}.env", "w") as out:
        out.write(" ".join(f"{k}={v}" for k, v in env.items() if k not in
                           ("LEASEHOLD_REDIS", "LEASEHOLD_LISTEN", "LEASEHOLD_METRICS")))
def seconds(text):
    text = str(text)
    return float(text[:-2]) / 1000 if text.endswith("ms") else float(text.rstrip("s"))
for name in replicas:
    drain = seconds(services[name]["environment"].get("LEASEHOLD_DRAIN", "10s"))
    grace = seconds(services[name].get("stop_grace_period", "10s"))
    assert grace > drain, f"{name}: stop_grace_period {grace}s must exceed the drain {drain}s"
dockerfile = open("Dockerfile").read()
drain = re.search(r"^ENV LEASEHOLD_DRAIN=(\S+)", dockerfile, re.M)
assert drain and seconds(drain.group(1)) < 10, "the image's drain must end within docker stop's 10 s"
ignored = open(".dockerignore").read().split()
assert "target/" in ignored, ".dockerignore must keep target/ out of the build context"
print("compose.yaml:", ", ".join(replicas), "use only variables leasehold serve reads,",
      "and every stop grace exceeds its drain")
PY
servers=""
addrs=()
for env in "$work"/leasehold-*.env; do
  read -r pid addr < <(start_replica "$env")
  servers="$servers $pid"; addrs+=("$addr")
done
for addr in "${addrs[@]}"; do
  eval "$binary ${healthcheck/http:\/\/127.0.0.1:50051/http://$addr}" >/dev/null
done
echo "HEALTHCHECK passes on every replica"
token=$("$binary" run --server "http://${addrs[0]}" shared -- sh -c \
  "\"$binary\" run --server http://${addrs[1]} shared -- true; echo \$?" | tail -n1)
[ "$token" = 75 ] || { echo "a lock held through one replica was taken through the other ($token)" >&2; exit 1; }
echo "a lock held through one replica is refused through the other"
kill "$(cat "$work/redis.pid")"
rm -f "$work/redis.pid"
# Health follows Redis within a few seconds: ask again until it fails, for at most 20 s.
for _ in $(seq 1 40); do
  if ! eval "$binary ${healthcheck/http:\/\/127.0.0.1:50051/http://${addrs[0]}}" >/dev/null 2>&1; then
    echo "HEALTHCHECK fails once Redis is gone"
    exit 0
  fi
  sleep 0.5
done
echo "HEALTHCHECK still passes 20 s after Redis went away" >&2
exit 1
