"""``retryscope ingest``: Collector OTLP files become the same rows the exporter writes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from retryscope.cli import main
from retryscope.instrumentation import ParquetSpanExporter
from retryscope.instrumentation.export._columns import SpanColumns
from retryscope.instrumentation.ingest._otlp_decode import OtlpFormatError, any_value, decode_traces
from retryscope.instrumentation.ingest._run import ingest

from .export_support import make_spans, otlp_json_doc, otlp_json_line, otlp_proto, read_rows


def _exported(tmp_path: Path, spans: list) -> Path:
    out = tmp_path / "exported"
    exporter = ParquetSpanExporter(out)
    exporter.export(spans)
    exporter.shutdown()
    return out


def test_json_lines_rows_equal_exporter_rows(tmp_path: Path) -> None:
    spans = make_spans(3)
    src = tmp_path / "collector" / "traces.json"
    src.parent.mkdir()
    half = len(spans) // 2
    src.write_text(otlp_json_line(spans[:half]) + "\n" + otlp_json_line(spans[half:]) + "\n")
    summary = ingest([src], tmp_path / "ingested")
    assert (summary.spans_read, summary.rows_written, summary.skipped) == (
        len(spans),
        len(spans),
        0,
    )
    expected = read_rows(_exported(tmp_path, spans))
    got = read_rows(tmp_path / "ingested")
    assert got.equals(expected)
    # the dedicated columns really were filled, and the wrong-typed token count kept in the map
    http = next(r for r in got.to_pylist() if r["name"] == "http POST")
    assert http["http_status_code"] == 200
    assert http["logical_request_id"]
    assert ("gen_ai.usage.input_tokens", '"many"') in http["attributes"]
    assert http["events"][0]["name"] == "sent"
    assert http["links"][0]["span_id"]


@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_s3_layout_proto_and_json(tmp_path: Path, compression: str) -> None:
    spans = make_spans(2)
    root = tmp_path / "bucket" / "traces" / "year=2026" / "month=11" / "day=29" / "hour=22"
    (root / "minute=05").mkdir(parents=True)
    (root / "minute=06").mkdir(parents=True)
    proto, text = otlp_proto(spans[:3]), json.dumps(otlp_json_doc(spans[3:])).encode()
    if compression == "gzip":
        proto, text = gzip.compress(proto), gzip.compress(text)
    suffix = ".gz" if compression == "gzip" else ""
    (root / "minute=05" / f"traces_123.binpb{suffix}").write_bytes(proto)
    (root / "minute=06" / f"traces_456.json{suffix}").write_bytes(text)
    summary = ingest([tmp_path / "bucket"], tmp_path / "out")
    assert summary.sources == 2
    assert summary.rows_written == len(spans)
    assert read_rows(tmp_path / "out").equals(read_rows(_exported(tmp_path, spans)))


def test_zstd_rotated_json_lines_and_pretty_single_document(tmp_path: Path) -> None:
    spans = make_spans(2)
    src = tmp_path / "src"
    src.mkdir()
    lines = (otlp_json_line(spans[:2]) + "\n" + otlp_json_line(spans[2:4]) + "\n").encode()
    (src / "traces-2026-11-29T22-00-00.000.json.zst").write_bytes(
        zstandard.ZstdCompressor().compress(lines)
    )
    (src / "single.json").write_text(json.dumps(otlp_json_doc(spans[4:]), indent=2))
    summary = ingest([src], tmp_path / "out")
    assert summary.skipped == 0
    assert summary.rows_written == len(spans)
    assert read_rows(tmp_path / "out").equals(read_rows(_exported(tmp_path, spans)))


def test_length_prefixed_proto_file(tmp_path: Path) -> None:
    spans = make_spans(2)
    framed = b"".join(
        len(m).to_bytes(4, "big") + m for m in (otlp_proto(spans[:2]), otlp_proto(spans[2:]))
    )
    (tmp_path / "traces.pb").write_bytes(framed)
    summary = ingest([tmp_path / "traces.pb"], tmp_path / "out")
    assert summary.rows_written == len(spans)


def test_reingest_adds_no_duplicates(tmp_path: Path) -> None:
    spans = make_spans(2)
    src = tmp_path / "traces.json"
    src.write_text(otlp_json_line(spans) + "\n")
    first = ingest([src], tmp_path / "out")
    copy = tmp_path / "copy" / "same.json"
    copy.parent.mkdir()
    copy.write_bytes(src.read_bytes())
    second = ingest([src, copy], tmp_path / "out")
    assert first.rows_written == len(spans)
    assert (second.rows_written, second.duplicate_sources) == (0, 2)
    assert read_rows(tmp_path / "out").num_rows == len(spans)


def test_interrupted_run_files_are_replaced_not_duplicated(tmp_path: Path) -> None:
    spans = make_spans(2)
    src = tmp_path / "traces.json"
    src.write_text(otlp_json_line(spans) + "\n")
    ingest([src], tmp_path / "out")
    (tmp_path / "out" / ".retryscope-ingest" / "ledger.jsonl").unlink()  # crash before ledger
    again = ingest([src], tmp_path / "out")
    assert again.rows_written == len(spans)
    assert read_rows(tmp_path / "out").num_rows == len(spans)


def test_malformed_lines_reported_and_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spans = make_spans(1)
    bad_id = otlp_json_doc(spans)
    bad_id["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "xyz"
    src = tmp_path / "traces.json"
    src.write_text(
        "\n".join(
            [
                otlp_json_line(spans),
                "{not json",
                json.dumps(bad_id),
                json.dumps({"resourceLogs": []}),
                "",
                otlp_json_line(spans),
            ]
        )
        + "\n"
    )
    code = main(["ingest", str(src), "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 1
    assert f"{src}:2: invalid JSON" in captured.err
    assert f"{src}:3: traceId: expected 32 hex digits" in captured.err
    assert f"{src}:4: no 'resourceSpans'" in captured.err
    assert f"spans read: {2 * len(spans)}" in captured.out
    assert "skipped: 3" in captured.out
    assert read_rows(tmp_path / "out").num_rows == 2 * len(spans)


def test_truncated_gzip_keeps_lines_read_before(tmp_path: Path) -> None:
    spans = make_spans(1)
    body = "".join(otlp_json_line(spans) + "\n" for _ in range(50)).encode()
    whole = gzip.compress(body)
    src = tmp_path / "traces.json.gz"
    src.write_bytes(whole[: len(whole) * 3 // 4])
    summary = ingest([src], tmp_path / "out")
    assert (summary.skipped, summary.unfinished_sources) == (0, 1)
    assert "the gzip stream ends inside a member" in summary.problems[0]
    assert 0 < summary.rows_written < 50 * len(spans)
    # the complete stream later: only the lines after the last run's end are read
    src.write_bytes(whole)
    again = ingest([src], tmp_path / "out")
    assert (again.resumed_sources, again.unfinished_sources) == (1, 0)
    assert summary.rows_written + again.rows_written == 50 * len(spans)
    assert read_rows(tmp_path / "out").num_rows == 50 * len(spans)


def test_any_value_kinds_and_int64_forms() -> None:
    assert any_value({"stringValue": "x"}) == "x"
    assert any_value({"boolValue": False}) is False
    assert any_value({"intValue": "9007199254740993"}) == 9007199254740993
    assert any_value({"intValue": 7}) == 7
    assert any_value({"doubleValue": "NaN"}) != any_value({"doubleValue": "NaN"})
    assert any_value({"doubleValue": 1.5}) == 1.5
    assert any_value({"bytesValue": "AAE="}) == "AAE="
    assert any_value({"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "a"}]}}) == [
        1,
        "a",
    ]
    assert any_value({"kvlistValue": {"values": [{"key": "k", "value": {"arrayValue": {}}}]}}) == {
        "k": []
    }
    assert any_value({}) is None
    with pytest.raises(OtlpFormatError, match="unknown kind"):
        any_value({"weirdValue": 1})
    with pytest.raises(OtlpFormatError, match="intValue"):
        any_value({"intValue": "1.5x"})


def test_enum_names_numbers_and_bad_documents_add_nothing() -> None:
    cols = SpanColumns()
    span = {
        "traceId": "AB" * 16,
        "spanId": "cd" * 8,
        "name": "s",
        "kind": "SPAN_KIND_SERVER",
        "startTimeUnixNano": "1764450000000000000",
        "endTimeUnixNano": 1764450000000001000,
        "status": {"code": 2, "message": "bad"},
    }
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    assert decode_traces(doc, cols) == 1
    row = cols.to_table().to_pylist()[0]
    assert (row["trace_id"], row["kind"], row["status_code"]) == ("ab" * 16, "SERVER", "ERROR")
    bad = {"resourceSpans": [{"scopeSpans": [{"spans": [span, {**span, "kind": 9}]}]}]}
    with pytest.raises(OtlpFormatError, match="kind"):
        decode_traces(bad, cols)
    assert len(cols) == 1


_scalars = (
    st.text(max_size=20)
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
)
_values = _scalars | st.lists(_scalars, max_size=4)


def _to_any_value(value: object, as_string_ints: bool) -> dict[str, object]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value) if as_string_ints else value}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    assert isinstance(value, list)
    return {"arrayValue": {"values": [_to_any_value(v, as_string_ints) for v in value]}}


@settings(max_examples=150, deadline=None)
@given(
    attrs=st.dictionaries(st.text(min_size=1, max_size=12), _values, max_size=6),
    as_string_ints=st.booleans(),
)
def test_decoded_attributes_match_the_exporters_encoding(
    attrs: dict[str, object], as_string_ints: bool
) -> None:
    """Any OTLP attribute set decodes to the row the exporter would write for the same
    attributes on an SDK span (dedicated columns when the type fits, else the JSON map)."""
    span = {
        "traceId": "0a" * 16,
        "spanId": "0b" * 8,
        "name": "s",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        "attributes": [
            {"key": k, "value": _to_any_value(v, as_string_ints)} for k, v in attrs.items()
        ],
    }
    decoded = SpanColumns()
    decode_traces({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}, decoded)
    direct = SpanColumns()
    direct.append(
        trace_id="0a" * 16,
        span_id="0b" * 8,
        parent_span_id=None,
        name="s",
        kind="UNSPECIFIED",
        start_ns=1,
        end_ns=2,
        status_code="UNSET",
        status_message=None,
        attributes=attrs,
        resource={},
        scope_name=None,
        scope_version=None,
    )
    assert decoded.to_table().equals(direct.to_table())


def test_cli_names_a_missing_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["ingest", str(tmp_path / "nope"), "--out", str(tmp_path / "out")])
    assert code == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_foreign_files_are_reported_not_fatal(tmp_path: Path) -> None:
    spans = make_spans(1)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "README.txt").write_text("hello\n")
    (tmp_path / "src" / "blob.bin").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "src" / ".hidden.json").write_text("{broken")
    (tmp_path / "src" / "ok.json").write_text(otlp_json_line(spans) + "\n")
    summary = ingest([tmp_path / "src"], tmp_path / "out")
    assert summary.sources == 3  # the hidden file is not a source
    assert summary.rows_written == len(spans)
    assert summary.skipped == 2
    assert any("blob.bin" in p for p in summary.problems)
    assert any("README.txt" in p for p in summary.problems)


def test_unwritable_output_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "traces.json"
    src.write_text(otlp_json_line(make_spans(1)) + "\n")
    (tmp_path / "out").write_text("a file where the output directory should be")
    code = main(["ingest", str(src), "--out", str(tmp_path / "out")])
    assert code == 2
    assert "retryscope ingest: error:" in capsys.readouterr().err


def test_cli_follows_parquet_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "traces.json"
    src.write_text(otlp_json_line(make_spans(1)) + "\n")
    monkeypatch.setenv("RETRYSCOPE_PARQUET_PARTITIONING", "none")
    monkeypatch.setenv("RETRYSCOPE_PARQUET_FILE_MODE", "640")
    assert main(["ingest", str(src), "--out", str(tmp_path / "out")]) == 0
    (written,) = (tmp_path / "out").glob("ingest-*.parquet")
    assert written.stat().st_mode & 0o777 == 0o640
    assert main(["ingest", str(src), "--out", str(tmp_path / "o2"), "--partitioning", "day"]) == 0
    assert [p.parent.name.startswith("date=") for p in (tmp_path / "o2").rglob("*.parquet")] == [
        True
    ]


def test_a_recorded_prefix_continues_only_content_of_its_format(tmp_path: Path) -> None:
    """A part of one blank line is a byte-prefix of every protobuf message (they start
    with 0x0a): the message is still read as protobuf, not as JSON lines after that byte."""
    spans = make_spans(1)
    (tmp_path / "blank.jsonl").write_bytes(b"\n")
    assert ingest([tmp_path / "blank.jsonl"], tmp_path / "out").duplicate_sources == 0
    message = otlp_proto(spans)
    assert message[:1] == b"\n"
    (tmp_path / "traces.binpb").write_bytes(message)
    summary = ingest([tmp_path / "traces.binpb"], tmp_path / "out")
    assert (summary.rows_written, summary.skipped, summary.resumed_sources) == (len(spans), 0, 0)


@pytest.mark.parametrize("magic", [b"\x1f\x8b", b"\x28\xb5\x2f\xfd"], ids=["gzip", "zstd"])
def test_a_text_line_starting_with_a_magic_number_is_only_that_line(
    tmp_path: Path, magic: bytes
) -> None:
    """The magic bytes are a compressed stream only when what follows decompresses."""
    spans = make_spans(1)
    src = tmp_path / "traces.jsonl"
    src.write_bytes(magic + b" garbage\n" + otlp_json_line(spans).encode() + b"\n")
    summary = ingest([src], tmp_path / "out")
    assert (summary.skipped, summary.failed_sources) == (1, 0)
    assert summary.problems[0].startswith(f"{src}:1: ")
    assert read_rows(tmp_path / "out").num_rows == len(spans)
