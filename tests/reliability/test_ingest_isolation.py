"""One bad source never ends an ingest run: symbolic link loops, dangling links, a file that
vanishes mid-run, FIFOs and devices, unreadable files and symlinked directories are named
and skipped, and every other source is read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from retryscope.instrumentation.ingest._run import ingest
from tests.export_support import make_spans, otlp_json_line, read_rows

SPANS = make_spans(1)
GOOD = otlp_json_line(SPANS) + "\n"
OTHER = make_spans(2)[len(SPANS) :]


def test_bad_sources_are_named_and_skipped_in_a_real_run(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a-good.jsonl").write_text(GOOD)
    os.symlink("b-loop", src / "b-loop")  # a link to itself: ELOOP when opened
    os.symlink(src / "gone.jsonl", src / "c-dangling.jsonl")  # vanished target
    os.mkfifo(src / "d-fifo.jsonl")  # would block a reader forever
    os.symlink(src / "sub", src / "e-dirlink")  # a symlinked directory: not followed
    (src / "sub" / "f-good.jsonl").write_text(otlp_json_line(OTHER) + "\n")
    os.symlink("/dev/zero", src / "g-device")  # endless zeros
    os.symlink(tmp_path / "loop-a", tmp_path / "loop-b")
    os.symlink(tmp_path / "loop-b", tmp_path / "loop-a")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "retryscope.cli",
            "ingest",
            str(src),
            str(tmp_path / "loop-a"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    err = proc.stderr
    assert "Traceback" not in err
    assert proc.returncode == 1
    assert f"{src / 'b-loop'}: cannot be opened: a symbolic link loop" in err
    assert f"{tmp_path / 'loop-a'}: cannot be opened: a symbolic link loop" in err
    assert f"{src / 'c-dangling.jsonl'}: vanished before it was read" in err
    assert f"{src / 'd-fifo.jsonl'}: not a regular file" in err
    assert f"{src / 'g-device'}: not a regular file" in err
    assert f"{src / 'e-dirlink'}: a symbolic link to a directory, not followed" in err
    assert "failed: 5" in proc.stdout
    assert read_rows(tmp_path / "out").num_rows == len(SPANS) + len(OTHER)  # a-good, f-good


def test_a_source_that_vanishes_during_the_run_is_named(tmp_path: Path) -> None:
    """Sources are listed first and read in order; the second is deleted while the run is
    on the first (a problem the first reports triggers it); the third is still read."""
    other = otlp_json_line(OTHER) + "\n"
    for name, text in (("1.jsonl", "{broken\n" + GOOD), ("2.jsonl", other), ("3.jsonl", other)):
        (tmp_path / name).write_text(text)

    def on_problem(message: str) -> None:
        if "1.jsonl" in message:
            (tmp_path / "2.jsonl").unlink(missing_ok=True)

    summary = ingest([tmp_path], tmp_path / "out", report=on_problem)
    assert summary.failed_sources == 1
    assert any(
        f"{tmp_path / '2.jsonl'}: vanished before it was read" in p for p in summary.problems
    )
    assert read_rows(tmp_path / "out").num_rows == len(SPANS) + len(OTHER)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_source_is_named(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(GOOD)
    (tmp_path / "b.jsonl").write_text(GOOD)
    (tmp_path / "a.jsonl").chmod(0)
    summary = ingest([tmp_path], tmp_path / "out")
    assert summary.failed_sources == 1
    assert "a.jsonl: cannot be opened: Permission denied" in summary.problems[0]
    assert read_rows(tmp_path / "out").num_rows == len(SPANS)
