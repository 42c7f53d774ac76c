"""``findings.md``: the findings rule catalog (:data:`retryscope.analytics.RULES`)."""

from __future__ import annotations

from typing import Any

from retryscope.reference._markdown import code, header, table

SOURCES = "the rule catalog retryscope.analytics.RULES"


def rule_fields(rule: Any) -> tuple[str, str, str, str]:
    """A rule's id, severity, meaning and action: the one place that knows the fields of a
    catalog entry."""
    return (str(rule.id), str(rule.severity), str(rule.meaning), str(rule.action))


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
    rows = [rule_fields(rule) for rule in RULES]
    lines += table(
        ("rule", "severity", "what it means", "what to do"),
        ((code(rid), severity, meaning, action) for rid, severity, meaning, action in rows),
    )
    return "\n".join(lines) + "\n"
