"""The Helm chart's test (run by deploy/helm/test.sh): `helm lint`, `helm template` for every Redis
mode, TLS + auth and the ServiceMonitor, checks of the rendered objects, then each rendered
Deployment run for real: its container's args and env (secretKeyRef resolved from the rendered or
the test's Secrets, Secret volumes written where they are mounted) given to the real binary
against real redis-server processes, its probes run as the kubelet would, its metrics read, a
lock taken, and SIGTERM answered within the pod's grace.

Usage: python3 test_chart.py HELM BINARY"""

import hashlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

HELM, BINARY = sys.argv[1], os.path.abspath(sys.argv[2])
CHART = os.path.join(os.path.dirname(os.path.abspath(__file__)), "leasehold")
TMP = tempfile.mkdtemp(prefix="leasehold-helm-")
PROCS = []  # everything started here, stopped on exit
STARTED = time.monotonic()


def log(message):
    print(f"[{time.monotonic() - STARTED:5.1f}s] {message}", flush=True)


def fail(message):
    raise SystemExit(f"FAILED: {message}")


def check(condition, message):
    if not condition:
        fail(message)


def free_port(highest=65535):
    """A free loopback port, at most `highest` (a cluster node's bus listens 10,000 above it).

    Taken below the kernel's ephemeral range: the chart is rendered with its ports before the
    processes start, and a port the kernel hands out (as it does to every outgoing connection,
    redis-cli's included) could be taken by the time they do."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
        ephemeral = int(ports.read().split()[0])
    top = min(highest, ephemeral - 1)
    while True:
        port = random.randint(max(1024, top - 20000), top)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


# Redis refuses a cluster node's port above this: its bus port would pass 65535.
HIGHEST_CLUSTER_PORT = 55535


def start(args, **kwargs):
    proc = subprocess.Popen(args, **kwargs)
    PROCS.append(proc)
    return proc


def stop_all():
    for proc in reversed(PROCS):
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------- Redis processes


def redis(port, *extra, directory=None):
    directory = directory or TMP
    log_path = os.path.join(TMP, f"redis-{port}.log")
    with open(log_path, "w") as log_file:
        proc = start(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                      "--appendonly", "no", "--dir", directory, *extra],
                     stdout=log_file, stderr=subprocess.STDOUT)
    password = extra[extra.index("--requirepass") + 1] if "--requirepass" in extra else None
    auth = ["-a", password, "--no-auth-warning"] if password else []
    for _ in range(200):
        ping = subprocess.run(["redis-cli", "-p", str(port), *auth, "ping"],
                              capture_output=True, text=True)
        if ping.stdout.strip() == "PONG":
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    with open(log_path) as log_file:
        said = log_file.read()[-2000:]
    fail(f"redis-server on :{port} did not start (exit {proc.poll()}; last ping: "
         f"{ping.stdout.strip()!r} {ping.stderr.strip()!r}); it said:\n{said}")


def sentinel(port, primary_port):
    conf = os.path.join(TMP, f"sentinel-{port}.conf")
    with open(conf, "w") as f:
        f.write(f"port {port}\nbind 127.0.0.1\ndir {TMP}\n"
                f"sentinel monitor leasehold 127.0.0.1 {primary_port} 1\n")
    start(["redis-server", conf, "--sentinel"], stdout=subprocess.DEVNULL,
          stderr=subprocess.DEVNULL)
    for _ in range(200):
        out = subprocess.run(["redis-cli", "-p", str(port), "sentinel",
                              "get-master-addr-by-name", "leasehold"],
                             capture_output=True, text=True).stdout.split()
        if out == ["127.0.0.1", str(primary_port)]:
            return
        time.sleep(0.05)
    fail("the Sentinel did not start")


def cluster(ports):
    for port in ports:
        directory = os.path.join(TMP, f"cluster-{port}")
        os.makedirs(directory)
        redis(port, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
              "--cluster-node-timeout", "2000", directory=directory)
    subprocess.run(["redis-cli", "--cluster", "create",
                    *[f"127.0.0.1:{p}" for p in ports], "--cluster-replicas", "0",
                    "--cluster-yes"], check=True, capture_output=True)
    for _ in range(200):
        info = [subprocess.run(["redis-cli", "-p", str(p), "cluster", "info"],
                               capture_output=True, text=True).stdout for p in ports]
        if all("cluster_state:ok" in i for i in info):
            return
        time.sleep(0.05)
    fail("the Redis Cluster did not become ok")


# ---------------------------------------------------------------- helm


def helm(*args, expect_ok=True):
    result = subprocess.run([HELM, *args], capture_output=True, text=True)
    if expect_ok and result.returncode != 0:
        fail(f"helm {' '.join(args)}:\n{result.stderr}")
    return result


def render(name, values, expect_error=None):
    path = os.path.join(TMP, f"values-{name}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(values, f)
    helm("lint", "--strict", CHART, "-f", path, expect_ok=expect_error is None)
    result = helm("template", "t", CHART, "--namespace", "ns", "-f", path,
                  expect_ok=expect_error is None)
    if expect_error is not None:
        check(result.returncode != 0 and expect_error in result.stderr,
              f"{name}: expected the render to fail with {expect_error!r}, got "
              f"rc={result.returncode}: {result.stderr.strip()}")
        return None
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def one(objects, kind):
    found = [o for (k, _), o in objects.items() if k == kind]
    check(len(found) == 1, f"expected one {kind}, got {len(found)}")
    return found[0]


# ---------------------------------------------------------------- checks of rendered objects


def static_checks(name, objects, values, secrets_outside):
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    check(args[0] == "serve", f"{name}: args start with serve")
    drain = int(next(a for a in args if a.startswith("--drain="))[len("--drain="):-1])
    grace = pod["terminationGracePeriodSeconds"]
    check(grace > drain, f"{name}: terminationGracePeriodSeconds {grace} <= drain {drain}")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        check(probe in container, f"{name}: no {probe}")
    tls = values.get("tls", {}).get("enabled")
    for probe in ("startupProbe", "readinessProbe"):
        if tls:
            check(container[probe]["exec"]["command"][:2] == ["leasehold", "health"],
                  f"{name}: {probe} is not `leasehold health` with TLS")
        else:
            check(container[probe]["grpc"]["port"] == values["grpcPort"],
                  f"{name}: {probe} is not a gRPC probe on the gRPC port")
    check(one(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1,
          f"{name}: PDB")
    check(pod["topologySpreadConstraints"] and pod["affinity"]["podAntiAffinity"],
          f"{name}: no spread")
    security = container["securityContext"]
    check(security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"],
          f"{name}: container securityContext")
    check(pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] > 0,
          f"{name}: pod securityContext")
    check("cpu" in container["resources"]["requests"]
          and "memory" in container["resources"]["requests"], f"{name}: resource requests")
    # The URL (and any password) only through a Secret: never a literal in env or args.
    redis_env = [e for e in container["env"]
                 if e["name"] in ("LEASEHOLD_REDIS", "LEASEHOLD_REDLOCK")]
    check(len(redis_env) == 1 and "secretKeyRef" in redis_env[0].get("valueFrom", {}),
          f"{name}: the Redis URL is not from a secretKeyRef")
    spec_text = json.dumps(pod)
    for secret_value in ("redis://", "s3cret", "rediss://"):
        check(secret_value not in spec_text, f"{name}: {secret_value!r} inlined in the pod spec")
    # Every referenced Secret exists: rendered by the chart or provided by the test.
    rendered = {n for (k, n) in objects if k == "Secret"}
    referenced = {e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"]
                  if "secretKeyRef" in e.get("valueFrom", {})}
    referenced |= {v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
    missing = referenced - rendered - set(secrets_outside)
    check(not missing, f"{name}: Secrets referenced but absent: {missing}")
    # Services: gRPC on the port, the headless one for replica lists, metrics when enabled.
    service = objects[("Service", "t-leasehold")]
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    check(ports["grpc"] == values["grpcPort"], f"{name}: Service gRPC port")
    check(objects[("Service", "t-leasehold-headless")]["spec"]["clusterIP"] == "None",
          f"{name}: headless Service")
    check(ports.get("metrics") == values["metrics"]["port"], f"{name}: Service metrics port")
    monitors = [o for (k, _), o in objects.items() if k == "ServiceMonitor"]
    if values["metrics"].get("serviceMonitor", {}).get("enabled"):
        check(len(monitors) == 1 and monitors[0]["apiVersion"] == "monitoring.coreos.com/v1",
              f"{name}: ServiceMonitor")
        check(monitors[0]["spec"]["endpoints"][0]["port"] == "metrics",
              f"{name}: ServiceMonitor port")
    else:
        check(not monitors, f"{name}: ServiceMonitor rendered while off")


# ---------------------------------------------------------------- the "kubelet"


def run_pod(name, objects, secrets_outside, client_flags):
    """Starts the binary as the kubelet would start the rendered container; checks it serves."""
    secrets = dict(secrets_outside)
    for (kind, secret_name), obj in objects.items():
        if kind == "Secret":
            secrets[secret_name] = {k: v.encode() for k, v in obj.get("stringData", {}).items()}
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        source = volumes[mount["name"]]["secret"]
        data = secrets[source["secretName"]]
        items = source.get("items") or [{"key": k, "path": k} for k in data]
        os.makedirs(mount["mountPath"], exist_ok=True)
        for item in items:
            with open(os.path.join(mount["mountPath"], item["path"]), "wb") as f:
                f.write(data[item["key"]])
    env = {"PATH": os.environ["PATH"]}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = secrets[ref["name"]][ref["key"]].decode()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    log(f"{name}: leasehold {' '.join(container['args'])}  "
        f"(env: {', '.join(sorted(k for k in env if k != 'PATH'))})")
    server = start([BINARY, *container["args"]], env=env, stdout=subprocess.PIPE,
                   stderr=open(os.path.join(TMP, f"{name}.log"), "w"), text=True)
    line = server.stdout.readline()
    check(line.startswith("leasehold: listening on"),
          f"{name}: the server did not start: {line!r}\n"
          + open(os.path.join(TMP, f"{name}.log")).read())
    # The probes, as the kubelet runs them: a gRPC probe is grpc.health.v1 Check on the port
    # (the same call `leasehold health` makes); an exec probe runs its command.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        spec = container[probe]
        if "grpc" in spec:
            command = [BINARY, "health", "--server", f"http://127.0.0.1:{spec['grpc']['port']}"]
        elif "exec" in spec:
            command = [BINARY if c == "leasehold" else c for c in spec["exec"]["command"]]
        else:
            socket.create_connection(("127.0.0.1", ports[spec["tcpSocket"]["port"]]), 2).close()
            continue
        result = subprocess.run(command, capture_output=True, text=True, timeout=10,
                                env={"PATH": os.environ["PATH"]})
        check(result.returncode == 0,
              f"{name}: {probe} failed ({result.returncode}): {result.stderr.strip()}")
    # Serving for real: a lock taken and held through Redis, and listed.
    scheme = "https" if "--tls-cert" in " ".join(container["args"]) else "http"
    server_flags = ["--server", f"{scheme}://localhost:{ports['grpc']}", *client_flags]
    client_env = {"PATH": os.environ["PATH"]}
    held = subprocess.run([BINARY, "run", *server_flags, "--ttl", "5s", f"helm-{name}", "--",
                           "sh", "-c", 'echo "$LEASEHOLD_FENCING_TOKEN"'],
                          capture_output=True, text=True, timeout=20, env=client_env)
    check(held.returncode == 0 and held.stdout.strip(),
          f"{name}: `leasehold run` failed ({held.returncode}): {held.stderr.strip()}")
    status = subprocess.run([BINARY, "status", *server_flags, "--json"], capture_output=True,
                            text=True, timeout=10, env=client_env)
    check(status.returncode == 0, f"{name}: `leasehold status` failed: {status.stderr.strip()}")
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics",
                                     timeout=5).read().decode()
    check("leasehold_acquisitions_total" in metrics,
          f"{name}: /metrics has no leasehold_acquisitions_total")
    # Settings reached the server as variables: lock-name prefixes label the metrics, and the
    # log lines are JSON.
    if "helm-" in env.get("LEASEHOLD_METRICS_NAME_PREFIX", ""):
        check('prefix="helm-"' in metrics, f"{name}: no prefix=\"helm-\" label in /metrics")
    if env.get("LEASEHOLD_LOG_FORMAT") == "json":
        first = open(os.path.join(TMP, f"{name}.log")).readline()
        check(first.startswith("{"), f"{name}: log line not JSON: {first!r}")
    if "--token-file" in client_flags:
        at = client_flags.index("--token-file")
        refused = subprocess.run([BINARY, "status", *server_flags[:2],
                                  *client_flags[:at], *client_flags[at + 2:]],
                                 capture_output=True, text=True, timeout=10, env=client_env)
        check(refused.returncode == 77,
              f"{name}: without the token, status gave {refused.returncode}, not 77")
    # SIGTERM: exit 0 within the drain, so within the pod's grace.
    began = time.monotonic()
    server.send_signal(signal.SIGTERM)
    code = server.wait(timeout=pod["terminationGracePeriodSeconds"])
    took = time.monotonic() - began
    check(code == 0, f"{name}: exit status {code} after SIGTERM")
    log(f"{name}: served (probes, run, status, metrics); SIGTERM: exit 0 in {took:.2f}s "
        f"(grace {pod['terminationGracePeriodSeconds']}s)")


# ---------------------------------------------------------------- the cases


def base(name):
    return {
        "listenHost": "127.0.0.1",
        "grpcPort": free_port(),
        "metrics": {"enabled": True, "port": free_port()},
        "mountRoot": os.path.join(TMP, name, "mnt"),
        "drainSeconds": 3,
    }


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=TMP)


def certificates():
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
            "-keyout", "ca.key", "-out", "ca.crt")
    for cn, san in (("localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
                    ("probe", "extendedKeyUsage=clientAuth"),
                    ("ops", "extendedKeyUsage=clientAuth")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
                "-keyout", f"{cn}.key", "-out", f"{cn}.csr")
        with open(os.path.join(TMP, f"{cn}.ext"), "w") as f:
            f.write(san + "\n")
        openssl("x509", "-req", "-in", f"{cn}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-out", f"{cn}.crt", "-extfile", f"{cn}.ext")
    read = lambda n: open(os.path.join(TMP, n), "rb").read()  # noqa: E731
    return read


def help_variables():
    text = subprocess.run([BINARY, "serve", "--help"], capture_output=True, text=True).stdout
    return set(re.findall(r"env: (LEASEHOLD_[A-Z_]+)", text))


def main():
    # The settings the chart passes through plus those it sets itself are every serve variable.
    helpers = open(os.path.join(CHART, "templates", "_helpers.tpl")).read()
    allowed = re.search(r'\$allowed := list (.*?) }}', helpers).group(1)
    passed = {"LEASEHOLD_" + k.strip('"').upper().replace("-", "_") for k in allowed.split()}
    chart_set = {"LEASEHOLD_" + n for n in ("REDIS", "REDLOCK", "REDIS_PASSWORD_FILE", "REDIS_CA",
                                            "LISTEN", "METRICS", "DRAIN", "TLS_CERT", "TLS_KEY",
                                            "TLS_CLIENT_CA", "AUTH_FILE", "CONFIG")}
    documented = help_variables()
    check(passed | chart_set == documented,
          f"serve's variables and the chart disagree: not in the chart "
          f"{sorted(documented - passed - chart_set)}, unknown to serve "
          f"{sorted((passed | chart_set) - documented)}")
    log(f"settings: the chart covers all {len(documented)} LEASEHOLD_* variables of serve")

    helm("lint", "--strict", CHART)
    log("helm lint --strict (defaults): ok")

    # Refusals: a mode and URL that disagree, a short Redlock set, an unknown setting.
    render("bad-mode", {"redis": {"mode": "cluster", "url": "redis://r:6379"}},
           expect_error="does not fit redis.mode cluster")
    render("bad-redlock", {"redis": {"mode": "redlock", "redlock": ["redis://a:1", "redis://b:1"]}},
           expect_error="an odd number of primaries")
    render("bad-setting", {"settings": {"drain": "5s"}}, expect_error="settings.drain")
    render("bad-mtls", {"tls": {"enabled": True, "secretName": "x",
                                "clientCA": {"secretName": "y"}}},
           expect_error="tls.probe.clientSecretName")
    log("refusals: mode/URL mismatch, 2 Redlock primaries, settings.drain, mTLS without a "
        "probe certificate")

    cases = []

    # single: chart-made Secret with URL and password (requirepass).
    port = free_port()
    redis(port, "--requirepass", "s3cret")
    values = base("single")
    values["redis"] = {"mode": "single", "url": f"redis://127.0.0.1:{port}", "password": "s3cret"}
    values["settings"] = {"log-format": "json", "max-leases": 5000, "wakeups": True,
                          "echo": True, "metrics-name-prefix": ["helm-", "billing/"]}
    cases.append(("single", values, {}, []))

    # redlock: three primaries with a password, from an existing Secret.
    ports = [free_port() for _ in range(3)]
    for p in ports:
        redis(p, "--requirepass", "s3cret")
    values = base("redlock")
    values["redis"] = {"mode": "redlock", "existingSecret": "redlock-urls",
                       "secretKeys": {"url": "primaries", "password": "pw"}}
    secret = {"redlock-urls": {"primaries": ",".join(f"redis://127.0.0.1:{p}"
                                                     for p in ports).encode(),
                               "pw": b"s3cret\n"}}
    cases.append(("redlock", values, secret, []))

    # sentinel: a primary and one Sentinel.
    primary, sentinel_port = free_port(), free_port()
    redis(primary)
    sentinel(sentinel_port, primary)
    values = base("sentinel")
    values["redis"] = {"mode": "sentinel",
                       "url": f"redis-sentinel://127.0.0.1:{sentinel_port}/leasehold"}
    cases.append(("sentinel", values, {}, []))

    # cluster: three primaries.
    ports = [free_port(HIGHEST_CLUSTER_PORT) for _ in range(3)]
    cluster(ports)
    values = base("cluster")
    values["redis"] = {"mode": "cluster",
                       "url": "redis-cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)}
    cases.append(("cluster", values, {}, []))

    # TLS (mutual) + auth + ServiceMonitor, every file from a Secret.
    read = certificates()
    token = "helm-test-token"
    grants = (f'[[grant]]\nname = "ops"\ntoken_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
              'role = "admin"\nlocks = [""]\nelections = [""]\n')
    with open(os.path.join(TMP, "token"), "w") as f:
        f.write(token)
    port = free_port()
    redis(port)
    values = base("tls-auth")
    values["redis"] = {"mode": "single", "url": f"redis://127.0.0.1:{port}"}
    values["tls"] = {"enabled": True, "secretName": "leasehold-tls",
                     "clientCA": {"secretName": "clients-ca"},
                     "probe": {"clientSecretName": "probe-client"}}
    values["auth"] = {"enabled": True, "file": grants}
    values["metrics"]["serviceMonitor"] = {"enabled": True}
    secret = {"leasehold-tls": {"tls.crt": read("localhost.crt"), "tls.key": read("localhost.key"),
                                "ca.crt": read("ca.crt")},
              "clients-ca": {"ca.crt": read("ca.crt")},
              "probe-client": {"tls.crt": read("probe.crt"), "tls.key": read("probe.key")}}
    flags = ["--tls-ca", os.path.join(TMP, "ca.crt"), "--tls-cert", os.path.join(TMP, "ops.crt"),
             "--tls-key", os.path.join(TMP, "ops.key"), "--token-file", os.path.join(TMP, "token")]
    cases.append(("tls-auth", values, secret, flags))
    log("Redis processes up: single (password), 3 Redlock primaries, primary + Sentinel, "
        "3-primary Cluster, single for TLS")

    for name, values, secret, flags in cases:
        objects = render(name, values)
        static_checks(name, objects, values, secret)
        log(f"{name}: helm lint + template, rendered objects checked")
        run_pod(name, objects, secret, flags)

    log(f"all {len(cases)} value sets passed")


if __name__ == "__main__":
    try:
        main()
    finally:
        stop_all()
        subprocess.run(["rm", "-rf", TMP])
