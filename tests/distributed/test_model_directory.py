"""The engine-neutral half of a distributed build, without an engine: the spans split by a
hash of ``logical_request_id`` and each part handed to :func:`run_task` (what an engine's
task does), the driver's :func:`commit`, and a model directory read back. No JVM: these
are the rules at their boundaries (a missing or short part, a retried attempt, a stale or
foreign model, int64 nanoseconds cast back)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retryscope.analytics import AuditModel, connect
from retryscope.analytics.distributed import (
    BuildError,
    TaskResult,
    attach_model,
    commit,
    model_columns,
    read_manifest,
    run_task,
    span_table,
)
from retryscope.analytics.distributed._layout import Location, data_set_inputs, part_name
from retryscope.analytics.distributed._spark import _jvm_size_bytes
from retryscope.analytics.distributed._task import read_span_file, wire_schema
from retryscope.analytics.model import PER_REQUEST_TABLES
from retryscope.cli import main
from retryscope.schema import SPAN_SCHEMA
from tests.model_support import model_differences
from tests.recorder import Recorder
from tests.test_analytics_randomized import _generate

K = 3


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("spans")
    rec = Recorder(root)
    _generate(rec, 120, seed=11)
    rec.connect()
    return root


def _partitions(data: Path) -> list[pa.Table]:
    """The data set's spans (the columns the model reads) in ``K`` partitions by a hash of
    the request id, as an engine's shuffle hands them to its tasks."""
    con, _ = connect(data)
    columns = ", ".join(model_columns())
    return [
        con.sql(
            f"SELECT {columns} FROM spans WHERE coalesce(hash(logical_request_id), 0) % {K} = {i}"
        ).to_arrow_table()
        for i in range(K)
    ]


def _build(data: Path, model: Path, build: str = "build-test") -> list[TaskResult]:
    location = Location(str(model))
    location.make_dir(build)
    return [
        run_task(part, i, model=str(model), build=build, tag="0")
        for i, part in enumerate(_partitions(data))
    ]


@pytest.fixture(scope="module")
def tasks(data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[TaskResult]]:
    """The parts every task wrote (not committed), built once: tests work on copies."""
    model = tmp_path_factory.mktemp("tasks") / "model"
    return model, _build(data, model)


def _copy(tasks: tuple[Path, list[TaskResult]], tmp_path: Path) -> tuple[Path, list[TaskResult]]:
    model = tmp_path / "model"
    shutil.copytree(tasks[0], model)
    return model, list(tasks[1])


def _commit(data: Path, model: Path, results: list[TaskResult], build: str = "build-test") -> None:
    dataset = connect(data)[1]
    commit(
        Location(str(model)),
        build,
        results,
        partitions=K,
        engine="test",
        root=str(data),
        inputs=data_set_inputs(dataset),
    )


def test_tasks_and_commit_without_an_engine_give_the_single_node_model(
    data: Path, tasks: tuple[Path, list[TaskResult]], tmp_path: Path
) -> None:
    model, results = _copy(tasks, tmp_path)
    _commit(data, model, results)
    single, _ = connect(data)
    distributed, _ = connect(data)
    attach_model(distributed, str(model))
    distributed.build()  # attached: nothing is built
    assert model_differences(distributed, single) == {}
    assert all("/model/build-test/" in p for p in _model_paths(distributed))


def _model_paths(con: AuditModel) -> list[str]:
    return list(con.paths)


def test_a_missing_part_or_a_short_one_commits_nothing(
    data: Path, tasks: tuple[Path, list[TaskResult]], tmp_path: Path
) -> None:
    model, results = _copy(tasks, tmp_path)
    part = model / "build-test" / "all_attempt_facts" / part_name(1)
    kept = part.read_bytes()
    part.unlink()
    with pytest.raises(BuildError, match=r"all_attempt_facts/part-00001\.parquet does not read"):
        _commit(data, model, results)
    assert not (model / "manifest.json").exists()
    part.write_bytes(kept)
    short = [
        TaskResult(
            r.partition, r.span_rows, {**r.table_rows, "all_request_facts": 10**6}, r.seconds
        )
        if r.partition == 2
        else r
        for r in results
    ]
    with pytest.raises(BuildError, match=r"all_request_facts/part-00002\.parquet holds \d+ rows"):
        _commit(data, model, short)
    with pytest.raises(BuildError, match=r"one result from each of 3 tasks, got \[0, 1\]"):
        _commit(data, model, results[:2])
    assert not (model / "manifest.json").exists()
    _commit(data, model, results)
    assert read_manifest(Location(str(model))).build == "build-test"


def test_a_retried_attempt_writes_the_same_part_and_leaves_no_temporary_file(
    data: Path, tmp_path: Path
) -> None:
    model = tmp_path / "model"
    part = _partitions(data)[0]
    Location(str(model)).make_dir("b")
    first = run_task(part, 0, model=str(model), build="b", tag="1-7")
    before = {t: pq.read_table(model / "b" / t / part_name(0)) for t in PER_REQUEST_TABLES}
    again = run_task(part, 0, model=str(model), build="b", tag="1-8")
    assert again.table_rows == first.table_rows
    compare = duckdb.connect()
    for table in PER_REQUEST_TABLES:
        assert sorted(p.name for p in (model / "b" / table).iterdir()) == [part_name(0)]
        compare.register("before", before[table])
        compare.register("after", pq.read_table(model / "b" / table / part_name(0)))
        ((n,),) = compare.execute(
            "SELECT (SELECT count(*) FROM (FROM before EXCEPT ALL FROM after))"
            " + (SELECT count(*) FROM (FROM after EXCEPT ALL FROM before))"
        ).fetchall()
        assert n == 0, table
    assert before["all_request_facts"].num_rows > 0


def test_a_model_of_other_sql_is_refused(
    data: Path, tasks: tuple[Path, list[TaskResult]], tmp_path: Path
) -> None:
    model, results = _copy(tasks, tmp_path)
    _commit(data, model, results)
    manifest = json.loads((model / "manifest.json").read_text())
    manifest["model"] = "0" * 32
    (model / "manifest.json").write_text(json.dumps(manifest))
    con, _ = connect(data)
    with pytest.raises(ValueError, match="built by another version of retryscope"):
        attach_model(con, str(model))
    (model / "manifest.json").write_text("{}")
    with pytest.raises(ValueError, match="is not a model manifest"):
        attach_model(con, str(model))


def test_nanoseconds_an_engine_hands_over_as_int64_are_cast_back() -> None:
    columns = ["logical_request_id", "start_time", "events"]
    ns = 1_790_000_000_123_456_789
    spark_like = pa.record_batch(
        {
            "logical_request_id": pa.array(["r"]),
            "start_time": pa.array([ns], pa.int64()),
            "events": pa.array(
                [[{"name": "e", "time": ns + 1, "attributes": [("k", "v")]}]],
                pa.list_(
                    pa.struct(
                        [
                            ("name", pa.string()),
                            ("time", pa.int64()),
                            ("attributes", pa.map_(pa.string(), pa.string())),
                        ]
                    )
                ),
            ),
            "date": pa.array(["2026-09-21"]),  # a Hive directory column: not a span column
        }
    )
    table = span_table([spark_like], columns)
    assert table.schema.names == columns
    for name in columns:
        assert table.schema.field(name).type == SPAN_SCHEMA.field(name).type
    assert table.column("start_time")[0].value == ns
    assert table.column("events")[0].as_py()[0]["time"].value == ns + 1  # type: ignore[union-attr]
    empty = span_table([], columns)
    assert empty.num_rows == 0
    assert empty.schema.names == columns


def test_a_span_file_read_in_a_task_crosses_as_int64_nanoseconds_and_casts_back(
    data: Path, tmp_path: Path
) -> None:
    """What an engine's task reads from an object store (``read_span_file``): the model's
    columns in wire types, a column the file lacks NULL, one stored narrower cast; back
    through ``span_table`` it is what a single-node build reads."""
    source = sorted(data.rglob("*.parquet"))[0]
    original = pq.read_table(source, partitioning=None)
    columns = list(model_columns())
    narrowed = original.drop_columns(["retry_layer"]).set_column(
        original.schema.get_field_index("attempt_ordinal"),
        "attempt_ordinal",
        original.column("attempt_ordinal").cast(pa.int16()),
    )
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(narrowed, foreign)
    wire = read_span_file(str(foreign), columns)
    assert wire.schema == wire_schema(columns)
    assert pa.types.is_int64(wire.schema.field("start_time").type)
    assert wire.column("retry_layer").null_count == wire.num_rows > 0
    back = span_table(wire.to_batches(max_chunksize=7), columns)
    expected = original.select(columns).set_column(
        columns.index("retry_layer"),
        "retry_layer",
        pa.nulls(original.num_rows, pa.string()),
    )
    assert back.equals(expected.cast(back.schema))  # the same values (file fields: NOT NULL)
    bad = tmp_path / "bad.parquet"
    pq.write_table(original.set_column(0, "trace_id", pa.array([[1]] * original.num_rows)), bad)
    with pytest.raises(ValueError, match=r"bad.parquet: column trace_id does not read"):
        read_span_file(str(bad), columns)


@pytest.mark.parametrize(
    ("setting", "size"),
    [("1g", 2**30), ("512m", 2**29), ("2048k", 2**21), ("1024", 2**30), ("1.5G", 3 * 2**29)],
)
def test_spark_memory_settings_in_bytes(setting: str, size: int) -> None:
    assert _jvm_size_bytes(setting) == size


def test_partitions_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["model", "x", "--engine", "spark", "--partitions", "0"])
    assert "0 is not a positive integer" in capsys.readouterr().err


def test_the_ui_reads_an_attached_model_and_names_one_it_refuses(
    data: Path,
    tasks: tuple[Path, list[TaskResult]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``retryscope ui --model DIR`` (``RETRYSCOPE_MODEL``): the pages read the committed
    model and show the figures of the single-node build; a directory that holds no model of
    the data set is named on the page, never replaced by a build of its own."""
    from retryscope._environment import MODEL_ENV
    from tests.dashboards.conftest import metrics, rendered, start_app

    model, results = _copy(tasks, tmp_path)
    _commit(data, model, results)
    # one copy of the data set per app: the UI caches its store per data directory
    built, attached, refused = (tmp_path / name for name in ("built", "attached", "refused"))
    for copy in (built, attached, refused):
        shutil.copytree(data, copy)
    monkeypatch.delenv(MODEL_ENV, raising=False)
    single = metrics(start_app(built, monkeypatch))
    monkeypatch.setenv(MODEL_ENV, str(model))
    shown = start_app(attached, monkeypatch)
    assert not shown.exception
    assert not shown.error
    assert single
    assert metrics(shown) == single
    monkeypatch.setenv(MODEL_ENV, str(tmp_path / "nowhere"))
    page = start_app(refused, monkeypatch)
    errors = [rendered(str(e.value)) for e in page.error]
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"Cannot open {refused}: no model at {tmp_path / 'nowhere'} ")
    assert not metrics(page)
