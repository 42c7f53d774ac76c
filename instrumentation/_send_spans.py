"""Which foreign spans the stamping processor takes for physical sends, and which are known
SDK calls.

An HTTP client span (``http.request.method`` or the older ``http.method``, kind CLIENT) is a
send until a send starts beneath it. Some client libraries open one CLIENT span per API
*call* around their whole retry loop; those are known by their instrumentation scope or by
the GenAI operation they carry, and their sends are that SDK's retries:

* the Anthropic SDK's own tracing (scope ``com.anthropic.sdk.python``, with a platform
  suffix for Bedrock/Vertex/…): ``anthropic.messages.create`` with ``http.request.method``
  at start and ``http.request.resend_count`` at the end;
* the OpenAI GenAI instrumentation (``opentelemetry-instrumentation-openai-v2``) and any
  instrumentation built on ``opentelemetry-util-genai``: a ``chat <model>`` span per call;
* ``opentelemetry-instrumentation-botocore``: one ``S3.ListObjectsV2`` span per API call
  (``rpc.system`` ``aws-api``), its retries beneath it.

Such a call span with no send beneath it (no per-send integration enabled) still counts as
one send: the best the data shows.
"""

from __future__ import annotations

from typing import Final

from opentelemetry.sdk.trace import Span
from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope.instrumentation._digests import send_digest
from retryscope.instrumentation._sends import SendEvidence
from retryscope.vocabulary import Layer

CALL_SCOPES: Final[tuple[tuple[str, str], ...]] = (
    ("com.anthropic.sdk.python", "anthropic"),
    ("opentelemetry.instrumentation.openai_v2", "openai"),
    ("opentelemetry.instrumentation.openai", "openai"),
    ("opentelemetry.util.genai", "genai"),
    ("opentelemetry.instrumentation.botocore", "botocore"),
)
"""Instrumentation scope name prefixes of client call spans, and the library they name."""

_HTTP_METHOD: Final = v.HTTP_METHOD.key
_OLD_HTTP_METHOD: Final = "http.method"
_GEN_AI_OPERATION: Final = v.GEN_AI_OPERATION.key
_FIRST_TRY: Final = SendEvidence(retry_count=0)  # every SDK call is a new operation

SendClass = tuple[SendEvidence, Layer | None, dict[str, AttributeValue] | None]


def call_library(span: Span, attributes: object) -> str | None:
    """The client library whose call span this is, or None for any other span."""
    scope = span.instrumentation_scope
    name = scope.name if scope is not None else ""
    for prefix, library in CALL_SCOPES:
        if name.startswith(prefix):
            return library
    get = getattr(attributes, "get", None)
    if get is not None and get(_GEN_AI_OPERATION) is not None:
        return "genai"
    return None


def classify_send(span: Span, attributes: object) -> SendClass | None:
    """``(evidence, call layer, extra attributes)`` when the CLIENT span ``span`` is taken
    for a send (an HTTP client span, or a known call span), else None."""
    library = call_library(span, attributes)
    if library is not None:
        return _FIRST_TRY, Layer.SDK, {v.CALL_LIBRARY_KEY: library}
    get = getattr(attributes, "get", None)
    if get is None:
        return None
    method = get(_HTTP_METHOD) or get(_OLD_HTTP_METHOD)
    if not isinstance(method, str):
        return None
    url = get(v.URL_FULL_KEY) or get("http.url")
    return SendEvidence(digest=send_digest(method, str(url or ""), None)), None, None
