"""Redaction by pattern: secrets in URLs, header attributes, exception messages and events.

A name *names a secret* when, case-insensitively and whatever its separators (``api_key``,
``x-api-key``, ``apiKey``, ``API.KEY``), it contains one of :data:`SECRET_WORDS` (token,
key, secret, password, signature, auth, credential, cookie, session), has a word in
:data:`SECRET_WORD_NAMES` (``sig``, ``pwd``, ``jwt``) or is one of :data:`SECRET_NAMES`
(``code``, the OAuth authorization code). The value of such a query parameter (after ``&``
or ``;``, in the query or as a path parameter), header or ``name=value``/``name: value``
pair in free text becomes ``REDACTED``; so do URL credentials, ``Bearer``/``Basic``
credentials and a few unmistakable token shapes (``sk-…`` API keys, GitHub and Slack tokens,
AWS access key ids, JWTs). A URL loses its fragment.

Applied where retryscope records text (its own ``url.full`` and exception events, through
:func:`record_exception`) and, as a last line, by both writers (the Parquet exporter and
``retryscope ingest``) to every string column of every span they write, whichever
instrumentation made it (:mod:`retryscope.instrumentation.export._scrub`): a URL attribute as
a URL, a captured header or gRPC/Connect metadata entry naming a secret wholly
(:func:`redact_value`), every other text as :func:`redact_text`.
Redaction errs on the side of hiding: ``?author=`` loses its value too.
"""

from __future__ import annotations

import functools
import re
import traceback
from typing import Any, Final
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from opentelemetry.trace import Span

MARK: Final = "REDACTED"
"""What a redacted value becomes (OpenTelemetry's URL convention)."""
URL_MAX_CHARS: Final = 2048
"""Longest URL kept (longer ones are cut after redaction)."""
SECRET_WORDS: Final = (
    "token",
    "key",
    "secret",
    "passw",
    "passphrase",
    "signature",
    "auth",
    "credential",
    "cookie",
    "session",
)
SECRET_WORD_NAMES: Final = frozenset({"sig", "pwd", "jwt"})
SECRET_NAMES: Final = frozenset({"code"})
URL_KEYS: Final = frozenset({"url.full", "http.url", "url.original", "http.target", "url.query"})
"""Attribute keys whose value is a URL (or its query) in OpenTelemetry's HTTP conventions."""
HEADER_PREFIXES: Final = ("http.request.header.", "http.response.header.")
"""Attribute key prefixes of captured HTTP headers (the rest of the key is the header)."""
METADATA_PREFIXES: Final = (
    "rpc.grpc.request.metadata.",
    "rpc.grpc.response.metadata.",
    "rpc.connect_rpc.request.metadata.",
    "rpc.connect_rpc.response.metadata.",
)
"""Attribute key prefixes of captured gRPC and Connect metadata (the rest is the name)."""

_SEPARATORS: Final = re.compile(r"[^0-9a-z]+")
_WORDS_RE: Final = "|".join(SECRET_WORDS)
_NAME_CHARS: Final = r"[A-Za-z0-9_.\-]"
_PAIR: Final = re.compile(
    rf"(?i)(?P<name>{_NAME_CHARS}{{0,64}}(?:{_WORDS_RE}){_NAME_CHARS}{{0,64}})"
    r"(?P<sep>[\"']?\s*[:=]\s*)"
    r"(?P<value>\"[^\"]*\"|'[^']*'|(?:bearer|basic|token)\s+[^\s,;&'\")\]}]+|[^\s,;&'\")\]}]+)"
)
_NOT_A_NAME: Final = re.compile(r"(?i)(error|exception|warning)$")
_URL: Final = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]{0,15}://[^\s'\"<>]+")
_SCHEME_CREDENTIAL: Final = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}")
_TOKEN_SHAPES: Final = re.compile(
    r"\b(?:sk-[A-Za-z0-9_\-]{16,}"
    r"|(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{16,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,})"
)
MAY_HOLD_SECRET: Final = "|".join(
    (
        "://",
        "bearer",
        "basic",
        "sk-",
        "gh[opsu]_",
        "github_pat_",
        "xox[abprs]-",
        "akia",
        "eyj",
        *SECRET_WORDS,
    )
)
"""A regular expression (RE2 and Python, matched case-insensitively) found in every text
:func:`redact_text` changes: writers test whole columns with it and redact only the values
it finds (a superset: ``URL``, credential, token-shape and ``name=value`` patterns)."""


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether a query key, header or field ``name`` names a secret (see the module doc)."""
    folded = name.casefold()
    if folded.strip() in SECRET_NAMES:
        return True
    words = [w for w in _SEPARATORS.split(folded) if w]
    squashed = "".join(words)
    return any(word in squashed for word in SECRET_WORDS) or any(
        w in SECRET_WORD_NAMES for w in words
    )


def _redact_params(text: str) -> str:
    """``name=value`` pairs separated by ``&`` or ``;`` with secret values redacted; every
    other byte kept as it was."""
    pieces = re.split(r"([&;])", text)
    for i in range(0, len(pieces), 2):
        name, eq, _ = pieces[i].partition("=")
        if eq and is_secret_name(unquote_plus(name)):
            pieces[i] = f"{name}={MARK}"
    return "".join(pieces)


def _redact_segment(segment: str) -> str:
    head, semicolon, params = segment.partition(";")  # path parameters: /p;jsessionid=…
    return head + semicolon + _redact_params(params) if semicolon else segment


def _redact_path(path: str) -> str:
    if ";" in path:
        path = "/".join(map(_redact_segment, path.split("/")))
    return _TOKEN_SHAPES.sub(MARK, path)


@functools.lru_cache(maxsize=1024)
def redact_url(url: str) -> str:
    """``url`` without credentials, fragment or secret parameter values, at most
    :data:`URL_MAX_CHARS` long (OpenTelemetry's ``url.full`` convention, by pattern)."""
    try:
        parts = urlsplit(url[: URL_MAX_CHARS * 2])
    except ValueError:  # not a URL after all (e.g. a broken IPv6 host): redact as text
        return _redact_plain(url)[:URL_MAX_CHARS]
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MARK}:{MARK}@" + netloc.rsplit("@", 1)[1]
    query = _redact_params(parts.query) if parts.query else ""
    rebuilt = urlunsplit((parts.scheme, netloc, _redact_path(parts.path), query, ""))
    return rebuilt[:URL_MAX_CHARS]


def _redact_pair(match: re.Match[str]) -> str:
    name = match["name"]
    if _NOT_A_NAME.search(name) or not is_secret_name(name):
        return match[0]
    value = match["value"]
    quote = value[0] if value[:1] in ("'", '"') and len(value) > 1 else ""
    return f"{name}{match['sep']}{quote}{MARK}{quote}"


def redact_text(text: str) -> str:
    """Free text (an exception message, a stack trace) with URLs, ``name=value`` and
    ``name: value`` secrets, credentials and token shapes redacted."""
    if not text:
        return text
    return _redact_plain(_URL.sub(lambda m: redact_url(m[0]), text))


def _redact_plain(text: str) -> str:
    """:func:`redact_text` but for URLs."""
    text = _PAIR.sub(_redact_pair, text)
    text = _SCHEME_CREDENTIAL.sub(lambda m: f"{m[1]} {MARK}", text)
    return _TOKEN_SHAPES.sub(MARK, text)


@functools.lru_cache(maxsize=4096)
def secret_attribute(key: str) -> bool:
    """Whether attribute ``key`` is a captured HTTP header, gRPC or Connect metadata entry
    (:data:`HEADER_PREFIXES`, :data:`METADATA_PREFIXES`) whose name names a secret."""
    for prefix in (*HEADER_PREFIXES, *METADATA_PREFIXES):
        if key.startswith(prefix):
            return is_secret_name(key[len(prefix) :])
    return False


def redact_value(key: str, value: Any) -> Any:
    """``value`` of attribute ``key`` (a string, a list or a scalar) redacted: a URL as
    :func:`redact_url` (a query as its parameters), a secret header or metadata entry
    wholly, any other text as :func:`redact_text`."""
    if key in URL_KEYS and isinstance(value, str):
        return _redact_params(value) if key == "url.query" else redact_url(value)
    if secret_attribute(key):
        return [MARK] if isinstance(value, list | tuple) else MARK
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list | tuple):
        return [redact_text(v) if isinstance(v, str) else v for v in value]
    return value


def _text_of(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a hostile __str__
        return f"<{type(exc).__name__}: message unavailable>"


def _stacktrace_of(exc: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(exc))
    except Exception:  # a hostile __str__ or traceback
        return f"<{type(exc).__name__}: stack trace unavailable>"


def record_exception(span: Span, exc: BaseException) -> None:
    """``span.record_exception(exc)`` with the message and stack trace redacted (the event
    OpenTelemetry records: ``exception.type``/``message``/``stacktrace``/``escaped``)."""
    cls = type(exc)
    module = cls.__module__
    span.add_event(
        "exception",
        {
            "exception.type": cls.__qualname__
            if module in ("builtins", None)
            else f"{module}.{cls.__qualname__}",
            "exception.message": redact_text(_text_of(exc)),
            "exception.stacktrace": redact_text(_stacktrace_of(exc)),
            "exception.escaped": "False",
        },
    )
