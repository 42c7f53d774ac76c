"""The audit model's SQL scripts, in the order they run: the one place that order is kept.

``PER_REQUEST`` builds every per-request table from ``spans``; each depends on the spans of
one logical request only, so it may run once over the whole data set or once per request
partition. ``WHOLE_DATA_SET`` runs afterwards over the finished per-request tables (the
telemetry checks and the unfiltered scope's tables). ``SOURCES`` is every script whose text
shapes the model, so a change to any of them (:func:`script_text`, the rendered macros
included) invalidates a cached model.
"""

from typing import Final

from retryscope.analytics._macros import macros_sql
from retryscope.analytics._queries import load
from retryscope.analytics._scope_facts import TABLES as SCOPE_FACTS

MACROS: Final = "macros"
ATTEMPTS: Final = "model_attempts"
"""Every span marked as an attempt, with its request, layer and ordinals (``attempt_rows``)."""
HTTP_ATTEMPTS: Final = "model_http_attempts"
"""HTTP client spans no processor marked, classified as transport sends."""
REQUESTS: Final = "model_requests"
"""The per-request and per-attempt tables every metric reads."""
CHECKS: Final = "model_checks"
"""Telemetry checks: malformed spans, ordinals out of order, ordinal gaps, key conflicts."""
UNFILTERED_SCOPE: Final = "scope_unfiltered"

PER_REQUEST: Final = (ATTEMPTS, HTTP_ATTEMPTS, REQUESTS)
WHOLE_DATA_SET: Final = (CHECKS, UNFILTERED_SCOPE)
SOURCES: Final = (MACROS, *PER_REQUEST, *WHOLE_DATA_SET, *SCOPE_FACTS)


def script_text(name: str) -> str:
    """The text of one of :data:`SOURCES` as it runs (the macros as rendered)."""
    return macros_sql() if name == MACROS else load(name)


def model_script(name: str, *, temporary: bool) -> str:
    """One of the model's scripts. They create their tables as ``CREATE OR REPLACE TEMP
    TABLE``; built into a model cache file (``temporary=False``) the tables are persistent
    ones in the connection's default database, which is then that file, and the
    intermediate ones the scripts drop again go to the scratch database
    :data:`SCRATCH_DATABASE` (so the cache file has no freed blocks)."""
    text = script_text(name)
    if temporary:
        return text
    for table in _INTERMEDIATE_TABLES:
        text = text.replace(
            f"{_TEMP_TABLE}{table} ", f"CREATE OR REPLACE TABLE {SCRATCH_DATABASE}.{table} "
        )
    return text.replace(_TEMP_TABLE, "CREATE OR REPLACE TABLE ")


SCRATCH_DATABASE: Final = "rs_model_scratch"
"""Where a build into the model cache keeps the intermediate tables (a file of its own)."""
_INTERMEDIATE_TABLES: Final = ("attempt_rows", "attempt_groups")
_TEMP_TABLE: Final = "CREATE OR REPLACE TEMP TABLE "
