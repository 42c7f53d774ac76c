"""Which foreign spans the stamping processor takes for physical sends, and which are known
SDK calls.

An HTTP client span (``http.request.method`` or the older ``http.method``, kind CLIENT) is a
send until a send starts beneath it; so is a gRPC client span (``rpc.system`` ``grpc``), one
per call: grpcio retries inside the call where no Python code sees it. Some client
libraries open one CLIENT span per API *call* around their whole retry loop; those are
known by their instrumentation scope or by the GenAI operation they carry, and their sends
are that SDK's retries:

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

from collections.abc import Callable, Mapping
from typing import Final

from opentelemetry.sdk.trace import ReadableSpan, Span
from opentelemetry.trace import StatusCode
from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope.http_rules import classify_status
from retryscope.instrumentation._digests import send_digest
from retryscope.instrumentation._sends import SendEvidence
from retryscope.vocabulary import Layer

CALL_SCOPES: Final = v.CALL_SCOPES
"""Instrumentation scope name prefixes of client call spans, and the library they name."""

_CALL_PREFIXES: Final = tuple(prefix for prefix, _ in CALL_SCOPES)
_HTTP_METHOD: Final = v.HTTP_METHOD.key
_OLD_HTTP_METHOD: Final = "http.method"
_HTTP_STATUS: Final = v.HTTP_STATUS_CODE.key
_OLD_HTTP_STATUS: Final = "http.status_code"
_GEN_AI_OPERATION: Final = v.GEN_AI_OPERATION.key
_ERROR: Final = StatusCode.ERROR
_RPC_SYSTEM: Final = v.RPC_SYSTEM_KEY
_RPC_SERVICE: Final = v.RPC_SERVICE_KEY
_RPC_METHOD: Final = v.RPC_METHOD_KEY
_GRPC: Final = "grpc"
_GENAI: Final = "genai"
_FIRST_TRY: Final = SendEvidence(retry_count=0)  # every SDK call is a new operation
_CALL_ATTRIBUTES: Final[Mapping[str, Mapping[str, AttributeValue]]] = {
    library: {v.CALL_LIBRARY_KEY: library} for library in {_GENAI, *(lib for _, lib in CALL_SCOPES)}
}
"""The attributes a call span of each library gets (plain dicts, never mutated)."""

SendClass = tuple[SendEvidence, Layer | None, Mapping[str, AttributeValue] | None]
Lookup = Callable[[str], object] | None
"""The ``get`` of a span's attributes (None: the span has no attribute mapping)."""


def _call_library(span: Span, get: Lookup) -> str | None:
    """The client library whose call span this is, or None for any other span."""
    scope = span.instrumentation_scope
    name = scope.name if scope is not None else ""
    if name.startswith(_CALL_PREFIXES):  # one check for the spans of every other scope
        for prefix, library in CALL_SCOPES:
            if name.startswith(prefix):
                return library
    if get is not None and get(_GEN_AI_OPERATION) is not None:
        return _GENAI
    return None


def classify_send(span: Span, attributes: object) -> SendClass | None:
    """``(evidence, call layer, extra attributes)`` when the CLIENT span ``span`` is taken
    for a send (an HTTP client span, or a known call span), else None."""
    get: Lookup = getattr(attributes, "get", None)
    library = _call_library(span, get)
    if library is not None:
        return _FIRST_TRY, Layer.SDK, _CALL_ATTRIBUTES[library]
    if get is None:
        return None
    method = get(_HTTP_METHOD) or get(_OLD_HTTP_METHOD)
    if not isinstance(method, str):
        return _grpc_send(span, get)
    url = get(v.URL_FULL_KEY) or get("http.url")
    return SendEvidence(digest=send_digest(method, str(url or ""), None)), None, None


def _grpc_send(span: Span, get: Callable[[str], object]) -> SendClass | None:
    """A gRPC client span (``rpc.system`` ``grpc``: opentelemetry-instrumentation-grpc's,
    one per call) as one send: its evidence is the call's path (``/service/method``, the
    HTTP/2 request it rides), without the message, which the span does not carry."""
    if get(_RPC_SYSTEM) != _GRPC:
        return None
    service, method = get(_RPC_SERVICE), get(_RPC_METHOD)
    path = f"/{service}/{method}" if service and method else span.name
    return SendEvidence(digest=send_digest("POST", path, None)), None, None


def send_failed(span: ReadableSpan, attributes: Mapping[str, object]) -> bool:
    """Whether a foreign span taken for a send (or the call it became) ended without
    success: its span status is ``ERROR``, or its HTTP status (in ``attributes``, the ended
    span's) is a failure by :data:`retryscope.http_rules.STATUS_RULES` (a repeat of it is
    then a retry)."""
    code = attributes.get(_HTTP_STATUS)
    if code is None:
        code = attributes.get(_OLD_HTTP_STATUS)
    if type(code) is int and classify_status(code, idempotent=False) is not None:
        return True
    return span.status.status_code is _ERROR
