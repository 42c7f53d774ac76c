"""What the analytics subcommands of the CLI do (``report``, ``request``, ``findings``,
``whatif``, ``model``; argparse is in ``retryscope.cli``): open the data set as an
:class:`~retryscope.analytics.AuditModel`, run the analysis, print it."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb
import pyarrow.compute as pc

from retryscope._environment import CACHE_ENV, WATCH_INTERVAL_S, WATCH_SETTLE_S
from retryscope._safe_text import for_terminal
from retryscope.analytics._audit_model import AuditModel, connect
from retryscope.analytics._dataset import discover, new_connection, subset
from retryscope.analytics._filters import Filters, parse_time
from retryscope.analytics._findings import findings
from retryscope.analytics._object_store import is_url
from retryscope.analytics._render import json_rows, markdown_table, text_table
from retryscope.analytics._report import build_report, format_json, format_markdown, format_text
from retryscope.analytics._requests import request_detail
from retryscope.analytics.model._cache import model_directory
from retryscope.analytics.model._progress import TerminalProgress

CACHE_HINT = (
    f"tip: --model-cache DIR (or ${CACHE_ENV}) keeps the model between runs: the next run "
    "on this data set reads it and builds only new or changed partitions"
)
"""Printed after a long model build that no cache kept (on a terminal only)."""

REQUEST_COLUMNS = (
    "layer",
    "attempt_ordinal",
    "parent_layer",
    "parent_attempt_ordinal",
    "route_id",
    "start_time",
    "duration_ms",
    "backoff_delay_ms",
    "retry_after_ms",
    "not_before",
    "deadline_remaining_ms",
    "cost_micros",
    "outcome",
    "outcome_kind",
    "decision",
)
"""Columns of ``retryscope request`` in text/markdown (JSON has them all)."""


@dataclass(frozen=True, slots=True)
class Engine:
    """How a command runs its analysis: the model cache directory, DuckDB's memory
    limit (beyond it work spills to disk; None: DuckDB's default, 80 % of RAM), and a
    model directory built by a distributed engine to read instead of building one."""

    model_cache: str | None = None
    memory_limit: str | None = None
    model: str | None = None


@contextmanager
def _opened(
    path: str, engine: Engine = Engine(), files: Collection[str] | None = None
) -> Iterator[AuditModel]:
    """The data set's audit model, set up as ``engine`` says; afterwards, a warning for
    every file that was skipped (unreadable when listed, or undecodable when the command
    first read it). DuckDB running out of memory is a :class:`MemoryError` that names the
    limit. A model build that runs for more than a second shows its progress on stderr
    when that is a terminal, and a long one that no model cache keeps ends with
    :data:`CACHE_HINT`. ``files``: only these files of the data set (a watcher's closed
    partitions)."""
    with _memory_named(engine):
        model, dataset = connect(
            path if files is None else subset(discover(path), files),
            con=new_connection(memory_limit=engine.memory_limit),
            model_cache=engine.model_cache,
        )
        cacheable = engine.model_cache is None and engine.model is None and not dataset.is_remote
        model.progress = TerminalProgress(hint=CACHE_HINT if cacheable else None)
        if engine.model is not None:
            from retryscope.analytics.distributed._layout import attach_model

            attach_model(model, engine.model)
        try:
            yield model
        finally:
            for skipped in model.skipped_files():
                warning = f"warning: skipped {skipped.path}: {skipped.reason}"
                print(for_terminal(warning), file=sys.stderr)


@contextmanager
def _memory_named(engine: Engine) -> Iterator[None]:
    try:
        yield
    except duckdb.OutOfMemoryException as exc:
        limit = engine.memory_limit or "DuckDB's default limit (80 % of RAM)"
        reason = str(exc).splitlines()[0]
        raise MemoryError(
            f"the analysis needs more memory than {limit} allows, even spilling to disk "
            f"({reason}); raise --memory-limit or analyse fewer partitions at a time"
        ) from exc


def filters_from(
    since: str | None,
    until: str | None,
    route: str | None,
    tenant: str | None,
    operation: str | None = None,
) -> Filters:
    return Filters(
        since=parse_time(since) if since else None,
        until=parse_time(until) if until else None,
        route=route,
        tenant=tenant,
        operation=operation,
    )


def report(path: str, filters: Filters, fmt: str, engine: Engine = Engine()) -> int:
    """Print the report of ``path``; exit 1 when it counts no logical request (the reason,
    the report's ``empty_reason``, also on stderr)."""
    rendered: dict[str, Callable[[dict[str, object]], str]] = {
        "json": format_json,
        "markdown": format_markdown,
        "text": format_text,
    }
    with _opened(path, engine) as model:
        report = build_report(model, filters)
        print(rendered[fmt](report), flush=True)  # the report first, whatever follows
        if engine.model_cache is not None and engine.model is None and filters == Filters():
            # the UI's first start on this data set and model reads these figures
            from retryscope.analytics._figures import keep_first_page

            with contextlib.suppress(OSError):
                keep_first_page(model, engine.model_cache, report)
    if report["empty_reason"] is not None:
        print(for_terminal(f"retryscope report: {report['empty_reason']}"), file=sys.stderr)
        return 1
    return 0


def request(path: str, ident: str, fmt: str) -> int:
    """Print one logical request; exit 1 when ``ident`` names none."""
    with _opened(path) as model:
        summary, attempts = request_detail(model, ident)
    if summary.num_rows == 0:
        print(
            f"retryscope request: no logical request with id, trace id or idempotency "
            f"digest {ident!r}",
            file=sys.stderr,
        )
        return 1
    if fmt == "json":
        shown = {"requests": json_rows(summary), "attempts": json_rows(attempts)}
        print(json.dumps(shown, indent=2))
        return 0
    table = markdown_table if fmt == "markdown" else text_table
    for row in summary.to_pylist():
        lrid = row["logical_request_id"]
        print(
            f"logical request {lrid}  trace {row['trace_id']}  tenant {row['tenant']}  "
            f"operation {row['operation']}  terminal {row['terminal'] or 'unknown'}  "
            f"retried layers {','.join(row['retried_layers']) or '-'}"
        )
        mine = attempts.filter(pc.equal(attempts.column("logical_request_id"), lrid))
        print(table(mine.select(list(REQUEST_COLUMNS))))
        print()
    return 0


def findings_command(
    path: str, rule: str | None, filters: Filters, fmt: str, engine: Engine = Engine()
) -> int:
    with _opened(path, engine) as model:
        table = findings(model, rule=rule, filters=filters)
    if fmt == "json":
        print(json.dumps(json_rows(table), indent=2))
    elif fmt == "markdown":
        print(markdown_table(table))
    else:
        print(text_table(table))
    return 0


def whatif_command(
    path: str,
    policy_file: str | None,
    overrides: dict[str, object],
    filters: Filters,
    fmt: str,
    engine: Engine = Engine(),
) -> int:
    """Replay a data set under a policy file and/or flags; print the summary."""
    import json

    from retryscope.analytics.replay._whatif import WhatIf, read_policy_file, whatif

    given = {k: v for k, v in overrides.items() if v is not None and v is not False}
    if policy_file is not None:
        policy = WhatIf.from_policy(read_policy_file(policy_file), **given)
    elif given:
        policy = WhatIf(**given)  # type: ignore[arg-type]
    else:
        raise ValueError("give --policy FILE or at least one of the what-if flags")
    with _opened(path, engine) as model:
        table = whatif(model, policy, filters=filters)
    if fmt == "json":
        rows = [
            {
                k: int(v) if isinstance(v, float) and r["metric"] != "success_rate" else v
                for k, v in r.items()
            }
            for r in table.to_pylist()
        ]
        print(json.dumps({"policy": policy.describe(), "summary": rows}, indent=2))
        return 0
    print(f"what-if replay under: {policy.describe()}")
    print(markdown_table(table) if fmt == "markdown" else text_table(table))
    unknown = table.column("unknown_requests")[0].as_py() if table.num_rows else 0
    estimated = table.column("estimated_requests")[0].as_py() if table.num_rows else 0
    print(
        f"\nreplayed_low counts only what the recording shows; {unknown} request(s) would "
        f"retry beyond the recording (outcome unknown: replayed_high assumes they succeed "
        f"after every allowed attempt); {estimated} success(es) would run at another time "
        f"(recorded outcome assumed)."
    )
    return 0


def model_command(path: str, engine: Engine, files: Collection[str] | None = None) -> int:
    """Bring the data set's model in ``engine.model_cache`` up to date: build the time
    partitions that are new or changed since the last build (run after ingest, e.g. from
    cron, so interactive analyses find it ready); ``files``: the model of only these files
    of the data set (a watcher's closed partitions)."""
    if not engine.model_cache:
        raise ValueError("give --model-cache DIR (or set RETRYSCOPE_MODEL_CACHE)")
    with _opened(path, engine, files) as model:
        cache = model.cache
        if cache is None:
            raise ValueError(f"{path} is in an object store: its model is not cached")
        stats = model.build().stats
        directory = model_directory(model.dataset.root, cache)
        if not (directory / "manifest.json").is_file():
            return 1  # the warning said why it could not be written
        # the UI's first start on this data set and model reads these figures
        from retryscope.analytics._figures import keep_first_page

        with contextlib.suppress(OSError):
            keep_first_page(model, cache)
    size = sum(p.stat().st_size for p in directory.rglob("*.parquet"))
    built, parts = int(stats["built"]), int(stats["partitions"])
    state = "up to date" if not built else "built" if built == parts else "updated"
    how = f"{built} of {parts} time partitions built" if built else f"{parts} time partitions"
    if built and int(stats["request_partitions"]) > 1:
        how += f", the largest in {stats['request_partitions']} request partitions"
    if int(stats["straddlers"]):
        how += f", {stats['straddlers']:,} requests across partitions"
    print(f"{state}: {directory} ({size / 2**20:,.1f} MiB, {how})", flush=True)
    return 0


def watch_command(
    path: str,
    engine: Engine,
    *,
    interval: float = WATCH_INTERVAL_S,
    settle: float = WATCH_SETTLE_S,
    stop: threading.Event | None = None,
) -> int:
    """Keep the data set's model in ``engine.model_cache`` current until ``stop`` is set
    (or the process is interrupted): :func:`model_command` over the closed time
    partitions each time their files changed, a partition being closed once a later one
    has files or none of its files is newer than ``settle`` seconds
    (:mod:`retryscope.analytics.model._watch`). One watcher per model: a second says so
    and waits for the first to stop."""
    from retryscope.analytics.model._store import Modes
    from retryscope.analytics.model._watch import sole_watcher, watch

    if not engine.model_cache:
        raise ValueError("give --model-cache DIR (or set RETRYSCOPE_MODEL_CACHE)")
    if not interval > 0:
        raise ValueError(f"--interval {interval} is not a positive number of seconds")
    if not settle >= 0:
        raise ValueError(f"--settle {settle} is not a number of seconds")
    if is_url(path):
        raise ValueError(f"{path} is in an object store: its model is not cached")
    root = os.path.abspath(path)  # it may not exist yet: the writer starts after its sidecar

    def say(message: str) -> None:
        print(f"retryscope model --watch: {for_terminal(message)}", file=sys.stderr, flush=True)

    def failed(exc: Exception) -> None:
        say(f"not updated ({type(exc).__name__}: {exc}); tried again at the next change")

    def update(files: Collection[str]) -> None:
        model_command(root, engine, files)

    directory = model_directory(root, engine.model_cache)
    with sole_watcher(directory, Modes.of(root), say):
        watch(root, update, interval=interval, settle=settle, stop=stop, failed=failed)
    return 0
