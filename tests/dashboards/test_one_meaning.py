"""One number, one meaning: a figure that appears on several pages (or in the report and a
page) is the same there, or the page says why it differs — over the demo data and over the
demo run with another seed and size."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from retryscope.analytics import RULES, RULES_BY_ID, Severity, build_report, connect
from retryscope.demo._run import generate
from tests.dashboards.conftest import links, metrics, open_page, rendered, start_app, table

RUNS = {"demo": (300, 7), "another": (120, 23)}
"""(requests, seed): the demo as ``retryscope demo`` runs it, and another draw."""


@pytest.fixture(scope="module", params=list(RUNS))
def demo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    requests, seed = RUNS[request.param]
    out = tmp_path_factory.mktemp(f"demo-{request.param}") / "spans"
    generate(out, requests, seed, progress=False)
    return out


@pytest.fixture
def report(demo: Path) -> dict[str, object]:
    model, _ = connect(demo)
    return build_report(model)


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def test_every_top_offenders_tab_adds_up_to_the_excess_attempts(
    demo: Path, report: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    at = start_app(demo, monkeypatch)
    amplification = report["amplification"]
    assert isinstance(amplification, dict)
    total = amplification["excess_attempts"]
    assert total > 0
    tabs = [table(at, i) for i in range(4)]  # routes, tenants, operations, layers
    assert all(len(t) < 5 for t in tabs)  # every slice listed: the sums are whole
    assert [int(t["excess_attempts"].sum()) for t in tabs] == [total] * 4


def test_violations_findings_and_error_findings_agree(
    demo: Path, report: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    violations = report["violations"]
    assert isinstance(violations, dict)
    per = {s: sum(violations[r.id] for r in RULES if r.severity is s) for s in Severity}
    at = start_app(demo, monkeypatch)
    assert _count(metrics(at)["Violations"]) == per[Severity.ERROR] + per[Severity.WARNING]
    if per[Severity.INFO]:
        (note,) = [c.value for c in at.caption if c.value.startswith("Violations leave out")]
        assert f"{per[Severity.INFO]:,} info-level" in note
        assert f"counts {sum(per.values()):,} in all" in note
    errors = {r.id: violations[r.id] for r in RULES if r.severity is Severity.ERROR}
    shown = {
        label.split(" ", 1)[1]: (_count(label.split(" ", 1)[0]), query)
        for label, (page, query) in links(at).items()
        if page == "requests" and label.split(" ", 1)[-1] in errors
    }
    assert {rule: n for rule, (n, _) in shown.items()} == {r: n for r, n in errors.items() if n}
    assert all(query.get("rule") == rule for rule, (_, query) in shown.items())
    if errors["fallback_boundary_widening"]:  # the demo's unvetted fallback stands out
        banner = rendered(at.error[0].value)
        assert banner.startswith(f"**{sum(errors.values()):,} error-severity finding")
        assert RULES_BY_ID["fallback_boundary_widening"].meaning in banner
    open_page(at, "findings")
    caption = next(c.value for c in at.caption if "findings in scope" in c.value)
    assert caption == (
        f"{sum(per.values()):,} findings in scope: {per[Severity.ERROR]:,} error, "
        f"{per[Severity.WARNING]:,} warning, {per[Severity.INFO]:,} info. The Overview's "
        f"Violations counts the {per[Severity.ERROR] + per[Severity.WARNING]:,} error and "
        "warning ones."
    )


def test_what_if_says_what_its_attempts_and_successes_count(
    demo: Path, report: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    terminals = report["terminals"]
    assert isinstance(terminals, dict)
    at = open_page(start_app(demo, monkeypatch), "whatif")
    shown = metrics(at)
    assert "Retry-owner attempts (est.)" in shown
    successes = _count(shown["Successes incl. late (est.)"])
    caption = next(c.value for c in at.caption if c.value.startswith("Replaying"))
    recorded = re.search(r"successes include late ones: recorded ([\d,]+)", caption)
    assert recorded is not None
    assert f"against the report's {terminals['complete']:,} `complete`" in caption
    # the replay under the recorded policy succeeds where the recording did
    assert successes == _count(recorded.group(1)) >= terminals["complete"]
    helps = {m.label: m.proto.help for m in at.metric}
    assert "late successes included" in helps["Successes incl. late (est.)"]


def test_the_amplification_page_shows_the_overviews_totals(
    demo: Path, report: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    at = start_app(demo, monkeypatch)
    overview = metrics(at)
    open_page(at, "amplification")
    page = metrics(at)
    for label in ("Retry amplification", "Sends / request"):
        assert page[label] == overview[label]
    assert overview["Logical requests"] == f"{report['logical_requests']:,}"
