"""Where a built model's tables live, and the views that name them on a connection.

The per-request tables of every time partition (:mod:`._partition`) are kept apart, so a
new or changed partition adds or replaces only its own rows. A request with spans in two
partitions (one running across the hour, or whose spans arrived later) is built again
from all its spans, and those rows take the place of its rows of each partition. The
tables across requests are built over the result.

Two stores hold them: :class:`MemoryStore`, an in-memory database (a connection without
a model cache), and :class:`~retryscope.analytics.model._cache.DirectoryStore`, a model
cache directory of Parquet files kept between runs.
"""

from __future__ import annotations

import abc
import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import duckdb

from retryscope.analytics._queries import sql_string
from retryscope.analytics.model._partition import (
    ACROSS_REQUESTS_TABLES,
    MODEL_TABLES,
    PER_REQUEST_TABLES,
    PROJECTIONS,
    point_projections,
)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one build writes its per-request tables in a :class:`MemoryStore`: tables of
    the store named as the model's with the build's ``suffix`` (a
    :class:`~retryscope.analytics.model._partition.Place`)."""

    suffix: str

    def __call__(self, table: str) -> str:
        return f"{ALIAS}.main.{table}{self.suffix}"

    def write(self, con: duckdb.DuckDBPyConnection, table: str, query: str) -> str:
        con.execute(f"CREATE TABLE {self(table)} AS\n{query}")
        return self(table)


UNCOMPRESSED_BYTES_PER_SPAN_ROW: Final = 640
"""Memory the model's tables take per span row of the data set when kept uncompressed
(measured on the bench data: 838 MiB for the 1.39 M rows of 1 M attempts), about 5x
their compressed size."""
UNCOMPRESSED_SHARE: Final = 0.25
"""The share of the memory limit a model in memory may take uncompressed."""
KEYS: Final = "request_keys"
"""Per time partition: the requests it holds spans of (``h``), the unit each is built in
(``u``, ``request_keys.sql``) and the partition (``part``)."""
ALIAS: Final = "rs_model"
"""The attached database of a :class:`MemoryStore`."""


@dataclass(frozen=True, slots=True)
class Modes:
    """The permissions of what the model cache holds (the model, the UI's figures): the
    data set's own (its directory's mode for directories, its files' mode for files),
    whatever the process umask; the owner always keeps access."""

    directory: int = 0o700
    file: int = 0o600

    @classmethod
    def of(cls, root: str) -> Modes:
        path = Path(root)
        try:
            home = path if path.is_dir() else path.parent
            directory = home.stat().st_mode & 0o777
            first = next(_data_files(path), None)
            file = first.stat().st_mode & 0o666 if first else directory & 0o666
        except OSError:
            return cls()
        return cls(directory | 0o700, file | 0o600)


def _data_files(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                yield Path(dirpath) / name


class Store(abc.ABC):
    """What every store does: name the model's tables on a connection."""

    @abc.abstractmethod
    def relation(self, table: str) -> str:
        """SQL naming every row of the model table ``table``."""

    def point_views(
        self, con: duckdb.DuckDBPyConnection, tables: Sequence[str] = MODEL_TABLES
    ) -> None:
        """Temp views on ``con`` named as the model's ``tables`` (and their projections),
        onto this store (a cursor building the tables across requests names only the
        per-request ones)."""
        for table in tables:
            con.execute(
                f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM {self.relation(table)}"
            )
        point_projections(con, tables)


def drop_views(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the model's views on ``con``, and tables a model built earlier left there."""
    names = [*MODEL_TABLES, *PROJECTIONS]
    for kind, catalog, column in (
        ("VIEW", "duckdb_views()", "view_name"),
        ("TABLE", "duckdb_tables()", "table_name"),
    ):
        found = con.execute(
            f"SELECT {column} FROM {catalog} WHERE temporary AND {column} IN ?", [names]
        ).fetchall()
        for (name,) in found:
            con.execute(f"DROP {kind} temp.main.{name}")
    con.execute(f"DETACH DATABASE IF EXISTS {ALIAS}")


def uncompressed_budget(memory_limit: int | None) -> int:
    """Bytes of a model in memory that may stay uncompressed under a memory limit of
    ``memory_limit`` bytes: :data:`UNCOMPRESSED_SHARE` of it (none when it is unknown)."""
    if memory_limit is None or memory_limit <= 0:
        return 0
    return int(memory_limit * UNCOMPRESSED_SHARE)


def checkpoint_due(kept: int, to_come: int, budget: int) -> bool:
    """Whether a store holding ``kept`` bytes uncompressed, with ``to_come`` bytes still
    to keep, compresses now under a budget of ``budget`` bytes uncompressed: always
    without a budget; never when everything fits it; else when what it holds is over it,
    or when what is still to come fits it alone (compressing now leaves the rest as is)."""
    if budget <= 0:
        return True
    if kept + to_come <= budget:
        return False
    return kept > budget or to_come <= budget


class MemoryStore(Store):
    """The model in an in-memory database attached to the connection as ``rs_model``.

    Each build (a time partition or a group of them, a request partition, the requests
    straddling builds) writes its per-request tables here itself (:meth:`place`; part
    of the model once adopted, :meth:`adopt`), so no row is copied: a model table is the
    union of its builds' tables. Tables across requests and request keys are copied in
    (:meth:`keep`).

    DuckDB compresses an in-memory table when it checkpoints it, and that pass costs about
    a third of a build's CPU: so no automatic checkpoint runs while the store takes rows
    (:meth:`unchecked`), and the store checkpoints (compressing every row kept since the
    last one) only as the memory limit needs. It is told the span rows of the whole build
    (``span_rows``) and how many bytes may stay uncompressed (``uncompressed_budget``),
    and checkpoints after a partition when the rows kept uncompressed would exceed the
    budget, or when the rows still to come fit it but would not together with those kept
    (so only the last partitions, up to the budget, stay uncompressed). Sizes are
    estimated from span rows (:data:`UNCOMPRESSED_BYTES_PER_SPAN_ROW`). A 10 M-attempt
    model compressed takes ≈ 1.5 GiB. Beyond the memory limit DuckDB moves its blocks to
    the temporary directory."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        *,
        span_rows: int = 0,
        uncompressed_budget: int = 0,
    ) -> None:
        con.execute(f"DETACH DATABASE IF EXISTS {ALIAS}")
        con.execute(f"ATTACH ':memory:' AS {ALIAS} (COMPRESS)")
        self._budget = uncompressed_budget
        self._to_come = span_rows * UNCOMPRESSED_BYTES_PER_SPAN_ROW
        self._pending = 0
        self._created: set[str] = set()
        self._stored: dict[str, list[str]] = {}
        self._placements = 0

    def place(self) -> Placement:
        """Where the next build writes its per-request tables (the first build's tables
        are named as the model's)."""
        n, self._placements = self._placements, self._placements + 1
        return Placement("" if n == 0 else f"__{n}")

    def adopt(self, placement: Placement) -> None:
        """Make the per-request tables a build wrote at ``placement`` part of the model."""
        for table in PER_REQUEST_TABLES:
            self._stored.setdefault(table, []).append(placement(table))

    def discard(self, cur: duckdb.DuckDBPyConnection, placement: Placement) -> None:
        """Drop what a build that stopped wrote at ``placement``."""
        for table in PER_REQUEST_TABLES:
            cur.execute(f"DROP TABLE IF EXISTS {placement(table)}")

    def relation(self, table: str) -> str:
        stored = self._stored.get(table)
        if not stored:
            return f"{ALIAS}.main.{table}"
        if len(stored) == 1:
            return stored[0]
        return "(" + " UNION ALL ".join(f"SELECT * FROM {t}" for t in stored) + ")"

    def keep(
        self,
        cur: duckdb.DuckDBPyConnection,
        tables: Sequence[str],
        part: str = "",
        span_rows: int = 0,
    ) -> None:
        """Move the temp ``tables`` of ``cur`` here (``request_keys`` with the partition's
        key ``part``), built from ``span_rows`` span rows."""
        with self.unchecked(cur):
            self._keep(cur, tables, part)
        self._kept(cur, span_rows)

    def _keep(self, cur: duckdb.DuckDBPyConnection, tables: Sequence[str], part: str) -> None:
        for table in tables:
            source = f"temp.main.{table}"
            if table == KEYS:
                source = f"(SELECT h, u, {sql_string(part)} AS part FROM temp.main.{table})"
            if table in self._created:
                cur.execute(f"INSERT INTO {ALIAS}.main.{table} BY NAME SELECT * FROM {source}")
            else:
                cur.execute(f"CREATE TABLE {ALIAS}.main.{table} AS SELECT * FROM {source}")
                self._created.add(table)
            cur.execute(f"DROP TABLE temp.main.{table}")

    def _kept(self, cur: duckdb.DuckDBPyConnection, span_rows: int) -> None:
        """Checkpoint (compress what was kept since the last one) as the budget needs."""
        size = span_rows * UNCOMPRESSED_BYTES_PER_SPAN_ROW
        self._pending += size
        self._to_come = max(0, self._to_come - size)
        if checkpoint_due(self._pending, self._to_come, self._budget):
            cur.execute(f"CHECKPOINT {ALIAS}")
            self._pending = 0

    @contextlib.contextmanager
    def unchecked(self, cur: duckdb.DuckDBPyConnection) -> Iterator[None]:
        """Without automatic checkpoints while the store takes rows (a large commit would
        checkpoint the in-memory database, compressing every row written). The setting
        is the database's, so it is put back afterwards."""
        ((threshold,),) = cur.execute("SELECT current_setting('checkpoint_threshold')").fetchall()
        cur.execute("SET checkpoint_threshold = '1000TB'")
        try:
            yield
        finally:
            cur.execute(f"SET checkpoint_threshold = {sql_string(str(threshold))}")

    def keys(self) -> str | None:
        """The partitions' request keys, or None when no partition kept them."""
        return self.relation(KEYS) if KEYS in self._created else None

    def replace_requests(
        self, cur: duckdb.DuckDBPyConnection, straddlers: str, placement: Placement
    ) -> None:
        """Replace the rows of the requests in the relation ``straddlers`` (of ``h``) by
        the per-request tables written at ``placement`` (built from all their spans)."""
        with self.unchecked(cur):
            for table in PER_REQUEST_TABLES:
                for stored in self._stored.get(table, ()):
                    cur.execute(f"DELETE FROM {stored} WHERE h IN (SELECT h FROM {straddlers})")
                # rows of no request are their partitions' (spans of no request a
                # trace's implicit requests were built again from)
                cur.execute(f"DELETE FROM {placement(table)} WHERE h IS NULL")
        self.adopt(placement)
        self._kept(cur, 0)

    def keep_across(self, cur: duckdb.DuckDBPyConnection) -> None:
        """Keep the tables across requests ``cur`` built (replacing earlier ones)."""
        for table in ACROSS_REQUESTS_TABLES:
            self._created.discard(table)
            cur.execute(f"DROP TABLE IF EXISTS {self.relation(table)}")
        self.keep(cur, ACROSS_REQUESTS_TABLES)
