"""OTLP trace documents (JSON or protobuf) to span rows via :class:`SpanColumns`.

Handles the OTLP/JSON encoding as the Collector writes it: trace and span ids in hex (not
base64), 64-bit integers as strings or numbers, enums as numbers or names, and every
AnyValue kind (string, bool, int, double, array, kvlist, bytes). Protobuf messages
(``TracesData`` / ``ExportTraceServiceRequest``, which share field 1 ``resource_spans``) are
turned into the same dict shape first, so both paths produce identical rows.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from typing import Any, Final

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from retryscope.instrumentation.export._columns import SpanColumns

KINDS: Final = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
STATUS_CODES: Final = ("UNSET", "OK", "ERROR")
_HEX: Final = frozenset("0123456789abcdef")


class OtlpFormatError(ValueError):
    """A document is not valid OTLP trace data; the message says what is wrong."""


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise OtlpFormatError(f"{what}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise OtlpFormatError(f"{what}: expected an integer, got {value!r}")


_INT64_MAX: Final = 2**63 - 1
_INT32_MAX: Final = 2**31 - 1


def _time(value: Any, what: str) -> int:
    """A unix-nanosecond time that fits a Parquet ``timestamp[ns]`` (int64, not negative)."""
    ns = _int(value, what)
    if not 0 <= ns <= _INT64_MAX:
        raise OtlpFormatError(f"{what}: {ns} is outside 0..2^63-1 nanoseconds")
    return ns


def _count(value: Any, what: str) -> int:
    n = _int(value, what)
    if not 0 <= n <= _INT32_MAX:
        raise OtlpFormatError(f"{what}: {n} is outside 0..2^31-1")
    return n


def _opt_str(value: Any, what: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise OtlpFormatError(f"{what}: expected a string, got {value!r}")
    return value


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise OtlpFormatError(f"{what}: expected an object, got {value!r}")
    return value


def _float(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
        if value in special:
            return special[value]
        try:
            return float(value)
        except ValueError:
            pass
    raise OtlpFormatError(f"doubleValue: expected a number, got {value!r}")


def _hex_id(value: Any, width: int, what: str, *, base64_ids: bool) -> str:
    if not isinstance(value, str):
        raise OtlpFormatError(f"{what}: expected a hex string, got {value!r}")
    text = value
    if base64_ids and value:
        try:
            text = base64.b64decode(value, validate=True).hex()
        except (binascii.Error, ValueError):
            raise OtlpFormatError(f"{what}: not base64: {value!r}") from None
    text = text.lower()
    if len(text) != width or not set(text) <= _HEX:
        raise OtlpFormatError(f"{what}: expected {width} hex digits, got {value!r}")
    return text


def _enum(value: Any, names: tuple[str, ...], prefix: str, what: str) -> str:
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        name = value.removeprefix(prefix)
        if name not in names:
            raise OtlpFormatError(f"{what}: unknown value {value!r}")
        return name
    number = _int(value, what)
    if not 0 <= number < len(names):
        raise OtlpFormatError(f"{what}: unknown value {value!r}")
    return names[number]


def any_value(value: Any) -> Any:
    """The Python value of an OTLP ``AnyValue`` (``{}`` → None; bytes → base64 text)."""
    if not isinstance(value, Mapping):
        raise OtlpFormatError(f"AnyValue: expected an object, got {value!r}")
    if not value:
        return None
    kind, inner = next(iter(value.items()))
    if kind == "stringValue":
        if not isinstance(inner, str):
            raise OtlpFormatError(f"stringValue: expected a string, got {inner!r}")
        return inner
    if kind == "boolValue":
        if not isinstance(inner, bool):
            raise OtlpFormatError(f"boolValue: expected true/false, got {inner!r}")
        return inner
    if kind == "intValue":
        return _int(inner, "intValue")
    if kind == "doubleValue":
        return _float(inner)
    if kind == "bytesValue":
        if not isinstance(inner, str):
            raise OtlpFormatError(f"bytesValue: expected base64 text, got {inner!r}")
        return inner
    if kind in ("arrayValue", "kvlistValue"):
        values = inner.get("values", []) if isinstance(inner, Mapping) else None
        if not isinstance(values, list):
            raise OtlpFormatError(f"{kind}: expected {{'values': [...]}}, got {inner!r}")
        return [any_value(v) for v in values] if kind == "arrayValue" else attributes(values)
    raise OtlpFormatError(f"AnyValue: unknown kind {kind!r}")


def attributes(items: Any) -> dict[str, Any]:
    """A ``KeyValue`` list as a dict."""
    if items is None:
        return {}
    if not isinstance(items, list):
        raise OtlpFormatError(f"attributes: expected a list, got {type(items).__name__}")
    out: dict[str, Any] = {}
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            raise OtlpFormatError(f"attribute: expected {{'key': ..., 'value': ...}}, got {item!r}")
        out[item["key"]] = any_value(item.get("value", {}))
    return out


def _list(doc: Mapping[str, Any], key: str, what: str) -> list[Any]:
    value = doc.get(key, [])
    if value is None:
        return []
    if not isinstance(value, list):
        raise OtlpFormatError(f"{what}.{key}: expected a list, got {type(value).__name__}")
    return value


def decode_traces(doc: Any, cols: SpanColumns, *, base64_ids: bool = False) -> int:
    """Append every span of an OTLP ``TracesData``/``ExportTraceServiceRequest`` object to
    ``cols``; returns how many. ``base64_ids``: ids are base64 (protobuf's JSON mapping).

    The document is validated completely before any row is appended, so a malformed
    document adds nothing.
    """
    if not isinstance(doc, Mapping):
        raise OtlpFormatError(f"expected a JSON object, got {type(doc).__name__}")
    if "resourceSpans" not in doc:
        raise OtlpFormatError("no 'resourceSpans': not OTLP trace data")
    rows: list[dict[str, Any]] = []
    for rs in _list(doc, "resourceSpans", "document"):
        rs = _mapping(rs, "resourceSpans[]")
        resource = attributes(_mapping(rs.get("resource"), "resource").get("attributes"))
        for ss in _list(rs, "scopeSpans", "resourceSpans"):
            ss = _mapping(ss, "scopeSpans[]")
            scope = _mapping(ss.get("scope"), "scope")
            for span in _list(ss, "spans", "scopeSpans"):
                rows.append(_span_row(span, resource, scope, base64_ids=base64_ids))
    for row in rows:
        cols.append(**row)
    return len(rows)


def _span_row(
    span: Any, resource: dict[str, Any], scope: Mapping[str, Any], *, base64_ids: bool
) -> dict[str, Any]:
    if not isinstance(span, Mapping):
        raise OtlpFormatError(f"span: expected an object, got {span!r}")
    parent = span.get("parentSpanId") or ""
    status = _mapping(span.get("status"), "status")
    start = _time(span.get("startTimeUnixNano", 0), "startTimeUnixNano")
    end = _time(span.get("endTimeUnixNano", start), "endTimeUnixNano")
    return {
        "trace_id": _hex_id(span.get("traceId"), 32, "traceId", base64_ids=base64_ids),
        "span_id": _hex_id(span.get("spanId"), 16, "spanId", base64_ids=base64_ids),
        "parent_span_id": (
            _hex_id(parent, 16, "parentSpanId", base64_ids=base64_ids) if parent else None
        ),
        "name": _opt_str(span.get("name"), "name") or "",
        "kind": _enum(span.get("kind", 0), KINDS, "SPAN_KIND_", "kind"),
        "start_ns": start,
        "end_ns": end,
        "status_code": _enum(status.get("code", 0), STATUS_CODES, "STATUS_CODE_", "status.code"),
        "status_message": _opt_str(status.get("message"), "status.message"),
        "attributes": attributes(span.get("attributes")),
        "resource": resource,
        "scope_name": _opt_str(scope.get("name"), "scope.name"),
        "scope_version": _opt_str(scope.get("version"), "scope.version"),
        "events": [
            (
                _opt_str(e.get("name"), "event.name") or "",
                _time(e.get("timeUnixNano", 0), "event.timeUnixNano"),
                attributes(e.get("attributes")),
            )
            for e in (_mapping(e, "events[]") for e in _list(span, "events", "span"))
        ],
        "links": [
            (
                _hex_id(link.get("traceId"), 32, "link.traceId", base64_ids=base64_ids),
                _hex_id(link.get("spanId"), 16, "link.spanId", base64_ids=base64_ids),
                attributes(link.get("attributes")),
            )
            for link in (_mapping(x, "links[]") for x in _list(span, "links", "span"))
        ],
        "dropped_attributes": _count(
            span.get("droppedAttributesCount", 0), "droppedAttributesCount"
        ),
    }


def decode_proto(payload: bytes, cols: SpanColumns) -> int:
    """Append the spans of one serialized ``ExportTraceServiceRequest``/``TracesData``."""
    try:
        message = ExportTraceServiceRequest.FromString(payload)
    except DecodeError as exc:
        raise OtlpFormatError(f"not an OTLP protobuf message: {exc}") from None
    doc = MessageToDict(message)
    doc.setdefault("resourceSpans", [])
    return decode_traces(doc, cols, base64_ids=True)
