"""Retry configuration of the layer below an attempt, declared so hidden retries show.

A harness that owns retries over an SDK client that still retries (``max_retries=2`` is the
OpenAI and Anthropic SDK default) multiplies every attempt by three without any trace of it.
Declaring the lower layer's configuration on the attempt makes that product visible to the
analytics. :func:`describe_client` reads it from common clients where it is exposed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
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


def _requests_retries(client: Any) -> int | None:
    """Retries of a requests ``Session`` (its ``https://`` adapter) or ``HTTPAdapter``:
    urllib3's ``Retry.total`` (connect/read/status counts when total is unset)."""
    adapters = getattr(client, "adapters", None)
    if isinstance(adapters, Mapping):
        client = adapters.get("https://") or next(iter(adapters.values()), None)
    retry = getattr(client, "max_retries", None)
    if retry is None or not hasattr(retry, "history"):
        return None
    total = getattr(retry, "total", None)
    if isinstance(total, int) and not isinstance(total, bool):
        return total
    counts = [getattr(retry, k, None) for k in ("connect", "read", "status", "other")]
    return max((c for c in counts if isinstance(c, int) and not isinstance(c, bool)), default=0)


_BOTOCORE_DEFAULT_TOTAL: Final = {"legacy": 5, "standard": 3, "adaptive": 3}


def _botocore_retries(client: Any) -> int | None:
    """Retries a botocore client makes on its own (``meta.config.retries``): botocore's
    ``max_attempts`` counts retries, ``total_max_attempts`` sends; the default mode is
    standard (3 sends)."""
    config = getattr(getattr(client, "meta", None), "config", None)
    if config is None or not hasattr(config, "retries"):
        return None
    retries = config.retries or {}
    if not isinstance(retries, Mapping):
        return None
    total = retries.get("total_max_attempts")
    if isinstance(total, int) and not isinstance(total, bool):
        return max(0, total - 1)
    attempts = retries.get("max_attempts")
    if isinstance(attempts, int) and not isinstance(attempts, bool):
        return max(0, attempts)
    return _BOTOCORE_DEFAULT_TOTAL.get(str(retries.get("mode", "standard")), 3) - 1


def describe_client(client: object, *, layer: Layer | str = Layer.SDK) -> LowerLayerConfig | None:
    """The retry configuration ``client`` exposes, or None when it exposes none.

    - SDK clients with a public ``max_retries`` attribute (OpenAI, Anthropic and clients
      modelled on them) and ``timeout`` (seconds or ``httpx.Timeout``);
    - botocore/boto3 clients: the retries of ``meta.config.retries`` (layer ``sdk``);
    - requests ``Session``/``HTTPAdapter``: urllib3's ``Retry`` (layer ``transport``);
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
    boto = _botocore_retries(client)
    if boto is not None:
        return LowerLayerConfig(Layer.SDK, boto, None, _class_name(client))
    urllib3_retries = _requests_retries(client)
    if urllib3_retries is not None:
        return LowerLayerConfig(Layer.TRANSPORT, urllib3_retries, None, _class_name(client))
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
