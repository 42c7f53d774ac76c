"""Stamping's and the live metrics' overhead in instructions: ``python -m bench.instructions``.

Wall and CPU time on a shared machine move by more than the 10 % the metrics may add, so
this counts instructions instead: each hot-path workload (``bench/hot_path.py``: the stamped
third-party span, the context-API attempt, the logical request of two attempts) runs
without retryscope (``plain``: the same spans, no processor; not for the request), with the
stamping processor alone (``stamping``) and with it handing ended spans to the metrics
processor (``metrics``), on the SDK's private fast paths and on its public API only
(``RETRYSCOPE_SDK_PUBLIC_ONLY=1``), each in a fresh interpreter under ``valgrind
--tool=callgrind``, at ``N`` and at ``3N`` items. The difference of the two counts over
``2N`` is the instructions per item without the interpreter's start and the imports;
stamping / plain is stamping's overhead, metrics / stamping the metrics'. Needs
``valgrind`` on PATH (Debian: ``apt-get install valgrind``); runs two interpreters at a
time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from bench import hot_path
from retryscope import AttemptStampingProcessor

WORKLOADS = ("stamped", "attempt", "request")
"""Per item: a third-party span, an attempt (100 per request), a request of two attempts."""
MODES = ("plain", "stamping", "metrics")
PATHS = ("fast", "public")
_TOTAL = re.compile(r"^summary:\s+(\d+)", re.MULTILINE)


def workload(name: str, mode: str, items: int) -> None:
    """Run ``items`` of workload ``name`` (after one untimed warm-up item)."""
    provider = hot_path._metered() if mode == "metrics" else TracerProvider()
    if mode == "stamping":
        provider.add_span_processor(AttemptStampingProcessor())
    if name == "stamped" and mode == "plain":
        tracer = provider.get_tracer("bench.thirdparty")
        with tracer.start_as_current_span("parent"):
            hot_path._third_party_spans(tracer, items)
    elif name == "stamped":
        with hot_path._request_scope(provider):
            hot_path._third_party_spans(provider.get_tracer("bench.thirdparty"), items)
    elif name == "attempt" and mode == "plain":
        attributes = hot_path._attempt_attributes(
            lambda p: p.add_span_processor(AttemptStampingProcessor())
        )
        tracer = provider.get_tracer("bench.plain")
        for _ in range(max(1, items // hot_path.PER_REQUEST)):
            with tracer.start_as_current_span("parent"):
                for _ in range(hot_path.PER_REQUEST):
                    with tracer.start_as_current_span(
                        "attempt private-primary", kind=SpanKind.CLIENT, attributes=attributes
                    ):
                        pass
    elif name == "attempt":
        hot_path._attempt_case(provider, max(hot_path.PER_REQUEST, items))()
    else:
        for _ in range(items):
            hot_path._small_request(provider)


Job = tuple[str, str, str, int]
"""Workload, mode, path, items."""


def _count(job: Job) -> int:
    """Instructions of one interpreter running ``job`` under callgrind."""
    name, mode, path, items = job
    with tempfile.TemporaryDirectory(prefix="retryscope-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        env = {
            **os.environ,
            "PYTHONHASHSEED": "0",
            "RETRYSCOPE_DIGEST_KEY": "bench",
            "RETRYSCOPE_SDK_PUBLIC_ONLY": "1" if path == "public" else "0",
            # OpenBLAS's idle threads (numpy is imported) spin for as long as the run lasts:
            # instructions of neither workload, counted at random into one or the other
            "OPENBLAS_NUM_THREADS": "1",
        }
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-m",
                "bench.instructions",
                "--run",
                name,
                "--mode",
                mode,
                "--items",
                str(items),
            ],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        found = _TOTAL.search(out.read_text())
        if found is None:
            raise RuntimeError(f"no instruction total in {out}")
        return int(found.group(1))


def measure(
    items: dict[str, int], paths: tuple[str, ...] = PATHS
) -> dict[tuple[str, str, str], float]:
    """Instructions per item of every workload, mode and path."""
    jobs = [
        (name, mode, path, n)
        for name, size in items.items()
        for mode in MODES
        if not (name == "request" and mode == "plain")
        for path in paths
        for n in (size, 3 * size)
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(jobs, pool.map(_count, jobs), strict=True))
    return {
        (name, mode, path): (counts[name, mode, path, 3 * n] - counts[name, mode, path, n])
        / (2 * n)
        for (name, mode, path, n) in jobs
        if (name, mode, path, 3 * n) in counts
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions")
    parser.add_argument("--items", type=int, default=2_000, help="N (per-item counts: 3N - N)")
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--run", choices=WORKLOADS, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, default="stamping", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run is not None:
        workload(args.run, args.mode, 1)
        workload(args.run, args.mode, args.items)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not on PATH (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    sizes = {
        name: args.items if name != "request" else max(1, args.items // 4)
        for name in args.workloads
    }
    per_item = measure(sizes, tuple(args.paths))
    print("instructions per item (k); plain Python, no compiled module")
    for name in sizes:
        for path in args.paths:
            plain = per_item.get((name, "plain", path))
            stamping, metrics = per_item[name, "stamping", path], per_item[name, "metrics", path]
            stamped = f"plain {plain / 1e3:7.1f}  " if plain else " " * 15
            ratio = f"stamping {stamping / plain:.3f}×  " if plain else " " * 17
            print(
                f"{name:<8} {path:<6} {stamped}stamping {stamping / 1e3:7.1f}"
                f"  metrics {metrics / 1e3:7.1f}   {ratio}metrics {metrics / stamping:.3f}×"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
