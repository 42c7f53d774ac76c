"""Where the time of a benchmark goes: ``python -m bench.profile NAME [--top N]``.

Runs one workload of a benchmark under cProfile and prints the functions with the most own
time (file:line), so a missed target points at code. Names:

* ``stamped``: third-party spans inside a logical request with the stamping processor;
* ``attempt``: attempt spans opened and closed by the context API;
* ``export``: ``ParquetSpanExporter.export`` of 512-span batches and ``force_flush``;
* ``drilldown``: DuckDB's ``EXPLAIN ANALYZE`` of the drill-down query on the data set
  (``--attempts``/``--seed`` as for ``python -m bench``).

cProfile adds a fixed cost per Python call, so it over-weights many small calls; use the
ranking, not the absolute figures.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider

from bench import export, hot_path
from bench.drilldown import QUERY
from bench.generate import generate
from bench.settings import FULL_ATTEMPTS
from retryscope import AttemptStampingProcessor, ParquetSpanExporter
from retryscope.analytics import connect


def _stamped() -> Callable[[], None]:
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())

    def work() -> None:
        with hot_path._request_scope(provider):
            hot_path._third_party_spans(provider.get_tracer("bench.thirdparty"), 20_000)

    return work


def _attempt() -> Callable[[], None]:
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())

    def work() -> None:
        for _ in range(10_000 // hot_path.PER_REQUEST):
            with hot_path._request(provider) as req:
                for _ in range(hot_path.PER_REQUEST):
                    with req.attempt("private-primary", route_release=hot_path.RELEASE):
                        pass

    return work


def _export() -> Callable[[], None]:
    spans = export.make_spans(20 * export.BATCH, 42)
    batches = [spans[i : i + export.BATCH] for i in range(0, len(spans), export.BATCH)]

    def work() -> None:
        directory = Path(tempfile.mkdtemp(prefix="retryscope-profile-"))
        try:
            exporter = ParquetSpanExporter(directory)
            for batch in batches:
                exporter.export(batch)
            exporter.force_flush()
            exporter.shutdown()
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    return work


WORKLOADS: dict[str, Callable[[], Callable[[], None]]] = {
    "stamped": _stamped,
    "attempt": _attempt,
    "export": _export,
}


def drilldown(data_dir: Path, attempts: int, seed: int) -> str:
    data = generate(data_dir, attempts, seed)
    con, _ = connect(data.path)
    lrid = data.sample_ids[0][0]
    sql = QUERY.format(column="logical_request_id").replace("?", "$id")
    con.sql(sql, params={"id": lrid}).to_arrow_table()  # warm
    rows = con.sql("EXPLAIN ANALYZE " + sql, params={"id": lrid}).fetchall()
    return "\n".join(str(r[1]) for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("name", choices=[*WORKLOADS, "drilldown"])
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--attempts", type=int, default=FULL_ATTEMPTS)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--data-dir", type=Path, default=Path("bench-data"))
    args = parser.parse_args(argv)
    if args.name == "drilldown":
        print(drilldown(args.data_dir, args.attempts, args.seed))
        return 0
    work = WORKLOADS[args.name]()
    work()  # warm-up
    profiler = cProfile.Profile()
    profiler.runcall(work)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
