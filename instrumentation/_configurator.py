"""Zero-code setup: the ``retryscope`` OpenTelemetry configurator.

Selected with ``OTEL_PYTHON_CONFIGURATOR=retryscope`` under ``opentelemetry-instrument``, it
configures the SDK exactly as the standard configurator does (exporters from
``OTEL_TRACES_EXPORTER`` and ``OTEL_METRICS_EXPORTER``, resource, sampler, ...) and in
addition

* puts :class:`AttemptStampingProcessor` ahead of the export processors, so every span
  started under a logical request is stamped before any exporter sees it;
* gives it an :class:`AttemptMetricsProcessor`, recording the live instruments through
  the global MeterProvider the SDK sets up (``RETRYSCOPE_METRICS=off`` leaves it out; the
  other ``RETRYSCOPE_METRICS_*`` variables configure it, and a malformed one stops
  start-up with an error naming it); when the stamping processor is one passed in
  without metrics, the metrics processor is put after it instead;
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
        kwargs["span_processors"] = with_retryscope_processors(processors, MetricsConfig.from_env())
        kwargs.setdefault("export_span_processor", GapCountingBatchSpanProcessor)
        super()._configure(**kwargs)  # type: ignore[no-untyped-call]


def with_retryscope_processors(processors: list[Any], config: MetricsConfig) -> list[Any]:
    """``processors`` with the stamping processor first (the one passed in, if any) and the
    live metrics (``config``) handed to it, or put after a stamping processor passed in
    without them; none added where some are already there or ``config`` switches them off."""
    out = list(processors)
    metered = not config.enabled or any(
        isinstance(p, AttemptMetricsProcessor)
        or (isinstance(p, AttemptStampingProcessor) and p.metrics is not None)
        for p in out
    )
    stamping = next((n for n, p in enumerate(out) if isinstance(p, AttemptStampingProcessor)), None)
    if stamping is None:
        metrics = None if metered else AttemptMetricsProcessor(config=config)
        out.insert(0, AttemptStampingProcessor(metrics=metrics))
    elif not metered:
        out.insert(stamping + 1, AttemptMetricsProcessor(config=config))
    return out
