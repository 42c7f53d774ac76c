"""Exporting many spans keeps RSS bounded (200k here; RETRYSCOPE_RSS_SPANS=1000000 for the
full run, also ``python -m bench.export_rss``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from .export_support import last_json_line, run_ok

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.load
def test_rss_stays_bounded_while_exporting_many_spans(tmp_path: Path) -> None:
    spans = int(os.environ.get("RETRYSCOPE_RSS_SPANS", "200000"))
    stdout = run_ok(
        [
            sys.executable,
            "-m",
            "bench.export_rss",
            "--spans",
            str(spans),
            "--rotate-rows",
            "20000",
            "--out",
            str(tmp_path),
        ],
        timeout=900,
        cwd=ROOT,
    )
    result = last_json_line(stdout)
    assert result["files"] == -(-spans // 20000)
    # after the first file, memory must not grow with the number of spans exported
    assert result["growth_mib"] < 48, result
    # VmHWM of the child alone: about 160 MiB here, most of it the imports
    assert result["peak_mib"] < 384, result
