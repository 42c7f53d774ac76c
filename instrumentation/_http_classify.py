"""HTTP status / transport error → outcome kind, and strict RFC 9110 ``Retry-After`` parsing.

Only the status code, the exception class and the bounded ``Retry-After`` field are read.
An error *body* is untrusted provider output and is never consulted: it cannot choose a
route, URL, model or delay (the policy's routes and schedule do).

Classification (``idempotent`` says whether resending the operation is safe under the bound
idempotency contract):

* 2xx → success (``None``); 408 → ``timeout_before_response`` when idempotent, otherwise
  ``unknown_provider_acceptance``; 429 → ``rate_limited``; 5xx → ``unavailable``;
* 400/411/413/414/415/422/431 → ``invalid_request``; 401/403/451 → ``policy_denied``;
  other 4xx → ``rejected``; 1xx/3xx (unexpected for an API call) → ``protocol_violation``;
* connection refused / connect errors / connect or pool timeouts (no request bytes
  accepted) → ``unavailable``; a timeout after the request was sent →
  ``unknown_provider_acceptance`` (``timeout_before_response`` only when idempotent and the
  response never started); anything else → ``unknown_provider_acceptance``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from retryscope.vocabulary import OutcomeKind

_INVALID_REQUEST: Final = frozenset({400, 411, 413, 414, 415, 422, 431})
_POLICY_DENIED: Final = frozenset({401, 403, 451})
_RAW_LIMIT: Final = 64


def classify_status(status: int, *, idempotent: bool) -> OutcomeKind | None:
    """Outcome kind of an HTTP response status; ``None`` means success."""
    if 200 <= status < 300:
        return None
    if status == 408:
        return (
            OutcomeKind.TIMEOUT_BEFORE_RESPONSE
            if idempotent
            else OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE
        )
    if status == 429:
        return OutcomeKind.RATE_LIMITED
    if 500 <= status < 600:
        return OutcomeKind.UNAVAILABLE
    if status in _INVALID_REQUEST:
        return OutcomeKind.INVALID_REQUEST
    if status in _POLICY_DENIED:
        return OutcomeKind.POLICY_DENIED
    if 400 <= status < 500:
        return OutcomeKind.REJECTED
    return OutcomeKind.PROTOCOL_VIOLATION


def _httpx_kind(exc: BaseException, *, idempotent: bool) -> OutcomeKind | None:
    try:
        import httpx
    except ImportError:  # the httpx extra is optional
        return None
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return OutcomeKind.UNAVAILABLE
    if isinstance(exc, httpx.WriteTimeout):
        # the body was partly sent: only an idempotent operation may count it as not accepted
        return (
            OutcomeKind.TIMEOUT_BEFORE_RESPONSE
            if idempotent
            else OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE
        )
    if isinstance(exc, httpx.ReadTimeout | httpx.ReadError | httpx.RemoteProtocolError):
        return OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE
    return None


def classify_exception(exc: BaseException, *, idempotent: bool, request_sent: bool) -> OutcomeKind:
    """Outcome kind of a transport exception.

    ``request_sent`` is True once request bytes may have reached the receiver; a timeout
    then means the provider may have accepted the work.
    """
    kind = _httpx_kind(exc, idempotent=idempotent)
    if kind is not None:
        return kind
    if isinstance(exc, ConnectionRefusedError):
        return OutcomeKind.UNAVAILABLE
    if isinstance(exc, TimeoutError):
        if not request_sent:
            return OutcomeKind.UNAVAILABLE
        return OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE
    if isinstance(exc, ConnectionError) and not request_sent:
        return OutcomeKind.UNAVAILABLE
    return OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE


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
        delta = when - datetime(1970, 1, 1, tzinfo=UTC)
        return (delta.days * 86_400 + delta.seconds) * 1000
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
