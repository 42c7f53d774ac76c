"""The audit model of one data set, as an object every analysis takes.

:func:`connect` opens the data set's views on a DuckDB connection and returns an
:class:`AuditModel`: nothing is read or built yet. :meth:`AuditModel.build` builds the
model (the per-request tables of :mod:`retryscope.analytics.model`) once; each analysis
then narrows it to its filters (:meth:`AuditModel.scoped`). What a connection knows
between statements (built or not, the model's files, the bound filters and what was
computed for them) is held here, in Python; the SQL reads only the filter values it binds.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import duckdb

from retryscope.analytics._dataset import DataSet, SkippedFile, discover, new_connection
from retryscope.analytics._dataset import open_views as _open_views
from retryscope.analytics._dataset import skipped as _skipped
from retryscope.analytics._filters import DEFAULT_BUCKET, Filters, Scope, apply
from retryscope.analytics.model._build import build_model
from retryscope.analytics.model._progress import ProgressCallback


class AuditModel:
    """A data set opened for analysis: its DuckDB connection ``con`` (views ``spans``,
    ``attempts``, ``logical_requests``; the model's tables once built), the ``dataset``,
    and the state of the model on it. Every metric, finding, report, lookup and replay
    function takes one. It binds one set of filters at a time: do not share it between
    threads (a lookup runs on a cursor of its own)."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        dataset: DataSet,
        *,
        cache: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.con = con
        self.dataset = dataset
        self.cache = cache
        """The model cache directory (None: none, or a data set in an object store)."""
        self.progress = progress
        """Receives the progress of the model build."""
        self.built = False
        self.paths: tuple[str, ...] = ()
        """The files the model's views read (a cached or attached model's; none in memory)."""
        self.stats: dict[str, int] = {}
        self.rollups: dict[str, str] = {}
        """A cached model's rollups and the facts they are computed from, by table (SQL
        naming their rows; none for a model in memory or attached): the headline's."""
        """What the build did: time partitions ``built`` now of ``partitions``, the most
        ``request_partitions`` one took, ``straddlers`` (requests across partitions)."""
        self.scope = Scope()
        self.installed: set[str] = set()
        """Names of what the analyses that need it installed on ``con`` (the evaluator)."""

    def build(self) -> AuditModel:
        """Build the audit model once (updating the model cache and reading the rest from
        it); later calls return at once. A lookup of one request needs none."""
        if not self.built:
            done = build_model(self.con, self.dataset.root, self.cache, self.progress)
            self.use(done.paths, done.stats, done.rollups)
        return self

    def use(
        self,
        paths: Sequence[str],
        stats: dict[str, int] | None = None,
        rollups: dict[str, str] | None = None,
    ) -> None:
        """Take the model the views now read as built (``paths``: its files; ``rollups``:
        its rollups' relations, if it keeps any)."""
        self.built, self.paths, self.stats = True, tuple(paths), dict(stats or {})
        self.rollups = dict(rollups or {})

    def forget(self) -> None:
        """Build the model again on next use, without the model cache: files were skipped
        that the model (and any cache it was attached from or saved to) still counts."""
        self.built, self.cache, self.scope = False, None, Scope(copied=self.scope.copied)

    def scoped(
        self, filters: Filters | None = None, *, bucket: timedelta = DEFAULT_BUCKET
    ) -> duckdb.DuckDBPyConnection:
        """The connection with its scope (``requests``, ``attempt_facts``, ...) holding the
        requests ``filters`` select, the model built first; ``bucket``: the width of the
        time buckets of the next queries."""
        self.scope = apply(self.build().con, self.scope, filters, bucket=bucket)
        return self.con

    def skipped_files(self) -> tuple[SkippedFile, ...]:
        """Every file skipped so far: unreadable footers found when the data set was
        listed, and files whose pages failed to decode when a query first read them."""
        return _skipped(self.con, self.dataset)

    def sql(self, query: str, params: Any = None) -> duckdb.DuckDBPyRelation:
        """A relation of your own SQL over the views (``con.sql``)."""
        return self.con.sql(query, params=params)

    def execute(self, query: str, params: Any = None) -> duckdb.DuckDBPyConnection:
        """Run your own SQL over the views (``con.execute``)."""
        return self.con.execute(query, params)

    def close(self) -> None:
        self.con.close()


def connect(
    data: DataSet | str | os.PathLike[str],
    *,
    con: duckdb.DuckDBPyConnection | None = None,
    model_cache: str | os.PathLike[str] | None = None,
    progress: ProgressCallback | None = None,
) -> tuple[AuditModel, DataSet]:
    """The audit model of ``data`` (a :class:`DataSet`, or a directory, file or ``s3://``
    prefix to :func:`discover`) on ``con`` (else :func:`new_connection`), and the data set.
    Nothing is read yet: the model is built when an analysis first needs it.

    With ``model_cache`` (a directory), the model is kept there per time partition of the
    data set: a later connection reads the partitions that did not change and builds only
    the new or changed ones. ``progress`` receives the progress of a model build
    (:class:`~retryscope.analytics.model.Progress`)."""
    dataset = data if isinstance(data, DataSet) else discover(data)
    if con is None:
        con = new_connection()
    _open_views(con, dataset)
    cache = None if model_cache is None or dataset.is_remote else os.fspath(model_cache)
    return AuditModel(con, dataset, cache=cache, progress=progress), dataset
