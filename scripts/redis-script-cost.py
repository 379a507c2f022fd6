#!/usr/bin/env python3
"""What a plain lock's acquire + release costs Redis, against the seed's own pair.

Starts its own redis-server on a free port, loads the scripts from src/store/locks/ as the
server does (helpers prepended), and runs N uncontended acquire + release pairs on distinct
names through one connection, alternating with the seed's pair (`SET NX PX`, then the
compare-and-DEL script), in rounds. Reports Redis's own CPU (`INFO cpu`) per pair, and each
script's time inside Redis (`INFO commandstats`), one after another (sequential: what one client
costs, syscalls included) and pipelined (the scripts alone). Then each command's own time from
SLOWLOG (threshold 0), and acquisitions per second by redis-benchmark (50 clients, random
names): `SET NX PX` against the acquire script. Standard library only.

    python3 scripts/redis-script-cost.py [pairs per round, default 10000] [rounds, default 3]
"""
import os
import socket
import statistics
import subprocess
import sys
import time

# LEASEHOLD_LOCK_SCRIPTS: another tree's src/store/locks (the build before a change), its
# scripts given the keys and arguments they take (see `legacy` below).
ROOT = os.environ.get("LEASEHOLD_LOCK_SCRIPTS") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "src", "store", "locks")
PAIRS = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
TOKEN = "0123456789abcdef0123456789abcdef"


def lua(*files):
    return "".join(open(os.path.join(ROOT, f)).read() for f in files)


class Redis:
    def __init__(self, port):
        for _ in range(100):
            try:
                self.sock = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
                time.sleep(0.05)
        self.file = self.sock.makefile("rb")

    @staticmethod
    def encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind in b"+:":
            return rest
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"*":
            return [self.read() for _ in range(max(int(rest), 0))]
        raise RuntimeError(f"unexpected reply {line!r}")

    def call(self, *args):
        self.sock.sendall(self.encode(args))
        return self.read()

    def pipeline(self, commands):
        self.sock.sendall(b"".join(self.encode(c) for c in commands))
        return [self.read() for _ in commands]

    def cpu(self):
        info = self.call("INFO", "cpu").decode()
        fields = dict(line.split(":") for line in info.splitlines() if ":" in line)
        return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])

    def script_usec(self):
        """Microseconds per call of every command run since the last reset."""
        info = self.call("INFO", "commandstats").decode()
        out = {}
        for line in info.splitlines():
            if line.startswith("cmdstat_"):
                name, fields = line[len("cmdstat_"):].split(":", 1)
                stats = dict(f.split("=") for f in fields.split(","))
                out[name] = (int(stats["calls"]), float(stats["usec_per_call"]))
        return out


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        r = Redis(port)
        seed_release = r.call("SCRIPT", "LOAD",
                              "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                              "return redis.call('DEL', KEYS[1]) end return 0").decode()
        # Scripts before issue 43 (LEASEHOLD_LOCK_SCRIPTS) took every key of the name, helpers
        # first; since, the lock's key and the counter (take) or the lock's alone (release).
        legacy = not os.path.exists(os.path.join(ROOT, "release_rest.lua"))
        if legacy:
            take = r.call("SCRIPT", "LOAD", lua("lease.lua", "take.lua")).decode()
            release = r.call("SCRIPT", "LOAD",
                             lua("lease.lua", "permits.lua", "release.lua")).decode()
        else:
            take = r.call("SCRIPT", "LOAD", lua("take.lua")).decode()
            release = r.call("SCRIPT", "LOAD", lua("release.lua", "lease.lua", "permits.lua",
                                                   "release_rest.lua")).decode()

        def seed(i):
            key = f"seed{{{i}}}"
            return (["SET", key, TOKEN, "NX", "PX", 10_000],
                    ["EVALSHA", seed_release, 1, key, TOKEN])

        def ours(i):
            base = f"leasehold:{{n{i}}}"
            # The counter's tag stands for the name's slot (keys.rs); any tag will do here.
            fence = f"leasehold:fence:{{{i % 1000:x}}}"
            if legacy:
                return (["EVALSHA", take, 6, f"{base}:lock", fence, f"{base}:deadlines",
                         f"{base}:lock:holders", f"{base}:watched", f"{base}:delay", TOKEN,
                         10_000, "report@host-a"],
                        ["EVALSHA", release, 7, f"{base}:lock", f"{base}:line",
                         f"{base}:deadlines", f"{base}:lock:holders", f"{base}:lock:permits",
                         f"{base}:watched", f"{base}:delay", TOKEN, f"{base}:wake", "1"])
            return (["EVALSHA", take, 2, f"{base}:lock", fence, TOKEN, 10_000, "report@host-a"],
                    ["EVALSHA", release, 1, f"{base}:lock", TOKEN, "1"])

        def measure(pair, pipelined):
            r.call("FLUSHALL")
            r.call("CONFIG", "RESETSTAT")
            before = r.cpu()
            for start in range(0, PAIRS, 1000):
                batch = [pair(i) for i in range(start, min(start + 1000, PAIRS))]
                for side in (0, 1):
                    commands = [p[side] for p in batch]
                    if pipelined:
                        replies = r.pipeline(commands)
                    else:
                        replies = [r.call(*c) for c in commands]
                    if side == 0 and pair is ours:
                        assert all(rep[0] == b"1" for rep in replies), replies[:1]
            return (r.cpu() - before) * 1e6 / PAIRS, r.script_usec()

        for pipelined in (False, True):
            ratios, seen = [], {}
            for _ in range(ROUNDS):
                s, s_stats = measure(seed, pipelined)
                o, o_stats = measure(ours, pipelined)
                ratios.append(o / s)
                seen = (s, o, s_stats, o_stats)
            s, o, s_stats, o_stats = seen
            how = "pipelined" if pipelined else "sequential"
            print(f"{how}: Redis CPU per acquire + release: seed {s:.1f} µs, Leasehold {o:.1f} µs "
                  f"(last round); ratio per round {', '.join(f'{x:.2f}x' for x in ratios)}, "
                  f"median {statistics.median(ratios):.2f}x")
            for name, (calls, usec) in sorted(o_stats.items()):
                if name not in ("flushall", "config|resetstat", "info"):
                    print(f"    Leasehold {name}: {calls} calls, {usec:.2f} µs each")
            for name, (calls, usec) in sorted(s_stats.items()):
                if name not in ("flushall", "config|resetstat", "info"):
                    print(f"    seed {name}: {calls} calls, {usec:.2f} µs each")

        # SLOWLOG: every command's own duration inside Redis (threshold 0), a sample of the
        # last ones of one sequential run of each.
        for name, pair in (("seed", seed), ("Leasehold", ours)):
            r.call("FLUSHALL")
            r.call("CONFIG", "SET", "slowlog-max-len", 1000)
            r.call("CONFIG", "SET", "slowlog-log-slower-than", 0)
            r.call("SLOWLOG", "RESET")
            for i in range(500):
                for command in pair(i):
                    r.call(*command)
            r.call("CONFIG", "SET", "slowlog-log-slower-than", 10_000)
            durations = {}
            for entry in r.call("SLOWLOG", "GET", 1000):
                command = entry[3]
                label = command[0].decode().upper()
                if label == "EVALSHA":
                    label = {take: "acquire (take.lua)", release: "release.lua",
                             seed_release: "compare-and-DEL"}.get(command[1].decode(), label)
                if label in ("CONFIG", "SLOWLOG", "FLUSHALL"):
                    continue
                durations.setdefault(label, []).append(int(entry[2]))
            print(f"SLOWLOG, {name}: " + ", ".join(
                f"{label} median {statistics.median(d):.0f} µs ({len(d)} calls)"
                for label, d in sorted(durations.items())))

        # redis-benchmark: acquisitions per second Redis serves from 50 clients, the seed's
        # `SET NX PX` against the acquire script, random names (100 ms TTL).
        rates = {}
        for name, command in (
            ("seed SET NX PX", ["SET", "seed:__rand_int__", TOKEN, "NX", "PX", "100"]),
            ("Leasehold take.lua", ["EVALSHA", take, "6", "leasehold:{n__rand_int__}:lock",
                                   "leasehold:fence:{0}", "leasehold:{n__rand_int__}:deadlines",
                                   "leasehold:{n__rand_int__}:lock:holders",
                                   "leasehold:{n__rand_int__}:watched",
                                   "leasehold:{n__rand_int__}:delay", TOKEN, "100",
                                   "report@host-a"] if legacy else
             ["EVALSHA", take, "2", "leasehold:{n__rand_int__}:lock", "leasehold:fence:{0}",
              TOKEN, "100", "report@host-a"]),
        ):
            r.call("FLUSHALL")
            out = subprocess.run(
                ["redis-benchmark", "-p", str(port), "-n", "100000", "-c", "50", "-r",
                 "100000000", "--csv", *command],
                capture_output=True, text=True, check=True).stdout
            rates[name] = float(out.strip().splitlines()[-1].split(",")[1].strip('"'))
        seed_rate, ours_rate = rates.values()
        print(f"redis-benchmark, 50 clients: seed SET NX PX {seed_rate:.0f}/s, Leasehold acquire "
              f"script {ours_rate:.0f}/s ({ours_rate / seed_rate:.2f}x)")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
