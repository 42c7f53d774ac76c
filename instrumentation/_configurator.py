"""Zero-code setup: the ``retryscope`` OpenTelemetry configurator.

Selected with ``OTEL_PYTHON_CONFIGURATOR=retryscope`` under ``opentelemetry-instrument``, it
configures the SDK exactly as the standard configurator does (exporters from
``OTEL_TRACES_EXPORTER``, resource, sampler, ...) and in addition

* puts :class:`AttemptStampingProcessor` ahead of the export processors, so every span
  started under a logical request is stamped before any exporter sees it;
* wraps each trace exporter in :class:`GapCountingBatchSpanProcessor`, so spans dropped by a
  full batch queue are counted (and, with ``retryscope_parquet``, written as telemetry-gap
  rows).
"""

from __future__ import annotations

from typing import Any

from retryscope.instrumentation._processor import AttemptStampingProcessor
from retryscope.instrumentation._sdk import SdkConfigurator
from retryscope.instrumentation.export._batch import GapCountingBatchSpanProcessor


class RetryscopeConfigurator(SdkConfigurator):
    """The SDK's configurator plus retryscope's stamping and gap-counting processors."""

    def _configure(self, **kwargs: Any) -> None:
        processors = list(kwargs.pop("span_processors", None) or [])
        if not any(isinstance(p, AttemptStampingProcessor) for p in processors):
            processors.insert(0, AttemptStampingProcessor())
        kwargs["span_processors"] = processors
        kwargs.setdefault("export_span_processor", GapCountingBatchSpanProcessor)
        super()._configure(**kwargs)  # type: ignore[no-untyped-call]
