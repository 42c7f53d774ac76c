"""The retryscope audit UI (Streamlit). Run through ``retryscope ui PATH``.

Reads the data set named by the ``RETRYSCOPE_DATA`` environment variable with DuckDB; one
cached connection per data set, results cached on the data set's file list and mtimes so
new files show on refresh.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st
from retryscope.analytics import build_report, connect, discover
from retryscope.dashboards.serve import DATA_ENV


def _fingerprint(files: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    return tuple((f, Path(f).stat().st_mtime_ns) for f in files if Path(f).exists())


@st.cache_data(show_spinner=False)
def _report(root: str, fingerprint: tuple[tuple[str, int], ...]) -> dict[str, Any]:
    con, _ = connect(root)
    return build_report(con)


def main() -> None:
    st.set_page_config(page_title="retryscope", layout="wide")
    st.title("retryscope — retry & fallback audit")
    root = os.environ.get(DATA_ENV, "")
    if not root or not Path(root).exists():
        st.info(f"No data directory: set {DATA_ENV} or run `retryscope ui PATH`.")
        return
    dataset = discover(root)
    for skipped in dataset.skipped:
        st.warning(f"Skipped unreadable file {skipped.path}: {skipped.reason}")
    if not dataset.files:
        st.info(f"No span files under {root} yet.")
        return
    report = _report(root, _fingerprint(dataset.files))
    st.caption(f"{root} · {len(dataset.files)} file(s)")
    cols = st.columns(5)
    cols[0].metric("Logical requests", f"{report['logical_requests']:,}")
    cols[1].metric("Physical attempts", f"{report['physical_attempts']:,}")
    cols[2].metric("Amplification", f"{report['amplification_ratio']:.2f}×")
    cols[3].metric("Fallback rate", f"{report['fallback_rate']:.1%}")
    cols[4].metric(
        "Deadline exhausted",
        f"{report['deadline_exhausted']:,}",
        f"{report['deadline_exhausted_rate']:.1%} of requests",
        delta_color="off",
    )
    routes = pd.DataFrame(report["routes"])
    left, right = st.columns(2)
    with left:
        st.subheader("Routes")
        if routes.empty:
            st.info("No attempts recorded.")
        else:
            st.altair_chart(
                alt.Chart(routes)
                .mark_bar()
                .encode(
                    x=alt.X("amplification_ratio:Q", title="attempts per logical request"),
                    y=alt.Y("route_id:N", title=None, sort=None),
                    tooltip=["route_id", "attempts", "logical_requests", "success_rate"],
                ),
                use_container_width=True,
            )
            st.dataframe(routes, hide_index=True, use_container_width=True)
    with right:
        st.subheader("Terminals")
        terminals = pd.DataFrame(
            {"terminal": list(report["terminals"]), "requests": list(report["terminals"].values())}
        )
        st.altair_chart(
            alt.Chart(terminals)
            .mark_bar()
            .encode(x="requests:Q", y=alt.Y("terminal:N", sort="-x", title=None)),
            use_container_width=True,
        )


main()
