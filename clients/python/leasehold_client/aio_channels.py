"""Channels for asyncio: ``connect`` (the options of ``leasehold_client.connect``) and the
channel a call opens for itself when given none."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Optional, Sequence, Tuple

from grpc import aio

from .options import DEFAULT_SERVER, channel_args, credentials


class _WithToken:
    """Adds ``authorization: Bearer <token>`` to a call's metadata."""

    def __init__(self, token: str):
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, details):
        metadata = aio.Metadata(*(details.metadata or aio.Metadata()).items(), self._header)
        return details._replace(metadata=metadata)


# One class per kind of call: grpc.aio files each interceptor under the first kind it is.
class _TokenUnaryUnary(_WithToken, aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, details, request):
        return await continuation(self._with_token(details), request)


class _TokenUnaryStream(_WithToken, aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, details, request):
        return await continuation(self._with_token(details), request)


class _TokenStreamStream(_WithToken, aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, details, request_iterator):
        return await continuation(self._with_token(details), request_iterator)


def connect(server: str = DEFAULT_SERVER, *, token: Optional[str] = None,
            root_certificates: Optional[bytes] = None, private_key: Optional[bytes] = None,
            certificate_chain: Optional[bytes] = None, tls: Optional[bool] = None,
            options: Sequence[Tuple[str, Any]] = ()) -> aio.Channel:
    """An asyncio channel to Leasehold servers, for the ``channel=`` argument of every call:
    the same options as :func:`leasehold_client.connect`."""
    interceptors = None
    if token is not None:
        interceptors = [kind(token) for kind in (_TokenUnaryUnary, _TokenUnaryStream,
                                                 _TokenStreamStream)]
    target, channel_options = channel_args(server, options)
    secure = credentials(tls, root_certificates, private_key, certificate_chain)
    if secure is not None:
        return aio.secure_channel(target, secure, options=channel_options,
                                  interceptors=interceptors)
    return aio.insecure_channel(target, options=channel_options, interceptors=interceptors)


@asynccontextmanager
async def own_channel(server: str, channel: Optional[aio.Channel]) -> AsyncIterator[aio.Channel]:
    if channel is not None:
        yield channel
        return
    target, options = channel_args(server, ())
    own = aio.insecure_channel(target, options=options)
    try:
        yield own
    finally:
        await own.close()

