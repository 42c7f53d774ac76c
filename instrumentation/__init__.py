"""OpenTelemetry instrumentation: the context API, the stamping processor, the exporter.

Optional integrations live in their own modules and need their extra installed:
``retryscope.instrumentation.httpx`` (``[httpx]``), ``.tenacity`` (``[tenacity]``),
``.stamina`` (``[stamina]``).
"""

from retryscope.instrumentation.batch import GapCountingBatchSpanProcessor
from retryscope.instrumentation.config import ExportConfig, Partitioning
from retryscope.instrumentation.context import (
    Attempt,
    LogicalRequest,
    Scope,
    current_scope,
    logical_request,
)
from retryscope.instrumentation.lower_layer import LowerLayerConfig, describe_client
from retryscope.instrumentation.parquet_exporter import ParquetSpanExporter
from retryscope.instrumentation.pricing import Cost, Price, PriceTable, Usage
from retryscope.instrumentation.privacy import AttributeHook, bound_attributes
from retryscope.instrumentation.processor import AttemptStampingProcessor
from retryscope.instrumentation.propagation import CarrierError, extract, inject
from retryscope.instrumentation.streaming import astream, stream

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
    "extract",
    "inject",
    "logical_request",
    "stream",
]
