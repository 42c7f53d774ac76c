"""The model built on Spark from an ``s3://`` prefix into an ``s3://`` prefix, against a
real S3 HTTP endpoint on 127.0.0.1 (moto's server, ``conftest.py``): the tasks read the
span objects and write their parts through pyarrow, the driver commits the manifest
last, and ``report``, ``findings`` and ``whatif`` attach it (DuckDB through fsspec) with
the single-node model's rows and report bytes.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import boto3
import duckdb
import pytest

from retryscope.analytics import connect, discover, findings
from retryscope.analytics.commands import CACHE_HINT, _opened
from retryscope.analytics.distributed import (
    BuildError,
    attach_model,
    build_model_spark,
    read_manifest,
)
from retryscope.analytics.distributed import _spark as spark_module
from retryscope.analytics.distributed._layout import Location, part_name
from retryscope.analytics.model import MODEL_TABLES, PER_REQUEST_TABLES, Progress
from retryscope.analytics.model._progress import (
    HINT_AFTER_S,
    STAGE_DONE,
    STAGE_PARTITIONS,
)
from retryscope.analytics.replay import WhatIf, whatif, write_policy_side_file
from retryscope.analytics.replay._policy_drift import load_policy_documents
from retryscope.cli import main
from retryscope.control._lab import reference_policy
from tests.distributed.conftest import JAVA, NO_JAVA, SEED
from tests.model_support import model_differences
from tests.test_model_progress import _Terminal

BUCKET = "retryscope-audit"

pytestmark = [pytest.mark.skipif(not JAVA, reason=NO_JAVA), pytest.mark.timeout(900)]


def _keys(prefix: str) -> dict[str, int]:
    """The objects under ``prefix`` of the bucket, with their sizes."""
    pages = (
        boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    )
    return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}


def _copy_prefix(source: str, target: str) -> None:
    client = boto3.client("s3")
    for key in _keys(source):
        client.copy_object(
            Bucket=BUCKET,
            Key=target + key.removeprefix(source),
            CopySource={"Bucket": BUCKET, "Key": key},
        )


@pytest.fixture(scope="module")
def s3_data(object_store: str, data: Path) -> str:
    """The data set's files (the corrupt one, the hidden folders and a policy side file
    too) under ``s3://<bucket>/spans/``."""
    write_policy_side_file(data, reference_policy())
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    for path in sorted(data.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), BUCKET, f"spans/{path.relative_to(data).as_posix()}")
    # span files no reader takes: below a hidden folder, or hidden themselves
    some = sorted(data.rglob("*.parquet"))[0]
    hour = some.parent.relative_to(data).as_posix()
    for key in (f"spans/.staging/{some.name}", f"spans/{hour}/_{some.name}"):
        client.upload_file(str(some), BUCKET, key)
    return f"s3://{BUCKET}/spans"


@pytest.fixture(scope="module")
def s3_model(spark: object, s3_data: str) -> str:
    """Built into the default place, next to the data set (``s3://<bucket>/spans.model``)."""
    build = build_model_spark(spark, s3_data, partitions=3)  # type: ignore[arg-type]
    assert build.location == f"s3://{BUCKET}/spans.model"
    return build.location


def _attached(data: str, model: str) -> duckdb.DuckDBPyConnection:
    con, _ = connect(data)
    attach_model(con, model)
    return con


def test_an_s3_data_set_lists_and_checks_as_a_local_one(s3_data: str, data: Path) -> None:
    remote, local = discover(s3_data), discover(data)
    assert [f.removeprefix(s3_data) for f in remote.files] == [
        f.removeprefix(str(data)) for f in local.files
    ]
    assert [s.path.rsplit("/", 1)[-1] for s in remote.skipped] == ["spans-corrupt.parquet"]
    assert remote.rows == local.rows
    assert remote.sizes == tuple(Path(f).stat().st_size for f in local.files)
    digests, documents = load_policy_documents(remote)
    assert len(digests) == len(documents) == 1
    assert (digests, documents) == load_policy_documents(local)


def test_the_s3_model_equals_the_single_node_model(
    s3_data: str, s3_model: str, single: duckdb.DuckDBPyConnection
) -> None:
    assert model_differences(_attached(s3_data, s3_model), single) == {}, f"seed {SEED}"
    manifest = read_manifest(Location(s3_model))
    assert manifest.root == s3_data
    assert manifest.partitions == 3
    written = set(_keys("spans.model/"))
    listed = {f"spans.model/{f}" for table in MODEL_TABLES for f in manifest.tables[table]}
    assert written == listed | {"spans.model/manifest.json"}  # nothing else, no temp object
    for table in PER_REQUEST_TABLES:
        assert manifest.tables[table][-1] == f"{manifest.build}/{table}/{part_name(2)}"
    assert manifest.inputs is not None
    assert "spans-corrupt.parquet" not in " ".join(manifest.inputs)
    assert len(manifest.inputs) == len(discover(s3_data).files)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_the_report_attaches_it_byte_identically(
    data: Path, s3_data: str, s3_model: str, capsys: pytest.CaptureFixture[str]
) -> None:
    single = _cli(capsys, "report", str(data), "--format", "json")
    attached = _cli(capsys, "report", s3_data, "--format", "json", "--model", s3_model)
    assert attached == single, f"seed {SEED}"
    assert json.loads(single)["physical_attempts"]


def test_findings_and_whatif_attach_it(
    s3_data: str, s3_model: str, single: duckdb.DuckDBPyConnection
) -> None:
    attached = _attached(s3_data, s3_model)
    rows = [sorted(map(str, findings(con).to_pylist())) for con in (attached, single)]
    assert rows[0] == rows[1], f"seed {SEED}"
    policy = WhatIf(max_attempts=2, no_fallback=True)
    assert whatif(attached, policy).equals(whatif(single, policy)), f"seed {SEED}"


def test_a_long_build_of_an_s3_data_set_names_no_model_cache(
    s3_data: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an object store's model is not cached (--model reads one built by Spark)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with _opened(s3_data) as con:
        show = con.progress
        assert show is not None
        show(Progress(STAGE_PARTITIONS, 0, 1, 2.0))
        show(Progress(STAGE_DONE, 1, 1, HINT_AFTER_S))
    assert "model ready" in terminal.getvalue()
    assert CACHE_HINT not in terminal.getvalue()


def test_a_missing_prefix_or_bucket_is_named(
    spark: object, object_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = f"s3://{BUCKET}/nowhere"
    with pytest.raises(FileNotFoundError, match=f"no audit data at '{missing}'"):
        build_model_spark(spark, missing)  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match="no audit data at 's3://no-such-bucket/spans'"):
        discover("s3://no-such-bucket/spans")
    assert main(["report", f"s3://{BUCKET}/spans", "--model", missing]) != 0
    assert f"no model at {missing}" in capsys.readouterr().err
    assert not _keys("nowhere")  # nothing was written for the missing data set


def test_a_rerun_after_a_failed_s3_build_leaves_no_mixed_model(
    spark: object,
    s3_data: str,
    s3_model: str,
    single: duckdb.DuckDBPyConnection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No rename on S3: each part is one upload under its fixed name, the manifest is
    written last, so a build whose part went missing before the commit leaves the
    previous model committed, and the next build removes its folder."""
    model = f"s3://{BUCKET}/rerun.model"
    _copy_prefix("spans.model/", "rerun.model/")  # a committed model to replace
    first = read_manifest(Location(model))
    real_commit = spark_module.commit

    def losing_a_part(location: Location, build: str, *args: object, **kwargs: object) -> object:
        boto3.client("s3").delete_object(
            Bucket=BUCKET, Key=f"rerun.model/{build}/all_request_facts/{part_name(1)}"
        )
        return real_commit(location, build, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(spark_module, "new_build_id", lambda: "build-failing")
    monkeypatch.setattr(spark_module, "commit", losing_a_part)
    with pytest.raises(BuildError, match=f"{model}/build-failing/all_request_facts/part-00001"):
        build_model_spark(spark, s3_data, model=model, partitions=2)  # type: ignore[arg-type]
    assert read_manifest(Location(model)).build == first.build
    assert any(k.startswith("rerun.model/build-failing/") for k in _keys("rerun.model/"))
    monkeypatch.undo()
    again = build_model_spark(spark, s3_data, model=model, partitions=2)  # type: ignore[arg-type]
    assert read_manifest(Location(model)).build == again.manifest.build
    builds = {k.split("/")[1] for k in _keys("rerun.model/") if k.count("/") > 1}
    assert builds == {first.build, again.manifest.build}  # the failed one is gone
    assert model_differences(_attached(s3_data, model), single) == {}, f"seed {SEED}"


def test_the_ui_reads_the_s3_model(
    data: Path, s3_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RETRYSCOPE_MODEL=s3://…``: the pages of a copy of the data set (the same files,
    so the model's inputs match) show the single-node figures, read from the object store
    under the UI's locked-down connection."""
    from retryscope._environment import MODEL_ENV
    from tests.dashboards.conftest import metrics, start_app

    built, attached = tmp_path / "built", tmp_path / "attached"
    for copy in (built, attached):  # the UI caches its store per data directory
        shutil.copytree(data, copy)
    monkeypatch.delenv(MODEL_ENV, raising=False)
    single = metrics(start_app(built, monkeypatch))
    monkeypatch.setenv(MODEL_ENV, s3_model)
    shown = start_app(attached, monkeypatch)
    assert not shown.error, [e.value for e in shown.error]
    assert single
    assert metrics(shown) == single, f"seed {SEED}"


def test_a_model_of_another_state_of_the_s3_data_set_is_refused(
    s3_data: str, s3_model: str
) -> None:
    _copy_prefix("spans/", "grown/spans/")
    _copy_prefix("spans.model/", "grown/spans.model/")
    grown, model = f"s3://{BUCKET}/grown/spans", f"s3://{BUCKET}/grown/spans.model"
    _attached(grown, model)  # the same objects: accepted
    extra = next(k for k in _keys("grown/spans/") if k.endswith(".parquet") and "again-" in k)
    boto3.client("s3").copy_object(
        Bucket=BUCKET,
        Key=extra.rsplit("/", 1)[0] + "/later.parquet",
        CopySource={"Bucket": BUCKET, "Key": extra},
    )
    with pytest.raises(ValueError, match=r"changed since it was built: 1 new files"):
        _attached(grown, model)
