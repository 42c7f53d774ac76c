"""Asserting that an entry point contained an error (the application saw none)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from retryscope.instrumentation._containment import contained_errors, last_contained_errors


@contextmanager
def contains(entry: str, match: str) -> Iterator[None]:
    """The block raises nothing, and ``entry`` contains one more error whose description
    matches ``match`` (a regular expression)."""
    before = contained_errors().get(entry, 0)
    yield
    assert contained_errors().get(entry, 0) > before, f"{entry} contained no error"
    description = last_contained_errors()[entry]
    assert re.search(match, description), description
