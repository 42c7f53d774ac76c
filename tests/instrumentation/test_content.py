"""Prompt and completion text is withheld by both writers (the Parquet exporter and
``retryscope ingest``) unless ``keep_content`` is on; the key names come from the real
packages that write them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from openinference.semconv.trace import MessageAttributes, SpanAttributes
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai
from opentelemetry.semconv_ai import SpanAttributes as Traceloop
from pydantic_ai._instrumentation import InstrumentationNames

from retryscope.instrumentation import ExportConfig, ParquetSpanExporter
from retryscope.instrumentation.export._content import CONTENT_KEYS, is_content_key
from retryscope.instrumentation.export._scrub import scrub as withhold_content
from retryscope.instrumentation.ingest._run import ingest
from tests.export_support import otlp_json_line, otlp_proto, read_rows

SECRET = "the secret prompt 7c41"
MARKED = '"REDACTED"'
_V2 = InstrumentationNames.for_version(2)
_V3 = InstrumentationNames.for_version(3)

CONTENT = tuple(
    dict.fromkeys(
        (
            # OpenTelemetry GenAI semantic conventions
            genai.GEN_AI_INPUT_MESSAGES,
            genai.GEN_AI_OUTPUT_MESSAGES,
            genai.GEN_AI_SYSTEM_INSTRUCTIONS,
            genai.GEN_AI_TOOL_CALL_ARGUMENTS,
            genai.GEN_AI_TOOL_CALL_RESULT,
            genai.GEN_AI_PROMPT,
            genai.GEN_AI_COMPLETION,
            # OpenInference (flattened messages)
            SpanAttributes.INPUT_VALUE,
            SpanAttributes.OUTPUT_VALUE,
            f"{SpanAttributes.LLM_INPUT_MESSAGES}.0.{MessageAttributes.MESSAGE_CONTENT}",
            f"{SpanAttributes.LLM_OUTPUT_MESSAGES}.0.{MessageAttributes.MESSAGE_CONTENT}",
            # OpenLLMetry / Traceloop (indexed)
            f"{Traceloop.LLM_PROMPTS}.0.content",
            f"{Traceloop.LLM_COMPLETIONS}.0.content",
            Traceloop.TRACELOOP_ENTITY_INPUT,
            Traceloop.TRACELOOP_ENTITY_OUTPUT,
            # pydantic-ai (both instrumentation versions) and Logfire
            _V2.tool_arguments_attr,
            _V2.tool_result_attr,
            _V3.tool_arguments_attr,
            "pydantic_ai.all_messages",
            "final_result",
            "model_request_parameters",
            "all_messages_events",
            "request_data",
            "response_data",
            "prompt",
        )
    )
)
NOT_CONTENT = (
    genai.GEN_AI_PROMPT_NAME,  # a template's name
    "gen_ai.input.messages.ref",  # where an uploader put the messages
    "gen_ai.usage.prompt_tokens",
    "gen_ai.request.model",
    "llm.input_messages_count",
    "xinput.value",
    "input.values",
    "input.value.x",
)


def test_content_keys_of_the_real_packages_are_content() -> None:
    assert all(map(is_content_key, CONTENT))
    assert not any(map(is_content_key, NOT_CONTENT))
    assert all(map(is_content_key, CONTENT_KEYS))


def _spans(attributes: dict[str, str]) -> list[ReadableSpan]:
    """Real spans from a real TracerProvider: one with every content attribute and a
    ``gen_ai.content.prompt`` event, one plain."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("genai-test", "1.0")
    with tracer.start_as_current_span("chat gpt-4o-mini", attributes=attributes) as span:
        span.add_event("gen_ai.content.prompt", {genai.GEN_AI_PROMPT: SECRET})
        span.add_event("done", {"n": 1})
    with tracer.start_as_current_span("plain", attributes={"note": "kept"}):
        pass
    provider.shutdown()
    return list(memory.get_finished_spans())


ATTRIBUTES = {key: f"{SECRET} in {key}" for key in CONTENT} | {
    key: f"kept {key}" for key in NOT_CONTENT
}


def _assert_withheld(rows: pa.Table) -> None:
    """No column of any row holds the secret; each content key stays, marked."""
    assert SECRET not in str(rows.to_pylist())
    chat = next(r for r in rows.to_pylist() if r["name"] == "chat gpt-4o-mini")
    attributes = dict(chat["attributes"])
    for key in CONTENT:
        assert attributes[key] == MARKED, key
    for key in NOT_CONTENT:
        if key in attributes:  # (a dedicated column takes some)
            assert attributes[key] == f'"kept {key}"'
    assert dict(chat["events"][0]["attributes"]) == {genai.GEN_AI_PROMPT: MARKED}
    assert dict(chat["events"][1]["attributes"]) == {"n": "1"}


def test_the_exporter_withholds_content(tmp_path: Path) -> None:
    exporter = ParquetSpanExporter(tmp_path / "spans")
    exporter.export(_spans(ATTRIBUTES))
    exporter.shutdown()
    _assert_withheld(read_rows(tmp_path / "spans"))
    assert exporter.withheld_content == len(CONTENT) + 1
    raw = b"".join(p.read_bytes() for p in (tmp_path / "spans").rglob("*") if p.is_file())
    assert SECRET.encode() not in raw  # nor in a segment


@pytest.mark.parametrize("encoding", ["json-lines", "protobuf"])
def test_ingest_withholds_content(tmp_path: Path, encoding: str) -> None:
    spans = _spans(ATTRIBUTES)
    source = tmp_path / "collector" / ("traces.json" if encoding == "json-lines" else "traces.pb")
    source.parent.mkdir()
    if encoding == "json-lines":
        source.write_text(otlp_json_line(spans) + "\n")
    else:
        source.write_bytes(otlp_proto(spans))
    summary = ingest([source], tmp_path / "ingested")
    assert (summary.rows_written, summary.skipped) == (2, 0)
    assert summary.withheld_content == len(CONTENT) + 1
    assert "content values withheld: " in summary.format()
    _assert_withheld(read_rows(tmp_path / "ingested"))
    exporter = ParquetSpanExporter(tmp_path / "exported")
    exporter.export(spans)
    exporter.shutdown()
    assert read_rows(tmp_path / "ingested").equals(read_rows(tmp_path / "exported"))


def test_keep_content_keeps_it_in_both_writers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans = _spans(ATTRIBUTES)
    monkeypatch.setenv("RETRYSCOPE_PARQUET_KEEP_CONTENT", "true")
    config = ExportConfig.from_env()
    assert config.keep_content
    assert not ExportConfig().keep_content
    exporter = ParquetSpanExporter(tmp_path / "spans")  # from the environment
    exporter.export(spans)
    exporter.shutdown()
    source = tmp_path / "traces.json"
    source.write_text(otlp_json_line(spans) + "\n")
    summary = ingest([source], tmp_path / "ingested", config=config)
    assert exporter.withheld_content == summary.withheld_content == 0
    for directory in ("spans", "ingested"):
        rows = read_rows(tmp_path / directory).to_pylist()
        chat = next(r for r in rows if r["name"] == "chat gpt-4o-mini")
        attributes = dict(chat["attributes"])
        assert attributes[genai.GEN_AI_INPUT_MESSAGES] == f'"{SECRET} in gen_ai.input.messages"'
        assert dict(chat["events"][0]["attributes"]) == {genai.GEN_AI_PROMPT: f'"{SECRET}"'}


def test_a_sliced_table_is_withheld_row_for_row(tmp_path: Path) -> None:
    """Tables whose columns start mid-buffer (a slice) are marked at the right rows."""
    exporter = ParquetSpanExporter(tmp_path / "spans", keep_content=True)
    exporter.export(_spans(ATTRIBUTES) + _spans({"input.value": SECRET}))
    exporter.shutdown()
    rows = read_rows(tmp_path / "spans")
    assert SECRET in str(rows.to_pylist())
    for start in range(rows.num_rows):
        part = rows.slice(start)
        marked, count = withhold_content(part)
        assert SECRET not in str(marked.to_pylist())
        assert marked.column("name").equals(part.column("name"))
        expected = sum(
            sum(1 for key, _ in row["attributes"] if is_content_key(key))
            + sum(1 for e in row["events"] for key, _ in e["attributes"] if is_content_key(key))
            for row in part.to_pylist()
        )
        assert count == expected
    plain = rows.filter(pa.compute.equal(rows.column("name"), "plain"))
    assert withhold_content(plain) == (plain, 0)
