"""Target 6: each page of the multi-page UI on the generated data set, warm, in ≤ 1 s.

The app (``retryscope.dashboards.app``) runs in Streamlit's AppTest with
``RETRYSCOPE_DATA`` pointing at the data set; each page of its navigation (``PAGES``) is
switched to, run once to fill the caches, then timed. The baseline is AppTest running a
one-line page (Streamlit's own floor).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from bench.generate import generate
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

    def timed(at: AppTest) -> float:
        at.run()  # cold: fills st.cache_data / st.cache_resource
        if at.exception:
            raise RuntimeError(f"page raised: {at.exception}")
        times = []
        for _ in range(rounds):
            began = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - began)
        return statistics.median(times)

    try:
        floor = timed(AppTest.from_string(FLOOR_PAGE, default_timeout=600))
        results = []
        for path, title in pages:
            at = AppTest.from_file(str(APP), default_timeout=600)
            at.switch_page(path)
            warm = timed(at)
            results.append(
                Result(
                    "ui",
                    f"page {title}, warm",
                    warm,
                    "s",
                    Target(at_most=1.0, text="≤ 1 s"),
                    {"Streamlit floor": f"{floor * 1e3:.0f} ms", "ratio": f"{warm / floor:.1f}×"},
                )
            )
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
