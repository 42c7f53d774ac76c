"""The audit model kept in a model cache directory between runs, per time partition.

Building the model is most of a first report's time, and every ``retryscope report``,
``findings``, ``whatif`` or UI start would pay it again. With a cache directory the model
of a data set lives in ``model-<hash of its root>/``:

* ``units/<fingerprint>/<table>.parquet``: the per-request tables of one time partition,
  or of a run of sparse ones kept together (:mod:`._time_partitions`), named by its
  fingerprint (the model's SQL, the retryscope and DuckDB versions, and each of its
  files' name, size and modification time). A new hour of data is one new folder (or
  rebuilds the last run, while that holds few rows); a partition whose files changed
  gets a new folder; the others are reused as they are.
* ``across/<fingerprint>/``: the requests found in more than one partition
  (``straddlers``) with their tables built again from all their spans
  (``reconciled_<table>``), and the tables across requests; rebuilt whenever the set of
  partitions changes.
* ``manifest.json``: which folders make the model (and the files their builds skipped)
  and which time partitions each holds (the grain a later run keeps), replaced
  atomically once they are all written. Readers never lock and never see half an
  update; a writer holds ``lock`` while it updates. Folders neither the current nor the
  previous manifest names are removed.
* ``progress.json``: the latest progress of the build holding ``lock``, which a process
  waiting for it shows (:func:`._progress.relay_shared`); ``watch.lock``: held by the one
  process keeping the model current as files arrive (:mod:`._watch`).

Any other state (no manifest, another model fingerprint, a folder missing or a file
whose footer does not read) rebuilds what it concerns: a cache is never trusted without
that match. Object-store data sets (``s3://``) are not cached. The files are Parquet so
that another engine can read the model, or write the per-partition tables itself.

The directory holds derived data only (the same rows as the Parquet files, per attempt
and per request): it is created with the data set's own modes (:class:`._store.Modes`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import duckdb
import pyarrow.parquet as pq

from retryscope import __version__
from retryscope._environment import CACHE_ENV as CACHE_ENV
from retryscope._fs import make_dirs
from retryscope.analytics._queries import sql_string
from retryscope.analytics.model import _scripts as scripts
from retryscope.analytics.model._partition import ACROSS_REQUESTS_TABLES, PER_REQUEST_TABLES
from retryscope.analytics.model._store import KEYS, Modes, Store

FORMAT: Final = 5
"""The layout of a model directory (bump when it changes)."""
STRADDLERS: Final = "straddlers"
RECONCILED: Final = "reconciled_"
UNIT_FILES: Final = (*PER_REQUEST_TABLES, KEYS, *scripts.ROLLUPS)
"""The files of a partition's folder (a partition built in request partitions has one
file per table and request partition: ``<table>-<i>.parquet``)."""

_MANIFEST: Final = "manifest.json"
_SIZES: Final = "sizes.json"
"""In a unit or across folder: the size of each of its files when it was written."""
_LOCK: Final = "lock"
PROGRESS: Final = "progress.json"
WAIT_POLL_S: Final = 0.25
"""How often a process waiting for another's lock looks again (and relays its progress)."""


def hold(fd: int, waiting: Callable[[], None] | None = None) -> None:
    """Take the exclusive ``flock`` of ``fd``, calling ``waiting`` every
    :data:`WAIT_POLL_S` while another process holds it."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if waiting is not None:
                waiting()
            time.sleep(WAIT_POLL_S)


def model_fingerprint() -> str:
    """What every cached table depends on besides its data: the cache layout, the
    retryscope and DuckDB versions, and the text of the model's SQL."""
    digest = hashlib.sha256()
    for part in (
        f"format {FORMAT}",
        f"retryscope {__version__}",
        f"duckdb {duckdb.__version__}",
        *(scripts.script_text(name) for name in scripts.SOURCES),
    ):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:32]


def model_directory(root: str, cache: str | os.PathLike[str]) -> Path:
    """Where the model of the data set at ``root`` is kept in the cache ``cache``."""
    name = hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:16]
    return Path(cache) / f"model-{name}"


@dataclass(frozen=True, slots=True)
class Manifest:
    """What a model directory's model is: its fingerprint; per unit (by key) the
    fingerprint naming its folder (which also lists the files its build skipped,
    ``skipped.json``); the folder of the tables across requests and how many requests
    straddle units; the keys of the time partitions each unit holds, in order
    (``grain``)."""

    model: str
    partitions: dict[str, str]
    across: str
    straddlers: int
    grain: tuple[tuple[str, ...], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "model": self.model,
            "partitions": self.partitions,
            "across": self.across,
            "straddlers": self.straddlers,
            "grain": [list(run) for run in self.grain],
        }

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a model manifest of this layout")
        return cls(
            str(data["model"]),
            {str(k): str(v) for k, v in dict(data["partitions"]).items()},
            str(data["across"]),
            int(data["straddlers"]),
            tuple(tuple(str(key) for key in run) for run in data["grain"]),
        )


class DirectoryStore(Store):
    """One data set's model in its model directory (see the module's docstring). The
    views name the folders of ``units`` (partition fingerprints) and ``across``."""

    def __init__(self, directory: Path, modes: Modes) -> None:
        self.directory = directory
        self.modes = modes
        self.units: list[str] = []
        self.across: Path | None = None
        self.straddlers = 0
        self._listed: dict[str, tuple[tuple[str, str], ...]] = {}
        """The Parquet files (name, path) of each unit folder listed so far, by fingerprint
        (a committed folder does not change; :meth:`commit` forgets the one it replaces)."""

    # -- what the views read ------------------------------------------------------------
    def use(self, manifest: Manifest) -> None:
        """Name the model ``manifest`` describes."""
        self.units = list(manifest.partitions.values())
        self.across = self.directory / "across" / manifest.across
        self.straddlers = manifest.straddlers

    def unit_files(self, table: str, units: Sequence[str] | None = None) -> list[str]:
        """The Parquet files of ``table`` in the folders of ``units`` (partition
        fingerprints; default: the model's)."""
        whole, part = f"{table}.parquet", f"{table}-"
        return [
            path
            for fp in (self.units if units is None else units)
            for name, path in self._listing(fp)
            if name == whole or name.startswith(part)
        ]

    def _listing(self, fingerprint: str) -> tuple[tuple[str, str], ...]:
        """The Parquet files of the unit folder ``fingerprint`` (name, path), in name order,
        listed once: opening the model of 100 M attempts names each of its tables' files
        in 386 folders."""
        listed = self._listed.get(fingerprint)
        if listed is None:
            folder = os.path.join(self.directory, "units", fingerprint)
            names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
            listed = tuple((n, os.path.join(folder, n)) for n in names if n.endswith(".parquet"))
            self._listed[fingerprint] = listed
        return listed

    def relation(self, table: str) -> str:
        assert self.across is not None
        if table in ACROSS_REQUESTS_TABLES:
            return parquet([str(self.across / f"{table}.parquet")])
        units = parquet(self.unit_files(table))
        if not self.straddlers:
            return units
        straddlers = parquet([str(self.across / f"{STRADDLERS}.parquet")])
        reconciled = parquet([str(self.across / f"{RECONCILED}{table}.parquet")])
        return (
            f"(SELECT u.* FROM {units} u ANTI JOIN {straddlers} s ON s.h = u.h "
            f"UNION ALL BY NAME SELECT * FROM {reconciled})"
        )

    def keys(self) -> str | None:
        files = self.unit_files(KEYS)
        return parquet(files) if files else None

    def paths(self) -> list[str]:
        """Every file the model's views read."""
        units = [path for fp in self.units for _, path in self._listing(fp)]
        across = sorted(self.across.glob("*.parquet")) if self.across is not None else []
        return units + [str(p) for p in across]

    def size(self) -> int:
        """Bytes of the files the model's views read."""
        return sum(os.path.getsize(p) for p in self.paths())

    # -- reading the directory ------------------------------------------------------------
    def read_manifest(self, model: str) -> Manifest | None:
        """The manifest when it describes a model of fingerprint ``model`` whose folders
        are all there; None otherwise (no manifest, an unreadable one, an older model)."""
        try:
            text = (self.directory / _MANIFEST).read_text(encoding="utf-8")
            manifest = Manifest.from_json(json.loads(text))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if manifest.model != model:
            return None
        return manifest

    def unit_is_whole(self, fingerprint: str) -> bool:
        """Whether a partition's folder holds every table, each with a readable footer."""
        return _complete(self.directory / "units" / fingerprint, UNIT_FILES)

    def across_is_whole(self, fingerprint: str, straddlers: int) -> bool:
        names = [*ACROSS_REQUESTS_TABLES, STRADDLERS]
        if straddlers:
            names += [f"{RECONCILED}{t}" for t in PER_REQUEST_TABLES]
        return _complete(self.directory / "across" / fingerprint, names)

    # -- writing ------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self, waiting: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the directory's lock: one writer at a time (readers never wait). While
        another holds it, ``waiting`` is called every :data:`WAIT_POLL_S`."""
        make_dirs(self.directory, self.modes.directory)
        fd = os.open(self.directory / _LOCK, os.O_RDWR | os.O_CREAT, self.modes.file)
        try:
            os.fchmod(fd, self.modes.file)
            hold(fd, waiting)
            yield
        finally:
            os.close(fd)

    @property
    def progress_file(self) -> Path:
        """Where the build holding the lock shares its progress (:func:`._progress.shared`)."""
        return self.directory / PROGRESS

    def stage(self, name: str) -> Path:
        """A new hidden folder to write into, moved into place by :meth:`commit`."""
        folder = self.directory / f".{name}.{secrets.token_hex(6)}.tmp"
        folder.mkdir()
        os.chmod(folder, self.modes.directory)
        return folder

    def copy(self, cur: duckdb.DuckDBPyConnection, relation: str, path: Path) -> None:
        """Write the rows of ``relation`` on ``cur`` to the Parquet file ``path`` (zstd at
        level 1: on the model's tables as small as DuckDB's default level 3, and written
        with about a fifth less CPU)."""
        cur.execute(
            f"COPY (SELECT * FROM {relation}) TO {sql_string(str(path))} "
            "(FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 1)"
        )
        os.chmod(path, self.modes.file)

    def commit(self, staged: Path, kind: str, name: str) -> Path:
        """Record the sizes of the staged folder's files (``sizes.json``: a later run checks
        the folder by a ``stat`` of each) and move it to ``kind/name`` (replacing a damaged
        one)."""
        sizes = staged / _SIZES
        sizes.write_text(json.dumps(_file_sizes(staged), sort_keys=True), encoding="utf-8")
        os.chmod(sizes, self.modes.file)
        target = self.directory / kind / name
        self._listed.pop(name, None)
        make_dirs(target.parent, self.modes.directory)
        if target.exists():
            shutil.rmtree(target)
        os.rename(staged, target)
        return target

    def write_manifest(self, manifest: Manifest) -> None:
        """Replace the manifest (atomically), then remove the folders neither it nor the
        previous manifest names (a reader of the previous model keeps its files) and
        what writers that stopped halfway left."""
        previous = self.read_manifest(manifest.model)
        tmp = self.directory / f".{_MANIFEST}.{secrets.token_hex(6)}.tmp"
        tmp.write_text(json.dumps(manifest.to_json(), indent=1, sort_keys=True), encoding="utf-8")
        os.chmod(tmp, self.modes.file)
        os.replace(tmp, self.directory / _MANIFEST)
        keep = {("units", fp) for fp in manifest.partitions.values()} | {
            ("across", manifest.across)
        }
        if previous is not None:
            keep |= {("units", fp) for fp in previous.partitions.values()}
            keep |= {("across", previous.across)}
        for kind in ("units", "across"):
            folder = self.directory / kind
            for entry in sorted(folder.iterdir()) if folder.is_dir() else ():
                if (kind, entry.name) not in keep:
                    shutil.rmtree(entry, ignore_errors=True)
        for stale in self.directory.glob(".*.tmp"):  # the lock is held: no writer is at work
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


def unit_file(folder: Path, table: str, index: int) -> Path:
    """The file of ``table`` for request partition ``index`` in a partition's folder."""
    return folder / (f"{table}.parquet" if index == 0 else f"{table}-{index}.parquet")


@dataclass(frozen=True, slots=True)
class FilePlacement:
    """Where one build writes a time partition's per-request tables in a model cache: each
    straight to the Parquet file it is kept in (in ``folder``, for request partition
    ``index``), which the build's later statements read back. Holding each as a table in
    memory first and then writing it would cost an hour's build ≈ 8 % more CPU."""

    store: DirectoryStore
    folder: Path
    index: int

    def write(self, con: duckdb.DuckDBPyConnection, table: str, query: str) -> str:
        path = unit_file(self.folder, table, self.index)
        self.store.copy(con, f"(\n{query}\n)", path)
        return f"read_parquet({sql_string(str(path))})"


def _file_sizes(folder: Path) -> dict[str, int]:
    """The size of each Parquet file of ``folder``, by name."""
    return {p.name: p.stat().st_size for p in folder.glob("*.parquet")}


def _complete(folder: Path, names: Sequence[str]) -> bool:
    """Whether ``folder`` holds a file of each table of ``names``, each as it was written:
    of the size its ``sizes.json`` records (a file replaced, truncated or removed since
    fails), or, in a folder without one, with a footer that reads."""
    if not folder.is_dir():
        return False
    sizes = _file_sizes(folder)
    tables = {n.removesuffix(".parquet").split("-")[0] for n in sizes}
    if not all(name in tables for name in names):
        return False
    try:
        recorded = json.loads((folder / _SIZES).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = None
    if recorded is not None:
        return bool(recorded == sizes)
    try:
        for path in folder.glob("*.parquet"):
            pq.read_metadata(path)
    except Exception:
        return False
    return True


def parquet(files: Sequence[str]) -> str:
    """A relation over the Parquet ``files`` of one model table, written by one model's
    SQL: DuckDB takes the first file's schema and matches the others' columns by name
    (a file without one of them is an error). Not ``union_by_name``, which reads every
    file's footer when a view is made: 0.4 s over the 386 units of 100 M attempts."""
    listed = ", ".join(sql_string(f) for f in files)
    return f"read_parquet([{listed}])"
