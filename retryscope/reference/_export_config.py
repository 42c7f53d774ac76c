"""``export-config.md``: the Parquet writer's settings, and the check that the exporter's
keyword arguments, :class:`ExportConfig` and the ``RETRYSCOPE_PARQUET_*`` variables agree."""

from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Any

from retryscope.reference._markdown import code, header, settings_rows, table

SOURCES = "ExportConfig and ParquetSpanExporter in retryscope.instrumentation.export"
_NOT_SETTINGS = frozenset({"self", "config"})


def check_agreement() -> None:
    """Raise :class:`ReferenceMismatch` unless every setting is one keyword argument of
    ``ParquetSpanExporter`` with the field's name, has a variable that reads its default
    text back to the default, and says what it means."""
    from retryscope.instrumentation.export import ExportConfig, ParquetSpanExporter
    from retryscope.reference._pages import ReferenceMismatch

    names = [f.name for f in fields(ExportConfig)]
    parameters = inspect.signature(ParquetSpanExporter.__init__).parameters
    keywords = [p for p in parameters if p not in _NOT_SETTINGS]
    if keywords != names:
        raise ReferenceMismatch(
            f"ParquetSpanExporter's keyword arguments {keywords} are not the ExportConfig "
            f"fields {names} (same names, same order)"
        )
    defaults = ExportConfig()
    texts = defaults.to_env()
    if sorted(texts) != sorted(ExportConfig.variable(n) for n in names):
        raise ReferenceMismatch(f"ExportConfig.to_env() writes {sorted(texts)}")
    try:
        read_back = ExportConfig.from_env(texts)
    except ValueError as exc:
        raise ReferenceMismatch(f"a default text does not read back: {exc}") from None
    if read_back != defaults:
        raise ReferenceMismatch("the variables' default texts do not read back to the defaults")
    for f in fields(ExportConfig):
        if not f.metadata.get("doc"):
            raise ReferenceMismatch(f"ExportConfig.{f.name} has no doc metadata")


def _keyword(name: str, annotation: Any) -> str:
    return f"{name}: {annotation}".replace(" | None", "")


def render() -> str:
    from retryscope.instrumentation.export import ExportConfig, ParquetSpanExporter

    check_agreement()
    parameters = inspect.signature(ParquetSpanExporter.__init__).parameters
    lines = header(
        "Exporter settings",
        SOURCES,
        f"{code('ParquetSpanExporter(directory, *, config=None, **settings)')} writes the "
        "audit data set. Each setting has one name: the keyword argument, the "
        f"{code('ExportConfig')} field, and (in capitals, after "
        f"{code('RETRYSCOPE_PARQUET_')}) the environment variable. Keyword arguments "
        f"override {code('config')}, which defaults to {code('ExportConfig.from_env()')}: "
        f"without arguments (as {code('OTEL_TRACES_EXPORTER=retryscope_parquet')} builds "
        "it) the exporter reads the variables. A malformed variable stops start-up with an "
        f"error naming it. {code('retryscope ingest')} follows the same variables for the "
        "files it writes.",
    )
    lines += table(
        ("keyword argument", "variable", "default", "meaning"),
        settings_rows(ExportConfig, lambda f: _keyword(f.name, parameters[f.name].annotation)),
    )
    return "\n".join(lines) + "\n"
