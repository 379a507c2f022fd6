#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets (fuzz/seeds/<target>/), a few well-formed requests
for the fuzzer to start from. Protobuf encoded by hand: field numbers from proto/leasehold/."""
import pathlib
import struct

here = pathlib.Path(__file__).parent


def varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def num(field, n):
    return varint(field << 3) + varint(n)


def length(field, data):
    data = data.encode() if isinstance(data, str) else data
    return varint(field << 3 | 2) + varint(len(data)) + data


TOKEN = "0123456789abcdef0123456789abcdef"
# LeaseAcquire: name 1, ttl_ms 2, wait_ms 3, holder 4, fair 5, limit 6, mode 7, resume_token 8,
# resume_grace_ms 9.
acquire = (length(1, "job-17") + num(2, 10_000) + num(3, 5_000) + length(4, "host-1 pid 42")
           + num(9, 10_000))
semaphore = length(1, "{x}:*é") + num(2, 100) + num(5, 0) + num(6, 3)
shared = length(1, "a/b@c.d") + num(2, 3_600_000) + num(7, 2)
resume = length(1, "job-17") + num(2, 10_000) + length(8, TOKEN) + num(9, 10_000)
# CampaignStart: election 1, value 2, ttl_ms 3, resume_token 4, resume_grace_ms 5.
start = length(1, "leader") + length(2, b"10.0.0.1:8080") + num(3, 3_000) + num(5, 3_000)

requests = {
    "lease_acquire": length(1, acquire),  # LeaseRequest.acquire
    "lease_semaphore": length(1, semaphore),
    "lease_shared": length(1, shared),
    "lease_resume": length(1, resume),
    "lease_release": length(2, b""),  # LeaseRequest.release
    "acquire": acquire[: -len(num(9, 10_000))],  # AcquireRequest has no field 9
    "extend": length(1, "job-17") + length(2, TOKEN) + num(3, 10_000),
    "list": num(1, 5),
    "campaign_start": length(1, start),  # CampaignRequest.start
    "campaign_proclaim": length(2, length(1, b"10.0.0.2:8080")),
    "campaign_resign": length(3, b""),
}


def frame(message):
    return b"\0" + struct.pack(">I", len(message)) + message


# codec: a byte picking the request type (fuzz/src/lib.rs, for_each_request's order), a byte
# for the chunk size (0: one chunk), then the body.
LEASE, ACQUIRE, CAMPAIGN = 0, 1, 6
bodies = {
    "lease_stream": (LEASE, 0, frame(requests["lease_acquire"]) + frame(requests["lease_release"])),
    "lease_stream_chunked": (LEASE, 3, frame(requests["lease_acquire"]) + frame(requests["lease_release"])),
    "campaign_stream": (CAMPAIGN, 7, frame(requests["campaign_start"]) + frame(requests["campaign_proclaim"])
                        + frame(requests["campaign_resign"])),
    "acquire_unary": (ACQUIRE, 0, frame(requests["acquire"])),
    "oversized": (LEASE, 0, b"\0" + struct.pack(">I", 70_000) + requests["lease_acquire"]),
}

for name, data in requests.items():
    path = here / "request_spec" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
for name, (kind, chunk, body) in bodies.items():
    path = here / "codec" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(bytes([kind, chunk]) + body)
