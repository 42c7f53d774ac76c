"""Bounds of one ingest run, from arguments, ``--max-*`` flags or ``RETRYSCOPE_INGEST_*``.

Every bound keeps memory and time finite on hostile input (a decompression bomb, a line
without an end, nesting a parser cannot hold). A bound that is hit is named in the problem
it reports, with the flag and the variable that raise it; what was read before it is kept.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from retryscope.instrumentation._settings import meta, positive_float, positive_int, read_env

ENV_PREFIX: Final = "RETRYSCOPE_INGEST_"
RATIO_GRACE_BYTES: Final = 64 << 20
"""The decompression ratio is checked once a source has given this much data: small,
highly compressible files are legitimate."""

MAX_JSON_DEPTH: Final = 500
"""The highest depth bound accepted: Python's JSON decoder recurses once per level (its
limit is about 1,000) and Arrow's overflows its native stack some ten thousand deep."""

_SIZE: Final = re.compile(r"^\s*(\d+)\s*(|k|m|g|t|kb|mb|gb|tb|kib|mib|gib|tib)\s*$", re.I)
_UNITS: Final = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DECIMAL: Final = {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_size(text: str) -> int:
    """Bytes from ``123``, ``64MiB``, ``64M`` (binary) or ``64MB`` (decimal); positive."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"expected a size such as 1048576, 64MiB or 2GB, got {text!r}")
    number, unit = int(match[1]), match[2].lower()
    value = number * (_DECIMAL[unit] if unit in _DECIMAL else _UNITS[unit[:1]])
    if value < 1:
        raise ValueError("must be a positive size")
    return value


def _meta(doc: str, parse: Any, flag: str) -> dict[str, Any]:
    return {**meta(doc, parse), "flag": flag}


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """The bounds; each field's ``doc`` metadata says what it bounds."""

    max_decompressed_bytes: int = field(
        default=4 << 30,
        metadata=_meta(
            "Most bytes one compressed source may decompress to (gzip, zstd, and the zstd "
            "frames of the file exporter); the rest of the source is skipped.",
            parse_size,
            "--max-decompressed-bytes",
        ),
    )
    max_ratio: float = field(
        default=200.0,
        metadata=_meta(
            "Most decompressed bytes per compressed byte, checked once a source has given "
            f"{RATIO_GRACE_BYTES >> 20} MiB (OTLP JSON compresses about 15-25 times).",
            positive_float,
            "--max-ratio",
        ),
    )
    max_message_bytes: int = field(
        default=16 << 20,
        metadata=_meta(
            "Longest JSON line, JSON document or protobuf message (framed or whole); a longer "
            "one is skipped without being held in memory. At least 1 MiB. Peak memory grows "
            "with it: a line the reference decoder must hold as Python objects takes up to "
            "about 40 times its size.",
            parse_size,
            "--max-message-bytes",
        ),
    )
    max_json_depth: int = field(
        default=64,
        metadata=_meta(
            "Deepest nesting of arrays and objects in a JSON line or document (OTLP needs "
            "13, plus 4 per nested attribute value); a deeper one is skipped.",
            positive_int,
            "--max-json-depth",
        ),
    )

    def __post_init__(self) -> None:
        if self.max_message_bytes < 1 << 20:
            raise ValueError(
                f"{self.variable('max_message_bytes')} / --max-message-bytes must be at least "
                f"1MiB, got {self.max_message_bytes}"
            )
        if self.max_decompressed_bytes < 1 or not self.max_ratio > 0:
            raise ValueError("max_decompressed_bytes and max_ratio must be positive")
        if not 1 <= self.max_json_depth <= MAX_JSON_DEPTH:
            raise ValueError(
                f"{self.variable('max_json_depth')} / --max-json-depth must be between 1 and "
                f"{MAX_JSON_DEPTH} (deeper nesting overflows the parsers), got "
                f"{self.max_json_depth}"
            )

    @staticmethod
    def variable(name: str) -> str:
        """The environment variable of field ``name``."""
        return ENV_PREFIX + name.upper()

    @classmethod
    def flag(cls, name: str) -> str:
        """The command-line flag of field ``name``."""
        return str(cls.__dataclass_fields__[name].metadata["flag"])

    @classmethod
    def named(cls, name: str) -> str:
        """How a problem names the bound that was hit: the flag and the variable."""
        return f"{cls.flag(name)} / {cls.variable(name)}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> IngestLimits:
        """The bounds the ``RETRYSCOPE_INGEST_*`` variables describe, with ``overrides``
        (non-None keyword values, e.g. from flags) on top. A malformed value raises
        ``ValueError`` naming the variable."""
        values = read_env(cls, os.environ if environ is None else environ, cls.variable)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


class LimitExceeded(Exception):
    """A source hit a bound; the message names the bound, its flag and its variable."""
