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

Both writers, the Parquet exporter and ``retryscope ingest``, withhold content from every
table before anything reaches the disk (:func:`retryscope.instrumentation.export._scrub.scrub`,
in the same pass as redaction): a content value, in the span attributes
and in every event's attributes, becomes ``"REDACTED"`` (the mark secret redaction writes).
The key stays, so a reader sees what was withheld and can count it. A digest would add
nothing retryscope does not record already (the request body digest) and would let a short
prompt be guessed. ``keep_content`` (``RETRYSCOPE_PARQUET_KEEP_CONTENT=true``) keeps the text.
"""

from __future__ import annotations

import functools
import re
from typing import Final

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


@functools.lru_cache(maxsize=4096)
def is_content_key(key: str) -> bool:
    """Whether attribute ``key`` holds content (see the module doc)."""
    return _CONTENT_KEY.fullmatch(key) is not None
