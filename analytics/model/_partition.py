"""The model's per-request tables of one set of whole logical requests: the step every
model build repeats (per time partition, per request partition, over the requests that
straddle partitions, or over a drill-down's request), and the engine-neutral function an
engine running the build in its own tasks calls (:func:`build_partition`).

Every table depends only on the spans of one logical request (or of one span), so the
model of a data set is the union of the tables of disjoint sets of its requests, and a
request is found in them by ``h`` (``rs_request_key``, a 64-bit hash of its id). The
tables across requests (:data:`ACROSS_REQUESTS_TABLES`) are built afterwards over that
union (:func:`build_across_requests`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Final, Protocol

import duckdb
import pyarrow as pa

from retryscope.analytics import _scope_facts as scope_facts
from retryscope.analytics._macros import install_macros
from retryscope.analytics._queries import load
from retryscope.analytics.model import _scripts as scripts
from retryscope.analytics.model._progress import quiet_duckdb
from retryscope.schema import SPAN_SCHEMA

PER_REQUEST_TABLES: Final = (
    "request_digest_hashes",
    "reconciliations",
    "digest_spans",
    "class_names",
    "all_attempt_facts",
    "all_request_layers",
    "all_request_routes",
    "all_request_nesting",
    "all_request_facts",
    "span_anomalies",
    "unjoined_spans",
    "telemetry_gaps",
    "duplicate_spans",
    "ordinal_anomalies",
    "ordinal_gaps",
    "attempt_findings",
)
"""The tables :func:`build_tables` leaves, each with the request key ``h`` (NULL on the
rows of spans of no request: a foreign writer's spans, telemetry gap records)."""

REQUEST_BASE: Final = "request_base"
REQUEST_BASE_COLUMNS: Final = (
    "h",
    "logical_request_id",
    "trace_id",
    "started_at",
    "ended_at",
    "has_request_span",
    "terminal",
    "tenant",
    "operation",
    "retry_owner",
    "deadline",
    "idempotency_digest",
    "logical_request_digest",
    "required_capability_digest",
    "required_behavior_class",
    "max_data_boundary",
    "entry_route",
    "entry_release",
    "entry_boundary",
)
"""The columns of ``request_base`` (``model_requests.sql``), which ``all_request_facts``
begins with, row for row: the build makes ``request_base`` a table of its own, the model
keeps its rows once, in ``all_request_facts``."""


@dataclass(frozen=True, slots=True)
class Projection:
    """A model table kept as some columns (and rows) of another: a view, never stored."""

    table: str
    columns: tuple[str, ...]
    where: str | None = None
    """The rows of ``table`` it holds (all when None)."""

    def query(self) -> str:
        where = "" if self.where is None else f" WHERE {self.where}"
        return f"SELECT {', '.join(self.columns)} FROM {self.table}{where}"


RECEIVER_TRAFFIC: Final = "all_receiver_traffic"
PROJECTIONS: Final = {
    REQUEST_BASE: Projection("all_request_facts", REQUEST_BASE_COLUMNS),
    # every physical attempt, by the name users query
    "physical_attempts": Projection("all_attempt_facts", ("*",)),
    # what the receiver saw: the attempts with none beneath them, each an original or a
    # repeat of its operation (model_requests.sql, all_attempt_facts.is_repeat)
    RECEIVER_TRAFFIC: Projection(
        "all_attempt_facts",
        (
            "h",
            "logical_request_id",
            "start_time",
            "route_id",
            "outcome",
            "prev_kind",
            "route_release",
            "request_tenant",
            "request_operation",
            "layer",
            "is_repeat",
        ),
        "is_leaf",
    ),
}
"""Model tables named as views of what the model keeps (:func:`point_projections`)."""

ACROSS_REQUESTS_TABLES: Final = (
    "idempotency_conflicts",
    "all_route_latency",
    "all_doomed_dispatches",
)
"""The tables :func:`build_across_requests` leaves: each reads every request."""

MODEL_TABLES: Final = (*PER_REQUEST_TABLES, *ACROSS_REQUESTS_TABLES)
"""Every table the audit model keeps (the :data:`PROJECTIONS` are views of them)."""

SOURCE: Final = "unit_spans"
"""The relation :func:`build_tables` reads: the spans of the requests to build."""

_SCRATCH: Final = (
    REQUEST_BASE,
    "span_copies",
    "attempt_rows",
    "attempt_groups",
    "attempt_places",
    "request_entries",
    "implicit_spans",
)
_BUILT_PROJECTIONS: Final = (RECEIVER_TRAFFIC,)
"""The projections the scripts' later statements read while a build runs (``request_base``
they read as the table of its own the build makes first)."""
_VIEWS: Final = (
    "spans",
    "recorded_spans",
    "requests",
    "attempt_facts",
    "request_nesting",
    "request_layers",
    "request_routes",
    "receiver_traffic",
)


class Place(Protocol):
    """Where :func:`build_tables` writes the per-request tables, instead of temp tables of
    the connection: where they are kept (a store's database, a cache's Parquet files), so
    each is written once, never copied."""

    def write(self, con: duckdb.DuckDBPyConnection, table: str, query: str) -> str:
        """Write the rows of ``query`` as the model's table ``table``; returns a relation
        that reads them."""
        ...


_CREATE_TEMP: Final = re.compile(r"\A(?:\s+|--[^\n]*\n)*CREATE OR REPLACE TEMP TABLE (\w+) AS\b")
_END: Final = re.compile(r";\s*\Z")


def build_tables(con: duckdb.DuckDBPyConnection, place: Place | None = None) -> None:
    """Build :data:`PER_REQUEST_TABLES` from the spans the relation :data:`SOURCE` of
    ``con`` holds (which must hold every span of each request it holds any of): as temp
    tables of ``con``, or, with ``place``, each written where ``place`` keeps it and read
    through a temp view of its name. A temp view ``spans`` over the source shadows the
    data set's: with one copy of each span that arrived more than once and the implicit
    logical requests stamped on spans of none, and the scripts of :mod:`._scripts` read
    that."""
    run = con.execute if place is None else _placing(con, place)
    con.execute(f"CREATE OR REPLACE TEMP VIEW spans AS SELECT * FROM {SOURCE}")
    con.execute(load(scripts.SPAN_COPIES))
    if con.execute("SELECT count(*) FROM span_copies").fetchall()[0][0]:
        con.execute(load(scripts.ONE_COPY))
    else:
        con.execute(f"CREATE OR REPLACE TEMP VIEW recorded_spans AS SELECT * FROM {SOURCE}")
    if con.execute(load(scripts.FREE_CLIENT)).fetchall()[0][0]:
        con.execute(load(scripts.IMPLICIT))
    else:
        con.execute("CREATE OR REPLACE TEMP VIEW spans AS SELECT * FROM recorded_spans")
    for name in scripts.PER_REQUEST:
        if name == scripts.HTTP_ATTEMPTS and not _has_unmarked_http_spans(con):
            continue
        run(load(name))
    point_projections(con, PER_REQUEST_TABLES, _BUILT_PROJECTIONS)
    con.execute(load(scripts.UNFILTERED_SCOPE))  # the scope's views over these tables
    if place is None:
        scope_facts.build_request_facts(con, "all")
    else:
        run(f"CREATE OR REPLACE TEMP TABLE all_request_facts AS\n{load(scope_facts.REQUEST_FACTS)}")


def _placing(con: duckdb.DuckDBPyConnection, place: Place) -> Callable[[str], object]:
    """Runs a script statement by statement, writing its per-request tables where
    ``place`` keeps them (each read through a temp view of its own name by the script's
    later statements and the scope's views)."""

    def run(script: str) -> None:
        for statement in con.extract_statements(script):
            created = _CREATE_TEMP.match(statement.query)
            if created is None or created.group(1) not in PER_REQUEST_TABLES:
                con.execute(statement)
                continue
            name, query = created.group(1), _END.sub("", statement.query[created.end() :])
            relation = place.write(con, name, query)
            con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM {relation}")

    return run


def _has_unmarked_http_spans(con: duckdb.DuckDBPyConnection) -> bool:
    return bool(con.execute(load(scripts.UNMARKED_HTTP)).fetchall()[0][0])


def drop_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Drop what :func:`build_tables` left on ``con`` (also after it stopped halfway;
    the tables it placed elsewhere stay)."""
    placed = {
        name
        for (name,) in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE temporary AND view_name IN ?",
            [list(PER_REQUEST_TABLES)],
        ).fetchall()
    }
    for view in (*_VIEWS, *_BUILT_PROJECTIONS, *sorted(placed)):
        con.execute(f"DROP VIEW IF EXISTS temp.main.{view}")
    for table in (*PER_REQUEST_TABLES, *_SCRATCH):
        if table not in placed:
            con.execute(f"DROP TABLE IF EXISTS temp.main.{table}")


def point_projections(
    con: duckdb.DuckDBPyConnection,
    tables: Collection[str],
    names: Collection[str] = tuple(PROJECTIONS),
) -> None:
    """Temp views on ``con`` of the :data:`PROJECTIONS` ``names`` of ``tables`` (views or
    tables of ``con`` named as the model's)."""
    for name, projection in PROJECTIONS.items():
        if name in names and projection.table in tables:
            con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {projection.query()}")


def build_across_requests(con: duckdb.DuckDBPyConnection) -> None:
    """Build :data:`ACROSS_REQUESTS_TABLES` as temp tables of ``con`` from views named as
    :data:`PER_REQUEST_TABLES` (and their :data:`PROJECTIONS`) over every request of
    the data set."""
    con.execute(load(scripts.GLOBAL))
    con.execute(load(scripts.UNFILTERED_SCOPE))
    scope_facts.build_across_requests(con, "all")


def new_connection(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the analytics' macros, for one build."""
    config: dict[str, str | bool | int | float | list[str]] = {"preserve_insertion_order": False}
    if threads:
        config["threads"] = threads
    con = quiet_duckdb(duckdb.connect(":memory:", config=config))
    install_macros(con)
    return con


def build_partition(
    spans: pa.Table | pa.RecordBatchReader, *, threads: int | None = None
) -> dict[str, pa.Table]:
    """The model's per-request tables of ``spans`` (rows of
    :data:`retryscope.schema.SPAN_SCHEMA`, a missing column read as NULL), as Arrow
    tables by name (:data:`PER_REQUEST_TABLES`).

    ``spans`` must hold every span of each logical request it holds any of (e.g. one
    partition of the data set by a hash of ``logical_request_id``); the union of the
    results over disjoint sets of requests is the model's per-request tables of all of
    them, whatever engine ran each (:func:`build_across_requests` then builds the rest).
    Runs in a DuckDB connection of its own (``threads`` threads, default one per core)
    and keeps no state."""
    con = new_connection(threads)
    try:
        con.register("rs_partition_spans", spans)
        con.register("rs_partition_schema", SPAN_SCHEMA.empty_table())
        con.execute(
            f"CREATE TEMP VIEW {SOURCE} AS SELECT * FROM rs_partition_spans "
            "UNION ALL BY NAME SELECT * FROM rs_partition_schema"
        )
        build_tables(con)
        return {
            table: con.sql(f"SELECT * FROM temp.main.{table}").to_arrow_table()
            for table in PER_REQUEST_TABLES
        }
    finally:
        con.close()
