"""The reference pages under ``docs/reference/``, generated from the code they describe.

Each page has one source: the attribute vocabulary and Parquet schema
(:mod:`retryscope.vocabulary`, :mod:`retryscope.schema`), the findings rule catalog
(:data:`retryscope.analytics.RULES`), the report JSON contract
(:data:`retryscope.analytics.REPORT_KEYS`), the command-line parser
(:func:`retryscope.cli.build_parser`) and the exporter's settings
(:class:`~retryscope.instrumentation.export.ExportConfig`). ``python -m retryscope.reference``
writes them; ``--check`` names every page that differs from what the code generates. A
generator that finds its sources disagreeing (an exporter keyword argument that is not a
setting, a column without a meaning) raises :class:`ReferenceMismatch` instead of writing.
"""

from retryscope.reference._pages import (
    PAGES,
    REGENERATE,
    Page,
    ReferenceMismatch,
    render_all,
    stale_pages,
)

__all__ = ["PAGES", "REGENERATE", "Page", "ReferenceMismatch", "render_all", "stale_pages"]
