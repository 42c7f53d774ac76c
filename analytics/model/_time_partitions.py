"""The time partitions of a data set: its files grouped by directory (the exporter's and
ingest's Hive partitions ``date=YYYY-MM-DD/hour=HH/``), the unit the model is built and
kept in. A new hour of data is a new partition, so only it is built; a partition whose
files changed (a later ingest, a file rewritten) is built again; the others are reused.

Each unit a model cache keeps costs a build of its own and the files it is kept in, however
few rows it holds: sparse hours are kept together in runs of at least a number of span rows
(:func:`kept_together`), and a dense data set keeps one unit per hour.

A request usually lives in one partition (its spans start within the hour); one running
across an hour boundary, or whose spans arrive later, has spans in two, and its tables
are built again from all of them (:mod:`._build`).
"""

from __future__ import annotations

import bisect
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TimePartition:
    """The files of one directory of the data set (``key``: the directory relative to
    the data set's root, ``""`` for the root itself) and their span rows."""

    key: str
    files: tuple[str, ...]
    rows: int

    def fingerprint(self, model: str) -> str:
        """What a partition's model depends on: the model's own fingerprint and each
        file's path, size and modification time (stat only, no reads)."""
        digest = hashlib.sha256(f"{model}\0{self.key}\0".encode())
        for f in self.files:
            st = os.stat(f)
            digest.update(f"{os.path.basename(f)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        return digest.hexdigest()[:32]


def time_partitions(
    root: str, files: Sequence[str], rows: Sequence[int | None]
) -> tuple[TimePartition, ...]:
    """``files`` (of the data set at ``root``, with their span ``rows``) by directory, in
    path order; one partition for a data set that is a single file or a glob."""
    if "://" in root or os.path.isfile(root):
        return (TimePartition("", tuple(files), sum(r or 0 for r in rows)),) if files else ()
    groups: dict[str, tuple[list[str], list[int]]] = {}
    base = os.path.abspath(root)
    for f, n in zip(files, rows, strict=True):
        key = os.path.relpath(os.path.dirname(os.path.abspath(f)), base)
        key = "" if key == "." else key.replace(os.sep, "/")
        paths, counts = groups.setdefault(key, ([], []))
        paths.append(f)
        counts.append(n or 0)
    return tuple(
        TimePartition(key, tuple(paths), sum(counts))
        for key, (paths, counts) in sorted(groups.items(), key=lambda kv: _order(kv[0]))
    )


def _order(key: str) -> list[str]:
    """Where the partition ``key`` sorts: by its path's parts."""
    return key.split("/")


def grouped(parts: Sequence[TimePartition], max_rows: int) -> tuple[tuple[TimePartition, ...], ...]:
    """``parts`` in runs of consecutive partitions of at most ``max_rows`` span rows
    together (a larger partition alone), in order: what one pass of a build without a
    model cache takes."""
    groups: list[list[TimePartition]] = []
    rows = 0
    for part in parts:
        if groups and rows + part.rows <= max_rows:
            groups[-1].append(part)
            rows += part.rows
        else:
            groups.append([part])
            rows = part.rows
    return tuple(tuple(g) for g in groups)


def merged(group: Sequence[TimePartition]) -> TimePartition:
    """One partition of the files of ``group`` (keyed by its first and last keys)."""
    if len(group) == 1:
        return group[0]
    return TimePartition(
        f"{group[0].key}..{group[-1].key}",
        tuple(f for p in group for f in p.files),
        sum(p.rows for p in group),
    )


def kept_together(
    parts: Sequence[TimePartition], min_rows: int, recorded: Sequence[Sequence[str]] = ()
) -> tuple[tuple[TimePartition, ...], ...]:
    """``parts`` (in path order) in the runs of consecutive partitions a model cache builds
    and keeps as one unit: a run is closed once it holds ``min_rows`` span rows, so an hour
    of that many rows is a unit of its own and sparse hours share one.

    ``recorded``: the runs (their partitions' keys) of the cache's previous model. Its
    boundaries stand, whatever the rows of its partitions now (a partition that changed,
    or a new one among them, rebuilds its own run only); the partitions after all it
    covers continue its last run until that holds ``min_rows``, then make runs anew."""
    starts = sorted(_order(run[0]) for run in recorded[1:] if run)
    covered = max((_order(key) for run in recorded for key in run), default=None)
    runs: list[list[TimePartition]] = []
    rows = 0
    for part in parts:
        at = _order(part.key)
        if runs:
            before = _order(runs[-1][-1].key)
            recorded_start = bisect.bisect_right(starts, at) > bisect.bisect_right(starts, before)
            beyond = covered is None or at > covered
            if not recorded_start and not (beyond and rows >= min_rows):
                runs[-1].append(part)
                rows += part.rows
                continue
        runs.append([part])
        rows = part.rows
    return tuple(tuple(run) for run in runs)


def run_fingerprint(run: Sequence[TimePartition], model: str) -> str:
    """What the model of a run of partitions depends on: each one's :meth:`fingerprint`."""
    if len(run) == 1:
        return run[0].fingerprint(model)
    digest = hashlib.sha256("\0".join(p.fingerprint(model) for p in run).encode())
    return digest.hexdigest()[:32]
