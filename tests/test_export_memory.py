"""Exporting many spans keeps RSS bounded (200k here; RETRYSCOPE_RSS_SPANS=1000000 for the
full run, also ``python bench/export_rss.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "export_rss.py"


@pytest.mark.load
def test_rss_stays_bounded_while_exporting_many_spans(tmp_path: Path) -> None:
    spans = int(os.environ.get("RETRYSCOPE_RSS_SPANS", "200000"))
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--spans",
            str(spans),
            "--rotate-rows",
            "20000",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["files"] == -(-spans // 20000)
    # after the first file, memory must not grow with the number of spans exported
    assert result["growth_mib"] < 48, result
    assert result["peak_mib"] < 768, result
