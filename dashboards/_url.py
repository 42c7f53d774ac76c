"""Widget state in the page URL, so every view can be shared and navigation keeps it.

Each URL-bound widget is a :class:`Param`: a query parameter, the widget's session-state
key and how its value is written and read. Before the widgets are drawn, :func:`seed`
copies into their state the URL values that changed since this browser tab last wrote them (a
link followed, a URL pasted); when a page is *entered* (a new session, or another page
opened) its absent parameters mean their defaults. After the widgets are drawn,
:func:`publish` writes their values back (defaults left out). The navigation menu drops
the query string when it switches pages: the filters drawn on every page are then not
entered again but kept from the session and written back.

What cannot be used is named, never silently dropped or guessed: a value a widget cannot
take, one longer than :data:`MAX_VALUE_CHARS`, a parameter given twice (the last is used),
and (:func:`unread`) a parameter no widget of the page read. Values are echoed cut and as
code, so nothing in them renders as a link or markup.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from retryscope.dashboards import _format as fmt

_SEEN = "retryscope_url_seen"
_READ = "retryscope_url_read"
MAX_VALUE_CHARS = 1_000
"""The longest URL value a widget takes: longer ones are ignored (and named)."""
LISTED_NAMES = 10
"""A list parameter's error names the known names when there are at most this many."""


def _text(value: Any) -> str:
    return str(value)


@dataclass(frozen=True)
class Param:
    """A widget whose value lives in query parameter ``name``."""

    name: str
    key: str
    default: Any = None
    parse: Callable[[str], Any] = field(default=_text)
    """URL text → widget value; ``ValueError`` names a value the widget cannot take."""
    text: Callable[[Any], str] = field(default=_text)
    """Widget value → URL text."""


def comma_list(known: Collection[str], what: str) -> Callable[[str], list[str]]:
    """A :attr:`Param.parse` of a comma-separated list of names in ``known`` (empty ones
    skipped): a name outside it is a ``ValueError`` naming it (and the names, when few)."""

    def parse(text: str) -> list[str]:
        names = [n for n in text.split(",") if n]
        unknown = [n for n in names if n not in known]
        if unknown:
            listed = f" ({what}s: {', '.join(known)})" if len(known) <= LISTED_NAMES else ""
            raise ValueError(f"unknown {what} {unknown[0]!r}{listed}")
        return names

    return parse


def one_of(known: Collection[str], what: str) -> Callable[[str], str]:
    """A :attr:`Param.parse` of one name in ``known``: another is a ``ValueError`` naming
    the names (when few)."""

    def parse(text: str) -> str:
        if text not in known:
            listed = f" ({what}s: {', '.join(known)})" if len(known) <= LISTED_NAMES else ""
            raise ValueError(f"no such {what}{listed}")
        return text

    return parse


def new_session() -> bool:
    """Whether this browser tab has not written the URL yet (its first run)."""
    return _SEEN not in st.session_state


def _seen() -> dict[str, str | None]:
    seen: dict[str, str | None] = st.session_state.setdefault(_SEEN, {})
    return seen


def begin_run() -> None:
    """Start recording which parameters this script run reads (see :func:`unread`)."""
    st.session_state[_READ] = set()


def unread() -> list[str]:
    """The URL's parameters no widget of this run read (:func:`seed`): ignored."""
    read: set[str] = st.session_state.get(_READ, set())
    return sorted(name for name in st.query_params if name not in read)


def _problem(name: str, raw: str, why: str) -> str:
    return f"{fmt.literal(f'{name}={raw}')} in the URL: {fmt.plain(why, 300)}; ignored."


def seed(params: Iterable[Param], *, entered: bool) -> list[str]:
    """Copy URL values into the state of ``params``' widgets (before they are drawn);
    returns a message per value that could not be used (it is then ignored) or was
    ambiguous (given twice: the last is used)."""
    seen = _seen()
    read: set[str] = st.session_state.setdefault(_READ, set())
    problems = []
    for p in params:
        read.add(p.name)
        given = st.query_params.get_all(p.name)
        if not given:
            if entered:
                st.session_state[p.key] = p.default
                seen[p.name] = None
            continue
        raw = given[-1]
        if raw == seen.get(p.name) and p.key in st.session_state and not entered:
            continue
        seen[p.name] = raw
        if len(given) > 1:
            problems.append(
                f"{fmt.literal(p.name)} is given {len(given)} times in the URL: the last, "
                f"{fmt.literal(raw)}, is used."
            )
        if len(raw) > MAX_VALUE_CHARS:
            problems.append(_problem(p.name, raw, f"longer than {MAX_VALUE_CHARS:,} characters"))
            st.session_state[p.key] = p.default
            continue
        try:
            st.session_state[p.key] = p.parse(raw)
        except ValueError as exc:
            problems.append(_problem(p.name, raw, str(exc)))
            st.session_state[p.key] = p.default
    return problems


def values(params: Iterable[Param]) -> dict[str, str]:
    """The URL text of ``params``' current values, defaults left out."""
    out = {}
    for p in params:
        value = st.session_state.get(p.key, p.default)
        if value is not None and value != p.default and value != "":
            out[p.name] = p.text(value)
    return out


def publish(params: Iterable[Param]) -> None:
    """Write ``params``' current values into the URL (defaults removed) and remember them
    as what this browser tab last wrote."""
    params = list(params)
    current = values(params)
    seen = _seen()
    for p in params:
        text = current.get(p.name)
        if text is None:
            if p.name in st.query_params:
                del st.query_params[p.name]
        elif st.query_params.get_all(p.name) != [text]:
            st.query_params[p.name] = text
        seen[p.name] = text


def merged(*parts: Mapping[str, str]) -> dict[str, str]:
    """Query parameters of a link: later parts override earlier ones."""
    out: dict[str, str] = {}
    for part in parts:
        out.update(part)
    return out
