"""Target 3: the full report and each headline metric on the generated data set.

* the full report (``connect(path)`` + ``build_report``) in a fresh child process, with
  its peak RSS, against pandas computing the same figures in another child (interleaved);
* each headline metric (amplification, fallback rate, deadline exhaustion, per-route
  table) by DuckDB over ``connect(path)`` against pandas, side by side in this process;
  the figures of DuckDB, pandas and the report must agree.

``--huge`` writes 100 M attempts and runs the report out of core: DuckDB with a memory
limit and a spill directory under ``bench-data/``.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import pandas_metrics
from bench.generate import Generated, describe, generate
from bench.harness import Result, Target, interleave, mib, millis
from bench.settings import HUGE_ATTEMPTS, Settings
from retryscope.analytics import build_report, connect

GIB = 2**30


def child(what: str, path: str, *extra: str) -> dict[str, Any]:
    """Run ``python -m bench.child`` and return its JSON (wall seconds added)."""
    began = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.child", what, path, *extra],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"bench.child {what} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    out: dict[str, Any] = json.loads(proc.stdout)
    out["wall_seconds"] = time.perf_counter() - began
    return out


def _report_figure(report: dict[str, Any], name: str) -> Any:
    if name != "routes":
        return float(report[name])
    return [
        (
            str(r["route_id"]),
            int(r["attempts"]),
            int(r["logical_requests"]),
            round(r["success_rate"] * r["attempts"]),
            bool(r["is_fallback"]),
        )
        for r in report["routes"]
    ]


def _check_agreement(sources: dict[str, dict[str, Any]]) -> list[str]:
    """Names of figures on which the sources disagree (with the values)."""
    problems = []
    names = next(iter(sources.values())).keys()
    for name in names:
        values = {src: figs[name] for src, figs in sources.items()}
        first = next(iter(values.values()))
        if not all(pandas_metrics.same(first, v) for v in values.values()):
            problems.append(f"{name}: {values}")
    return problems


def _report_vs_pandas(data: Generated, rounds: int) -> list[Result]:
    runs: dict[str, list[dict[str, Any]]] = {"report": [], "pandas": []}
    for r in range(rounds):
        for what in ("report", "pandas") if r % 2 == 0 else ("pandas", "report"):
            runs[what].append(child(what, data.path))
    rep = statistics.median(x["seconds"] for x in runs["report"])
    pan = statistics.median(x["seconds"] for x in runs["pandas"])
    rep_rss = max(x["peak_rss_bytes"] for x in runs["report"])
    pan_rss = max(x["peak_rss_bytes"] for x in runs["pandas"])
    report = runs["report"][-1]["figures"]
    figures = {name: _report_figure(report, name) for name in pandas_metrics.PANDAS}
    pandas_figs = runs["pandas"][-1]["figures"]
    pandas_figs["routes"] = [tuple(r) for r in pandas_figs["routes"]]
    problems = _check_agreement({"report": figures, "pandas": pandas_figs})
    if problems:
        raise RuntimeError("report and pandas disagree: " + "; ".join(problems))
    last = runs["report"][-1]
    wall = statistics.median(x["wall_seconds"] for x in runs["report"])
    size = f"{data.attempts / 1e6:,.1f} M attempts"
    return [
        Result(
            "analytics",
            f"full report, seconds ({size})",
            rep,
            "s",
            Target(at_most=10.0, text="≤ 10 s"),
            {
                "connect": millis(last["connect_seconds"]),
                "build_report": millis(last["report_seconds"]),
                "process wall": f"{wall:.1f} s",
            },
        ),
        Result(
            "analytics",
            "full report, peak RSS",
            rep_rss / GIB,
            "GiB",
            Target(at_most=2.0, text="≤ 2 GiB"),
            {"pandas peak RSS": f"{pan_rss / GIB:.2f} GiB ({pan_rss / rep_rss:.1f}×)"},
        ),
        Result(
            "analytics",
            "full report vs pandas computing only its 4 headline figures",
            pan / rep,
            "×",
            None,
            {"report": f"{rep:.2f} s", "pandas": f"{pan:.2f} s"},
        ),
    ]


def _cached_report(data: Generated, settings: Settings) -> list[Result]:
    """The report with a model cache (README "Model cache"): the run that builds the model
    into the cache, one that attaches it, and a first run that builds it under DuckDB's
    memory limit ``settings.bounded_memory_limit``. Reported, not targets: the target is
    the report without help."""
    with tempfile.TemporaryDirectory(prefix="retryscope-bench-model-") as cache:
        cold = child("report", data.path, "--model-cache", cache)
        warm = child("report", data.path, "--model-cache", cache)
        size = sum(f.stat().st_size for f in Path(cache).iterdir())
    bounded, _ = _report_out_of_core(data, settings, settings.bounded_memory_limit)
    if not warm["figures"] == cold["figures"] == bounded["figures"]:
        raise RuntimeError("the reports with a model cache differ")
    return [
        Result(
            "analytics",
            "full report from a cached model, seconds",
            warm["seconds"],
            "s",
            None,
            {
                "the run that built it into the cache": f"{cold['seconds']:.1f} s",
                "cache file": f"{size / GIB:.2f} GiB",
            },
        ),
        Result(
            "analytics",
            "full report from a cached model, peak RSS",
            warm["peak_rss_bytes"] / GIB,
            "GiB",
            None,
            {"the run that built it into the cache": f"{cold['peak_rss_bytes'] / GIB:.2f} GiB"},
        ),
        Result(
            "analytics",
            f"first run into a cache, memory_limit {settings.bounded_memory_limit}, peak RSS",
            bounded["peak_rss_bytes"] / GIB,
            "GiB",
            None,
            {
                "seconds": f"{bounded['seconds']:.1f} s",
                "request partitions": bounded["model_partitions"],
            },
        ),
    ]


def _report_out_of_core(
    data: Generated, settings: Settings, memory_limit: str
) -> tuple[dict[str, Any], int]:
    """The report's child run (and its model cache file's size) under DuckDB's
    ``memory_limit``: work beyond it spilled to ``bench-data/duckdb-spill``, the model
    built on disk in ``bench-data/model-cache``; both removed afterwards."""
    spill = settings.data_dir / "duckdb-spill"
    cache = settings.data_dir / "model-cache"
    for scratch in (spill, cache):
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
    try:
        out = child(
            "report",
            data.path,
            "--memory-limit",
            memory_limit,
            "--temp-dir",
            str(spill),
            "--model-cache",
            str(cache),
        )
        return out, sum(f.stat().st_size for f in cache.iterdir())
    finally:
        for scratch in (spill, cache):
            shutil.rmtree(scratch, ignore_errors=True)


def _metrics(data: Generated, rounds: int) -> list[Result]:
    con, _ = connect(data.path)
    con.execute("SET enable_progress_bar = false")
    report = build_report(con)
    results = []
    for name in pandas_metrics.PANDAS:
        got: dict[str, Any] = {}

        def by_duckdb(name: str = name, got: dict[str, Any] = got) -> None:
            got["duckdb"] = pandas_metrics.duckdb_figure(con, name)

        def by_pandas(name: str = name, got: dict[str, Any] = got) -> None:
            got["pandas"] = pandas_metrics.PANDAS[name](data.path)

        t = interleave({"duckdb": by_duckdb, "pandas": by_pandas}, rounds=rounds, warmup=0)
        problems = _check_agreement(
            {
                "duckdb": {name: got["duckdb"]},
                "pandas": {name: got["pandas"]},
                "report": {name: _report_figure(report, name)},
            }
        )
        if problems:
            raise RuntimeError("figures disagree: " + "; ".join(problems))
        results.append(
            Result(
                "analytics",
                f"{name}: speed-up of DuckDB over pandas",
                t.ratio("pandas", "duckdb"),
                "×",
                Target(at_least=2.0, text="≥ 2×"),
                {"duckdb": millis(t.median("duckdb")), "pandas": millis(t.median("pandas"))},
            )
        )
    con.close()
    return results


def _huge(settings: Settings) -> list[Result]:
    """The full report on 100 M attempts out of core (:func:`_report_out_of_core`)."""
    data = generate(settings.data_dir, HUGE_ATTEMPTS, settings.seed)
    out, model_bytes = _report_out_of_core(data, settings, settings.huge_memory_limit)
    return [
        Result(
            "analytics",
            f"huge: full report out of core ({data.attempts / 1e6:,.0f} M attempts)",
            out["seconds"],
            "s",
            None,
            {
                "DuckDB memory_limit": settings.huge_memory_limit,
                "peak RSS": mib(out["peak_rss_bytes"]),
                "model built in": f"{out['model_seconds'] / 60:.1f} min",
                "request partitions": out["model_partitions"],
                "model cache file": f"{model_bytes / GIB:.1f} GiB",
                **describe(data),
            },
            note="completed without running out of memory",
        )
    ]


def run(settings: Settings) -> list[Result]:
    data = generate(settings.data_dir, settings.attempts, settings.seed)
    results = [
        Result(
            "analytics",
            "data set",
            data.bytes_per_row,
            "B/row",
            None,
            {**describe(data), "generated in": f"{data.seconds:.0f} s"},
        )
    ]
    results += _report_vs_pandas(data, 2 if not settings.quick else 1)
    results += _cached_report(data, settings)
    results += _metrics(data, 3 if not settings.quick else 1)
    if settings.huge:
        results += _huge(settings)
    return results
