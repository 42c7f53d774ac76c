"""What a controlled call receives and may return, and what a run returns.

The call gets a :class:`Dispatch` and returns a value (success), a :class:`CallResult`, a
:class:`Submitted` (it started a provider job: the controller then polls it by id, never
resubmits) or raises :class:`AttemptFailed` with a typed kind. A job poll returns the
same, or :class:`Pending` while the job runs. Nothing in a failure — body or message —
chooses a route, URL, model or delay: only the policy's plan does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from retryscope.control._commit import AttemptStream
from retryscope.control._evaluator import Receipt
from retryscope.control._policy import FallbackRoute
from retryscope.instrumentation import Attempt
from retryscope.vocabulary import OutcomeKind, Terminal


@dataclass(frozen=True, slots=True)
class Dispatch:
    """What one attempt may use. ``idempotency_key`` is the raw key to send to the receiver
    (it stays in process; spans carry only its digest). ``stream`` is where the call
    streams its output under the commit protocol (None unless the run was given a sink);
    ``hedge_ordinal`` is set on the attempts of a hedge race (0 the first)."""

    route: FallbackRoute
    attempt_ordinal: int
    route_attempt_ordinal: int
    idempotency_key: str
    deadline_remaining_ms: int
    attempt: Attempt
    hedge_ordinal: int | None = None
    stream: AttemptStream | None = None


@dataclass(frozen=True, slots=True)
class CallResult:
    """An explicit observation: ``kind`` None is a success carrying ``value``."""

    kind: OutcomeKind | None = None
    value: Any = None
    retry_after_ms: int | None = None
    cost_actual_micros: int | None = None
    http_status: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Submitted:
    """The call submitted a provider job (once); the controller polls ``job_id``."""

    job_id: str
    retry_after_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Pending:
    """A job poll's answer while the job still runs (``retry_after_ms``: the hint)."""

    retry_after_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Job:
    """What a job poll receives: the job's id and the attempt that submitted it."""

    job_id: str
    route_id: str
    attempt_ordinal: int
    idempotency_key: str


class AttemptFailed(Exception):
    """Raised by a callable to report a typed failure."""

    def __init__(
        self,
        kind: OutcomeKind,
        *,
        retry_after_ms: int | None = None,
        cost_actual_micros: int | None = None,
        http_status: int | None = None,
    ) -> None:
        super().__init__(kind.value)
        self.result = CallResult(
            kind=kind,
            retry_after_ms=retry_after_ms,
            cost_actual_micros=cost_actual_micros,
            http_status=http_status,
        )


@dataclass(frozen=True, slots=True)
class RunResult:
    """How the logical request ended; ``value`` is the successful call's value (or the
    stored result a reconciliation recovered)."""

    terminal: Terminal
    value: Any
    receipt: Receipt
    receipt_json: bytes
    logical_request_id: str
