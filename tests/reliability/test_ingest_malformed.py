"""`retryscope ingest` over broken OTLP JSON lines: each malformed line is reported with
file:line and skipped; the valid lines of the same file are kept."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retryscope.cli import main
from retryscope.instrumentation.ingest._run import ingest
from tests.export_support import make_spans, otlp_json_doc, otlp_json_line, read_rows
from tests.reliability.support import rows

SPANS = make_spans(1)
GOOD = otlp_json_line(SPANS)
DOC = otlp_json_doc(SPANS)

JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
)
JSON = st.recursive(
    JSON_LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
OTLP_KEYS = [
    "resourceSpans",
    "resource",
    "attributes",
    "scopeSpans",
    "scope",
    "spans",
    "traceId",
    "spanId",
    "parentSpanId",
    "name",
    "kind",
    "startTimeUnixNano",
    "endTimeUnixNano",
    "status",
    "events",
    "links",
    "value",
    "stringValue",
    "intValue",
    "arrayValue",
]


def _mutations(draw: Any) -> bytes:
    """One broken line: garbage, truncation, invalid UTF-8, or a valid line with one field
    of the OTLP structure replaced by an arbitrary JSON value."""
    kind = draw(st.sampled_from(["garbage", "truncate", "utf8", "replace"]))
    if kind == "garbage":
        return draw(st.binary(min_size=1, max_size=60)).replace(b"\n", b" ") or b"x"
    if kind == "truncate":
        return GOOD.encode()[: draw(st.integers(1, len(GOOD) - 1))]
    if kind == "utf8":
        cut = draw(st.integers(1, len(GOOD) - 2))
        return GOOD.encode()[:cut] + b"\xff\xfe" + GOOD.encode()[cut:]
    doc = json.loads(GOOD)
    rng = random.Random(draw(st.integers(0, 2**32)))
    key, value = draw(st.sampled_from(OTLP_KEYS)), draw(JSON)
    holders = _holders(doc, key)
    if holders:
        rng.choice(holders)[key] = value
    else:
        doc = value
    return json.dumps(doc).encode()


def _holders(node: Any, key: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if key in node:
            found.append(node)
        for v in node.values():
            found.extend(_holders(v, key))
    elif isinstance(node, list):
        for v in node:
            found.extend(_holders(v, key))
    return found


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_generated_broken_lines_are_skipped_and_good_lines_kept(
    tmp_path_factory: Any, data: Any
) -> None:
    tmp = tmp_path_factory.mktemp("ingest")
    plan = data.draw(st.lists(st.booleans(), min_size=1, max_size=6), label="good lines")
    lines = [GOOD.encode() if good else _mutations(data.draw) for good in plan]
    src = tmp / "traces.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    problems: list[str] = []
    summary = ingest([src], tmp / "out", report=problems.append)
    kept = rows(tmp / "out").num_rows
    # A mutated line may still be valid OTLP (e.g. a name replaced by another string): every
    # line is either kept whole or reported by number; none takes its neighbours with it.
    reported = {int(p.split(":")[1]) for p in problems}
    assert all(p.startswith(f"{src}:") for p in problems)
    assert summary.skipped == len(reported) == len(problems)
    assert kept == summary.spans_read == summary.rows_written
    good_numbers = {n for n, good in enumerate(plan, 1) if good}
    assert not good_numbers & reported
    # good lines are all kept; a mutated line that still decodes keeps 0..n spans
    assert len(good_numbers) * len(SPANS) <= kept <= (len(plan) - len(reported)) * len(SPANS)


def test_cli_reports_hand_broken_lines_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cases tests/test_ingest.py does not already cover: invalid UTF-8 in one line,
    a wrong structure type deep inside, a time beyond the nanosecond range."""
    bad_status = json.loads(GOOD)
    bad_status["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["status"] = ["x"]
    bad_scope = json.loads(GOOD)
    bad_scope["resourceSpans"][0]["scopeSpans"][0]["scope"] = "not an object"
    bad_time = json.loads(GOOD)
    bad_time["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["endTimeUnixNano"] = str(2**70)
    src = tmp_path / "broken.jsonl"
    src.write_bytes(
        b"\n".join(
            [
                GOOD.encode(),
                GOOD.encode()[:40] + b"\xff" + GOOD.encode()[40:],
                json.dumps(bad_status).encode(),
                json.dumps(bad_scope).encode(),
                json.dumps(bad_time).encode(),
                b"[1, 2",
                GOOD.encode(),
            ]
        )
        + b"\n"
    )
    code = main(["ingest", str(src), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1
    for line in (2, 3, 4, 5, 6):
        assert f"{src}:{line}: " in err, err
    assert f"{src}:1: " not in err
    assert f"{src}:7: " not in err
    assert read_rows(tmp_path / "out").num_rows == 2 * len(SPANS)


@pytest.mark.parametrize("line", [b"0", b"[1, 2]", b'"text"', b"null"])
@pytest.mark.parametrize("more", [False, True], ids=["alone", "before a good line"])
def test_a_json_line_that_is_no_object_is_reported_by_its_number(
    tmp_path: Path, line: bytes, more: bool
) -> None:
    """A source of one line is JSON lines, not one document: a line that parses but is no
    object is named by file and line (and the good line after it is kept)."""
    src = tmp_path / "traces.jsonl"
    src.write_bytes(line + b"\n" + (GOOD.encode() + b"\n" if more else b""))
    problems: list[str] = []
    summary = ingest([src], tmp_path / "out", report=problems.append)
    assert problems == [f"{src}:1: expected a JSON object, got {type(json.loads(line)).__name__}"]
    assert summary.spans_read == (len(SPANS) if more else 0)
