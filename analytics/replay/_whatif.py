"""What-if replay: re-decide recorded requests under another retry policy.

The recorded attempts of each request's retry owner (its outermost layer) are replayed in
ordinal order by DuckDB window functions (``sql/whatif.sql``) under a :class:`WhatIf`:
fewer attempts, no fallback, a retry budget as a fraction of traffic, another backoff cap.
The recorded outcomes are reused, so what follows a changed decision is marked:

- a request the new policy cuts before its success fails for certain (it stops);
- an attempt that would start earlier under a lower backoff cap keeps its recorded outcome
  though it would have run at another time: counted, but ``estimated``;
- a request the new policy would retry beyond what was recorded (a higher attempt limit
  after ``stop_attempt_budget``, or time freed by the cap after ``stop_deadline``) has an
  ``unknown`` outcome: the summary gives a low (known only) and high bound.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import duckdb
import pyarrow as pa

from retryscope.analytics._filters import Filters
from retryscope.analytics._queries import arrow, load
from retryscope.control import RetryPolicy, policy_from_json, policy_from_toml

if TYPE_CHECKING:
    from retryscope.analytics._audit_model import AuditModel

DEFAULT_WINDOW_MS: Final = 60_000
"""Retry-budget window (the load metric's default window)."""


@dataclass(frozen=True, slots=True)
class WhatIf:
    """The policy to replay under; ``None``/``False`` leaves that decision as recorded.

    ``retry_budget`` is the share of first attempts per ``window_ms`` window that may be
    retried (0.1 = Envoy's 10 % budget style).
    """

    max_attempts: int | None = None
    no_fallback: bool = False
    max_backoff_ms: int | None = None
    retry_budget: float | None = None
    window_ms: int = DEFAULT_WINDOW_MS

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.max_backoff_ms is not None and self.max_backoff_ms < 0:
            raise ValueError(f"max_backoff_ms must be >= 0, got {self.max_backoff_ms}")
        if self.retry_budget is not None and not (
            math.isfinite(self.retry_budget) and 0 <= self.retry_budget <= 1
        ):
            raise ValueError(f"retry_budget must be in [0, 1], got {self.retry_budget}")
        if self.window_ms < 1:
            raise ValueError(f"window_ms must be >= 1, got {self.window_ms}")

    @classmethod
    def from_policy(cls, policy: RetryPolicy, **overrides: Any) -> WhatIf:
        """A control-plane policy's limits: ``max_total_attempts``, ``max_backoff_ms``, and
        no fallback when it lists a single route. ``overrides`` that are not None win."""
        values: dict[str, Any] = {
            "max_attempts": policy.max_total_attempts,
            "max_backoff_ms": policy.max_backoff_ms,
            "no_fallback": len(policy.routes) == 1,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def describe(self) -> str:
        parts = [
            f"max_attempts={self.max_attempts}" if self.max_attempts is not None else "",
            "no_fallback" if self.no_fallback else "",
            f"max_backoff_ms={self.max_backoff_ms}" if self.max_backoff_ms is not None else "",
            f"retry_budget={self.retry_budget:g}/{self.window_ms}ms"
            if self.retry_budget is not None
            else "",
        ]
        return ", ".join(p for p in parts if p) or "as recorded"

    def params(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "no_fallback": self.no_fallback,
            "max_backoff_ms": self.max_backoff_ms,
            "retry_budget": self.retry_budget,
            "window_ms": self.window_ms,
        }


def read_policy_file(path: str | os.PathLike[str]) -> RetryPolicy:
    """A policy file as the control plane decodes it (``.toml`` as TOML, else JSON).

    It is decoded strictly; validation is that of the control plane except that any
    declared retry owner is accepted (the replay does not dispatch).
    """
    file = Path(path)
    text = file.read_text(encoding="utf-8")
    decode = policy_from_toml if file.suffix.lower() == ".toml" else policy_from_json
    owner = decode(text, validate=False).retry_owner
    return decode(text, accepted_owners=frozenset({owner}))


def _install(model: AuditModel, filters: Filters | None) -> duckdb.DuckDBPyConnection:
    """The model's connection scoped to ``filters``, with the replay's macros over it."""
    con = model.scoped(filters)
    con.execute(load("whatif"))
    return con


def whatif_requests(
    model: AuditModel, policy: WhatIf, *, filters: Filters | None = None
) -> pa.Table:
    """One row per request: recorded vs replayed attempts, cost, status, deadline miss,
    where it was cut and why, the backoff shift, and whether the result is an estimate."""
    con = _install(model, filters)
    table: pa.Table = con.sql(
        "SELECT * FROM whatif_requests($max_attempts, $no_fallback, $max_backoff_ms,"
        " $retry_budget, $window_ms)",
        params=policy.params(),
    ).to_arrow_table()
    return table


def whatif(model: AuditModel, policy: WhatIf, *, filters: Filters | None = None) -> pa.Table:
    """Summary rows (requests, attempts, cost_micros, successes, success_rate,
    deadline_misses): ``recorded``, ``replayed_low``, ``replayed_high`` (NULL when
    unbounded), and the counts of ``estimated_requests`` and ``unknown_requests``."""
    return arrow(_install(model, filters), "whatif_summary", policy.params())
