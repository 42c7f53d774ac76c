"""Which row groups of a data set may hold a value: min/max statistics and Parquet Bloom
filters, checked from the footers ``discover`` already read.

DuckDB applies the same statistics and Bloom filters when it scans, but to do so it first
parses the footer of every file the scan names; on a data set of many files that costs more
than the row groups it then reads. Checking here first lets a drill-down hand DuckDB only
the few files that may hold the request.

The Bloom filters are Parquet's split-block filters (``parquet-format/BloomFilter.md``): a
value's XXH64 hash (seed 0, over its plain encoding: a string's UTF-8 bytes) picks one
32-byte block, and eight bits of it, one per 32-bit word, set by the hash's low 32 bits
times eight fixed odd constants. A filter whose header is not the plain (block, XXH64,
uncompressed) layout is not interpreted and its row group counts as a possible match.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import pyarrow.parquet as pq
import xxhash

_SALT: Final = (
    0x47B6137B,
    0x44974D91,
    0x8824AD5B,
    0xA2B7289D,
    0x705495C7,
    0x2DF1424B,
    0x9EFC4947,
    0x5C6BFB31,
)
_BLOCK_BYTES: Final = 32
# thrift compact encoding of BloomFilterHeader fields 2-4 (algorithm BLOCK, hash XXHASH,
# compression UNCOMPRESSED: each a union holding an empty struct) and the closing stop
_PLAIN_HEADER_TAIL: Final = bytes.fromhex("1c1c00001c1c00001c1c000000")


@dataclass(frozen=True, slots=True)
class LookupRowGroup:
    """One row group's statistics and Bloom filter location for one lookup column."""

    path: str
    row_group: int
    column_name: str
    min_value: str | None
    max_value: str | None
    bloom_offset: int | None
    bloom_length: int | None
    all_null: bool = False
    """The row group holds no value of the column (its statistics say so): no id matches."""


def lookup_columns(schema: pq.ParquetSchema, columns: Iterable[str]) -> dict[str, int]:
    """Leaf index of each of ``columns`` that ``schema`` has as a top-level column."""
    wanted = set(columns)
    return {schema.column(i).path: i for i in range(len(schema)) if schema.column(i).path in wanted}


def lookup_row_groups(
    path: str, meta: pq.FileMetaData, columns: dict[str, int]
) -> list[LookupRowGroup]:
    """The entries of ``columns`` (from :func:`lookup_columns` of this file's schema) in
    every row group of one file."""
    entries: list[LookupRowGroup] = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for name, i in columns.items():
            chunk = group.column(i)
            stats = chunk.statistics
            low = high = None
            all_null = False
            if stats is not None:
                if stats.has_min_max and isinstance(stats.min, str):
                    low, high = stats.min, stats.max
                all_null = stats.has_null_count and stats.null_count == group.num_rows
            entries.append(
                LookupRowGroup(
                    path,
                    g,
                    name,
                    low,
                    high,
                    chunk.bloom_filter_offset,
                    chunk.bloom_filter_length,
                    all_null,
                )
            )
    return entries


def _plain_header(head: bytes) -> tuple[int, int] | None:
    """``(header length, bit set bytes)`` of a filter that starts with ``head``, or None
    when its header is not the plain layout."""
    if len(head) < 2 or head[0] != 0x15:  # field 1 (numBytes), i32
        return None
    zigzag = shift = 0
    pos = 1
    while pos < len(head) and shift < 35:
        byte = head[pos]
        zigzag |= (byte & 0x7F) << shift
        shift += 7
        pos += 1
        if not byte & 0x80:
            break
    else:
        return None
    num_bytes = (zigzag >> 1) ^ -(zigzag & 1)
    end = pos + len(_PLAIN_HEADER_TAIL)
    if head[pos:end] != _PLAIN_HEADER_TAIL or num_bytes <= 0 or num_bytes % _BLOCK_BYTES:
        return None
    return end, num_bytes


def _block_may_contain(block: bytes, key: int) -> bool:
    """Whether the eight bits ``key`` (a hash's low 32 bits) selects are all set in
    ``block``."""
    for word, salt in enumerate(_SALT):
        bit = ((key * salt) & 0xFFFFFFFF) >> 27
        if not (int.from_bytes(block[4 * word : 4 * word + 4], "little") >> bit) & 1:
            return False
    return True


def filter_may_contain(fd: int, offset: int, length: int, value: str) -> bool:
    """Whether the Bloom filter at ``offset`` (``length`` bytes with its header) in the open
    file ``fd`` admits ``value``; True when it cannot be read or interpreted. Only the
    header and the one 32-byte block the value hashes to are read."""
    try:
        parsed = _plain_header(os.pread(fd, min(length, 32), offset))
        if parsed is None or sum(parsed) != length:
            return True
        header, num_bytes = parsed
        digest = xxhash.xxh64_intdigest(value.encode("utf-8"), seed=0)
        block = (((digest >> 32) * (num_bytes // _BLOCK_BYTES)) >> 32) * _BLOCK_BYTES
        data = os.pread(fd, _BLOCK_BYTES, offset + header + block)
    except OSError:
        return True
    return len(data) != _BLOCK_BYTES or _block_may_contain(data, digest & 0xFFFFFFFF)


def files_that_may_hold(
    groups: Iterable[tuple[str, int | None, int | None]], value: str
) -> list[str]:
    """The files of ``(path, bloom offset, bloom length)`` row groups (already within
    min/max) whose Bloom filter admits ``value``: a row group without a filter, or whose
    file cannot be opened, is kept (DuckDB then reads it and decides)."""
    by_path: dict[str, list[tuple[int, int]]] = {}
    keep: set[str] = set()
    for path, offset, length in groups:
        if offset is None or not length:
            keep.add(path)
        else:
            by_path.setdefault(path, []).append((offset, length))
    for path, filters in by_path.items():
        if path in keep:
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            keep.add(path)
            continue
        try:
            if any(filter_may_contain(fd, o, n, value) for o, n in filters):
                keep.add(path)
        finally:
            os.close(fd)
    return sorted(keep)
