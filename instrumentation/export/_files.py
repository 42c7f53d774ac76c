"""Writing span tables as Parquet files a reader can trust; shared by exporter and ingest.

* Rows go to Hive partition directories (``date=YYYY-MM-DD/hour=HH/``) by span start time.
* Within a file rows are sorted by logical request id, then start time, and each row group
  carries Bloom filters on the lookup columns (``bloom_filters``), so a drill-down on one
  request touches few row groups (statistics and Bloom filters prune the rest).
* A file is written under a hidden temporary name (``.<name>.inprogress``), fsynced, and
  renamed into place: a reader globbing ``**/*.parquet`` never sees a partial file, and a
  crash leaves at worst a hidden temporary file behind.
* New files and directories get explicit permissions (default owner-only), whatever the
  process umask.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from retryscope._fs import make_dirs
from retryscope.instrumentation.export._bloom_filters import bloom_filter_options
from retryscope.instrumentation.export._config import ExportConfig, Partitioning
from retryscope.instrumentation.export._constant_arrays import is_constant
from retryscope.instrumentation.export._encoding import DICTIONARY_COLUMNS

TEMP_PREFIX: Final = "."
TEMP_SUFFIX: Final = ".inprogress"

_PARTITION_FORMAT: Final[dict[Partitioning, str]] = {
    Partitioning.HOUR: "date=%Y-%m-%d/hour=%H",
    Partitioning.DAY: "date=%Y-%m-%d",
}


ARRIVAL: Final = "_arrival"
"""An optional column of a table to write (never written): each row's arrival sequence
number, when the rows are not in arrival order (the exporter groups each batch's spans by
attribute keys). Rows equal in the sort keys are then ordered by it, as arrival order
would have put them."""


def sort_for_drilldown(table: pa.Table) -> pa.Table:
    """Rows ordered by logical request id, then start time (nulls last), then arrival."""
    if table.num_rows < 2:
        return table
    keys = [
        ("logical_request_id", "ascending", "at_end"),
        ("start_time", "ascending", "at_end"),
    ]
    if ARRIVAL in table.column_names:
        keys.append((ARRIVAL, "ascending", "at_end"))
    order = pc.sort_indices(table, sort_keys=keys)
    return _take_rows(table, order)


def _take_rows(table: pa.Table, order: pa.Array) -> pa.Table:
    """``table.take(order)`` for a permutation ``order``; a column whose rows are all alike
    (all null: most dedicated columns of most files; built as a constant column: empty
    events and links, one process's resource) is the same in any order, so it is kept as
    it is instead of gathered."""
    columns = [
        column
        if column.null_count == column.length() or is_constant(column)
        else column.take(order)
        for column in table.columns
    ]
    return pa.Table.from_arrays(columns, schema=table.schema)


_PARTITION_NS: Final[dict[Partitioning, int]] = {
    Partitioning.HOUR: 3_600 * 10**9,
    Partitioning.DAY: 86_400 * 10**9,
}


def split_by_partition(table: pa.Table, partitioning: Partitioning) -> list[tuple[str, pa.Table]]:
    """``(relative directory, rows)`` pairs, one per partition the rows' start times fall in.

    Rows are bucketed by integer division of their UTC start time (a partition is a whole
    hour or day), and only each bucket's name is formatted; start times before 1970 take the
    general ``strftime`` path.
    """
    fmt = _PARTITION_FORMAT.get(partitioning)
    if fmt is None or table.num_rows == 0:
        return [("", table)] if table.num_rows else []
    starts = pc.cast(table.column("start_time"), pa.int64())
    if pc.min(starts).as_py() < 0:
        keys = pc.strftime(table.column("start_time"), format=fmt)
        unique = pc.unique(keys).to_pylist()
        if len(unique) == 1:
            return [(str(unique[0]), table)]
        return [(str(key), table.filter(pc.equal(keys, key))) for key in sorted(unique)]
    width = _PARTITION_NS[partitioning]
    buckets = pc.divide(starts, width)  # integer division: floor for times >= 0
    names = {
        bucket: time.strftime(fmt, time.gmtime(bucket * width // 10**9))
        for bucket in pc.unique(buckets).to_pylist()
    }
    if len(names) == 1:
        return [(next(iter(names.values())), table)]
    return [
        (name, table.filter(pc.equal(buckets, bucket)))
        for bucket, name in sorted(names.items(), key=lambda item: item[1])
    ]


def local_host_tag() -> str:
    """This host's name as it appears in file names."""
    return socket.gethostname().replace(os.sep, "_").replace(".", "_") or "host"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (on this host)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists but is not ours to signal
    return True


def remove_stale_temps(directory: Path, host: str) -> list[Path]:
    """Delete temporary files in ``directory`` left by dead writers on this host.

    A temporary name ends ``-<host>-<pid>-<token>-<seq>.parquet.inprogress``; one whose
    process no longer exists can never be completed. Files of other hosts (shared storage)
    and of live processes are left alone.
    """
    removed: list[Path] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        if not (name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)):
            continue
        parts = name.removesuffix(TEMP_SUFFIX).split("-")
        if len(parts) < 5 or not parts[-3].isdigit() or f"-{host}-{parts[-3]}-" not in name:
            continue
        if pid_alive(int(parts[-3])):
            continue
        path = directory / name
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            continue
    return removed


class FileNamer:
    """File names unique per writer: ``<prefix>-<utc stamp>-<host>-<pid>-<token>-<seq>``.

    The random token keeps names unique when a pid is reused on the same host. A namer
    given a ``pid`` writes for that (dead) writer, as a recovery of its segments does: its
    ``token`` then gets a random suffix, so two recoveries never pick the same name.
    """

    def __init__(
        self,
        prefix: str = "spans",
        *,
        host: str | None = None,
        pid: int | None = None,
        token: str | None = None,
    ) -> None:
        self.prefix = prefix
        self.host = host if host is not None else local_host_tag()
        self._fixed = pid is not None
        self._pid = pid if pid is not None else os.getpid()
        self._token = (token or "") + secrets.token_hex(3 if token is None else 2)
        self._seq = 0

    @property
    def token(self) -> str:
        self._check_fork()
        return self._token

    @property
    def next_seq(self) -> int:
        """The sequence number of the next name."""
        self._check_fork()
        return self._seq + 1

    def _check_fork(self) -> None:
        if not self._fixed and os.getpid() != self._pid:  # forked: a new writer
            self._pid, self._token, self._seq = os.getpid(), secrets.token_hex(3), 0

    def next_name(self) -> str:
        self._check_fork()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self._seq += 1
        seq = self._seq
        return f"{self.prefix}-{stamp}-{self.host}-{self._pid}-{self._token}-{seq:06d}.parquet"


def write_atomic(table: pa.Table, final: Path, config: ExportConfig) -> Path:
    """Write ``table`` (already sorted) to ``final`` via a hidden temporary file and rename."""
    if ARRIVAL in table.column_names:
        table = table.drop_columns([ARRIVAL])
    make_dirs(final.parent, config.dir_mode)
    temp = final.with_name(f"{TEMP_PREFIX}{final.name}{TEMP_SUFFIX}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, config.file_mode)
    try:
        os.fchmod(fd, config.file_mode)  # exact mode whatever the umask
        with os.fdopen(fd, "wb", closefd=True) as sink:
            pq.write_table(
                table,
                sink,
                row_group_size=config.row_group_rows,
                compression=config.compression,
                bloom_filter_options=bloom_filter_options(table, config.row_group_rows),
                use_dictionary=DICTIONARY_COLUMNS,
            )
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(final.parent)
    return final


def fsync_dir(directory: Path) -> None:
    """Make the entries of ``directory`` durable (a no-op where the file system cannot)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        # some file systems cannot fsync a directory; the rename is still atomic
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def plan_files(table: pa.Table, config: ExportConfig) -> list[tuple[str, pa.Table]]:
    """The files ``table`` becomes: ``(partition directory, sorted rows)``, each at most
    ``config.rotate_rows`` rows."""
    planned: list[tuple[str, pa.Table]] = []
    for relative, part in split_by_partition(table, config.partitioning):
        ordered = sort_for_drilldown(part)
        for offset in range(0, ordered.num_rows, config.rotate_rows):
            planned.append((relative, ordered.slice(offset, config.rotate_rows)))
    return planned


def write_partitioned(
    table: pa.Table,
    config: ExportConfig,
    namer: FileNamer,
    root: Path | None = None,
    *,
    deadline: float | None = None,
    cleaned: set[Path] | None = None,
) -> list[Path]:
    """Write ``table`` under ``root`` (default: the configured directory), one file per
    partition and at most ``config.rotate_rows`` rows per file. Returns the files written.

    On an ``OSError`` the files already renamed stay (they are complete) and
    :class:`WriteError` carries the rows that were not written; past ``deadline`` (a
    ``time.monotonic()`` value) no further file is started and the cause is ``TimeoutError``.
    Directories not yet in ``cleaned`` are first rid of dead writers' temporary files.
    """
    base = config.directory if root is None else root
    planned = plan_files(table, config)
    written: list[Path] = []
    for index, (relative, chunk) in enumerate(planned):
        directory = base / relative if relative else base
        if cleaned is not None and directory not in cleaned:
            remove_stale_temps(directory, namer.host)
            cleaned.add(directory)
        try:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"deadline passed before {len(planned) - index} more file(s)")
            written.append(write_atomic(chunk, directory / namer.next_name(), config))
        except OSError as exc:
            remaining = pa.concat_tables([c for _, c in planned[index:]])
            raise WriteError(exc, written, remaining) from exc
    return written


class WriteError(OSError):
    """A write stopped part-way: ``written`` files are complete, ``remaining`` rows are not
    on disk."""

    def __init__(self, cause: OSError, written: list[Path], remaining: pa.Table) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.cause = cause
        self.written = written
        self.remaining = remaining

    def __str__(self) -> str:
        return f"{type(self.cause).__name__}: {self.cause}"
