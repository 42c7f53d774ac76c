"""The Parquet writer of the audit data set: finished spans to files a reader can trust.

:class:`ParquetSpanExporter` is an OpenTelemetry ``SpanExporter`` (also registered as the
``retryscope_parquet`` traces exporter for zero-code setup); :class:`ExportConfig` holds its
settings (arguments or ``RETRYSCOPE_PARQUET_*`` variables);
:class:`GapCountingBatchSpanProcessor` is the SDK's batch processor that counts what it drops,
so lost spans become telemetry-gap rows instead of silence. :func:`recover_segments` writes as
Parquet what a writer that died had accepted (its crash segments; ``retryscope recover``).
"""

from retryscope.instrumentation.export._batch import GapCountingBatchSpanProcessor
from retryscope.instrumentation.export._config import ExportConfig, Partitioning
from retryscope.instrumentation.export._exporter import ParquetSpanExporter
from retryscope.instrumentation.export._segments import Recovered
from retryscope.instrumentation.export._segments import recover as recover_segments

__all__ = [
    "ExportConfig",
    "GapCountingBatchSpanProcessor",
    "ParquetSpanExporter",
    "Partitioning",
    "Recovered",
    "recover_segments",
]
