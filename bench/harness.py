"""Side-by-side timing: interleaved rounds, medians, ratios, targets, and how they print.

A benchmark measures a *case* against its *baseline* in the same process run: each round
times every case once, in an order that rotates from round to round, so drift in the
machine (frequency, caches, other load) lands on all cases alike. The figure of a case is
the median of its rounds; its ratio is that median over the baseline's median.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Verdict(StrEnum):
    """How a result stands against its target."""

    MET = "ok"
    MISSED = "MISSED"
    INFO = "info"  # no target: printed for reference
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class Target:
    """An upper (``at_most``) or lower (``at_least``) bound on a result's value."""

    at_most: float | None = None
    at_least: float | None = None
    text: str = ""

    def check(self, value: float) -> bool:
        if self.at_most is not None and value > self.at_most:
            return False
        return not (self.at_least is not None and value < self.at_least)


@dataclass(frozen=True, slots=True)
class Result:
    """One line of a benchmark's output: a value, its target, and the absolute figures."""

    bench: str
    name: str
    value: float | None
    unit: str
    target: Target | None = None
    details: Mapping[str, str] = field(default_factory=dict)
    note: str = ""

    @property
    def verdict(self) -> Verdict:
        if self.value is None:
            return Verdict.SKIPPED
        if self.target is None:
            return Verdict.INFO
        return Verdict.MET if self.target.check(self.value) else Verdict.MISSED

    def line(self) -> str:
        shown = "—" if self.value is None else _fmt(self.value, self.unit)
        target = f"[{self.target.text}]" if self.target is not None else ""
        head = f"  {self.name:<62} {shown:>11} {target:<20} {self.verdict.value:<7}"
        tail = "  ".join(f"{k} {v}" for k, v in self.details.items())
        text = f"{head} {tail}".rstrip()
        return f"{text}\n      {self.note}" if self.note else text


def _fmt(value: float, unit: str) -> str:
    if unit == "×":
        return f"{value:.2f}×"
    if unit == "%":
        return f"{value:.1%}"
    return f"{value:,.1f} {unit}" if unit else f"{value:,.3f}"


@dataclass(frozen=True, slots=True)
class Timings:
    """Per-round seconds of each case (all rounds kept, medians on demand): wall time, and
    the CPU time of the process (every thread's) in ``cpu_rounds``, the figure a loaded
    machine disturbs least."""

    rounds: Mapping[str, tuple[float, ...]]
    cpu_rounds: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def median(self, case: str) -> float:
        return statistics.median(self.rounds[case])

    def ratio(self, case: str, baseline: str) -> float:
        return self.median(case) / self.median(baseline)

    def cpu_median(self, case: str) -> float:
        return statistics.median(self.cpu_rounds[case])

    def cpu_ratio(self, case: str, baseline: str) -> float:
        return self.cpu_median(case) / self.cpu_median(baseline)


def interleave(
    cases: Mapping[str, Callable[[], object]],
    *,
    rounds: int,
    warmup: int = 1,
    setup: Callable[[], object] | None = None,
) -> Timings:
    """Time each case once per round, rotating the order; ``setup`` runs untimed before each.

    The garbage collector runs before each timed call and stays enabled during it, as in
    production (OpenTelemetry spans allocate, and collection is part of their cost).
    """
    names = list(cases)
    for _ in range(warmup):
        for name in names:
            if setup is not None:
                setup()
            cases[name]()
    seconds: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            if setup is not None:
                setup()
            gc.collect()
            start, start_cpu = time.perf_counter(), time.process_time()
            cases[name]()
            seconds[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return Timings(
        {name: tuple(values) for name, values in seconds.items()},
        {name: tuple(values) for name, values in cpu.items()},
    )


def micros(seconds: float, per: int) -> str:
    """``seconds`` spent on ``per`` items, as µs per item."""
    return f"{seconds / per * 1e6:,.2f} µs"


def millis(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.0f} MiB"
