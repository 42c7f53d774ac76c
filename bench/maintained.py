"""The model kept current as data arrives (issue 49 goal 2: each ≤ 1.5× the one pass).

On the analytics data set (``--attempts``, hourly partitions): the model cache is built
over every hour but the last; then, in each round, the last hour's files close (linked
into the data set) and a fresh child brings the model up to date, as the watcher
(``retryscope model --watch``) or ``retryscope ingest --model-cache`` does: the time from
the hour's files closing to the hour being in the model, against the one pass over that
hour. Then the report from the current model against the one pass over the whole data set.
Each child's own time (connect, build, report; no process start or imports) is the figure,
the wall time with the process start beside it. The reports must equal the one without a
cache.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.child import run_child as child
from bench.generate import REQUESTS_PER_HOUR, generate
from bench.harness import Result, Target
from bench.settings import Settings

TARGET = Target(at_most=1.5, text="≤ 1.5×")
QUICK_PER_HOUR = 5_000


def _link_tree(source: Path, target: Path, skip: Path | None = None) -> None:
    """``target`` holding hard links to the Parquet files of ``source`` (but ``skip``'s)."""
    for f in sorted(source.rglob("*.parquet")):
        if skip is not None and f.parent == skip:
            continue
        dest = target / f.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.link(f, dest)


def _update_seconds(run: dict[str, Any]) -> float:
    """A report child's time to bring the model up to date: listing the files and the
    build (the watcher's update, without the report)."""
    return float(run["connect_seconds"]) + float(run["model_seconds"])


def run(settings: Settings) -> list[Result]:
    # a smoke run's few attempts still spread over several hours
    per_hour = QUICK_PER_HOUR if settings.quick else REQUESTS_PER_HOUR
    data = generate(settings.data_dir, settings.attempts, settings.seed, per_hour=per_hour)
    source = Path(data.path)
    hours = sorted({p.parent for p in source.rglob("*.parquet")})
    last = hours[-1]
    rounds = min(settings.rounds, 3)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in ("update", "hour", "warm", "whole")}
    with tempfile.TemporaryDirectory(prefix="retryscope-bench-maintained-") as tmp:
        root, before = Path(tmp) / "data", Path(tmp) / "cache-before"
        _link_tree(source, root, skip=last)
        child("report", str(root), "--model-cache", str(before))  # every hour but the last
        _link_tree(last, root / last.relative_to(source))
        reference = child("report", str(source))["figures"]
        for r in range(rounds):
            cache = Path(tmp) / f"cache-{r}"
            shutil.copytree(before, cache)
            runs["hour"].append(child("one-pass", str(last)))
            runs["update"].append(child("report", str(root), "--model-cache", str(cache)))
            runs["whole"].append(child("one-pass", str(source)))
            runs["warm"].append(child("report", str(root), "--model-cache", str(cache)))
            shutil.rmtree(cache)
    if any(x["figures"] != reference for x in (*runs["update"], *runs["warm"])):
        raise RuntimeError("the reports from the maintained model and without a cache differ")
    update = statistics.median(_update_seconds(x) for x in runs["update"])
    hour = statistics.median(x["seconds"] for x in runs["hour"])
    warm = statistics.median(x["seconds"] for x in runs["warm"])
    whole = statistics.median(x["seconds"] for x in runs["whole"])

    def wall(what: str) -> str:
        return f"{statistics.median(x['wall_seconds'] for x in runs[what]):.2f} s"

    # CPU beside the wall times: on a shared machine the ratio of CPU seconds moves less
    update_cpu = statistics.median(float(x["model_cpu_seconds"]) for x in runs["update"])
    hour_cpu = statistics.median(float(x["work_cpu_seconds"]) for x in runs["hour"])
    stats = runs["update"][-1]["model_stats"]
    size = f"{data.attempts:,} attempts"
    return [
        Result(
            "maintained",
            f"{size}: an hour's files closed → in the model / one pass over the hour",
            update / hour,
            "×",
            TARGET,
            {
                "update": f"{update:.2f} s",
                "one pass (hour)": f"{hour:.2f} s",
                "walls": f"{wall('update')} / {wall('hour')}",
                "CPU": f"{update_cpu:.2f} / {hour_cpu:.2f} s ({update_cpu / hour_cpu:.1f}×)",
                "units built": f"{stats['built']} of {stats['partitions']}",
                "hours": str(len(hours)),
                "rounds": str(rounds),
            },
        ),
        Result(
            "maintained",
            f"{size}: report from a current model / one pass",
            warm / whole,
            "×",
            TARGET,
            {
                "report": f"{warm:.2f} s",
                "one pass": f"{whole:.2f} s",
                "walls": f"{wall('warm')} / {wall('whole')}",
                "peak RSS": f"{max(x['peak_rss_bytes'] for x in runs['warm']) / 2**30:.2f} GiB",
            },
        ),
    ]
