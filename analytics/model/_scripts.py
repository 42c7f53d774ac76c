"""The audit model's SQL scripts, in the order they run: the one place that order is kept.

``PER_REQUEST`` builds every per-request table from ``spans`` (its copies of a span
counted once: ``SPAN_COPIES``, ``ONE_COPY``; the implicit logical requests stamped on the
spans of none: ``IMPLICIT``); each table depends on the spans of one
logical request (or one span) only, so the scripts run once per time partition, once
over the requests that straddle partitions, or once over a whole data set, and the model
is the union of the results (:mod:`._partition`). ``REQUEST_FACTS`` follows, over the
unfiltered scope's views of those tables. ``GLOBAL`` and the unfiltered scope's route
latency and doomed dispatches (:mod:`retryscope.analytics._scope_facts`) run afterwards
over all the per-request tables. ``SOURCES`` is every script whose text shapes the model,
so a change to any of them (:func:`script_text`, the rendered macros included)
invalidates a cached model.
"""

from typing import Final

from retryscope.analytics._macros import macros_sql
from retryscope.analytics._queries import load
from retryscope.analytics._scope_facts import SOURCES as SCOPE_FACTS

MACROS: Final = "macros"
SPAN_COPIES: Final = "span_copies"
"""Keys of the spans that arrived more than once."""
ONE_COPY: Final = "one_copy_per_span"
"""``recorded_spans`` with one copy of each such span (run only when there are copies)."""
FREE_CLIENT: Final = "free_client_spans"
"""Whether some client span belongs to no logical request (``IMPLICIT`` runs only then)."""
IMPLICIT: Final = "implicit_requests"
"""``spans``: the recorded spans with the implicit logical requests stamped on them."""
ATTEMPTS: Final = "model_attempts"
"""Every span marked as an attempt, with its request, layer and ordinals (``attempt_rows``)."""
HTTP_ATTEMPTS: Final = "model_http_attempts"
"""HTTP client spans no processor marked, classified as transport sends."""
UNMARKED_HTTP: Final = "unmarked_http_spans"
"""Whether there are such spans (``HTTP_ATTEMPTS`` runs only then)."""
REQUESTS: Final = "model_requests"
"""The per-request and per-attempt tables every metric reads."""
CHECKS: Final = "model_checks"
"""Telemetry checks of spans and requests: malformed spans, gaps, copies, ordinals."""
FINDINGS: Final = "model_findings"
"""The findings of single attempts, judged from the attempt and its own request."""
UNFILTERED_SCOPE: Final = "scope_unfiltered"
"""The scope's views over the model's tables (every request)."""
REQUEST_FACTS: Final = "request_facts"
"""Per request: fallback, deadline, latency and amplification facts."""
REQUEST_KEYS: Final = "request_keys"
"""The requests a time partition holds spans of (to find those straddling partitions)."""
GLOBAL: Final = "model_global"
"""Checks across requests: idempotency digests reused for different requests."""
ROLLUPS: Final = ("rollup_requests", "rollup_cost")
"""The headline's rollups of a build's requests (:mod:`._rollups`), each kept as a table
of its name."""
ROLLUP_KEYS: Final = "rollup_keys"
"""The rollups' grain per request of a build (run before :data:`ROLLUPS`)."""

PER_REQUEST: Final = (ATTEMPTS, HTTP_ATTEMPTS, REQUESTS, CHECKS, FINDINGS)
SOURCES: Final = (
    MACROS,
    SPAN_COPIES,
    ONE_COPY,
    FREE_CLIENT,
    IMPLICIT,
    *PER_REQUEST,
    UNFILTERED_SCOPE,
    REQUEST_KEYS,
    GLOBAL,
    *SCOPE_FACTS,
    ROLLUP_KEYS,
    *ROLLUPS,
)


def script_text(name: str) -> str:
    """The text of one of :data:`SOURCES` as it runs (the macros as rendered)."""
    return macros_sql() if name == MACROS else load(name)
