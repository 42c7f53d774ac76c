"""Exactly once across runs, with real processes: a file the Collector is still appending to
(and rotates by renaming) is ingested run after run with no span twice and none lost; a
file rewritten in place is named; a file changed while it is read is named, nothing of it
is kept and it is read again on the next run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

from tests.export_support import make_spans, otlp_json_line, read_rows

SPANS = make_spans(1)
TEMPLATE = otlp_json_line(SPANS)
TRACE_IDS = sorted({s.context.trace_id for s in SPANS})


def line(number: int) -> str:
    """A Collector line whose spans are this line's own (trace ids made from ``number``)."""
    text = TEMPLATE
    for k, trace_id in enumerate(TRACE_IDS):
        text = text.replace(f"{trace_id:032x}", f"{number:024x}{k:08x}")
    return text + "\n"


_WRITER = """
import os, sys, time
from tests.reliability.test_ingest_growth import line
path, lines, rotate_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
f = open(path, "a", encoding="utf-8")
for i in range(lines):
    if i == rotate_at:  # the Collector's rotation: rename, then a new file at the old name
        f.close()
        os.rename(path, path.replace(".jsonl", "-rotated.jsonl"))
        f = open(path, "a", encoding="utf-8")
    text = line(i)
    f.write(text[: len(text) // 2]); f.flush()  # half a line on disk for a while
    time.sleep(0.015)
    f.write(text[len(text) // 2 :]); f.flush()
f.close()
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "retryscope.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _summary(stdout: str) -> dict[str, int]:
    fields = stdout.strip().splitlines()[-1].replace(" in ", ", files: ").split(", ")
    out: dict[str, int] = {}
    for item in fields:
        key, _, value = item.partition(": ")
        out[key] = int(value.split()[0])
    return out


def _unique_spans(out: Path) -> tuple[int, int]:
    rows = read_rows(out)
    keys = pc.binary_join_element_wise(rows["trace_id"], rows["span_id"], "/")
    return rows.num_rows, len(pc.unique(keys))


def test_a_growing_rotated_file_is_ingested_exactly_once(tmp_path: Path) -> None:
    src = tmp_path / "collector"
    src.mkdir()
    lines, rotate_at = 400, 200
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(src / "traces.jsonl"), str(lines), str(rotate_at)],
        cwd=Path(__file__).resolve().parents[2],
    )
    runs: list[dict[str, int]] = []
    try:
        while writer.poll() is None:
            if (src / "traces.jsonl").exists():
                runs.append(
                    _summary(_cli("ingest", str(src), "--out", str(tmp_path / "out")).stdout)
                )
            time.sleep(0.05)
    finally:
        writer.wait(timeout=120)
    assert writer.returncode == 0
    runs.append(_summary(_cli("ingest", str(src), "--out", str(tmp_path / "out")).stdout))
    assert len(runs) >= 3
    assert sum(r["resumed"] for r in runs) >= 1  # at least one run read on from a last end
    rows, unique = _unique_spans(tmp_path / "out")
    assert rows == unique == lines * len(SPANS)
    assert sum(r["rewritten"] for r in runs) == 0  # the rotation made a new file, not a rewrite
    again = _summary(_cli("ingest", str(src), "--out", str(tmp_path / "out")).stdout)
    assert (again["rows written"], again["duplicates"]) == (0, 2)


def test_a_file_rewritten_in_place_is_named_and_read_whole(tmp_path: Path) -> None:
    src = tmp_path / "traces.jsonl"
    src.write_text(line(1) + line(2))
    assert _cli("ingest", str(src), "--out", str(tmp_path / "out")).returncode == 0
    inode = src.stat().st_ino
    with src.open("r+", encoding="utf-8") as f:  # the Collector restarted without rotation
        f.truncate(0)
        f.write(line(3))
    assert src.stat().st_ino == inode
    proc = _cli("ingest", str(src), "--out", str(tmp_path / "out"))
    assert f"{src}: rewritten in place since it was ingested" in proc.stderr
    assert _summary(proc.stdout)["rewritten"] == 1
    assert _unique_spans(tmp_path / "out") == (3 * len(SPANS),) * 2


def _opened_by(pid: int, path: Path) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see open files")
def test_a_file_changed_while_read_is_named_and_not_recorded(tmp_path: Path) -> None:
    src = tmp_path / "big.jsonl"
    with src.open("w", encoding="utf-8") as f:
        for i in range(8_000):  # some 40 MB: seconds of decoding
            f.write(line(i))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "retryscope.cli",
            "ingest",
            str(src),
            "--out",
            str(tmp_path / "out"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not _opened_by(proc.pid, src):
        assert proc.poll() is None
        assert time.monotonic() < deadline
        time.sleep(0.001)
    with src.open("r+", encoding="utf-8") as f:  # rewritten in place while it is read
        f.truncate(0)
        f.write(line(9_000))
    _out, err = proc.communicate(timeout=300)
    assert "Traceback" not in err
    assert proc.returncode == 1
    assert f"{src}: shrank to" in err
    assert "while it was read: nothing of it kept" in err
    assert not list((tmp_path / "out").rglob("*.parquet"))
    ledger = tmp_path / "out" / ".retryscope-ingest" / "ledger.jsonl"
    assert not ledger.exists() or not [json.loads(x) for x in ledger.read_text().splitlines()]
    again = _cli("ingest", str(src), "--out", str(tmp_path / "out"))
    assert again.returncode == 0
    assert read_rows(tmp_path / "out").num_rows == len(SPANS)
