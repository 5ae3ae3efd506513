"""glibc's `ld.so.cache`, parsed from bytes.

The cache maps each library's SONAME (`libcuda.so.1`) to the path of its
SONAME link (`/usr/lib/x86_64-linux-gnu/libcuda.so.1`). glibc has written
three layouts, all read here:

* new (glibc >= 2.32 default): header `glibc-ld.so.cache` + `1.1`, then
  `nlibs` 24-byte entries (flags, key, value, osversion, hwcap); string
  offsets count from the start of this header;
* old (`ld.so-1.7.0`): a 16-byte header, then 12-byte entries (flags, key,
  value) with string offsets counted from the end of the entries;
* compat: an old section whose new section starts at the next 8-byte
  boundary after the old entries; its new section is the one read.

The header's flags say the byte order of the new format (2 little, 3 big);
the old format is always host order, taken here as little endian. The file
comes from the node, so nothing in it is trusted: counts are checked against
the file size, every string must lie inside the file and end with a NUL, and
any inconsistency is a `LdCacheError`, never an IndexError or struct.error.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache"
NEW_VERSION = b"1.1"

# Bigger than any real cache (a desktop distribution's is ~100 KiB) by far;
# a file past this is not a cache, and reading it would only cost memory.
MAX_CACHE_BYTES = 16 * 1024 * 1024

_OLD_HEADER = struct.Struct("<11sxI")  # magic, nlibs
_OLD_ENTRY = struct.Struct("<iII")  # flags, key, value
# magic, version, nlibs, len_strings, flags, extension offset, unused[3]
_NEW_HEADER = {"<": struct.Struct("<17s3sIIB3xI12x"), ">": struct.Struct(">17s3sIIB3xI12x")}
_NEW_ENTRY = {"<": struct.Struct("<iIIIQ"), ">": struct.Struct(">iIIIQ")}

FLAG_TYPE_MASK = 0x00FF
FLAG_ELF_LIBC6 = 0x0003
FLAG_ARCH_MASK = 0xFF00
# Architecture bits of the 64-bit libraries a GPU node can have (x86-64,
# POWER, AArch64); 0 is the plain 32-bit ABI (i386, arm).
ARCH_64BIT = frozenset({0x0300, 0x0500, 0x0A00})
ARCH_32BIT = frozenset({0x0000})


class LdCacheError(Exception):
    """The file is not a readable ld.so cache."""


@dataclass(frozen=True)
class CacheEntry:
    name: str  # the SONAME, e.g. libcuda.so.1
    path: str  # its link, e.g. /usr/lib/x86_64-linux-gnu/libcuda.so.1
    flags: int

    @property
    def is_libc6(self) -> bool:
        return self.flags & FLAG_TYPE_MASK == FLAG_ELF_LIBC6

    @property
    def is_64bit(self) -> bool:
        return self.is_libc6 and self.flags & FLAG_ARCH_MASK in ARCH_64BIT

    @property
    def is_32bit(self) -> bool:
        return self.is_libc6 and self.flags & FLAG_ARCH_MASK in ARCH_32BIT


def _string(data: bytes, offset: int) -> str:
    if not 0 <= offset < len(data):
        raise LdCacheError(f"string offset {offset} outside the file")
    end = data.find(b"\0", offset)
    if end < 0:
        raise LdCacheError(f"string at {offset} has no terminator")
    return os.fsdecode(data[offset:end])


def _entry(data: bytes, flags: int, key: int, value: int) -> CacheEntry:
    return CacheEntry(name=_string(data, key), path=_string(data, value), flags=flags)


def _parse_new(data: bytes, start: int) -> tuple[CacheEntry, ...]:
    little = _NEW_HEADER["<"]
    if len(data) - start < little.size:
        raise LdCacheError("truncated header")
    endian_flag = data[start + 28] & 0x3
    order = ">" if endian_flag == 3 else "<"
    header, entry = _NEW_HEADER[order], _NEW_ENTRY[order]
    magic, version, nlibs, _strings, _flags, _extension = header.unpack_from(data, start)
    if magic != NEW_MAGIC or version != NEW_VERSION:
        raise LdCacheError(f"unknown cache version {version!r}")
    first = start + header.size
    if nlibs > (len(data) - first) // entry.size:
        raise LdCacheError(f"{nlibs} entries do not fit in {len(data)} bytes")
    table = data[start:]
    found = []
    for index in range(nlibs):
        flags, key, value, _os, _hwcap = entry.unpack_from(data, first + index * entry.size)
        found.append(_entry(table, flags, key, value))
    return tuple(found)


def _parse_old(data: bytes) -> tuple[CacheEntry, ...]:
    if len(data) < _OLD_HEADER.size:
        raise LdCacheError("truncated header")
    _magic, nlibs = _OLD_HEADER.unpack_from(data, 0)
    if nlibs > (len(data) - _OLD_HEADER.size) // _OLD_ENTRY.size:
        raise LdCacheError(f"{nlibs} entries do not fit in {len(data)} bytes")
    end = _OLD_HEADER.size + nlibs * _OLD_ENTRY.size
    new_start = (end + 7) & ~7
    if data[new_start : new_start + len(NEW_MAGIC)] == NEW_MAGIC:
        return _parse_new(data, new_start)
    strings = data[end:]
    found = []
    for index in range(nlibs):
        flags, key, value = _OLD_ENTRY.unpack_from(data, _OLD_HEADER.size + index * _OLD_ENTRY.size)
        found.append(_entry(strings, flags, key, value))
    return tuple(found)


def parse_ld_cache(data: bytes) -> tuple[CacheEntry, ...]:
    """Every entry of a cache in any of glibc's layouts, in file order.

    Raises:
        LdCacheError: unknown magic, truncated data or an entry pointing
            outside the file.
    """
    if data.startswith(NEW_MAGIC):
        return _parse_new(data, 0)
    if data.startswith(OLD_MAGIC):
        return _parse_old(data)
    raise LdCacheError("not an ld.so cache (unknown magic)")


def read_ld_cache(path: str) -> tuple[CacheEntry, ...]:
    """Parse the cache file at `path` (a local path in this container).

    Opened without blocking and checked to be a regular file before it is
    read, so a FIFO or a device node planted at that path cannot hang the
    caller.

    Raises:
        LdCacheError: the file cannot be opened or read, is not a regular
            file, is larger than `MAX_CACHE_BYTES`, or does not parse.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise LdCacheError(f"cannot open {path}: {error.strerror or error}") from error
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LdCacheError(f"{path} is not a regular file")
        if info.st_size > MAX_CACHE_BYTES:
            raise LdCacheError(f"{path} is larger than {MAX_CACHE_BYTES} bytes")
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(MAX_CACHE_BYTES + 1)
    except OSError as error:
        raise LdCacheError(f"cannot read {path}: {error.strerror or error}") from error
    finally:
        os.close(fd)
    if len(data) > MAX_CACHE_BYTES:
        raise LdCacheError(f"{path} is larger than {MAX_CACHE_BYTES} bytes")
    return parse_ld_cache(data)
