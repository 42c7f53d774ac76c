"""Bounded attribute values: every instrument's cardinality stays finite whatever spans hold.

Enumerated dimensions (layer, outcome, kind, retry owner, terminal, data boundary) keep
only the vocabulary's values; open-ended ones (route, tenant, operation, currency) keep
the first ``limit`` distinct strings. Anything else reads as
:data:`~retryscope.instrumentation.metrics._instruments.OVERFLOW`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final

from retryscope.instrumentation.metrics._instruments import OVERFLOW

MAX_VALUE_LENGTH: Final = 256
"""Longest string an open-ended dimension keeps as itself."""


class Enumerated:
    """A dimension whose values are an enum's: any other value is :data:`OVERFLOW`."""

    __slots__ = ("_table",)

    def __init__(self, values: Iterable[enum.Enum | str]) -> None:
        self._table: dict[object, str | None] = {
            value: value for value in (v.value if isinstance(v, enum.Enum) else v for v in values)
        }
        self._table[None] = None

    def __call__(self, value: object) -> str | None:
        if type(value) is str or value is None:
            return self._table.get(value, OVERFLOW)
        return OVERFLOW


class Capped:
    """An open-ended dimension: the first ``limit`` distinct strings (of at most
    :data:`MAX_VALUE_LENGTH` characters) are kept, anything else is :data:`OVERFLOW`.
    Not thread-safe on its own: the processor calls it under its lock."""

    __slots__ = ("_kept", "_limit")

    def __init__(self, limit: int) -> None:
        self._kept: set[str] = set()
        self._limit = limit

    def __call__(self, value: object) -> str | None:
        if value is None:
            return None
        if type(value) is not str or len(value) > MAX_VALUE_LENGTH:
            return OVERFLOW
        kept = self._kept
        if value in kept:
            return value
        if len(kept) >= self._limit:
            return OVERFLOW
        kept.add(value)
        return value
