"""A report that counts no logical request says why (``empty_reason``, stderr, exit 1)
instead of printing a page of zeros: no span files, spans none of which is in a logical
request, spans of requests that never ended, filters that select none."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from opentelemetry.trace import SpanKind

from retryscope.analytics import build_report, connect
from retryscope.cli import main
from retryscope.schema import SPAN_SCHEMA
from tests.recorder import T0, Clock, Recorder


def _report(capsys: pytest.CaptureFixture[str], path: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["report", str(path), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _reason(capsys: pytest.CaptureFixture[str], path: Path, *argv: str) -> str:
    """The report's reason, checked to be the same in its JSON and on stderr, exit 1."""
    code, out, err = _report(capsys, path, "--format", "json", *argv)
    assert code == 1
    report = json.loads(out)
    assert report["logical_requests"] == 0
    reason: str = report["empty_reason"]
    assert err.splitlines()[-1] == f"retryscope report: {reason}"
    return reason


def _no_sends(rec: Recorder) -> None:
    """An application that opened no ``logical_request`` and whose client calls no
    instrumentation recorded: 5 SERVER spans with 3 spans of work each, no client span (a
    client send would make an implicit request: tests/test_implicit_requests.py)."""
    for _ in range(5):
        with rec.tracer.start_as_current_span("GET /answer", kind=SpanKind.SERVER):
            for _ in range(3):
                with rec.tracer.start_as_current_span("work"):
                    pass


def _zero_code_calls(rec: Recorder) -> None:
    """What an application run under opentelemetry-instrument alone records: 5 GenAI call
    spans of 3 HTTP sends each, no ``logical_request``: 5 implicit requests, not zeros."""
    for _ in range(5):
        with rec.tracer.start_as_current_span(
            "chat gpt-4o", kind=SpanKind.CLIENT, attributes={"gen_ai.operation.name": "chat"}
        ):
            for _ in range(3):
                with rec.tracer.start_as_current_span(
                    "POST", kind=SpanKind.CLIENT, attributes={"http.request.method": "POST"}
                ):
                    pass


def test_calls_in_no_logical_request_are_implicit_requests(recorder: Recorder) -> None:
    _zero_code_calls(recorder)
    report = build_report(recorder.connect())
    assert (report["logical_requests"], report["implicit_requests"]) == (5, 5)
    assert report["empty_reason"] is None


def test_a_directory_without_span_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _reason(capsys, tmp_path) == f"no span files under {tmp_path}"
    code, out, err = _report(capsys, tmp_path)
    assert code == 1
    assert out.splitlines() == [
        "NO LOGICAL REQUEST",
        f"  {'why':<32}no span files under {tmp_path}",
    ]
    assert err == f"retryscope report: no span files under {tmp_path}\n"


def test_only_unreadable_files_are_named_as_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "spans.parquet").write_bytes(b"not parquet")
    assert _reason(capsys, tmp_path) == f"no span files under {tmp_path} (1 unreadable, skipped)"


def test_span_files_without_spans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pq.write_table(SPAN_SCHEMA.empty_table(), tmp_path / "spans.parquet")
    assert _reason(capsys, tmp_path) == f"1 span file under {tmp_path}, holding no span"


def test_spans_none_of_which_is_in_a_logical_request(
    recorder: Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_sends(recorder)
    recorder.connect()
    reason = _reason(capsys, recorder.directory)
    assert reason.startswith("20 spans, none in a logical request: the application never ")
    assert "`retryscope.logical_request(...)`" in reason
    assert "no span is a client send" in reason
    code, out, _ = _report(capsys, recorder.directory, "--format", "markdown")
    assert code == 1
    assert "## no logical request" in out
    assert "physical attempts" not in out  # not a page of zeros


def test_spans_of_requests_that_never_ended(
    recorder: Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    """The process stopped inside a request: only a span beneath it ended and was
    exported, stamped with the request it belonged to."""

    def inside(_: object) -> None:
        with recorder.tracer.start_as_current_span("tool call"):
            pass

    recorder.unfinished(recorder.request(Clock(T0), logical_request_id="r1"), inside)
    recorder.connect()
    assert _reason(capsys, recorder.directory) == (
        "1 span, 1 naming a logical request, but none of them is a request or attempt "
        "span: the process ended before its requests and attempts did (their spans were "
        "never exported), or they were dropped before export"
    )


def test_filters_that_select_none(recorder: Recorder, capsys: pytest.CaptureFixture[str]) -> None:
    with recorder.request(Clock(T0), tenant="acme") as req:
        recorder.attempt(req)
    recorder.connect()
    reason = _reason(capsys, recorder.directory, "--tenant", "globex")
    assert reason == "no logical requests match the filters (1 in the data set)"
    code, out, err = _report(capsys, recorder.directory, "--format", "json")
    assert (code, json.loads(out)["empty_reason"], err) == (0, None, "")


def test_the_reason_is_the_reports(recorder: Recorder) -> None:
    """``build_report`` carries it; the CLI only prints it."""
    _no_sends(recorder)
    recorder.connect()
    model, _ = connect(recorder.directory)
    assert build_report(model)["empty_reason"].startswith("20 spans, none in a logical request")
