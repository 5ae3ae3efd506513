"""The ld.so.cache parser: every layout glibc's ldconfig writes, and hostile files.

Real caches come from the system's `ldconfig -r` on a fake driver root, in
its three `--format`s. Hand-made caches come from `encode_new` / `encode_old`
below, written from glibc's `cache.h` layout description (not from the
parser), to reach what ldconfig never writes: big-endian files, lying
counts, offsets outside the file, strings without a terminator.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdi.ldcache import CacheEntry, LdCacheError, parse_ld_cache, read_ld_cache

from .fakeroot import FakeDriverRoot, ldconfig

X86_64 = 0x0303
I386 = 0x0003


def encode_new(entries: list[tuple[int, str, str]], order: str = "<") -> bytes:
    """A `glibc-ld.so.cache1.1` file; string offsets count from the header."""
    header_size, entry_size = 48, 24
    strings = b""
    offsets = []
    base = header_size + entry_size * len(entries)
    for _, key, value in entries:
        key_at = base + len(strings)
        strings += key.encode() + b"\0"
        value_at = base + len(strings)
        strings += value.encode() + b"\0"
        offsets.append((key_at, value_at))
    endian = 3 if order == ">" else 2
    out = struct.pack(
        order + "17s3sIIB3xI12x",
        b"glibc-ld.so.cache",
        b"1.1",
        len(entries),
        len(strings),
        endian,
        0,
    )
    for (flags, _, _), (key_at, value_at) in zip(entries, offsets, strict=True):
        out += struct.pack(order + "iIIIQ", flags, key_at, value_at, 0, 0)
    return out + strings


def encode_old(entries: list[tuple[int, str, str]]) -> bytes:
    """An `ld.so-1.7.0` file; string offsets count from the end of the entries."""
    strings = b""
    packed = b""
    for flags, key, value in entries:
        key_at = len(strings)
        strings += key.encode() + b"\0"
        value_at = len(strings)
        strings += value.encode() + b"\0"
        packed += struct.pack("<iII", flags, key_at, value_at)
    return struct.pack("<11sxI", b"ld.so-1.7.0", len(entries)) + packed + strings


SAMPLE = [
    (X86_64, "libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
    (I386, "libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1"),
    (0x0A03, "libz.so.1", "/lib/aarch64-linux-gnu/libz.so.1"),
    (0x0803, "libx32.so.1", "/libx32/libx32.so.1"),  # x32 ABI: neither list
]


@pytest.mark.parametrize("fmt", ["new", "old", "compat"])
def test_every_ldconfig_format_gives_the_same_entries(fake_root: FakeDriverRoot, fmt: str) -> None:
    cache = f"/etc/ld.so.cache.{fmt}"
    ldconfig(fake_root.root, "-c", fmt, "-C", cache)
    entries = read_ld_cache(str(fake_root.path(cache)))
    reference = read_ld_cache(str(fake_root.path("/etc/ld.so.cache")))
    assert sorted(entries, key=lambda e: e.name) == sorted(reference, key=lambda e: e.name)
    by_name = {entry.name: entry for entry in entries}
    cuda = by_name["libcuda.so.1"]
    assert cuda.path == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    assert cuda.is_64bit
    assert not cuda.is_32bit
    assert "libnvidia-glcore.so.550.54.15" in by_name  # SONAME is the full version


@pytest.mark.parametrize("order", ["<", ">"])
def test_hand_made_new_format_in_both_byte_orders(order: str) -> None:
    entries = parse_ld_cache(encode_new(SAMPLE, order))
    assert [(e.flags, e.name, e.path) for e in entries] == SAMPLE
    assert [(e.is_64bit, e.is_32bit) for e in entries] == [
        (True, False),
        (False, True),
        (True, False),
        (False, False),
    ]


def test_hand_made_old_format() -> None:
    entries = parse_ld_cache(encode_old(SAMPLE))
    assert entries[0] == CacheEntry("libcuda.so.1", SAMPLE[0][2], X86_64)
    assert len(entries) == len(SAMPLE)


def test_an_empty_cache_has_no_entries() -> None:
    assert parse_ld_cache(encode_new([])) == ()
    assert parse_ld_cache(encode_old([])) == ()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(b"", "unknown magic", id="empty"),
        pytest.param(b"\x7fELF" + bytes(60), "unknown magic", id="not-a-cache"),
        pytest.param(b"glibc-ld.so.cache1.1", "truncated header", id="header-cut"),
        pytest.param(b"glibc-ld.so.cache9.9" + bytes(28), "unknown cache version", id="version"),
        pytest.param(encode_new(SAMPLE)[:48] + bytes(10), "entries do not fit", id="entries-cut"),
        pytest.param(b"ld.so-1.7.0", "truncated header", id="old-header-cut"),
        pytest.param(
            struct.pack("<11sxI", b"ld.so-1.7.0", 2**31), "entries do not fit", id="old-count"
        ),
    ],
)
def test_broken_files_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(LdCacheError, match=message):
        parse_ld_cache(data)


def test_lying_count_and_offsets_are_refused() -> None:
    good = bytearray(encode_new(SAMPLE))
    huge = bytearray(good)
    struct.pack_into("<I", huge, 20, 0xFFFFFFFF)  # nlibs
    with pytest.raises(LdCacheError, match="do not fit"):
        parse_ld_cache(bytes(huge))
    outside = bytearray(good)
    struct.pack_into("<I", outside, 48 + 4, len(good) + 100)  # first key offset
    with pytest.raises(LdCacheError, match="outside the file"):
        parse_ld_cache(bytes(outside))
    unterminated = bytes(good).rstrip(b"\0")
    with pytest.raises(LdCacheError, match="no terminator"):
        parse_ld_cache(unterminated)


def test_every_truncation_of_a_real_cache_fails_cleanly(fake_root: FakeDriverRoot) -> None:
    data = fake_root.path("/etc/ld.so.cache").read_bytes()
    for size in range(len(data)):
        try:
            entries = parse_ld_cache(data[:size])
        except LdCacheError:
            continue
        # Only the trailing, unreferenced bytes (glibc's generator string) may go.
        assert entries == parse_ld_cache(data)


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.sampled_from([b"glibc-ld.so.cache1.1", b"ld.so-1.7.0", b""]),
    body=st.binary(max_size=400),
)
def test_random_bytes_never_raise_anything_else(prefix: bytes, body: bytes) -> None:
    with contextlib.suppress(LdCacheError):
        parse_ld_cache(prefix + body)


@settings(max_examples=200, deadline=None)
@given(
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=8),
)
def test_corrupted_caches_never_raise_anything_else(flips: list[tuple[int, int]]) -> None:
    data = bytearray(encode_new(SAMPLE * 4))
    for position, value in flips:
        data[position % len(data)] = value
    try:
        entries = parse_ld_cache(bytes(data))
    except LdCacheError:
        return
    assert all(isinstance(entry.path, str) for entry in entries)


def test_read_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    with pytest.raises(LdCacheError, match="cannot open"):
        read_ld_cache(str(tmp_path / "missing"))
    with pytest.raises(LdCacheError, match="not a regular file"):
        read_ld_cache(str(tmp_path))


def test_read_does_not_block_on_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "ld.so.cache"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            read_ld_cache(str(fifo))
        except LdCacheError as error:
            outcome.append(error)
        else:
            outcome.append(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=5)
    if reader.is_alive():  # unblock the thread before failing
        with open(fifo, "wb"):
            pass
        reader.join(timeout=5)
        pytest.fail("reading a FIFO blocked")
    assert isinstance(outcome[0], LdCacheError)
    assert "not a regular file" in str(outcome[0])


def test_read_refuses_an_oversized_file(tmp_path: Path) -> None:
    big = tmp_path / "ld.so.cache"
    with open(big, "wb") as handle:
        handle.write(encode_new(SAMPLE))
        handle.truncate(17 * 1024 * 1024)  # sparse: costs no disk
    with pytest.raises(LdCacheError, match="larger than"):
        read_ld_cache(str(big))
