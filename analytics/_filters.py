"""Which logical requests an analysis covers, and how its results are sliced.

Filters select whole logical requests (by their start time, tenant, operation, or a route
they touched) so ratios stay consistent. They are bound as DuckDB variables read by the
``requests`` view; values are never formatted into SQL.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import duckdb
import pyarrow as pa

from retryscope._safe_text import echoed
from retryscope.analytics import _scope_facts as scope_facts
from retryscope.analytics._queries import load

DEFAULT_BUCKET = timedelta(hours=1)
"""The width of a time bucket unless an analysis gives another."""


class Dimension(enum.StrEnum):
    """How a metric is sliced. Attempt-level metrics use the attempt's route, release and
    layer; request-level metrics use the request's entry route (its first outermost attempt)
    and, for ``layer``, the request's declared retry owner. Time buckets use start times."""

    OVERALL = "overall"
    ROUTE = "route"
    ROUTE_RELEASE = "route_release"
    TENANT = "tenant"
    OPERATION = "operation"
    LAYER = "layer"
    TIME_BUCKET = "time_bucket"


@dataclass(frozen=True, slots=True)
class Filters:
    """Logical requests started in ``[since, until)`` (UTC), of ``tenant`` and
    ``operation``, that made at least one attempt on ``route``; None means any."""

    since: datetime | None = None
    until: datetime | None = None
    route: str | None = None
    tenant: str | None = None
    operation: str | None = None

    def __post_init__(self) -> None:
        if self.since and self.until and naive_utc(self.since) >= naive_utc(self.until):
            raise ValueError(f"since ({self.since.isoformat()}) must be before until")

    def values(self) -> dict[str, datetime | str | None]:
        """The filters as the queries bind them (times naive UTC), by name."""
        return {
            "since": naive_utc(self.since) if self.since else None,
            "until": naive_utc(self.until) if self.until else None,
            "route": self.route,
            "tenant": self.tenant,
            "operation": self.operation,
        }


def naive_utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC; aware ones converted to UTC (and made naive, as
    the data set's timestamps are)."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)
"""The times a filter may name: the Unix epoch up to the year 9999 (a request time, with
room to compute periods around it)."""


def parse_time(text: str) -> datetime:
    """An ISO-8601 time (``2026-11-29T10:00``, ``...Z``, with offset; UTC when it has none)
    or ``@<unix seconds>``, in UTC within [:data:`EARLIEST`, :data:`LATEST`). Anything
    else (``@1e300``, ``@inf``, ``@nan``, year 1 at +05:00) is a ``ValueError`` naming the
    text, cut to a bounded length."""
    raw = text.strip()
    try:
        if raw.startswith("@"):
            value = datetime.fromtimestamp(float(raw[1:]), UTC)
        else:
            value = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
            value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        raise ValueError(
            f"invalid time {echoed(text)!r}: use ISO-8601 (e.g. 2026-11-29T10:00:00Z) "
            "or @unix-seconds"
        ) from None
    if not EARLIEST <= value < LATEST:
        raise ValueError(
            f"time {echoed(text)!r} is out of range: from {EARLIEST:%Y-%m-%d} "
            f"to before {LATEST:%Y-%m-%d}"
        )
    return value


@dataclass(slots=True)
class Scope:
    """The requests a connection's scope tables hold: the ``key`` of the filters that
    selected them (None: none bound yet), whether they are ``copied`` (filtered) or views
    onto the model, and what was computed over them and kept: ``memos`` (memo table:
    the parameters it was computed with) and sliced metrics by name, slice and bucket."""

    key: str | None = None
    copied: bool = False
    memos: dict[str, str] = field(default_factory=dict)
    slices: dict[tuple[str, str, timedelta], pa.Table] = field(default_factory=dict)


def apply(
    con: duckdb.DuckDBPyConnection,
    scope: Scope,
    filters: Filters | None = None,
    *,
    bucket: timedelta = DEFAULT_BUCKET,
) -> Scope:
    """Bind ``filters`` (and the time-bucket width) for the next queries on ``con``, whose
    model is built and whose scope tables are ``scope``: the scope (``sql/scope*.sql``) is
    rebuilt when the filters differ from its own. Without filters the scope is views onto
    the model's tables; with them, copies of the selected requests' rows. Returns the
    scope now bound (``scope`` itself when unchanged)."""
    f = filters or Filters()
    if bucket <= timedelta(0):
        raise ValueError(f"time bucket must be positive, got {bucket}")
    values = {f"rs_{name}": value for name, value in f.values().items()}
    con.execute("SET VARIABLE rs_bucket = to_microseconds(?)", [_micros(bucket)])
    key = repr(sorted(values.items()))
    if scope.key == key:
        return scope  # the scope tables already hold these requests
    for name, value in values.items():
        if value is None:
            con.execute(f"SET VARIABLE {name} = NULL")
        else:
            con.execute(f"SET VARIABLE {name} = ?", [value])
    unfiltered = all(value is None for value in values.values())
    if unfiltered:
        if scope.copied:
            con.execute(load("scope_release"))  # the filtered copies are read no more
        con.execute(load("scope_unfiltered"))
        scope_facts.point(con, "all")
    else:
        con.execute(load("scope_filtered"))
        scope_facts.build(con, "scoped")
    con.execute(load("scope"))
    return Scope(key, copied=not unfiltered)


def _micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
