"""A file whose column types differ from the span schema: cast when no value can be lost
(int64 ordinals within int32, microsecond timestamps, float32 durations), otherwise named
and skipped (ordinals or start times stored as text) while the report answers from the
other files. Before, one such file ended `report` with a BinderException."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from retryscope.analytics import build_report, connect, findings
from retryscope.cli import main
from tests.recorder import Recorder
from tests.test_analytics_randomized import _generate


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rec = Recorder(tmp_path / "data")
    _generate(rec, 80, seed=13)
    rec.connect()
    return rec.directory


def _retyped(table: pa.Table, column: str, values: pa.Array | pa.ChunkedArray) -> pa.Table:
    i = table.schema.get_field_index(column)
    return table.set_column(i, pa.field(column, values.type), values)


def _report(root: Path) -> str:
    return json.dumps(build_report(connect(root)[0]), sort_keys=True, default=str)


def _split(data: Path) -> tuple[pa.Table, Path]:
    """The data set's only file, split in two: the first half stays, the second half is
    returned to be written back in another form."""
    (only,) = sorted(data.rglob("*.parquet"))
    table = pq.read_table(only, partitioning=None)
    ids = table.column("logical_request_id")
    second = pc.greater_equal(ids, pc.min_max(ids)["max"].as_py()[:1])  # by id: whole requests
    pq.write_table(table.filter(pc.invert(second)), only)
    return table.filter(second), only.parent


@pytest.mark.parametrize(
    ("column", "to", "cast"),
    [
        ("attempt_ordinal", pa.int64(), True),
        ("start_time", pa.timestamp("us"), True),
        ("duration_ms", pa.float32(), True),
        ("layer", pa.dictionary(pa.int32(), pa.string()), False),  # a string all the same
    ],
)
def test_a_lossless_type_is_cast(data: Path, column: str, to: pa.DataType, cast: bool) -> None:
    reference = _report(data)
    rest, folder = _split(data)
    values = rest.column(column)
    if column == "duration_ms":  # float32 holds these durations only as float32 does
        rest = _retyped(rest, column, values.cast(pa.float32()).cast(pa.float64()))
        reference = None
    pq.write_table(_retyped(rest, column, values.cast(to, safe=False)), folder / "other.parquet")
    con, dataset = connect(data)
    assert dataset.skipped == ()
    assert (column in dataset.casts) is cast
    report = json.dumps(build_report(con), sort_keys=True, default=str)
    if reference is not None:
        assert report == reference
    kind = con.execute(f"SELECT typeof({column}) FROM spans LIMIT 1").fetchall()[0][0]
    assert (
        kind
        == {
            "attempt_ordinal": "INTEGER",
            "start_time": "TIMESTAMP_NS",
            "duration_ms": "DOUBLE",
            "layer": "VARCHAR",
        }[column]
    )


@pytest.mark.parametrize(
    ("column", "to"),
    [("attempt_ordinal", pa.string()), ("start_time", pa.string()), ("is_fallback", pa.int8())],
)
def test_a_lossy_type_is_named_and_skipped(
    data: Path, column: str, to: pa.DataType, capsys: pytest.CaptureFixture[str]
) -> None:
    rest, folder = _split(data)
    kept = _report(data)  # the first half alone
    bad = folder / "drifted.parquet"
    pq.write_table(_retyped(rest, column, rest.column(column).cast(to)), bad)
    con, _ = connect(data)
    (skipped,) = con.skipped_files()
    assert skipped.path == str(bad)
    assert f"column {column!r} is " in skipped.reason
    assert "cannot be read as" in skipped.reason
    assert json.dumps(build_report(con), sort_keys=True, default=str) == kept
    assert findings(con).num_rows >= 0
    assert main(["report", str(data), "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert f"warning: skipped {bad}" in captured.err
    assert json.loads(captured.out)["logical_requests"] > 0


def test_an_int64_beyond_int32_is_not_cast(data: Path) -> None:
    rest, folder = _split(data)
    ordinals = pc.if_else(
        pc.is_valid(rest.column("attempt_ordinal")),
        pa.scalar(2**40, pa.int64()),
        pa.scalar(None, pa.int64()),
    )
    pq.write_table(_retyped(rest, "attempt_ordinal", ordinals), folder / "huge.parquet")
    con, _ = connect(data)
    (skipped,) = con.skipped_files()
    assert "attempt_ordinal" in skipped.reason
