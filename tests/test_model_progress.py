"""Progress of a model build: stage, partition k of K, elapsed and an estimate on a
terminal; nothing when the stream is piped or the work is quick; the CLI's commands
report to stderr."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from retryscope.analytics import connect
from retryscope.analytics.commands import CACHE_HINT, Engine, _opened
from retryscope.analytics.model import Progress, TerminalProgress, _build
from retryscope.analytics.model._progress import (
    HINT_AFTER_S,
    STAGE_DONE,
    STAGE_PARTITIONS,
    Tracker,
)
from tests.test_analytics_incremental import _traffic


class _Terminal(io.StringIO):
    """A text stream that says it is a terminal (what a tty's stderr says)."""

    def isatty(self) -> bool:
        return True


def test_a_build_reports_each_time_partition_then_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each partition its own build (small consecutive partitions are built together)
    monkeypatch.setattr(_build, "BUILD_SPAN_ROWS", 1)
    root = _traffic(tmp_path / "data", seed=3, per_hour=4, hours=3)
    seen: list[Progress] = []
    con, _ = connect(root)
    con.progress = seen.append
    con.build()
    partitions = [p for p in seen if p.stage == STAGE_PARTITIONS]
    total = partitions[0].total
    assert total >= 3
    assert [p.done for p in partitions] == list(range(total + 1))
    assert all(p.total == total for p in partitions)
    assert seen[-1].stage == STAGE_DONE
    assert seen[-1].fraction == 1.0
    elapsed = [p.elapsed_s for p in seen]
    assert elapsed == sorted(elapsed)
    # an estimate once some rows are done, none before
    assert partitions[0].remaining_s is None
    assert all(p.remaining_s is not None for p in partitions[1:])


def test_estimate_extrapolates_the_rows_done() -> None:
    seen: list[Progress] = []
    tracker = Tracker(seen.append)
    tracker.report(STAGE_PARTITIONS, 1, 4, weight_done=25, weight_total=100)
    (p,) = seen
    assert p.remaining_s is not None
    assert abs(p.remaining_s - 3 * p.elapsed_s) <= 1e-9 + 3 * p.elapsed_s * 1e-9


def test_terminal_shows_a_line_per_step_and_ends_it() -> None:
    out = _Terminal()
    show = TerminalProgress(out, after_s=0)
    show(Progress(STAGE_PARTITIONS, 1, 4, 2.0, 6.0, "date=2026-09-21/hour=14"))
    show(Progress(STAGE_DONE, 4, 4, 8.0))
    text = out.getvalue()
    assert "building time partitions: 1 of 4 (25%), 2 s elapsed, about 6 s left" in text
    assert text.endswith("model ready: 4 of 4 (100%), 8 s elapsed\n")


def test_quick_work_and_a_pipe_show_nothing() -> None:
    quick = _Terminal()
    show = TerminalProgress(quick, after_s=5)
    show(Progress(STAGE_PARTITIONS, 1, 4, 0.5))
    show(Progress(STAGE_DONE, 4, 4, 0.9))
    assert quick.getvalue() == ""
    piped = io.StringIO()
    show = TerminalProgress(piped, after_s=0)
    assert not show.enabled
    show(Progress(STAGE_PARTITIONS, 1, 4, 30.0))
    assert piped.getvalue() == ""


_BAR_SETTINGS = """
import sys, duckdb
from retryscope.analytics import connect
from retryscope.analytics.model._partition import new_connection
def on(con):
    return con.execute("SELECT current_setting('enable_progress_bar')").fetchone()[0]
con, _ = connect(sys.argv[1])
print(on(duckdb.connect(":memory:")), on(con), on(con.con.cursor()), on(new_connection()))
"""


def test_no_connection_prints_duckdbs_progress_bar(tmp_path: Path) -> None:
    # DuckDB's bar goes to stdout for queries over two seconds, even into a pipe (a
    # process's stdout, which pytest's capture is not): it would land inside
    # `retryscope report --format json`.
    data = _traffic(tmp_path / "spans", 3, 4, hours=1)
    out = subprocess.run(
        [sys.executable, "-c", _BAR_SETTINGS, str(data)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["True", "False", "False", "False"]


def test_the_commands_report_progress_to_stderr(tmp_path: Path) -> None:
    root = _traffic(tmp_path / "data", seed=5, per_hour=3, hours=1)
    with _opened(str(root)) as con:
        show = con.progress
        assert isinstance(show, TerminalProgress)
        assert show.enabled == sys.stderr.isatty()


def test_a_long_build_ends_with_the_hint_a_quicker_one_without() -> None:
    hint = "tip: keep the model"
    outputs = []
    for elapsed in (HINT_AFTER_S, HINT_AFTER_S - 0.01):
        out = _Terminal()
        show = TerminalProgress(out, after_s=0, hint=hint)
        show(Progress(STAGE_PARTITIONS, 1, 4, 2.0))
        show(Progress(STAGE_DONE, 4, 4, elapsed))
        outputs.append(out.getvalue())
    long_build, quicker = outputs
    assert long_build.endswith(f"(100%), 10 s elapsed\n{hint}\n")
    assert hint not in quicker
    assert quicker.endswith("(100%), 10 s elapsed\n")
    piped = io.StringIO()
    show = TerminalProgress(piped, after_s=0, hint=hint)
    show(Progress(STAGE_PARTITIONS, 1, 4, 2.0))
    show(Progress(STAGE_DONE, 4, 4, 60.0))
    assert piped.getvalue() == ""


@pytest.mark.parametrize("cached", [False, True])
def test_the_commands_hint_at_a_model_cache_only_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool
) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    root = _traffic(tmp_path / "data", seed=5, per_hour=3, hours=1)
    engine = Engine(model_cache=str(tmp_path / "cache")) if cached else Engine()
    with _opened(str(root), engine) as con:
        show = con.progress
        assert show is not None
        show(Progress(STAGE_PARTITIONS, 0, 1, 2.0))
        show(Progress(STAGE_DONE, 1, 1, HINT_AFTER_S))
    assert (CACHE_HINT in terminal.getvalue()) is not cached
