"""A writer's pid is no proof it is alive: a container's writer is PID 1 each time it starts.

Real writers run as PID 1 of their own PID namespace (``unshare --pid --fork --mount-proc``,
as a container runs them): the first is SIGKILLed after acknowledging its spans; a second
starts as PID 1 again on the same directory and, as the next exporter there, writes
everything the first acknowledged; ``retryscope recover`` leaves the live second writer's
segment alone and names it; once the second is SIGKILLed too (pid 1 still alive: the
host's init), ``retryscope recover`` writes everything it acknowledged. Every acknowledged
span ends in the data exactly once. (The pid rule this replaces recovered nothing here:
pid 1 always looks alive.)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from retryscope.instrumentation.export._segments import segment_files
from tests.reliability.support import recover_cli, span_ids

SPANS = 100

WRITER = r"""
import os, sys, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from retryscope.instrumentation import ParquetSpanExporter

root, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
exporter = ParquetSpanExporter(root)
tracer = TracerProvider().get_tracer("pid-reuse")
acked = []
for i in range(0, n, 10):
    batch = []
    for j in range(i, min(i + 10, n)):
        span = tracer.start_span(f"{name}-{j}")
        span.end()
        batch.append(span)
    assert exporter.export(batch) is SpanExportResult.SUCCESS
    acked += [f"{s.context.span_id:016x}" for s in batch]
print(os.getpid(), " ".join(acked), flush=True)
time.sleep(600)  # alive until killed, as an application is
"""


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            "-c",
            "import os; print(os.getpid())",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return probe.returncode == 0 and probe.stdout.strip() == "1"


pytestmark = pytest.mark.skipif(
    not _unshare_works(), reason="needs unshare of a PID namespace (root on Linux)"
)


class Container:
    """A writer running as PID 1 of its own PID namespace."""

    def __init__(self, script: Path, root: Path, name: str) -> None:
        repo = str(Path(__file__).resolve().parents[2])
        unshare = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL"]
        self.proc = subprocess.Popen(
            [*unshare, sys.executable, str(script), str(root), name, str(SPANS)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": repo},
        )
        assert self.proc.stdout is not None
        pid, *acked = self.proc.stdout.readline().split()
        self.pid_inside = int(pid)
        self.acked = acked

    def writer_pid(self) -> int:
        """The writer's pid as this namespace sees it: the child of ``unshare``."""
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        (child,) = path.read_text().split()
        return int(child)

    def sigkill(self) -> None:
        """SIGKILL the writer (``unshare`` then ends too, whatever it says of it)."""
        pid = self.writer_pid()
        os.kill(pid, signal.SIGKILL)
        self.proc.wait(30)
        assert not Path(f"/proc/{pid}").exists()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # --kill-child takes the writer with it
            self.proc.wait(30)


@pytest.fixture
def containers(tmp_path: Path) -> Iterator[list[Container]]:
    started: list[Container] = []
    yield started
    for container in started:
        container.stop()


def test_a_writer_killed_as_pid_1_loses_nothing_when_pid_1_is_alive_again(
    tmp_path: Path, containers: list[Container]
) -> None:
    root = tmp_path / "data"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)

    first = Container(script, root, "first")
    containers.append(first)
    assert first.pid_inside == 1
    assert len(first.acked) == SPANS
    first.sigkill()
    assert len(list(segment_files(root))) == 1
    assert span_ids(root) == []

    second = Container(script, root, "second")  # restarted: PID 1 again, same directory
    containers.append(second)
    assert second.pid_inside == 1
    assert sorted(span_ids(root)) == sorted(first.acked)  # written by the next exporter
    (live,) = list(segment_files(root))  # the second writer's own, still being written
    assert "-1-" in live.name
    before = live.read_bytes()

    done = recover_cli(root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("recovered 0 spans from 0 segments")
    assert "1 left to their writers" in done.stdout
    assert f"{live}: left in place: its writer (pid 1) or a recovery is alive" in done.stdout
    assert live.read_bytes() == before  # never recovered underneath its live writer
    assert sorted(span_ids(root)) == sorted(first.acked)

    second.sigkill()
    done = recover_cli(root)  # pid 1 is alive here too (this namespace's init)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"recovered {SPANS} spans from 1 segments")
    assert "0 left to their writers" in done.stdout
    ids = span_ids(root)
    assert len(ids) == len(set(ids))  # exactly once
    assert sorted(ids) == sorted(first.acked + second.acked)
    assert list(segment_files(root)) == []
    assert [p.name for p in (root / ".retryscope-segments").iterdir()] == []  # locks gone
