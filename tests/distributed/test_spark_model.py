"""The audit model built on a real two-executor Spark cluster (``conftest.py``), DuckDB in
each task, holds exactly the rows of the single-node model, table by table, and the report
built over it is byte-identical.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from retryscope.analytics import connect, findings
from retryscope.analytics.distributed import _spark as spark_module
from retryscope.analytics.distributed import (
    attach_model,
    build_model_spark,
    model_columns,
    read_manifest,
)
from retryscope.analytics.distributed._layout import Location, part_name
from retryscope.analytics.model import ACROSS_REQUESTS_TABLES, MODEL_TABLES, PER_REQUEST_TABLES
from retryscope.analytics.replay import WhatIf, whatif
from retryscope.cli import main
from tests.distributed.conftest import JAVA, MASTER, NO_JAVA, SEED
from tests.model_support import model_differences, model_rows

pytestmark = [
    pytest.mark.skipif(not JAVA, reason=NO_JAVA),
    # the first test also pays the JVM start, the data set and both builds
    pytest.mark.timeout(900),
]


def _attached(data: Path, model: Path) -> duckdb.DuckDBPyConnection:
    con, _ = connect(data)
    attach_model(con, str(model))
    return con


@pytest.fixture(scope="module")
def built(spark: object, data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = tmp_path_factory.mktemp("model") / "spans.model"
    build_model_spark(spark, str(data), model=str(model), partitions=4)  # type: ignore[arg-type]
    return model


def test_spark_model_equals_the_single_node_model(
    data: Path, built: Path, single: duckdb.DuckDBPyConnection
) -> None:
    distributed = _attached(data, built)
    assert model_differences(distributed, single) == {}, f"seed {SEED}"
    rows = model_rows(single)
    assert rows["all_attempt_facts"] > 1000, f"seed {SEED}"
    assert rows["all_request_facts"] == 900, f"seed {SEED}"
    assert rows["duplicate_spans"] > 0, f"seed {SEED}"  # the copies were there to count once


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_the_report_reads_it_byte_identically(
    data: Path, built: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = ("report", str(data), "--format", "json")
    single = _cli(capsys, *command)
    assert _cli(capsys, *command, "--model", str(built)) == single, f"seed {SEED}"
    assert json.loads(single)["physical_attempts"]


def test_findings_and_whatif_read_it_as_the_single_node_model(
    data: Path, built: Path, single: duckdb.DuckDBPyConnection
) -> None:
    distributed = _attached(data, built)
    rows = [sorted(map(str, findings(con).to_pylist())) for con in (distributed, single)]
    assert rows[0] == rows[1], f"seed {SEED}"
    assert rows[0]
    policy = WhatIf(max_attempts=2, no_fallback=True)
    assert whatif(distributed, policy).equals(whatif(single, policy)), f"seed {SEED}"


def test_each_task_wrote_fixed_parts_and_the_manifest_names_them(
    built: Path, single: duckdb.DuckDBPyConnection
) -> None:
    manifest = read_manifest(Location(str(built)))
    assert manifest.partitions == 4
    for table in PER_REQUEST_TABLES:
        assert manifest.tables[table] == [
            f"{manifest.build}/{table}/{part_name(i)}" for i in range(4)
        ]
    for table in ACROSS_REQUESTS_TABLES:
        assert manifest.tables[table] == [f"{manifest.build}/{table}/{part_name(0)}"]
    written = {str(p.relative_to(built)) for p in built.rglob("*") if p.is_file()}
    listed = {f for table in MODEL_TABLES for f in manifest.tables[table]}
    assert written == listed | {"manifest.json"}  # no temporary file is left
    assert "spans-corrupt.parquet" not in " ".join(manifest.inputs or {})
    ((spans,),) = single.execute("SELECT count(*) FROM spans").fetchall()
    assert manifest.span_rows == spans


def test_only_the_columns_the_scripts_read_cross_spark() -> None:
    columns = model_columns()
    assert {"logical_request_id", "span_role", "start_time", "attempt_ordinal"} <= set(columns)
    assert "resource_attributes" not in columns
    assert "links" not in columns


def test_a_rerun_after_a_failed_build_leaves_no_mixed_model(
    spark: object,
    data: Path,
    built: Path,
    single: duckdb.DuckDBPyConnection,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = tmp_path / "spans.model"
    shutil.copytree(built, model)
    first = read_manifest(Location(str(model))).build
    # the failing build: a file where its tasks must create a table's folder
    monkeypatch.setattr(spark_module, "new_build_id", lambda: "build-failing")
    (model / "build-failing").mkdir()
    (model / "build-failing" / "all_request_facts").write_text("in the way")
    with pytest.raises(Exception, match="all_request_facts"):
        build_model_spark(spark, str(data), model=str(model), partitions=3)  # type: ignore[arg-type]
    assert read_manifest(Location(str(model))).build == first  # the previous model stands
    monkeypatch.undo()
    again = build_model_spark(spark, str(data), model=str(model), partitions=3)  # type: ignore[arg-type]
    manifest = read_manifest(Location(str(model)))
    assert manifest.build == again.manifest.build != first
    assert manifest.partitions == 3
    # the failed build's folder is gone; the previous one stays for its readers
    assert sorted(p.name for p in model.glob("build-*")) == sorted([first, manifest.build])
    assert model_differences(_attached(data, model), single) == {}, f"seed {SEED}"


def test_a_model_of_another_state_of_the_data_set_is_refused(
    data: Path, built: Path, tmp_path: Path
) -> None:
    grown = tmp_path / "spans"
    shutil.copytree(data, grown)
    model = tmp_path / "spans.model"
    shutil.copytree(built, model)
    con, _ = connect(grown)
    attach_model(con, str(model))  # the same files: accepted
    extra = next(grown.rglob("again-*.parquet"))
    shutil.copy2(extra, extra.with_name("later.parquet"))
    con, _ = connect(grown)
    with pytest.raises(ValueError, match=r"changed since it was built: 1 new files"):
        attach_model(con, str(model))
    with pytest.raises(ValueError, match="no model at"):
        attach_model(con, str(tmp_path / "nowhere"))


def test_the_spark_submit_entry_point_builds_the_model(
    data: Path, single: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    """``spark-submit`` runs the module's file with the master of its own --master."""
    from retryscope.analytics.distributed import spark_submit

    model = tmp_path / "submitted.model"
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, **spark_module.SPARK_ENV)
    flags = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    done = subprocess.run(
        [
            str(bin_dir / "spark-submit"),
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.driver.extraJavaOptions={flags}",
            spark_submit.__file__,
            str(data),
            "--model",
            str(model),
            "--partitions",
            "2",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "on local[2], 2 tasks" in done.stdout
    assert model_differences(_attached(data, model), single) == {}, f"seed {SEED}"


def test_the_model_command_builds_on_spark(
    spark: object, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Last in the module: the command stops the Spark session when done."""
    model = tmp_path / "cli.model"
    out = _cli(
        capsys,
        "model",
        str(data),
        "--engine",
        "spark",
        "--master",
        MASTER,
        "--partitions",
        "2",
        "--model",
        str(model),
    )
    assert out.startswith(f"built: {model} (spark ")
    assert f"--model {model}" in out
    assert read_manifest(Location(str(model))).partitions == 2
