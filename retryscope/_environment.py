"""Environment variables of the audit engine, outside ``retryscope.analytics`` so that the CLI
names them in its help without importing DuckDB (an extra)."""

from typing import Final

CACHE_ENV: Final = "RETRYSCOPE_MODEL_CACHE"
"""Environment variable naming the cache directory (CLI and UI default)."""

MEMORY_LIMIT_ENV: Final = "RETRYSCOPE_MEMORY_LIMIT"
"""Environment variable giving DuckDB's memory limit (CLI and UI default)."""

MODEL_ENV: Final = "RETRYSCOPE_MODEL"
"""Environment variable naming a built model directory to read (CLI and UI default)."""

WATCH_INTERVAL_S: Final = 5.0
"""How often ``retryscope model --watch`` looks for closed files, by default."""

WATCH_SETTLE_S: Final = 120.0
"""How long the newest time partition must go without a new file before
``retryscope model --watch`` builds it, by default: twice the exporter's ``rotate_age_s``
(it cuts a file at least that often while spans arrive)."""
