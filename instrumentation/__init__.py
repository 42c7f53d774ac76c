"""OpenTelemetry instrumentation: the context API, the stamping processor, the exporter."""

from retryscope.instrumentation.batch import GapCountingBatchSpanProcessor
from retryscope.instrumentation.config import ExportConfig, Partitioning
from retryscope.instrumentation.context import (
    Attempt,
    LogicalRequest,
    Scope,
    current_scope,
    logical_request,
)
from retryscope.instrumentation.parquet_exporter import ParquetSpanExporter
from retryscope.instrumentation.processor import AttemptStampingProcessor

__all__ = [
    "Attempt",
    "AttemptStampingProcessor",
    "ExportConfig",
    "GapCountingBatchSpanProcessor",
    "LogicalRequest",
    "ParquetSpanExporter",
    "Partitioning",
    "Scope",
    "current_scope",
    "logical_request",
]
