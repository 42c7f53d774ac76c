"""The model built on Apache Spark: Spark shuffles the spans by ``logical_request_id``
and runs one task per partition (``mapInArrow``), each running the model's own SQL in an
in-process DuckDB over its partition (:mod:`._task`); the driver verifies the parts,
builds the tables across requests and commits the model directory (:mod:`._commit`).

Spark never sees the model's types: the SQL stays DuckDB's (Spark SQL has no unsigned
64-bit integers, and its ``hash`` and ``collect_list`` are not DuckDB's), and nanosecond
timestamps, which Spark cannot represent, cross it as int64 nanoseconds
(``spark.sql.legacy.parquet.nanosAsLong``) and are cast back in the task.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import pyarrow as pa

from retryscope.analytics._dataset import DataSet, discover
from retryscope.analytics.distributed._columns import model_columns
from retryscope.analytics.distributed._commit import commit
from retryscope.analytics.distributed._layout import (
    Location,
    Manifest,
    data_set_inputs,
    default_location,
    new_build_id,
)
from retryscope.analytics.distributed._task import (
    TaskResult,
    read_span_file,
    run_task,
    span_table,
    wire_schema,
)
from retryscope.analytics.model._partitions import partitions_for
from retryscope.analytics.model._store import Modes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SPARK_ENV: Final = {
    # every socket of the driver, and of a local-cluster's master, workers and
    # executors, on loopback (read only when the JVM starts)
    "SPARK_LOCAL_IP": "127.0.0.1",
    # Python workers run this interpreter (the environment retryscope is installed in)
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
}
"""Environment of a Spark session the driver starts itself (an existing variable wins)."""

SPARK_CONF: Final = {
    "spark.app.name": "retryscope-model",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # Parquet TIMESTAMP(NANOS) is otherwise refused; read as int64 nanoseconds, also
    # nested in list<struct> (events)
    "spark.sql.legacy.parquet.nanosAsLong": "true",
    # Hive directories (date=/hour=) are not span columns
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    # larger batches made the build 7x slower (measured at 100,000)
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
}
"""Settings every build needs (a session the caller made gets the SQL ones)."""

LOCAL_CONF: Final = {
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    # short runs on few cores: no JIT tiers beyond C1, no parallel GC threads
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}
"""Settings of a session on this machine (``local[...]``, ``local-cluster[...]``)."""

_SESSION_SQL_CONF: Final = (
    "spark.sql.session.timeZone",
    "spark.sql.legacy.parquet.nanosAsLong",
    "spark.sql.sources.partitionColumnTypeInference.enabled",
    "spark.sql.execution.arrow.maxRecordsPerBatch",
)
_SUMMARY: Final = "partition int, span_rows long, table_rows string, seconds double"
_BATCH_ROWS: Final = int(SPARK_CONF["spark.sql.execution.arrow.maxRecordsPerBatch"])


def spark_session(master: str | None = None, conf: Mapping[str, str] | None = None) -> SparkSession:
    """A Spark session for model builds: on ``master`` (``local[2]``,
    ``local-cluster[2,1,1024]``, ``spark://host:7077``, ``yarn``...), or, when None,
    on the one ``spark-submit`` configured. ``conf`` adds or overrides settings."""
    from pyspark.sql import SparkSession

    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise ValueError(
            "Spark needs a Java 17+ runtime: none on PATH and JAVA_HOME is not set "
            "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless)"
        )
    for key, value in SPARK_ENV.items():
        os.environ.setdefault(key, value)
    builder = SparkSession.builder
    if master is not None:  # under spark-submit, .master() would override --master
        builder = builder.master(master)
    settings = dict(SPARK_CONF)
    if master is not None and master.startswith("local"):
        settings |= LOCAL_CONF
    for key, value in {**settings, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


@dataclass(frozen=True, slots=True)
class SparkBuild:
    """A committed Spark build: where it is, its manifest, each task's result, and the
    seconds of the Spark job (scan, shuffle, tasks) and of the commit."""

    location: str
    manifest: Manifest
    tasks: tuple[TaskResult, ...]
    job_seconds: float
    commit_seconds: float


def build_model_spark(
    spark: SparkSession,
    data: str,
    *,
    model: str | None = None,
    partitions: int | None = None,
) -> SparkBuild:
    """Build the audit model of the data set ``data`` (a directory or file, or an
    ``s3://`` prefix, read by the tasks through pyarrow) on ``spark`` and commit it to the
    model directory ``model`` (local or ``s3://``; default: next to the data set,
    :func:`default_location`), in
    ``partitions`` tasks (default: from the span rows and the executors' memory)."""
    _set_sql_conf(spark)
    dataset = discover(data)
    location = Location(model or default_location(data), _modes(dataset))
    spans = _read_spans(spark, dataset)
    k = partitions or partitions_for_spark(spark, dataset.rows, spans)
    if k < 1:
        raise ValueError(f"partitions must be a positive integer, not {k}")
    build = new_build_id()
    location.make_dir(build)
    columns = list(spans.columns)
    task = _task_function(location.uri, build, columns, _modes(dataset))
    start = time.perf_counter()
    rows = spans.repartition(k, "logical_request_id").mapInArrow(task, _SUMMARY).collect()
    job_seconds = time.perf_counter() - start
    results = tuple(
        sorted(
            (
                TaskResult(r.partition, r.span_rows, json.loads(r.table_rows), r.seconds)
                for r in rows
            ),
            key=lambda r: r.partition,
        )
    )
    start = time.perf_counter()
    manifest = commit(
        location,
        build,
        results,
        partitions=k,
        engine=f"spark {spark.version}",
        root=dataset.root if dataset.is_remote else os.path.abspath(dataset.root),
        inputs=data_set_inputs(dataset),
    )
    return SparkBuild(location.uri, manifest, results, job_seconds, time.perf_counter() - start)


def _modes(dataset: DataSet) -> Modes:
    return Modes() if dataset.is_remote else Modes.of(dataset.root)


def _read_spans(spark: SparkSession, dataset: DataSet) -> DataFrame:
    """The data set's spans on Spark, only the columns the model reads, from the files
    :func:`~retryscope.analytics.discover` accepted (what a single-node build reads): by
    Spark's Parquet reader on a local (or cluster-mounted) disk, by the tasks themselves
    on an object store."""
    if not dataset.files:
        raise ValueError(f"no span files in {dataset.root}")
    if dataset.is_remote:
        return _read_spans_in_tasks(spark, dataset)
    frame = spark.read.option("mergeSchema", str(not dataset.same_schema).lower()).parquet(
        *dataset.files
    )
    present = set(frame.columns)
    return frame.select(*[c for c in model_columns() if c in present])


def _read_spans_in_tasks(spark: SparkSession, dataset: DataSet) -> DataFrame:
    """The spans of an object-store data set, read by Spark's Python tasks through
    pyarrow's file system (:func:`read_span_file`, a slice of the files each): no Hadoop
    connector (``s3a``) is needed, and the files are those ``discover`` checked."""
    from pyspark.sql.pandas.types import from_arrow_schema

    columns = list(model_columns())
    schema = from_arrow_schema(wire_schema(columns))
    files = list(dataset.files)
    slices = min(len(files), 4 * spark.sparkContext.defaultParallelism)
    paths = spark.createDataFrame(
        spark.sparkContext.parallelize([(f,) for f in files], slices), "path string"
    )

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for url in batch.column("path").to_pylist():
                yield from read_span_file(str(url), columns).to_batches(_BATCH_ROWS)

    return paths.mapInArrow(read, schema)


def partitions_for_spark(spark: SparkSession, span_rows: int | None, spans: DataFrame) -> int:
    """Tasks for ``span_rows`` rows (counted by Spark when the footers were not read):
    as many as the cores, and more when a task's share of an executor's memory would
    hold more span rows than a single-node build puts in one request partition."""
    conf = spark.sparkContext.getConf()
    rows = span_rows if span_rows is not None else spans.count()
    cores = int(conf.get("spark.executor.cores", "1"))
    memory = conf.get("spark.executor.pyspark.memory") or conf.get("spark.executor.memory", "1g")
    per_task = _jvm_size_bytes(memory) // max(1, cores)
    return max(spark.sparkContext.defaultParallelism, partitions_for(rows, per_task))


def _jvm_size_bytes(size: str) -> int:
    """A Spark memory setting (``1g``, ``512m``, ``2048k``; a bare number is MiB) in bytes."""
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}
    text = size.strip().lower().removesuffix("b")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(float(text) * 2**20)


def _task_function(
    model: str, build: str, columns: list[str], modes: Modes
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: one partition's batches in, one summary row out (the
    partition id is the hash bucket, since ``repartition`` comes right before it)."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        result = run_task(
            span_table(batches, columns),
            context.partitionId(),
            model=model,
            build=build,
            tag=f"{context.stageId()}-{context.taskAttemptId()}",
            modes=modes,
        )
        yield pa.RecordBatch.from_pydict(
            {
                "partition": [result.partition],
                "span_rows": [result.span_rows],
                "table_rows": [json.dumps(result.table_rows)],
                "seconds": [result.seconds],
            },
            schema=pa.schema(
                [
                    ("partition", pa.int32()),
                    ("span_rows", pa.int64()),
                    ("table_rows", pa.string()),
                    ("seconds", pa.float64()),
                ]
            ),
        )

    return task


def _set_sql_conf(spark: SparkSession) -> None:
    """The SQL settings a build needs, also on a session the caller made (runtime
    settings; the rest of :data:`SPARK_CONF` only matters when a session starts)."""
    for key in _SESSION_SQL_CONF:
        spark.conf.set(key, SPARK_CONF[key])
