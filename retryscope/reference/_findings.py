"""``findings.md``: the findings rule catalog (:data:`retryscope.analytics.RULES`)."""

from __future__ import annotations

from retryscope.reference._markdown import code, header, table

SOURCES = "the rule catalog retryscope.analytics.RULES"


def render() -> str:
    from retryscope.analytics import RULES

    lines = header(
        "Findings",
        SOURCES,
        "Every violation and anomaly the analytics detect, one rule each. "
        f"{code('retryscope findings PATH [--rule R]')} and "
        f"{code('retryscope.analytics.findings(con)')} list them with rule id, severity, "
        "logical request id, trace id, span id, time and evidence (a JSON object of the "
        "numbers that triggered the rule); "
        f"{code('retryscope request PATH <logical request id>')} opens one. The report "
        f"counts them per rule under {code('violations')}.",
    )
    lines += table(
        ("rule", "severity", "what it means", "what to do"),
        ((code(str(r.id)), str(r.severity), str(r.meaning), str(r.action)) for r in RULES),
    )
    return "\n".join(lines) + "\n"
