"""Crash loss bounded by the batch, not the file: a real application writing 1,000 spans/s
through the zero-code pipeline is killed with SIGKILL 6 s after it started — long before
its first Parquet file (the exporter cuts one a minute). The count reconciliation:

* every span the exporter returned SUCCESS for is in the data set after recovery, exactly
  once (a ledger the process appends to after each SUCCESS, which survives the kill);
* the spans lost are the newest the application ended — a suffix, in end order — and no
  more than the batch processor held (its queue and the batch in flight);
* before recovery the analytics read only complete files (segments are hidden), and
  recovery is done both ways: ``retryscope recover DIR`` and the next exporter started on
  the directory; a recovery that dies before removing its segment adds no duplicate.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from retryscope.analytics import discover
from retryscope.instrumentation.export._segments import SEGMENT_DIR, recover, segment_files
from tests.reliability.support import recover_cli, span_ids

RATE = 1_000  # spans per second
KILL_AFTER_S = 6.0
MAX_QUEUE = 2048  # the SDK's defaults: what the batch processor can hold
MAX_BATCH = 512

APP = r"""
import os, sys, time
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from retryscope.instrumentation import (
    AttemptStampingProcessor, GapCountingBatchSpanProcessor, ParquetSpanExporter)

root, ledgers, rate = sys.argv[1], sys.argv[2], int(sys.argv[3])
flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
accepted = os.open(os.path.join(ledgers, "accepted"), flags, 0o600)
ended = os.open(os.path.join(ledgers, "ended"), flags, 0o600)


class Ledgered(ParquetSpanExporter):
    # what the batch processor was told was accepted, appended after the SUCCESS
    def export(self, spans):
        result = super().export(spans)
        if result is SpanExportResult.SUCCESS:
            os.write(accepted, b"".join(b"%016x\n" % s.context.span_id for s in spans))
        return result


provider = TracerProvider(resource=Resource.create({"service.name": "sigkill"}))
provider.add_span_processor(AttemptStampingProcessor())
provider.add_span_processor(GapCountingBatchSpanProcessor(Ledgered(root)))
tracer = provider.get_tracer("sigkill")
print("started", flush=True)
start = time.monotonic()
for i in range(10**9):
    delay = start + i / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    span = tracer.start_span("work", attributes={"n": i})
    os.write(ended, b"%016x\n" % span.context.span_id)  # before end(): a superset
    span.end()
"""

NEXT_EXPORTER = r"""
import sys
from retryscope.instrumentation import ParquetSpanExporter
ParquetSpanExporter(sys.argv[1]).shutdown()
"""


def _ids(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if len(line) == 16]


def _kill_after_six_seconds(tmp_path: Path) -> tuple[Path, Path]:
    root, ledgers = tmp_path / "data", tmp_path / "ledgers"
    ledgers.mkdir()
    script = tmp_path / "app.py"
    script.write_text(APP)
    app = subprocess.Popen(
        [sys.executable, str(script), str(root), str(ledgers), str(RATE)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert app.stdout is not None
        assert app.stdout.readline().strip() == "started"
        time.sleep(KILL_AFTER_S)
    finally:
        os.kill(app.pid, signal.SIGKILL)
        app.wait(10)
    assert app.returncode == -signal.SIGKILL
    return root, ledgers


def _reconcile(root: Path, ledgers: Path) -> dict[str, int]:
    data = span_ids(root)
    accepted, ended = set(_ids(ledgers / "accepted")), _ids(ledgers / "ended")
    assert len(data) == len(set(data)), "a span was written twice"
    kept = set(data)
    assert accepted <= kept, f"{len(accepted - kept)} accepted spans lost"
    assert kept <= set(ended)
    lost = [span_id for span_id in ended if span_id not in kept]
    assert ended[len(ended) - len(lost) :] == lost, "a lost span is not among the newest"
    assert len(lost) <= MAX_QUEUE + MAX_BATCH
    return {"ended": len(ended), "accepted": len(accepted), "kept": len(kept), "lost": len(lost)}


@pytest.mark.parametrize("how", ["cli", "next exporter"])
def test_sigkill_loses_only_what_the_batch_processor_held(tmp_path: Path, how: str) -> None:
    root, ledgers = _kill_after_six_seconds(tmp_path)
    assert list(segment_files(root)), "the killed writer left no segment"
    dataset = discover(root)  # before recovery: only complete files, no segment
    assert dataset.skipped == ()
    assert all(SEGMENT_DIR not in f for f in dataset.files)
    assert span_ids(root) == []  # no file was cut in 6 s: everything is in segments

    if how == "cli":
        done = recover_cli(root)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("recovered ")
    else:
        script = root.parent / "next.py"
        script.write_text(NEXT_EXPORTER)
        subprocess.run([sys.executable, str(script), str(root)], check=True, timeout=120)
    figures = _reconcile(root, ledgers)
    assert not list(segment_files(root))
    assert figures["accepted"] >= (KILL_AFTER_S - 2) * RATE  # it really ran, and was kept
    print(f"sigkill at {RATE} spans/s after {KILL_AFTER_S} s ({how}): {figures}")


def test_a_recovery_that_dies_before_removing_its_segment_adds_no_duplicate(
    tmp_path: Path,
) -> None:
    root, ledgers = _kill_after_six_seconds(tmp_path)
    (segment,) = list(segment_files(root))
    copy = tmp_path / segment.name
    shutil.copy2(segment, copy)
    first = recover(root)
    assert first.rows > 0
    assert first.duplicates == 0
    # as if the recovery had died after its Parquet file was in place, before the unlink
    shutil.copy2(copy, segment)
    again = recover(root)
    assert (again.rows, again.duplicates) == (0, first.rows)
    _reconcile(root, ledgers)


def _message_ends(segment: Path) -> list[int]:
    """Byte offsets at which each IPC message of ``segment`` ends (schema first)."""
    ends: list[int] = []
    with pa.OSFile(str(segment)) as source:
        reader = pa.ipc.MessageReader.open_stream(source)
        while True:
            try:
                reader.read_next_message()
            except StopIteration:
                break
            ends.append(source.tell())
    return ends


def test_a_torn_segment_is_named_and_its_complete_batches_recovered(tmp_path: Path) -> None:
    """A kill in the middle of an append leaves a prefix of the batch's bytes: the segment
    the real SIGKILL left is cut inside its last batch (that batch's ``export`` had not
    returned, so its spans were never acknowledged); a second segment is cut inside its
    schema. Recovery names both, skips the torn bytes and loses no complete batch."""
    root, ledgers = _kill_after_six_seconds(tmp_path)
    (segment,) = list(segment_files(root))
    ends = _message_ends(segment)
    assert len(ends) >= 3  # the schema and at least two batches
    batches = list(pa.ipc.open_stream(pa.memory_map(str(segment))))
    whole = pa.Table.from_batches(batches)
    torn_ids = set(batches[-1].column("span_id").to_pylist())
    with open(segment, "r+b") as f:
        f.truncate((ends[-2] + ends[-1]) // 2)  # inside the last batch's body
    writer, seq, fileseq = segment.name.rsplit("-", 2)
    headless = segment.with_name(f"{writer}-{int(seq) + 1:06d}-{fileseq}")
    headless.write_bytes(segment.read_bytes()[: ends[0] // 2])  # inside the schema
    assert discover(root).files == ()  # nothing partial is read, before or after

    done = recover_cli(root)
    assert done.returncode == 0, done.stderr
    assert f"{segment}: torn last batch" in done.stderr
    assert f"{headless}: torn last batch" in done.stderr
    assert "2 torn batches" in done.stdout
    assert not list(segment_files(root))
    kept = span_ids(root)
    assert len(kept) == len(set(kept)) == whole.num_rows - len(torn_ids)
    accepted = set(_ids(ledgers / "accepted"))
    assert set(kept) == set(whole.column("span_id").to_pylist()) - torn_ids
    assert accepted - torn_ids <= set(kept)
    assert discover(root).skipped == ()
