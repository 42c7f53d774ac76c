"""Configuration of the Parquet writer, from arguments or ``RETRYSCOPE_PARQUET_*`` variables.

Zero-code setups (``OTEL_TRACES_EXPORTER=retryscope_parquet opentelemetry-instrument ...``)
construct the exporter without arguments, so every setting has an environment variable:

- ``RETRYSCOPE_PARQUET_DIR`` (``retryscope-data``): root directory of the data set.
- ``RETRYSCOPE_PARQUET_PARTITIONING`` (``hour``): ``hour`` (``date=/hour=``), ``day``
  (``date=``) or ``none``.
- ``RETRYSCOPE_PARQUET_ROTATE_ROWS`` (200000): a file is cut at this many rows,
- ``RETRYSCOPE_PARQUET_ROTATE_BYTES`` (268435456): ... or at this many bytes of buffered
  Arrow data (before compression),
- ``RETRYSCOPE_PARQUET_ROTATE_AGE_S`` (60): ... or when the oldest buffered span is this old.
- ``RETRYSCOPE_PARQUET_ROW_GROUP_ROWS`` (100000): rows per Parquet row group.
- ``RETRYSCOPE_PARQUET_BUFFER_ROWS`` (1000000): rows kept in memory while writes fail.
- ``RETRYSCOPE_PARQUET_RETRY_S`` (1): least time between two failed write attempts.
- ``RETRYSCOPE_PARQUET_COMPRESSION`` (``zstd``): Parquet codec.
- ``RETRYSCOPE_PARQUET_FILE_MODE`` (``600``) / ``RETRYSCOPE_PARQUET_DIR_MODE`` (``700``):
  permissions (octal) of new files and directories, applied whatever the umask.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Final

ENV_PREFIX: Final = "RETRYSCOPE_PARQUET_"


class Partitioning(enum.StrEnum):
    """Hive partition directories under the data set root, from each span's start time (UTC)."""

    HOUR = "hour"  # date=YYYY-MM-DD/hour=HH/
    DAY = "day"  # date=YYYY-MM-DD/
    NONE = "none"  # files directly under the root


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be a positive integer")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("must be a positive number")
    return value


def _mode(text: str) -> int:
    value = int(text, 8)
    if not 0 <= value <= 0o777:
        raise ValueError("must be an octal permission between 000 and 777")
    return value


@dataclass(frozen=True, slots=True)
class ExportConfig:
    """Everything the Parquet writer needs to know; see the module docstring for meanings."""

    directory: Path = Path("retryscope-data")
    partitioning: Partitioning = Partitioning.HOUR
    rotate_rows: int = 200_000
    rotate_bytes: int = 256 * 1024 * 1024
    rotate_age_s: float = 60.0
    row_group_rows: int = 100_000
    buffer_rows: int = 1_000_000
    retry_s: float = 1.0
    compression: str = "zstd"
    file_mode: int = 0o600
    dir_mode: int = 0o700

    def __post_init__(self) -> None:
        if self.rotate_rows < 1 or self.rotate_bytes < 1 or self.row_group_rows < 1:
            raise ValueError("rotate_rows, rotate_bytes and row_group_rows must be >= 1")
        if not self.rotate_age_s > 0 or self.retry_s < 0:
            raise ValueError("rotate_age_s must be > 0 and retry_s >= 0")
        if self.buffer_rows < self.rotate_rows:
            raise ValueError(
                f"buffer_rows ({self.buffer_rows}) must be >= rotate_rows ({self.rotate_rows})"
            )
        if not (0 <= self.file_mode <= 0o777 and 0 <= self.dir_mode <= 0o777):
            raise ValueError("file_mode and dir_mode must be permissions between 000 and 777")

    def with_overrides(self, **overrides: Any) -> ExportConfig:
        """A copy with the given (non-None) fields replaced."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ExportConfig:
        """The configuration the ``RETRYSCOPE_PARQUET_*`` variables describe.

        A malformed value raises ``ValueError`` naming the variable and the problem.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = ENV_PREFIX + ("DIR" if f.name == "directory" else f.name.upper())
            text = env.get(name, "").strip()
            if not text:
                continue
            try:
                values[f.name] = _PARSERS[f.name](text)
            except ValueError as exc:
                raise ValueError(f"{name}={text!r}: {exc}") from None
        return cls(**values)


_PARSERS: Final[dict[str, Callable[[str], Any]]] = {
    "directory": Path,
    "partitioning": Partitioning,
    "rotate_rows": _positive_int,
    "rotate_bytes": _positive_int,
    "rotate_age_s": _positive_float,
    "row_group_rows": _positive_int,
    "buffer_rows": _positive_int,
    "retry_s": float,
    "compression": str,
    "file_mode": _mode,
    "dir_mode": _mode,
}
