"""Tokens and TLS from Python: `connect()` builds the channel every call takes."""

import hashlib
import signal
import subprocess

import grpc
import pytest

from leasehold_client import connect, lease

from conftest import BINARY, free_port


def _start(args):
    proc = subprocess.Popen([BINARY, "serve", "--listen", "127.0.0.1:0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    assert line.startswith("leasehold: listening on "), line
    return proc, line.split()[-1]


@pytest.fixture
def auth_server(redis_port, tmp_path):
    digest = hashlib.sha256(b"py-secret").hexdigest()
    grants = tmp_path / "auth.toml"
    grants.write_text(f'[[grant]]\nname = "py"\ntoken_sha256 = "{digest}"\nrole = "hold"\n'
                      'locks = ["py/"]\n')
    proc, addr = _start(["--redis", f"redis://127.0.0.1:{redis_port}", "--auth-file", str(grants)])
    yield addr
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=15)


def test_a_token_opens_its_prefixes_and_nothing_else(auth_server):
    with connect(auth_server, token="py-secret") as channel:
        with lease("py/job", channel=channel) as held:
            assert held.fencing_token > 0
        with pytest.raises(grpc.RpcError) as refused:
            with lease("other/job", channel=channel):
                pass
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with connect(auth_server) as anonymous:
        with pytest.raises(grpc.RpcError) as refused:
            with lease("py/job", channel=anonymous):
                pass
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def test_tls_with_the_server_ca(redis_port, tmp_path):
    ca_key, ca, key, csr, cert = (str(tmp_path / n) for n in
                                  ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", ca_key, "-out", ca, "-subj", "/CN=py test ca", "-days", "1")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key, "-out", csr, "-subj", "/CN=localhost")
    ext = tmp_path / "ext.cnf"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
             "-out", cert, "-days", "1", "-extfile", str(ext))
    proc, addr = _start(["--redis", f"redis://127.0.0.1:{redis_port}",
                         "--tls-cert", cert, "--tls-key", key])
    try:
        port = addr.rsplit(":", 1)[1]
        with open(ca, "rb") as f:
            root = f.read()
        with connect(f"localhost:{port}", root_certificates=root) as channel:
            with lease("tls/job", channel=channel) as held:
                assert held.fencing_token > 0
        # A list (here a name whose first server is down): checked against its first name.
        with connect(f"localhost:{free_port()},localhost:{port}",
                     root_certificates=root) as channel:
            with lease("tls/job", channel=channel) as held:
                assert held.fencing_token > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


def test_the_asyncio_client_passes_a_token_too(auth_server):
    import asyncio

    from leasehold_client import aio as lh_aio

    async def main():
        async with lh_aio.connect(auth_server, token="py-secret") as channel:
            async with lh_aio.lease("py/async", channel=channel) as held:
                assert held.fencing_token > 0
            with pytest.raises(grpc.RpcError) as refused:
                async with lh_aio.lease("other/async", channel=channel):
                    pass
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED

    asyncio.run(main())
