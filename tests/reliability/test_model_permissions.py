"""The model cache, the UI's figures kept in it and the temporary files of an analysis
derive from the data set, so they get its modes: under umask 022, data kept 0700/0600
gives a cache of 0700 folders and 0600 files (before: 0755/0644, readable by every local
user)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from retryscope.analytics import build_report, connect
from retryscope.analytics._dataset import new_connection
from retryscope.analytics._figures import FOLDER
from retryscope.cli import main
from tests.recorder import Recorder
from tests.test_analytics_randomized import _generate


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _modes(root: Path) -> set[tuple[str, int]]:
    out = set()
    for path in [root, *root.rglob("*")]:
        kind = "dir" if path.is_dir() else "file"
        out.add((kind, stat.S_IMODE(path.stat().st_mode)))
    return out


def _private_data(root: Path) -> Path:
    rec = Recorder(root)  # the exporter writes 0700 folders and 0600 files
    _generate(rec, 30, seed=2)
    rec.connect()
    assert _modes(root) == {("dir", 0o700), ("file", 0o600)}
    return root


def test_the_model_cache_has_the_data_sets_modes(umask_022: None, tmp_path: Path) -> None:
    data = _private_data(tmp_path / "data")
    cache = tmp_path / "cache"
    build_report(connect(data, model_cache=cache)[0])
    assert _modes(cache) == {("dir", 0o700), ("file", 0o600)}
    assert any(cache.rglob("*.parquet"))


def test_a_group_readable_data_set_gives_a_group_readable_cache(
    umask_022: None, tmp_path: Path
) -> None:
    data = _private_data(tmp_path / "data")
    for path in [data, *data.rglob("*")]:
        os.chmod(path, 0o750 if path.is_dir() else 0o640)
    cache = tmp_path / "cache"
    build_report(connect(data, model_cache=cache)[0])
    assert _modes(cache) == {("dir", 0o750), ("file", 0o640)}


@pytest.mark.parametrize(("directory", "file"), [(0o700, 0o600), (0o750, 0o640)])
def test_the_uis_figures_have_the_model_caches_modes(
    umask_022: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], directory: int, file: int
) -> None:
    """``retryscope report`` with a model cache keeps the UI's first page's figures there:
    their folders and files get the modes the model's do."""
    data = _private_data(tmp_path / "data")
    for path in [data, *data.rglob("*")]:
        os.chmod(path, directory if path.is_dir() else file)
    cache = tmp_path / "cache"
    assert main(["report", str(data), "--model-cache", str(cache), "--format", "json"]) == 0
    capsys.readouterr()
    assert any((cache / FOLDER).rglob("*.arrow"))
    assert _modes(cache / FOLDER) == {("dir", directory), ("file", file)}
    assert _modes(cache) == {("dir", directory), ("file", file)}


def test_the_spill_directory_has_the_data_sets_modes(umask_022: None, tmp_path: Path) -> None:
    data = _private_data(tmp_path / "data")
    spill = tmp_path / "spill" / "duckdb"
    con, _ = connect(data, con=new_connection(memory_limit="64MB", temp_directory=spill))
    build_report(con)
    assert stat.S_IMODE(spill.stat().st_mode) == 0o700
    assert stat.S_IMODE(spill.parent.stat().st_mode) == 0o700
