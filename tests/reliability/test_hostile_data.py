"""The analytics never execute SQL or read paths taken from span contents or filters: hostile
strings in span names, attributes, route ids, tenants and request ids, and in the `Filters`
and `retryscope report --route/--tenant` options, flow through report, findings and request
unchanged, as data. (The UI's own hostile-filter tests belong to the UI.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import retryscope
from retryscope.analytics import (
    Filters,
    build_report,
    connect,
    findings,
    request_attempts,
    request_summary,
)
from retryscope.cli import main
from retryscope.demo._scenarios import VirtualClock
from tests.reliability.support import audit

PASSWD = Path("/etc/passwd")
HOSTILE = [
    "x'); SELECT * FROM read_csv('/etc/passwd'); --",
    "'; DROP TABLE spans; --",
    '" OR 1=1 --',
    "getvariable('rs_route')",
    "$rule",
    "read_parquet('/etc/passwd')",
    "{0} %s ${HOME}",
]
T0 = 1_800_000_000_000_000_000


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One logical request per hostile string, with the string everywhere a span can hold it:
    request id, tenant, route id, span name, attribute key and value. Each request retries
    after a non-retryable outcome, so a finding carries the string in its evidence."""
    root = tmp_path_factory.mktemp("hostile") / "data"
    clock = VirtualClock(T0)
    with audit(root) as a:
        tracer = a.provider.get_tracer("hostile")
        for i, text in enumerate(HOSTILE):
            with retryscope.logical_request(
                operation="chat",
                tenant=text,
                logical_request_id=f"{text}#{i}",
                idempotency_key=text,
                tracer_provider=a.provider,
                clock=clock,
            ) as req:
                with req.attempt(text) as first:
                    with tracer.start_as_current_span(text, attributes={text: text}):
                        clock.advance_ms(5)
                    first.set_outcome("invalid_request")
                clock.advance_ms(5)
                with req.attempt(text):
                    clock.advance_ms(5)
            clock.advance_ms(1_000)
        a.close()
    return root


def _no_file_was_read(text: str) -> None:
    if PASSWD.is_file():
        first = PASSWD.read_text(errors="replace").splitlines()[0]
        assert first not in text


def test_span_contents_flow_through_as_data(data: Path) -> None:
    con, _ = connect(data)
    report = build_report(con)
    assert report["logical_requests"] == len(HOSTILE)
    assert {r["route_id"] for r in report["routes"]} == set(HOSTILE)
    found = findings(con, rule="retry_after_non_retryable").to_pylist()
    assert sorted(json.loads(f["evidence"])["route_id"] for f in found) == sorted(HOSTILE)
    assert sorted(f["logical_request_id"] for f in found) == sorted(
        f"{t}#{i}" for i, t in enumerate(HOSTILE)
    )
    for i, text in enumerate(HOSTILE):
        (summary,) = request_summary(con, f"{text}#{i}").to_pylist()
        assert summary["tenant"] == text
        assert [r["route_id"] for r in request_attempts(con, f"{text}#{i}").to_pylist()] == [
            text,
            text,
        ]
    # the spans table still exists and holds every row: nothing was dropped or executed
    assert con.execute("SELECT count(*) FROM spans").fetchall() == [(len(HOSTILE) * 4,)]
    _no_file_was_read(json.dumps(report) + json.dumps([f["evidence"] for f in found]))


@pytest.mark.parametrize("text", HOSTILE)
def test_cli_filters_are_data(data: Path, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    for option in ("--route", "--tenant"):
        assert main(["report", str(data), option, text, "--format", "json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["logical_requests"] == 1, (option, text)
        assert report["filters"][option[2:]] == text
        _no_file_was_read(json.dumps(report))
    i = HOSTILE.index(text)
    assert main(["request", str(data), f"{text}#{i}", "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert json.dumps(text)[1:-1] in out


@pytest.fixture(scope="module")
def connection(data: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """One connection (and one model) for every filter example, as the UI keeps one."""
    con, _ = connect(data)
    yield con
    con.close()


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    route=st.one_of(st.none(), st.sampled_from(HOSTILE), st.text(max_size=30)),
    tenant=st.one_of(st.none(), st.sampled_from(HOSTILE), st.text(max_size=30)),
)
def test_any_filter_string_selects_exactly_its_requests(
    connection: duckdb.DuckDBPyConnection, route: str | None, tenant: str | None
) -> None:
    con = connection
    report = build_report(con, filters=Filters(route=route, tenant=tenant))
    # each request has route == tenant == its hostile string
    matching = [t for t in HOSTILE if route in (None, t) and tenant in (None, t)]
    assert report["logical_requests"] == len(matching)
    _no_file_was_read(json.dumps(report))
