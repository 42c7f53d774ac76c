"""Retry configuration of the layer below an attempt, declared so hidden retries show.

A harness that owns retries over an SDK client that still retries (``max_retries=2`` is the
OpenAI and Anthropic SDK default) multiplies every attempt by three without any trace of it.
Declaring the lower layer's configuration on the attempt makes that product visible to the
analytics. :func:`describe_client` reads it from common clients where it is exposed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope.instrumentation._containment import contained
from retryscope.vocabulary import Layer


@dataclass(frozen=True, slots=True)
class LowerLayerConfig:
    """What the layer below may do on its own for one attempt."""

    layer: Layer
    max_retries: int
    timeout_ms: int | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer", Layer(self.layer))
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise ValueError(f"max_retries: expected an int, got {self.max_retries!r}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.timeout_ms is not None and self.timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {self.timeout_ms}")

    def attributes(self) -> dict[str, AttributeValue]:
        attrs: dict[str, AttributeValue] = {
            v.LOWER_LAYER_KEY: self.layer.value,
            v.LOWER_MAX_RETRIES.key: self.max_retries,
        }
        if self.timeout_ms is not None:
            attrs[v.LOWER_TIMEOUT_MS_KEY] = self.timeout_ms
        if self.source is not None:
            attrs[v.LOWER_SOURCE_KEY] = self.source
        return attrs


def _timeout_ms(timeout: Any) -> int | None:
    """Milliseconds from a number of seconds or an ``httpx.Timeout``-like object."""
    if isinstance(timeout, bool):
        return None
    if isinstance(timeout, int | float):
        return int(timeout * 1000)
    read = getattr(timeout, "read", None)  # httpx.Timeout: the per-response wait
    if isinstance(read, int | float) and not isinstance(read, bool):
        return int(read * 1000)
    return None


def _class_name(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _httpx_transport_retries(transport: Any) -> int | None:
    """Connection retries of an httpx transport (httpcore pool's ``retries``), unwrapped."""
    seen = 0
    while transport is not None and seen < 8:  # follow wrappers such as RetryscopeTransport
        pool = getattr(transport, "_pool", None)
        retries = getattr(pool, "_retries", None)
        if isinstance(retries, int) and not isinstance(retries, bool):
            return retries
        transport = getattr(transport, "wrapped", None)
        seen += 1
    return None


@contained("describe_client")
def describe_client(client: object, *, layer: Layer | str = Layer.SDK) -> LowerLayerConfig | None:
    """The retry configuration ``client`` exposes, or None when it exposes none.

    - SDK clients with a public ``max_retries`` attribute (OpenAI, Anthropic and clients
      modelled on them) and ``timeout`` (seconds or ``httpx.Timeout``);
    - ``httpx.Client``/``AsyncClient``: the connection retries of its transport
      (``httpx.HTTPTransport(retries=N)``) and its timeout; layer ``transport``.
    """
    max_retries = getattr(client, "max_retries", None)
    if isinstance(max_retries, int) and not isinstance(max_retries, bool):
        return LowerLayerConfig(
            Layer(layer),
            max_retries,
            _timeout_ms(getattr(client, "timeout", None)),
            _class_name(client),
        )
    transport = getattr(client, "_transport", None)
    if transport is not None:
        retries = _httpx_transport_retries(transport)
        if retries is not None:
            return LowerLayerConfig(
                Layer.TRANSPORT,
                retries,
                _timeout_ms(getattr(client, "timeout", None)),
                _class_name(client),
            )
    return None
