"""The retryscope audit UI (Streamlit multipage app). Run through ``retryscope ui PATH``.

Reads the data set named by the ``RETRYSCOPE_DATA`` environment variable. The sidebar's
global filters (time range, tenant, route, operation) apply to every page and live in the
URL, so a view can be shared and in-tab navigation keeps them; the pages live in ``views/``
(one script each).

A top-level boundary (``_guard``) catches what a page run raises: the page names the
error's type, never its text or traceback. URL parameters no widget read are named above the page.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import streamlit as st

from retryscope.analytics import fingerprint
from retryscope.dashboards import _format as fmt
from retryscope.dashboards import _url
from retryscope.dashboards._context import page_entered, sidebar
from retryscope.dashboards._data import Source
from retryscope.dashboards._guard import guarded
from retryscope.dashboards._progress import StatusProgress
from retryscope.dashboards.serve import DATA_ENV

PAGES = (
    ("views/overview.py", "Overview", "overview"),
    ("views/requests.py", "Requests", "requests"),
    ("views/compare.py", "Compare", "compare"),
    ("views/breakdown.py", "Breakdown", "breakdown"),
    ("views/amplification.py", "Amplification", "amplification"),
    ("views/fallbacks.py", "Fallbacks", "fallbacks"),
    ("views/deadlines.py", "Deadlines & latency", "deadlines"),
    ("views/findings.py", "Findings", "findings"),
    ("views/request.py", "Request drill-down", "request"),
    ("views/whatif.py", "What-if", "whatif"),
)
SKIPPED_LISTED = 20


def _source() -> Source | None:
    """The data set to show, or None after saying why there is none."""
    root = os.environ.get(DATA_ENV, "")
    if not root or not Path(root).exists():
        st.info(
            f"No data directory{f' at {fmt.literal(root, 300)}' if root else ''}: "
            "run `retryscope ui PATH` "
            f"(or set {DATA_ENV}) with the directory the Parquet exporter writes."
        )
        return None
    version = fingerprint(root)
    if not version:
        st.info(
            f"No span files under {fmt.literal(root, 300)} yet. Refresh once the exporter "
            "has written some."
        )
        return None
    source = Source(root, version)
    try:
        files = source.dataset.files
    except ValueError as exc:  # a setting the data set cannot be opened with
        st.error(f"Cannot open {fmt.literal(root, 300)}: {fmt.plain(exc)}")
        return None
    if not files:
        _warn_skipped(st.empty(), source)
        st.info(f"No readable span files under {fmt.literal(root, 300)}.")
        return None
    return source


def main() -> None:
    st.set_page_config(page_title="retryscope", layout="wide")
    st.sidebar.title("retryscope")
    source = _source()
    if source is None:
        return
    # the model is built (or attached) before any page reads it; a long build shows progress
    try:
        source.prepare(StatusProgress())
    except ValueError as exc:  # an attached model that cannot serve this data set
        st.error(f"Cannot open {fmt.literal(source.root, 300)}: {fmt.plain(exc)}")
        return
    warning = st.empty()  # filled after the page ran: reading may find undecodable files
    unread = st.empty()  # the URL parameters the page did not read, known once it ran
    _url.begin_run()
    pages = [
        st.Page(path, title=title, url_path=url, default=i == 0)
        for i, (path, title, url) in enumerate(PAGES)
    ]
    page = st.navigation(pages)
    sidebar(source, entered=page_entered(page.url_path))
    page.run()
    _warn_skipped(warning, source)
    ignored = _url.unread()
    if ignored:
        unread.warning(
            "Not a parameter of this page, ignored: "
            + ", ".join(fmt.literal(name) for name in ignored[:SKIPPED_LISTED])
            + (
                f" and {len(ignored) - SKIPPED_LISTED:,} more"
                if len(ignored) > SKIPPED_LISTED
                else ""
            )
            + "."
        )


def _warn_skipped(slot: Any, source: Source) -> None:
    skipped = source.skipped()
    if not skipped:
        return
    listed = "\n".join(
        f"- {fmt.literal(s.path, 300)}: {fmt.plain(s.reason)}" for s in skipped[:SKIPPED_LISTED]
    )
    more = (
        f"\n- … and {len(skipped) - SKIPPED_LISTED} more" if len(skipped) > SKIPPED_LISTED else ""
    )
    slot.warning(f"{len(skipped)} unreadable file(s) skipped:\n{listed}{more}")


guarded(main)
