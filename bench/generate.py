"""A fast columnar generator of audit data sets in :data:`retryscope.schema.SPAN_SCHEMA`.

It writes what a fleet of harnesses exporting through ``ParquetSpanExporter`` would have
written, without creating spans: numpy builds each column for one hour of traffic at a
time, rows are split into files of the exporter's size, each file sorted like the exporter
sorts (logical request id, start time) and written as zstd Parquet with the exporter's row
group size, Bloom filters and dictionary choices under hive partitions
``date=YYYY-MM-DD/hour=HH/``.

The traffic: logical requests of ~40 tenants over 8 primary and 4 fallback routes; each
makes 1–4 harness attempts (retries, a fallback on the last one for 40 % of retried
requests), each harness attempt 0–3 SDK attempts beneath it and each SDK attempt 0–2
transport resends (nested retries), with capped exponential backoff and Retry-After on
rate limits, deadlines (75 % of requests), costs in micro-units (unknown after timeouts),
outcome kinds consistent with the request's terminal. About 2.5 attempts per request.

Data sets are cached under ``bench-data/`` keyed by the number of attempts and the seed;
``_meta.json`` (invisible to the analytics, which skip ``_*`` files) is written last and
marks a complete data set.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from retryscope.instrumentation.export._bloom_filters import bloom_filter_options
from retryscope.instrumentation.export._encoding import DICTIONARY_COLUMNS
from retryscope.schema import SPAN_SCHEMA

ROWS_PER_FILE: Final = 200_000  # ParquetSpanExporter defaults (rotate_rows,
ROW_GROUP_SIZE: Final = 100_000  # row_group_rows, compression)
COMPRESSION: Final = "zstd"
REQUESTS_PER_HOUR: Final = 100_000
START_NS: Final = 1_790_000_000_000_000_000 // 3_600_000_000_000 * 3_600_000_000_000
_MS: Final = 1_000_000
_HOUR_NS: Final = 3_600 * 1_000_000_000

# probabilities of: harness attempts per request, SDK attempts per harness attempt,
# transport resends per SDK attempt
HARNESS_P: Final = (0.78, 0.14, 0.05, 0.03)
SDK_P: Final = (0.50, 0.38, 0.09, 0.03)
TRANSPORT_P: Final = (0.70, 0.25, 0.05)

PRIMARY_ROUTES: Final = (
    ("private-llama-70b", "llama-3.3-70b@2026-10", "vllm", 2_000),
    ("private-qwen-72b", "qwen-3-72b@2026-09", "vllm", 2_200),
    ("azure-gpt-4.1-eu", "gpt-4.1@2026-09", "azure.ai.openai", 9_000),
    ("openai-gpt-4.1-mini", "gpt-4.1-mini@2026-09", "openai", 1_500),
    ("anthropic-sonnet", "claude-sonnet-4.5@2026-09", "anthropic", 11_000),
    ("bedrock-haiku", "claude-haiku-4.5@2026-10", "aws.bedrock", 3_000),
    ("vertex-gemini-flash", "gemini-2.5-flash@2026-08", "gcp.vertex_ai", 1_200),
    ("private-mistral", "mistral-large-3@2026-07", "vllm", 2_500),
)
FALLBACK_ROUTES: Final = (
    ("external-fallback-gpt", "gpt-4.1@2026-09", "openai", 12_000),
    ("external-fallback-claude", "claude-sonnet-4.5@2026-09", "anthropic", 12_500),
    ("external-fallback-gemini", "gemini-2.5-pro@2026-08", "gcp.vertex_ai", 10_000),
    ("regional-fallback-eu", "llama-3.3-70b@2026-10", "vllm", 2_400),
)
ROUTES: Final = PRIMARY_ROUTES + FALLBACK_ROUTES
TERMINALS: Final = (
    ("complete", 0.905),
    ("stop_deadline", 0.03),
    ("stop_non_retryable", 0.03),
    ("stop_attempt_budget", 0.02),
    ("stop_route_exhausted", 0.01),
    ("stop_indeterminate", 0.005),
)
RETRYABLE_KINDS: Final = (
    ("rate_limited", 0.5),
    ("unavailable", 0.3),
    ("timeout_before_response", 0.2),
)
NON_RETRYABLE_KINDS: Final = ("invalid_request", "policy_denied", "rejected", "invalid_output")
INDETERMINATE_KINDS: Final = ("unknown_provider_acceptance", "stream_interrupted_after_output")
KIND_STATUS: Final = {
    "rate_limited": 429,
    "unavailable": 503,
    "invalid_request": 400,
    "policy_denied": 403,
    "rejected": 422,
    "invalid_output": 200,
    "stream_interrupted_after_output": 200,
}
OPERATIONS: Final = (("chat", 0.6), ("summarise", 0.15), ("tool_call", 0.15), ("embed", 0.1))
OWNERS: Final = (("harness", 0.85), ("adapter", 0.1), ("transport_sdk", 0.05))
SERVICES: Final = ("harness-api", "batch-worker", "agent-runner", "eval-pipeline", "support-bot")
TENANTS: Final = tuple(f"tenant-{i:02d}" for i in range(40))
LAYERS: Final = ("harness", "sdk", "transport")
RESOURCE_KEYS: Final = (
    "service.name",
    "telemetry.sdk.language",
    "telemetry.sdk.name",
    "telemetry.sdk.version",
)


@dataclass(frozen=True, slots=True)
class Generated:
    """A complete cached data set and what it holds."""

    path: str
    attempts: int
    logical_requests: int
    rows: int
    files: int
    bytes: int
    seed: int
    seconds: float
    sample_ids: list[tuple[str, str]]  # (logical_request_id, trace_id) for drill-downs

    @property
    def bytes_per_row(self) -> float:
        return self.bytes / self.rows if self.rows else 0.0


def expected_attempts_per_request() -> float:
    h = sum((i + 1) * p for i, p in enumerate(HARNESS_P))
    s = sum(i * p for i, p in enumerate(SDK_P))
    t = sum(i * p for i, p in enumerate(TRANSPORT_P))
    forced = sum(
        p for name, p in TERMINALS if name in ("stop_attempt_budget", "stop_route_exhausted")
    )
    h_forced = sum(max(i + 1, 3) * p for i, p in enumerate(HARNESS_P))
    h = h * (1 - forced) + h_forced * forced
    return h * (1 + s + s * t)


def dataset_path(
    data_dir: Path, attempts: int, seed: int, per_hour: int = REQUESTS_PER_HOUR
) -> Path:
    spread = "" if per_hour == REQUESTS_PER_HOUR else f"-per-hour-{per_hour}"
    return data_dir / f"attempts-{attempts}-seed-{seed}{spread}"


def attempts_for(requests: int) -> int:
    """The ``attempts`` of :func:`generate` that make a data set of ``requests`` requests."""
    return round(requests * expected_attempts_per_request())


# -- column helpers -------------------------------------------------------------------------
_HEX: Final = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def hex_ids(rng: np.random.Generator, n: int, n_bytes: int) -> pa.StringArray:
    """``n`` random lowercase hex strings of ``2 * n_bytes`` characters."""
    raw = rng.integers(0, 256, size=(n, n_bytes), dtype=np.uint8)
    chars = np.empty((n, 2 * n_bytes), dtype=np.uint8)
    chars[:, 0::2] = _HEX[raw >> 4]
    chars[:, 1::2] = _HEX[raw & 15]
    offsets = np.arange(0, (n + 1) * 2 * n_bytes, 2 * n_bytes, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars))


def pick(rng: np.random.Generator, n: int, weighted: tuple[tuple[str, float], ...]) -> np.ndarray:
    p = np.array([w for _, w in weighted])
    return rng.choice(len(weighted), size=n, p=p / p.sum())


def strings(
    values: tuple[str, ...] | list[str], idx: np.ndarray, mask: np.ndarray | None = None
) -> pa.Array:
    """``values[idx]`` as an Arrow string array; null where ``mask`` is False."""
    arr = pa.array(list(values), pa.string()).take(pa.array(idx, pa.int32()))
    return (
        pc.if_else(pa.array(mask), arr, pa.nulls(len(idx), pa.string()))
        if mask is not None
        else arr
    )


def masked(values: np.ndarray, mask: np.ndarray, type_: pa.DataType) -> pa.Array:
    return pa.array(values, type_, mask=~mask)


def cumcount(group: np.ndarray) -> np.ndarray:
    """0-based position of each row within its run of equal consecutive ``group`` values."""
    n = len(group)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.ones(n, dtype=bool)
    starts[1:] = group[1:] != group[:-1]
    first = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    return np.arange(n) - first


def group_exclusive_cumsum(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Sum of earlier ``values`` in the same run of ``group`` (0 for each run's first row)."""
    total = np.cumsum(values) - values
    pos = cumcount(group)
    return total - total[np.arange(len(values)) - pos]


# -- one hour of traffic --------------------------------------------------------------------
def _hour(
    rng: np.random.Generator, m: int, hour_start: int
) -> tuple[pa.Table, np.ndarray, list[tuple[str, str]]]:
    """Rows of ``m`` logical requests starting in one hour, grouped by request.

    Returns the table, the request index of each row, and a few sample ids.
    """
    lr_start = hour_start + np.sort(rng.integers(0, _HOUR_NS - 120_000 * _MS, size=m))
    terminal = pick(rng, m, TERMINALS)
    term_names = [t for t, _ in TERMINALS]
    h = rng.choice(4, size=m, p=HARNESS_P) + 1
    forced = np.isin(
        terminal,
        [term_names.index("stop_attempt_budget"), term_names.index("stop_route_exhausted")],
    )
    h = np.where(forced, np.maximum(h, 3), h)
    uses_fallback = (h >= 2) & (
        (rng.random(m) < 0.4) | (terminal == term_names.index("stop_route_exhausted"))
    )
    primary = rng.choice(len(PRIMARY_ROUTES), size=m, p=np.array([8, 6, 5, 4, 3, 2, 2, 1]) / 31)
    fallback = len(PRIMARY_ROUTES) + rng.integers(0, len(FALLBACK_ROUTES), size=m)
    tenant_w = 1 / np.arange(1, len(TENANTS) + 1)
    tenant = rng.choice(len(TENANTS), size=m, p=tenant_w / tenant_w.sum())
    operation = pick(rng, m, OPERATIONS)
    owner = pick(rng, m, OWNERS)
    service = rng.integers(0, len(SERVICES), size=m)
    has_deadline = rng.random(m) < 0.75
    budget_ms = rng.choice(np.array([5_000, 15_000, 30_000, 60_000]), size=m)

    # harness attempts
    hr = np.repeat(np.arange(m), h)
    h_ord = cumcount(hr) + 1
    h_last = h_ord == h[hr]
    h_fb = uses_fallback[hr] & h_last
    h_route = np.where(h_fb, fallback[hr], primary[hr])
    h_kind = _failure_kinds(rng, len(hr))
    t_last = terminal[hr]
    last_kind = np.select(
        [
            t_last == term_names.index(t)
            for t in ("complete", "stop_non_retryable", "stop_indeterminate", "stop_deadline")
        ],
        [
            np.full(len(hr), -1),
            100 + rng.integers(0, len(NON_RETRYABLE_KINDS), size=len(hr)),
            200 + rng.integers(0, len(INDETERMINATE_KINDS), size=len(hr)),
            np.full(len(hr), 2),  # timeout_before_response
        ],
        h_kind,
    )
    h_kind = np.where(h_last, last_kind, h_kind)
    h_dur = np.where(
        h_kind == -1, rng.lognormal(6.6, 0.45, len(hr)), rng.lognormal(4.5, 0.8, len(hr))
    )
    h_dur = np.where(h_kind == 2, 10_000.0, h_dur)  # timeouts wait the client timeout
    h_dur_ns = (h_dur * _MS).astype(np.int64)
    retry_after = np.where(
        h_kind == 0, rng.choice(np.array([250, 500, 1_000, 2_000]), size=len(hr)), 0
    )
    backoff = np.minimum(200 * 2 ** (np.maximum(h_ord - 1, 0)), 1_500)
    delay_after = np.where(h_last, 0, np.maximum(backoff, retry_after)).astype(np.int64)
    gap_ns = h_dur_ns + delay_after * _MS
    h_start = lr_start[hr] + _MS + group_exclusive_cumsum(gap_ns, hr)
    h_end = h_start + h_dur_ns
    prev_delay = np.concatenate(([0], delay_after[:-1]))
    prev_retry_after = np.concatenate(([0], retry_after[:-1]))
    first = h_ord == 1

    lr_end = np.zeros(m, dtype=np.int64)
    np.maximum.at(lr_end, hr, h_end + _MS)
    deadline_over = terminal == term_names.index("stop_deadline")
    deadline = np.where(
        deadline_over,
        lr_start + (lr_end - lr_start) * 9 // 10,
        np.maximum(lr_start + budget_ms * _MS, lr_end + _MS),
    )
    has_deadline |= deadline_over

    # SDK attempts beneath harness attempts, transport resends beneath SDK attempts
    s = rng.choice(4, size=len(hr), p=SDK_P)
    sr = np.repeat(np.arange(len(hr)), s)
    s_pos = cumcount(sr)
    s_last = s_pos == s[sr] - 1
    s_kind = np.where(s_last, h_kind[sr], _failure_kinds(rng, len(sr)))
    s_slot = h_dur_ns[sr] // s[sr]
    s_start = h_start[sr] + s_pos * s_slot
    s_end = s_start + s_slot * 9 // 10
    t = rng.choice(3, size=len(sr), p=TRANSPORT_P)
    tr = np.repeat(np.arange(len(sr)), t)
    t_pos = cumcount(tr)
    t_last = t_pos == t[tr] - 1
    t_kind = np.where(t_last, s_kind[tr], _failure_kinds(rng, len(tr)))
    t_slot = (s_end[tr] - s_start[tr]) // t[tr]
    t_start = s_start[tr] + t_pos * t_slot
    t_end = t_start + t_slot * 9 // 10

    # request index, layer, ordinals (per layer across the request), parents
    req = np.concatenate([np.arange(m), hr, hr[sr], hr[sr[tr]]])
    layer = np.concatenate(
        [np.full(m, -1), np.zeros(len(hr), int), np.ones(len(sr), int), np.full(len(tr), 2)]
    )
    n = len(req)
    span_id = hex_ids(rng, n, 8)
    h_rows = m + np.arange(len(hr))
    s_rows = m + len(hr) + np.arange(len(sr))
    parent_row = np.concatenate([np.full(m, -1), hr, h_rows[sr], s_rows[tr]])
    s_ord = cumcount(hr[sr]) + 1
    t_ord = cumcount(hr[sr[tr]]) + 1
    ordinal = np.concatenate([np.zeros(m, int), h_ord, s_ord, t_ord])
    parent_ord = np.concatenate([np.zeros(m, int), np.zeros(len(hr), int), h_ord[sr], s_ord[tr]])
    route = np.concatenate([np.zeros(m, int), h_route, h_route[sr], h_route[sr[tr]]])
    kind_code = np.concatenate([np.full(m, -1), h_kind, s_kind, t_kind])
    start = np.concatenate([lr_start, h_start, s_start, t_start])
    end = np.concatenate([lr_end, h_end, s_end, t_end])
    is_attempt = layer >= 0
    # ordinal on a route within a layer: routes change once (primary to fallback), so a
    # run of equal (request, layer, route) is the group
    route_key = (req.astype(np.int64) * 4 + (layer + 1)) * len(ROUTES) + route
    route_ord = cumcount(route_key) + 1

    ids = hex_ids(rng, m, 16)
    trace = hex_ids(rng, m, 16)
    idem = hex_ids(rng, m, 32)
    digest = hex_ids(rng, m, 32)
    has_idem = rng.random(m) < 0.8
    req_idx = pa.array(req, pa.int32())

    kinds = _KIND_NAMES
    kind_idx = np.where(kind_code < 0, 0, _kind_slot(kind_code))
    success = is_attempt & (kind_code == -1)
    failed = is_attempt & (kind_code != -1)
    family = np.select(
        [kind_code == -1, kind_code < 100, kind_code < 200],
        [0, 1, 2],
        3,
    )
    route_priority = np.where(
        route >= len(PRIMARY_ROUTES), 1 + (route - len(PRIMARY_ROUTES)) // 2, 0
    )
    price = np.array([r[3] for r in ROUTES])[route]
    timeout = kind_code == 2
    actual = np.where(success, (price * rng.uniform(0.4, 1.0, n)).astype(np.int64), 0)
    http_status = np.where(success, 200, np.array([KIND_STATUS.get(k, 0) for k in kinds])[kind_idx])
    h_mask_rows = np.zeros(n, dtype=bool)
    h_mask_rows[h_rows] = True
    backoff_mask = np.zeros(n, dtype=bool)
    backoff_mask[h_rows] = ~first
    delay_col = np.zeros(n, dtype=np.int64)
    delay_col[h_rows] = prev_delay
    retry_after_col = np.zeros(n, dtype=np.int64)
    retry_after_col[h_rows] = prev_retry_after
    decision = np.full(n, -1)
    next_is_fb = np.concatenate([h_fb[1:], [False]]) & ~h_last
    decision[h_rows] = np.select(
        [h_last & (h_kind == -1), h_last, next_is_fb], [0, 3, 2], 1
    )  # complete, stop, fallback, retry
    decision[s_rows] = np.where(s_last, -1, 1)
    decision[m + len(hr) + len(sr) + np.arange(len(tr))] = np.where(t_last, -1, 1)

    layer_names = ["logical_request", *LAYERS]
    route_names = [r[0] for r in ROUTES]

    tenant_r, op_r, owner_r, service_r = tenant[req], operation[req], owner[req], service[req]
    res_keys = strings(RESOURCE_KEYS, np.tile(np.arange(4), n))
    res_vals_vocab = [json.dumps(s) for s in SERVICES] + ['"python"', '"opentelemetry"', '"1.45.2"']
    res_idx = np.stack([service_r, np.full(n, 5), np.full(n, 6), np.full(n, 7)], axis=1).ravel()
    resource = pa.MapArray.from_arrays(
        pa.array(np.arange(0, 4 * n + 1, 4, dtype=np.int32)),
        res_keys,
        strings(res_vals_vocab, res_idx),
    )
    empty_map = pa.MapArray.from_arrays(
        pa.array(np.zeros(n + 1, dtype=np.int32)),
        pa.array([], pa.string()),
        pa.array([], pa.string()),
    )
    attempt_names = [f"attempt {r}" for r in route_names]
    lr_names = [f"logical_request {o}" for o, _ in OPERATIONS]
    name = pc.if_else(pa.array(is_attempt), strings(attempt_names, route), strings(lr_names, op_r))
    lr_mask = ~is_attempt
    term_r = terminal[req]
    status = np.where((is_attempt & failed) | (lr_mask & (term_r != 0)), 1, 0)
    status_msg = pc.if_else(
        pa.array(is_attempt),
        strings(kinds, kind_idx, failed),
        strings(term_names, term_r, lr_mask & (term_r != 0)),
    )
    columns: dict[str, pa.Array] = {
        "trace_id": trace.take(req_idx),
        "span_id": span_id,
        "parent_span_id": pc.if_else(
            pa.array(parent_row >= 0),
            span_id.take(pa.array(np.maximum(parent_row, 0), pa.int32())),
            pa.nulls(n, pa.string()),
        ),
        "name": name,
        "kind": strings(["INTERNAL", "CLIENT"], is_attempt.astype(int)),
        "start_time": pa.array(start, pa.timestamp("ns")),
        "end_time": pa.array(end, pa.timestamp("ns")),
        "duration_ms": pa.array((end - start) / 1e6, pa.float64()),
        "status_code": strings(["UNSET", "ERROR"], status),
        "status_message": status_msg,
        "service_name": strings(SERVICES, service_r),
        "scope_name": strings(["retryscope"], np.zeros(n, int)),
        "scope_version": strings(["0.1.0"], np.zeros(n, int)),
        "span_role": strings(["logical_request", "attempt"], is_attempt.astype(int)),
        "logical_request_id": ids.take(req_idx),
        "logical_request_digest": digest.take(req_idx),
        "idempotency_digest": pc.if_else(
            pa.array(has_idem[req]), idem.take(req_idx), pa.nulls(n, pa.string())
        ),
        "tenant": strings(TENANTS, tenant_r),
        "operation": strings([o for o, _ in OPERATIONS], op_r),
        "retry_owner": strings([o for o, _ in OWNERS], owner_r),
        "policy_digest": strings(["9f2c" * 16, "a41b" * 16, "07de" * 16], service_r % 3),
        "deadline": masked(deadline[req], has_deadline[req], pa.timestamp("ns")),
        "layer": strings(layer_names, layer + 1, is_attempt),
        "attempt_ordinal": masked(ordinal, is_attempt, pa.int32()),
        "parent_attempt_ordinal": masked(parent_ord, layer > 0, pa.int32()),
        "parent_layer": strings(layer_names, np.maximum(layer, 0), layer > 0),
        "route_attempt_ordinal": masked(route_ord, is_attempt, pa.int32()),
        "route_id": strings(route_names, route, is_attempt),
        "route_release": strings([r[1] for r in ROUTES], route, is_attempt),
        "route_priority": masked(route_priority, is_attempt, pa.int32()),
        "is_fallback": masked(route_priority > 0, is_attempt, pa.bool_()),
        "backoff_delay_ms": masked(delay_col, backoff_mask, pa.int64()),
        "retry_after_ms": masked(retry_after_col, backoff_mask & (retry_after_col > 0), pa.int64()),
        "not_before": masked(start, backoff_mask, pa.timestamp("ns")),
        "deadline_remaining_ms": masked(
            (deadline[req] - start) // _MS, is_attempt & has_deadline[req], pa.int64()
        ),
        "cost_reserved_micros": masked(price, is_attempt, pa.int64()),
        "cost_actual_micros": masked(actual, is_attempt & ~timeout, pa.int64()),
        "cost_currency": strings(["USD"], np.zeros(n, int), is_attempt),
        "cost_estimated": masked(timeout, is_attempt, pa.bool_()),
        "outcome": strings(
            ["success", "retryable", "non_retryable", "indeterminate"], family, is_attempt
        ),
        "outcome_kind": strings(kinds, kind_idx, failed),
        "decision": strings(
            ["complete", "retry", "fallback", "stop"], np.maximum(decision, 0), decision >= 0
        ),
        "terminal": strings(term_names, term_r, lr_mask),
        "error_type": strings(kinds, kind_idx, failed),
        "http_status_code": masked(
            http_status, is_attempt & (layer > 0) & (http_status > 0), pa.int32()
        ),
        "http_method": strings(["POST"], np.zeros(n, int), is_attempt & (layer > 0)),
        "gen_ai_provider_name": strings([r[2] for r in ROUTES], route, is_attempt),
        "gen_ai_request_model": strings([r[1].split("@")[0] for r in ROUTES], route, is_attempt),
        "gen_ai_response_model": strings([r[1].split("@")[0] for r in ROUTES], route, success),
        "gen_ai_operation_name": strings(["chat"], np.zeros(n, int), is_attempt),
        "gen_ai_input_tokens": masked(rng.integers(50, 4_000, n), success, pa.int64()),
        "gen_ai_output_tokens": masked(rng.integers(10, 1_000, n), success, pa.int64()),
        "attributes": empty_map,
        "resource_attributes": resource,
        "dropped_attributes": pa.array(np.zeros(n, np.int32)),
    }
    arrays = [
        columns[f.name].cast(f.type) if f.name in columns else pa.nulls(n, f.type)
        for f in SPAN_SCHEMA
    ]
    table = pa.Table.from_arrays(arrays, schema=SPAN_SCHEMA)
    pick_rows = rng.choice(m, size=min(3, m), replace=False)
    samples = [(ids[int(i)].as_py(), trace[int(i)].as_py()) for i in pick_rows]
    return table, req, samples


_KIND_NAMES: Final = (
    [k for k, _ in RETRYABLE_KINDS] + list(NON_RETRYABLE_KINDS) + list(INDETERMINATE_KINDS)
)


def _kind_slot(code: np.ndarray) -> np.ndarray:
    """Index into :data:`_KIND_NAMES` of a kind code (0–2 retryable, 100+ and 200+ others)."""
    n_retry, n_non = len(RETRYABLE_KINDS), len(NON_RETRYABLE_KINDS)
    return np.where(
        code >= 200, n_retry + n_non + code - 200, np.where(code >= 100, n_retry + code - 100, code)
    )


def _failure_kinds(rng: np.random.Generator, n: int) -> np.ndarray:
    """Retryable failure kinds (codes 0–2) of ``n`` failed attempts that were retried."""
    p = np.array([w for _, w in RETRYABLE_KINDS])
    return rng.choice(len(RETRYABLE_KINDS), size=n, p=p / p.sum())


def _write_hour(
    table: pa.Table, req: np.ndarray, directory: Path, hour_start: int, seq: int
) -> tuple[int, int]:
    """Rows (grouped by request) as exporter-sized sorted files; returns (files, bytes)."""
    # files take consecutive requests (arrival order), ROWS_PER_FILE rows each; within a
    # file rows go by logical request id, then start time: one permutation, one take
    grouped = np.argsort(req, kind="stable")
    file_of = np.empty(len(req), dtype=np.int64)
    file_of[grouped] = np.arange(len(req)) // ROWS_PER_FILE
    id_rank = np.empty(req.max() + 1 if len(req) else 0, dtype=np.int64)
    first_row = np.unique(req, return_index=True)[1]
    ids = table.column("logical_request_id").take(pa.array(first_row))
    id_rank[req[first_row]] = np.argsort(pc.sort_indices(ids).to_numpy())
    start = table.column("start_time").cast(pa.int64()).to_numpy()
    table = table.take(pa.array(np.lexsort((start, id_rank[req], file_of))))
    stamp = time.gmtime(hour_start // 1_000_000_000)
    part = directory / time.strftime("date=%Y-%m-%d/hour=%H", stamp)
    part.mkdir(parents=True, exist_ok=True)
    files = size = 0
    for offset in range(0, table.num_rows, ROWS_PER_FILE):
        chunk = table.slice(offset, ROWS_PER_FILE)
        name = f"spans-{time.strftime('%Y%m%dT%H%M%SZ', stamp)}-bench-{seq:04d}-{files:03d}.parquet"
        path = part / name
        pq.write_table(
            chunk,
            path,
            row_group_size=ROW_GROUP_SIZE,
            compression=COMPRESSION,
            bloom_filter_options=bloom_filter_options(chunk, ROW_GROUP_SIZE),
            use_dictionary=DICTIONARY_COLUMNS,
        )
        files += 1
        size += path.stat().st_size
    return files, size


def generate(
    data_dir: Path,
    attempts: int,
    seed: int,
    *,
    progress: bool = True,
    per_hour: int = REQUESTS_PER_HOUR,
) -> Generated:
    """The data set of ``attempts`` attempts for ``seed``, ``per_hour`` requests in each
    hour: from the cache, or written now."""
    final = dataset_path(data_dir, attempts, seed, per_hour)
    meta_path = final / "_meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        meta["sample_ids"] = [tuple(x) for x in meta["sample_ids"]]
        return Generated(**meta)
    began = time.perf_counter()
    requests = max(1, round(attempts / expected_attempts_per_request()))
    hours = max(1, math.ceil(requests / per_hour))
    tmp = data_dir / f".{final.name}.inprogress"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    rows = n_attempts = files = size = 0
    samples: list[tuple[str, str]] = []
    for hour in range(hours):
        m = requests // hours + (1 if hour < requests % hours else 0)
        rng = np.random.default_rng([seed, hour])
        hour_start = START_NS + hour * _HOUR_NS
        table, req, picked = _hour(rng, m, hour_start)
        samples += picked
        rows += table.num_rows
        n_attempts += table.num_rows - m
        f, s = _write_hour(table, req, tmp, hour_start, hour)
        files, size = files + f, size + s
        if progress:
            print(
                f"\r  generating {n_attempts:>12,} attempts  ({hour + 1}/{hours} hours)",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if progress:
        print(file=sys.stderr)
    result = Generated(
        path=str(final),
        attempts=n_attempts,
        logical_requests=requests,
        rows=rows,
        files=files,
        bytes=size,
        seed=seed,
        seconds=time.perf_counter() - began,
        sample_ids=samples[:: max(1, len(samples) // 24)][:24],
    )
    (tmp / "_meta.json").write_text(json.dumps(asdict(result) | {"path": str(final)}, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return result


def describe(g: Generated) -> dict[str, Any]:
    return {
        "attempts": f"{g.attempts:,}",
        "requests": f"{g.logical_requests:,}",
        "files": str(g.files),
        "on disk": f"{g.bytes / 2**20:,.0f} MiB ({g.bytes_per_row:.0f} B/row)",
    }
