"""``retryscope model PATH --engine spark`` and the ``spark-submit`` entry point: build a
data set's model on Spark, commit it, and say what was built."""

from __future__ import annotations

from retryscope.analytics.distributed._spark import SparkBuild, build_model_spark, spark_session


def spark_model_command(
    path: str,
    *,
    model: str | None,
    master: str | None,
    partitions: int | None,
) -> int:
    """Build on ``master`` (None: the cluster ``spark-submit`` configured), print the
    summary, stop the session."""
    spark = spark_session(master)
    try:
        build = build_model_spark(spark, path, model=model, partitions=partitions)
        master_url = str(spark.sparkContext.master)
    finally:
        spark.stop()
    print(summary(build, master_url))
    return 0


def summary(build: SparkBuild, master: str) -> str:
    """What a build did: where the model is, its tasks, spans, and times."""
    manifest = build.manifest
    slowest = max((t.seconds for t in build.tasks), default=0.0)
    return (
        f"built: {build.location} ({manifest.engine} on {master}, {manifest.partitions} tasks, "
        f"{manifest.span_rows:,} spans; job {build.job_seconds:.1f} s, slowest task "
        f"{slowest:.1f} s, commit {build.commit_seconds:.1f} s)\n"
        f"attach it: retryscope report {manifest.root} --model {build.location}"
    )
