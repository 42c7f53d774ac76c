"""The README's "Parquet schema v2" table documents every column of the schema."""

from __future__ import annotations

import re
from pathlib import Path

from retryscope.schema import SPAN_SCHEMA

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_column_is_documented_once() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Parquet schema v2", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE)
    assert documented == list(SPAN_SCHEMA.names)
