"""Spans delivered more than once — a Collector's at-least-once retry, two sources holding
the same spans, a file ingested twice — count once: the amplification of a request with
one retry stays 2.0, and every extra copy is a `duplicate_span` finding naming the span
and how many copies arrived."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import retryscope
from retryscope.analytics import build_report, connect, findings
from retryscope.cli import main
from retryscope.demo._scenarios import VirtualClock
from tests.reliability.support import audit, visible_files

T0 = 1_800_000_000_000_000_000
MS = 1_000_000


def _one_retry_per_request(data: Path, requests: int = 5) -> None:
    """Each request: a transport attempt that fails and one that succeeds (2 receiver
    attempts per request)."""
    clock = VirtualClock(T0)
    with audit(data) as a:
        for _ in range(requests):
            with retryscope.logical_request(
                operation="chat", tenant="acme", tracer_provider=a.provider, clock=clock
            ) as req:
                with req.attempt("primary", layer="transport") as first:
                    clock.advance_ms(20)
                    first.set_outcome("retryable", "unavailable")
                with req.attempt("primary", layer="transport"):
                    clock.advance_ms(30)
                req.set_terminal("complete")
            clock.advance_ms(100)
        a.close()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    _one_retry_per_request(root)
    return root


def _duplicates(root: Path) -> list[dict[str, object]]:
    return findings(connect(root)[0], rule="duplicate_span").to_pylist()


def test_spans_delivered_twice_count_once(data: Path, tmp_path: Path) -> None:
    reference = build_report(connect(data)[0])
    assert reference["amplification_ratio"] == 2.0
    assert _duplicates(data) == []
    for f in visible_files(data):  # a second source delivered every file again
        shutil.copy2(f, f.with_name("again-" + f.name))
    again = build_report(connect(data)[0])
    assert again["amplification_ratio"] == 2.0
    assert again["physical_attempts"] == reference["physical_attempts"] == 10
    assert again["logical_requests"] == 5
    copies = _duplicates(data)
    assert len(copies) == 15  # 5 request spans + 10 attempt spans
    assert {json.loads(str(r["evidence"]))["copies"] for r in copies} == {2}
    assert all(r["severity"] == "warning" for r in copies)
    assert again["violations"]["duplicate_span"] == 15
    for key in ("violations", "findings"):
        again.pop(key)
        reference.pop(key)
    assert again == reference


def test_copies_inside_one_file_and_three_deliveries(data: Path, tmp_path: Path) -> None:
    """A file holding each of its rows twice, plus a third copy elsewhere: three copies,
    one counted; with a model cache as without."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    reference = build_report(connect(data)[0])
    (first, *_) = visible_files(data)
    table = pq.read_table(first, partitioning=None)
    pq.write_table(pa.concat_tables([table, table]), first.with_name("doubled.parquet"))
    for cache in (None, tmp_path / "cache"):
        con, _ = connect(data, model_cache=cache)
        report = build_report(con)
        assert report["amplification_ratio"] == reference["amplification_ratio"] == 2.0
        copies = {
            json.loads(str(r["evidence"]))["copies"]
            for r in findings(con, rule="duplicate_span").to_pylist()
        }
        assert copies == {3}
    assert main(["findings", str(data), "--rule", "duplicate_span", "--format", "json"]) == 0
