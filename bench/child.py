"""Work run in a fresh child process so its peak RSS is its own: ``python -m bench.child``.

``report PATH`` times ``connect(PATH)`` + ``build_report`` (optionally on a DuckDB
connection with a memory limit and a spill directory, or with a model cache);
``pandas PATH`` computes the same headline figures with pandas; ``one-pass PATH`` runs the
one-pass baseline (``bench/one_pass.py``); ``floor PATH`` the steps an exact model cannot
skip (``bench/floor.py``); ``metrics-overhead`` times the hot path's spans
with live metrics on and off (``bench/hot_path.py``). Each prints one JSON
object: seconds, peak RSS, CPU seconds, figures. :func:`run_child` runs one from the
benchmark's process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from bench.rss import peak_rss_bytes


def _cpu() -> float:
    """CPU seconds of every thread of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_report(
    path: str, memory_limit: str | None, temp_dir: str | None, model_cache: str | None = None
) -> dict[str, Any]:
    from retryscope.analytics import build_report, connect, headline
    from retryscope.analytics._dataset import new_connection

    began, cpu_began = time.perf_counter(), _cpu()
    # the connection `retryscope report` opens (threads, insertion order, spill directory)
    con, _ = connect(
        path,
        con=new_connection(memory_limit=memory_limit, temp_directory=temp_dir),
        model_cache=model_cache,
    )
    connected = time.perf_counter()
    con.build()  # what build_report does first: timed apart
    modelled, cpu_modelled = time.perf_counter(), _cpu()
    first_row = headline(con)  # the Overview's headline (from the rollups of a cached model)
    headlined = time.perf_counter()
    report = build_report(con)
    done = time.perf_counter()
    stats = con.stats
    return {
        "seconds": done - began - (headlined - modelled),
        "connect_seconds": connected - began,
        "model_seconds": modelled - connected,
        "model_cpu_seconds": cpu_modelled - cpu_began,
        "report_seconds": done - connected - (headlined - modelled),
        "headline_seconds": headlined - modelled,
        "headline": first_row,
        "model_stats": stats,
        "figures": report,
    }


def run_one_pass(path: str) -> dict[str, Any]:
    from bench import one_pass

    began, cpu_began = time.perf_counter(), _cpu()
    figures = one_pass.run(path)
    return {
        "seconds": time.perf_counter() - began,
        "work_cpu_seconds": _cpu() - cpu_began,
        "figures": figures,
    }


def run_floor(path: str) -> dict[str, Any]:
    from bench import floor

    began = time.perf_counter()
    out = floor.run(path)
    return {"seconds": time.perf_counter() - began, **out}


def run_pandas(path: str) -> dict[str, Any]:
    from bench import pandas_metrics

    began = time.perf_counter()
    figures = pandas_metrics.report(path)
    return {"seconds": time.perf_counter() - began, "figures": figures}


def run_child(what: str, *args: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run ``python -m bench.child WHAT ARGS`` (with ``env`` added to the environment) and
    return its JSON (wall seconds added)."""
    began = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.child", what, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env} if env else None,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"bench.child {what} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    out: dict[str, Any] = json.loads(proc.stdout)
    out["wall_seconds"] = time.perf_counter() - began
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.child")
    parser.add_argument(
        "what", choices=("report", "pandas", "one-pass", "floor", "metrics-overhead")
    )
    parser.add_argument("path", nargs="?", help="the data set (not for metrics-overhead)")
    parser.add_argument("--memory-limit")
    parser.add_argument("--temp-dir")
    parser.add_argument("--model-cache")
    parser.add_argument("--quick", action="store_true", help="metrics-overhead: smoke sizes")
    parser.add_argument("--rounds", type=int, default=7, help="metrics-overhead: rounds")
    args = parser.parse_args(argv)
    if args.what == "metrics-overhead":
        from bench.hot_path import metrics_overhead

        out = metrics_overhead(quick=args.quick, rounds=args.rounds)
    elif args.path is None:
        parser.error(f"{args.what} needs the data set's path")
    elif args.what == "report":
        out = run_report(args.path, args.memory_limit, args.temp_dir, args.model_cache)
    elif args.what == "one-pass":
        out = run_one_pass(args.path)
    elif args.what == "floor":
        out = run_floor(args.path)
    else:
        out = run_pandas(args.path)
    out["peak_rss_bytes"] = peak_rss_bytes()
    out["cpu_seconds"] = _cpu()  # every thread's, since the start
    json.dump(out, sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
