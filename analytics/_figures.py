"""The UI's whole-data-set figures kept beside the model cache, so the first page of a data
set whose model is up to date reads them instead of computing them again.

A figure is the result of one of the UI's queries (``retryscope.dashboards._data.QUERIES``)
without filters: the same function the CLI and the JSON report call, computed once and
written as Arrow IPC (a table, or a count and a table: a page of a longer list) or JSON (a
dict), never pickled. A set of figures belongs to one version of everything it was
computed from: the data set's files (path, mtime, size), the model files its views read,
and the analytics and UI code (their ``.py`` and ``.sql`` files); any change makes a new
set, and older sets of the same data set are removed when one is written.

The UI writes each figure as it computes it; ``retryscope report`` and ``retryscope
model`` with a model cache keep every figure of the UI's first page (the Overview, the
sidebar's choices) without filters (:func:`keep_first_page`; the report's own slices as it
computed them), so a UI started on the same data set, model and code reads those.
This module imports neither Streamlit nor the UI package (the report runs without them).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

from retryscope import analytics
from retryscope._fs import make_dirs
from retryscope.analytics import _metrics as metrics
from retryscope.analytics._browse import dimension_values, scope_time_range, time_range
from retryscope.analytics._headline import headline
from retryscope.analytics._report import build_report
from retryscope.analytics.model._store import Modes
from retryscope.analytics.replay._policy_drift import POLICY_DIR

if TYPE_CHECKING:
    from retryscope.analytics._audit_model import AuditModel

Fingerprint = tuple[tuple[str, int, int], ...]

FOLDER: Final = "figures"
"""The folder of the model cache holding the figure sets."""

STORED: Final = frozenset(
    {
        "report",
        "headline",
        "amplification",
        "cost",
        "fallback",
        "deadline",
        "latency",
        "load",
        "findings",
        "finding_counts",
        "nested_retry_requests",
        "retry_success_matrix",
        "dimension_values",
        "time_range",
        "scope_time_range",
        "policy_drift",
        "request_list",
        "whatif",
        "whatif_affected",
    }
)
"""The queries whose whole-data-set results are kept (per-request lookups are cheap)."""

TOTAL: Final = b"retryscope.total"
"""Schema metadata of a kept (count, table) pair: the count."""

REPORT_SLICES: Final = (
    ("amplification", "overall"),
    ("amplification", "route"),
    ("amplification", "layer"),
    ("fallback", "overall"),
    ("deadline", "overall"),
    ("latency", "overall"),
)
"""The sliced metrics a report computes (kept per scope by the metrics), which
:func:`keep_first_page` keeps as the UI's figures of those queries and slices."""

OVERVIEW_DIMENSIONS: Final = ("route", "tenant", "operation", "layer")
"""The Overview's top-offender tabs: amplification and cost by each."""

_BUCKETS: Final = (1, 5, 10, 30, 60, 300, 900, 1800, 3600, 6 * 3600, 86_400, 7 * 86_400)


def bucket_for(seconds: float, target: int = 60) -> int:
    """A round time-bucket width (seconds) giving at most ``target`` buckets over a span of
    ``seconds`` (the Overview's trends)."""
    return next((b for b in _BUCKETS if seconds / b <= target), _BUCKETS[-1])


def trend_bucket(first: datetime, last: datetime) -> int:
    """The Overview's trend bucket width (seconds) for requests started from ``first`` to
    ``last``."""
    return bucket_for((last - first).total_seconds())


def _span_seconds(table: pa.Table, first: str, last: str) -> float | None:
    """Seconds from the timestamp in column ``first`` to the one in ``last`` (first row),
    exact to their unit: read as integers (pyarrow turns a nanosecond timestamp into a
    Python value through pandas, which a command would import for that alone)."""
    start, end = (table.column(c).cast(pa.int64())[0].as_py() for c in (first, last))
    if start is None or end is None:
        return None
    return float((end - start) / _PER_SECOND[table.schema.field(first).type.unit])


_PER_SECOND: Final = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def _stats(paths: list[Path]) -> list[tuple[str, int, int]]:
    out = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:  # removed while listing
            continue
        out.append((str(path), stat.st_mtime_ns, stat.st_size))
    return out


def fingerprint(root: str) -> Fingerprint:
    """Path, mtime and size of every visible Parquet file under ``root`` (stat only), then
    of its policy side files (``_policies/*.json``) when there are span files: a new side
    file changes the policy drift, so it makes a new version too."""
    base = Path(root)
    paths = [base] if base.is_file() else sorted(base.rglob("*.parquet"))
    visible = [
        p
        for p in paths
        if not any(part.startswith((".", "_")) for part in p.relative_to(base).parts)
    ]
    spans = _stats(visible)
    if not spans:
        return ()
    folder = (base if base.is_dir() else base.parent) / POLICY_DIR
    return (*spans, *_stats(sorted(folder.glob("*.json"))))


def _ui_package() -> Path:
    """The UI package's folder, found without importing it (it needs Streamlit)."""
    spec = importlib.util.find_spec("retryscope.dashboards")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("retryscope.dashboards is not installed with retryscope")
    return Path(next(iter(spec.submodule_search_locations)))


@cache
def code_digest() -> str:
    """Digest of the analytics code and the UI's query table: the figures' definitions."""
    digest = hashlib.sha256()
    for base in (Path(next(iter(analytics.__path__))), _ui_package()):
        for path in sorted(base.rglob("*")):
            if path.suffix in (".py", ".sql") and path.is_file():
                digest.update(str(path.relative_to(base)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def _unpaired(table: pa.Table) -> pa.Table | tuple[int, pa.Table]:
    """A kept table, or the (count, table) pair it holds."""
    metadata = dict(table.schema.metadata or {})
    count = metadata.pop(TOTAL, None)
    if count is None:
        return table
    return int(count), table.replace_schema_metadata(metadata or None)


def _digest(value: Any) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()


class FigureStore:
    """The figures of one version of a data set and its model, in ``directory``."""

    def __init__(self, directory: Path, *, modes: Modes | None = None) -> None:
        self.directory = directory
        self._modes = Modes() if modes is None else modes

    @classmethod
    def of(
        cls,
        cache: str | os.PathLike[str],
        root: str,
        version: Sequence[tuple[str, int, int]],
        model_files: Sequence[str],
    ) -> FigureStore:
        """The store of data set ``root`` at ``version`` whose model reads ``model_files``
        (its folders and files made with the data set's modes, as the model cache's)."""
        stats = []
        for name in sorted(model_files):
            with contextlib.suppress(OSError):
                stat = os.stat(name)
                stats.append((name, stat.st_mtime_ns, stat.st_size))
        key = _digest((tuple(version), tuple(stats), code_digest()))[:32]
        folder = Path(cache) / FOLDER / f"{_digest(root)[:16]}-{key}"
        return cls(folder, modes=Modes.of(root))

    def _path(self, name: str, args: tuple[Any, ...], suffix: str) -> Path:
        return self.directory / f"{name}-{_digest(args)[:24]}{suffix}"

    def get(self, name: str, args: tuple[Any, ...]) -> Any | None:
        """The stored figure of query ``name`` with ``args``, or None."""
        if name not in STORED:
            return None
        arrow_path = self._path(name, args, ".arrow")
        json_path = self._path(name, args, ".json")
        try:
            if arrow_path.exists():
                with pa.memory_map(str(arrow_path)) as source:
                    return _unpaired(pa.ipc.open_file(source).read_all())
            if json_path.exists():
                return json.loads(json_path.read_text(encoding="utf-8"))
        except (OSError, ValueError, pa.ArrowException):
            return None  # unreadable: computed again (and rewritten)
        return None

    def put(self, name: str, args: tuple[Any, ...], value: Any) -> None:
        """Keep ``value`` (a table, or a dict JSON keeps unchanged); a figure that cannot be
        written is computed again next time."""
        if name not in STORED:
            return
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], pa.Table):
            count, table = value
            if type(count) is not int or TOTAL in (table.schema.metadata or {}):
                return
            metadata = {**(table.schema.metadata or {}), TOTAL: str(count).encode()}
            value = table.replace_schema_metadata(metadata)
        if isinstance(value, pa.Table):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_file(sink, value.schema) as writer:
                writer.write_table(value)
            data, suffix = sink.getvalue().to_pybytes(), ".arrow"
        elif isinstance(value, dict):
            text = json.dumps(value, sort_keys=True)
            if json.loads(text) != value:
                return  # tuples, non-string keys: not kept rather than kept altered
            data, suffix = text.encode("utf-8"), ".json"
        else:
            return
        with contextlib.suppress(OSError):
            self._write(self._path(name, args, suffix), data)

    def _write(self, path: Path, data: bytes) -> None:
        fresh = not self.directory.exists()
        make_dirs(self.directory, self._modes.directory)
        if fresh:
            self._remove_older()
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
        try:
            os.fchmod(fd, self._modes.file)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _remove_older(self) -> None:
        """Remove the sets of earlier versions of the same data set."""
        prefix = self.directory.name.split("-", 1)[0] + "-"
        for other in self.directory.parent.glob(prefix + "*"):
            if other != self.directory and other.is_dir():
                shutil.rmtree(other, ignore_errors=True)


def keep_first_page(
    model: AuditModel, cache: str | os.PathLike[str], report: dict[str, Any] | None = None
) -> None:
    """Keep the UI's first page's figures of the data set's current version: ``report``
    (``build_report`` over ``model`` without filters, the default thresholds; built here when
    None) with what the report computed on the way (the slices of :data:`REPORT_SLICES` as
    the metrics kept them, the load windows, the finding counts), then what the Overview
    and the sidebar read besides: amplification and cost by each of
    :data:`OVERVIEW_DIMENSIONS`, the requests' time range and the trend buckets over it, the
    sidebar's choices. Paths are resolved as ``retryscope ui`` resolves them, so the UI
    finds the set; a local data set with a cached model only."""
    files = model.build().paths
    if model.dataset.is_remote or not files:
        return
    root = str(Path(model.dataset.root).resolve())
    store = FigureStore.of(
        Path(cache).resolve(), root, fingerprint(root), [os.path.realpath(f) for f in files]
    )
    if report is None:
        report = build_report(model)
    store.put("report", (), report)
    store.put("headline", (), headline(model))
    for name, dim in REPORT_SLICES:
        table = metrics.kept_slice(model, name, dim)
        if table is not None:
            store.put(name, (dim,), table)
    store.put("load", (), metrics.load(model))  # the windows the report's findings kept
    store.put("finding_counts", (), dict(report["violations"]))
    for dim in OVERVIEW_DIMENSIONS:
        store.put("amplification", (dim,), metrics.amplification(model, by=dim))
        store.put("cost", (dim,), metrics.cost(model, by=dim))
    span = scope_time_range(model)
    store.put("scope_time_range", (), span)
    seconds = _span_seconds(span, "first_started_at", "last_started_at")
    if seconds is not None:
        bucket = bucket_for(seconds)  # trend_bucket's width
        trend = metrics.amplification(model, by="time_bucket", bucket=timedelta(seconds=bucket))
        store.put("amplification", ("time_bucket", bucket), trend)
    store.put("time_range", (), time_range(model))
    store.put("dimension_values", (), dimension_values(model))
