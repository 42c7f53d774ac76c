"""What the CLI prints is safe: a route name holding a terminal escape, a newline or table
syntax neither reaches the terminal raw nor forges a row of a markdown report; and every
printing command, its output pipe closed by the reader (``retryscope findings | head``),
exits quietly as a command killed by SIGPIPE does (141), with no traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from retryscope._safe_text import for_markdown, for_terminal
from tests.recorder import MS, T0, Clock, Recorder

HOSTILE = "evil\x1b]0;owned\x07\x1b[2J\r| forged | row |\n| x | y |\u202e<img src=x>`[l](j)\\"


@pytest.fixture
def data(recorder: Recorder) -> str:
    for i in range(40):  # enough findings that every command prints several rows
        clock = Clock(T0 + i * 60_000 * MS)
        with recorder.request(clock, tenant="acme", logical_request_id=f"req-{i}") as req:
            recorder.attempt(req, HOSTILE, outcome="rate_limited", reserved=100, gap_ms=5)
            recorder.attempt(req, "fallback", priority=1, reserved=100, actual=80)
    recorder.connect()
    return str(recorder.directory)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retryscope.cli", *args], capture_output=True, text=True, timeout=300
    )


def _no_raw_controls(text: str) -> None:
    for char in ("\x1b", "\x07", "\r", "\u202e"):
        assert char not in text


def test_text_report_shows_escapes_not_raw_controls(data: str) -> None:
    proc = _cli("report", data)
    assert proc.returncode == 0, proc.stderr
    _no_raw_controls(proc.stdout)
    assert for_terminal(HOSTILE) in proc.stdout  # the route, visible and escaped
    proc = _cli("findings", data)
    assert proc.returncode == 0, proc.stderr
    _no_raw_controls(proc.stdout)


def test_markdown_report_has_no_forged_row(data: str) -> None:
    proc = _cli("report", data, "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    _no_raw_controls(proc.stdout)
    routes = proc.stdout.split("## routes")[1].split("\n## ")[0]
    rows = [r for r in routes.splitlines() if r.startswith("|") and not r.startswith("|---")]
    assert len(rows) == 3  # the empty header row, the hostile route, the fallback
    cells = [c for c in rows[1].replace("\\|", "").split("|")[1:-1]]
    assert len(cells) == 2  # label and value: the pipes in the name are escaped
    assert for_markdown(HOSTILE) in rows[1]
    for line in proc.stdout.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            assert len(line.replace("\\\\", "").replace("\\|", "").split("|")) == 4, line


def test_markdown_cell_escaping_round_trip() -> None:
    """Every character the markdown escaping touches, at its boundary."""
    assert for_markdown("a|b") == "a\\|b"
    assert for_markdown("a\\|b") == "a\\\\\\|b"  # a backslash cannot unescape the pipe
    assert for_markdown("x\ny") == "x\\\\x0ay"
    assert for_markdown("<b>`[l](u)") == "\\<b\\>\\`\\[l\\](u)"
    assert for_markdown("snake_case *x*") == "snake_case *x*"
    assert for_terminal("\x1b[31m\x7f\x9b\u2028\u2066ok") == "\\x1b[31m\\x7f\\x9b\\u2028\\u2066ok"
    assert for_terminal("naïve ✓ 日本") == "naïve ✓ 日本"


@pytest.mark.parametrize(
    "args",
    [
        ("report", "{data}"),
        ("report", "{data}", "--format", "json"),
        ("report", "{data}", "--format", "markdown"),
        ("findings", "{data}"),
        ("findings", "{data}", "--format", "json"),
        ("request", "{data}", "req-1"),
        ("whatif", "{data}", "--max-attempts", "1"),
        ("model", "{data}", "--model-cache", "{cache}"),
        ("--help",),
        ("lab", "--out", "{cache}"),
    ],
    ids=lambda a: "-".join(x for x in a if not x.startswith("{")),
)
def test_closed_output_pipe_exits_quietly(data: str, tmp_path: Path, args: tuple[str, ...]) -> None:
    argv = [a.format(data=data, cache=tmp_path / "cache") for a in args]
    proc = subprocess.Popen(
        [sys.executable, "-m", "retryscope.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first byte is written
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=300)
    assert "Traceback" not in err, err
    assert "BrokenPipeError" not in err, err
    assert "Exception ignored" not in err, err
    # argparse writes --help itself and ignores a failed write: it exits 0
    assert code == (0 if argv == ["--help"] else 128 + signal.SIGPIPE)


def test_ingest_summary_to_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    src = tmp_path / "broken.jsonl"
    src.write_text("{not otlp\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "retryscope.cli", "ingest", str(src), "--out", str(tmp_path / "o")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 128 + signal.SIGPIPE
    assert "Traceback" not in err
    assert f"warning: {src}:1: invalid JSON" in err  # the warnings still reach stderr
