"""Crash loss bounded by the batch, not the file: an append-only log of accepted batches.

``ParquetSpanExporter`` buffers up to a minute of spans before it writes a large, sorted
Parquet file. Without more, a crash (``SIGKILL``, OOM kill, power loss) loses that buffer.
So every batch the exporter accepts is first appended to a *segment*: an Arrow IPC stream
file (lz4-compressed record batches) under ``<root>/.retryscope-segments/``, a hidden
directory the analytics never read (no partial file is ever read). ``export`` returns
``SUCCESS`` only after the batch is in the operating system's hands, so a killed process
loses nothing it returned ``SUCCESS`` for; segments are ``fsync``'d on a cadence
(``fsync_s``), which bounds what a power loss can take.

A segment is deleted once every row in it is in a complete Parquet file (or counted lost,
as a telemetry gap). What a dead writer left behind is *recovered*: its rows are written as
Parquet, under the partitioning and file settings it recorded in the segment, by the next
exporter started on the directory and by ``retryscope recover DIR``. A writer is dead when
its lock is free: it holds an exclusive lock on ``<host>-<pid>-<token>.lock`` beside its
segments for its whole life, which the kernel drops when it dies, whatever process gets
its pid next (``_writer_lock``; a container's writer is PID 1 each time). Recovery

* takes a dead writer's lock for as long as it works on its segments, and claims each by
  renaming it (one recoverer per segment, however many processes start at once — a prefork
  server's workers); a claim whose claimer died is taken over with the freed lock;
* leaves a live writer's segments alone, and names them (``Recovered.left``);
* reads every complete batch and stops at a torn last one (the batch being appended when
  the process died: never acknowledged);
* leaves out rows already in a Parquet file of the same writer written since the segment
  began (the writer may have died between renaming that file and deleting the segment),
  matched on ``(trace_id, span_id)``, so a crash at any point neither loses nor duplicates.

File names: ``<host>-<pid>-<token>-<segment seq>-<file seq>.arrows``, the writer's identity
as in its Parquet file names (``_files.FileNamer``) and the sequence number its next
Parquet file would get when the segment began.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from retryscope._fs import make_dirs
from retryscope.instrumentation._settings import plain
from retryscope.instrumentation.export._config import ExportConfig, Partitioning
from retryscope.instrumentation.export._files import (
    ARRIVAL,
    FileNamer,
    fsync_dir,
    pid_alive,
    split_by_partition,
    write_partitioned,
)
from retryscope.instrumentation.export._writer_lock import LOCK_SUFFIX, hold, take

_log = logging.getLogger(__name__)

SEGMENT_DIR: Final = ".retryscope-segments"
SEGMENT_SUFFIX: Final = ".arrows"
CLAIM_PREFIX: Final = ".claimed-"
_WRITER: Final = r"^(?P<host>.+)-(?P<pid>\d+)-(?P<token>[0-9a-f]+)"
"""A writer's identity at the start of its segments' and its lock file's names."""
_NAME: Final = re.compile(rf"{_WRITER}-(?P<seq>\d+)-(?P<fileseq>\d+)\.arrows$")
_LOCK_NAME: Final = re.compile(rf"{_WRITER}{re.escape(LOCK_SUFFIX)}$")
_SETTINGS: Final = (
    "partitioning",
    "rotate_rows",
    "row_group_rows",
    "compression",
    "file_mode",
    "dir_mode",
)
"""The writer's settings a segment records, so its recovery writes files like it would."""
_IPC: Final = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=False)
"""lz4 (a third of the bytes for a fifth more CPU than none), compressed on the calling
thread: a 512-span batch's buffers are too small to gain from Arrow's thread pool, and the
hand-off costs more than the compression (wall 2.6 vs 1.1 µs/span), most of all beside a
busy application thread, where each wait for a pool thread ends in a wait for the GIL."""


def _arrival_bounds(table: pa.Table) -> tuple[int, int]:
    """The first and last :data:`ARRIVAL` numbers of ``table`` (its rows may be in any order)."""
    arrivals = table.column(ARRIVAL).to_numpy()
    return int(arrivals.min()), int(arrivals.max())


@dataclass
class _Segment:
    """One segment file: the arrival numbers it holds and how many are not yet in Parquet."""

    path: Path | None  # None: rows whose append failed (in memory only)
    first: int = -1  # -1: nothing appended yet
    end: int = 0  # exclusive
    pending: int = 0
    rows: int = 0
    file: pa.NativeFile | None = field(default=None, repr=False)
    writer: pa.ipc.RecordBatchStreamWriter | None = field(default=None, repr=False)

    def close(self) -> None:
        """Stop appending (no end-of-stream marker: a reader stops at the end anyway)."""
        self.writer = None
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.close()
            self.file = None


class SegmentLog:
    """The append-only segments of one writer (see the module doc). Not thread-safe: the
    exporter calls it under its lock."""

    def __init__(self, config: ExportConfig, namer: FileNamer) -> None:
        self.config = config
        self.namer = namer
        self.directory = config.directory / SEGMENT_DIR
        self._segments: list[_Segment] = []
        self._seq = 0
        self._last_sync = time.monotonic()
        self._unsynced = False
        self._schema: pa.Schema | None = None
        self._lock: tuple[Path, int] | None = None  # held from the first segment to close

    # -- writing ----------------------------------------------------------------------------
    def append(self, table: pa.Table) -> bool:
        """Append ``table`` (its rows carry consecutive :data:`ARRIVAL` numbers from
        ``first``); True when it is in a segment, False when only in memory (the error is
        logged by the caller's failure handling)."""
        first, last = _arrival_bounds(table)
        try:
            segment = self._current(table.schema)
            writer = segment.writer
            if writer is None:
                raise OSError("the segment is closed")
        except (OSError, pa.ArrowException):
            self.skip(table)
            raise
        try:
            writer.write_table(table)  # one call, without the GIL
        except (OSError, pa.ArrowException):
            segment.close()  # a torn tail ends this segment: the next batch starts one
            self.skip(table)
            raise
        if segment.first < 0:
            segment.first = first
        segment.end = last + 1
        segment.pending += table.num_rows
        segment.rows += table.num_rows
        self._unsynced = True
        self.sync(due_only=True)
        return True

    def skip(self, table: pa.Table) -> None:
        """``table`` is accepted without a segment (while writes fail): in memory only."""
        first, last = _arrival_bounds(table)
        self._segments.append(_Segment(None, first, last + 1, table.num_rows))

    def _current(self, schema: pa.Schema) -> _Segment:
        last = self._segments[-1] if self._segments else None
        if (
            last is not None
            and last.writer is not None
            and last.rows < self.config.rotate_rows
            and schema.equals(self._schema)
        ):
            return last
        if last is not None and last.writer is not None:
            last.close()
        return self._open(schema)

    def _open(self, schema: pa.Schema) -> _Segment:
        make_dirs(self.directory, self.config.dir_mode)
        identity = f"{self.namer.host}-{os.getpid()}-{self.namer.token}"
        if self._lock is None:  # before any segment of this writer exists
            lock = self.directory / f"{identity}{LOCK_SUFFIX}"
            self._lock = (lock, hold(lock, self.config.file_mode))
        self._seq += 1
        seqs = f"{self._seq:06d}-{self.namer.next_seq:06d}"
        path = self.directory / f"{identity}-{seqs}{SEGMENT_SUFFIX}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, self.config.file_mode)
        try:
            os.fchmod(fd, self.config.file_mode)  # exact mode whatever the umask
        finally:
            os.close(fd)
        settings = {f"retryscope.{k}": plain(getattr(self.config, k)) for k in _SETTINGS}
        recorded = schema.with_metadata({**(schema.metadata or {}), **settings})
        segment = _Segment(path, file=pa.OSFile(str(path), "w"))
        self._segments.append(segment)
        segment.writer = pa.ipc.new_stream(segment.file, recorded, options=_IPC)
        self._schema = schema
        fsync_dir(self.directory)
        return segment

    def sync(self, *, due_only: bool = False) -> None:
        """``fsync`` the open segment (only when ``fsync_s`` has passed, with ``due_only``)."""
        if not self._unsynced:
            return
        if due_only and time.monotonic() - self._last_sync < self.config.fsync_s:
            return
        for segment in self._segments:
            if segment.file is not None:
                with contextlib.suppress(OSError, ValueError):
                    os.fsync(segment.file.fileno())
        self._unsynced = False
        self._last_sync = time.monotonic()

    # -- acknowledging ----------------------------------------------------------------------
    def done(self, arrivals: np.ndarray) -> None:
        """Rows ``arrivals`` are in complete Parquet files, or counted lost: segments whose
        rows all are get deleted."""
        holding = [s for s in self._segments if s.first >= 0]  # in arrival order
        if not len(arrivals) or not holding:
            return
        firsts = np.fromiter((s.first for s in holding), np.int64, len(holding))
        ends = np.fromiter((s.end for s in holding), np.int64, len(holding))
        index = np.searchsorted(firsts, arrivals, side="right") - 1
        inside = (index >= 0) & (arrivals < ends[np.maximum(index, 0)])
        counts = np.bincount(index[inside], minlength=len(holding))
        for segment, n in zip(holding, counts.tolist(), strict=True):
            segment.pending -= n
        self._delete_finished()

    def _delete_finished(self) -> None:
        """Close and delete every segment whose rows are all in Parquet (the open one too:
        the next batch starts a new one)."""
        keep: list[_Segment] = []
        for segment in self._segments:
            if segment.pending > 0 or (segment.first < 0 and segment.writer is not None):
                keep.append(segment)  # (an open segment nothing was appended to yet stays)
                continue
            segment.close()
            if segment.path is not None:
                with contextlib.suppress(OSError):
                    segment.path.unlink()
        self._segments = keep

    @property
    def memory_only(self) -> int:
        """Rows not yet in Parquet whose append failed: lost if the process ends now."""
        return sum(s.pending for s in self._segments if s.path is None)

    @property
    def durable(self) -> int:
        """Rows not yet in Parquet that are in segments (recovered if the process ends now)."""
        return sum(s.pending for s in self._segments if s.path is not None)

    def close(self) -> None:
        """Stop appending; segments with rows not yet in Parquet stay for recovery (their
        lock released: the next recovery takes them)."""
        self.sync()
        for segment in self._segments:
            segment.close()
        self._segments = [s for s in self._segments if s.pending > 0 and s.path is not None]
        if self._lock is not None:
            lock, fd = self._lock
            self._lock = None
            if not self._segments:
                lock.unlink(missing_ok=True)
            os.close(fd)

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's segments are the parent's. They are dropped
        without a write (the child's copy of each descriptor is closed, nothing more: the
        parent's lock stays the parent's)."""
        for segment in self._segments:
            segment.writer = None
            segment.file = None
        self._segments = []
        self._seq = 0
        if self._lock is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock[1])
            self._lock = None


# -- recovery -------------------------------------------------------------------------------
Writer = tuple[str, int, str]
"""A writer's identity as its file names carry it: ``(host, pid, token)``."""


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a recovery did: rows written as Parquet, rows already there, segments taken,
    the files written, the segments it could not recover (with why, left in place), the
    segments that ended in a torn batch (the batch being appended when its writer died,
    never acknowledged: skipped, the segment's complete batches recovered) and the segments
    it left to their writers (with why: alive, or of another host)."""

    rows: int = 0
    duplicates: int = 0
    segments: int = 0
    files: tuple[Path, ...] = ()
    failed: tuple[tuple[Path, str], ...] = ()
    torn: tuple[Path, ...] = ()
    left: tuple[tuple[Path, str], ...] = ()

    def __add__(self, other: Recovered) -> Recovered:
        return Recovered(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def summary(self) -> str:
        """One line: what was recovered."""
        return (
            f"recovered {self.rows:,} spans from {self.segments:,} segments into "
            f"{len(self.files):,} files ({self.duplicates:,} already written, "
            f"{len(self.torn):,} torn batches never acknowledged, {len(self.failed):,} "
            f"segments not recovered, {len(self.left):,} left to their writers)"
        )

    def problems(self) -> list[str]:
        """One line per segment that was torn (its last batch skipped) or not recovered."""
        torn = [
            f"{path}: torn last batch (being appended when its writer died, never "
            "acknowledged) skipped; its complete batches recovered"
            for path in self.torn
        ]
        return torn + [f"{path}: not recovered, left in place: {why}" for path, why in self.failed]

    def kept(self) -> list[str]:
        """One line per segment left to its writer, and why."""
        return [f"{path}: left in place: {why}" for path, why in self.left]


def _writer(name: str) -> tuple[Writer, int | None] | None:
    """The writer of segment ``name`` and the pid in its claim (None: not claimed)."""
    claimer: int | None = None
    if name.startswith(CLAIM_PREFIX):
        text, _, name = name.removeprefix(CLAIM_PREFIX).partition("-")
        if not text.isdigit():
            return None
        claimer = int(text)
    match = _NAME.match(name)
    if match is None:
        return None
    return (match["host"], int(match["pid"]), match["token"]), claimer


def _lock_of(directory: Path, writer: Writer) -> Path:
    host, pid, token = writer
    return directory / f"{host}-{pid}-{token}{LOCK_SUFFIX}"


def _segments_of(directory: Path, writer: Writer) -> list[Path]:
    """The segments (claimed or not) of ``writer`` in segment directory ``directory``."""
    found: list[Path] = []
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(directory)):
            parsed = _writer(name) if name.endswith(SEGMENT_SUFFIX) else None
            if parsed is not None and parsed[0] == writer:
                found.append(directory / name)
    return found


def _release(lock: Path, fd: int, writer: Writer) -> None:
    """Let go of a dead writer's lock; its file goes with the writer's last segment (checked
    under the lock: a dead writer makes none)."""
    try:
        if not _segments_of(lock.parent, writer):
            with contextlib.suppress(OSError):
                lock.unlink(missing_ok=True)
    finally:
        os.close(fd)


def _left_unlocked(writer: Writer, claimer: int | None) -> str | None:
    """Why a segment written without a lock file (by an older writer) stays: judged by the
    pids in its name, as such writers were."""
    if pid_alive(writer[1]):
        return f"no lock file, and pid {writer[1]} is alive (--force once its writer is gone)"
    if claimer is not None and pid_alive(claimer):
        return f"claimed by pid {claimer}, alive"
    return None


def _recover_writer(
    paths: list[tuple[Path, int | None]],
    writer: Writer,
    config: ExportConfig,
    host: str,
    *,
    force: bool,
) -> Recovered:
    """Recover ``paths``, the segments of ``writer``, unless it is alive (or of another
    host, without ``force``): what was done, or why they were left."""
    if writer[0] != host and not force:  # shared storage: another host's own business
        why = f"written on host {writer[0]} (--force once its writer is gone)"
        return Recovered(left=tuple((path, why) for path, _ in paths))
    lock = _lock_of(paths[0][0].parent, writer)
    try:
        fd = take(lock)
    except FileNotFoundError:  # an older writer's: judged by its pids
        take_all = [(p, None if force else _left_unlocked(writer, c)) for p, c in paths]
        return _recover_each([p for p, why in take_all if why is None], writer, config) + (
            Recovered(left=tuple((p, why) for p, why in take_all if why is not None))
        )
    except OSError as exc:  # e.g. another user's writer
        why = f"cannot lock {lock.name}: {type(exc).__name__}: {exc}"
        return Recovered(failed=tuple((path, why) for path, _ in paths))
    if fd is None:  # never underneath a live writer, whatever ``force`` says
        why = f"its writer (pid {writer[1]}) or a recovery is alive: it holds {lock.name}"
        return Recovered(left=tuple((path, why) for path, _ in paths))
    try:
        return _recover_each([path for path, _ in paths], writer, config)
    finally:
        _release(lock, fd, writer)


def _recover_each(paths: list[Path], writer: Writer, config: ExportConfig) -> Recovered:
    total = Recovered()
    for path in paths:
        try:
            total = total + _recover_one(path, writer, config)
        except Exception as exc:  # one bad segment never stops the others
            _log.error("retryscope: cannot recover segment %s: %s", path, exc)
            total = total + Recovered(failed=((path, f"{type(exc).__name__}: {exc}"),))
    return total


def _read(path: Path) -> tuple[pa.Table | None, bool]:
    """Every complete batch of segment ``path`` and whether it ended torn."""
    batches: list[pa.RecordBatch] = []
    torn = False
    with pa.memory_map(str(path)) as source:
        try:
            reader = pa.ipc.open_stream(source)
        except (pa.ArrowInvalid, OSError):
            return None, True  # not even a schema: died while opening it
        while True:
            try:
                batches.append(reader.read_next_batch())
            except StopIteration:
                break
            except (pa.ArrowInvalid, OSError):
                torn = True  # the batch being appended when the writer died
                break
    if not batches:
        return None, torn
    return pa.Table.from_batches(batches, schema=reader.schema), torn


def _settings(schema: pa.Schema, base: ExportConfig) -> ExportConfig:
    """The settings a segment recorded (:data:`_SETTINGS`) over ``base``."""
    meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    parse: dict[str, Callable[[str], object]] = {"partitioning": Partitioning, "compression": str}
    return base.with_overrides(
        **{
            name: parse.get(name, int)(meta[f"retryscope.{name}"])
            for name in _SETTINGS
            if f"retryscope.{name}" in meta
        }
    )


def _already_written(
    table: pa.Table, config: ExportConfig, writer: Writer, fileseq: int
) -> pa.Array:
    """Mask of ``table``'s rows already in a Parquet file of ``writer`` written since the
    segment began (its own files with a sequence number from ``fileseq``, and files a
    recovery of its segments wrote)."""
    host, pid, token = writer
    own = re.compile(rf"-{re.escape(host)}-{pid}-{token}(r[0-9a-f]+)?-(\d+)\.parquet$")
    ids: list[pa.Table] = []
    for relative, _ in split_by_partition(table, config.partitioning):
        directory = config.directory / relative if relative else config.directory
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            match = own.search(name)
            if name.startswith(".") or match is None:
                continue
            if match[1] is None and int(match[2]) < fileseq:
                continue
            with contextlib.suppress(OSError, pa.ArrowException):
                ids.append(pq.read_table(directory / name, columns=["trace_id", "span_id"]))
    if not ids:
        return pa.array(np.zeros(table.num_rows, dtype=bool))
    written = pa.concat_tables(ids)
    key = pc.binary_join_element_wise(table["trace_id"], table["span_id"], "")
    seen = pc.binary_join_element_wise(written["trace_id"], written["span_id"], "")
    return pc.is_in(key, value_set=seen)


def _recover_one(path: Path, writer: Writer, base: ExportConfig) -> Recovered:
    """Claim ``path``, write its rows not yet in Parquet, delete it."""
    original = path.name.split("-", 1)[1] if path.name.startswith(CLAIM_PREFIX) else path.name
    claimed = path.with_name(f"{CLAIM_PREFIX}{os.getpid()}-{original}")
    try:
        os.rename(path, claimed)  # atomic: one recoverer wins
    except FileNotFoundError:
        return Recovered()  # another recoverer took it
    table, torn = _read(claimed)
    if table is None:
        claimed.unlink(missing_ok=True)
        return Recovered(segments=1, torn=(path,) if torn else ())
    match = _NAME.match(original)
    fileseq = int(match["fileseq"]) if match else 0
    config = _settings(table.schema, base)
    table = table.replace_schema_metadata(None)
    duplicate = _already_written(table, config, writer, fileseq)
    fresh = table.filter(pc.invert(duplicate))
    namer = FileNamer("spans", host=writer[0], pid=writer[1], token=f"{writer[2]}r")
    files = write_partitioned(fresh, config, namer) if fresh.num_rows else []
    claimed.unlink(missing_ok=True)
    fsync_dir(claimed.parent)
    return Recovered(
        rows=fresh.num_rows,
        duplicates=table.num_rows - fresh.num_rows,
        segments=1,
        files=tuple(files),
        torn=(path,) if torn else (),
    )


def segment_files(root: Path) -> Iterator[Path]:
    """The segments (claimed or not) under data set root ``root``."""
    directory = root / SEGMENT_DIR
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return
    for name in names:
        if name.endswith(SEGMENT_SUFFIX):
            yield directory / name


def _sweep_locks(directory: Path, host: str) -> None:
    """Remove the lock files of this host's dead writers that have no segment left (a
    writer killed after its rows were all in Parquet leaves one)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        match = _LOCK_NAME.match(name)
        if match is None or match["host"] != host:
            continue
        writer = (match["host"], int(match["pid"]), match["token"])
        if _segments_of(directory, writer):
            continue  # left to its writer, or not recoverable: named by the recovery
        with contextlib.suppress(OSError):
            fd = take(directory / name)
            if fd is not None:
                _release(directory / name, fd, writer)


def recover(
    root: str | os.PathLike[str], base: ExportConfig | None = None, *, force: bool = False
) -> Recovered:
    """Write as Parquet what dead writers left in segments under ``root`` (see the module
    doc); ``force`` also takes segments of other hosts' writers and of writers without a
    lock file whose pid is in use (only when they are known to be gone), never those of a
    writer holding its lock. A segment that cannot be recovered is left, and named; so is
    each segment left to its writer."""
    directory = Path(root)
    config = (base or ExportConfig()).with_overrides(directory=directory)
    host = FileNamer().host
    writers: dict[Writer, list[tuple[Path, int | None]]] = {}
    for path in segment_files(directory):
        parsed = _writer(path.name)
        if parsed is not None:
            writers.setdefault(parsed[0], []).append((path, parsed[1]))
    total = Recovered()
    for writer, paths in writers.items():
        total = total + _recover_writer(paths, writer, config, host, force=force)
    _sweep_locks(directory / SEGMENT_DIR, host)
    return total
