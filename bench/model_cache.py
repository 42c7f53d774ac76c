"""A model cache against no cache, on sparse and dense data (goal: the first report into a
cache, which builds it, takes at most 1.2× the report without one).

Three data sets: one request an hour over 50 hours and over 300 hours (each hour a
partition of a few rows), and the analytics data set (``--attempts``, 100 k requests an
hour). Each is reported in fresh children without a cache, into an empty cache (cold)
and from that cache (warm), in interleaved rounds (5 sparse, 3 dense; one with
``--quick``); the three reports must be equal. Beside the wall-time medians, the CPU
time's: on a shared machine the figure load disturbs least.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.child import run_child as child
from bench.generate import Generated, attempts_for, generate
from bench.harness import Result, Target
from bench.settings import Settings

SPARSE_HOURS = (50, 300)
"""Hours of the sparse data sets, one request in each."""
COLD_TARGET = Target(at_most=1.2, text="≤ 1.2×")


def _rounds(data: Generated, rounds: int) -> dict[str, list[dict[str, Any]]]:
    """The report without a cache, cold and warm, ``rounds`` times (the order rotating;
    warm right after its cold run), each cold run into a new cache directory."""
    runs: dict[str, list[dict[str, Any]]] = {"none": [], "cold": [], "warm": []}
    for r in range(rounds):
        with tempfile.TemporaryDirectory(prefix="retryscope-bench-cache-") as cache:
            for what in ("none", "cached") if r % 2 == 0 else ("cached", "none"):
                if what == "none":
                    runs["none"].append(child("report", data.path))
                    continue
                runs["cold"].append(child("report", data.path, "--model-cache", cache))
                runs["warm"].append(child("report", data.path, "--model-cache", cache))
                files = sum(1 for f in Path(cache).rglob("*") if f.is_file())
                runs["cold"][-1]["cache_files"] = files
    figures = [x["figures"] for xs in runs.values() for x in xs]
    if any(f != figures[0] for f in figures):
        raise RuntimeError(f"the reports with and without a model cache differ ({data.path})")
    return runs


def _case(name: str, data: Generated, rounds: int) -> list[Result]:
    runs = _rounds(data, rounds)
    seconds = {what: statistics.median(x["seconds"] for x in xs) for what, xs in runs.items()}
    cpu = {what: statistics.median(x["cpu_seconds"] for x in xs) for what, xs in runs.items()}
    cold = runs["cold"][-1]
    hours = len({p.parent for p in Path(data.path).rglob("*.parquet")})
    return [
        Result(
            "model_cache",
            f"{name}: first report into a model cache / without one",
            seconds["cold"] / seconds["none"],
            "×",
            COLD_TARGET,
            {
                "without": f"{seconds['none']:.2f} s",
                "cold": f"{seconds['cold']:.2f} s",
                "warm": f"{seconds['warm']:.2f} s",
                "time partitions": str(hours),
                "units": str(cold["model_stats"]["partitions"]),
                "cache files": str(cold["cache_files"]),
                "CPU cold / without": f"{cpu['cold'] / cpu['none']:.2f}×",
                "rounds": str(rounds),
            },
        ),
        Result(
            "model_cache",
            f"{name}: report from the cache / without one",
            seconds["warm"] / seconds["none"],
            "×",
            None,
            {"CPU warm / without": f"{cpu['warm'] / cpu['none']:.2f}×"},
        ),
    ]


def run(settings: Settings) -> list[Result]:
    rounds = 1 if settings.quick else 5
    results = []
    for hours in SPARSE_HOURS:
        data = generate(
            settings.data_dir, attempts_for(hours), settings.seed, progress=False, per_hour=1
        )
        results += _case(f"sparse, 1 request an hour for {hours} h", data, rounds)
    dense = generate(settings.data_dir, settings.attempts, settings.seed)
    results += _case(f"dense, {dense.attempts / 1e6:,.1f} M attempts", dense, min(rounds, 3))
    return results
