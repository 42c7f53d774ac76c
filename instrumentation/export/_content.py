"""Prompt and completion text: withheld from the audit data unless kept on purpose.

GenAI instrumentations write what was said to a model into span attributes: the GenAI
semantic conventions (``gen_ai.input.messages``, ``gen_ai.output.messages``,
``gen_ai.system_instructions``, ``gen_ai.tool.call.arguments``/``result``, the older
``gen_ai.prompt``/``gen_ai.completion`` of the ``gen_ai.content.*`` events), pydantic-ai
(those, ``pydantic_ai.all_messages``, ``model_request_parameters``, ``final_result``,
``tool_arguments``, ``tool_response``, ``all_messages_events``, ``events``), Logfire
(``request_data``, ``response_data``), OpenInference (``input.value``, ``output.value``,
``llm.input_messages.*``, ``llm.output_messages.*``, ...) and OpenLLMetry/Traceloop
(``gen_ai.prompt.*``, ``gen_ai.completion.*``, ``traceloop.entity.input``/``output``, ...).

An attribute is *content* when its key is one of :data:`CONTENT_KEYS`, or one of them
followed by ``.<index>`` (a flattened list item: ``llm.input_messages.0.message.content``,
``gen_ai.prompt.1.role``). So ``gen_ai.prompt.name`` (a template's name) and
``gen_ai.input.messages.ref`` (where an uploader put the messages) are not content.

Both writers, the Parquet exporter and ``retryscope ingest``, apply :func:`withhold_content`
to every table before anything reaches the disk: a content value, in the span attributes
and in every event's attributes, becomes ``"REDACTED"`` (the mark secret redaction writes).
The key stays, so a reader sees what was withheld and can count it. A digest would add
nothing retryscope does not record already (the request body digest) and would let a short
prompt be guessed. ``keep_content`` (``RETRYSCOPE_PARQUET_KEEP_CONTENT=true``) keeps the text.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from retryscope.instrumentation._redaction import MARK

CONTENT_KEYS: Final = frozenset(
    {
        # OpenTelemetry GenAI semantic conventions (and Logfire, pydantic-ai v3)
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.retrieval.documents",
        "gen_ai.retrieval.query.text",
        "gen_ai.evaluation.explanation",
        # the deprecated gen_ai.content.prompt/completion events; OpenLLMetry's indexed keys
        "gen_ai.prompt",
        "gen_ai.completion",
        # OpenLLMetry / Traceloop
        "traceloop.entity.input",
        "traceloop.entity.output",
        "traceloop.prompt.template",
        "traceloop.prompt.template_variables",
        "gen_ai.task.input",
        "gen_ai.task.output",
        # pydantic-ai (v2 names and the run span)
        "pydantic_ai.all_messages",
        "model_request_parameters",  # holds the instructions' text
        "all_messages_events",
        "events",
        "final_result",
        "tool_arguments",
        "tool_response",
        # Logfire's LLM integrations
        "request_data",
        "response_data",
        "prompt",
        # OpenInference
        "input.value",
        "output.value",
        "llm.input_messages",
        "llm.output_messages",
        "llm.prompts",
        "llm.prompt_template.template",
        "llm.prompt_template.variables",
        "retrieval.documents",
        "embedding.embeddings",
        "reranker.query",
        "reranker.input_documents",
        "reranker.output_documents",
    }
)
"""Attribute keys whose value is prompt, completion, tool or document text."""

_CONTENT_KEY: Final = re.compile(
    "(?:" + "|".join(map(re.escape, sorted(CONTENT_KEYS))) + r")(?:\.[0-9].*)?", re.DOTALL
)
_MARK_JSON: Final = json.dumps(MARK)
"""The mark as the attribute maps hold values (JSON-encoded)."""


@functools.lru_cache(maxsize=4096)
def is_content_key(key: str) -> bool:
    """Whether attribute ``key`` holds content (see the module doc)."""
    return _CONTENT_KEY.fullmatch(key) is not None


def withhold_content(table: pa.Table) -> tuple[pa.Table, int]:
    """``table`` (rows of :data:`retryscope.schema.SPAN_SCHEMA`; the same object when it
    holds no content) with every content value of its span and event attributes replaced by
    the mark, and how many values were replaced."""
    withheld = 0
    for name, column_of in (("attributes", _attribute_maps), ("events", _event_lists)):
        column = table.column(name)
        chunks = []
        for chunk in column.chunks:
            new, count = column_of(chunk)
            chunks.append(new)
            withheld += count
        if any(new is not old for new, old in zip(chunks, column.chunks, strict=True)):
            index = table.schema.get_field_index(name)
            table = table.set_column(
                index, table.schema.field(index), pa.chunked_array(chunks, column.type)
            )
    return table, withheld


def _attribute_maps(maps: pa.Array) -> tuple[pa.Array, int]:
    """Maps of JSON-encoded values with content values marked (``maps`` itself if none)."""
    if maps.offset:
        maps = pa.concat_arrays([maps])  # children start at row 0
    keys = maps.keys
    if len(keys) == 0:
        return maps, 0
    content = [key for key in pc.unique(keys).to_pylist() if key and is_content_key(key)]
    if not content:
        return maps, 0
    hit = pc.is_in(keys, value_set=pa.array(content, keys.type))
    items = pc.if_else(hit, pa.scalar(_MARK_JSON, maps.items.type), maps.items)
    marked = pa.MapArray.from_arrays(
        maps.offsets, keys, items, type=maps.type, mask=maps.is_null() if maps.null_count else None
    )
    return marked, int(pc.sum(hit).as_py() or 0)


def _event_lists(lists: pa.Array) -> tuple[pa.Array, int]:
    """Event lists with content values of their attributes marked (``lists`` itself if none)."""
    if len(lists) == 0:
        return lists, 0
    if lists.offset or lists.values.offset:
        lists = pa.concat_arrays([lists])  # children start at row 0
    events = lists.values
    if len(events) == 0:
        return lists, 0
    maps, count = _attribute_maps(events.field("attributes"))
    if not count:
        return lists, 0
    fields = [events.field(i) for i in range(events.type.num_fields)]
    fields[events.type.get_field_index("attributes")] = maps
    marked = pa.StructArray.from_arrays(
        fields, fields=list(events.type), mask=events.is_null() if events.null_count else None
    )
    return (
        pa.ListArray.from_arrays(
            lists.offsets,
            marked,
            type=lists.type,
            mask=lists.is_null() if lists.null_count else None,
        ),
        count,
    )
