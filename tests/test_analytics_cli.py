"""`retryscope report | request | findings` on a data set made by the real pipeline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from retryscope.cli import main
from tests.recorder import MS, T0, Clock, Recorder


@pytest.fixture
def data(recorder: Recorder) -> str:
    for i, tenant in enumerate(("acme", "globex")):
        clock = Clock(T0 + i * 3_600_000 * MS)
        with recorder.request(
            clock, tenant=tenant, idempotency_key=f"k{i}", logical_request_id=f"req-{tenant}"
        ) as req:
            recorder.attempt(req, "p", outcome="rate_limited", reserved=100, gap_ms=20)
            recorder.attempt(req, "p", reserved=100, actual=80)
    recorder.connect()
    return str(recorder.directory)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_report_formats_and_filters(data: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "report", data, "--format", "json", "--tenant", "acme")
    report = json.loads(out)
    assert code == 0
    assert (report["logical_requests"], report["filters"]["tenant"]) == (1, "acme")
    assert report["cost"]["by_currency"][0]["total_micros"] == 180
    code, out, _ = _run(capsys, "report", data, "--since", "2026-09-21T15:00:00Z")
    assert code == 0
    assert "logical requests" in out
    assert " 1\n" in out
    code, out, _ = _run(capsys, "report", data, "--format", "markdown")
    assert out.startswith("# retryscope audit report")
    assert "| receiver attempts | 4 |" in out


def test_report_and_model_commands_do_not_import_pandas(data: str, tmp_path: Path) -> None:
    """Importing pandas costs a command about 0.4 s: neither command hands DuckDB an Arrow
    object nor reads a nanosecond timestamp through pyarrow, which would import it."""
    cache = str(tmp_path / "model")
    script = (
        "import sys\n"
        "from retryscope.cli import main\n"
        f"assert main(['report', {data!r}, '--format', 'json']) == 0\n"
        f"assert main(['model', {data!r}, '--model-cache', {cache!r}]) == 0\n"
        f"assert main(['report', {data!r}, '--model-cache', {cache!r}]) == 0\n"
        "print('pandas imported:', 'pandas' in sys.modules)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    )
    assert run.stdout.splitlines()[-1] == "pandas imported: False"


def test_report_rejects_a_bad_time(data: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "report", data, "--since", "yesterday")
    assert code == 2
    assert "invalid time 'yesterday'" in err


def test_request_by_id_trace_and_idempotency_digest(
    data: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "request", data, "req-acme", "--format", "json")
    assert code == 0
    shown = json.loads(out)
    assert [a["outcome"] for a in shown["attempts"]] == ["retryable", "success"]
    assert [a["attempt_ordinal"] for a in shown["attempts"]] == [1, 2]
    trace_id = shown["requests"][0]["trace_id"]
    digest = shown["requests"][0]["idempotency_digest"]
    for ident in (trace_id, digest):
        code, out, _ = _run(capsys, "request", data, ident)
        assert code == 0
        assert "logical request req-acme" in out
        assert "rate_limited" in out
    code, _, err = _run(capsys, "request", data, "no-such-request")
    assert code == 1
    assert "no logical request" in err


def test_findings_command(data: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "findings", data, "--rule", "retry_budget_exceeded", "--format", "json"
    )
    assert code == 0
    assert json.loads(out) == []  # each window holds one request retried once: no storm
    code, out, _ = _run(capsys, "findings", data, "--tenant", "globex", "--format", "markdown")
    assert code == 0
    assert out.startswith("| rule_id | severity |")
    code, _, err = _run(capsys, "findings", data, "--rule", "nope")
    assert code == 2
    assert "unknown rule 'nope'" in err


def test_findings_command_lists_a_storm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Four requests retried once in one window: repeats beyond the budget's share and
    beyond its floor of three."""
    recorder = Recorder(tmp_path / "storm")
    for i in range(4):
        with recorder.request(Clock(T0), logical_request_id=f"r{i}") as req:
            recorder.attempt(req, "p", outcome="rate_limited", gap_ms=20)
            recorder.attempt(req, "p")
    recorder.connect()
    code, out, _ = _run(
        capsys,
        "findings",
        str(recorder.directory),
        "--rule",
        "retry_budget_exceeded",
        "--format",
        "json",
    )
    assert code == 0
    assert [r["evidence"] for r in json.loads(out)] == [
        {"attempts": 8, "retries": 4, "retry_fraction": 0.5, "budget": 0.1, "min_retries": 3}
    ]
