"""Configuration of the Parquet writer, from arguments or ``RETRYSCOPE_PARQUET_*`` variables.

Zero-code setups (``OTEL_TRACES_EXPORTER=retryscope_parquet opentelemetry-instrument ...``)
construct the exporter without arguments, so every setting has an environment variable.
One name per setting: the :class:`ExportConfig` field is also the exporter's keyword argument,
and its variable is ``RETRYSCOPE_PARQUET_`` + the name in capitals (``directory`` is
``RETRYSCOPE_PARQUET_DIR``). Each field's metadata holds its meaning and how its variable is
read and written; ``docs/reference/export-config.md`` is generated from it.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from retryscope.instrumentation._settings import boolean, read_env, write_env
from retryscope.instrumentation._settings import meta as _meta
from retryscope.instrumentation._settings import positive_float as _positive_float
from retryscope.instrumentation._settings import positive_int as _positive_int

ENV_PREFIX: Final = "RETRYSCOPE_PARQUET_"


class Partitioning(enum.StrEnum):
    """Hive partition directories under the data set root, from each span's start time (UTC)."""

    HOUR = "hour"  # date=YYYY-MM-DD/hour=HH/
    DAY = "day"  # date=YYYY-MM-DD/
    NONE = "none"  # files directly under the root


def _mode(text: str) -> int:
    value = int(text, 8)
    if not 0 <= value <= 0o777:
        raise ValueError("must be an octal permission between 000 and 777")
    return value


def _boolean_text(value: Any) -> str:
    return "true" if value else "false"


def _octal(value: Any) -> str:
    return f"{value:o}"


@dataclass(frozen=True, slots=True)
class ExportConfig:
    """Everything the Parquet writer needs to know; each field's ``doc`` metadata says what."""

    directory: Path = field(
        default=Path("retryscope-data"), metadata=_meta("Root directory of the data set.", Path)
    )
    partitioning: Partitioning = field(
        default=Partitioning.HOUR,
        metadata=_meta(
            "Hive partitions by span start time (UTC): `hour` (`date=/hour=`), `day` "
            "(`date=`) or `none`.",
            Partitioning,
        ),
    )
    rotate_rows: int = field(
        default=200_000, metadata=_meta("A file is cut at this many rows ...", _positive_int)
    )
    rotate_bytes: int = field(
        default=256 * 1024 * 1024,
        metadata=_meta(
            "... or at this many bytes of buffered Arrow data (before compression) ...",
            _positive_int,
        ),
    )
    rotate_age_s: float = field(
        default=60.0,
        metadata=_meta(
            "... or when the oldest buffered span is this many seconds old (a helper thread "
            "cuts the file even when no new spans arrive).",
            _positive_float,
        ),
    )
    row_group_rows: int = field(
        default=100_000, metadata=_meta("Rows per Parquet row group.", _positive_int)
    )
    buffer_rows: int = field(
        default=1_000_000,
        metadata=_meta(
            "Rows kept in memory while writes fail (at least `rotate_rows`); rows pushed out "
            "are counted and written as a `buffer_full` telemetry gap.",
            _positive_int,
        ),
    )
    retry_s: float = field(
        default=1.0,
        metadata=_meta("Least time in seconds between two failed write attempts.", float),
    )
    compression: str = field(default="zstd", metadata=_meta("Parquet compression codec.", str))
    file_mode: int = field(
        default=0o600,
        metadata=_meta(
            "Permissions (octal) of new files, applied whatever the umask.", _mode, _octal
        ),
    )
    dir_mode: int = field(
        default=0o700,
        metadata=_meta(
            "Permissions (octal) of new directories, applied whatever the umask.", _mode, _octal
        ),
    )
    durable: bool = field(
        default=True,
        metadata=_meta(
            "Append every accepted batch to a hidden segment (`.retryscope-segments/`) before "
            "`export` returns, so a crash loses no accepted span (recovered into Parquet by the "
            "next exporter on the directory or `retryscope recover`); `false`: memory only "
            "until a file is cut.",
            boolean,
            _boolean_text,
        ),
    )
    fsync_s: float = field(
        default=1.0,
        metadata=_meta(
            "Most seconds between two `fsync`s of the open segment (0: after every batch); "
            "bounds what a power loss, not a process crash, can take.",
            float,
        ),
    )
    keep_content: bool = field(
        default=False,
        metadata=_meta(
            "Keep prompt, completion and tool text that GenAI instrumentations put in span and "
            "event attributes (`gen_ai.input.messages`, `input.value`, `gen_ai.prompt.0.content`, "
            '...); `false`: each such value is written as `"REDACTED"`, its key kept '
            "(docs/guides/threat-model.md lists the keys).",
            boolean,
            _boolean_text,
        ),
    )

    def __post_init__(self) -> None:
        if self.rotate_rows < 1 or self.rotate_bytes < 1 or self.row_group_rows < 1:
            raise ValueError("rotate_rows, rotate_bytes and row_group_rows must be >= 1")
        if not self.rotate_age_s > 0 or self.retry_s < 0 or not self.fsync_s >= 0:
            raise ValueError("rotate_age_s must be > 0, retry_s >= 0 and fsync_s >= 0")
        if self.buffer_rows < self.rotate_rows:
            raise ValueError(
                f"buffer_rows ({self.buffer_rows}) must be >= rotate_rows ({self.rotate_rows})"
            )
        if not (0 <= self.file_mode <= 0o777 and 0 <= self.dir_mode <= 0o777):
            raise ValueError("file_mode and dir_mode must be permissions between 000 and 777")

    def with_overrides(self, **overrides: Any) -> ExportConfig:
        """A copy with the given (non-None) fields replaced."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    @staticmethod
    def variable(name: str) -> str:
        """The environment variable of field ``name``."""
        return ENV_PREFIX + ("DIR" if name == "directory" else name.upper())

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ExportConfig:
        """The configuration the ``RETRYSCOPE_PARQUET_*`` variables describe.

        A malformed value raises ``ValueError`` naming the variable and the problem.
        """
        env = os.environ if environ is None else environ
        return cls(**read_env(cls, env, cls.variable))

    def to_env(self) -> dict[str, str]:
        """Every setting as the variable text :meth:`from_env` reads back to this
        configuration (for a child process, or to write an environment file)."""
        return write_env(self, self.variable)
