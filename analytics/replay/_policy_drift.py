"""Policy drift: re-run the control-plane evaluator on each request's recorded attempts.

A request the control plane ran carries its policy's digest (``policy_digest``, the SHA-256
of the policy's canonical JSON) and the policy document itself (``policy_document``, on
its logical request span), so the data set is self-describing wherever the spans go —
straight to Parquet, or through a Collector and ``retryscope ingest``. A harness that does
not use the controller can still put the document next to the data as a side file,
``<data>/_policies/<sha256>.json`` (:func:`write_policy_side_file`). The request span also
holds what the request bound at admission (``logical_request_digest``,
``idempotency_digest``, ``deadline``) and, as ``retryscope.routing`` events, the shared
guards' verdicts. With those, the retry owner's recorded attempts are checked against what
the policy planned: the first attempt the evaluator rejects is one drift row naming the
check (its ``AttemptRejected`` subclass), the field and the observed and planned numbers.
A request whose attempts all match but whose recorded terminal differs from the
evaluator's is a budget drift too.

Grouping is DuckDB SQL (``sql/policy_drift.sql``); the evaluator is pure Python, called once
per request through a DuckDB Python function, so the work is bounded by a cap (default
:data:`DEFAULT_MAX_REQUESTS` requests, a deterministic sample by hash of the logical request
id beyond it).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs
from duckdb.func import FunctionNullHandling
from duckdb.sqltypes import BIGINT, VARCHAR
from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope._fs import make_dirs
from retryscope.analytics import _object_store as object_store
from retryscope.analytics._dataset import DataSet
from retryscope.analytics._filters import Filters
from retryscope.analytics._queries import create_table, load
from retryscope.canonical import canonical_json
from retryscope.control import (
    Admission,
    AttemptRejected,
    CostMismatch,
    DispatchAfterDeadline,
    EarlyStart,
    Gate,
    GateMismatch,
    GuardKind,
    GuardSnapshot,
    HedgeRejected,
    JitterOutOfRange,
    ObservedAttempt,
    PolicyError,
    PostTerminalAttempt,
    Receipt,
    ReleaseMismatch,
    RetryPolicy,
    RouteMismatch,
    ScheduleDrift,
    attempts_from_rows,
    evaluate,
    policy_from_json,
    policy_sha256,
    policy_to_obj,
)
from retryscope.instrumentation import ExportConfig
from retryscope.vocabulary import Terminal

if TYPE_CHECKING:
    from retryscope.analytics._audit_model import AuditModel

POLICY_DIR: Final = "_policies"
"""Directory of policy side files inside a data set (ignored by the Parquet discovery)."""
DEFAULT_MAX_REQUESTS: Final = 10_000
"""Requests evaluated per query at most (each is one pure-Python evaluator run)."""

_NS_PER_MS: Final = 1_000_000
_FIELD = re.compile(r"attempts\[(\d+)\](?:\.(\w+))?")
_DRIFT_OF: Final[dict[type[AttemptRejected], str]] = {
    RouteMismatch: "route",
    ReleaseMismatch: "route",
    ScheduleDrift: "schedule",
    JitterOutOfRange: "schedule",
    EarlyStart: "schedule",
    PostTerminalAttempt: "budget",
    GateMismatch: "budget",
    HedgeRejected: "budget",
    DispatchAfterDeadline: "budget",
    CostMismatch: "budget",
}
"""Drift category of each rejection; the others (ordinals, digests, observations) are
``record`` drift: the telemetry does not describe the attempt the policy planned."""


def policy_side_file(data_dir: str | os.PathLike[str], digest: str) -> Path:
    """Where the document of policy ``digest`` lives in the data set ``data_dir``."""
    return Path(data_dir) / POLICY_DIR / f"{digest}.json"


def write_policy_side_file(data_dir: str | os.PathLike[str], policy: RetryPolicy) -> Path:
    """Write ``policy`` as ``<data_dir>/_policies/<sha256>.json`` (its canonical JSON, the
    bytes its digest is taken over) and return the path. Idempotent; file and folder modes
    follow ``RETRYSCOPE_PARQUET_*`` like the span files (owner-only by default)."""
    path = policy_side_file(data_dir, policy_sha256(policy))
    modes = ExportConfig.from_env()  # owner-only by default, like the span files
    make_dirs(path.parent, modes.dir_mode)
    body = canonical_json(policy_to_obj(policy), integers_only=True)
    if not path.exists() or path.read_bytes() != body:
        tmp = path.with_suffix(".json.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, modes.file_mode)
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), modes.file_mode)  # exact mode whatever the umask
            out.write(body)
        tmp.replace(path)
    return path


POLICY_DOCUMENTS: Final = pa.schema([("policy_digest", pa.string()), ("document", pa.string())])
"""The columns of ``policy_documents``: one row per policy side file."""


def load_policy_documents(dataset: DataSet) -> tuple[list[str], list[str]]:
    """Policy side files of a data set (local or on an object store) as the columns of
    :data:`POLICY_DOCUMENTS`; the documents the request spans carry are read by the SQL."""
    digests: list[str] = []
    documents: list[str] = []
    if dataset.is_remote:  # no span objects: no request to drift, nothing to ask the store
        for name, text in _remote_side_files(dataset) if dataset.files else ():
            digests.append(name.removesuffix(".json"))
            documents.append(text)
    else:
        root = Path(dataset.root)
        folder = (root if root.is_dir() else root.parent) / POLICY_DIR
        if folder.is_dir():
            for path in sorted(folder.glob("*.json")):
                digests.append(path.stem)
                documents.append(path.read_text(encoding="utf-8"))
    return digests, documents


def _remote_side_files(dataset: DataSet) -> list[tuple[str, str]]:
    """(name, text) of each ``*.json`` object in the object-store data set's
    ``_policies/`` folder (beside the object when the data set is one object)."""
    fs, path = object_store.filesystem(dataset.root)
    root = path.rstrip("/")
    if dataset.files == (dataset.root,):
        root = root.rsplit("/", 1)[0]
    selector = pafs.FileSelector(f"{root}/{POLICY_DIR}", allow_not_found=True)
    found = []
    for info in sorted(fs.get_file_info(selector), key=lambda i: i.path):
        name = info.path.rsplit("/", 1)[-1]
        if info.type == pafs.FileType.File and name.endswith(".json"):
            with fs.open_input_stream(info.path) as fh:
                found.append((name, bytes(fh.read()).decode("utf-8")))
    return found


def install(model: AuditModel) -> None:
    """Load the data set's ``policy_documents`` (a temp table) and register the evaluator
    function on the model's connection, once."""
    if "policy_drift" in model.installed:
        return
    con = model.con
    documents = load_policy_documents(model.dataset)
    create_table(con, "policy_documents", POLICY_DOCUMENTS, documents, temp=True)
    with contextlib.suppress(duckdb.InvalidInputException):  # first install on this con
        con.remove_function("rs_policy_drift")
    con.create_function(
        "rs_policy_drift",
        drift_json,
        [VARCHAR, VARCHAR, VARCHAR, BIGINT, VARCHAR, VARCHAR, VARCHAR, BIGINT, VARCHAR],
        VARCHAR,
        null_handling=FunctionNullHandling.SPECIAL,
        side_effects=False,
    )
    model.installed.add("policy_drift")


def install_macro(model: AuditModel) -> None:
    """Create ``policy_drift_rows()`` over the scope tables (the model scoped: they
    exist), the evaluator installed first."""
    install(model)
    model.con.execute(load("policy_drift"))


def known_policy_count(model: AuditModel) -> int:
    """How many distinct policy documents the data set carries (request spans and side
    files): the policies whose requests :func:`policy_drift` can check."""
    model.scoped()
    install_macro(model)
    row = model.con.execute("SELECT count(*) FROM known_policies()").fetchone()
    return int(row[0]) if row else 0


def policy_drift(
    model: AuditModel,
    *,
    filters: Filters | None = None,
    max_requests: int = DEFAULT_MAX_REQUESTS,
) -> pa.Table:
    """One row per drifting request: request, trace, span, policy digest, ``drift``
    (route | schedule | budget | record | policy), ``check``, ``field``, attempt ordinal,
    route, time, ``observed`` and ``planned`` (JSON) and the evaluator's message."""
    if max_requests < 1:
        raise ValueError(f"max_requests must be >= 1, got {max_requests}")
    con = model.scoped(filters)
    install_macro(model)
    con.execute("SET VARIABLE rs_drift_cap = ?", [max_requests])
    table: pa.Table = con.sql(
        "SELECT * FROM policy_drift_rows() ORDER BY time, logical_request_id"
    ).to_arrow_table()
    return table


# --- the per-request evaluation (called from SQL) ------------------------------------------
def drift_json(
    document: str | None,
    digest: str | None,
    terminal: str | None,
    ended_ns: int | None,
    attempts: str | None,
    request_digest: str | None,
    idempotency_digest: str | None,
    deadline_ns: int | None,
    routing: str | None,
) -> str:
    """JSON array of the drift rows of one request (empty when it followed its policy)."""
    if document is None or digest is None:
        return "[]"
    rows = json.loads(attempts) if attempts else []
    events = json.loads(routing) if routing else []
    return json.dumps(
        request_drift(
            document,
            digest,
            terminal,
            ended_ns,
            rows,
            request_digest=request_digest,
            idempotency_digest=idempotency_digest,
            deadline_ns=deadline_ns,
            routing=events,
        )
    )


@functools.lru_cache(maxsize=256)
def _decoded(document: str) -> RetryPolicy:
    """A policy document decoded once per distinct document (many requests share one)."""
    return policy_from_json(document, validate=False)


def _event_value(attrs: Mapping[str, Any], key: str) -> AttributeValue:
    raw = attrs[key]
    value: AttributeValue = json.loads(raw) if isinstance(raw, str) else raw
    return value


def gates_from_events(events: Sequence[Mapping[str, Any]]) -> tuple[Gate, ...]:
    """The guards' verdicts recorded as ``retryscope.routing`` events of a request span
    (each ``{"time_ns": …, "attributes": {key: JSON value}}``), in their order."""
    gates = []
    for e in events:
        attrs = e["attributes"]
        hedge = attrs.get(v.HEDGE_ORDINAL.key)
        guard = GuardKind(str(_event_value(attrs, v.ROUTING_GUARD_KEY)))
        route = str(_event_value(attrs, v.ROUTING_ROUTE_KEY))
        gates.append(
            Gate(
                attempt_ordinal=int(str(_event_value(attrs, v.ROUTING_ATTEMPT_KEY))),
                route_id=route,
                admitted=_event_value(attrs, v.ROUTING_ADMITTED_KEY) is True,
                snapshot=GuardSnapshot(
                    guard=guard,
                    name=route if guard is GuardKind.BREAKER else guard.value,
                    generation=int(str(_event_value(attrs, v.ROUTING_GENERATION_KEY))),
                    state=str(_event_value(attrs, v.ROUTING_STATE_KEY)),
                    tokens=int(str(_event_value(attrs, v.ROUTING_TOKENS_KEY))),
                    at_ms=int(e["time_ns"]) // _NS_PER_MS,
                ),
                hedge_ordinal=None if hedge is None else int(str(json.loads(hedge))),
            )
        )
    return tuple(gates)


def _row(
    drift: str,
    check: str,
    field: str,
    message: str,
    *,
    attempt: ObservedAttempt | None = None,
    time_ns: int | None = None,
    observed: Any = None,
    planned: Any = None,
) -> dict[str, Any]:
    return {
        "drift": drift,
        "check": check,
        "field": field,
        "attempt_ordinal": attempt.attempt_ordinal if attempt else None,
        "route_id": attempt.route_id if attempt else None,
        "time_ns": attempt.start_ms * _NS_PER_MS if attempt else time_ns,
        "observed": observed,
        "planned": planned,
        "message": message,
    }


def _planned(prefix: Receipt, policy: RetryPolicy, attr: str) -> Any:
    """What the policy planned for ``attr`` of the attempt after ``prefix``."""
    if prefix.terminal is not None or prefix.next_attempt is None:
        return {
            "terminal": prefix.terminal.value if prefix.terminal else None,
            "max_total_attempts": policy.max_total_attempts,
            "max_total_cost_micros": policy.max_total_cost_micros,
            "spent_micros": prefix.spent_micros,
            "deadline_ms": prefix.admission.deadline_ms,
        }
    plan = prefix.next_attempt
    return {
        "route_id": plan.route.route_id,
        "route_release": plan.route.route_release_sha256,
        "attempt_ordinal": plan.attempt_ordinal,
        "route_attempt_ordinal": plan.route_attempt_ordinal,
        "backoff_delay_ms": plan.delay_ms,
        "not_before_ms": plan.not_before_ms,
        "start_ms": plan.not_before_ms if attr == "start_ms" else None,
        "cost_reserved_micros": plan.reserve_micros,
        "cost_actual_micros": plan.reserve_micros,
    }.get(attr)


def request_drift(
    document: str,
    digest: str,
    terminal: str | None,
    ended_ns: int | None,
    rows: Sequence[dict[str, Any]],
    *,
    request_digest: str | None,
    idempotency_digest: str | None,
    deadline_ns: int | None,
    routing: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Drift rows of one request: the evaluator's first rejection, else a terminal mismatch.

    ``rows`` are the retry owner's attempt rows (``attempts`` view columns, times as int
    ns); the digests and deadline are what the request span recorded at admission;
    ``routing`` its ``retryscope.routing`` events.
    """
    try:
        policy = _decoded(document)
    except ValueError as exc:
        return [_row("policy", "undecodable_policy", "policy", str(exc), time_ns=ended_ns)]
    if policy_sha256(policy) != digest:
        return [
            _row(
                "policy",
                "digest_mismatch",
                "policy_digest",
                "the side file's policy does not hash to the recorded digest",
                time_ns=ended_ns,
                observed=policy_sha256(policy),
                planned=digest,
            )
        ]
    if request_digest is None or idempotency_digest is None or deadline_ns is None:
        return [
            _row(
                "record",
                "unbound_request",
                "logical_request",
                "the request span does not record its digests and deadline",
                time_ns=ended_ns,
            )
        ]
    admission = Admission(request_digest, idempotency_digest, deadline_ns // _NS_PER_MS)
    try:
        attempts = attempts_from_rows(rows)
        gates = gates_from_events(routing)
    except (ValueError, KeyError, TypeError) as exc:
        return [_row("record", "unreadable_attempt", "attempts", str(exc), time_ns=ended_ns)]
    owners = frozenset({policy.retry_owner})
    # a request the caller cancelled between attempts ended when its span did
    cancelled = (
        ended_ns // _NS_PER_MS
        if terminal == Terminal.STOP_CANCELLED.value and ended_ns is not None
        else None
    )

    def judge(prefix: Sequence[Any] = attempts, now_ms: int | None = None) -> Receipt:
        # a prefix is judged with the verdicts that could shape it and its next dispatch
        last = prefix[-1].attempt_ordinal if prefix else 0
        shaping = (
            gates if prefix is attempts else [g for g in gates if g.attempt_ordinal <= last + 1]
        )
        return evaluate(
            policy,
            admission,
            prefix,
            gates=shaping,
            now_ms=now_ms,
            cancelled_at_ms=cancelled,
            accepted_owners=owners,
        )

    try:
        receipt = judge()
    except PolicyError as exc:
        return [_row("policy", type(exc).__name__, exc.field, str(exc), time_ns=ended_ns)]
    except AttemptRejected as exc:
        match = _FIELD.match(exc.field)
        if match is None:  # not about one attempt (a verdict no dispatch asked for)
            kind = _DRIFT_OF.get(type(exc), "record")
            return [_row(kind, type(exc).__name__, exc.field, str(exc), time_ns=ended_ns)]
        index = int(match.group(1))
        attr = match.group(2) or "attempt"
        attempt = attempts[index]
        prefix = judge(attempts[:index])
        return [
            _row(
                _DRIFT_OF.get(type(exc), "record"),
                type(exc).__name__,
                attr,
                str(exc),
                attempt=attempt,
                observed=attempt.attempt_ordinal
                if attr == "attempt"
                else getattr(attempt, attr, None),
                planned=_planned(prefix, policy, attr),
            )
        ]
    if receipt.terminal is None and ended_ns is not None:
        receipt = judge(now_ms=ended_ns // _NS_PER_MS)
    planned_terminal = receipt.terminal.value if receipt.terminal else None
    if terminal is not None and terminal != planned_terminal:
        last = attempts[-1] if attempts else None
        return [
            _row(
                "budget",
                "terminal_mismatch",
                "terminal",
                f"recorded terminal {terminal!r}, the policy decides {planned_terminal!r}",
                time_ns=ended_ns,
                observed=terminal,
                planned=planned_terminal,
            )
            | ({"attempt_ordinal": last.attempt_ordinal, "route_id": last.route_id} if last else {})
        ]
    return []
