"""Every example under examples/ runs and does what it says: the Python examples in their own
processes (their data read back by the analytics), the Collector config parsed and its file
exporter's output ingested."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from retryscope.analytics import build_report, connect
from retryscope.cli import main as cli
from retryscope.instrumentation import ParquetSpanExporter

from .export_support import make_spans, otlp_json_line, read_rows

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
HEAVY = ("duckdb", "streamlit", "altair")


def _run_example(name: str, out: Path) -> str:
    """Run ``examples/<name>`` on ``out`` in a fresh interpreter; its stdout. The process
    also checks that the example imported none of the analytics or UI dependencies."""
    probe = (
        "import runpy, sys\n"
        f"sys.argv = [{name!r}, {str(out)!r}]\n"
        "try:\n"
        f"    runpy.run_path({str(EXAMPLES / name)!r}, run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "assert not heavy, f'imported {heavy}'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _report(out: Path) -> dict[str, Any]:
    con, dataset = connect(out)
    assert not dataset.skipped
    return build_report(con)


def test_quickstart_fallbacks_report_a_fallback_rate(tmp_path: Path) -> None:
    out = tmp_path / "data"
    stdout = _run_example("quickstart.py", out)
    assert "6 of 6 requests answered" in stdout
    report = _report(out)
    assert report["logical_requests"] == 6
    assert report["physical_attempts"] == 12  # 3 × (primary, primary, fallback) + 3 × 1
    assert report["requests_with_fallback"] == 3
    assert report["fallback_rate"] == 0.5
    assert report["terminals"] == {"complete": 6}
    assert report["fallback"]["fallback_success_rate"] == 1.0
    routes = {r["route_id"]: r for r in report["routes"]}
    assert routes["fallback"]["is_fallback"]
    assert not routes["primary"]["is_fallback"]


def test_controller_falls_back_and_recovers_from_its_journal(tmp_path: Path) -> None:
    out = tmp_path / "data"
    stdout = _run_example("controller.py", out)
    assert "receiver saw: {'private-primary': 2, 'external-fallback': 1}" in stdout
    assert "receipt replays without drift: True" in stdout
    assert "second run: complete (recovered from the journal, no dispatch)" in stdout
    assert (out / "_journal" / "retry.sqlite").is_file()
    report = _report(out)
    assert report["logical_requests"] == 1  # the second run dispatched nothing
    assert report["physical_attempts"] == 3
    assert report["fallback_rate"] == 1.0
    assert report["fallback"]["fallback_quality"] == 1.0  # same contract, allowed boundary
    assert report["terminals"] == {"complete": 1}
    assert report["violations"]["not_before_ignored"] == 0
    assert report["violations"]["fallback_boundary_widening"] == 0


def test_async_harness_shares_one_policy_and_its_guards_across_requests(tmp_path: Path) -> None:
    import re

    from retryscope.analytics import findings

    out = tmp_path / "data"
    stdout = _run_example("async_harness.py", out)
    counts = re.search(r"attempts in receipts: (\d+); requests the provider saw: (\d+)", stdout)
    assert counts is not None
    assert counts.group(1) == counts.group(2)  # every attempt accounted, none hidden
    refused = re.search(r"refused by the shared guards: (\{.*\})", stdout)
    assert refused is not None
    assert "breaker" in refused.group(1)  # the primary's breaker opened for everyone
    report = _report(out)
    assert report["logical_requests"] == 40
    assert report["receiver_attempts"] == int(counts.group(2))
    con, _ = connect(out)
    assert findings(con, rule="policy_drift").num_rows == 0  # the spans carry the policy


def _collector_config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((EXAMPLES / "otel-collector.yaml").read_text())
    return config


def test_collector_config_sends_otlp_traces_to_a_json_lines_file() -> None:
    config = _collector_config()
    traces = config["service"]["pipelines"]["traces"]
    assert "otlp" in traces["receivers"]
    assert set(config["receivers"]["otlp"]["protocols"]) == {"grpc", "http"}
    files = [e for e in traces["exporters"] if e.split("/")[0] == "file"]
    assert files, "the traces pipeline has no file exporter"
    for exporter in files:
        settings = config["exporters"][exporter]
        assert settings.get("format", "json") == "json"  # JSON lines, as ingest reads them
        assert "compression" not in settings  # legacy compressed framing is not JSON lines
        assert Path(settings["path"]).suffix in (".json", ".jsonl", ".ndjson")


def test_files_that_collector_config_writes_are_ingested(tmp_path: Path) -> None:
    config = _collector_config()
    (exporter,) = (e for e in config["exporters"] if e.split("/")[0] == "file")
    path = Path(config["exporters"][exporter]["path"])
    spans = make_spans(3)
    collector = tmp_path / "otelcol"
    collector.mkdir()
    # A rotated file (the Collector puts the time before the extension) and the active one.
    rotated = collector / f"{path.stem}-2026-11-30T05-02-14.173{path.suffix}"
    half = len(spans) // 2
    rotated.write_text(otlp_json_line(spans[:half]) + "\n" + otlp_json_line(spans[half:]) + "\n")
    (collector / path.name).write_text(otlp_json_line(spans[:1])[:-9])  # still being written
    sources = sorted(str(p) for p in collector.glob(f"{path.stem}-*{path.suffix}"))
    assert sources == [str(rotated)]
    ingested = tmp_path / "ingested"
    assert cli(["ingest", *sources, "--out", str(ingested)]) == 0

    exported = tmp_path / "exported"
    writer = ParquetSpanExporter(exported)
    writer.export(spans)
    writer.shutdown()
    assert read_rows(ingested).equals(read_rows(exported))


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.iterdir()))
def test_every_example_is_run_by_a_test(name: str) -> None:
    tested = {"quickstart.py", "controller.py", "async_harness.py", "otel-collector.yaml"}
    tested.add("zero_code")  # tests/test_zero_code_quickstart.py
    assert name in tested, f"examples/{name} has no test in tests/test_examples.py"


README = EXAMPLES.parent / "README.md"

QUICK_START_WORLD = """
payload = {"prompt": "Summarise ticket INC-4711"}

def call_provider(route, payload):  # the primary is down; the fallback answers
    return 503 if route == "primary" else 200
"""


def test_readme_quick_start_runs_and_reports_its_fallback(tmp_path: Path) -> None:
    """The README's quick start, as printed, with a provider whose primary is down."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Quick start", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    done = subprocess.run(
        [sys.executable, "-c", QUICK_START_WORLD + code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = _report(tmp_path / "retryscope-data")
    assert (report["logical_requests"], report["physical_attempts"]) == (1, 2)
    assert report["fallback_rate"] == 1.0
    assert report["terminals"] == {"complete": 1}
