"""Fork safety: children forked while another thread of the parent ends spans through the
zero-code pipeline (stamping processor, gap-counting batch processor, Parquet exporter)
never hang on an inherited lock, and each child's spans reach its own files, exactly once.

The parent runs in a subprocess (so the test process's own threads are not forked); each
child must finish within ``CHILD_TIMEOUT_S`` of the last fork or it counts as hung and is
killed. A deadlocked child never finishes, so the bound only has to outlast a slow machine;
a child still running after ``STACK_AFTER_S`` writes its threads' stacks (``faulthandler``),
and the failure shows where each hung child waits."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.forking import FORK_HELPERS, run_parent
from tests.reliability.support import visible_files

CHILDREN = 60
SPANS_PER_CHILD = 40
CHILD_TIMEOUT_S = 60.0
STACK_AFTER_S = 15.0

PARENT = r"""
import faulthandler, json, os, sys, threading, time
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from retryscope.instrumentation import (
    AttemptStampingProcessor, GapCountingBatchSpanProcessor, ParquetSpanExporter)
import retryscope

out, children, per_child = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
timeout, stack_after = float(sys.argv[4]), float(sys.argv[5])
stacks = os.path.join(os.path.dirname(out), "stacks")
os.makedirs(stacks, exist_ok=True)
exporter = ParquetSpanExporter(out, partitioning="none")
provider = TracerProvider(resource=Resource.create({"service.name": "fork"}))
provider.add_span_processor(AttemptStampingProcessor())
# a small queue and batch: the queue is full and drained all the time, its locks always busy
batch = GapCountingBatchSpanProcessor(exporter, max_queue_size=256, max_export_batch_size=64,
                                      schedule_delay_millis=5)
provider.add_span_processor(batch)
tracer = provider.get_tracer("fork")
stop = threading.Event()
parent_spans = [0]

def busy():
    while not stop.is_set():
        with retryscope.logical_request(operation="parent", tracer_provider=provider) as req:
            with req.attempt("primary"):
                pass
        tracer.start_span("parent-plain", attributes={"owner": "parent"}).end()
        parent_spans[0] += 3

threads = [threading.Thread(target=busy) for _ in range(2)]
for t in threads: t.start()
time.sleep(0.2)
pids = []
for i in range(children):
    pid = os.fork()
    if pid == 0:
        try:
            dump = open(os.path.join(stacks, str(os.getpid())), "w")
            faulthandler.dump_traceback_later(stack_after, file=dump)
            for n in range(per_child):
                tracer.start_span("child", attributes={"owner": "child", "child": i}).end()
            ok = provider.force_flush(int(timeout * 1000))
            provider.shutdown()
            os._exit(0 if ok else 3)
        except BaseException:
            os._exit(4)
    pids.append(pid)
    time.sleep(0.01)
hung, failed = [], []
deadline = time.monotonic() + timeout
pending = set(pids)
while pending and time.monotonic() < deadline:
    for pid in list(pending):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            pending.discard(pid)
            if os.waitstatus_to_exitcode(status) != 0:
                failed.append(pid)
    time.sleep(0.01)
where = {}
for pid in pending:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    hung.append(pid)
    with open(os.path.join(stacks, str(pid))) as dump:
        where[pid] = dump.read()
stop.set()
for t in threads: t.join()
provider.shutdown()
print(json.dumps({"pids": pids, "hung": hung, "where": where, "failed": failed,
                  "parent_dropped": batch.dropped_spans + exporter.dropped_spans}))
"""


def _writer_pid(path: Path) -> int:
    """The pid in a span file's name (``spans-<stamp>-<host>-<pid>-<token>-<seq>``)."""
    match = re.search(r"-(\d+)-[0-9a-f]{6}-\d+\.parquet$", path.name)
    assert match, path.name
    return int(match.group(1))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_children_forked_under_a_busy_thread_never_hang_and_write_their_own_files(
    tmp_path: Path,
) -> None:
    out = tmp_path / "data"
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    done = subprocess.run(
        [sys.executable, str(script), str(out)]
        + [str(x) for x in (CHILDREN, SPANS_PER_CHILD, CHILD_TIMEOUT_S, STACK_AFTER_S)],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S * 2 + 120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    stacks = "\n".join(f"child {pid}:\n{stack}" for pid, stack in result["where"].items())
    assert result["hung"] == [], f"{len(result['hung'])} of {CHILDREN} children hung\n{stacks}"
    assert result["failed"] == []
    children = {pid: i for i, pid in enumerate(result["pids"])}
    per_child: Counter[int] = Counter()
    for path in visible_files(out):
        pid = _writer_pid(path)
        table = pq.read_table(path, columns=["attributes", "span_role"])
        owners = [
            attrs.get("owner") if attrs else None
            for attrs in (dict(m) for m in table.column("attributes").to_pylist())
        ]
        if pid in children:  # a child's file: only that child's spans
            assert set(owners) == {'"child"'}, path.name
            ids = {
                dict(m)["child"] for m in table.column("attributes").to_pylist() if m is not None
            }
            assert ids == {str(children[pid])}, path.name
            per_child[pid] += table.num_rows
        else:  # the parent's: no child span, gap rows allowed
            roles = pc.fill_null(table.column("span_role"), "").to_pylist()
            assert '"child"' not in owners, path.name
            assert set(roles) <= {"", "logical_request", "attempt", "telemetry_gap"}
    # every child's spans, exactly once (the child's queue never overflows: 40 < 256)
    assert per_child == dict.fromkeys(children, SPANS_PER_CHILD)


HELD_LOCKS_PARENT = (
    r"""
import json, os, sys, threading, time
"""
    + FORK_HELPERS
    + r"""
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
import retryscope
from retryscope.instrumentation import (
    AttemptMetricsProcessor, AttemptStampingProcessor, MetricsConfig)
from retryscope.instrumentation import _containment, _digests

before, timeout = int(sys.argv[1]), float(sys.argv[2])
reader = InMemoryMetricReader()
provider = TracerProvider()
provider.add_span_processor(AttemptStampingProcessor())
processor = AttemptMetricsProcessor(
    meter_provider=MeterProvider(metric_readers=[reader]), config=MetricsConfig())
provider.add_span_processor(processor)

def request(**odd):
    with retryscope.logical_request(operation="op", tracer_provider=provider, **odd) as req:
        with req.attempt("primary"):
            pass

def logical_requests():
    return sum(point.value
               for rm in reader.get_metrics_data().resource_metrics
               for sm in rm.scope_metrics for m in sm.metrics
               if m.name == "retryscope.logical_requests" for point in m.data.data_points)

for _ in range(before):
    request()
recorded = logical_requests()  # (a collection records the requests that ended)
for _ in range(3):
    request()  # ended, not recorded yet: they wait for a few more (the parent's to record)
# a thread in the middle of recording holds the metrics processor's lock and those of the
# process-wide registries (contained errors, the digest key) while the main thread forks
let_go = held_by_another_thread(
    [processor._lock, _containment._registry._lock, _digests._state._lock])
pid = os.fork()
if pid == 0:
    try:
        request()  # the metrics processor's lock
        request(not_an_argument=1)  # a contained error: the registry's lock
        _digests.reload_digest_key()  # the digest key's lock
        mine = logical_requests() == 2  # the child's own two requests, not the parent's
        errors = _containment.contained_errors().get("logical_request")
        os._exit(0 if mine and errors == 1 else 3)
    except BaseException:
        os._exit(4)
let_go()
child = wait_for_child(pid, timeout)
print(json.dumps({"recorded": recorded, "child": child, "parent": logical_requests()}))
"""
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_child_forked_while_another_thread_records_metrics_records_its_own(
    tmp_path: Path,
) -> None:
    """The metrics processor and the process-wide registries re-create their locks in the
    child (it would hang on the first span, contained error or key reload otherwise); the
    child's counters count what it records, the parent's stay the parent's."""
    before = 5
    args = (str(before), str(CHILD_TIMEOUT_S))
    result = run_parent(HELD_LOCKS_PARENT, tmp_path, *args, timeout=CHILD_TIMEOUT_S + 120)
    assert result == {"recorded": before, "child": 0, "parent": before + 3}
