#!/usr/bin/env bash
# Builds every client as its users install it, then uses each from a fresh project in a temporary
# directory (never from the source tree) against a real server: acquire, check the fencing token
# is current, release, check it is free. A redis-server and a leasehold server start here on free
# loopback ports. The builds run from a copy of proto/ and clients/ (so that they never race the
# client suites scripts/test.sh runs beside this one); the five languages run at once, each into
# its own log, printed when it ends. Packages land in target/packages/.
#   Python: python -m build (sdist + wheel, stubs inside); fresh venvs install each.
#   Node:   npm pack; a fresh project npm-installs the tarball; ESM import, and CommonJS require.
#   Java:   mvn install (jar, sources, javadoc); a fresh Maven project compiles and runs a Main.
#   Go:     a fresh module requiring the client, replace'd to its directory (unpublished).
#   Rust:   cargo package -p leasehold-client; a fresh crate depends on the unpacked .crate.
# Usage: scripts/packages.sh [path to the leasehold binary]
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
binary=$(realpath "${1:-target/debug/leasehold}")
source scripts/bench-setup.sh # redis.sh, $work (removed on exit), free_port, redis
ensure_python_venv
ensure_node_installed
ensure_java_maven_installed
out=$repo/target/packages
rm -rf "$out"
mkdir -p "$out" "$work/src"
tar -C "$repo" --exclude=node_modules --exclude=dist --exclude=target --exclude=build \
  --exclude='*.egg-info' -cf - proto clients/python clients/node clients/java | tar -C "$work/src" -xf -

redis_port=$(free_port)
redis "$redis_port"
grpc_port=$(free_port)
"$binary" serve --listen "127.0.0.1:$grpc_port" --redis "redis://127.0.0.1:$redis_port" \
  >"$work/server.log" 2>&1 &
pids+=($!)
server=127.0.0.1:$grpc_port
for _ in $(seq 1 100); do
  "$binary" status --server "http://$server" >/dev/null 2>&1 && break
  sleep 0.1
done
"$binary" status --server "http://$server" >/dev/null 2>&1 ||
  { cat "$work/server.log" >&2; echo "the leasehold server did not start within 10 s" >&2; exit 1; }

try_python() {
  local venv=$repo/target/py-venv # the venv scripts/test.sh makes
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check build
  "$venv/bin/python" -m build -o "$out/python" "$work/src/clients/python" >"$work/python-build.log" 2>&1 ||
    { cat "$work/python-build.log"; return 1; }
  local wheel sdist
  wheel=$(ls "$out"/python/leasehold_client-*.whl)
  sdist=$(ls "$out"/python/leasehold_client-*.tar.gz)
  # The listing is read once: with pipefail, `unzip -l | grep -q` fails when grep stops early.
  local listing
  listing=$(unzip -l "$wheel")
  for stub in leasehold/v1/lock_pb2.py leasehold/v1/lock_pb2.pyi leasehold/v1/lock_pb2_grpc.py \
    leasehold/v1/session_pb2_grpc.py leasehold/v1/election_pb2_grpc.py; do
    grep -q " $stub\$" <<<"$listing" || { echo "python: the wheel has no $stub" >&2; return 1; }
  done
  echo "python: the wheel carries the generated stubs (leasehold/v1/*_pb2*.py, .pyi)"
  mkdir -p "$work/python"
  cat >"$work/python/try.py" <<'EOF'
import sys
from leasehold_client import TokenState, check, lease
server = sys.argv[1]
with lease("packages-python", server=server, ttl=10, wait=5) as held:
    token = held.fencing_token
    assert check("packages-python", token, server=server).state is TokenState.CURRENT
assert check("packages-python", token, server=server).state is TokenState.FREE, "not released"
print(f"acquired (fencing token {token}), checked current, released")
EOF
  local package
  for package in "$wheel" "$sdist"; do
    python3 -m venv "$work/python/venv-${package##*.}"
    "$work/python/venv-${package##*.}/bin/pip" install -q --disable-pip-version-check "$package"
    (cd "$work/python" && "./venv-${package##*.}/bin/python" try.py "$server") |
      sed "s|^|python ($(basename "$package")): |"
  done
}

try_node() {
  (cd "$work/src/clients/node" && npm ci --no-audit --no-fund --loglevel=error &&
    npm run --silent build && npm pack --silent --pack-destination "$out" >/dev/null)
  local tarball
  tarball=$(ls "$out"/leasehold-client-*.tgz)
  mkdir -p "$work/node" && cd "$work/node"
  npm init -y >/dev/null
  npm install --no-audit --no-fund --loglevel=error "$tarball"
  cat >try.mjs <<'EOF'
import { connect } from "@leasehold/client";
const client = connect(process.argv[2]);
try {
  const lease = await client.lease("packages-node", { ttl: 10_000, wait: 5_000 });
  const token = lease.fencingToken;
  if ((await client.check("packages-node", token)).state !== "current") throw new Error("not held");
  await lease.release();
  if ((await client.check("packages-node", token)).state !== "free") throw new Error("not released");
  console.log(`node (ESM import): acquired (fencing token ${token}), checked current, released`);
} finally {
  client.close();
}
EOF
  node try.mjs "$server"
  # The package is ESM only ("exports" has no "require"): say what a CommonJS user gets.
  echo 'require("@leasehold/client"); console.log("node (CommonJS require): works")' >try.cjs
  if node try.cjs >cjs.log 2>&1; then cat cjs.log; else
    echo "node (CommonJS require): does not work, as the README says ($(grep -m1 -o 'ERR_[A-Z_]*' cjs.log || head -n1 cjs.log))"
  fi
}

try_java() {
  (cd "$work/src/clients/java" && mvn -B -ntp -q -Dstyle.color=never install -DskipTests)
  local installed=$HOME/.m2/repository/dev/leasehold/leasehold-client/0.1.0
  for jar in leasehold-client-0.1.0.jar leasehold-client-0.1.0-sources.jar leasehold-client-0.1.0-javadoc.jar; do
    [ -s "$installed/$jar" ] || { echo "java: mvn install did not install $jar" >&2; return 1; }
  done
  echo "java: installed the jar, its sources jar and its javadoc jar"
  mkdir -p "$work/java/src/main/java/example" && cd "$work/java"
  cat >pom.xml <<'EOF'
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>example</groupId>
  <artifactId>try</artifactId>
  <version>1</version>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencies>
    <dependency>
      <groupId>dev.leasehold</groupId>
      <artifactId>leasehold-client</artifactId>
      <version>0.1.0</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-compiler-plugin</artifactId>
        <version>3.13.0</version>
      </plugin>
    </plugins>
  </build>
</project>
EOF
  cat >src/main/java/example/Main.java <<'EOF'
package example;

import dev.leasehold.Lease;
import dev.leasehold.LeaseholdClient;
import dev.leasehold.TokenState;
import java.time.Duration;

public final class Main {
  public static void main(String[] args) throws Exception {
    try (LeaseholdClient client = LeaseholdClient.connect(args[0])) {
      Lease lease = client.lease("packages-java").ttl(Duration.ofSeconds(10))
          .waitUpTo(Duration.ofSeconds(5)).acquire();
      long token = lease.fencingToken();
      if (client.check("packages-java", token).state() != TokenState.CURRENT) throw new AssertionError("not held");
      lease.release();
      if (client.check("packages-java", token).state() != TokenState.FREE) throw new AssertionError("not released");
      System.out.println("java: acquired (fencing token " + token + "), checked current, released");
    }
  }
}
EOF
  mvn -B -ntp -q -Dstyle.color=never compile dependency:build-classpath -Dmdep.outputFile=cp.txt
  java -cp "target/classes:$(cat cp.txt)" example.Main "$server"
}

try_go() {
  mkdir -p "$work/go" && cd "$work/go"
  go mod init example.com/try 2>/dev/null
  # Go's own way to use a module that is not published (or not tagged) yet: require + replace.
  go mod edit -require=github.com/leasehold/leasehold/clients/go@v0.0.0 \
    -replace=github.com/leasehold/leasehold/clients/go="$repo/clients/go"
  cat >main.go <<'EOF'
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

func main() {
	conn, err := leasehold.Dial(os.Args[1], leasehold.DialOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	lease, err := leasehold.Acquire(ctx, conn, "packages-go", leasehold.Options{TTL: 10 * time.Second, Wait: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	if check, err := leasehold.Check(ctx, conn, "packages-go", lease.FencingToken); err != nil || check.State != leasehold.TokenCurrent {
		log.Fatal("not held: ", check, err)
	}
	if _, err := lease.Release(); err != nil {
		log.Fatal(err)
	}
	if check, err := leasehold.Check(ctx, conn, "packages-go", lease.FencingToken); err != nil || check.State != leasehold.TokenFree {
		log.Fatal("not released: ", check, err)
	}
	fmt.Printf("go: acquired (fencing token %d), checked current, released\n", lease.FencingToken)
}
EOF
  go mod tidy
  go run . "$server"
}

try_rust() {
  local target=${CARGO_TARGET_DIR:-$repo/target}
  # --no-verify: the fresh crate below builds the unpacked .crate, which is what verify does.
  cargo package -q -p leasehold-client --allow-dirty --no-verify
  mkdir -p "$out" && cp "$target"/package/leasehold-client-0.1.0.crate "$out/"
  mkdir -p "$work/rust/src" && tar -C "$work/rust" -xzf "$out/leasehold-client-0.1.0.crate"
  cd "$work/rust"
  cat >Cargo.toml <<'EOF'
[package]
name = "try-leasehold"
version = "0.1.0"
edition = "2024"

[dependencies]
leasehold-client = { path = "leasehold-client-0.1.0" }
tokio = { version = "1", features = ["macros", "rt-multi-thread"] }

[workspace]
EOF
  cat >src/main.rs <<'EOF'
use std::time::Duration;

use leasehold_client::{Client, TokenState};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::args().nth(1).ok_or("usage: try-leasehold HOST:PORT")?;
    let client = Client::connect(format!("http://{server}")).await?;
    let guard = client.lease("packages-rust").ttl(Duration::from_secs(10)).wait(Duration::from_secs(5)).acquire().await?;
    let token = guard.fencing_token();
    assert_eq!(client.check("packages-rust", token).await?.state, TokenState::Current, "not held");
    guard.release().await?;
    assert_eq!(client.check("packages-rust", token).await?.state, TokenState::Free, "not released");
    println!("rust: acquired (fencing token {token}), checked current, released");
    Ok(())
}
EOF
  # The workspace's lock file: the same dependency versions as the build just done, so the shared
  # target directory already holds them compiled.
  cp "$repo/Cargo.lock" .
  CARGO_TARGET_DIR="$target" cargo run -q -- "$server"
}

started=$SECONDS
languages=(python node java go rust)
jobs=()
for language in "${languages[@]}"; do
  (set -e; "try_$language"; echo "($language: $((SECONDS - started)) s)") >"$work/$language.log" 2>&1 &
  jobs+=($!)
done
failed=0
for i in "${!languages[@]}"; do
  if wait "${jobs[$i]}"; then
    printf "\n== %s package: installed and used\n" "${languages[$i]}"
  else
    printf "\n== %s package: FAILED (its log follows)\n" "${languages[$i]}"
    failed=1
  fi
  cat "$work/${languages[$i]}.log"
done
printf "\npackages: %s in %d s\n" "$([ "$failed" = 0 ] && echo "all installed and used" || echo FAILED)" \
  "$((SECONDS - started))"
exit "$failed"
