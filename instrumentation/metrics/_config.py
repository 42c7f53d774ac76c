"""Configuration of the live metrics, from arguments or ``RETRYSCOPE_METRICS*`` variables.

One name per setting, as for the Parquet writer: the :class:`MetricsConfig` field, and its
variable ``RETRYSCOPE_METRICS_`` + the name in capitals, except the switch ``enabled``,
which is ``RETRYSCOPE_METRICS`` itself (``RETRYSCOPE_METRICS=off`` turns the instruments
off). ``docs/reference/metrics.md`` lists them, generated from the fields' metadata.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from retryscope.instrumentation._settings import meta, positive_int, read_env, write_env
from retryscope.instrumentation.metrics._instruments import Dimension

ENV_PREFIX: Final = "RETRYSCOPE_METRICS"
_ON: Final = frozenset({"1", "true", "yes", "on"})
_OFF: Final = frozenset({"0", "false", "no", "off"})


def _switch(text: str) -> bool:
    lowered = text.lower()
    if lowered not in _ON and lowered not in _OFF:
        raise ValueError(f"must be one of {', '.join(sorted(_ON | _OFF))}")
    return lowered in _ON


def _on_off(value: Any) -> str:
    return "on" if value else "off"


def _dimensions(text: str) -> frozenset[Dimension]:
    if text.strip().lower() == "none":
        return frozenset()
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    try:
        return frozenset(Dimension(name) for name in names)
    except ValueError:
        known = ", ".join(d.value for d in Dimension)
        raise ValueError(f"must be a comma-separated list of {known} (or none)") from None


def _dimension_list(value: Any) -> str:
    return ",".join(d.value for d in Dimension if d in value) or "none"


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """What :class:`AttemptMetricsProcessor` records and how much it keeps."""

    enabled: bool = field(
        default=True,
        metadata=meta(
            "Record the instruments (`off`: the processor records nothing and the "
            "`retryscope` configurator does not install it).",
            _switch,
            _on_off,
        ),
    )
    dimensions: frozenset[Dimension] = field(
        default=frozenset(),
        metadata=meta(
            "Optional attributes added to every instrument: `tenant`, `operation` (comma "
            "separated), or `none`. Each is capped at `max_values`.",
            _dimensions,
            _dimension_list,
        ),
    )
    max_values: int = field(
        default=100,
        metadata=meta(
            "Distinct values kept per open-ended dimension (route, tenant, operation, "
            "currency); values past the cap, and strings longer than 256 characters, are "
            "recorded as `_other`.",
            positive_int,
        ),
    )
    latency_window: int = field(
        default=1000,
        metadata=meta(
            "Recent attempts per route and layer whose median latency decides a doomed dispatch.",
            positive_int,
        ),
    )
    max_open_requests: int = field(
        default=10_000,
        metadata=meta(
            "Logical requests whose attempts' counts are held until the request ends; past "
            "it the oldest is recorded as it stands (its request-level figures are lost).",
            positive_int,
        ),
    )

    def __post_init__(self) -> None:
        for name in ("max_values", "latency_window", "max_open_requests"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not all(isinstance(d, Dimension) for d in self.dimensions):
            raise ValueError(f"dimensions must be Dimension values, got {set(self.dimensions)!r}")

    @staticmethod
    def variable(name: str) -> str:
        """The environment variable of field ``name``."""
        return ENV_PREFIX if name == "enabled" else f"{ENV_PREFIX}_{name.upper()}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> MetricsConfig:
        """The configuration the ``RETRYSCOPE_METRICS*`` variables describe; a malformed
        value raises ``ValueError`` naming the variable and the problem."""
        env = os.environ if environ is None else environ
        return cls(**read_env(cls, env, cls.variable))

    def to_env(self) -> dict[str, str]:
        """Every setting as the variable text :meth:`from_env` reads back."""
        return write_env(self, self.variable)
