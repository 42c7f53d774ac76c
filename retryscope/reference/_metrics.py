"""``metrics.md``: the live instruments (names, units, attributes, Prometheus names, the
report figure each equals) and the metrics processor's settings."""

from __future__ import annotations

from retryscope.reference._markdown import code, header, settings_rows, table

SOURCES = "INSTRUMENTS and MetricsConfig in retryscope.instrumentation.metrics"


def render() -> str:
    from retryscope.instrumentation.metrics import (
        INSTRUMENTS,
        OVERFLOW,
        Dimension,
        MetricsConfig,
        prometheus_label,
        prometheus_name,
    )

    lines = header(
        "Live metrics",
        SOURCES,
        f"{code('AttemptMetricsProcessor')} records these OpenTelemetry instruments (meter "
        f"{code('retryscope')}) from the spans retryscope stamps, by the audit model's "
        "definitions: on the same traffic each equals the report figure named beside it. "
        "Counters are cumulative sums reported when a reader collects; histograms carry "
        "exemplars of the span they were recorded for. Attributes without a value are left "
        f"out; a value past its dimension's cap, or not in its vocabulary, is "
        f"{code(OVERFLOW)}. Configured optional dimensions "
        f"({', '.join(code(d.key) for d in Dimension)}) are added to every instrument. "
        "The Prometheus name is what the OpenTelemetry Prometheus exporter serves (a "
        f"histogram adds {code('_bucket')}, {code('_sum')}, {code('_count')}); labels are "
        "the attribute keys with dots as underscores.",
    )
    lines += table(
        ("instrument", "kind", "unit", "attributes", "Prometheus", "equals", "meaning"),
        (
            (
                code(inst.name),
                inst.kind.value,
                code(inst.unit),
                ", ".join(code(key) for key in inst.attributes),
                code(prometheus_name(inst)),
                inst.report,
                inst.description,
            )
            for inst in INSTRUMENTS
        ),
    )
    lines += ["", "## Labels", ""]
    keys = sorted(
        {key for inst in INSTRUMENTS for key in inst.attributes} | {d.key for d in Dimension}
    )
    lines += table(
        ("attribute", "Prometheus label"), ((code(k), code(prometheus_label(k))) for k in keys)
    )
    lines += [
        "",
        "## Settings",
        "",
        f"{code('AttemptMetricsProcessor(meter_provider=None, config=None)')}: the global "
        f"MeterProvider unless one is given; {code('config')} defaults to "
        f"{code('MetricsConfig.from_env()')}. Add it to the TracerProvider, or give it to the "
        f"stamping processor ({code('AttemptStampingProcessor(metrics=...)')}), which hands it "
        "every ended span: one processor less for the SDK to call on every span. The "
        f"{code('retryscope')} configurator wires it that way and reads the same variables; "
        "a malformed one stops start-up with an error naming it.",
        "",
    ]
    lines += table(
        ("field", "variable", "default", "meaning"),
        settings_rows(MetricsConfig, lambda f: f.name),
    )
    return "\n".join(lines) + "\n"
