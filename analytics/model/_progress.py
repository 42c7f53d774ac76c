"""Progress of long work (a model build): what stage, how far, how long so far and how
long still, reported to the callback of the :class:`~retryscope.analytics.AuditModel`
building it (the UI shows it; the CLI prints it on a terminal with
:class:`TerminalProgress`, and nothing when stderr is not a terminal)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Final, TextIO

import duckdb


@dataclass(frozen=True, slots=True)
class Progress:
    """One step of long work: ``done`` of ``total`` units of ``stage`` finished after
    ``elapsed_s`` seconds; ``remaining_s`` is the estimate of the rest (None before the
    first unit is done). ``detail`` names the unit being worked on."""

    stage: str
    done: int
    total: int
    elapsed_s: float
    remaining_s: float | None = None
    detail: str = ""

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


ProgressCallback = Callable[[Progress], None]

STAGE_PARTITIONS: Final = "building time partitions"
STAGE_STRADDLING: Final = "rebuilding requests that straddle partitions"
STAGE_ACROSS: Final = "building the tables across requests"
STAGE_DONE: Final = "model ready"


def shared(callback: ProgressCallback | None, path: Path, mode: int) -> ProgressCallback:
    """``callback`` (may be None) that also writes each report to ``path`` (replaced
    atomically, with ``mode``): what a process waiting for this build reads
    (:func:`relay_shared`). A report that cannot be written is not shared."""

    def report(p: Progress) -> None:
        with contextlib.suppress(OSError):
            tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
            tmp.write_text(json.dumps(asdict(p)), encoding="utf-8")
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        if callback is not None:
            callback(p)

    return report


def relay_shared(path: Path, callback: ProgressCallback | None) -> Callable[[], None]:
    """What a process waiting for another's build calls now and then: hands the latest
    report that build shared at ``path`` (:func:`shared`) to ``callback``, its detail
    saying whose it is (a finished build's report is not relayed: the waiter's own build
    reports the end)."""

    def relay() -> None:
        if callback is None:
            return
        try:
            p = Progress(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return
        if p.stage == STAGE_DONE:
            return
        detail = f"another process{': ' + p.detail if p.detail else ''}"
        with contextlib.suppress(Exception):  # a broken display never stops the analysis
            callback(replace(p, detail=detail))

    return relay


def quiet_duckdb(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """``con`` without DuckDB's own progress bar, which writes to stdout for any query over
    two seconds even when stdout is piped (into a JSON report, for one): progress is
    reported here instead, on stderr or to the UI. (DuckDB refuses the setting in a
    connection's config, so it is set on the connection.)"""
    con.execute("SET enable_progress_bar = false")
    return con


class Tracker:
    """Reports one piece of work, weighted by rows, to a callback (or to nothing)."""

    def __init__(self, callback: ProgressCallback | None) -> None:
        self._callback = callback
        self._began = time.monotonic()

    def report(
        self,
        stage: str,
        done: int,
        total: int,
        *,
        weight_done: float = 0.0,
        weight_total: float = 0.0,
        detail: str = "",
    ) -> None:
        """``done`` of ``total`` units of ``stage``; the estimate extrapolates the weights
        (rows) done so far to those left."""
        if self._callback is None:
            return
        elapsed = time.monotonic() - self._began
        remaining = None
        if weight_done > 0 and weight_total >= weight_done:
            remaining = elapsed * (weight_total - weight_done) / weight_done
        try:
            self._callback(Progress(stage, done, total, elapsed, remaining, detail))
        except Exception:  # a broken display never stops the analysis
            self._callback = None


HINT_AFTER_S: Final = 10.0
"""A build at least this long ends with the ``hint`` of :class:`TerminalProgress`."""


class TerminalProgress:
    """A :data:`ProgressCallback` printing one updating line on ``stream`` (stderr) when
    it is a terminal, once work has run ``after_s`` seconds; silent otherwise. ``hint``
    is printed on its own line after a build that took :data:`HINT_AFTER_S` or more (how
    the next run could skip it)."""

    def __init__(
        self, stream: TextIO | None = None, *, after_s: float = 1.0, hint: str | None = None
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._after_s = after_s
        self._hint = hint
        self._shown = False
        isatty = getattr(self._stream, "isatty", None)
        self.enabled = bool(isatty and isatty())

    def __call__(self, p: Progress) -> None:
        if not self.enabled:
            return
        if not self._shown and (p.elapsed_s < self._after_s or p.stage == STAGE_DONE):
            return  # quick work shows nothing
        estimate = "" if p.remaining_s is None else f", about {duration(p.remaining_s)} left"
        line = (
            f"{p.stage}: {p.done} of {p.total} ({p.fraction:.0%}), "
            f"{duration(p.elapsed_s)} elapsed{estimate}"
        )
        end = "\n" if p.stage == STAGE_DONE else ""
        if p.stage == STAGE_DONE and self._hint and p.elapsed_s >= HINT_AFTER_S:
            end += self._hint + "\n"
        self._stream.write("\r\x1b[2K" + line + end)
        self._stream.flush()
        self._shown = p.stage != STAGE_DONE


def duration(seconds: float) -> str:
    """``seconds`` as a progress line writes it (``42 s``, ``3 min 05 s``)."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"
