"""DuckDB analytics over the audit data set (Parquet written by retryscope)."""

from retryscope.analytics.dataset import DataSet, SkippedFile, connect, discover
from retryscope.analytics.report import build_report, format_json, format_text

__all__ = [
    "DataSet",
    "SkippedFile",
    "build_report",
    "connect",
    "discover",
    "format_json",
    "format_text",
]
