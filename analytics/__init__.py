"""DuckDB analytics over the audit data set (Parquet written by retryscope).

``connect(path)`` opens the views; the functions below return Arrow tables (SQL in
``analytics/sql/*/*.sql``); ``build_report`` assembles the report, whose JSON contract is
:data:`REPORT_KEYS`. Each figure's rule is one macro of ``analytics/sql/model/macros.sql``:
docs/guides/analytics.md, "Where each figure is defined", links each to its line.
"""

from retryscope._extras import extra_needed

with extra_needed(__name__, "analytics"):  # DuckDB, xxhash
    from retryscope.analytics._dataset import (
        DataSet,
        SkippedFile,
        connect,
        discover,
        new_connection,
        skipped_files,
    )
    from retryscope.analytics._filters import Dimension, Filters, parse_time
    from retryscope.analytics._findings import RULES, Rule, Severity, finding_counts, findings
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
    "DYNAMIC_REPORT_KEYS",
    "REPORT_KEYS",
    "RULES",
    "DataSet",
    "Dimension",
    "Filters",
    "ReportKey",
    "Rule",
    "Severity",
    "SkippedFile",
    "Thresholds",
    "amplification",
    "build_report",
    "connect",
    "cost",
    "deadline",
    "discover",
    "fallback",
    "finding_counts",
    "findings",
    "format_json",
    "format_markdown",
    "format_text",
    "hedging",
    "ineffective_retries",
    "latency",
    "load",
    "new_connection",
    "parse_time",
    "request_attempts",
    "request_detail",
    "request_summary",
    "retry_effectiveness",
    "skipped_files",
    "synchronized_retries",
    "wasted_cost",
]
