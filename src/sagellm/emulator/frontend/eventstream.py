"""AWS event-stream encoding, as SageMaker's `InvokeEndpointWithResponseStream` sends it.

A message is: total length (u32), headers length (u32), CRC32 of those 8 bytes, headers, payload,
CRC32 of everything before it; all big-endian. A header is: name length (u8), name, value type
(7 = string), value length (u16), value. botocore decodes it (`botocore.eventstream`).
"""

from __future__ import annotations

import json
import struct
import zlib

_STRING = 7


def _headers(headers: dict[str, str]) -> bytes:
    out = bytearray()
    for name, value in headers.items():
        n, v = name.encode(), value.encode()
        out += struct.pack("!B", len(n)) + n + struct.pack("!BH", _STRING, len(v)) + v
    return bytes(out)


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message."""
    head = _headers(headers)
    prelude = struct.pack("!II", 12 + len(head) + len(payload) + 4, len(head))
    message = prelude + struct.pack("!I", zlib.crc32(prelude)) + head + payload
    return message + struct.pack("!I", zlib.crc32(message))


_PAYLOAD_PART = {":event-type": "PayloadPart", ":content-type": "application/octet-stream",
                 ":message-type": "event"}


def payload_part(data: bytes) -> bytes:
    """A `PayloadPart` event: a piece of the container's reply (boto3: `event["PayloadPart"]["Bytes"]`)."""
    return encode_message(_PAYLOAD_PART, data)


def exception_event(exception_type: str, message: str, error_code: str | None = None) -> bytes:
    """A modelled exception in the stream (`ModelStreamError`, `InternalStreamFailure`); boto3 raises it."""
    body: dict[str, str] = {"Message": message}
    if error_code is not None:
        body["ErrorCode"] = error_code
    headers = {":exception-type": exception_type, ":content-type": "application/json",
               ":message-type": "exception"}
    return encode_message(headers, json.dumps(body).encode())
