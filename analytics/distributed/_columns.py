"""The span columns the model's scripts read: all a distributed build ships to its tasks.

An engine moves every column it reads through its shuffle and into each task's Python
worker, and most of a span row's bytes are columns no script reads (the attribute maps of
resources, events and links, status messages). The scripts name every column they read,
so the columns of :data:`~retryscope.schema.SPAN_SCHEMA` named in their text are enough;
a column left out reaches the task as NULL (as in a file of an older schema version).
"""

from __future__ import annotations

import re
from functools import cache

from retryscope.analytics.model import _scripts as scripts
from retryscope.schema import SPAN_SCHEMA


@cache
def model_columns() -> tuple[str, ...]:
    """The columns of the span schema named in any script of the model, in schema order."""
    text = "\n".join(scripts.script_text(name) for name in scripts.SOURCES).lower()
    words = set(re.findall(r"[a-z_][a-z0-9_]*", text))
    return tuple(name for name in SPAN_SCHEMA.names if name.lower() in words)
