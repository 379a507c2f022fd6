"""What a caller's options become: the gRPC target and channel arguments for ``server=``, TLS
credentials, and the requests' names and numbers (milliseconds, the resume grace)."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from typing import Any, List, Optional, Sequence, Tuple, Union

import grpc
from leasehold.v1 import lock_pb2

#: Where the server is, unless told: ``LEASEHOLD_SERVER`` (as the CLI reads it) or the default.
#: Like ``server=``, it may list several servers, separated by commas.
DEFAULT_SERVER = os.environ.get("LEASEHOLD_SERVER", "127.0.0.1:50051").removeprefix("http://")

#: gRPC resolver schemes: a ``server`` starting with one is handed to gRPC as it is.
SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:", "xds:",
           "google-c2p:")
#: Reconnect soon after a server comes back (gRPC's defaults start at 1 s and grow to 2 min).
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 2000)]

_log = logging.getLogger("leasehold_client")


def millis(seconds: float) -> int:
    return int(seconds * 1000)


def grace(ttl: float, resume_grace: Optional[float], auto_resume: bool) -> float:
    """The grace to ask for: the caller's, else the TTL when resuming by itself, else none."""
    if resume_grace is not None:
        return resume_grace
    return ttl if auto_resume else 0.0


def lock_names(name: Optional[str], names: Optional[Sequence[str]]) -> Tuple[str, ...]:
    """Every name a lock is asked for, from ``name`` (one) or ``names`` (several, all or none,
    the first sent as ``name`` and the rest as ``more_names``): one or the other."""
    if names is None:
        if name is None:
            raise TypeError("a lock needs a name (name=) or names (names=[...])")
        return (name,)
    if name is not None:
        raise TypeError("give a lock name or names=[...], not both")
    if isinstance(names, str):
        raise TypeError("names= takes a list of names")
    if not names:
        raise ValueError("names= is empty")
    return tuple(names)


def acquire_request(names: Sequence[str], ttl: float, wait: float, holder: str, fair: bool,
                    limit: int, shared: bool, resume_grace: float, resume_token: str,
                    lock_delay: float, max_hold: Optional[float]) -> lock_pb2.LeaseAcquire:
    name, *more_names = names
    return lock_pb2.LeaseAcquire(
        name=name, more_names=more_names, ttl_ms=millis(ttl), wait_ms=millis(wait),
        holder=holder, fair=fair, limit=limit, mode=lease_mode(shared),
        resume_grace_ms=millis(resume_grace), resume_token=resume_token,
        lock_delay_ms=millis(lock_delay), max_hold_ms=millis(max_hold or 0))


def lease_mode(shared: bool) -> int:
    return lock_pb2.LEASE_MODE_SHARED if shared else lock_pb2.LEASE_MODE_EXCLUSIVE


def host_port(entry: str) -> Tuple[str, str]:
    host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"server {entry!r}: expected host:port")
    return host.removeprefix("[").removesuffix("]"), port


def grpc_target(server: str) -> Tuple[str, List[Tuple[str, Any]]]:
    """The gRPC target for ``server``, and the channel options it needs.

    A gRPC target (``dns:``, ``ipv4:``, ``unix:``...) is used as it is, and a single
    ``host:port`` too (gRPC's DNS resolver gives ``pick_first`` every address of the name). A
    comma-separated list becomes one ``ipv4:``/``ipv6:`` target of every address (names are
    resolved now), so ``pick_first`` moves between them; its first entry is the authority (for
    TLS, certificates must be valid for that name).
    """
    server = server.strip()
    if server.startswith(SCHEMES):
        return server, []
    entries = [entry.strip().removeprefix("http://") for entry in server.split(",")]
    entries = [entry for entry in entries if entry]
    if not entries:
        raise ValueError(f"no server address in {server!r}")
    if len(entries) == 1:
        return entries[0], []
    addresses: List[Tuple[Union[ipaddress.IPv4Address, ipaddress.IPv6Address], str]] = []
    for entry in entries:
        host, port = host_port(entry)
        try:
            found = [ipaddress.ip_address(host)]
        except ValueError:
            try:
                infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
            except OSError as error:
                _log.warning("server %s left out: %s", entry, error)
                continue
            found = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
        for address in found:
            if (address, port) not in addresses:
                addresses.append((address, port))
    if not addresses:
        raise ValueError(f"no address found for any of {server!r}")
    if all(address.version == 4 for address, _ in addresses):
        target = "ipv4:" + ",".join(f"{address}:{port}" for address, port in addresses)
    else:  # IPv4 ones as IPv4-mapped IPv6 addresses: one target holds one family
        target = "ipv6:" + ",".join(
            f"[{address if address.version == 6 else '::ffff:' + str(address)}]:{port}"
            for address, port in addresses)
    return target, [("grpc.default_authority", entries[0])]


def credentials(tls: Optional[bool], root_certificates: Optional[bytes],
                private_key: Optional[bytes], certificate_chain: Optional[bytes]
                ) -> Optional[grpc.ChannelCredentials]:
    """TLS credentials when `tls` is true, or when any certificate is given; else None."""
    secure = tls if tls is not None else any(
        part is not None for part in (root_certificates, private_key, certificate_chain))
    if not secure:
        return None
    return grpc.ssl_channel_credentials(root_certificates=root_certificates,
                                        private_key=private_key,
                                        certificate_chain=certificate_chain)


def channel_args(server: str, options: Sequence[Tuple[str, Any]]
                 ) -> Tuple[str, List[Tuple[str, Any]]]:
    """The target and options of a channel to ``server``: ours, then the caller's (which win)."""
    target, needed = grpc_target(server)
    given = {key for key, _ in options}
    ours = [option for option in CHANNEL_OPTIONS + needed if option[0] not in given]
    return target, [*ours, *options]

