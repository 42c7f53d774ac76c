"""retryscope: make retries and fallbacks in AI/LLM harnesses auditable.

The public API most users need::

    from retryscope import logical_request, AttemptStampingProcessor, ParquetSpanExporter
"""

__version__ = "0.1.0"

from retryscope.instrumentation import (
    Attempt,
    AttemptStampingProcessor,
    LogicalRequest,
    ParquetSpanExporter,
    PriceTable,
    current_scope,
    extract,
    inject,
    logical_request,
)
from retryscope.vocabulary import (
    Decision,
    Layer,
    Outcome,
    OutcomeKind,
    RetryOwner,
    Terminal,
)

__all__ = [
    "Attempt",
    "AttemptStampingProcessor",
    "Decision",
    "Layer",
    "LogicalRequest",
    "Outcome",
    "OutcomeKind",
    "ParquetSpanExporter",
    "PriceTable",
    "RetryOwner",
    "Terminal",
    "__version__",
    "current_scope",
    "extract",
    "inject",
    "logical_request",
]
