"""DuckDB analytics over the audit data set (Parquet written by retryscope).

``connect(path)`` opens the data set as an :class:`AuditModel` (nothing read yet); every
function below takes it and returns Arrow tables (SQL in ``analytics/sql/<stage>/*.sql``).
The model is built once, when an analysis first needs it (:meth:`AuditModel.build`);
a lookup of one request never builds it. ``build_report`` assembles the report, whose
JSON contract is :data:`REPORT_KEYS`. Replay (policy drift, what-if):
:mod:`retryscope.analytics.replay`; the model's build and tables:
:mod:`retryscope.analytics.model`; a model built on Spark:
:mod:`retryscope.analytics.distributed`; the CLI's subcommands:
:mod:`retryscope.analytics.commands`.
Each figure's rule is one macro of ``analytics/sql/model/macros.sql``:
docs/guides/analytics.md, "Where each figure is defined", links each to its line.
"""

from retryscope._extras import extra_needed

with extra_needed(__name__, "analytics"):  # DuckDB, xxhash
    from retryscope.analytics._audit_model import AuditModel, connect
    from retryscope.analytics._breakdown import BREAKDOWN_FIGURES, breakdown
    from retryscope.analytics._browse import (
        COMPARE_DIMENSIONS,
        RequestQuery,
        RequestSort,
        class_names,
        dimension_values,
        nested_retry_requests,
        request_findings,
        request_list,
        request_span_tree,
        retry_success_matrix,
        scope_time_range,
        time_range,
    )
    from retryscope.analytics._compare import compare, compare_requests
    from retryscope.analytics._dataset import DataSet, SkippedFile, discover, new_connection
    from retryscope.analytics._figures import FigureStore, Fingerprint, fingerprint, trend_bucket
    from retryscope.analytics._filters import Dimension, Filters, parse_time
    from retryscope.analytics._findings import (
        RULES,
        RULES_BY_ID,
        Rule,
        Severity,
        finding_counts,
        findings,
    )
    from retryscope.analytics._headline import headline
    from retryscope.analytics._metrics import (
        Thresholds,
        amplification,
        cost,
        deadline,
        fallback,
        hedging,
        ineffective_retries,
        latency,
        load,
        retry_effectiveness,
        synchronized_retries,
        wasted_cost,
    )
    from retryscope.analytics._report import build_report, format_json, format_markdown, format_text
    from retryscope.analytics._report_contract import DYNAMIC_REPORT_KEYS, REPORT_KEYS, ReportKey
    from retryscope.analytics._requests import request_attempts, request_detail, request_summary

__all__ = [
    "BREAKDOWN_FIGURES",
    "COMPARE_DIMENSIONS",
    "DYNAMIC_REPORT_KEYS",
    "REPORT_KEYS",
    "RULES",
    "RULES_BY_ID",
    "AuditModel",
    "DataSet",
    "Dimension",
    "FigureStore",
    "Filters",
    "Fingerprint",
    "ReportKey",
    "RequestQuery",
    "RequestSort",
    "Rule",
    "Severity",
    "SkippedFile",
    "Thresholds",
    "amplification",
    "breakdown",
    "build_report",
    "class_names",
    "compare",
    "compare_requests",
    "connect",
    "cost",
    "deadline",
    "dimension_values",
    "discover",
    "fallback",
    "finding_counts",
    "findings",
    "fingerprint",
    "format_json",
    "format_markdown",
    "format_text",
    "headline",
    "hedging",
    "ineffective_retries",
    "latency",
    "load",
    "nested_retry_requests",
    "new_connection",
    "parse_time",
    "request_attempts",
    "request_detail",
    "request_findings",
    "request_list",
    "request_span_tree",
    "request_summary",
    "retry_effectiveness",
    "retry_success_matrix",
    "scope_time_range",
    "synchronized_retries",
    "time_range",
    "trend_bucket",
    "wasted_cost",
]
