"""kill -9 of an application mid-flush, through the real pipeline (processor, batch
processor, exporter): the report over the directory answers from exactly the complete files
and a new process's spans join them. The exporter-level kill test (no partial file visible,
nothing renamed lost, dead writers' temporary files removed) is tests/test_export_crash.py;
this one adds the application path and the analytics on top; what the killed process had
accepted is recovered by the next one (reconciled in
tests/reliability/test_sigkill_durability.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from retryscope.analytics import build_report, connect
from tests.reliability.support import visible_files

APP = r"""
import sys
import time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from retryscope.instrumentation import AttemptStampingProcessor, ParquetSpanExporter
import retryscope

root, requests = sys.argv[1], int(sys.argv[2])
exporter = ParquetSpanExporter(root, rotate_rows=2_000, row_group_rows=250)
provider = TracerProvider()
provider.add_span_processor(AttemptStampingProcessor())
provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=100_000))
for i in range(requests):
    if i % 100 == 0:
        # paced like an application that waits on I/O: a thread spinning on the GIL starves
        # the export thread (every pyarrow call hands the GIL back and waits to regain it)
        time.sleep(0.001)
    with retryscope.logical_request(operation="chat", tracer_provider=provider,
                                    idempotency_key=f"k{i}") as req:
        with req.attempt("primary", layer="harness") as a:
            a.set_outcome("rate_limited")
        with req.attempt("primary", layer="harness"):
            pass
provider.shutdown()
print("done", flush=True)
"""


def _requests_in_files(root: Path) -> int:
    return sum(
        pq.read_table(f, columns=["span_role"])
        .column("span_role")
        .to_pylist()
        .count("logical_request")
        for f in visible_files(root)
    )


def test_kill_mid_flush_then_the_report_and_a_new_process_carry_on(tmp_path: Path) -> None:
    root = tmp_path / "data"
    app = tmp_path / "app.py"
    app.write_text(APP)
    proc = subprocess.Popen([sys.executable, str(app), str(root), "1000000"])
    deadline = time.monotonic() + 120
    try:
        # aim the kill at a moment a file is being written; on a busy machine that window
        # may be missed, so after a few complete files the kill lands wherever it lands
        while time.monotonic() < deadline:
            files = visible_files(root) if root.exists() else []
            if files and (list(root.rglob(".*.inprogress")) or len(files) >= 5):
                break
            time.sleep(0.002)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    before = _requests_in_files(root)
    assert before > 0

    con, dataset = connect(root)
    assert dataset.skipped == ()  # temporary files are never read, complete ones always
    report = build_report(con)
    assert report["logical_requests"] >= before  # attempts of cut-off requests count too
    assert report["completed"] == before

    done = subprocess.run(
        [sys.executable, str(app), str(root), "500"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # the new process first wrote what the killed one had accepted (its segments)
    recovered = sum(
        pq.read_table(f, columns=["span_role"])
        .column("span_role")
        .to_pylist()
        .count("logical_request")
        for f in visible_files(root)
        if f"-{proc.pid}-" in f.name and "r" in f.name.rsplit("-", 2)[-2]
    )
    con, dataset = connect(root)
    assert dataset.skipped == ()
    assert build_report(con)["completed"] == before + recovered + 500
