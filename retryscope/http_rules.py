"""HTTP status / transport error → outcome kind, and strict RFC 9110 ``Retry-After`` parsing.

Only the status code, the exception class and the bounded ``Retry-After`` field are read.
An error *body* is untrusted provider output and is never consulted: it cannot choose a
route, URL, model or delay (the policy's routes and schedule do).

:data:`STATUS_RULES` is the one table of what an HTTP status means for one send (one
request on the wire and its response). The recorder classifies with it
(:func:`classify_status`) and the analytics' SQL macros ``rs_http_outcome`` and
``rs_http_outcome_kind`` are rendered from it (``retryscope.analytics._macros``).
``idempotent`` says whether resending the operation is safe under the bound idempotency
contract (an idempotency key is bound: the span carries ``idempotency_digest``).

:data:`GRPC_STATUS_KINDS` is the same for a gRPC status code (a gRPC call rides one HTTP/2
request; its status is in the trailers): the recorder's gRPC integration and the macros
``rs_grpc_outcome``/``rs_grpc_outcome_kind`` read it.

Transport exceptions (:func:`classify_exception`), whichever client library raised them
and however an SDK wrapped them: no connection made — refused, a name not resolved, a TLS
handshake failed, a connect or pool timeout: no request byte sent — → ``unavailable``; a
timeout or a broken connection after the request was sent → ``unknown_provider_acceptance``
(``timeout_before_response`` only when idempotent and the response never started); a
grpcio ``RpcError`` by its status code; anything else → :data:`NO_RESPONSE_KIND`.
"""

from __future__ import annotations

import re
import socket
import ssl
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from retryscope.vocabulary import OutcomeKind

_RAW_LIMIT: Final = 64
RETRY_AFTER_MAX_CHARS: Final = _RAW_LIMIT
"""Longest Retry-After value kept or parsed; longer values are untrusted noise."""
RETRY_AFTER_MAX_MS: Final = 24 * 3600 * 1000
"""Parsed hints of a send are clamped to one day."""


@dataclass(frozen=True, slots=True)
class GatewayHeader:
    """A response header in which a gateway or proxy reports the tries it made behind one
    response: ``retries`` (the header counts retries and fallbacks: attempts = 1 + the sum
    of such headers) or attempts (the header counts every attempt)."""

    name: str
    retries: bool
    source: str


GATEWAY_ATTEMPT_HEADERS: Final[tuple[GatewayHeader, ...]] = (
    GatewayHeader("x-litellm-attempted-retries", True, "LiteLLM proxy: retries made"),
    GatewayHeader("x-litellm-attempted-fallbacks", True, "LiteLLM proxy: fallbacks tried"),
    GatewayHeader("x-portkey-retry-attempt-count", True, "Portkey: retries made"),
    GatewayHeader("x-envoy-attempt-count", False, "Envoy: attempts (when it is exposed)"),
)
"""What a response may say of the tries behind it. A gateway's count is reported, not seen:
it is kept beside the sends retryscope observed, never added to them."""


def gateway_attempts(header: Callable[[str], str | None]) -> int | None:
    """The attempts a gateway reports behind one response (None: no header says): 1 plus
    the retries and fallbacks headers count, or an attempt count, whichever is larger when
    several gateways report (a chain of them is not multiplied: each sees only its own)."""
    retries: int | None = None
    attempts: int | None = None
    for rule in GATEWAY_ATTEMPT_HEADERS:
        raw = header(rule.name)
        text = raw.strip() if raw is not None else ""
        if not (text.isdigit() and len(text) < 7):
            continue
        if rule.retries:
            retries = (retries or 0) + int(text)
        else:
            attempts = max(attempts or 0, int(text))
    if retries is None:
        return attempts
    return max(1 + retries, attempts or 0)


@dataclass(frozen=True, slots=True)
class StatusRule:
    """What a send answered with one of ``statuses`` means: the failure kind (``None``: the
    send completed)."""

    statuses: range | frozenset[int]
    kind: OutcomeKind | None
    meaning: str
    kind_when_idempotent: OutcomeKind | None = None
    """The kind instead when resending is safe, where that changes the answer (408); None:
    ``kind`` either way."""

    def kind_for(self, *, idempotent: bool) -> OutcomeKind | None:
        if idempotent and self.kind_when_idempotent is not None:
            return self.kind_when_idempotent
        return self.kind


STATUS_RULES: Final[tuple[StatusRule, ...]] = (
    StatusRule(
        range(200, 400),
        None,
        "Answered; a redirect is a completed send (a client that follows it sends again).",
    ),
    StatusRule(
        frozenset({408}),
        OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE,
        "The server stopped waiting for the request: a timeout before the response when "
        "resending is safe, otherwise the provider may have accepted the work.",
        kind_when_idempotent=OutcomeKind.TIMEOUT_BEFORE_RESPONSE,
    ),
    StatusRule(frozenset({429}), OutcomeKind.RATE_LIMITED, "Rate limited."),
    StatusRule(
        range(500, 600), OutcomeKind.UNAVAILABLE, "Server error: the receiver is unavailable."
    ),
    StatusRule(
        frozenset({400, 411, 413, 414, 415, 422, 431}),
        OutcomeKind.INVALID_REQUEST,
        "The request itself is malformed or too large: sending it again cannot help.",
    ),
    StatusRule(
        frozenset({401, 403, 451}), OutcomeKind.POLICY_DENIED, "Not allowed for this caller."
    ),
    StatusRule(range(400, 500), OutcomeKind.REJECTED, "Any other client error."),
    StatusRule(
        range(100, 200),
        OutcomeKind.PROTOCOL_VIOLATION,
        "An informational status is no final answer.",
    ),
)
"""What an HTTP status means for one send; the first rule whose ``statuses`` hold it wins."""

OTHER_STATUS_KIND: Final = OutcomeKind.PROTOCOL_VIOLATION
"""Kind of a status no rule holds (outside 100–599: not an HTTP status; a gRPC code
outside 0–16)."""

NO_RESPONSE_KIND: Final = OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE
"""Kind of a send that failed without a response for a reason not known to be harmless (an
exception no rule names, or, to the analytics, an HTTP client span with an error status and
no status code): the request may have reached the provider."""


GRPC_STATUS_KINDS: Final[tuple[tuple[int, str, OutcomeKind | None], ...]] = (
    (0, "OK", None),
    # cancelled by the caller, or an error the server did not name: maybe accepted
    (1, "CANCELLED", OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE),
    (2, "UNKNOWN", OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE),
    (3, "INVALID_ARGUMENT", OutcomeKind.INVALID_REQUEST),
    (4, "DEADLINE_EXCEEDED", OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE),
    (5, "NOT_FOUND", OutcomeKind.REJECTED),
    (6, "ALREADY_EXISTS", OutcomeKind.REJECTED),
    (7, "PERMISSION_DENIED", OutcomeKind.POLICY_DENIED),
    (8, "RESOURCE_EXHAUSTED", OutcomeKind.RATE_LIMITED),
    (9, "FAILED_PRECONDITION", OutcomeKind.REJECTED),
    # a conflict the caller is to retry at a higher level
    (10, "ABORTED", OutcomeKind.UNAVAILABLE),
    (11, "OUT_OF_RANGE", OutcomeKind.INVALID_REQUEST),
    (12, "UNIMPLEMENTED", OutcomeKind.REJECTED),
    # server errors, as an HTTP 5xx
    (13, "INTERNAL", OutcomeKind.UNAVAILABLE),
    (14, "UNAVAILABLE", OutcomeKind.UNAVAILABLE),
    (15, "DATA_LOSS", OutcomeKind.UNAVAILABLE),
    (16, "UNAUTHENTICATED", OutcomeKind.POLICY_DENIED),
)
"""What a gRPC status code (``rpc.grpc.status_code``; name) means for one gRPC call, as
:data:`STATUS_RULES` for an HTTP status; a code not listed is :data:`OTHER_STATUS_KIND`."""

_BY_GRPC_CODE: Final = {code: kind for code, _, kind in GRPC_STATUS_KINDS}


def classify_grpc_status(code: int) -> OutcomeKind | None:
    """Outcome kind of a gRPC status code (:data:`GRPC_STATUS_KINDS`); ``None``: OK."""
    return _BY_GRPC_CODE.get(code, OTHER_STATUS_KIND)


def status_rule(status: int) -> StatusRule | None:
    """The rule of :data:`STATUS_RULES` that decides ``status`` (None: no rule holds it)."""
    return next((r for r in STATUS_RULES if status in r.statuses), None)


_BY_STATUS: Final[dict[tuple[int, bool], OutcomeKind | None]] = {
    (status, idempotent): rule.kind_for(idempotent=idempotent)
    for status in range(100, 600)
    if (rule := status_rule(status)) is not None
    for idempotent in (False, True)
}


def classify_status(status: int, *, idempotent: bool) -> OutcomeKind | None:
    """Outcome kind of an HTTP response status (:data:`STATUS_RULES`); ``None`` means the
    send completed."""
    return _BY_STATUS.get((status, idempotent), OTHER_STATUS_KIND)


_UNKNOWN: Final = OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE
_CHAIN_LIMIT: Final = 8
"""Most exceptions :func:`causes` follows from one (a wrapper of a wrapper of a socket error)."""

_WRAPPERS: Final = (
    ("requests.exceptions", ("RequestException",)),
    ("urllib3.exceptions", ("MaxRetryError", "SSLError", "ProxyError")),
    ("botocore.exceptions", ("HTTPClientError", "ConnectionError")),
)
"""Client errors that translate a transport error without ``raise ... from`` (requests,
urllib3, botocore): they hold it as an argument, or were raised while handling it."""


def _translated(exc: BaseException) -> BaseException | None:
    """The error a client library's wrapper (:data:`_WRAPPERS`) translates, if ``exc`` is one."""
    for module, names in _WRAPPERS:
        lib = sys.modules.get(module)  # only a library already imported can have raised it
        if lib is not None and isinstance(exc, tuple(getattr(lib, n) for n in names)):
            held = next((a for a in exc.args if isinstance(a, BaseException)), None)
            if held is not None or exc.__suppress_context__:  # raise ... from None
                return held
            return exc.__context__
    return None


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the errors it translates, outermost first: what it was raised from
    (``raise ... from``: the OpenAI and Anthropic SDKs, httpx, urllib3's MaxRetryError), or
    what a client library's wrapper holds or was raised while handling (:data:`_WRAPPERS`).
    Any other exception's ``__context__`` is not followed: an error raised while handling
    another need not be that one (a refused first host, then a second one that failed
    after the send)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen and len(seen) < _CHAIN_LIMIT:
        seen.add(id(link))
        yield link
        link = link.__cause__ if link.__cause__ is not None else _translated(link)


def _httpx_kind(exc: BaseException, *, idempotent: bool) -> OutcomeKind | None:
    """Kind of an httpx or httpx2 transport error (each library has its own classes). Their
    connect errors cover the TCP connect, DNS and the TLS handshake: nothing was sent."""
    for name in ("httpx", "httpx2"):
        lib = sys.modules.get(name)
        if lib is None or not isinstance(exc, lib.TransportError):
            continue
        if isinstance(exc, lib.ConnectError | lib.ConnectTimeout | lib.PoolTimeout):
            return OutcomeKind.UNAVAILABLE
        if isinstance(exc, lib.WriteTimeout) and idempotent:
            # the body was partly sent: only an idempotent operation may count it as not
            # accepted
            return OutcomeKind.TIMEOUT_BEFORE_RESPONSE
        return _UNKNOWN  # read/write errors and timeouts, protocol errors: maybe sent
    return None


def _urllib3_kind(exc: BaseException) -> OutcomeKind | None:
    """Kind of a urllib3 error raised for one send (requests and botocore send through it)."""
    lib = sys.modules.get("urllib3.exceptions")
    if lib is None:
        return None
    if isinstance(exc, lib.NewConnectionError | lib.ConnectTimeoutError):
        # no connection (refused, no route, a name not resolved): no request byte sent
        return OutcomeKind.UNAVAILABLE
    if isinstance(exc, lib.ReadTimeoutError | lib.ProtocolError):
        return _UNKNOWN
    return None


def _aiohttp_kind(exc: BaseException) -> OutcomeKind | None:
    """Kind of an aiohttp client error: its connector errors (refused, DNS, TLS handshake,
    proxy) and connect timeout come before any request byte."""
    lib = sys.modules.get("aiohttp")
    if lib is None or not isinstance(exc, lib.ClientError):
        return None
    connect_timeout = getattr(lib, "ConnectionTimeoutError", lib.ClientConnectorError)
    if isinstance(exc, lib.ClientConnectorError | connect_timeout):
        return OutcomeKind.UNAVAILABLE
    if isinstance(exc, lib.ClientConnectionError | lib.ClientPayloadError):
        return _UNKNOWN  # the server went away or timed out after the connection was made
    return None


def _grpc_kind(exc: BaseException) -> OutcomeKind | None:
    """Kind of a grpcio ``RpcError`` by its status code (:data:`GRPC_STATUS_KINDS`)."""
    lib = sys.modules.get("grpc")
    if lib is None or not isinstance(exc, lib.RpcError):
        return None
    code = getattr(exc, "code", None)
    value = getattr(code() if callable(code) else None, "value", None)
    if not isinstance(value, tuple) or not value or not isinstance(value[0], int):
        return None
    return classify_grpc_status(value[0])


def _in_tls_handshake(exc: ssl.SSLError) -> bool:
    """Whether ``exc`` was raised by the TLS handshake itself (``ssl``'s ``do_handshake``,
    where it was raised): before any request byte. urllib3 wraps a handshake failure and a
    TLS error in mid-response alike; where it was raised tells them apart."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    frame = tb.tb_frame
    return frame.f_code.co_name == "do_handshake" and frame.f_globals.get("__name__") == "ssl"


def _builtin_kind(exc: BaseException, *, request_sent: bool) -> OutcomeKind | None:
    """Kind of a standard-library error: a refused connection, a name not resolved or a
    failed TLS handshake (a certificate refused) mean no request byte was sent."""
    if isinstance(exc, ConnectionRefusedError | socket.gaierror | ssl.SSLCertVerificationError):
        return OutcomeKind.UNAVAILABLE
    if isinstance(exc, ssl.SSLError) and _in_tls_handshake(exc):
        return OutcomeKind.UNAVAILABLE
    if isinstance(exc, TimeoutError | ConnectionError):
        return _UNKNOWN if request_sent else OutcomeKind.UNAVAILABLE
    return None


def classify_exception(exc: BaseException, *, idempotent: bool, request_sent: bool) -> OutcomeKind:
    """Outcome kind of a transport exception, whatever client library raised it.

    The first of ``exc`` and the errors it translates (:func:`causes`: an SDK's connection
    error wraps its HTTP client's, requests wraps urllib3's) that a rule knows decides:
    the request was not sent (a refused connection, a name not resolved, a TLS handshake
    that failed, a connect timeout: ``unavailable``), or it may have been (a read timeout, a
    connection reset or closed after the send: the provider may have accepted it).
    ``request_sent`` is True once request bytes may have reached the receiver; a bare
    timeout or connection error then means the provider may have accepted the work.
    """
    for link in causes(exc):
        kind = (
            _httpx_kind(link, idempotent=idempotent)
            or _urllib3_kind(link)
            or _aiohttp_kind(link)
            or _grpc_kind(link)
            or _builtin_kind(link, request_sent=request_sent)
        )
        if kind is not None:
            return kind
    return NO_RESPONSE_KIND


# --- Retry-After (RFC 9110 §10.2.3: delay-seconds / HTTP-date) ------------------------------
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_LONG_DAY = r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_MONTH = r"(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME = r"(?P<h>[0-9]{2}):(?P<m>[0-9]{2}):(?P<s>[0-9]{2})"
_IMF_FIXDATE = re.compile(rf"{_DAY}, (?P<d>[0-9]{{2}}) {_MONTH} (?P<y>[0-9]{{4}}) {_TIME} GMT")
_RFC850 = re.compile(rf"{_LONG_DAY}, (?P<d>[0-9]{{2}})-{_MONTH}-(?P<y>[0-9]{{2}}) {_TIME} GMT")
_ASCTIME = re.compile(rf"{_DAY} {_MONTH} (?P<d>[ 0-9][0-9]) {_TIME} (?P<y>[0-9]{{4}})")
_DELAY_SECONDS = re.compile(r"[0-9]+")  # ASCII digits only, no sign
_MONTHS: Final = {
    m: i + 1
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
    )
}


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """A parsed ``Retry-After``: the bounded delay in ms, or why it was ignored.

    ``raw`` keeps at most 64 characters of the header as evidence; ``invalid`` is True when
    a value was present but not RFC 9110 syntax (it is then ignored: ``delay_ms`` is None).
    """

    delay_ms: int | None
    raw: str | None
    invalid: bool
    capped: bool


def _http_date_ms(value: str) -> int | None:
    for pattern, two_digit_year in ((_IMF_FIXDATE, False), (_RFC850, True), (_ASCTIME, False)):
        match = pattern.fullmatch(value)
        if match is None:
            continue
        year = int(match["y"])
        if two_digit_year:  # RFC 9110 §5.6.7: 2-digit years are in the past 50 years
            year += 2000 if year < 50 else 1900
        try:
            when = datetime(
                year,
                _MONTHS[match["mon"]],
                int(match["d"].strip()),
                int(match["h"]),
                int(match["m"]),
                int(match["s"]),
                tzinfo=UTC,
            )
        except ValueError:
            return None
        return int(when.timestamp()) * 1000
    return None


def parse_retry_after(value: str | None, *, now_ms: int, cap_ms: int) -> RetryAfter:
    """Parse a ``Retry-After`` field value strictly and bound it by ``cap_ms``.

    Accepts ``delay-seconds`` (``1*DIGIT``) or an HTTP-date (IMF-fixdate, or the obsolete
    RFC 850 and asctime forms recipients must accept); surrounding whitespace (OWS) is
    allowed, nothing else is. A date in the past means no delay (0).
    """
    if value is None:
        return RetryAfter(None, None, invalid=False, capped=False)
    raw = value[:_RAW_LIMIT]
    text = value.strip(" \t")
    delay: int | None = None
    if _DELAY_SECONDS.fullmatch(text):
        # bound before multiplying: a 10^6-digit header must not build a huge int
        delay = cap_ms + 1 if len(text) > 19 else int(text) * 1000
    else:
        at = _http_date_ms(text)
        if at is not None:
            delay = max(0, at - now_ms)
    if delay is None:
        return RetryAfter(None, raw, invalid=True, capped=False)
    return RetryAfter(min(delay, cap_ms), raw, invalid=False, capped=delay > cap_ms)


def _retry_after_ms_header(value: str | None) -> int | None:
    """``retry-after-ms`` (OpenAI, Anthropic): ASCII digits only, bounded like Retry-After."""
    if value is None:
        return None
    text = value.strip(" \t")
    if not text or len(text) > 12 or not (text.isascii() and text.isdigit()):
        return None
    return min(int(text), RETRY_AFTER_MAX_MS)


def parse_retry_after_hint(
    retry_after: str | None,
    retry_after_ms: str | None = None,
    *,
    now_ms: int | None = None,
) -> int | None:
    """A server's delay hint in ms: ``retry-after-ms`` when valid, else ``Retry-After``
    parsed strictly (:func:`parse_retry_after`), capped at :data:`RETRY_AFTER_MAX_MS`."""
    from_ms = _retry_after_ms_header(retry_after_ms)
    if from_ms is not None:
        return from_ms
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return parse_retry_after(retry_after, now_ms=now, cap_ms=RETRY_AFTER_MAX_MS).delay_ms
