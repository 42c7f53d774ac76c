"""``report.md``: the report JSON contract (:data:`retryscope.analytics.REPORT_KEYS`)."""

from __future__ import annotations

from retryscope.reference._markdown import code, header, table

SOURCES = "the report contract retryscope.analytics.REPORT_KEYS"


def render() -> str:
    from retryscope.analytics import REPORT_KEYS

    lines = header(
        "Report JSON",
        SOURCES,
        f"{code('retryscope report PATH --format json')} and "
        f"{code('retryscope.analytics.build_report(con)')} return one object with these "
        "keys. Counts are JSON integers, ratios floats (in [0, 1], amplification ≥ 1), "
        "money integer micro-units of the currency, latencies float milliseconds "
        f"({code('null')} when there is no data). A path names a leaf: {code('a.b')} "
        f"nested objects, {code('a[].b')} the items of a list, {code('<terminal>')} and "
        f"{code('<rule id>')} the keys of an object keyed by data. Every report is checked "
        "against this list by the test suite.",
    )
    lines += table(
        ("key", "type", "meaning"),
        ((code(k.path), code(k.type), k.meaning) for k in REPORT_KEYS),
    )
    return "\n".join(lines) + "\n"
