"""Channels for the threaded client: ``connect`` (TLS, a bearer token, channel options) and the
channel a call opens for itself when given none."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence, Tuple

import grpc

from .options import DEFAULT_SERVER, channel_args, credentials


class BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                   grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call (also on plaintext channels, where
    grpc's own call credentials are refused)."""

    def __init__(self, token: str):
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, details):
        metadata = [*(details.metadata or ()), self._header]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._with_token(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._with_token(details), requests)


def connect(server: str = DEFAULT_SERVER, *, token: Optional[str] = None,
            root_certificates: Optional[bytes] = None, private_key: Optional[bytes] = None,
            certificate_chain: Optional[bytes] = None, tls: Optional[bool] = None,
            options: Sequence[Tuple[str, Any]] = ()) -> grpc.Channel:
    """A channel to Leasehold servers, for the `channel=` argument of every call.

    `server` as for every call: one server, a comma-separated list, a name with several
    addresses, or a gRPC target. TLS when `tls` is true, or when any certificate is given:
    `root_certificates` (PEM) to trust for the server, `private_key` and `certificate_chain`
    (PEM) for mutual TLS. `token` is sent as a bearer token with every call (the server's
    --auth-file grants it). `options`: more gRPC channel arguments.
    """
    target, channel_options = channel_args(server, options)
    secure = credentials(tls, root_certificates, private_key, certificate_chain)
    if secure is not None:
        channel = grpc.secure_channel(target, secure, options=channel_options)
    else:
        channel = grpc.insecure_channel(target, options=channel_options)
    if token is not None:
        channel = grpc.intercept_channel(channel, BearerToken(token))
    return channel


@contextmanager
def own_channel(server: str, channel: Optional[grpc.Channel]) -> Iterator[grpc.Channel]:
    """The caller's channel, or one of our own for the block."""
    if channel is not None:
        yield channel
        return
    target, options = channel_args(server, ())
    own = grpc.insecure_channel(target, options=options)
    try:
        yield own
    finally:
        own.close()

