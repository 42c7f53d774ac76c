"""The drill-down lookup on a data set of many small files and row groups: it picks files by
statistics and Bloom filters, and must return exactly what the whole data set's query
returns, by logical request id, trace id and idempotency digest (one naming several
requests), also when some files have no Bloom filters (written by an older exporter)."""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retryscope.analytics import connect, request_detail
from retryscope.analytics._queries import arrow
from retryscope.analytics._requests import _aliased_requests, _candidate_files
from retryscope.cli import main
from retryscope.instrumentation.export._config import ExportConfig, Partitioning
from retryscope.instrumentation.export._files import FileNamer, write_partitioned
from retryscope.schema import SPAN_SCHEMA
from tests.recorder import MS, T0, Clock, Recorder
from tests.reliability.support import flip_bytes

REQUESTS = 40


def _record(directory: Path) -> None:
    rec = Recorder(directory)
    rng = random.Random(3)
    for i in range(REQUESTS):
        clock = Clock(T0 + i * 41 * MS)
        key = f"key-{i // 2}" if i < 10 else f"key-{i}"  # requests 0-9 share keys in pairs
        with rec.request(clock, tenant="acme", idempotency_key=key) as req:
            for j in range(rng.randint(1, 3)):
                rec.attempt(req, "primary", outcome="success" if j else "rate_limited")
    rec.connect()


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded rows rewritten by the exporter's writer as many sorted files of few
    rows and row groups; every other file is then rewritten without Bloom filters."""
    recorded = tmp_path_factory.mktemp("recorded")
    _record(recorded)
    table = pa.concat_tables(pq.read_table(f) for f in sorted(recorded.rglob("*.parquet")))
    root = tmp_path_factory.mktemp("split")
    config = ExportConfig(
        directory=root, partitioning=Partitioning.NONE, rotate_rows=12, row_group_rows=4
    )
    written = write_partitioned(table, config, FileNamer())
    assert len(written) >= 8
    for path in written[::2]:
        pq.write_table(pq.read_table(path), path, row_group_size=4)  # no Bloom filters
    return root


def _whole(con: duckdb.DuckDBPyConnection, ident: str) -> tuple[pa.Table, pa.Table]:
    return arrow(con, "request_summary", {"id": ident}), arrow(con, "request", {"id": ident})


def test_lookup_equals_the_whole_data_set_query(split: Path) -> None:
    con, dataset = connect(split)
    assert {e.bloom_offset is None for e in dataset.lookup} == {True, False}
    con.scoped()
    requests = con.sql(
        "SELECT logical_request_id, trace_id, idempotency_digest FROM request_base "
        "ORDER BY logical_request_id"
    ).fetchall()
    assert len(requests) == REQUESTS
    shared = con.sql(
        "SELECT idempotency_digest FROM request_base GROUP BY ALL HAVING count(*) = 2"
    ).fetchall()
    assert len(shared) == 5
    sample = random.Random(5).sample(requests, 10)
    idents = [i for row in sample for i in row] + [d for (d,) in shared]
    for ident in idents:
        summary, attempts = request_detail(con, ident)
        whole_summary, whole_attempts = _whole(con, ident)
        assert attempts.num_rows >= 1, ident
        assert summary.equals(whole_summary), ident
        assert attempts.equals(whole_attempts), ident
    for (digest,) in shared:
        assert request_detail(con, digest)[0].num_rows == 2
    # ids next to real ones fall within some file's min/max, and half the files have no
    # Bloom filter: the copy runs and finds nothing
    near = [lrid + "0" for lrid, _, _ in sample]
    for missing in ("no-such-request", "", "zzzz", "0000", *near):
        summary, attempts = request_detail(con, missing)
        assert (summary.num_rows, attempts.num_rows) == (0, 0)


def test_lookup_reads_only_the_files_that_may_hold_the_request(split: Path) -> None:
    con, dataset = connect(split)
    cur = con.con.cursor()
    picked = 0
    for lrid, trace_id in con.sql(
        "SELECT DISTINCT logical_request_id, trace_id FROM spans "
        "WHERE span_role = 'logical_request'"
    ).fetchall():
        holding = {
            f
            for (f,) in con.execute(
                "SELECT DISTINCT filename FROM read_parquet($f, filename = true) "
                "WHERE logical_request_id = $id",
                {"f": list(dataset.files), "id": lrid},
            ).fetchall()
        }
        candidates = set(_candidate_files(cur, "logical_request_id", lrid))
        assert holding <= candidates
        picked += len(candidates)
        assert _aliased_requests(cur, trace_id) == [lrid]
    assert picked < len(dataset.files) * REQUESTS / 4  # statistics and filters prune
    cur.close()


def test_lookup_skips_a_file_whose_pages_do_not_decode(
    split: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "data"
    root.mkdir()
    for f in sorted(split.rglob("*.parquet")):
        (root / f.name).write_bytes(f.read_bytes())
    con, dataset = connect(root)
    lrid, victim = con.execute(
        "SELECT logical_request_id, filename FROM read_parquet($f, filename = true) "
        "WHERE span_role = 'logical_request' ORDER BY logical_request_id LIMIT 1",
        {"f": list(dataset.files)},
    ).fetchone() or ("", "")
    size = Path(victim).stat().st_size  # the first column pages; the footer stays intact
    flip_bytes(Path(victim), 4, size // 4)

    con, dataset = connect(root)
    assert dataset.skipped == ()  # the footer reads: only the pages are garbled
    assert request_detail(con, lrid)[1].num_rows == 0  # its rows were in the garbled file
    assert [s.path for s in con.skipped_files()] == [victim]
    assert main(["request", str(root), lrid]) == 1
    assert f"warning: skipped {victim}: " in capsys.readouterr().err


def test_row_groups_without_values_are_never_candidates(tmp_path: Path) -> None:
    rows = [
        {
            "span_id": f"s{i}",
            "trace_id": f"t{i:02d}",
            "name": "x",
            "kind": "INTERNAL",
            "start_time": T0 + i * MS,
            "end_time": T0 + (i + 1) * MS,
            "duration_ms": 1.0,
            "status_code": "UNSET",
            "logical_request_id": f"r{i:02d}",
        }
        | ({"idempotency_digest": f"d{i:02d}"} if i >= 4 else {})
        for i in range(8)
    ]
    table = pa.Table.from_pylist(rows, schema=SPAN_SCHEMA)
    config = ExportConfig(directory=tmp_path, partitioning=Partitioning.NONE, row_group_rows=4)
    (path,) = write_partitioned(table, config, FileNamer())
    con, dataset = connect(tmp_path)
    digests = [e for e in dataset.lookup if e.column_name == "idempotency_digest"]
    assert [(e.all_null, e.min_value, e.max_value) for e in digests] == [
        (True, None, None),
        (False, "d04", "d07"),
    ]
    assert digests[1].bloom_offset is not None
    cur = con.con.cursor()
    assert _candidate_files(cur, "idempotency_digest", "d01") == []
    assert _candidate_files(cur, "idempotency_digest", "d05") == [str(path)]
    assert _candidate_files(cur, "logical_request_id", "r09") == []  # beyond the maximum
    assert _candidate_files(cur, "trace_id", "t03") == [str(path)]
    assert request_detail(con, "d05")[1].num_rows == 0  # no attempt rows, but no error
