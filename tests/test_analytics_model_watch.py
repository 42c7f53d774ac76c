"""The model kept current as data arrives: ``retryscope model PATH --watch`` beside a
writer process (late and rewritten files, requests across hours, corrupt new files, two
watchers on one model), ``retryscope ingest --model-cache`` updating the model of what it
wrote, and a build waiting for another process's showing that build's progress."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from retryscope.analytics import AuditModel, build_report, connect
from retryscope.analytics.model import _cache, model_directory
from retryscope.analytics.model._cache import DirectoryStore
from retryscope.analytics.model._progress import STAGE_PARTITIONS, Progress
from retryscope.analytics.model._store import Modes
from retryscope.analytics.model._watch import closed, snapshot
from retryscope.cli import main
from tests.export_support import make_spans, otlp_json_line
from tests.model_support import hold_model_lock, model_differences
from tests.recorder import MS, Recorder
from tests.test_analytics_incremental import FIRST_HOUR, HOUR, _partition_dirs
from tests.test_analytics_randomized import _generate

REPO = Path(__file__).resolve().parent.parent
INTERVAL = "0.2"
_CLI = (sys.executable, "-m", "retryscope.cli")


def _watcher(root: Path, cache: Path, settle: str = "0") -> subprocess.Popen[str]:
    """``retryscope model ROOT --watch`` (every closed file built at once: ``settle`` 0)."""
    watch = ["--watch", "--interval", INTERVAL, "--settle", settle]
    return subprocess.Popen(
        [*_CLI, "model", str(root), *watch, "--model-cache", str(cache)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    return out, err


def _settled(directory: Path, quiet_s: float = 2.0, timeout_s: float = 90.0) -> None:
    """Wait until the model directory's manifest has not changed for ``quiet_s``."""
    manifest = directory / "manifest.json"
    deadline = time.monotonic() + timeout_s
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = manifest.stat().st_mtime_ns if manifest.exists() else None
        if now != last:
            last, since = now, time.monotonic()
        elif now is not None and time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.1)
    raise AssertionError("the watcher did not settle")


def _built(con: AuditModel) -> int:
    """Time partitions the model build on ``con`` built (none: it was current)."""
    return int(con.build().stats["built"])


def _report(con: object) -> str:
    return json.dumps(build_report(con), sort_keys=True, default=str)  # type: ignore[arg-type]


def test_a_watcher_keeps_the_model_current_while_a_writer_writes(tmp_path: Path) -> None:
    """Two watchers start before the data set exists; the second says the first keeps it
    and waits. A writer process closes files hour after hour (requests across hours),
    then a late file in the first hour, a file rewritten in place and two corrupt files.
    Once the writer is done the model is current (a report builds nothing) and holds the
    rows of a cold build, table by table; the corrupt files are named and the rest of
    their hour is in the model. When the first watcher stops the second takes over."""
    root, cache = tmp_path / "data", tmp_path / "cache"
    first = _watcher(root, cache)
    directory = model_directory(str(root), cache)
    for _ in range(100):  # the first holds the watcher lock before the second starts
        if (directory / "watch.lock").exists():
            break
        time.sleep(0.1)
    second = _watcher(root, cache)
    writer = subprocess.run(
        [sys.executable, "-m", "tests.watch_writer", str(root), "3"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert writer.stdout.strip() == "done"
    time.sleep(3 * float(INTERVAL))
    _settled(directory)
    out, err = _stop(first)
    assert out.count("built: ") + out.count("updated: ") >= 2  # as the files were closed
    for name in ("spans-torn.parquet", "pages-corrupt.parquet"):
        assert f"warning: skipped {root}" in err
        assert name in err
    cached, _ = connect(root, model_cache=cache)
    assert _built(cached) == 0  # the watcher had built every partition
    cold, _ = connect(root)
    assert model_differences(cached, cold) == {}
    assert _report(cached) == _report(cold)
    assert sorted(Path(s.path).name for s in cold.skipped_files()) == [
        "pages-corrupt.parquet",
        "spans-torn.parquet",
    ]
    assert cold.execute("SELECT count(*) FROM all_attempt_facts").fetchall()[0][0] > 0
    time.sleep(5 * float(INTERVAL))  # the second takes the lock over and looks
    out, err = _stop(second)
    assert f"another watcher (pid {first.pid}) keeps {directory} current" in err
    assert out.startswith("up to date: ")


def _grain(directory: Path) -> list[str]:
    """The time partitions the model in ``directory`` holds."""
    manifest = directory / "manifest.json"
    if not manifest.exists():
        return []
    return [key for run in json.loads(manifest.read_text())["grain"] for key in run]


def _wait_for(check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_an_hour_is_built_once_it_is_closed(tmp_path: Path) -> None:
    """The hour being written is not built at every file it gets: only once the writer has
    moved on to the next hour, or once it got no file for ``--settle`` seconds; an older
    hour's late file is built at once."""
    source = tmp_path / "source"
    rec = Recorder(source)
    for hour in range(2):
        _generate(rec, 4, seed=hour, starts=[FIRST_HOUR + hour * HOUR + k * MS for k in range(4)])
    rec.provider.shutdown()
    first, second = _partition_dirs(source)
    root, cache = tmp_path / "data", tmp_path / "cache"
    directory = model_directory(str(root), cache)
    watcher = _watcher(root, cache, settle="3")
    try:
        shutil.copytree(first, root / first.relative_to(source))  # written now: open
        time.sleep(10 * float(INTERVAL))
        assert _grain(directory) == []
        shutil.copytree(second, root / second.relative_to(source))  # the writer moved on
        _wait_for(lambda: _grain(directory) == [str(first.relative_to(source))])
        _wait_for(lambda: len(_grain(directory)) == 2)  # the last hour, quiet for 3 s
    finally:
        _stop(watcher)


def test_closed_partitions_are_those_followed_or_quiet() -> None:
    """At the boundary: the newest folder is closed when its newest file is exactly
    ``settle`` old, and open a nanosecond later; a folder followed by another is closed
    however new its files."""
    s = 10**9
    files = frozenset(
        {("/d/hour=14/a.parquet", 1, 50 * s), ("/d/hour=15/a.parquet", 1, 90 * s)}
        | {("/d/hour=15/b.parquet", 1, 80 * s)}
    )
    assert closed(files, 10.0, 100.0) == files
    assert closed(files, 10.0, 100.0 - 1e-9 * 2) == {("/d/hour=14/a.parquet", 1, 50 * s)}
    assert closed(files, 0.0, 90.0) == files
    assert closed(frozenset(), 0.0, 0.0) == frozenset()


def test_the_watch_looks_at_closed_files_only(tmp_path: Path) -> None:
    """A file being written (hidden, as the exporter writes it) is not part of the data
    set until it is renamed into place; a file's rewrite changes what the watcher sees."""
    part = tmp_path / "date=2026-09-21" / "hour=14"
    part.mkdir(parents=True)
    assert snapshot(str(tmp_path / "missing")) == frozenset()
    (part / ".spans-1.parquet.inprogress").write_bytes(b"x")
    (part / "_policies.parquet").write_bytes(b"x")
    assert snapshot(str(tmp_path)) == frozenset()
    os.replace(part / ".spans-1.parquet.inprogress", part / "spans-1.parquet")
    before = snapshot(str(tmp_path))
    assert [Path(name).name for name, _, _ in before] == ["spans-1.parquet"]
    (part / "spans-1.parquet").write_bytes(b"xy")
    assert snapshot(str(tmp_path)) != before


def test_ingest_updates_the_model_of_what_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RETRYSCOPE_MODEL_CACHE", raising=False)
    sources, out, cache = tmp_path / "collector", tmp_path / "data", tmp_path / "cache"
    sources.mkdir()
    (sources / "traces-1.json").write_text(otlp_json_line(make_spans(3)) + "\n")
    assert main(["ingest", str(sources), "--out", str(out), "--model-cache", str(cache)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("sources: 1,")
    assert printed[1].startswith(f"built: {model_directory(str(out), cache)} (")
    (sources / "traces-2.json").write_text(otlp_json_line(make_spans(2)) + "\n")
    assert main(["ingest", str(sources), "--out", str(out), "--model-cache", str(cache)]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("built: ")  # its one unit again
    cached, _ = connect(out, model_cache=cache)
    assert _built(cached) == 0
    cold, _ = connect(out)
    assert model_differences(cached, cold) == {}
    assert cached.execute("SELECT count(*) FROM request_base").fetchall()[0][0] == 5
    assert main(["ingest", str(sources), "--out", str(out)]) == 0  # no cache: no model
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_watch_refuses_what_it_cannot_keep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RETRYSCOPE_MODEL_CACHE", raising=False)
    assert main(["model", str(tmp_path), "--watch"]) == 2
    assert "give --model-cache DIR" in capsys.readouterr().err
    args = ["model", str(tmp_path), "--watch", "--model-cache", str(tmp_path / "c")]
    assert main([*args, "--interval", "0"]) == 2
    assert "--interval 0.0 is not a positive number" in capsys.readouterr().err
    assert main([*args, "--engine", "spark"]) == 2
    assert "not with --engine spark" in capsys.readouterr().err


def test_a_build_waiting_for_another_process_shows_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another process holds the model's lock (a watcher building), a build waits,
    relaying the progress that process shares; then it reads the model it built."""
    sources = tmp_path / "collector"
    sources.mkdir()
    (sources / "t.json").write_text(otlp_json_line(make_spans(2)) + "\n")
    out, cache = tmp_path / "data", tmp_path / "cache"
    monkeypatch.delenv("RETRYSCOPE_MODEL_CACHE", raising=False)
    assert main(["ingest", str(sources), "--out", str(out)]) == 0
    directory = model_directory(str(out), cache)
    holder = hold_model_lock(directory, 1.5)
    monkeypatch.setattr(_cache, "WAIT_POLL_S", 0.05)
    seen: list[Progress] = []
    con, _ = connect(out, model_cache=cache, progress=seen.append)
    assert _built(con) == 1
    assert holder.wait(10) == 0
    relayed = [p for p in seen if p.detail.startswith("another process")]
    assert relayed
    assert (relayed[0].stage, relayed[0].done, relayed[0].total) == (STAGE_PARTITIONS, 2, 5)
    assert relayed[0].detail == "another process: date=2026-09-21/hour=15"
    assert seen[-1].detail == ""  # then its own build, to the end
    # the build shares its own progress for the next waiter (ending "model ready")
    assert json.loads(DirectoryStore(directory, Modes()).progress_file.read_text())["stage"] == (
        "model ready"
    )
