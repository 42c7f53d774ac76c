"""Hostile input is named and bounded: values thrown at every URL parameter of every page
and at the CLI's filters never reach the page or the terminal as a traceback, never
render as a link, markup or HTML, and are echoed cut to a bounded length."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from retryscope.cli import main
from retryscope.dashboards._guard import FAILED
from retryscope.dashboards.serve import APP, DATA_ENV
from tests.dashboards.conftest import rendered

EVIL = "https://evil.example/login"
HOSTILE = (
    f"x` [Re-authenticate here]({EVIL}) `",
    f"x``` [here]({EVIL}) ```",
    f"[here]({EVIL})",
    f"![img]({EVIL}/a.png)",
    f"<a href='{EVIL}'>here</a>",
    "<img src=x onerror=alert(1)>",
    EVIL,
    "www.evil.example",
    "mail@evil.example",
    ":red[alert] :material/warning: :smile:",
    "$\\href{https://evil.example}{x}$",
    "x\n# heading\n- item",
    "a\u202ereversed",
    "@1e300",
    "@inf",
    "@nan",
    "@-1e18",
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59-05:00",
    "1970-01-01",
    "t" * 60_000,
    "y" * 5_000,
    "",
    "stop_deadline",
    "fallback,retried",
    "fallback,`x`",
    "excess_attempts",
    "asc",
    "-3",
    "1e9",
    "nested",
    "acme",
    "route:primary",
    "http_status:",
    "on",
    "50",
)
VALUES = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40))
GLOBAL = ("since", "until", "tenant", "route", "operation")
PAGES: dict[str, tuple[str, ...]] = {
    "overview": GLOBAL,
    "requests": (
        *GLOBAL,
        "terminal",
        "rule",
        "layer",
        "min_attempts",
        "has",
        "where",
        "sort",
        "order",
    ),
    "compare": (
        *GLOBAL,
        "terminal",
        "rule",
        "layer",
        "has",
        "where",
        "from",
        "to",
        "dim",
        "value",
    ),
    "breakdown": (*GLOBAL, "figure", "by", "top"),
    "amplification": GLOBAL,
    "fallbacks": GLOBAL,
    "deadlines": GLOBAL,
    "findings": (*GLOBAL, "rules", "severity"),
    "request": (*GLOBAL, "id", "span", "vs"),
    "whatif": (
        *GLOBAL,
        "max_attempts",
        "fallback",
        "max_backoff_ms",
        "budget",
        "budget_pct",
        "window_s",
    ),
}
ECHO_BOUND = 4_000
"""No text the page shows is longer: a 60,000-character value is cut."""
_MARKDOWN = MarkdownIt("commonmark").enable(["table", "strikethrough"])
_CODE = re.compile(r"(?<![\\`])(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
_LIVE = re.compile(
    r"\]\(|(?<!\\)<[a-z/!]|://|www\.|(?<!\\)@evil|:red\[|:material/|:smile:|(?<!\\)\$\\", re.I
)
"""Syntax that makes a link, an autolink, HTML, a directive, an icon or math, unescaped."""
_MARKDOWN_FIELDS = ("body", "label", "delta", "help")


def _texts(node: Any) -> list[str]:
    """Every markdown text of an element tree: bodies, labels, deltas, tooltips, and the
    cells of ``st.table`` (which renders them as markdown)."""
    out: list[str] = []
    proto = getattr(node, "proto", None)
    if proto is not None and hasattr(proto, "DESCRIPTOR"):
        for field in _MARKDOWN_FIELDS:
            if field in proto.DESCRIPTOR.fields_by_name:
                value = getattr(proto, field)
                if isinstance(value, str) and value:
                    out.append(value)
    if getattr(node, "type", None) == "table":
        out += [str(v) for v in node.value.to_numpy().ravel()]
    for child in getattr(node, "children", {}).values():
        out += _texts(child)
    return out


def _assert_safe(texts: list[str]) -> None:
    for text in texts:
        assert len(text) < ECHO_BOUND, text[:200]
        assert "Traceback" not in text, text[:500]
        assert 'File "/' not in text, text[:500]
        assert FAILED not in text, text[:500]
        tokens = _MARKDOWN.parse(text)
        kinds = {t.type for t in tokens} | {c.type for t in tokens for c in (t.children or [])}
        assert not kinds & {"link_open", "image", "html_inline", "html_block"}, text[:500]
        assert not _LIVE.search(_CODE.sub("", text)), text[:500]


def _run(
    ui_data: Path, monkeypatch: pytest.MonkeyPatch, page: str, query: dict[str, Any]
) -> AppTest:
    monkeypatch.setenv(DATA_ENV, str(ui_data))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update(query)
    if page != "overview":  # opened by its URL: the page's first run
        at.switch_page(f"views/{page}.py")
    return at.run()


@pytest.mark.parametrize("page", list(PAGES))
def test_hostile_url_values_are_named_and_bounded(
    ui_data: Path, monkeypatch: pytest.MonkeyPatch, page: str
) -> None:
    names = PAGES[page]

    @settings(
        max_examples=12,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(
        query=st.dictionaries(
            st.sampled_from((*names, "bogus")),
            st.one_of(VALUES, st.lists(VALUES, min_size=2, max_size=3)),
            min_size=1,
            max_size=4,
        )
    )
    def check(query: dict[str, Any]) -> None:
        at = _run(ui_data, monkeypatch, page, query)
        assert not at.exception, [e.value for e in at.exception]
        _assert_safe(_texts(at.main) + _texts(at.sidebar))

    check()


def _each_value_at_each_parameter(
    ui_data: Path, monkeypatch: pytest.MonkeyPatch, names: dict[str, tuple[str, ...]]
) -> None:
    for page, parameters in names.items():
        for name in parameters:
            for value in (*HOSTILE[:16], "t" * 60_000):
                at = _run(ui_data, monkeypatch, page, {name: value})
                assert not at.exception, (page, name, value[:80], [e.value for e in at.exception])
                _assert_safe(_texts(at.main) + _texts(at.sidebar))


# some 600 page runs: minutes on two shared cores
@pytest.mark.timeout(900)
def test_each_hostile_value_at_each_parameter(
    ui_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every listed hostile value at every parameter of the Requests, request and Compare
    pages (whose parameters include the global ones), not only the ones hypothesis
    draws."""
    names = {page: PAGES[page] for page in ("requests", "request", "compare")}
    _each_value_at_each_parameter(ui_data, monkeypatch, names)


def test_each_hostile_value_at_each_page_s_own_parameters(
    ui_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same at the parameters of the other pages that have their own."""
    names = {page: PAGES[page][len(GLOBAL) :] for page in ("breakdown", "whatif", "findings")}
    _each_value_at_each_parameter(ui_data, monkeypatch, names)


def test_the_named_defects_are_gone(ui_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's cases: a huge time, a backtick link in a filter, a 60 k tenant, a
    repeated tenant, a 5,000-character terminal, an unknown parameter."""
    at = _run(ui_data, monkeypatch, "overview", {"since": "@1e300", "until": "@inf"})
    warnings = [rendered(w.value) for w in at.sidebar.warning]
    assert warnings == [
        f"{n}={t} in the URL: invalid time '{t}': use ISO-8601 (e.g. 2026-11-29T10:00:00Z) "
        "or @unix-seconds; ignored."
        for n, t in (("since", "@1e300"), ("until", "@inf"))
    ]
    assert at.metric  # the page is drawn, the bounds ignored
    hostile = f"x` [Re-authenticate here]({EVIL}) `"
    at = _run(ui_data, monkeypatch, "requests", {"tenant": hostile, "rule": hostile})
    warnings = [w.value for w in at.sidebar.warning] + [w.value for w in at.warning]
    assert any(rendered(w).startswith(f"tenant={hostile} in the URL") for w in warnings)
    _assert_safe(warnings)
    at = _run(ui_data, monkeypatch, "overview", {"tenant": "t" * 60_000})
    (warning,) = [rendered(w.value) for w in at.sidebar.warning]
    assert "(60,007 characters)" in warning
    assert len(warning) < 300
    at = _run(ui_data, monkeypatch, "overview", {"tenant": ["acme", "globex"]})
    (warning,) = [rendered(w.value) for w in at.sidebar.warning]
    assert warning == "tenant is given 2 times in the URL: the last, globex, is used."
    assert at.sidebar.selectbox(key="filter_tenant").value == "globex"
    at = _run(ui_data, monkeypatch, "requests", {"terminal": "y" * 5_000})
    assert any("longer than 1,000 characters" in rendered(w.value) for w in at.warning)
    at = _run(ui_data, monkeypatch, "requests", {"terminal": "stop_nothing", "tenent": "acme"})
    shown = [rendered(w.value) for w in at.warning]
    assert "terminal=stop_nothing in the URL: no such terminal; ignored." in shown
    assert "Not a parameter of this page, ignored: tenent." in shown
    assert at.subheader[0].value == "9 of 9 requests"


def test_hostile_cli_filters_get_a_clear_error(
    ui_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's filters: a bad time is one line naming it (cut), never a traceback."""

    @settings(
        max_examples=30,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        option=st.sampled_from(("--since", "--until", "--tenant", "--route", "--operation")),
        value=VALUES,
    )
    def check(option: str, value: str) -> None:
        capsys.readouterr()
        code = main(["report", str(ui_data), f"{option}={value}", "--format", "json"])
        err = capsys.readouterr().err
        assert code in (0, 1, 2), err
        assert "Traceback" not in err
        assert len(err) < 1_000, err[:200]

    check()
    capsys.readouterr()
    assert main(["report", str(ui_data), "--since", "@1e300"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "retryscope report: error: invalid time '@1e300': use ISO-8601 "
        "(e.g. 2026-11-29T10:00:00Z) or @unix-seconds\n"
    )
    assert main(["report", str(ui_data), "--since", "9" * 5_000]) == 2
    assert "… (5,000 characters)" in capsys.readouterr().err


def _failing_page() -> None:
    from pathlib import Path

    from retryscope.dashboards._guard import guarded

    def page() -> None:
        Path("/nonexistent/retryscope-secret-path").read_text()

    guarded(page)


def test_the_boundary_names_an_error_by_its_type_only() -> None:
    at = AppTest.from_function(_failing_page).run()
    assert not at.exception
    (error,) = [e.value for e in at.error]
    assert error.startswith(f"{FAILED} (FileNotFoundError).")
    assert "/nonexistent" not in error
    assert "Traceback" not in error
