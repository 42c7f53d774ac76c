"""The UI's display of a model build's progress: Streamlit's native ``st.status`` with an
``st.progress`` bar inside, fed by the same :data:`~retryscope.analytics.model.ProgressCallback`
the CLI's terminal line is (stage, partition k of K, elapsed, estimate), so the first page
of a large data set shows what it waits for instead of a blank page."""

from __future__ import annotations

from typing import Any

import streamlit as st

from retryscope.analytics.model import STAGE_DONE, Progress, duration

SHOWN_AFTER_S = 1.0
"""Work quicker than this shows nothing (as on a terminal)."""

TITLE = "Building the audit model…"


def line(p: Progress) -> str:
    """The progress as one line of text, as the terminal prints it."""
    estimate = "" if p.remaining_s is None else f", about {duration(p.remaining_s)} left"
    detail = f" ({p.detail})" if p.detail else ""
    return (
        f"{p.stage}{detail}: {p.done} of {p.total} ({p.fraction:.0%}), "
        f"{duration(p.elapsed_s)} elapsed{estimate}"
    )


class StatusProgress:
    """A :data:`ProgressCallback` drawing into the page being run: an ``st.status`` block
    (created at the first report after :data:`SHOWN_AFTER_S`) holding a progress bar, marked
    complete when the model is ready."""

    def __init__(self, container: Any | None = None) -> None:
        self._container = container if container is not None else st.container()
        self._status: Any = None
        self._bar: Any = None

    @property
    def shown(self) -> bool:
        return self._status is not None

    def __call__(self, p: Progress) -> None:
        if self._status is None:
            if p.elapsed_s < SHOWN_AFTER_S or p.stage == STAGE_DONE:
                return  # quick work shows nothing
            self._status = self._container.status(TITLE, expanded=True)
            self._bar = self._status.progress(0.0)
        text = line(p)
        self._bar.progress(min(max(p.fraction, 0.0), 1.0), text=text)
        if p.stage == STAGE_DONE:
            self._status.update(
                label=f"Audit model ready ({duration(p.elapsed_s)})",
                state="complete",
                expanded=False,
            )
