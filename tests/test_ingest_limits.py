"""The ingest bounds: how they are set (flags, ``RETRYSCOPE_INGEST_*``), how each is named
when hit, and the nesting-depth scan that guards the parsers, against ``json`` as oracle."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from retryscope.cli import main
from retryscope.instrumentation.ingest._json_depth import deep_lines, line_depths
from retryscope.instrumentation.ingest._run import ingest
from retryscope.instrumentation.ingest.limits import IngestLimits, parse_size

from .export_support import make_spans, otlp_json_line, otlp_proto, read_rows

DOCS = Path(__file__).resolve().parents[1] / "docs" / "guides" / "collector.md"


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_STRINGS = st.text(alphabet=st.sampled_from('ab[]{}"\\\n\x1b'), max_size=6)
_JSON = st.recursive(
    st.none() | st.integers() | _STRINGS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_STRINGS, inner, max_size=3),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_JSON, min_size=1, max_size=6), spaces=st.booleans())
def test_depth_scan_equals_the_parsed_depth(values: list[Any], spaces: bool) -> None:
    """Strings full of brackets, quotes and backslashes never fool the scan."""
    lines = [json.dumps(v, separators=(", ", ": ") if spaces else (",", ":")) for v in values]
    block = "\n".join(lines).encode() + b"\n"
    assert list(line_depths(block)) == [_depth(v) for v in values]
    limit = max(_depth(v) for v in values) - 1
    assert [i for i, _ in deep_lines(block, limit)] == [
        i for i, v in enumerate(values) if _depth(v) > limit
    ]


def test_depth_scan_of_broken_lines_bounds_what_a_parser_reaches() -> None:
    """An unterminated string hides nothing after it from a parser either, and does not
    carry over to the next line."""
    block = b'["x [[[[\n[[[]]]\n{"a": "\\\\"}\n"\\"[[\n'
    assert list(line_depths(block)) == [1, 3, 1, 0]


def test_sizes_and_variables() -> None:
    assert parse_size("1048576") == 1 << 20
    assert parse_size("64MiB") == parse_size("64m") == 64 << 20
    assert parse_size("2GB") == 2 * 10**9
    with pytest.raises(ValueError, match="expected a size"):
        parse_size("lots")
    limits = IngestLimits.from_env(
        {"RETRYSCOPE_INGEST_MAX_MESSAGE_BYTES": "2MiB", "RETRYSCOPE_INGEST_MAX_RATIO": "50"},
        max_ratio=70.0,  # a flag wins over its variable
    )
    assert (limits.max_message_bytes, limits.max_ratio) == (2 << 20, 70.0)
    with pytest.raises(ValueError, match="RETRYSCOPE_INGEST_MAX_JSON_DEPTH='x'"):
        IngestLimits.from_env({"RETRYSCOPE_INGEST_MAX_JSON_DEPTH": "x"})
    with pytest.raises(ValueError, match="between 1 and 500"):
        IngestLimits(max_json_depth=501)
    with pytest.raises(ValueError, match="at least 1MiB"):
        IngestLimits(max_message_bytes=1000)


def test_every_bound_is_documented_with_its_flag_and_variable() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for f in fields(IngestLimits):
        assert IngestLimits.variable(f.name) in text
        assert IngestLimits.flag(f.name) in text


def test_cli_flags_set_the_bounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spans = make_spans(1)
    inner = {"key": "k", "value": {"arrayValue": {"values": [{"intValue": "1"}]}}}
    nested = {"key": "deep", "value": {"kvlistValue": {"values": [inner]}}}
    doc = json.loads(otlp_json_line(spans))
    doc["resourceSpans"][0]["resource"]["attributes"].append(nested)
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps(doc) + "\n" + otlp_json_line(make_spans(2)[3:]) + "\n")
    code = main(["ingest", str(src), "--out", str(tmp_path / "out"), "--max-json-depth", "13"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"{src}:1: nested 14 levels deep, more than 13" in err  # plain spans need 13
    assert f"{src}:2:" not in err
    assert read_rows(tmp_path / "out").num_rows == 3
    code = main(["ingest", str(src), "--out", str(tmp_path / "o2"), "--max-ratio", "0"])
    assert code == 2
    assert "max_decompressed_bytes and max_ratio must be positive" in capsys.readouterr().err


def test_collector_zstd_frames_are_read_whatever_the_name(tmp_path: Path) -> None:
    """``compression: zstd`` without the native-compression gate: each batch a zstd frame
    behind a 4-byte length, JSON (``format: json``) or protobuf (``format: proto``); and
    with the gate, one zstd stream (several frames when flushed) of JSON lines."""
    spans = make_spans(3)
    z = zstandard.ZstdCompressor()
    parts = [spans[i : i + 3] for i in range(0, 9, 3)]
    json_frames = [z.compress(otlp_json_line(p).encode()) for p in parts]
    proto_frames = [z.compress(otlp_proto(p)) for p in parts]
    (tmp_path / "src").mkdir()
    for name, frames in (("traces.json", json_frames), ("traces.proto", proto_frames)):
        (tmp_path / "src" / name).write_bytes(
            b"".join(len(f).to_bytes(4, "big") + f for f in frames)
        )
    native = b"".join(z.compress((otlp_json_line(p) + "\n").encode()) for p in parts)
    (tmp_path / "src" / "native.jsonl").write_bytes(native)  # concatenated frames
    summary = ingest([tmp_path / "src"], tmp_path / "out")
    assert summary.skipped == 0
    # the same spans three times over: the files are read, and their rows are equal
    assert summary.rows_written == 3 * len(spans)
    rows = read_rows(tmp_path / "out")
    assert sorted(rows.column("span_id").to_pylist()) == sorted(
        3 * [s.context.span_id.to_bytes(8, "big").hex() for s in spans]
    )


def test_a_grown_copy_under_a_new_name_is_read_on(tmp_path: Path) -> None:
    """Recognised by content: the rotated (renamed) file continues what was read of it."""
    lines = [otlp_json_line(make_spans(2)[i : i + 1]) + "\n" for i in range(6)]
    live = tmp_path / "traces.jsonl"
    live.write_text("".join(lines[:3]) + lines[3][:10])  # a line still being written
    first = ingest([live], tmp_path / "out")
    assert (first.rows_written, first.unfinished_sources) == (3, 1)
    rotated = tmp_path / "traces-2026-12-01T10-00-00.000.jsonl"
    live.rename(rotated)
    rotated.write_text("".join(lines))
    second = ingest([rotated], tmp_path / "out")
    assert (second.rows_written, second.resumed_sources, second.rewritten_sources) == (3, 1, 0)
    assert read_rows(tmp_path / "out").num_rows == 6
