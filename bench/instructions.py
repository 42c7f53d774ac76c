"""The live metrics' overhead in instructions: ``python -m bench.instructions [--items N]``.

Wall and CPU time on a shared machine move by more than the 10 % the metrics may add, so
this counts instructions instead: each hot-path workload (``bench/hot_path.py``: the stamped
third-party span, the context-API attempt, the logical request of two attempts) runs with
the metrics processor off and on, each in a fresh interpreter under ``valgrind
--tool=callgrind``, at ``N`` and at ``3N`` items. The difference of the two counts over
``2N`` is the instructions per item without the interpreter's start and the imports; the
ratio on / off is the overhead. Needs ``valgrind`` on PATH (Debian: ``apt-get install
valgrind``); runs two interpreters at a time.
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

from bench import hot_path
from retryscope import AttemptStampingProcessor

WORKLOADS = ("stamped", "attempt", "request")
"""Per item: a third-party span, an attempt (100 per request), a request of two attempts."""
_TOTAL = re.compile(r"^summary:\s+(\d+)", re.MULTILINE)


def workload(name: str, metrics: bool, items: int) -> None:
    """Run ``items`` of workload ``name`` (after one untimed warm-up item)."""
    provider = hot_path._metered() if metrics else TracerProvider()
    if not metrics:
        provider.add_span_processor(AttemptStampingProcessor())
    if name == "stamped":
        with hot_path._request_scope(provider):
            hot_path._third_party_spans(provider.get_tracer("bench.thirdparty"), items)
    elif name == "attempt":
        for _ in range(max(1, items // hot_path.PER_REQUEST)):
            with hot_path._request(provider) as req:
                for _ in range(hot_path.PER_REQUEST):
                    with req.attempt("private-primary", route_release=hot_path.RELEASE):
                        pass
    else:
        for _ in range(items):
            hot_path._small_request(provider)


def _count(name: str, metrics: bool, items: int) -> int:
    """Instructions of one interpreter running ``items`` of the workload under callgrind."""
    with tempfile.TemporaryDirectory(prefix="retryscope-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        env = {
            **os.environ,
            "PYTHONHASHSEED": "0",
            "RETRYSCOPE_DIGEST_KEY": "bench",
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
                "--metrics" if metrics else "--no-metrics",
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


def measure(items: dict[str, int]) -> dict[tuple[str, bool], float]:
    """Instructions per item of every workload, metrics off and on."""
    jobs = [
        (name, on, n)
        for name, size in items.items()
        for on in (False, True)
        for n in (size, 3 * size)
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: _count(*job), jobs), strict=True))
    return {
        (name, on): (counts[name, on, 3 * n] - counts[name, on, n]) / (2 * n)
        for name, n in items.items()
        for on in (False, True)
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions")
    parser.add_argument("--items", type=int, default=2_000, help="N (per-item counts: 3N - N)")
    parser.add_argument("--run", choices=WORKLOADS, help=argparse.SUPPRESS)
    parser.add_argument("--metrics", action=argparse.BooleanOptionalAction, default=False)
    args = parser.parse_args(argv)
    if args.run is not None:
        workload(args.run, args.metrics, 1)
        workload(args.run, args.metrics, args.items)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not on PATH (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    sizes = {"stamped": args.items, "attempt": args.items, "request": max(1, args.items // 4)}
    per_item = measure(sizes)
    for name in WORKLOADS:
        off, on = per_item[name, False], per_item[name, True]
        print(
            f"{name:<8} instructions per item: metrics off {off / 1e3:8.1f} k"
            f"  on {on / 1e3:8.1f} k  {on / off:.3f}×"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
