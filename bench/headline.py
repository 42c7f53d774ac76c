"""The Overview's headline and the full report from a maintained model (issue 49 goal 4:
the headline ≤ 2 s, the report ≤ 10× the one pass).

On the analytics data set (``--attempts``): the model cache is built once (in
``RETRYSCOPE_MODEL_CACHE`` when set, which keeps it for the next run: the 100 M model takes
a quarter of an hour or more to build; else in a temporary directory); then, in each
round, a fresh child opens the data set with that cache (the model current: nothing to
build) and times the headline (``retryscope.analytics.headline``: the rollups kept per
time partition) and the report, beside the one pass over the data set. The headline must
equal the report's figures of the same keys, and the report the one without a cache.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.child import run_child as child
from bench.generate import generate
from bench.harness import Result, Target
from bench.settings import Settings

HEADLINE = Target(at_most=2.0, text="≤ 2 s")
REPORT = Target(at_most=10.0, text="≤ 10×")


def _headline_of(report: dict[str, Any]) -> dict[str, Any]:
    from retryscope.analytics._headline import REQUEST_KEYS

    return {
        **{k: report[k] for k in REQUEST_KEYS},
        "cost": {"by_currency": report["cost"]["by_currency"]},
    }


def run(settings: Settings) -> list[Result]:
    data = generate(settings.data_dir, settings.attempts, settings.seed)
    rounds = min(settings.rounds, 3)
    runs: dict[str, list[dict[str, Any]]] = {"maintained": [], "whole": []}
    from retryscope._environment import CACHE_ENV

    with tempfile.TemporaryDirectory(prefix="retryscope-bench-headline-") as tmp:
        cache = os.environ.get(CACHE_ENV) or str(Path(tmp) / "cache")
        cold = child("report", data.path, "--model-cache", cache)
        for _ in range(rounds):
            runs["whole"].append(child("one-pass", data.path))
            runs["maintained"].append(child("report", data.path, "--model-cache", cache))
    for run in runs["maintained"]:
        if run["figures"] != cold["figures"] or run["headline"] != _headline_of(run["figures"]):
            raise RuntimeError("the headline or the report from the maintained model differ")
    headline = statistics.median(x["headline_seconds"] for x in runs["maintained"])
    opened = statistics.median(
        x["connect_seconds"] + x["model_seconds"] for x in runs["maintained"]
    )
    report = statistics.median(x["seconds"] for x in runs["maintained"])
    whole = statistics.median(x["seconds"] for x in runs["whole"])
    size = f"{data.attempts:,} attempts"
    return [
        Result(
            "headline",
            f"{size}: the Overview's headline from a maintained model (rollups)",
            headline + opened,
            "s",
            HEADLINE,
            {
                "headline query": f"{headline:.3f} s",
                "open the data set and model": f"{opened:.2f} s",
                "one pass": f"{whole:.2f} s",
                "first report (the model built if not current)": f"{cold['seconds']:.1f} s",
            },
        ),
        Result(
            "headline",
            f"{size}: full report from a maintained model / one pass",
            report / whole,
            "×",
            REPORT,
            {
                "report": f"{report:.2f} s",
                "one pass": f"{whole:.2f} s",
                "peak RSS": f"{max(x['peak_rss_bytes'] for x in runs['maintained']) / 2**30:.2f}"
                " GiB",
                "rounds": str(rounds),
            },
        ),
    ]
