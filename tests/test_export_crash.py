"""kill -9 of a writer mid-batch: no partial file is visible, a new writer carries on, and
nothing already renamed is lost (the batch being written is recovered from its segment; the
reconciliation of everything accepted is tests/reliability/test_sigkill_durability.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from retryscope.analytics import discover

WRITER = """
import sys
from opentelemetry.sdk.trace import TracerProvider
from retryscope.instrumentation import ParquetSpanExporter

root, batches = sys.argv[1], int(sys.argv[2])
provider = TracerProvider()
tracer = provider.get_tracer("crash")
spans = []
for i in range(4000):
    span = tracer.start_span(f"s{i}", attributes={"retryscope.logical_request.id": f"r{i % 97}",
                                                "payload": "x" * 64})
    span.end()
    spans.append(span)
exporter = ParquetSpanExporter(root, rotate_rows=4000, row_group_rows=500)
for _ in range(batches):
    exporter.export(spans)
exporter.shutdown()
print("done", flush=True)
"""


def _visible(root: Path) -> dict[Path, int]:
    return {
        p: pq.read_metadata(p).num_rows
        for p in root.rglob("*.parquet")
        if not p.name.startswith(".")
    }


def _temps(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*.inprogress")]


def test_kill_9_mid_batch(tmp_path: Path) -> None:
    root = tmp_path / "data"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writer = subprocess.Popen([sys.executable, str(script), str(root), "100000"])
    caught_mid_write = False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if root.exists() and len(_visible(root)) >= 2 and _temps(root):
                caught_mid_write = True
                break
            time.sleep(0.002)
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(10)
    assert writer.returncode == -signal.SIGKILL
    before = _visible(root)
    orphans = _temps(root)
    assert len(before) >= 2
    assert all(rows == 4000 for rows in before.values())  # every visible file is complete
    dataset = discover(root)
    assert dataset.skipped == ()
    assert len(dataset.files) == len(before)
    assert caught_mid_write  # the kill really landed while a temporary file was open

    done = subprocess.run(
        [sys.executable, str(script), str(root), "2"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    after = _visible(root)
    assert set(before) <= set(after)  # nothing already renamed was lost
    # the new writer first wrote what the dead one had accepted but not yet renamed into
    # place (the batch of the file being written: recovered from its segment, unless the
    # kill fell between that file's rename and the segment's removal)
    recovered = {p for p in after if f"-{writer.pid}-" in p.name} - set(before)
    assert sum(after[p] for p in recovered) in (0, 4000)
    new_rows = sum(after.values()) - sum(before.values())
    assert new_rows - sum(after[p] for p in recovered) == 8000
    assert not list((root / ".retryscope-segments").glob("*.arrows"))
    assert discover(root).skipped == ()
    # the new writer removed the dead writer's temporary files where it wrote
    new_dirs = {p.parent for p in set(after) - set(before)}
    assert all(not t.exists() for t in orphans if t.parent in new_dirs)
