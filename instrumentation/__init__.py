"""OpenTelemetry instrumentation: the context API, the stamping processor, the exporter.

Optional integrations live in their own modules and need their extra installed:
``retryscope.instrumentation.integrations.httpx`` (``[httpx]``), ``.httpx2`` (``[httpx2]``),
``.urllib3`` (``[urllib3]``), ``.litellm`` (``[litellm]``), ``.tenacity`` (``[tenacity]``),
``.stamina`` (``[stamina]``); :class:`RetryscopeInstrumentor` enables every one whose library
is installed. Live metrics:
:class:`AttemptMetricsProcessor` (``retryscope.instrumentation.metrics``; a Prometheus scrape
needs ``[prometheus]``). Harness code that catches an attempt's exception itself (the
control plane does) records it as the recorder would: :func:`record_exception` (redacted),
:func:`classify_exception` and :func:`error_type`.
"""

from typing import TYPE_CHECKING, Any

from retryscope.instrumentation._classify import classify_exception, error_type
from retryscope.instrumentation._context import (
    Attempt,
    LogicalRequest,
    Scope,
    current_scope,
    logical_request,
)
from retryscope.instrumentation._digests import (
    digest_key_id,
    idempotency_digest,
    idempotency_sha256,
    request_digest,
    request_sha256,
)
from retryscope.instrumentation._lower_layer import LowerLayerConfig, describe_client
from retryscope.instrumentation._pricing import Cost, Price, PriceTable, Usage
from retryscope.instrumentation._privacy import AttributeHook, bound_attributes
from retryscope.instrumentation._processor import AttemptStampingProcessor
from retryscope.instrumentation._propagation import CarrierError, extract, inject
from retryscope.instrumentation._redaction import record_exception
from retryscope.instrumentation._streaming import astream, stream
from retryscope.instrumentation.export._batch import GapCountingBatchSpanProcessor
from retryscope.instrumentation.export._config import ExportConfig, Partitioning
from retryscope.instrumentation.export._exporter import ParquetSpanExporter
from retryscope.instrumentation.metrics import AttemptMetricsProcessor, MetricsConfig

if TYPE_CHECKING:
    from retryscope.instrumentation._instrumentor import RetryscopeInstrumentor


def __getattr__(name: str) -> Any:
    # The instrumentor needs opentelemetry-instrumentation (every client extra brings it):
    # imported only when asked for, so the core imports none of the extras.
    if name == "RetryscopeInstrumentor":
        from retryscope._extras import extra_needed

        with extra_needed("retryscope.instrumentation.RetryscopeInstrumentor", "httpx"):
            from retryscope.instrumentation._instrumentor import RetryscopeInstrumentor

        return RetryscopeInstrumentor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Attempt",
    "AttemptMetricsProcessor",
    "AttemptStampingProcessor",
    "AttributeHook",
    "CarrierError",
    "Cost",
    "ExportConfig",
    "GapCountingBatchSpanProcessor",
    "LogicalRequest",
    "LowerLayerConfig",
    "MetricsConfig",
    "ParquetSpanExporter",
    "Partitioning",
    "Price",
    "PriceTable",
    "RetryscopeInstrumentor",
    "Scope",
    "Usage",
    "astream",
    "bound_attributes",
    "classify_exception",
    "current_scope",
    "describe_client",
    "digest_key_id",
    "error_type",
    "extract",
    "idempotency_digest",
    "idempotency_sha256",
    "inject",
    "logical_request",
    "record_exception",
    "request_digest",
    "request_sha256",
    "stream",
]
