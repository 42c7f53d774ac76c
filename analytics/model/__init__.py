"""The audit model: the per-request tables every metric and finding reads, built once per
data set per time partition (in request partitions when one is large for the memory
limit), kept in a model cache directory so later runs build only new or changed
partitions, and :func:`build_partition`, the engine-neutral step an engine running the
build in its own tasks calls (Arrow spans of whole requests in, per-request tables out)."""

from retryscope.analytics.model._cache import model_directory
from retryscope.analytics.model._partition import (
    ACROSS_REQUESTS_TABLES,
    MODEL_TABLES,
    PER_REQUEST_TABLES,
    PROJECTIONS,
    Projection,
    build_across_requests,
    build_partition,
)
from retryscope.analytics.model._progress import (
    STAGE_DONE,
    Progress,
    ProgressCallback,
    TerminalProgress,
    duration,
)

__all__ = [
    "ACROSS_REQUESTS_TABLES",
    "MODEL_TABLES",
    "PER_REQUEST_TABLES",
    "PROJECTIONS",
    "STAGE_DONE",
    "Progress",
    "ProgressCallback",
    "Projection",
    "TerminalProgress",
    "build_across_requests",
    "build_partition",
    "duration",
    "model_directory",
]
