"""OpenTelemetry instrumentation: the context API, the stamping processor, the exporter.

Optional integrations live in their own modules and need their extra installed:
``retryscope.instrumentation.integrations.httpx`` (``[httpx]``), ``.tenacity`` (``[tenacity]``),
``.stamina`` (``[stamina]``). Live metrics: :class:`AttemptMetricsProcessor`
(``retryscope.instrumentation.metrics``; a Prometheus scrape needs ``[prometheus]``).
"""

from retryscope.instrumentation._context import (
    Attempt,
    LogicalRequest,
    Scope,
    current_scope,
    logical_request,
)
from retryscope.instrumentation._digests import idempotency_digest, request_digest
from retryscope.instrumentation._lower_layer import LowerLayerConfig, describe_client
from retryscope.instrumentation._pricing import Cost, Price, PriceTable, Usage
from retryscope.instrumentation._privacy import AttributeHook, bound_attributes
from retryscope.instrumentation._processor import AttemptStampingProcessor
from retryscope.instrumentation._propagation import CarrierError, extract, inject
from retryscope.instrumentation._streaming import astream, stream
from retryscope.instrumentation.export._batch import GapCountingBatchSpanProcessor
from retryscope.instrumentation.export._config import ExportConfig, Partitioning
from retryscope.instrumentation.export._exporter import ParquetSpanExporter
from retryscope.instrumentation.metrics import AttemptMetricsProcessor, MetricsConfig

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
    "Scope",
    "Usage",
    "astream",
    "bound_attributes",
    "current_scope",
    "describe_client",
    "extract",
    "idempotency_digest",
    "inject",
    "logical_request",
    "request_digest",
    "stream",
]
