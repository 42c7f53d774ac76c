"""Target 3: the full report and each headline metric on the generated data set.

* the full report (``connect(path)`` + ``build_report``) in a fresh child process, with
  its peak RSS, against pandas computing the same figures in another child (interleaved);
* each headline metric (amplification, fallback rate, deadline exhaustion, per-route
  table) by DuckDB over ``connect(path)`` against pandas, side by side in this process;
  the figures of DuckDB, pandas and the report must agree.

* the first report without a model cache against the one-pass baseline
  (``bench/one_pass.py``), interleaved in fresh children (goal: ≤ 3×, ≤ 3 GiB), and beside
  them the steps an exact model cannot skip (``bench/floor.py``), with the report's
  queries added: how close to the baseline any model built at report time can get;
* the incremental model: the data set but its last hour built into a model cache, then
  the last hour added; the update against that hour's own build (≤ 1.5×) and the report
  after it (≤ 10 s), whose figures must equal the report over all files at once.

``--huge`` writes 100 M attempts and runs the report out of core: DuckDB with a memory
limit and a spill directory under ``bench-data/``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench import pandas_metrics
from bench.child import run_child as child
from bench.generate import Generated, describe, generate
from bench.harness import Result, Target, interleave, mib, millis
from bench.settings import HUGE_ATTEMPTS, Settings
from retryscope.analytics import build_report, connect

GIB = 2**30


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


def _report_vs_pandas(data: Generated, rounds: int) -> tuple[list[Result], dict[str, Any]]:
    """The full report, pandas, the one-pass baseline and the floor in fresh children,
    interleaved; returns the results and the report's figures."""
    cases = ("report", "pandas", "one-pass", "floor")
    runs: dict[str, list[dict[str, Any]]] = {what: [] for what in cases}
    for r in range(rounds):
        for what in cases[r % len(cases) :] + cases[: r % len(cases)]:
            runs[what].append(child(what, data.path))
    one = statistics.median(x["seconds"] for x in runs["one-pass"])
    model = statistics.median(x["model_seconds"] for x in runs["report"])
    cpu = {what: statistics.median(x["cpu_seconds"] for x in runs[what]) for what in cases}
    one_rss = max(x["peak_rss_bytes"] for x in runs["one-pass"])
    floor = statistics.median(x["seconds"] for x in runs["floor"])
    steps = {
        step: statistics.median(x["steps"][step] for x in runs["floor"])
        for step in runs["floor"][0]["steps"]
    }
    queries = statistics.median(x["report_seconds"] - x["model_seconds"] for x in runs["report"])
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
    results = [
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
            "goal 1: first report without a model cache / one-pass baseline",
            rep / one,
            "×",
            Target(at_most=3.0, text="≤ 3×"),
            {
                "report": f"{rep:.2f} s",
                "one-pass baseline": f"{one:.2f} s",
                "of which the model build": f"{model:.2f} s",
                "CPU seconds": f"{cpu['report']:.1f} vs {cpu['one-pass']:.1f}",
            },
        ),
        Result(
            "analytics",
            "goal 1: an exact model's own steps (floor) / one-pass baseline",
            floor / one,
            "×",
            None,
            {
                "floor": f"{floor:.2f} s",
                **{step: f"{seconds:.2f} s" for step, seconds in steps.items()},
                "with the report's queries": f"{(floor + queries) / one:.2f}×",
            },
        ),
        Result(
            "analytics",
            "goal 1: first report without a model cache, peak RSS",
            rep_rss / GIB,
            "GiB",
            Target(at_most=3.0, text="≤ 3 GiB"),
            {"one-pass baseline peak RSS": f"{one_rss / GIB:.2f} GiB"},
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
    return results, report


def _cached_report(data: Generated, settings: Settings) -> list[Result]:
    """The report with a model cache (README "Model cache"): the run that builds the model
    into the cache, one that attaches it, and a first run that builds it under DuckDB's
    memory limit ``settings.bounded_memory_limit``. Reported, not targets: the target is
    the report without help."""
    with tempfile.TemporaryDirectory(prefix="retryscope-bench-model-") as cache:
        cold = child("report", data.path, "--model-cache", cache)
        warm = child("report", data.path, "--model-cache", cache)
        size = sum(f.stat().st_size for f in Path(cache).rglob("*") if f.is_file())
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
                "the report's queries": f"{warm['report_seconds'] - warm['model_seconds']:.2f} s",
                "CPU": f"{warm['cpu_seconds']:.1f} s",
                "load": _load(),
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
                "request partitions": bounded["model_stats"]["request_partitions"],
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
        return out, sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    finally:
        for scratch in (spill, cache):
            shutil.rmtree(scratch, ignore_errors=True)


def _link_hours(source: Path, target: Path, hours: list[Path]) -> None:
    """Hard-link the files of ``hours`` (folders under ``source``) into ``target``, in the
    same folders: the files are the data set's own (same bytes, no copy)."""
    for hour in hours:
        for f in sorted(hour.glob("*.parquet")):
            dest = target / f.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.link(f, dest)


def _incremental(data: Generated, settings: Settings, whole: dict[str, Any]) -> list[Result]:
    """Goal 2: the data set but its last hour, built into a model cache; the last hour
    added and the report run again on that cache (it builds the new hour, the requests
    that straddle it and the tables across requests) against a build of that hour alone.
    The report after the update must equal ``whole`` (the report over all files at once)."""
    source = Path(data.path)
    hours = sorted({p.parent for p in source.glob("date=*/hour=*/*.parquet")})
    if len(hours) < 2:
        return [
            Result(
                "analytics",
                "goal 2: adding one hour to a built model / that hour's own build",
                None,
                "×",
                Target(at_most=1.5, text="≤ 1.5×"),
                note="skipped: the data set has one hour (it needs two or more)",
            )
        ]
    scratch = settings.data_dir / "incremental"
    shutil.rmtree(scratch, ignore_errors=True)
    growing, alone = scratch / "data", scratch / "hour"
    cache, alone_cache = scratch / "model-cache", scratch / "hour-model-cache"
    for d in (growing, alone, cache, alone_cache):
        d.mkdir(parents=True)
    try:
        _link_hours(source, growing, hours[:-1])
        _link_hours(source, alone, hours[-1:])
        first = child("report", str(growing), "--model-cache", str(cache))
        _link_hours(source, growing, hours[-1:])
        added = child("report", str(growing), "--model-cache", str(cache))
        own = child("report", str(alone), "--model-cache", str(alone_cache))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if added["figures"] != whole:
        raise RuntimeError("the incremental model's report differs from the one-pass report")
    hour = hours[-1].relative_to(source)
    return [
        Result(
            "analytics",
            "goal 2: adding one hour to a built model / that hour's own build",
            added["model_seconds"] / own["model_seconds"],
            "×",
            Target(at_most=1.5, text="≤ 1.5×"),
            {
                "update": f"{added['model_seconds']:.2f} s",
                "the hour alone": f"{own['model_seconds']:.2f} s",
                "hour": str(hour),
                "built": f"{added['model_stats']['built']} of "
                f"{added['model_stats']['partitions']} partitions",
                "requests straddling partitions": str(added["model_stats"]["straddlers"]),
                "the model of the rest, built first": f"{first['model_seconds']:.1f} s",
            },
        ),
        Result(
            "analytics",
            "goal 2: report after adding the hour (update included)",
            added["seconds"],
            "s",
            Target(at_most=10.0, text="≤ 10 s"),
            {
                "of which the update": f"{added['model_seconds']:.2f} s",
                "the report's queries": f"{added['report_seconds'] - added['model_seconds']:.2f} s",
                "CPU": f"{added['cpu_seconds']:.1f} s",
                "peak RSS": f"{added['peak_rss_bytes'] / GIB:.2f} GiB",
                "load": _load(),
                "report figures": "equal to the report over all files at once",
            },
        ),
    ]


def _load() -> str:
    """The 1-minute load average (on a shared machine wall times are upper bounds)."""
    return f"{os.getloadavg()[0]:.1f}"


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
                "request partitions": out["model_stats"]["request_partitions"],
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
    first, whole = _report_vs_pandas(data, 2 if not settings.quick else 1)
    results += first
    results += _incremental(data, settings, whole)
    results += _cached_report(data, settings)
    results += _metrics(data, 3 if not settings.quick else 1)
    if settings.huge:
        results += _huge(settings)
    return results
