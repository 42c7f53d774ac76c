"""Zero-code setup: the ``retryscope`` OpenTelemetry configurator.

Selected with ``OTEL_PYTHON_CONFIGURATOR=retryscope`` under ``opentelemetry-instrument``, it
configures the SDK exactly as the standard configurator does (exporters from
``OTEL_TRACES_EXPORTER`` and ``OTEL_METRICS_EXPORTER``, resource, sampler, ...) and in
addition

* puts :class:`AttemptStampingProcessor` ahead of the export processors, so every span
  started under a logical request is stamped before any exporter sees it;
* puts :class:`AttemptMetricsProcessor` after it, recording the live instruments through
  the global MeterProvider the SDK sets up (``RETRYSCOPE_METRICS=off`` leaves it out; the
  other ``RETRYSCOPE_METRICS_*`` variables configure it, and a malformed one stops
  start-up with an error naming it);
* wraps each trace exporter in :class:`GapCountingBatchSpanProcessor`, so spans dropped by a
  full batch queue are counted (and, with ``retryscope_parquet``, written as telemetry-gap
  rows).
"""

from __future__ import annotations

from typing import Any

from retryscope.instrumentation._processor import AttemptStampingProcessor
from retryscope.instrumentation._sdk import SdkConfigurator
from retryscope.instrumentation.export._batch import GapCountingBatchSpanProcessor
from retryscope.instrumentation.metrics import AttemptMetricsProcessor, MetricsConfig


class RetryscopeConfigurator(SdkConfigurator):
    """The SDK's configurator plus retryscope's stamping, metrics and gap-counting
    processors."""

    def _configure(self, **kwargs: Any) -> None:
        processors = list(kwargs.pop("span_processors", None) or [])
        if not any(isinstance(p, AttemptStampingProcessor) for p in processors):
            processors.insert(0, AttemptStampingProcessor())
        metrics = MetricsConfig.from_env()
        if metrics.enabled and not any(isinstance(p, AttemptMetricsProcessor) for p in processors):
            stamping = next(
                n for n, p in enumerate(processors) if isinstance(p, AttemptStampingProcessor)
            )
            processors.insert(stamping + 1, AttemptMetricsProcessor(config=metrics))
        kwargs["span_processors"] = processors
        kwargs.setdefault("export_span_processor", GapCountingBatchSpanProcessor)
        super()._configure(**kwargs)  # type: ignore[no-untyped-call]
