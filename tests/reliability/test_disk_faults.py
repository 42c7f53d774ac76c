"""Disk full and a read-only directory, on real mounts (a private mount namespace: tmpfs of a
few hundred KiB, remounted read-only): the exporter returns FAILURE, keeps a bounded batch,
logs one clear line, writes everything kept when space returns, and counts exactly what it
had to drop (persisted as a telemetry-gap row).

Already proven elsewhere and not repeated here: kill -9 of a writer mid-write
(tests/test_export_crash.py), a directory replaced by a file and a read-only remount without
overflow (tests/test_export_failures.py), and the journal killed after `attempt_dispatched`
recovering by reconciliation instead of resubmitting
(tests/control_plane/test_cp_journal.py::test_crash_after_dispatch_recovery_polls_instead_of_resubmitting).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.export_support import last_json_line, run_ok

SCRIPT = r"""
import json, os, subprocess, sys
from pathlib import Path
import pyarrow.parquet as pq
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from retryscope.instrumentation import ParquetSpanExporter
from tests.export_support import error_lines

mode, mount = sys.argv[1], Path(sys.argv[2])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=384k", "tmpfs", str(mount)], check=True)
errors = error_lines()

provider = TracerProvider()
tracer = provider.get_tracer("faults")
def batch(n=3):
    spans = []
    for _ in range(n):
        s = tracer.start_span("s", attributes={"payload": os.urandom(6000).hex()})
        s.end()
        spans.append(s)
    return spans

def visible():
    files = [p for p in mount.rglob("*.parquet") if not p.name.startswith(".")]
    return sum(pq.read_metadata(p).num_rows for p in files)

exporter = ParquetSpanExporter(mount / "data", rotate_rows=3, buffer_rows=12, retry_s=0)
assert exporter.export(batch()) == SpanExportResult.SUCCESS  # works before the fault
assert exporter.force_flush()  # (the file that export made due is cut by the helper thread)
filler = mount / "filler"
if mode == "full":
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, os.urandom(4096))
    except OSError:
        pass
    os.close(fd)
else:
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
results = [exporter.export(batch()) for _ in range(8)]  # 24 spans, room for 12
during = {"results": [r.name for r in results], "dropped": exporter.dropped_spans,
          "errors": list(errors), "temps": [p.name for p in mount.rglob("*.inprogress")]}
if mode == "full":
    filler.unlink()
else:
    subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)
flushed = exporter.force_flush()
gaps = [
    (row["gap_reason"], row["gap_dropped_spans"])
    for p in mount.rglob("*.parquet") if not p.name.startswith(".")
    for row in pq.read_table(p, columns=["gap_reason", "gap_dropped_spans"]).to_pylist()
    if row["gap_reason"]
]
print(json.dumps({**during, "flushed": flushed, "rows": visible(), "gaps": gaps,
                  "errors_after": errors[len(during["errors"]):],
                  "temps_after": [p.name for p in mount.rglob("*.inprogress")]}))
"""


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


@pytest.mark.parametrize(
    ("mode", "cause"), [("full", "No space left on device"), ("ro", "Read-only file system")]
)
def test_failure_bounded_buffer_one_line_recovery_exact_loss(
    tmp_path: Path, mode: str, cause: str
) -> None:
    if not _can_mount():
        pytest.skip("cannot create a private tmpfs mount here (unshare -rm)")
    mount = tmp_path / "mnt"
    mount.mkdir()
    script = tmp_path / "faults.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = last_json_line(
        run_ok(["unshare", "-rm", sys.executable, str(script), mode, str(mount)], env=env)
    )
    assert out["results"] == ["FAILURE"] * 8  # the batch processor is told, the app is not
    assert len(out["errors"]) == 1  # one clear line for the whole episode
    assert cause in out["errors"][0]
    assert "keeping up to 12 spans" in out["errors"][0]
    assert out["dropped"] == 24 - 12  # exact: 24 offered while failing, 12 kept
    assert out["temps"] == []  # a failed write leaves no temporary file behind
    assert out["flushed"] is True
    assert out["rows"] == 3 + 12 + 1  # the first batch, everything kept, one gap row
    assert out["gaps"] == [["buffer_full", 12]]  # the loss is in the data set itself
    assert out["errors_after"] == []
    assert out["temps_after"] == []
