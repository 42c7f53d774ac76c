"""``python -m bench [NAME ...]`` (``make bench ARGS=...``): run the benchmarks, check targets.

Prints, for every benchmark, each ratio against its baseline measured side by side in this
run, with the absolute figures; exits 1 when a target is missed (unless ``--no-targets``)
and 2 when a benchmark fails to run. ``python -m bench export-rss [ARGS]`` runs the exporter's
peak-RSS check instead (``bench/export_rss.py``: ``--spans N``, ``--rotate-rows N``, ``--out DIR``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from bench.harness import Result, Verdict
from bench.settings import Settings

BENCHMARKS: dict[str, str] = {
    "hot_path": "stamping on the hot path (target 1)",
    "long_attempt": "a stamped send after 10,000 distinct calls in one attempt vs after 1 (≤ 1.2×)",
    "export": "ParquetSpanExporter vs OTLP encoding, bytes/span (target 2)",
    "analytics": "full report and headline metrics vs pandas (target 3)",
    "model_cache": "a model cache vs none on sparse and dense data (cold ≤ 1.2×)",
    "maintained": "the model kept current: an hour in it, and the report, vs the one pass (≤ 1.5×)",
    "headline": "the Overview's headline (≤ 2 s), the report (≤ 10× the one pass): model current",
    "drilldown": "one logical request's rows (target 4)",
    "ingest": "retryscope ingest vs json.loads (target 5)",
    "ui": "UI pages warm (target 6)",
    "convoy": "the exporter beside a CPU-bound application thread (drops, export latency)",
    "distributed": "the model built on Spark vs single-node, per-partition task time",
}
PACKAGES = ("opentelemetry-sdk", "pyarrow", "duckdb", "pandas", "numpy", "streamlit", "pyspark")


def machine() -> dict[str, str]:
    """Where the figures were measured."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cores": str(
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        ),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        **versions,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="retryscope benchmarks: ratios against baselines measured side by side.",
        epilog="Benchmarks: " + "; ".join(f"{k}: {v}" for k, v in BENCHMARKS.items()),
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--huge",
        action="store_true",
        help="also write 100 M attempts and run the report out of core (long; needs ~15 GB disk)",
    )
    parser.add_argument("--no-targets", action="store_true", help="report misses, exit 0 anyway")
    parser.add_argument("--attempts", type=int, help="attempts in the analytics data set")
    parser.add_argument(
        "--seed", type=int, default=42, help="generator seed (default: %(default)s)"
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default: 7, quick: 3)")
    parser.add_argument(
        "--data-dir", type=Path, default=Path("bench-data"), help="cache of generated data"
    )
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(
            f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}"
        )
    if args.attempts is not None and args.attempts < 1:
        parser.error("--attempts must be at least 1")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["export-rss"]:
        from bench.export_rss import main as export_rss

        return export_rss(argv[1:])
    args = parse_args(argv)
    settings = Settings.make(
        quick=args.quick,
        huge=args.huge,
        seed=args.seed,
        attempts=args.attempts,
        data_dir=args.data_dir,
        rounds=args.rounds,
    )
    where = machine()
    print("retryscope benchmarks  " + "  ".join(f"{k} {v}" for k, v in where.items()), flush=True)
    results: list[Result] = []
    failed: list[str] = []
    for name in args.names or list(BENCHMARKS):
        print(f"\n[{name}] {BENCHMARKS[name]}", flush=True)
        began = time.perf_counter()
        run: Callable[[Settings], list[Result]] = importlib.import_module(f"bench.{name}").run
        try:
            got = run(settings)
        except Exception:
            traceback.print_exc()
            failed.append(name)
            print(f"  {name}: FAILED to run", flush=True)
            continue
        for result in got:
            print(result.line(), flush=True)
        print(f"  ({time.perf_counter() - began:.0f} s)", flush=True)
        results += got
    missed = [r for r in results if r.verdict is Verdict.MISSED]
    print(
        f"\n{len(results)} results: {sum(r.verdict is Verdict.MET for r in results)} met, "
        f"{len(missed)} missed, {sum(r.verdict is Verdict.SKIPPED for r in results)} skipped"
        + (f"; failed to run: {', '.join(failed)}" if failed else "")
    )
    for r in missed:
        print(f"  MISSED  {r.bench}: {r.name}")
    if args.json is not None:
        payload = {"machine": where, "results": [asdict(r) for r in results], "failed": failed}
        args.json.write_text(json.dumps(payload, indent=1, default=str))
    if failed:
        return 2
    return 1 if missed and not args.no_targets else 0


if __name__ == "__main__":
    sys.exit(main())
