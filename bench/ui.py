"""Target 6: each page of the multi-page UI on the generated data set, warm, in ≤ 1 s.

The app (``retryscope.dashboards.app``) runs in Streamlit's AppTest with
``RETRYSCOPE_DATA`` pointing at the data set; each page of its navigation (``PAGES``) is
opened as a link opens it (the drill-down with a sample request's ``?id=``), run once to
fill the caches, then timed. The baseline is AppTest running a one-line page (Streamlit's
own floor). Reported beside them, without a target: the first run of the Requests
explorer on a filtered scope (its per-scope table built) and a new sort of that list
(one DuckDB query over that table), the explorer's interactive costs.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.generate import TENANTS, generate
from bench.harness import Result, Target
from bench.settings import Settings

FLOOR_PAGE = "import streamlit as st\nst.write('ok')\n"


def run(settings: Settings) -> list[Result]:
    from streamlit.testing.v1 import AppTest

    from retryscope.dashboards._serve import APP, DATA_ENV

    pages = _pages()

    data = generate(settings.data_dir, settings.attempts, settings.seed)
    previous = os.environ.get(DATA_ENV)
    os.environ[DATA_ENV] = data.path
    rounds = 1 if settings.quick else 3
    links = {"views/request.py": {"id": data.sample_ids[0][0]}}

    def checked(at: AppTest) -> float:
        began = time.perf_counter()
        at.run()
        elapsed = time.perf_counter() - began
        if at.exception:
            raise RuntimeError(f"page raised: {at.exception}")
        return elapsed

    def timed(at: AppTest) -> tuple[float, float]:
        cold = checked(at)  # fills st.cache_data / st.cache_resource
        return cold, statistics.median(checked(at) for _ in range(rounds))

    def opened(path: str, query: dict[str, str]) -> Any:
        at = AppTest.from_file(str(APP), default_timeout=3600)
        at.query_params.update(query)
        at.switch_page(path)
        return at

    try:
        _, floor = timed(AppTest.from_string(FLOOR_PAGE, default_timeout=600))
        results = []
        for path, title in pages:
            cold, warm = timed(opened(path, links.get(path, {})))
            results.append(
                Result(
                    "ui",
                    f"page {title}, warm",
                    warm,
                    "s",
                    Target(at_most=1.0, text="≤ 1 s"),
                    {
                        "Streamlit floor": f"{floor * 1e3:.0f} ms",
                        "ratio": f"{warm / floor:.1f}×",
                        "first run": f"{cold:.1f} s",
                    },
                )
            )
        # the busiest tenant: a filtered scope (its copies and the explorer's table built)
        explorer = opened("views/requests.py", {"tenant": TENANTS[0], "has": "fallback"})
        filtered = checked(explorer)
        explorer.selectbox(key="req_sort").set_value("duration_ms")
        resorted = checked(explorer)
        results += [
            Result(
                "ui",
                "Requests explorer, first run of a filtered list",
                filtered,
                "s",
                note=f"tenant {TENANTS[0]}: the scope and the explorer's table of it built "
                "(once per filter set)",
            ),
            Result(
                "ui",
                "Requests explorer, the same list sorted anew",
                resorted,
                "s",
                note="one DuckDB query: filter, sort and cut the scope's table",
            ),
        ]
        return results
    finally:
        import streamlit as st

        # the app's cached connection holds the analytics tables (GiBs at 10 M attempts):
        # release it before the next benchmark runs in this process
        st.cache_data.clear()
        st.cache_resource.clear()
        if previous is None:
            os.environ.pop(DATA_ENV, None)
        else:
            os.environ[DATA_ENV] = previous


def _pages() -> list[tuple[str, str]]:
    """(script path relative to the app, title) of every page in the app's navigation."""
    import ast

    from retryscope.dashboards._serve import APP

    tree = ast.parse(Path(APP).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PAGES" for t in node.targets
        ):
            return [(str(p), str(title)) for p, title, _ in ast.literal_eval(node.value)]
    raise RuntimeError(f"no PAGES in {APP}")
