"""The audit model built on a distributed engine: Apache Spark shuffles the spans by
``logical_request_id`` and each task runs the model's own SQL in an in-process DuckDB
over its partition (:func:`run_task`, engine-neutral); the driver verifies the parts,
builds the tables across requests and commits a model directory, which every analysis
then reads like a cached model (:func:`attach_model`, ``--model DIR``).
Needs the ``spark`` extra (and Java 17+) to build; reading a built model needs only the
``analytics`` extra."""

from retryscope.analytics.distributed._columns import model_columns
from retryscope.analytics.distributed._command import spark_model_command
from retryscope.analytics.distributed._commit import BuildError, commit
from retryscope.analytics.distributed._layout import (
    BuiltModelStore,
    Location,
    Manifest,
    attach_model,
    default_location,
    read_manifest,
)
from retryscope.analytics.distributed._spark import (
    SPARK_CONF,
    SparkBuild,
    build_model_spark,
    spark_session,
)
from retryscope.analytics.distributed._task import TaskResult, run_task, span_table

__all__ = [
    "SPARK_CONF",
    "BuildError",
    "BuiltModelStore",
    "Location",
    "Manifest",
    "SparkBuild",
    "TaskResult",
    "attach_model",
    "build_model_spark",
    "commit",
    "default_location",
    "model_columns",
    "read_manifest",
    "run_task",
    "span_table",
    "spark_model_command",
    "spark_session",
]
