"""Policy drift on traffic made by the real controller and real harness loops (virtual clock)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from retryscope.analytics import connect, findings
from retryscope.analytics.replay._policy_drift import (
    POLICY_DIR,
    policy_drift,
    policy_side_file,
    request_drift,
    write_policy_side_file,
)
from retryscope.control._calls import CallResult
from retryscope.control._lab import reference_admission, reference_policy
from retryscope.control._policy import policy_from_json
from retryscope.control._receipts import policy_sha256
from retryscope.vocabulary import OutcomeKind
from tests.whatif.harness import Traffic

A, B, C, D = ("a" * 32, "b" * 32, "c" * 32, "d" * 32)
PRIMARY = "private-primary"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("drift") / "data"
    t = Traffic(directory)
    rate_limited = CallResult(kind=OutcomeKind.RATE_LIMITED, retry_after_ms=250)
    t.controlled([(100, rate_limited), (100, CallResult(value="ok"))], request_id=A)
    unavailable = OutcomeKind.UNAVAILABLE
    t.by_hand(request_id=B, steps=[(PRIMARY, 0, unavailable), (PRIMARY, 50, None)])
    t.by_hand(request_id=C, steps=[(PRIMARY, 0, unavailable), ("rogue", 200, None)])
    t.by_hand(request_id=D, steps=[(PRIMARY, 0, OutcomeKind.INVALID_REQUEST), (PRIMARY, 200, None)])
    t.close()
    return directory


def _rows(directory: Path, **kw: int) -> dict[str, dict[str, object]]:
    con, _ = connect(directory)
    return {r["logical_request_id"]: r for r in policy_drift(con, **kw).to_pylist()}


def test_side_file_is_the_canonical_policy_under_its_digest(tmp_path: Path) -> None:
    policy = reference_policy()
    path = write_policy_side_file(tmp_path, policy)
    assert path == tmp_path / POLICY_DIR / f"{policy_sha256(policy)}.json"
    assert path == policy_side_file(tmp_path, policy_sha256(policy))
    assert policy_from_json(path.read_bytes()) == policy
    before = path.stat().st_mtime_ns
    assert write_policy_side_file(tmp_path, policy) == path  # idempotent
    assert path.stat().st_mtime_ns == before


def test_controller_traffic_has_no_drift_and_each_deviation_is_named(data: Path) -> None:
    rows = _rows(data)
    assert set(rows) == {B, C, D}  # the controller's request A followed its policy
    fields = ("drift", "check", "field", "attempt_ordinal", "route_id", "observed", "planned")
    got = {k: tuple(rows[k][f] for f in fields) for k in rows}
    assert got[B] == ("schedule", "JitterOutOfRange", "backoff_delay_ms", 2, PRIMARY, "50", "200")
    assert got[C] == ("route", "RouteMismatch", "route_id", 2, "rogue", '"rogue"', f'"{PRIMARY}"')
    assert got[D][:5] == ("budget", "PostTerminalAttempt", "attempt", 2, PRIMARY)
    planned = json.loads(str(got[D][6]))
    assert planned["terminal"] == "stop_non_retryable"
    assert planned["max_total_attempts"] == 4
    policy = reference_policy()
    assert {r["policy_digest"] for r in rows.values()} == {policy_sha256(policy)}


def test_drift_rows_are_findings_of_rule_policy_drift(data: Path) -> None:
    con, _ = connect(data)
    table = findings(con, rule="policy_drift")
    assert table.column("rule_id").to_pylist() == ["policy_drift"] * 3
    evidence = {r["logical_request_id"]: json.loads(r["evidence"]) for r in table.to_pylist()}
    assert evidence[B]["observed"] == 50
    assert evidence[B]["planned"] == 200
    assert evidence[C]["check"] == "RouteMismatch"
    assert "policy_drift" in findings(con).column("rule_id").to_pylist()


def test_cap_bounds_the_evaluated_requests(data: Path) -> None:
    assert len(_rows(data, max_requests=1)) <= 1
    with pytest.raises(ValueError, match="max_requests"):
        _rows(data, max_requests=0)


def test_terminal_mismatch_and_tampered_side_file(data: Path, tmp_path: Path) -> None:
    policy = reference_policy()
    document = policy_side_file(data, policy_sha256(policy)).read_text()
    con, _ = connect(data)
    cursor = con.execute(
        "SELECT route_id, route_release, route_attempt_ordinal, attempt_ordinal,"
        " logical_request_digest, idempotency_digest, epoch_ns(start_time) AS start_time,"
        " epoch_ns(end_time) AS end_time, outcome, outcome_kind, epoch_ns(not_before)"
        " AS not_before, backoff_delay_ms, retry_after_ms, cost_reserved_micros,"
        " cost_actual_micros FROM attempts WHERE logical_request_id = ? AND layer = 'harness'",
        [A],
    )
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    bound = {
        "request_digest": reference_admission().logical_request_sha256,
        "idempotency_digest": reference_admission().idempotency_key_sha256,
        "deadline_ns": reference_admission().deadline_ms * 1_000_000,
    }
    assert request_drift(document, policy_sha256(policy), "complete", None, rows, **bound) == []
    (row,) = request_drift(document, policy_sha256(policy), "stop_deadline", None, rows, **bound)
    assert (row["drift"], row["check"], row["observed"], row["planned"]) == (
        "budget",
        "terminal_mismatch",
        "stop_deadline",
        "complete",
    )
    tampered = document.replace("200", "201", 1)
    (bad,) = request_drift(tampered, policy_sha256(policy), None, 0, rows, **bound)
    assert (bad["drift"], bad["check"]) == ("policy", "digest_mismatch")
    (broken,) = request_drift("{not json", policy_sha256(policy), None, 0, rows, **bound)
    assert broken["check"] == "undecodable_policy"
    unbound = {**bound, "deadline_ns": None}
    (loose,) = request_drift(document, policy_sha256(policy), "complete", None, rows, **unbound)
    assert loose["check"] == "unbound_request"


def test_the_controllers_spans_carry_the_policy_no_side_file_needed(
    data: Path, tmp_path: Path
) -> None:
    """The controller's request span holds the document: without any side file the hand
    loops stamping that policy's digest are still judged against it."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    shutil.rmtree(copy / POLICY_DIR)
    assert _rows(copy).keys() == _rows(data).keys() == {B, C, D}


def test_without_any_document_nothing_is_evaluated(tmp_path: Path) -> None:
    t = Traffic(tmp_path / "hand")
    t.by_hand(request_id=B, steps=[(PRIMARY, 0, OutcomeKind.UNAVAILABLE)], side_file=False)
    t.close()
    assert _rows(tmp_path / "hand") == {}


def _otlp_file(spans: list[Any], path: Path) -> Path:
    from tests.export_support import otlp_json_line

    path.parent.mkdir(parents=True)
    path.write_text(otlp_json_line(spans) + "\n")
    return path


def test_policy_drift_works_through_the_collector_and_ingest(tmp_path: Path) -> None:
    """Controller traffic and a drifting hand loop exported as OTLP JSON lines (the
    Collector's file exporter), ingested into Parquet: drift is found from the spans alone."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from retryscope.instrumentation import AttemptStampingProcessor
    from retryscope.instrumentation.ingest._run import ingest

    memory = InMemorySpanExporter()
    t = Traffic(tmp_path / "unused")
    t.provider = TracerProvider()
    t.provider.add_span_processor(AttemptStampingProcessor())
    t.provider.add_span_processor(SimpleSpanProcessor(memory))
    rate_limited = CallResult(kind=OutcomeKind.RATE_LIMITED, retry_after_ms=250)
    t.controlled([(100, rate_limited), (100, CallResult(value="ok"))], request_id=A)
    unavailable = OutcomeKind.UNAVAILABLE
    t.by_hand(
        request_id=C, steps=[(PRIMARY, 0, unavailable), ("rogue", 200, None)], side_file=False
    )
    t.close()
    source = _otlp_file(list(memory.get_finished_spans()), tmp_path / "collector" / "traces.json")
    ingest([source], tmp_path / "ingested")
    assert not (tmp_path / "ingested" / POLICY_DIR).exists()
    rows = _rows(tmp_path / "ingested")
    assert rows.keys() == {C}
    assert (rows[C]["check"], rows[C]["route_id"]) == ("RouteMismatch", "rogue")
