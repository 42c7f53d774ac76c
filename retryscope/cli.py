"""The ``retryscope`` command line (argparse; one subcommand per job).

Each subcommand parses its arguments here and calls the module that does the work, imported
only when the subcommand runs: the parser itself needs the core distribution alone, and a
subcommand whose extra is not installed says which extra to install.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from retryscope import __version__
from retryscope._environment import (
    CACHE_ENV,
    MEMORY_LIMIT_ENV,
    MODEL_ENV,
    WATCH_INTERVAL_S,
    WATCH_SETTLE_S,
)
from retryscope._extras import MissingExtraError, extra_needed
from retryscope._safe_text import for_terminal

if TYPE_CHECKING:
    from retryscope.analytics.commands import Engine


def _cmd_report(args: argparse.Namespace) -> int:
    from retryscope.analytics.commands import filters_from, report

    filters = filters_from(args.since, args.until, args.route, args.tenant, args.operation)
    return report(args.path, filters, args.format, _engine(args))


def _cmd_request(args: argparse.Namespace) -> int:
    from retryscope.analytics.commands import request

    return request(args.path, args.id, args.format)


def _cmd_findings(args: argparse.Namespace) -> int:
    from retryscope.analytics.commands import filters_from, findings_command

    filters = filters_from(args.since, args.until, args.route, args.tenant, args.operation)
    return findings_command(args.path, args.rule, filters, args.format, _engine(args))


def _cmd_whatif(args: argparse.Namespace) -> int:
    from retryscope.analytics.commands import filters_from, whatif_command

    filters = filters_from(args.since, args.until, args.route, args.tenant, args.operation)
    overrides = {
        "max_attempts": args.max_attempts,
        "no_fallback": args.no_fallback,
        "max_backoff_ms": args.max_backoff_ms,
        "retry_budget": args.retry_budget,
        "window_ms": None if args.window_s is None else round(args.window_s * 1000),
    }
    return whatif_command(args.path, args.policy, overrides, filters, args.format, _engine(args))


def _add_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", metavar="T", help="requests started at/after T (ISO-8601, UTC)")
    p.add_argument("--until", metavar="T", help="requests started before T (ISO-8601, UTC)")
    p.add_argument("--route", metavar="R", help="requests that made an attempt on route R")
    p.add_argument("--tenant", metavar="T", help="requests of tenant T")
    p.add_argument("--operation", metavar="OP", help="requests of operation OP")


def _add_cache(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--model-cache",
        metavar="DIR",
        default=os.environ.get(CACHE_ENV) or None,
        help=f"directory caching the built audit model between runs; {what} "
        f"(default: ${CACHE_ENV}; none)",
    )
    p.add_argument(
        "--memory-limit",
        metavar="SIZE",
        default=os.environ.get(MEMORY_LIMIT_ENV) or None,
        help="DuckDB's memory limit, e.g. 1.5GB: work beyond it spills to disk (slower); "
        f"with --model-cache the model is also written to disk as it is built "
        f"(default: ${MEMORY_LIMIT_ENV}; else 80%% of RAM)",
    )


def _add_engine(p: argparse.ArgumentParser) -> None:
    _add_cache(p, "an unchanged data set then skips the build")
    p.add_argument(
        "--model",
        metavar="DIR",
        default=os.environ.get(MODEL_ENV) or None,
        help="a model directory (or s3:// prefix) built by `retryscope model --engine spark`: "
        f"read instead of building the model (default: ${MODEL_ENV}; none)",
    )


def _engine(args: argparse.Namespace) -> Engine:
    from retryscope.analytics.commands import Engine

    return Engine(model_cache=args.model_cache, memory_limit=args.memory_limit, model=args.model)


def _cmd_demo(args: argparse.Namespace) -> int:
    from retryscope.demo import run_demo

    return run_demo(
        out=args.out,
        requests=args.requests,
        seed=args.seed,
        serve_ui=not args.no_ui,
        port=args.port,
        scenario=args.scenario,
    )


def _cmd_ui(args: argparse.Namespace) -> int:
    from retryscope.dashboards.serve import serve

    return serve(
        args.path,
        port=args.port,
        address=args.address,
        trace_url=args.trace_url,
        model_cache=args.model_cache,
        memory_limit=args.memory_limit,
        model=args.model,
    )


def _cmd_ingest(args: argparse.Namespace) -> int:
    from retryscope.instrumentation import ExportConfig, Partitioning
    from retryscope.instrumentation.ingest import ingest
    from retryscope.instrumentation.ingest.limits import IngestLimits

    config = ExportConfig.from_env().with_overrides(
        partitioning=Partitioning(args.partitioning) if args.partitioning else None,
        rotate_rows=args.rotate_rows,
    )
    limits = IngestLimits.from_env(
        max_decompressed_bytes=args.max_decompressed_bytes,
        max_ratio=args.max_ratio,
        max_message_bytes=args.max_message_bytes,
        max_json_depth=args.max_json_depth,
    )
    try:
        summary = ingest(
            args.sources,
            args.out,
            config=config,
            limits=limits,
            report=lambda problem: print(f"warning: {for_terminal(problem)}", file=sys.stderr),
        )
    except FileNotFoundError:
        raise
    except OSError as exc:  # output not writable, source not readable: sources done so far stay
        print(f"retryscope ingest: error: {for_terminal(str(exc))}", file=sys.stderr)
        return 2
    print(summary.format(), flush=True)
    if args.model_cache is None:
        return summary.exit_code
    # the model of every time partition this run wrote is brought up to date now
    with extra_needed("retryscope ingest --model-cache", "analytics"):
        from retryscope.analytics.commands import Engine, model_command

        engine = Engine(model_cache=args.model_cache, memory_limit=args.memory_limit)
        return max(summary.exit_code, model_command(args.out, engine))


def _size(text: str) -> int:
    from retryscope.instrumentation.ingest.limits import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_ingest_limits(p: argparse.ArgumentParser) -> None:
    """The bounds of ``ingest`` (``IngestLimits``; defaults from ``RETRYSCOPE_INGEST_*``)."""
    env = "RETRYSCOPE_INGEST_"
    p.add_argument(
        "--max-decompressed-bytes",
        type=_size,
        metavar="SIZE",
        help=f"most bytes one compressed source may give (default: ${env}MAX_DECOMPRESSED_BYTES "
        "or 4GiB)",
    )
    p.add_argument(
        "--max-ratio",
        type=float,
        metavar="R",
        help=f"most decompressed bytes per compressed byte (default: ${env}MAX_RATIO or 200)",
    )
    p.add_argument(
        "--max-message-bytes",
        type=_size,
        metavar="SIZE",
        help="longest JSON line, document or protobuf message "
        f"(default: ${env}MAX_MESSAGE_BYTES or 16MiB)",
    )
    p.add_argument(
        "--max-json-depth",
        type=int,
        metavar="N",
        help=f"deepest JSON nesting (default: ${env}MAX_JSON_DEPTH or 64)",
    )


def _cmd_model(args: argparse.Namespace) -> int:
    if args.watch and args.engine == "spark":
        raise ValueError("--watch keeps a --model-cache current: not with --engine spark")
    if args.engine == "spark":
        from retryscope.analytics.distributed import spark_model_command

        return spark_model_command(
            args.path, model=args.model, master=args.master, partitions=args.partitions
        )
    if args.watch:
        from retryscope.analytics.commands import watch_command

        return watch_command(args.path, _engine(args), interval=args.interval, settle=args.settle)
    from retryscope.analytics.commands import model_command

    return model_command(args.path, _engine(args))


def _cmd_recover(args: argparse.Namespace) -> int:
    from pathlib import Path

    from retryscope.instrumentation.export import recover_segments

    root = Path(args.path)
    if not root.is_dir():
        raise FileNotFoundError(f"no data directory at {args.path!r}")
    found = recover_segments(root, force=args.force)
    for problem in found.problems():
        print(f"warning: {problem}", file=sys.stderr)
    print(found.summary())
    for line in found.kept():
        print(line)
    return 1 if found.failed else 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _cmd_lab(args: argparse.Namespace) -> int:
    from pathlib import Path

    from retryscope.control import run_lab

    result = run_lab(Path(args.out))
    sys.stdout.write(result.text())
    return 0 if result.passed else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retryscope",
        description="Audit retries and fallbacks of AI/LLM harnesses from OpenTelemetry spans.",
    )
    parser.add_argument("--version", action="version", version=f"retryscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("report", help="print the audit report of a data set")
    p.add_argument("path", help="directory (or file, or s3:// prefix) of span Parquet files")
    _add_filters(p)
    _add_engine(p)
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.set_defaults(func=_cmd_report, extra="analytics")

    p = sub.add_parser("request", help="show one logical request and its attempts in order")
    p.add_argument("path", help="data directory")
    p.add_argument("id", help="logical request id, trace id or idempotency digest")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.set_defaults(func=_cmd_request, extra="analytics")

    p = sub.add_parser("findings", help="list violations and anomalies, linked to requests")
    p.add_argument("path", help="data directory")
    p.add_argument("--rule", metavar="R", help="only findings of rule R (see README Findings)")
    _add_filters(p)
    _add_engine(p)
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.set_defaults(func=_cmd_findings, extra="analytics")

    p = sub.add_parser("whatif", help="replay recorded requests under another retry policy")
    p.add_argument("path", help="data directory")
    p.add_argument(
        "--policy", metavar="FILE", help="control-plane policy (JSON, or TOML by .toml suffix)"
    )
    p.add_argument("--max-attempts", type=int, metavar="N", help="total attempts per request")
    p.add_argument("--no-fallback", action="store_true", help="never use a fallback route")
    p.add_argument("--max-backoff-ms", type=int, metavar="M", help="cap of a retry's delay")
    p.add_argument(
        "--retry-budget", type=float, metavar="F", help="retries per first attempt (0.1 = 10 %%)"
    )
    p.add_argument("--window-s", type=float, metavar="S", help="retry-budget window (60 s)")
    _add_filters(p)
    _add_engine(p)
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.set_defaults(func=_cmd_whatif, extra="analytics")

    p = sub.add_parser("demo", help="simulate harness traffic, report it, serve the UI")
    p.add_argument("--out", default="retryscope-data", help="data directory (default: %(default)s)")
    p.add_argument("--requests", type=int, default=300, help="logical requests to simulate")
    p.add_argument("--seed", type=int, default=7, help="seed of the simulation")
    p.add_argument(
        "--scenario",
        choices=(
            "all",
            "healthy",
            "outage-storm",
            "nested-sdk",
            "deadline-squeeze",
            "unsafe-fallback",
        ),
        default="all",
        help="traffic to simulate (default: %(default)s, the requests shared by all five)",
    )
    p.add_argument("--no-ui", action="store_true", help="stop after printing the report")
    p.add_argument("--port", type=int, default=8501, help="UI port (default: %(default)s)")
    p.set_defaults(func=_cmd_demo, extra="demo")

    p = sub.add_parser(
        "ingest",
        help="turn OTLP trace files from a Collector (JSON lines, S3 layouts, protobuf) into "
        "span Parquet",
    )
    p.add_argument("sources", nargs="+", metavar="SRC", help="files or directories to read")
    p.add_argument("--out", required=True, help="data directory to write into")
    p.add_argument(
        "--partitioning",
        choices=("hour", "day", "none"),
        default=None,
        help="Hive partitions by span start time (default: RETRYSCOPE_PARQUET_PARTITIONING "
        "or hour); file modes, row groups and codec also follow RETRYSCOPE_PARQUET_*",
    )
    p.add_argument(
        "--rotate-rows", type=int, default=None, help="rows per output file (default: 200000)"
    )
    _add_ingest_limits(p)
    _add_cache(p, "the model of each time partition the run writes is brought up to date")
    p.set_defaults(func=_cmd_ingest, extra="ingest")

    p = sub.add_parser(
        "recover",
        help="write as Parquet the spans a writer that died left in its segments (the next "
        "exporter on the directory does it too)",
    )
    p.add_argument("path", help="data directory")
    p.add_argument(
        "--force",
        action="store_true",
        help="also take segments of writers that ran on another host, or that hold no lock "
        "and whose pid is in use (only once they are known to be gone); never those of a "
        "writer holding its lock",
    )
    p.set_defaults(func=_cmd_recover, extra=None)

    p = sub.add_parser(
        "model", help="build the cached audit model of a data set (unless it is up to date)"
    )
    p.add_argument("path", help="data directory (or s3:// prefix with --engine spark)")
    _add_engine(p)
    p.add_argument(
        "--engine",
        choices=("duckdb", "spark"),
        default="duckdb",
        help="duckdb: into --model-cache on this machine; spark: on a Spark cluster, DuckDB "
        "in each task, into the model directory --model (default: PATH.model) (default: "
        "%(default)s)",
    )
    p.add_argument(
        "--master",
        metavar="URL",
        help="Spark master, e.g. local[4], local-cluster[2,1,1024], spark://host:7077, yarn "
        "(default: Spark's own; under spark-submit use its --master)",
    )
    p.add_argument(
        "--partitions",
        type=_positive,
        metavar="K",
        help="Spark tasks (default: from the span rows and the executors' memory)",
    )
    p.add_argument(
        "--watch",
        action="store_true",
        help="keep running beside the writer: build each time partition once its files are "
        "closed, and again when a late or rewritten file changes it (one watcher per model; "
        "Ctrl-C stops)",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=WATCH_INTERVAL_S,
        metavar="S",
        help="with --watch: seconds between looks at the data set (default: %(default)s)",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=WATCH_SETTLE_S,
        metavar="S",
        help="with --watch: the newest time partition is built once no file of it is newer "
        "than S seconds (older ones once a later one has files) (default: %(default)s)",
    )
    p.set_defaults(func=_cmd_model, extra="analytics")

    p = sub.add_parser("ui", help="serve the Streamlit audit UI on 127.0.0.1")
    p.add_argument("path", help="data directory")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--address", default="127.0.0.1", help="bind address (default: %(default)s)")
    p.add_argument(
        "--trace-url",
        default=None,
        help="URL template linking a request to a tracing backend, e.g. "
        "http://localhost:16686/trace/{trace_id} (default: $RETRYSCOPE_TRACE_URL)",
    )
    _add_engine(p)
    p.set_defaults(func=_cmd_ui, extra="ui")

    p = sub.add_parser(
        "lab", help="run the retry/fallback control-plane lab (reference + one case per rule)"
    )
    p.add_argument(
        "--out",
        default="retryscope-lab",
        help="directory for the JSON report <policy-sha256>.json (default: %(default)s)",
    )
    p.set_defaults(func=_cmd_lab, extra=None)
    return parser


def _run(args: argparse.Namespace) -> int:
    """Run the subcommand; a module of its extra found missing becomes MissingExtraError."""
    if args.extra is None:
        return int(args.func(args))
    extra = "spark" if getattr(args, "engine", None) == "spark" else args.extra
    with extra_needed(f"retryscope {args.command}", extra):
        return int(args.func(args))


def _stdout_closed() -> int:
    """The reader of our output went away (``retryscope findings | head``): stop quietly,
    as a command killed by SIGPIPE does. Standard output is pointed at /dev/null so the
    interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):  # stdout may have no descriptor
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code. Output to a closed pipe ends it quietly (141)."""
    try:
        return _main(argv)
    except BrokenPipeError:
        return _stdout_closed()


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:  # --help, --version, a usage error: their text is out before exiting
        sys.stdout.flush()
        raise
    try:
        code = _run(args)
        sys.stdout.flush()
        return code
    except MissingExtraError as exc:
        print(exc, file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError, MemoryError) as exc:
        print(f"retryscope {args.command}: error: {for_terminal(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
