"""Data access of the audit UI.

One audit model per version of the data set (``st.cache_resource``), its DuckDB
connection locked down so it can read only the data set's files and its configuration
cannot be changed; query results are cached (``st.cache_data``) on the data set's file
list, mtimes and sizes, so new files show on the next refresh. The model binds one set of
filters at a time (its scope tables, which a cursor does not share), so queries on it are
serialised by a lock instead of running on cursors. Every query is a function of
``retryscope.analytics``: SQL lives there, with bound parameters only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import streamlit as st

from retryscope._environment import CACHE_ENV, MEMORY_LIMIT_ENV, MODEL_ENV
from retryscope.analytics import (
    AuditModel,
    DataSet,
    FigureStore,
    Filters,
    Fingerprint,
    RequestQuery,
    SkippedFile,
    amplification,
    breakdown,
    build_report,
    class_names,
    compare,
    compare_requests,
    connect,
    cost,
    deadline,
    dimension_values,
    fallback,
    finding_counts,
    findings,
    headline,
    latency,
    load,
    nested_retry_requests,
    new_connection,
    request_attempts,
    request_findings,
    request_list,
    request_span_tree,
    request_summary,
    retry_success_matrix,
    scope_time_range,
    time_range,
)
from retryscope.analytics.model import Progress, ProgressCallback
from retryscope.analytics.replay import (
    WhatIf,
    known_policy_count,
    policy_drift,
    whatif,
    whatif_requests,
)

WAIT_POLL_S = 0.25
"""How often a session waiting for another's model build redraws that build's progress."""
FilterKey = tuple[datetime | None, datetime | None, str | None, str | None, str | None]


class _Relay:
    """The progress callback of a store's connection: forwards a build's progress to the
    display of the script run building the model, and keeps the latest report for the
    sessions waiting for that build."""

    def __init__(self) -> None:
        self.latest: Progress | None = None
        self.display: ProgressCallback | None = None

    def __call__(self, p: Progress) -> None:
        self.latest = p
        if self.display is not None:
            self.display(p)


@dataclass
class Store:
    model: AuditModel
    lock: threading.Lock
    relay: _Relay = field(default_factory=_Relay)
    ready: threading.Event = field(default_factory=threading.Event)
    """Set once the model is attached or built and the connection locked down."""
    figures: FigureStore | None = None
    """Where the whole-data-set figures of this version are kept (with a model cache)."""


def _lock_down(model: AuditModel) -> None:
    """Only the data set's files (and its cached model's) stay readable; nothing can be
    written outside memory."""
    con = model.con
    con.execute("SET allowed_paths = ?", [[*model.dataset.files, *model.paths]])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


@st.cache_resource(max_entries=2, show_spinner="Opening the data set…")
def _store(root: str, version: Fingerprint) -> Store:
    """The data set's audit model, not built yet: :func:`_prepare` builds it
    outside any cached function, so the progress it draws is not replayed on cache hits."""
    memory_limit = os.environ.get(MEMORY_LIMIT_ENV) or None
    relay = _Relay()
    model, _ = connect(
        root,
        con=new_connection(memory_limit=memory_limit),
        model_cache=os.environ.get(CACHE_ENV) or None,
        progress=relay,
    )
    return Store(model, threading.Lock(), relay)


def _prepare(store: Store, version: Fingerprint) -> None:
    """Attach the model (a distributed engine's, read, never rebuilt here) or build it (into
    the cache, reading the partitions it holds), then lock the connection down. With a
    model cache, the figures of this version of the data set and model are kept there."""
    built = os.environ.get(MODEL_ENV) or None
    cache = os.environ.get(CACHE_ENV) or None
    model = store.model
    if built is not None:
        from retryscope.analytics.distributed import attach_model

        attach_model(model, built)
    else:
        model.build()
    if cache is not None and model.paths and not model.dataset.is_remote:
        store.figures = FigureStore.of(cache, model.dataset.root, version, model.paths)
    _lock_down(model)


def _ready(store: Store, version: Fingerprint, display: ProgressCallback | None = None) -> None:
    """Prepare ``store`` once; a session arriving while another prepares it shows that
    build's progress (to ``display``) until it is done."""
    if store.ready.is_set():
        return
    while not store.lock.acquire(timeout=WAIT_POLL_S):
        if display is not None and store.relay.latest is not None:
            display(store.relay.latest)
    try:
        if store.ready.is_set():
            return
        store.relay.display = display
        try:
            _prepare(store, version)
        finally:
            store.relay.display = None
        store.ready.set()
    finally:
        store.lock.release()


def _filters(key: FilterKey | None) -> Filters | None:
    return None if key is None else Filters(*key)


def _bucket(args: tuple[Any, ...]) -> timedelta:
    return timedelta(seconds=float(args[1])) if len(args) > 1 else timedelta(hours=1)


def _affected(requests: pa.Table, limit: int) -> tuple[int, pa.Table]:
    """How many requests the replay changes, and the ``limit`` most affected of them: most
    attempts saved first, then most cost saved. Each row gains ``attempts_saved`` and
    ``cost_saved_micros``."""
    saved = pc.subtract(requests["recorded_attempts"], requests["replayed_attempts"])
    cost = pc.subtract(requests["recorded_cost_micros"], requests["replayed_cost_micros"])
    status = requests["replayed_status"]
    miss = pc.fill_null(
        pc.not_equal(requests["replayed_deadline_miss"], requests["recorded_deadline_miss"]),
        True,  # NULL: an unknown outcome
    )
    changed = pc.or_(
        pc.or_(
            pc.not_equal(saved, 0),
            pc.not_equal(status, pc.if_else(requests["recorded_success"], "success", "failed")),
        ),
        pc.or_(pc.or_(miss, requests["estimated"]), pc.greater(requests["shift_ms"], 0)),
    )
    rows = (
        requests.append_column("attempts_saved", saved)
        .append_column("cost_saved_micros", cost)
        .filter(changed)
    )
    top = rows.sort_by(
        [
            ("attempts_saved", "descending"),
            ("cost_saved_micros", "descending"),
            ("logical_request_id", "ascending"),
        ]
    ).slice(0, limit)
    return rows.num_rows, top


QUERIES: dict[str, Callable[[AuditModel, Filters | None, tuple[Any, ...]], Any]] = {
    "report": lambda m, f, a: build_report(m, f),
    # the report's headline figures, from the model's rollups where they cover the filters
    "headline": lambda m, f, a: headline(m, f),
    "amplification": lambda m, f, a: amplification(m, by=a[0], filters=f, bucket=_bucket(a)),
    "cost": lambda m, f, a: cost(m, by=a[0], filters=f),
    "fallback": lambda m, f, a: fallback(m, by=a[0], filters=f),
    "deadline": lambda m, f, a: deadline(m, by=a[0], filters=f),
    "latency": lambda m, f, a: latency(m, by=a[0], filters=f),
    "load": lambda m, f, a: load(m, filters=f),
    # findings arguments: (limit, rule ids) — a page of the rows of those rules
    "findings": lambda m, f, a: findings(m, rules=a[1], limit=a[0], filters=f),
    "finding_counts": lambda m, f, a: finding_counts(m, filters=f),
    "nested_retry_requests": lambda m, f, a: nested_retry_requests(m, filters=f, limit=a[0]),
    "retry_success_matrix": lambda m, f, a: retry_success_matrix(m, filters=f),
    "dimension_values": lambda m, f, a: dimension_values(m),
    "class_names": lambda m, f, a: class_names(m),
    "time_range": lambda m, f, a: time_range(m),
    "scope_time_range": lambda m, f, a: scope_time_range(m, filters=f),
    # request_list arguments: the fields of a RequestQuery in order (``astuple``)
    "request_list": lambda m, f, a: request_list(m, RequestQuery(*a), filters=f),
    "request_findings": lambda m, f, a: request_findings(m, a[0]),
    "request_span_tree": lambda m, f, a: request_span_tree(m, a[0]),
    "request_summary": lambda m, f, a: request_summary(m, a[0]),
    "request_attempts": lambda m, f, a: request_attempts(m, a[0]),
    # what-if arguments: the fields of a WhatIf in order (``astuple``), hashable for caching
    "whatif": lambda m, f, a: whatif(m, WhatIf(*a), filters=f),
    "whatif_affected": lambda m, f, a: _affected(
        whatif_requests(m, WhatIf(*a[1:]), filters=f), a[0]
    ),
    "policy_drift": lambda m, f, a: policy_drift(m, filters=f),
    # breakdown arguments: (dimension, figure, bucket seconds, top)
    "breakdown": lambda m, f, a: breakdown(
        m, a[0], a[1], bucket=timedelta(seconds=a[2]), top=a[3], filters=f
    ),
    # compare arguments: (since, until, *the fields of a RequestQuery): a slice
    "compare": lambda m, f, a: compare(m, RequestQuery(*a[2:]), filters=f, since=a[0], until=a[1]),
    # compare_requests arguments: (dimension, value, limit, since, until, *RequestQuery)
    "compare_requests": lambda m, f, a: compare_requests(
        m, RequestQuery(*a[5:]), a[0], a[1], filters=f, since=a[3], until=a[4], limit=a[2]
    ),
}


@st.cache_data(
    max_entries=1024,
    # the first query on a data set builds its analytics tables: minutes at tens of millions
    show_spinner="Querying the audit data (the first query on a large data set takes longest)…",
)
def _query(
    root: str, version: Fingerprint, name: str, key: FilterKey | None, args: tuple[Any, ...]
) -> Any:
    store = _store(root, version)
    _ready(store, version)
    whole = key is None or all(v is None for v in key)
    if whole and store.figures is not None:
        kept = store.figures.get(name, args)
        if kept is not None:
            return kept
    with store.lock:
        value = QUERIES[name](store.model, _filters(key), args)
    if whole and store.figures is not None:
        store.figures.put(name, args, value)
    return value


@st.cache_data(max_entries=16, show_spinner=False)
def _policy_documents(root: str, version: Fingerprint) -> int:
    store = _store(root, version)
    _ready(store, version)
    with store.lock:
        return known_policy_count(store.model)


@dataclass(frozen=True)
class Source:
    """The data set the UI shows, at the version seen by this script run."""

    root: str
    version: Fingerprint

    @property
    def dataset(self) -> DataSet:
        return _store(self.root, self.version).model.dataset

    def prepare(self, display: ProgressCallback) -> None:
        """Make the audit model ready before the first query: attached, or built with its
        progress reported to ``display``."""
        _ready(_store(self.root, self.version), self.version, display)

    def skipped(self) -> tuple[SkippedFile, ...]:
        """Files skipped so far: unreadable when listed, or undecodable when first read."""
        store = _store(self.root, self.version)
        with store.lock:
            return store.model.skipped_files()

    @property
    def policy_documents(self) -> int:
        """How many retry policies the data set carries (on the control plane's request
        spans or as side files ``_policies/*.json``)."""
        return _policy_documents(self.root, self.version)

    def query(self, name: str, filters: Filters | None = None, *args: Any) -> Any:
        """Result of query ``name`` (a key of :data:`QUERIES`) under ``filters``."""
        key: FilterKey | None = None
        if filters is not None:
            key = (filters.since, filters.until, filters.route, filters.tenant, filters.operation)
        return _query(self.root, self.version, name, key, args)
