"""The analytics' SQL macros: ``sql/model/macros.sql`` and the macros rendered from rule
tables kept in Python, so each rule is written once.

``rs_layer_rank`` orders layers outermost first (:class:`retryscope.vocabulary.Layer`, an
unknown layer last); ``rs_caller_layer()`` is
:data:`retryscope.vocabulary.CALLER_RETRY_LAYER`; ``rs_boundary_rank`` orders data boundaries
(:data:`retryscope.vocabulary.BOUNDARY_RANK`, NULL for an unknown one).

``rs_http_outcome`` and ``rs_http_outcome_kind`` classify an HTTP client span that recorded
no retryscope outcome, by :data:`retryscope.http_rules.STATUS_RULES`
(what the recorder classifies sends with). Their arguments are the span's status code, its
span status and whether resending is safe (the span carries an idempotency digest: what the
httpx transport calls idempotent). A span with no status code is a send that failed without
a response when its span status is ``ERROR`` (:data:`NO_RESPONSE_KIND`), else unclassified.

``rs_grpc_outcome`` and ``rs_grpc_outcome_kind`` do the same for a gRPC client span's
``rpc.grpc.status_code`` (:data:`retryscope.http_rules.GRPC_STATUS_KINDS`; NULL: no code);
``rs_send_outcome`` and ``rs_send_outcome_kind`` pick the one that fits a send.

``rs_call_span`` tells a client call span (one per API call, around the SDK's retry loop:
:data:`retryscope.vocabulary.CALL_SCOPES`, or a span of a GenAI operation), as the stamping
processor does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache

import duckdb

from retryscope.analytics._queries import load, sql_string
from retryscope.http_rules import (
    GRPC_STATUS_KINDS,
    NO_RESPONSE_KIND,
    OTHER_STATUS_KIND,
    STATUS_RULES,
    StatusRule,
)
from retryscope.vocabulary import (
    BOUNDARY_RANK,
    CALL_SCOPES,
    CALLER_RETRY_LAYER,
    Layer,
    Outcome,
    OutcomeKind,
)


def _literal(value: str | None) -> str:
    return "NULL" if value is None else sql_string(value)


def _statuses(rule: StatusRule) -> str:
    s = rule.statuses
    if isinstance(s, range):
        if s.step != 1 or not s:
            raise ValueError(f"status range {s!r} is not a contiguous range")
        return f"http_status BETWEEN {s.start} AND {s.stop - 1}"
    return f"http_status IN ({', '.join(str(x) for x in sorted(s))})"


def _kind(kind: OutcomeKind | None) -> str | None:
    return None if kind is None else kind.value


def _family(kind: OutcomeKind | None) -> str:
    return (Outcome.SUCCESS if kind is None else kind.family).value


def _case(name: str, render: Callable[[OutcomeKind | None], str | None]) -> str:
    """``CREATE MACRO name`` over the status rules; ``render`` gives a kind's SQL value."""

    def value(kind: OutcomeKind | None) -> str:
        return _literal(render(kind))

    lines = [
        f"CREATE OR REPLACE MACRO {name}(http_status, span_status, idempotent) AS",
        "    CASE",
        "        WHEN http_status IS NULL THEN",
        f"            CASE WHEN span_status = 'ERROR' THEN {value(NO_RESPONSE_KIND)} END",
    ]
    for rule in STATUS_RULES:
        plain, safe = value(rule.kind), value(rule.kind_for(idempotent=True))
        then = plain if plain == safe else f"CASE WHEN idempotent THEN {safe} ELSE {plain} END"
        lines.append(f"        WHEN {_statuses(rule)} THEN {then}")
    lines += [f"        ELSE {value(OTHER_STATUS_KIND)}", "    END;"]
    return "\n".join(lines)


def _rank(name: str, ranks: Mapping[str, int], unknown: int | None) -> str:
    whens = " ".join(f"WHEN {_literal(value)} THEN {rank}" for value, rank in ranks.items())
    other = "" if unknown is None else f" ELSE {unknown}"
    return f"CREATE OR REPLACE MACRO {name}(v) AS CASE v {whens}{other} END;"


def rank_macros() -> str:
    """The SQL of ``rs_layer_rank`` and ``rs_boundary_rank``."""
    layers = {layer.value: rank for rank, layer in enumerate(Layer)}
    return "\n".join(
        (
            _rank("rs_layer_rank", layers, len(layers)),
            _rank("rs_boundary_rank", {b.value: r for b, r in BOUNDARY_RANK.items()}, None),
            # the retry layer of a caller's unmarked loop above a client (not an attempt layer)
            f"CREATE OR REPLACE MACRO rs_caller_layer() AS {_literal(CALLER_RETRY_LAYER)};",
        )
    )


def http_outcome_macros() -> str:
    """The SQL of ``rs_http_outcome`` (family) and ``rs_http_outcome_kind`` (kind)."""
    header = "-- Rendered from retryscope.http_rules.STATUS_RULES (retryscope.analytics._macros)."
    return "\n\n".join(
        (header, _case("rs_http_outcome", _family), _case("rs_http_outcome_kind", _kind))
    )


def grpc_outcome_macros() -> str:
    """The SQL of ``rs_grpc_outcome`` (family) and ``rs_grpc_outcome_kind`` (kind) of a gRPC
    status code, from :data:`retryscope.http_rules.GRPC_STATUS_KINDS`."""

    def case(name: str, render: Callable[[OutcomeKind | None], str | None]) -> str:
        whens = " ".join(
            f"WHEN code = {code} THEN {_literal(render(kind))}"
            for code, _, kind in GRPC_STATUS_KINDS
        )
        other = _literal(render(OTHER_STATUS_KIND))
        return (
            f"CREATE OR REPLACE MACRO {name}(code) AS "
            f"CASE WHEN code IS NULL THEN NULL {whens} ELSE {other} END;"
        )

    return "\n".join((case("rs_grpc_outcome", _family), case("rs_grpc_outcome_kind", _kind)))


def send_macros() -> str:
    """The SQL of ``rs_send_outcome``, ``rs_send_outcome_kind`` (a foreign span taken for a
    send: by its HTTP status, or its gRPC status code) and ``rs_call_span``."""
    scopes = " OR ".join(f"starts_with(scope, {_literal(prefix)})" for prefix, _ in CALL_SCOPES)
    return "\n".join(
        (
            "CREATE OR REPLACE MACRO rs_send_outcome(http_method, http_status, span_status,"
            " idempotent, grpc_code) AS CASE WHEN http_method IS NOT NULL"
            " THEN rs_http_outcome(http_status, span_status, idempotent)"
            " ELSE rs_grpc_outcome(grpc_code) END;",
            "CREATE OR REPLACE MACRO rs_send_outcome_kind(http_method, http_status, span_status,"
            " idempotent, grpc_code) AS CASE WHEN http_method IS NOT NULL"
            " THEN rs_http_outcome_kind(http_status, span_status, idempotent)"
            " ELSE rs_grpc_outcome_kind(grpc_code) END;",
            "CREATE OR REPLACE MACRO rs_call_span(kind, scope, gen_ai_operation) AS"
            f" kind = 'CLIENT' AND (gen_ai_operation IS NOT NULL OR {scopes});",
        )
    )


@cache
def macros_sql() -> str:
    """Every macro the analytics queries use: ``macros.sql`` and the rendered ones."""
    rendered = (rank_macros(), http_outcome_macros(), grpc_outcome_macros(), send_macros())
    return "\n\n".join((load("macros").rstrip(), *rendered)) + "\n"


def install_macros(con: duckdb.DuckDBPyConnection) -> None:
    """Create the macros of :func:`macros_sql` (cheap: nothing is read)."""
    con.execute(macros_sql())
