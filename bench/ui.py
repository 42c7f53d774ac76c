"""Target 6: each page of the multi-page UI on the generated data set, warm, in ≤ 1 s.

Every page script under ``retryscope.dashboards``' ``pages/`` directory runs in Streamlit's
AppTest with ``RETRYSCOPE_DATA`` pointing at the data set: once to fill the caches, then
timed. The baseline is AppTest running a one-line page (Streamlit's own floor). Skipped,
with a message, while the UI has no ``pages/`` directory (it lands with issue 7).
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


def pages_dir() -> Path:
    import retryscope.dashboards

    return Path(retryscope.dashboards.__file__).parent / "pages"


def run(settings: Settings) -> list[Result]:
    pages = sorted(pages_dir().glob("*.py")) if pages_dir().is_dir() else []
    if not pages:
        return [
            Result(
                "ui",
                "UI pages warm",
                None,
                "s",
                Target(at_most=1.0, text="≤ 1 s per page"),
                note="skipped: the multi-page UI is not there yet "
                f"(no page scripts in {pages_dir()}; issue 7)",
            )
        ]
    from streamlit.testing.v1 import AppTest

    from retryscope.dashboards.serve import DATA_ENV

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
        for page in pages:
            warm = timed(AppTest.from_file(str(page), default_timeout=600))
            results.append(
                Result(
                    "ui",
                    f"page {page.stem}, warm",
                    warm,
                    "s",
                    Target(at_most=1.0, text="≤ 1 s"),
                    {"Streamlit floor": f"{floor * 1e3:.0f} ms", "ratio": f"{warm / floor:.1f}×"},
                )
            )
        return results
    finally:
        if previous is None:
            os.environ.pop(DATA_ENV, None)
        else:
            os.environ[DATA_ENV] = previous
