"""A versioned price table: token usage of an attempt to integer cost.

Prices are per route release (the exact adapter/model/provider path), in integer
micro-units of the table's currency per 1,000 input, output and cached input tokens.
Cached tokens are part of the input tokens (as OpenAI and Anthropic report them) and are
charged at the cached price instead of the input price. Costs round up to whole micro-units
so an audit never under-reports. The table's SHA-256 digest (over its canonical JSON) is
stamped on every attempt it prices, so a cost can always be traced to the exact prices used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from retryscope.canonical import canonical_json, sha256_hex

USAGE_UNKNOWN: Final = "usage_unknown"
PRICE_UNKNOWN: Final = "price_unknown"


def _non_negative_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}: expected an integer >= 0, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Price:
    """Micro-units per 1,000 tokens for one route release."""

    input_per_1k: int
    output_per_1k: int
    cached_input_per_1k: int | None = None
    """Price of cached input tokens; None charges them as ordinary input."""

    def __post_init__(self) -> None:
        _non_negative_int(self.input_per_1k, "input_per_1k")
        _non_negative_int(self.output_per_1k, "output_per_1k")
        if self.cached_input_per_1k is not None:
            _non_negative_int(self.cached_input_per_1k, "cached_input_per_1k")


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one attempt consumed, as the provider reported them."""

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0

    def __post_init__(self) -> None:
        _non_negative_int(self.input_tokens, "input_tokens")
        _non_negative_int(self.output_tokens, "output_tokens")
        _non_negative_int(self.cached_input_tokens, "cached_input_tokens")
        if self.cached_input_tokens > self.input_tokens:
            raise ValueError(
                f"cached_input_tokens ({self.cached_input_tokens}) exceed "
                f"input_tokens ({self.input_tokens})"
            )


@dataclass(frozen=True, slots=True)
class Cost:
    """A priced attempt: actual micro-units, or the reservation when it had to estimate."""

    micros: int
    currency: str
    estimated: bool
    table_version: str
    table_digest: str
    estimate_reason: str | None = None


@dataclass(frozen=True)
class PriceTable:
    """Prices by route release, with a version label and a content digest."""

    version: str
    currency: str
    prices: Mapping[str, Price] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.version:
            raise ValueError("a price table needs a version label")
        if len(self.currency) != 3 or not self.currency.isalpha():
            raise ValueError(f"currency must be an ISO 4217 code, got {self.currency!r}")
        object.__setattr__(self, "prices", MappingProxyType(dict(self.prices)))
        body = {
            "version": self.version,
            "currency": self.currency.upper(),
            "prices": {
                release: [p.input_per_1k, p.output_per_1k, p.cached_input_per_1k]
                for release, p in self.prices.items()
            },
        }
        object.__setattr__(self, "digest", sha256_hex(canonical_json(body, integers_only=True)))

    digest: str = field(init=False, default="")

    def cost(self, route_release: str | None, usage: Usage | None, *, reserved: int) -> Cost:
        """Cost of an attempt; unknown usage or price keeps ``reserved`` and says why."""
        _non_negative_int(reserved, "reserved")
        price = self.prices.get(route_release) if route_release is not None else None
        reason = USAGE_UNKNOWN if usage is None else PRICE_UNKNOWN if price is None else None
        if usage is None or price is None:
            return Cost(reserved, self.currency, True, self.version, self.digest, reason)
        cached_price = (
            price.cached_input_per_1k
            if price.cached_input_per_1k is not None
            else price.input_per_1k
        )
        milli = (
            (usage.input_tokens - usage.cached_input_tokens) * price.input_per_1k
            + usage.cached_input_tokens * cached_price
            + usage.output_tokens * price.output_per_1k
        )
        micros = -(-milli // 1000)  # round up: never under-report
        return Cost(micros, self.currency, False, self.version, self.digest)
