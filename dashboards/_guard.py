"""The UI's top-level error boundary: what a script run raises is named on the page by its
type only — never its text or traceback, which may hold server paths or echo input — and
the server's log keeps the whole traceback."""

from __future__ import annotations

import logging
from collections.abc import Callable

import streamlit as st

FAILED = "This page failed"
"""How the boundary's message starts."""
_LOG = logging.getLogger("retryscope.dashboards")


def guarded(run: Callable[[], None]) -> None:
    """Call ``run``; an error it raises is logged and named on the page. Streamlit's rerun
    and stop signals are ``BaseException``s and pass through."""
    try:
        run()
    except Exception as exc:
        _LOG.exception("a page of the retryscope UI failed")
        st.error(
            f"{FAILED} ({type(exc).__name__}). The details are in the server's log; "
            "changing the filters or reloading may help."
        )
