"""Why a scope holds no logical request: said instead of a report of zeros.

A report over a directory without span files, over spans none of which belongs to a
logical request, or over filters that select none, counts 0 everywhere. Each case has
another cause and another remedy; :func:`no_requests_reason` names it, and the report
carries it (``empty_reason``) to the CLI, its JSON and the UI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retryscope.analytics._browse import time_range
from retryscope.analytics._filters import Filters
from retryscope.analytics._queries import arrow

if TYPE_CHECKING:
    from retryscope.analytics._audit_model import AuditModel

NOT_IN_A_REQUEST = (
    "the application never opened `retryscope.logical_request(...)` around its calls, and "
    "no span is a client send (an HTTP or gRPC client span, a GenAI or SDK call span) that "
    "would make an implicit one: no client instrumentation was on where the calls were made"
)
"""The likely cause when spans exist but none belongs to a logical request."""

UNFINISHED = (
    "none of them is a request or attempt span: the process ended before its requests "
    "and attempts did (their spans were never exported), or they were dropped before export"
)
"""The likely cause when spans name a logical request whose own spans are missing."""


def no_requests_reason(model: AuditModel, filters: Filters | None = None) -> str:
    """Why the requests ``filters`` select (all when None) are none; call it when they
    are. The spans are counted only when the data set holds no request at all."""
    known = int(time_range(model).column("logical_requests")[0].as_py())
    if known:
        return f"no logical requests match the filters ({known:,} in the data set)"
    dataset = model.dataset
    skipped = len(model.skipped_files())
    if not dataset.files:
        unreadable = f" ({skipped:,} unreadable, skipped)" if skipped else ""
        return f"no span files under {dataset.root}{unreadable}"
    row = arrow(model.con, "span_membership").to_pylist()[0]
    spans, stamped = int(row["spans"]), int(row["stamped"])
    if not spans:
        return f"{_count(len(dataset.files), 'span file')} under {dataset.root}, holding no span"
    if not stamped:
        return f"{_count(spans, 'span')}, none in a logical request: {NOT_IN_A_REQUEST}"
    return f"{_count(spans, 'span')}, {stamped:,} naming a logical request, but {UNFINISHED}"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
