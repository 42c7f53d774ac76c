"""Smoke run of ``python -m bench --quick --no-targets``: every benchmark runs and prints.

No timing is asserted here (timing targets belong to ``make bench``); only that each
benchmark ran to the end, printed its ratios and absolute figures, and that a skipped one
says why.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smoke(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict]:
    tmp = tmp_path_factory.mktemp("bench")
    results = tmp / "results.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--no-targets",
            "--data-dir",
            str(tmp / "data"),
            "--json",
            str(results),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(results.read_text())


def test_every_benchmark_runs_and_prints_its_section(smoke) -> None:
    proc, payload = smoke
    for name in BENCHMARKS:
        assert f"[{name}]" in proc.stdout
    assert payload["failed"] == []
    assert {r["bench"] for r in payload["results"]} >= {
        "hot path",
        "export",
        "analytics",
        "drill-down",
        "ingest",
        "ui",
    }
    assert "cores" in payload["machine"]
    assert "duckdb" in payload["machine"]


def test_results_carry_ratios_and_absolute_figures(smoke) -> None:
    proc, payload = smoke
    measured = [r for r in payload["results"] if r["value"] is not None]
    ratios = [r for r in measured if r["unit"] == "×"]
    assert len(ratios) >= 8
    for r in ratios:
        # a --quick run only shows that each ratio is computed: a ratio of two added times
        # (a difference each) may come out at any sign under load, never NaN
        assert not math.isnan(r["value"]), r
        assert r["details"], f"{r['name']} printed no absolute figures"
    for r in payload["results"]:
        if r["value"] is None:
            assert r["note"].startswith("skipped: "), r
            assert r["note"] in proc.stdout


def test_unknown_benchmark_is_a_clear_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "no_such_bench"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "unknown benchmark(s) no_such_bench" in proc.stderr
