"""Without a model cache, a local data set whose model would exceed what the in-memory
store keeps uncompressed is built into a temporary model directory: the same model and
report as in memory, under the connection's temporary directory, removed when the
connection goes, when it builds another model, and when the process exits; a model that
fits, and an object-store data set, stay in memory."""

from __future__ import annotations

import gc
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from retryscope.analytics import build_report, connect
from retryscope.analytics._dataset import new_connection
from retryscope.analytics.model import _build
from retryscope.analytics.model import _temporary as temporary
from retryscope.analytics.model._store import UNCOMPRESSED_BYTES_PER_SPAN_ROW
from retryscope.analytics.model._temporary import PREFIX
from tests.model_support import model_differences, model_rows
from tests.test_analytics_incremental import _traffic


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _traffic(tmp_path_factory.mktemp("temporary") / "data", seed=11, per_hour=20, hours=2)


def _span_rows(con: duckdb.DuckDBPyConnection) -> int:
    ((rows,),) = con.execute("SELECT sum(rows) FROM _retryscope_files").fetchall()
    return int(rows)


def _with_budget(
    monkeypatch: pytest.MonkeyPatch, data: Path, spill: Path, spare: int
) -> duckdb.DuckDBPyConnection:
    """A connection to ``data`` whose uncompressed budget is what its model takes plus
    ``spare`` bytes (negative: short of it), its model built."""
    con, _ = connect(data, con=new_connection(temp_directory=spill))
    budget = _span_rows(con) * UNCOMPRESSED_BYTES_PER_SPAN_ROW + spare
    monkeypatch.setattr(_build, "_uncompressed_budget", lambda con: budget)
    con.build()
    return con


def _temporaries(spill: Path) -> list[Path]:
    return sorted(spill.glob(f"{PREFIX}*")) if spill.is_dir() else []


def test_a_model_that_fits_stays_in_memory_one_byte_more_goes_to_a_directory(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spill = tmp_path / "spill"
    fits = _with_budget(monkeypatch, data, spill, 0)
    assert list(fits.paths) == []
    assert _temporaries(spill) == []

    beyond = _with_budget(monkeypatch, data, spill, -1)
    (directory,) = _temporaries(spill)
    paths = list(beyond.paths)
    assert paths
    assert all(Path(p).is_relative_to(directory) for p in paths)
    assert model_differences(fits, beyond) == {}
    assert model_rows(beyond)["all_attempt_facts"] > 0
    assert json.dumps(build_report(beyond), sort_keys=True, default=str) == json.dumps(
        build_report(fits), sort_keys=True, default=str
    )
    assert oct(directory.stat().st_mode & 0o777) == oct(0o700)  # the process's own


def test_the_directory_goes_with_the_connections_next_model(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spill = tmp_path / "spill"
    con = _with_budget(monkeypatch, data, spill, -1)
    (first,) = _temporaries(spill)
    con, _ = connect(data, con=con.con)  # the same connection opens the data set again
    con.build()
    (second,) = _temporaries(spill)
    assert second != first
    assert not first.exists()
    assert model_rows(con)["all_attempt_facts"] > 0  # read from the second directory
    monkeypatch.setattr(_build, "_uncompressed_budget", lambda con: 2**62)
    con, _ = connect(data, con=con.con)  # and again, its model now in memory
    con.build()
    assert _temporaries(spill) == []
    assert list(con.paths) == []


def test_the_directory_goes_with_its_connection(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spill = tmp_path / "spill"
    con = _with_budget(monkeypatch, data, spill, -1)
    assert len(_temporaries(spill)) == 1
    con.close()
    del con
    gc.collect()
    assert _temporaries(spill) == []


_BUILT = """
import os, sys
from retryscope.analytics import connect
from retryscope.analytics._dataset import new_connection
from retryscope.analytics.model import _build
_build._uncompressed_budget = lambda con: 1
con, _ = connect(sys.argv[1], con=new_connection(temp_directory=sys.argv[2]))
con.build()
"""
"""A process that builds a data set's model into a temporary directory (then runs more)."""


def _run(script: str, data: Path, spill: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", _BUILT + script, str(data), str(spill)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return out.stdout


def test_the_process_leaves_no_directory_behind(data: Path, tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    # it exits without closing the connection
    assert int(_run("print(len(list(con.paths)))", data, spill)) > 0  # built in a directory
    assert _temporaries(spill) == []


_FORK = """
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a normal exit: the child runs the finalizers it inherited
os.waitpid(pid, 0)
print(all(os.path.exists(p) for p in list(con.paths)))
"""


def test_a_forked_child_leaves_its_parents_directory(data: Path, tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    assert _run(_FORK, data, spill).split() == ["True"]
    assert _temporaries(spill) == []  # the parent removed it at its own exit


def test_an_object_store_data_set_is_never_built_into_a_directory() -> None:
    con = duckdb.connect()
    assert not _build._exceeds_memory_budget(con, "s3://bucket/spans")
    assert not _build._exceeds_memory_budget(con, "")


def test_a_directory_that_cannot_be_made_or_filled_leaves_the_model_in_memory(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    spill = tmp_path / "spill"
    reference = json.dumps(
        build_report(_with_budget(monkeypatch, data, spill, 0)), sort_keys=True, default=str
    )
    write = _build._write_across

    def disk_full(*args: Any) -> int:
        write(*args)
        raise duckdb.IOException("could not write block: No space left on device")

    def no_directory(*args: Any, **kwargs: Any) -> str:
        raise OSError(28, "No space left on device")

    for fault, expected in (
        (lambda: monkeypatch.setattr(_build, "_write_across", disk_full), "not written"),
        (lambda: monkeypatch.setattr(temporary.tempfile, "mkdtemp", no_directory), "not created"),
    ):
        fault()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="retryscope.analytics.model._build"):
            con = _with_budget(monkeypatch, data, spill, -1)
            assert json.dumps(build_report(con), sort_keys=True, default=str) == reference
        assert "temporary model directory" in caplog.text
        assert expected in caplog.text
        assert list(con.paths) == []  # in memory
        assert _temporaries(spill) == []  # nothing left of the attempt
