"""Build the audit model over ``spans`` (:func:`build_model`, run once by
:meth:`~retryscope.analytics.AuditModel.build`): per time partition
(:mod:`._time_partitions`), each in memory and in request partitions when it is large for
the memory limit (:mod:`._partitions`); then the requests found in
more than one partition again from all their spans; then the tables across requests.
With a model cache (:mod:`._cache`) only the partitions that are new or changed since the
last build are built (sparse ones kept together, :data:`CACHE_SPAN_ROWS`), and the rest
is read from the cache; without one the model lives in
an in-memory database (:mod:`._store`) that each build writes its tables into, and
consecutive partitions are built together (:data:`BUILD_SPAN_ROWS`), unless the model of a
local data set would exceed what that database keeps uncompressed: then it is built as
into a cache, in a directory kept only while the connection lives (:mod:`._temporary`).
The scripts and their order: :mod:`._scripts`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import duckdb

from retryscope.analytics._object_store import is_url
from retryscope.analytics._queries import load, sql_string
from retryscope.analytics.model import _partitions as request_partitions
from retryscope.analytics.model import _rollups as rollups
from retryscope.analytics.model import _scripts as scripts
from retryscope.analytics.model import _temporary as temporary
from retryscope.analytics.model._cache import (
    RECONCILED,
    STRADDLERS,
    DirectoryStore,
    FilePlacement,
    Manifest,
    model_directory,
    model_fingerprint,
    parquet,
    unit_file,
)
from retryscope.analytics.model._changes import Changes
from retryscope.analytics.model._partition import (
    ACROSS_REQUESTS_TABLES,
    PER_REQUEST_TABLES,
    SOURCE,
    Place,
    build_across_requests,
    build_tables,
    drop_tables,
)
from retryscope.analytics.model._progress import (
    STAGE_ACROSS,
    STAGE_DONE,
    STAGE_PARTITIONS,
    STAGE_STRADDLING,
    ProgressCallback,
    Tracker,
    relay_shared,
    shared,
)
from retryscope.analytics.model._store import (
    KEYS,
    UNCOMPRESSED_BYTES_PER_SPAN_ROW,
    MemoryStore,
    Modes,
    Placement,
    drop_views,
    uncompressed_budget,
)
from retryscope.analytics.model._time_partitions import (
    TimePartition,
    grouped,
    kept_together,
    merged,
    run_fingerprint,
    time_partitions,
)

_log = logging.getLogger(__name__)

BUILD_SPAN_ROWS = 1_500_000
"""The most span rows a model in memory builds in one pass of consecutive time
partitions (about 1 M attempts; a pass's fixed costs and the requests straddling
partitions are paid once per pass, and its working memory grows with its rows)."""
CACHE_SPAN_ROWS = 200_000
"""The fewest span rows a unit of a model cache holds, unless it is the last: sparser
consecutive time partitions are kept together (:func:`kept_together`). A unit costs
≈ 0.12 CPU s however few rows it holds (its statements, its folder of files; 50 hours of
one request each took 6.4 CPU s as 50 units, 0.4 s as one), what ≈ 23 k span rows cost
(≈ 5.3 µs each on the bench data): at 200 k rows that is at most a tenth of a unit's
build, and an hour of a dense data set (≈ 350 k rows at 100 k requests an hour) is still
a unit of its own, so adding an hour builds that hour."""


class Keeper(Protocol):
    """Where one time partition's tables go: each of its request partitions (by index) is
    built inside :meth:`building`, which gives where the build writes its per-request
    tables (None: as temp tables of the cursor); :meth:`keep` then receives the names of
    the temp tables the cursor built, :meth:`finish` is called once all are kept (a
    partition whose build stopped is never finished)."""

    def building(
        self, cur: duckdb.DuckDBPyConnection, index: int
    ) -> contextlib.AbstractContextManager[Place | None]: ...

    def keep(self, cur: duckdb.DuckDBPyConnection, tables: Sequence[str], index: int) -> None: ...

    def finish(self, cur: duckdb.DuckDBPyConnection) -> None: ...


@dataclass(frozen=True, slots=True)
class Built:
    """What a model build left: the files the model's views read (a cached model's
    Parquet files; none for a model in memory: what a connection locked down to the data
    set's files must still be allowed to read) and what it did (``retryscope model``
    prints it): time partitions ``built`` now of ``partitions`` in all, the most
    ``request_partitions`` one took, ``straddlers`` (requests across partitions)."""

    paths: tuple[str, ...]
    stats: dict[str, int]
    rollups: dict[str, str] = field(default_factory=dict)
    """A cached model's rollups and their facts (:func:`._rollups.relations`)."""


def build_model(
    con: duckdb.DuckDBPyConnection,
    root: str,
    cache: str | None,
    progress: ProgressCallback | None = None,
) -> Built:
    """Build the audit model over the ``spans`` of ``con`` (a connection of the data set
    at ``root``), updating the model ``cache`` directory and reading the rest from it;
    ``progress`` receives the build's progress."""
    request_partitions.configured_partitions(con, 0)  # a bad setting is named before any work
    drop_views(con)  # a model an earlier data set left on con
    temporary.release(con)  # (its files, once no view reads them)
    tracker = Tracker(progress)
    what = "model cache"
    if cache is None and _exceeds_memory_budget(con, root):
        what = "temporary model directory"
        try:
            cache = temporary.temporary_directory(con)
        except OSError as exc:
            _warn(f"{what} not created ({type(exc).__name__}: {exc}): the model stays in memory")
    if cache is not None:
        store = DirectoryStore(model_directory(root, cache), Modes.of(root))
        try:
            # another process building this model (a watcher, a UI): its progress is shown
            with store.locked(relay_shared(store.progress_file, progress)):
                tracker = Tracker(shared(progress, store.progress_file, store.modes.file))
                built = _update_directory(con, store, root, tracker)
        except (OSError, duckdb.IOException, duckdb.PermissionException) as exc:
            _warn(f"{what} {store.directory} not written ({type(exc).__name__}: {exc})")
            tracker = Tracker(progress)
            drop_views(con)
            temporary.release(con)
        else:
            store.point_views(con)
            done = _finish(tracker, store.paths(), built, len(store.units), store.straddlers)
            return Built(done.paths, done.stats, rollups.relations(store))
    parts = _time_partitions(con, root)
    memory = MemoryStore(
        con,
        span_rows=sum(p.rows for p in parts),
        uncompressed_budget=_uncompressed_budget(con),
    )
    # nothing is kept between runs: consecutive partitions are built together
    groups = grouped(parts, _build_rows(con))
    builds = [merged(group) for group in groups]
    taken = _build_partitions(
        con, builds, tracker, lambda part: _InMemory(memory, part), keys=len(builds) > 1
    )
    straddlers = 0
    if len(builds) > 1:
        placement = memory.place()
        with memory.unchecked(con):
            straddlers = _reconcile(
                con,
                memory.keys(),
                builds,
                tracker,
                _replace_in_memory(memory, placement),
                placement,
            )
    _build_across(con, memory, tracker, memory.keep_across)
    memory.point_views(con)
    built = [k for group, k in zip(groups, taken, strict=True) for _ in group]
    return _finish(tracker, [], built, len(parts), straddlers)


def _build_rows(con: duckdb.DuckDBPyConnection) -> int:
    """The most span rows one build of consecutive time partitions takes: a model in
    memory's :data:`BUILD_SPAN_ROWS`, and no more than one request partition holds under
    the connection's memory limit."""
    ((setting,),) = con.execute("SELECT current_setting('memory_limit')").fetchall()
    limit = request_partitions.memory_limit_bytes(str(setting))
    if limit is None or limit <= 0:
        return BUILD_SPAN_ROWS
    return min(BUILD_SPAN_ROWS, int(request_partitions.SPAN_ROWS_PER_GIB * limit / 2**30))


def _exceeds_memory_budget(con: duckdb.DuckDBPyConnection, root: str) -> bool:
    """Whether the model of a local data set would not stay uncompressed in memory: then
    it is built into a temporary model directory instead (:mod:`._temporary`)."""
    if not root or is_url(root):
        return False
    budget = _uncompressed_budget(con)
    rows = sum(p.rows for p in _time_partitions(con, root))
    return budget > 0 and rows * UNCOMPRESSED_BYTES_PER_SPAN_ROW > budget


def _uncompressed_budget(con: duckdb.DuckDBPyConnection) -> int:
    """How much of the model of the files ``spans`` reads may stay uncompressed in memory
    (none when a file's span rows are unknown: the store cannot count what it keeps)."""
    ((unknown, setting),) = con.execute(
        "SELECT bool_or(rows IS NULL), current_setting('memory_limit') FROM _retryscope_files"
    ).fetchall()
    if unknown:
        return 0
    return uncompressed_budget(request_partitions.memory_limit_bytes(str(setting)))


def _finish(
    tracker: Tracker, paths: Sequence[str], built: list[int], parts: int, straddlers: int
) -> Built:
    tracker.report(STAGE_DONE, parts, parts)
    return Built(
        tuple(paths),
        {
            "built": len(built),
            "partitions": parts,
            "request_partitions": max(built, default=1),
            "straddlers": straddlers,
        },
    )


class _InMemory:
    """Has each request partition of a partition write its per-request tables into the
    memory store, keeps its request keys on the cursor (``kept_<table>``), and adds all
    to the store's model once every one is built."""

    def __init__(self, memory: MemoryStore, part: TimePartition) -> None:
        self._memory, self._part = memory, part
        self._tables: Sequence[str] = ()
        self._placed: list[Placement] = []

    @contextlib.contextmanager
    def building(self, cur: duckdb.DuckDBPyConnection, index: int) -> Iterator[Place | None]:
        if index == 0:  # built again (a file skipped): what the stopped build wrote goes
            for placement in self._placed:
                self._memory.discard(cur, placement)
            self._placed = []
        placement = self._memory.place()
        self._placed.append(placement)
        with self._memory.unchecked(cur):
            yield placement

    def keep(self, cur: duckdb.DuckDBPyConnection, tables: Sequence[str], index: int) -> None:
        self._tables = tables
        for table in tables:
            if index == 0:
                cur.execute(f"ALTER TABLE temp.main.{table} RENAME TO kept_{table}")
            else:
                cur.execute(f"INSERT INTO temp.main.kept_{table} SELECT * FROM temp.main.{table}")
                cur.execute(f"DROP TABLE temp.main.{table}")

    def finish(self, cur: duckdb.DuckDBPyConnection) -> None:
        for table in self._tables:
            cur.execute(f"ALTER TABLE temp.main.kept_{table} RENAME TO {table}")
        for placement in self._placed:
            self._memory.adopt(placement)
        self._memory.keep(cur, self._tables, self._part.key, self._part.rows)


def _replace_in_memory(memory: MemoryStore, placement: Placement) -> _Replace:
    def replace(cur: duckdb.DuckDBPyConnection, straddlers: str, n: int, rebuilt: int) -> None:
        if n:
            memory.replace_requests(cur, straddlers, placement)

    return replace


def _time_partitions(con: duckdb.DuckDBPyConnection, root: str) -> tuple[TimePartition, ...]:
    """The time partitions of the files ``spans`` reads now (one empty partition for a
    data set without files, so every table exists)."""
    rows = con.execute("SELECT path, rows FROM _retryscope_files").fetchall()
    parts = time_partitions(root, [str(p) for p, _ in rows], [n for _, n in rows])
    return parts or (TimePartition("", (), 0),)


BUILD_MEMORY: Final = 512 * 2**20
"""The least share of the memory limit each time partition a model cache builds at once
gets (at ``--memory-limit 2GB`` on 2 cores: two builds of 1 GiB each)."""


def _workers(con: duckdb.DuckDBPyConnection) -> int:
    """How many time partitions a model cache builds at once: one per thread the
    connection may use (DuckDB's ``threads``, one per usable core unless set), each build
    running on its own thread (:func:`_one_thread_each`), and no more than leaves each
    :data:`BUILD_MEMORY` of the memory limit. A model in memory is built one pass at a
    time: its store takes every build's tables in turn."""
    ((threads, setting),) = con.execute(
        "SELECT current_setting('threads'), current_setting('memory_limit')"
    ).fetchall()
    limit = request_partitions.memory_limit_bytes(str(setting))
    by_memory = int(threads) if limit is None else limit // BUILD_MEMORY
    return max(1, min(int(threads), by_memory))


@contextlib.contextmanager
def _one_thread_each(con: duckdb.DuckDBPyConnection, workers: int) -> Iterator[None]:
    """While ``workers`` > 1 builds run at once on cursors of ``con``, each runs its
    statements on the thread that started it alone (DuckDB ``threads = 1``: no worker
    threads, each query's tasks run on its caller): a partition's statements are small, and
    splitting each across threads costs more CPU than it saves (a 10 M cache's 39
    partitions, two at a time: 131-135 CPU s with two threads per statement, 114-120 CPU s
    with one, and 12 % less time). The setting is restored afterwards; a connection whose
    configuration is locked keeps its own."""
    restore: int | None = None
    if workers > 1:
        ((threads,),) = con.execute("SELECT current_setting('threads')").fetchall()
        with contextlib.suppress(duckdb.Error):  # a locked configuration
            con.execute("SET threads = 1")
            restore = int(threads)
    try:
        yield
    finally:
        if restore is not None:
            con.execute(f"SET threads = {restore}")


@dataclass
class _Job:
    """One time partition being built: its cursor, the files left (a file whose pages do
    not decode is dropped and the partition built again) and its request partitions."""

    part: TimePartition
    keeper: Keeper
    files: list[str]
    index: int
    cursor: duckdb.DuckDBPyConnection | None = None
    request_partitions: int = 1

    def close(self) -> None:
        cur, self.cursor = self.cursor, None
        if cur is None:
            return
        with contextlib.suppress(duckdb.Error):
            drop_tables(cur)
            cur.execute(f"DROP VIEW IF EXISTS temp.main.{SOURCE}")
        cur.close()


def _build_partitions(
    con: duckdb.DuckDBPyConnection,
    parts: Sequence[TimePartition],
    tracker: Tracker,
    keeper: Callable[[TimePartition], Keeper],
    *,
    keys: bool = True,
    workers: int = 1,
) -> list[int]:
    """Build each of ``parts`` and hand its tables to ``keeper(part)`` (with its request
    keys unless ``keys`` is false: a single build has no requests across builds to find);
    returns the request partitions each took.

    ``workers`` partitions are built at a time, each on a cursor of ``con`` (its temp
    objects are its own), in threads when more than one; the calling thread alone uses
    ``con``: it starts each build, finishes it (:meth:`Keeper.finish`) and, when a file's
    pages do not decode, names and skips the file and builds the partition again without
    it. The builds running at once share the memory limit: each plans its request
    partitions for its share."""
    total = sum(p.rows for p in parts)
    done = finished_parts = 0
    waiting = [_Job(part, keeper(part), list(part.files), k) for k, part in enumerate(parts)]
    running: dict[Future[None], _Job] = {}
    taken = [1] * len(parts)
    workers = max(1, min(workers, len(parts)))
    pool = ThreadPoolExecutor(max_workers=workers) if workers > 1 else None
    with _one_thread_each(con, workers):
        try:
            while waiting or running:
                while waiting and len(running) < workers:
                    job = waiting.pop(0)
                    tracker.report(
                        STAGE_PARTITIONS,
                        finished_parts,
                        len(parts),
                        weight_done=done,
                        weight_total=total,
                        detail=job.part.key,
                    )
                    job.cursor = con.cursor()
                    job.request_partitions = request_partitions.configured_partitions(
                        con, job.part.rows, concurrent=workers
                    )
                    running[_submit(pool, _build_units, job, keys)] = job
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    job = running.pop(future)
                    try:
                        future.result()
                        assert job.cursor is not None
                        job.keeper.finish(job.cursor)
                    except duckdb.Error as exc:
                        if isinstance(exc, duckdb.OutOfMemoryException) or not _skip_undecodable(
                            con, job
                        ):
                            raise
                        waiting.insert(0, job)
                        continue
                    finally:
                        job.close()
                    taken[job.index] = job.request_partitions
                    finished_parts += 1
                    done += job.part.rows
        except BaseException:
            for job in running.values():  # a stopped build (Ctrl-C, a failure) stops the others
                if job.cursor is not None:
                    with contextlib.suppress(duckdb.Error):
                        job.cursor.interrupt()
            raise
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
            for job in running.values():
                job.close()
    if parts:
        tracker.report(STAGE_PARTITIONS, len(parts), len(parts), weight_done=1, weight_total=1)
    return taken


def _submit(pool: ThreadPoolExecutor | None, fn: Callable[..., None], *args: Any) -> Future[None]:
    """``fn(*args)`` in ``pool``, or run now (its outcome in the future) without one."""
    if pool is not None:
        return pool.submit(fn, *args)
    future: Future[None] = Future()
    try:
        fn(*args)
    except BaseException as exc:  # handed to the caller through the future, as a pool does
        future.set_exception(exc)
    else:
        future.set_result(None)
    return future


def _build_units(job: _Job, keys: bool) -> None:
    """Build the per-request tables (and request keys) of one time partition on the job's
    cursor, in its request partitions, each handed to the job's keeper."""
    cur = job.cursor
    assert cur is not None
    k = job.request_partitions
    if k > 1:
        _log.info("building time partition %r in %d request partitions", job.part.key, k)
    for i in range(k):
        where = (
            f" WHERE coalesce(rs_request_key(logical_request_id), 0) % {k} = {i}" if k > 1 else ""
        )
        cur.execute(f"CREATE OR REPLACE TEMP VIEW {SOURCE} AS {_spans_of(job.files)}{where}")
        with job.keeper.building(cur, i) as place:
            build_tables(cur, place)
        built: tuple[str, ...] = () if place else PER_REQUEST_TABLES
        if keys:
            cur.execute(load(scripts.REQUEST_KEYS))
            built = (*built, KEYS)
        job.keeper.keep(cur, built, i)
        drop_tables(cur)


def _skip_undecodable(con: duckdb.DuckDBPyConnection, job: _Job) -> bool:
    """After the job's build failed: skip its files whose pages do not decode (False when
    none is to blame) and leave it the others."""
    from retryscope.analytics._dataset import drop_undecodable_files

    if not drop_undecodable_files(con, job.files):
        return False
    skipped = {p for (p,) in con.execute("SELECT path FROM _retryscope_skipped").fetchall()}
    job.files = [f for f in job.files if f not in skipped]
    return True


def _spans_of(files: Sequence[str]) -> str:
    """The rows of ``files`` as ``spans`` reads them."""
    if not files:
        return "SELECT * FROM _retryscope_empty"
    return "SELECT * FROM spans_in([" + ", ".join(sql_string(f) for f in files) + "])"


_Replace = Callable[[duckdb.DuckDBPyConnection, str, int, int], None]
"""Puts the straddlers' rows in place: ``(cursor, straddlers, n, rebuilt)``, where
``straddlers`` names the ``n`` straddlers' keys (``h``, with their unit ``u``) and the
per-request tables the cursor holds (when ``rebuilt`` > 0) are those of the
:data:`REBUILT` units (their rows of requests only: the rows of no request their spans
gave are their partitions')."""
UNITS: Final = "rs_straddling_units"
"""Temp table of the reconciling cursor: the units (``u``, ``request_keys.sql``) found in
more than one partition."""
REBUILT: Final = "rs_rebuilt_straddlers"
"""Temp table of the reconciling cursor: the units built again from their spans."""


def _reconcile(
    con: duckdb.DuckDBPyConnection,
    keys: str | None,
    parts: Sequence[TimePartition],
    tracker: Tracker,
    replace: _Replace,
    place: Place | None = None,
    changes: Changes | None = None,
) -> int:
    """Find the requests with spans in more than one of ``parts`` (``keys``: the
    partitions' request keys; the implicit requests of a trace straddle together, as its
    unit) and build their per-request tables again from all their spans (as temp tables,
    or where ``place`` puts them); ``replace`` puts them in place of the partitions' rows
    of those requests. With ``changes`` (an update of a model directory) only the units
    those changes name can straddle, and a unit none of whose partitions changed is not
    built again (``replace`` keeps its previous rows). Returns the number of straddlers."""
    if keys is None:
        return 0
    cur = con.cursor()
    try:
        narrowed, rebuilt = "", f"SELECT u FROM {UNITS}"
        if changes is not None:
            candidates, changed = changes.mark(cur)
            narrowed = f" SEMI JOIN {candidates} c ON c.u = k.u"
            rebuilt += f" SEMI JOIN {changed} USING (u)"
        cur.execute(
            f"CREATE OR REPLACE TEMP TABLE {UNITS} AS SELECT k.u FROM {keys} k{narrowed} "
            "GROUP BY k.u HAVING min(k.part) <> max(k.part)"
        )
        cur.execute(f"CREATE OR REPLACE TEMP TABLE {REBUILT} AS {rebuilt}")
        kept = ""
        if changes is not None:
            kept = f" UNION SELECT * FROM {changes.kept_straddlers(UNITS, REBUILT)}"
        cur.execute(
            f"CREATE OR REPLACE TEMP TABLE {STRADDLERS} AS "
            f"SELECT DISTINCT k.h, k.u FROM {keys} k SEMI JOIN {UNITS} USING (u) "
            f"WHERE k.h IS NOT NULL"
            f"{kept}"
        )
        ((m,),) = cur.execute(f"SELECT count(*) FROM {REBUILT}").fetchall()
        if m:
            tracker.report(STAGE_STRADDLING, 0, 1, detail=f"{m} requests")
            involved = {
                str(p)
                for (p,) in cur.execute(
                    f"SELECT DISTINCT part FROM {keys} SEMI JOIN {REBUILT} USING (u)"
                ).fetchall()
            }
            files = [f for p in parts if p.key in involved for f in p.files]
            skipped = {p for (p,) in con.execute("SELECT path FROM _retryscope_skipped").fetchall()}
            cur.execute(
                f"CREATE OR REPLACE TEMP VIEW {SOURCE} AS "
                f"{_spans_of([f for f in files if f not in skipped])} "
                f"WHERE rs_request_key(logical_request_id) IN (SELECT u FROM {REBUILT}) "
                "OR (logical_request_id IS NULL AND span_role IS NULL "
                f"AND rs_implicit_trace_key(trace_id) IN (SELECT u FROM {REBUILT}))"
            )
            build_tables(cur, place)
            # the requests the spans of a trace gave together (an implicit request's
            # whole tree), beside those the partitions found
            cur.execute(
                f"INSERT INTO {STRADDLERS} SELECT DISTINCT f.h, "
                "rs_implicit_trace_key(f.trace_id) FROM all_request_facts f "
                f"WHERE rs_implicit(f.logical_request_id) "
                f"AND f.h NOT IN (SELECT h FROM {STRADDLERS})"
            )
            _log.info("%d requests straddle time partitions: built again from all their spans", m)
        ((n,),) = cur.execute(f"SELECT count(*) FROM {STRADDLERS}").fetchall()
        replace(cur, f"temp.main.{STRADDLERS}", int(n), int(m))
        return int(n)
    finally:
        with contextlib.suppress(duckdb.Error):
            drop_tables(cur)
        cur.close()


def _build_across(
    con: duckdb.DuckDBPyConnection,
    store: MemoryStore | DirectoryStore,
    tracker: Tracker,
    keep: Callable[[duckdb.DuckDBPyConnection], None],
    narrow: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> None:
    """The tables across requests, over every per-request table of ``store``, handed to
    ``keep`` (on the cursor that built them). ``narrow`` (an update of a model
    directory) narrows the idempotency conflicts' input before, and completes them after,
    with :class:`Changes`."""
    tracker.report(STAGE_ACROSS, 0, 1)
    cur = con.cursor()
    try:
        store.point_views(cur, PER_REQUEST_TABLES)
        if narrow is not None:
            narrow(cur)
        build_across_requests(cur)
        keep(cur)
    finally:
        cur.close()


# -- a model cache directory --------------------------------------------------------------
def _update_directory(
    con: duckdb.DuckDBPyConnection, store: DirectoryStore, root: str, tracker: Tracker
) -> list[int]:
    """Bring ``store`` up to date with the data set: build the time partitions it lacks
    (returning the request partitions each took), then, when the set of partitions
    changed, the requests across partitions and the tables across requests; write the
    manifest."""
    from retryscope.analytics._dataset import skip_files

    model = model_fingerprint()
    previous = store.read_manifest(model)
    runs = kept_together(
        _time_partitions(con, root), CACHE_SPAN_ROWS, () if previous is None else previous.grain
    )
    parts = [merged(run) for run in runs]
    fingerprints = {merged(run).key: run_fingerprint(run, model) for run in runs}
    for part in parts:  # what builds of the reused partitions skipped, later reads skip too
        skipped = _read_skipped(store, fingerprints[part.key])
        if skipped and store.unit_is_whole(fingerprints[part.key]):
            skip_files(con, skipped)
    todo = [p for p in parts if not store.unit_is_whole(fingerprints[p.key])]
    built = _build_partitions(
        con,
        todo,
        tracker,
        lambda part: _InDirectory(con, store, part, fingerprints[part.key]),
        workers=_workers(con),
    )
    store.units = [fingerprints[p.key] for p in parts]
    across = hashlib.sha256(json.dumps([model, sorted(fingerprints.items())]).encode()).hexdigest()[
        :32
    ]
    if (
        previous is not None
        and previous.across == across
        and store.across_is_whole(across, previous.straddlers)
    ):
        straddlers = previous.straddlers
    else:
        changes = _changes_since(store, previous)
        straddlers = _write_across(con, store, parts, across, tracker, changes)
    grain = tuple(tuple(p.key for p in run) for run in runs)
    manifest = Manifest(model, fingerprints, across, straddlers, grain)
    if manifest != previous:
        store.write_manifest(manifest)
    store.use(manifest)
    return built


class _InDirectory:
    """Writes one time partition's tables into a staged folder of the cache, moved into
    place once every request partition is written."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        store: DirectoryStore,
        part: TimePartition,
        fingerprint: str,
    ) -> None:
        self._con, self._store, self._part, self._fingerprint = con, store, part, fingerprint
        self._staged: Path | None = None

    def building(
        self, cur: duckdb.DuckDBPyConnection, index: int
    ) -> contextlib.AbstractContextManager[Place | None]:
        if index == 0 or self._staged is None:  # a new folder (also for a build run again)
            self._staged = self._store.stage("unit")
        return contextlib.nullcontext(FilePlacement(self._store, self._staged, index))

    def keep(self, cur: duckdb.DuckDBPyConnection, tables: Sequence[str], index: int) -> None:
        assert self._staged is not None
        for table in tables:
            relation = f"temp.main.{table}"
            if table == KEYS:
                relation = f"(SELECT h, u, {sql_string(self._part.key)} AS part FROM {relation})"
            self._store.copy(cur, relation, unit_file(self._staged, table, index))
        staged = self._staged
        rollups.write(cur, lambda name: unit_file(staged, name, index), self._store.copy)

    def finish(self, cur: duckdb.DuckDBPyConnection) -> None:
        assert self._staged is not None
        skipped = self._con.execute(
            "SELECT path, reason FROM _retryscope_skipped WHERE path IN ?",
            [list(self._part.files)],
        ).fetchall()
        path = self._staged / "skipped.json"
        path.write_text(json.dumps(skipped), encoding="utf-8")
        path.chmod(self._store.modes.file)
        self._store.commit(self._staged, "units", self._fingerprint)


def _read_skipped(store: DirectoryStore, fingerprint: str) -> dict[str, str]:
    path = store.directory / "units" / fingerprint / "skipped.json"
    try:
        return {str(p): str(r) for p, r in json.loads(path.read_text(encoding="utf-8"))}
    except (OSError, ValueError, TypeError):
        return {}


def _changes_since(store: DirectoryStore, previous: Manifest | None) -> Changes | None:
    """What changed since the ``previous`` model of ``store`` (whose ``units`` name the
    new model's partitions), or None when it cannot be told (no previous model, or a
    folder it needs is damaged): then everything across partitions is built again."""
    if (
        previous is None
        or not store.unit_files(KEYS)
        or not store.across_is_whole(previous.across, previous.straddlers)
    ):
        return None
    before, now = set(previous.partitions.values()), set(store.units)
    added, removed = sorted(now - before), sorted(before - now)
    if not all(store.unit_is_whole(fp) for fp in removed):
        return None
    return Changes.between(
        store.directory / "across" / previous.across,
        previous.straddlers,
        changed_keys=store.unit_files(KEYS, [*added, *removed]),
        removed_digests=store.unit_files(DIGEST_HASHES, removed),
    )


DIGEST_HASHES: Final = "request_digest_hashes"


def _write_across(
    con: duckdb.DuckDBPyConnection,
    store: DirectoryStore,
    parts: Sequence[TimePartition],
    fingerprint: str,
    tracker: Tracker,
    changes: Changes | None = None,
) -> int:
    """Write the requests across partitions and the tables across requests to a new
    folder ``across/<fingerprint>`` (from the ``changes`` since the previous model where
    they are known); returns how many requests straddle partitions."""
    staged = store.stage("across")
    store.across, store.straddlers = staged, 0

    def keep_reconciled(cur: duckdb.DuckDBPyConnection, straddlers: str, n: int, m: int) -> None:
        store.copy(cur, straddlers, staged / f"{STRADDLERS}.parquet")
        if n:
            for table in PER_REQUEST_TABLES:
                rows = [f"SELECT * FROM temp.main.{table} WHERE h IS NOT NULL"] if m else []
                kept = changes.kept_rows(table, straddlers, REBUILT) if changes else None
                if kept is not None:
                    rows.append(f"SELECT * FROM {kept}")
                relation = "(" + " UNION ALL BY NAME ".join(rows) + ")"
                store.copy(cur, relation, staged / f"{RECONCILED}{table}.parquet")

    straddlers = _reconcile(con, store.keys(), parts, tracker, keep_reconciled, None, changes)
    if store.keys() is None:  # no partition: an empty set of requests across them
        store.copy(
            con,
            "(SELECT NULL::UBIGINT AS h, NULL::UBIGINT AS u WHERE false)",
            staged / f"{STRADDLERS}.parquet",
        )
    store.straddlers = straddlers
    rollups.write_across(con, store, staged)

    def keep_across(cur: duckdb.DuckDBPyConnection) -> None:
        if changes is not None:
            changes.merge_conflicts(cur)
        for table in ACROSS_REQUESTS_TABLES:
            store.copy(cur, f"temp.main.{table}", staged / f"{table}.parquet")

    def narrow(cur: duckdb.DuckDBPyConnection) -> None:
        assert changes is not None
        reconciled = staged / f"{RECONCILED}{DIGEST_HASHES}.parquet"
        changes.narrow_digests(
            cur,
            units=parquet(store.unit_files(DIGEST_HASHES)),
            model=store.relation(DIGEST_HASHES),
            straddlers=parquet([str(staged / f"{STRADDLERS}.parquet")]),
            reconciled=parquet([str(reconciled)]) if straddlers else None,
        )

    _build_across(con, store, tracker, keep_across, None if changes is None else narrow)
    store.commit(staged, "across", fingerprint)
    return straddlers


def _warn(message: str) -> None:
    _log.warning(message)
