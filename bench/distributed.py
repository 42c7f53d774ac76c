"""The model built on Spark (DuckDB in each task) against the single-node build, on the
same generated data set, interleaved: each round builds the single-node model (in
memory, ``connect`` + the model build) and the Spark model (the job: scan, shuffle,
tasks; then the driver's commit) once. The Spark session starts once, before the
rounds, and its start is reported apart. Also the per-partition task time and its
throughput, the figure that sizes a cluster (docs/guides/scaling.md).

On one machine an engine can only add overhead (the JVM, Arrow conversion for the
Python workers, the shuffle): the ratio says what that overhead is, not a speed-up.
``--quick`` starts no Spark (its JVM start alone is 10-20 s): skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time

from bench.generate import describe, generate
from bench.harness import Result, interleave
from bench.settings import FULL_ATTEMPTS, Settings

DEFAULT_ATTEMPTS = 300_000
"""Attempts of the data set unless ``--attempts`` says otherwise (the single-node
benchmarks' 10 M would take Spark on 2 cores hours of rounds)."""
MASTER = os.environ.get("RETRYSCOPE_BENCH_SPARK_MASTER", "local[2]")


def run(settings: Settings) -> list[Result]:
    if settings.quick:
        return [
            Result(
                "distributed",
                "Spark build / single-node build",
                None,
                "×",
                note="skipped: --quick starts no Spark (run make bench ARGS=distributed)",
            )
        ]
    from retryscope.analytics import build_report, connect
    from retryscope.analytics.distributed import (
        SparkBuild,
        attach_model,
        build_model_spark,
        spark_session,
    )

    attempts = settings.attempts if settings.attempts != FULL_ATTEMPTS else DEFAULT_ATTEMPTS
    data = generate(settings.data_dir, attempts, settings.seed)
    began = time.perf_counter()
    spark = spark_session(MASTER)
    session_seconds = time.perf_counter() - began
    out = tempfile.mkdtemp(prefix="retryscope-bench-spark-")
    builds: list[SparkBuild] = []
    try:

        def single_node() -> None:
            con, _ = connect(data.path)
            con.build()
            con.close()

        def on_spark() -> None:
            builds.append(build_model_spark(spark, data.path, model=f"{out}/model"))

        rounds = max(1, min(settings.rounds, 3))
        timings = interleave({"single": single_node, "spark": on_spark}, rounds=rounds, warmup=1)
        single, _ = connect(data.path)
        attached, _ = connect(data.path)
        attach_model(attached, f"{out}/model")
        if json.dumps(build_report(single), default=str) != json.dumps(
            build_report(attached), default=str
        ):
            raise RuntimeError("the report over the Spark-built model differs")
    finally:
        spark.stop()
        shutil.rmtree(out, ignore_errors=True)
    measured = builds[-rounds:]
    tasks = [t for b in measured for t in b.tasks]
    task_seconds = statistics.median(t.seconds for t in tasks)
    task_spans = statistics.median(t.span_rows for t in tasks)
    k = measured[-1].manifest.partitions
    return [
        Result(
            "distributed",
            f"Spark build ({MASTER}, {k} tasks) / single-node build",
            timings.ratio("spark", "single"),
            "×",
            None,
            {
                "Spark": f"{timings.median('spark'):.1f} s",
                "single-node": f"{timings.median('single'):.1f} s",
                "rounds": str(rounds),
                **describe(data),
            },
            note="same report bytes from both models; the Spark session start is apart",
        ),
        Result(
            "distributed",
            "per-partition task (DuckDB model SQL + Parquet parts), seconds",
            task_seconds,
            "s",
            None,
            {
                "spans per task": f"{task_spans:,.0f}",
                "spans/s per task": f"{task_spans / task_seconds:,.0f}",
                "slowest task": f"{max(t.seconds for t in tasks):.1f} s",
            },
        ),
        Result(
            "distributed",
            "Spark job (scan, shuffle, tasks) and driver commit, seconds",
            statistics.median(b.job_seconds for b in measured),
            "s",
            None,
            {
                "commit (verify, tables across requests, manifest)": (
                    f"{statistics.median(b.commit_seconds for b in measured):.1f} s"
                ),
                "session start": f"{session_seconds:.1f} s",
            },
        ),
    ]
