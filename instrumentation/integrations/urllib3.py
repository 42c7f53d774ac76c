"""urllib3 integration: every physical send urllib3 makes, retries inside ``urlopen`` too.

urllib3 retries inside one ``urlopen`` (``Retry(total=3, status_forcelist=[503])``, also
under requests' ``HTTPAdapter(max_retries=...)``) by calling itself again, and the contrib
requests/urllib3 instrumentations record only the outermost call: they switch HTTP
instrumentation off inside it. So :func:`instrument` wraps
``HTTPConnectionPool._make_request``, which urllib3 calls exactly once per request on the
wire, below its retry and redirect handling and under any contrib span (that span then has
sends beneath it and becomes a call). Each send records its status and Retry-After; its
retry evidence is the ``Retry`` object's history (attempt = ``len(history) + 1``), so a
resend inside one ``urlopen`` is attributed to layer ``transport``.

botocore sends through urllib3 too (one ``urlopen`` per attempt, urllib3 retries off): its
``amz-sdk-request: attempt=N; max=M`` and ``amz-sdk-invocation-id`` headers are the
evidence then, and its resends are attributed to layer ``sdk``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import urllib3  # noqa: F401  (the extra this module needs)

from retryscope.instrumentation._digests import send_digest
from retryscope.instrumentation._sends import SendEvidence
from retryscope.instrumentation.integrations._send import (
    SendOptions,
    start_send,
    through,
)
from retryscope.vocabulary import Layer

OPTIONS: Final = SendOptions(scope_name="retryscope.urllib3")
"""Options of the sends this integration records (its error count)."""

_TARGET: Final = ("urllib3.connectionpool", "HTTPConnectionPool._make_request")
_BOTO_ATTEMPT: Final = re.compile(r"(?:^|;)\s*attempt=(\d{1,6})")
_ARGS: Final = ("conn", "method", "url", "body", "headers", "retries")


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value if isinstance(value, str) else None


def _header(headers: object, name: str) -> str | None:
    if not isinstance(headers, Mapping):
        return None
    value = headers.get(name)
    if value is None:  # a plain dict keeps the caller's spelling
        lowered = name.lower()
        value = next((v for k, v in headers.items() if str(k).lower() == lowered), None)
    return _text(value)


def _body(body: object) -> bytes | None:
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8", "surrogatepass")
    return b"" if body is None else None  # a stream or file: not in memory


def evidence(
    pool: Any, method: str, url: str, body: object, headers: object, retries: object
) -> tuple[str, SendEvidence]:
    """(full URL, evidence) of one ``_make_request`` call."""
    full = url if "://" in url else f"{pool.scheme}://{pool.host}:{pool.port}{url}"
    digest = send_digest(method, full, _body(body))
    boto = _header(headers, "amz-sdk-request")
    if boto is not None and (match := _BOTO_ATTEMPT.search(boto)):
        return full, SendEvidence(
            digest=digest,
            retry_count=int(match[1]) - 1,
            call_key=_header(headers, "amz-sdk-invocation-id"),
            retry_layer=Layer.SDK,
        )
    history = getattr(retries, "history", None)
    tries = len(history) if isinstance(history, tuple) else None
    return full, SendEvidence(digest=digest, retry_count=tries, retry_layer=Layer.TRANSPORT)


def _make_request(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    bound = dict(zip(_ARGS, args, strict=False))
    bound.update((k, kwargs[k]) for k in _ARGS if k in kwargs)
    try:
        url, ev = evidence(
            instance,
            str(bound.get("method", "GET")),
            str(bound.get("url", "/")),
            bound.get("body"),
            bound.get("headers"),
            bound.get("retries"),
        )
    except Exception:
        OPTIONS.errors += 1
        return wrapped(*args, **kwargs)
    send = start_send(OPTIONS, str(bound.get("method", "GET")), url, ev)
    return through(send, lambda: wrapped(*args, **kwargs), _answered)


def _answered(response: Any) -> tuple[int, Callable[[str], str | None]]:
    headers = response.headers
    return int(response.status), lambda name: _header(headers, name)


def instrument() -> None:
    """Record every send of every urllib3 connection pool (requests and botocore included)."""
    from wrapt import wrap_function_wrapper

    wrap_function_wrapper(*_TARGET, _make_request)


def uninstrument() -> None:
    """Undo :func:`instrument`."""
    from opentelemetry.instrumentation.utils import unwrap
    from urllib3.connectionpool import HTTPConnectionPool

    unwrap(HTTPConnectionPool, "_make_request")
