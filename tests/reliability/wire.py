"""Bytes the protobuf library refuses to produce: hand-encoded and damaged messages.

The generated classes only build well-formed messages (valid UTF-8, in-range
integers), but a peer can put anything on the wire. These encoders write the
protobuf wire format directly so the suites can send what a buggy or hostile
client would: strings that are not UTF-8, sizes outside int32, lengths that
run past the end, fields of the wrong type. `GARBAGE` is what lands on the
socket from something that does not speak gRPC at all.
"""

from __future__ import annotations

VARINT, LENGTH_DELIMITED, FIXED64 = 0, 2, 1


def varint(value: int) -> bytes:
    """Protobuf varint; negative numbers as their 64-bit two's complement (ten bytes)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def key(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def delimited(number: int, payload: bytes) -> bytes:
    return key(number, LENGTH_DELIMITED) + varint(len(payload)) + payload


def allocate_request(containers: list[list[bytes]]) -> bytes:
    """`AllocateRequest` with raw bytes as device IDs (field 1 of each container)."""
    return b"".join(
        delimited(1, b"".join(delimited(1, device) for device in devices)) for devices in containers
    )


def preferred_request(available: list[bytes], required: list[bytes], size: int) -> bytes:
    """`PreferredAllocationRequest` with one container; `size` may be any 64-bit value."""
    body = b"".join(delimited(1, device) for device in available)
    body += b"".join(delimited(2, device) for device in required)
    body += key(3, VARINT) + varint(size)
    return delimited(1, body)


ALLOCATE_MALFORMED: dict[str, bytes] = {
    "id-not-utf8": allocate_request([[b"GPU-\xff\xfe"]]),
    "id-lone-surrogate": allocate_request([[b"GPU-\xed\xa0\x80"]]),
    "id-overlong-nul": allocate_request([[b"\xc0\x80"]]),
    "truncated": allocate_request([[b"GPU-0000"]])[:-3],
    "length-past-end": key(1, LENGTH_DELIMITED) + varint(1 << 20) + b"\x0a\x01x",
    "endless-varint": key(1, VARINT) + b"\xff" * 11,
    # Not here: a known field sent with another wire type. Protobuf keeps it as
    # an unknown field and the request parses (as an empty one); a newer
    # kubelet's extra fields must keep parsing too, so this is not refused.
    "bare-0xff": b"\xff" * 16,
}

PREFERRED_MALFORMED: dict[str, bytes] = {
    "available-not-utf8": preferred_request([b"\xff"], [], 1),
    "required-not-utf8": preferred_request([], [b"\xfe\xff"], 1),
    "truncated": preferred_request([b"GPU-0000"], [], 1)[:-2],
}

# Sizes outside int32: the parser keeps the low 32 bits, as the kubelet's would.
OUT_OF_RANGE_SIZES = [2**31, 2**32 + 1, 2**63 - 1, -(2**63)]

HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_SETTINGS_EMPTY = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"

GARBAGE: dict[str, bytes] = {
    "nothing": b"",
    "http1-get": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "random": bytes(range(256)) * 4,
    "half-preface": HTTP2_PREFACE[:10],
    "preface-then-junk": HTTP2_PREFACE + b"\xde\xad\xbe\xef" * 64,
    # A frame header announcing 16 MiB of payload that never comes.
    "huge-frame": HTTP2_PREFACE + _SETTINGS_EMPTY + b"\xff\xff\xff\x00\x00\x00\x00\x00\x01",
    # HEADERS on stream 1 whose HPACK block is nonsense.
    "bad-hpack": HTTP2_PREFACE
    + _SETTINGS_EMPTY
    + b"\x00\x00\x04\x01\x04\x00\x00\x00\x01\xff\xff\xff\xff",
    # A HEADERS frame on an even (server-initiated) stream id: a protocol error.
    "even-stream": HTTP2_PREFACE + _SETTINGS_EMPTY + b"\x00\x00\x01\x01\x04\x00\x00\x00\x02\x82",
}
