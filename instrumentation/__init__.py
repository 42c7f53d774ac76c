"""OpenTelemetry instrumentation: the context API, the stamping processor, the exporter.

Optional integrations live in their own modules and need their extra installed:
``retryscope.instrumentation.integrations.httpx`` (``[httpx]``), ``.tenacity`` (``[tenacity]``),
``.stamina`` (``[stamina]``).
"""

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
from retryscope.instrumentation._streaming import astream, stream
from retryscope.instrumentation.export._batch import GapCountingBatchSpanProcessor
from retryscope.instrumentation.export._config import ExportConfig, Partitioning
from retryscope.instrumentation.export._exporter import ParquetSpanExporter

__all__ = [
    "Attempt",
    "AttemptStampingProcessor",
    "AttributeHook",
    "CarrierError",
    "Cost",
    "ExportConfig",
    "GapCountingBatchSpanProcessor",
    "LogicalRequest",
    "LowerLayerConfig",
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
    "digest_key_id",
    "extract",
    "idempotency_digest",
    "idempotency_sha256",
    "inject",
    "logical_request",
    "request_digest",
    "request_sha256",
    "stream",
]
