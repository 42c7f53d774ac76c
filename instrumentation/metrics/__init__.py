"""Live metrics beside the audit data: OpenTelemetry instruments derived from the spans.

:class:`AttemptMetricsProcessor` is a span processor that records the instruments of
:data:`INSTRUMENTS` (attempts, sends and resends, distinct operations, attempts per logical
request and the nested-retry product, backoff and Retry-After, ``not_before`` violations,
cost and wasted cost, deadline exhaustion, late successes, doomed dispatches, fallbacks,
boundary widening)
through the global or a given ``MeterProvider``, by the audit model's definitions: on the
same traffic they equal the Parquet report's figures. :class:`MetricsConfig` holds its
settings (``RETRYSCOPE_METRICS*``); the ``retryscope`` configurator installs it.
"""

from retryscope.instrumentation.metrics._config import MetricsConfig
from retryscope.instrumentation.metrics._instruments import (
    INSTRUMENTS,
    OVERFLOW,
    Dimension,
    FallbackQuality,
    Instrument,
    Kind,
    prometheus_label,
    prometheus_name,
    prometheus_names,
)
from retryscope.instrumentation.metrics._processor import METER_NAME, AttemptMetricsProcessor

__all__ = [
    "INSTRUMENTS",
    "METER_NAME",
    "OVERFLOW",
    "AttemptMetricsProcessor",
    "Dimension",
    "FallbackQuality",
    "Instrument",
    "Kind",
    "MetricsConfig",
    "prometheus_label",
    "prometheus_name",
    "prometheus_names",
]
