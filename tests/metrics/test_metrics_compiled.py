"""The metrics' per-attempt code compiled by mypyc (``setup.py``) and as plain Python.

The build compiles the modules of ``setup.COMPILED`` where it can; the package must record
the same figures either way, and the compiled modules in use must be the current source's.
"""

from __future__ import annotations

import gc
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from retryscope import logical_request
from retryscope.instrumentation import AttemptStampingProcessor, _sdk, _sdk_finished
from retryscope.instrumentation._sdk_finished import ended_fields, finished_attributes
from retryscope.instrumentation.metrics import _facts as facts
from retryscope.instrumentation.metrics import _hold, _processor
from tests.metrics.support import Metered, differences, live_figures, report_figures
from tests.metrics.test_metrics_agree import SCENARIOS
from tests.recorder import T0, Clock, Recorder

ROOT = Path(__file__).resolve().parents[2]
MODULES = (_sdk_finished, facts, _hold)
"""The compiled modules, each after the ones it imports (``setup.COMPILED``)."""


def _source(module: ModuleType) -> Path:
    assert module.__file__ is not None
    return Path(module.__file__).with_name(module.__name__.rpartition(".")[2] + ".py")


def _compiled(module: ModuleType) -> bool:
    return (module.__file__ or "").endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


COMPILED = _compiled(facts)


@dataclass(frozen=True)
class PlainBuild:
    """The compiled modules imported from their sources, each importing the others' source."""

    finished: ModuleType
    facts: ModuleType
    hold: ModuleType


@pytest.fixture(scope="module")
def plain_build() -> PlainBuild:
    """The modules of ``setup.COMPILED`` imported from their sources (under their own names
    while they import one another, so each binds the others' plain functions), whether or
    not a compiled build is installed; the installed modules are back in place after."""
    saved = {m.__name__: sys.modules[m.__name__] for m in MODULES}
    loaded = []
    try:
        for module in MODULES:
            spec = importlib.util.spec_from_file_location(module.__name__, _source(module))
            assert spec is not None
            assert spec.loader is not None
            plain = importlib.util.module_from_spec(spec)
            sys.modules[module.__name__] = plain  # (dataclasses look their module up)
            spec.loader.exec_module(plain)
            assert plain.__file__ == str(_source(module))
            loaded.append(plain)
    finally:
        sys.modules.update(saved)
    finished, plain_facts, hold = loaded
    assert hold.attempt_row is plain_facts.attempt_row
    assert hold.ended_fields is finished.ended_fields
    assert plain_facts.finished_attributes is finished.finished_attributes
    paths = _sdk._paths
    finished.use(paths.readable_types, paths.plain_types, False, paths.span_type)
    return PlainBuild(finished, plain_facts, hold)


@pytest.fixture(scope="module")
def plain(plain_build: PlainBuild) -> ModuleType:
    """``_facts`` imported from its source."""
    return plain_build.facts


def test_the_build_compiled_the_modules_where_it_could() -> None:
    """With mypyc and a C compiler (the dev install has both) the modules in use are the
    compiled ones, built after their sources last changed (``make test`` reinstalls then)."""
    if os.environ.get("RETRYSCOPE_COMPILE", "1") == "0":
        pytest.skip("RETRYSCOPE_COMPILE=0: the plain-Python package is installed")
    if importlib.util.find_spec("mypyc") is None or shutil.which("cc") is None:
        pytest.skip("no mypyc or no C compiler here: the plain-Python package is installed")
    sources = sorted(str(_source(m).relative_to(ROOT)) for m in MODULES)
    setup_py = (ROOT / "setup.py").read_text()
    assert all(f'"{s}"' in setup_py for s in sources), "MODULES and setup.COMPILED differ"
    for module in MODULES:
        assert _compiled(module), f"{module.__file__} is not compiled: reinstall the package"
        built, source = Path(str(module.__file__)).stat().st_mtime, _source(module).stat().st_mtime
        assert built >= source, f"{module.__file__} predates its source: reinstall the package"


def test_a_held_row_is_left_to_reference_counting() -> None:
    """A request's rows are held until it ends and refer to nothing that can refer back
    to them; compiled, the collector does not track them (``acyclic``: no collection
    walks a long request's rows)."""
    row = facts.AttemptRow({"retryscope.attempt.layer": "sdk"}, None, 1, None, 0, 1)
    assert gc.is_tracked(row) is not COMPILED


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_plain_python_modules_record_what_the_installed_ones_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plain_build: PlainBuild, scenario: str
) -> None:
    """The same traffic through the processor with the installed module (compiled, in a
    dev install) and with the source's functions: the same figures, the report's."""
    installed = Recorder(tmp_path / "installed")
    metered = Metered.on(installed.provider)
    SCENARIOS[scenario](installed)
    expected = live_figures(metered.points())
    assert list(differences(expected, report_figures(installed.connect()))) == []

    monkeypatch.setattr(_processor, "Holder", plain_build.hold.Holder)
    for name in ("request_facts", "tally"):
        monkeypatch.setattr(_processor, name, getattr(plain_build.facts, name))
    again = Recorder(tmp_path / "plain")
    metered_plain = Metered.on(again.provider)
    SCENARIOS[scenario](again)
    assert live_figures(metered_plain.points()) == expected
    assert metered_plain.processor is not None
    assert metered_plain.processor.errors == 0


def _row(m: ModuleType, span: ReadableSpan) -> facts.AttemptRow:
    """``span``'s row as the processor reads it, with module ``m``'s ``attempt_row``."""
    row: facts.AttemptRow = m.attempt_row(dict(finished_attributes(span) or {}), ended_fields(span))
    return row


def _failure_then_success() -> tuple[list[ReadableSpan], ReadableSpan]:
    """A request's two harness attempts (a failure, then 10 ms later a success) and its span."""
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())
    kept = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    clock = Clock(T0)
    with logical_request(operation="chat", tracer_provider=provider, clock=clock) as req:
        with req.attempt("p") as first:
            first.set_outcome("unavailable")
        clock.advance_ms(10)
        with req.attempt("p") as second:
            second.set_outcome("success")
    *attempts, request = kept.get_finished_spans()
    return attempts, request


@pytest.mark.parametrize("module", ["installed", "plain"])
def test_resends_follow_the_order_sends_started_in(plain: ModuleType, module: str) -> None:
    """The receiver's order is by start: sends of one operation that end out of that order
    (the first to start ends last) still make the later-started one the resend."""
    m = facts if module == "installed" else plain
    attempts, request = _failure_then_success()
    in_order = [_row(m, s) for s in attempts]
    m.request_facts(in_order, request)
    assert [r.resend for r in in_order] == [False, True]
    # the same sends, the later-started one first (as if it had ended first)
    swapped = [_row(m, s) for s in reversed(attempts)]
    m.request_facts(swapped, request)
    assert sorted((r.start, r.resend) for r in swapped) == [(r.start, r.resend) for r in in_order]
    # sends that started at the same time: the receiver's order is by span id
    tied = [_row(m, s) for s in attempts]
    tied[1].start = tied[0].start
    tied.sort(key=lambda r: r.span_id, reverse=True)
    m.request_facts(tied, request)
    assert [r.resend for r in sorted(tied, key=lambda r: r.span_id)] == [False, True]


@pytest.mark.parametrize("module", ["installed", "plain"])
def test_a_retry_group_is_taken_in_ordinal_then_start_order(plain: ModuleType, module: str) -> None:
    """A failure then a success numbered 1 and 2 (or both 1, started 10 ms apart): the
    success is the retry, in whatever order the rows arrive."""
    m = facts if module == "installed" else plain
    attempts, request = _failure_then_success()

    def retries(numbered_alike: bool, arrival: slice) -> list[bool]:
        rows = [_row(m, s) for s in attempts]
        if numbered_alike:
            rows[1].ordinal = rows[0].ordinal
        m.request_facts(rows[arrival], request)
        return [r.retry for r in rows]

    for numbered_alike in (False, True):
        for arrival in (slice(None), slice(None, None, -1)):
            assert retries(numbered_alike, arrival) == [False, True], (numbered_alike, arrival)


def test_a_tally_counts_runs_of_alike_rows_as_each_row(plain: ModuleType) -> None:
    """Rows counted alike are summed in one run; a row that differs in any counted value
    starts a new one (flip a comparison in ``_counted_alike`` and the counts change)."""
    for m in (facts, plain):
        rows = [
            m.AttemptRow(
                {"retryscope.attempt.layer": "sdk", "retryscope.route.id": r}, None, n, None, 0, 1
            )
            for n, r in enumerate(("a", "a", "b", "a"))
        ]
        rows[1].retry = True
        counted = m.tally(rows)
        assert counted.attempts == {
            ("sdk", "a", None, None, None, False): 2,
            ("sdk", "a", None, None, None, True): 1,
            ("sdk", "b", None, None, None, False): 1,
        }
        assert counted.sends == {("sdk", "a", None, False): 3, ("sdk", "b", None, False): 1}
        assert {place: len(d) for place, d in counted.durations.items()} == {
            ("sdk", "a"): 3,
            ("sdk", "b"): 1,
        }


_RECORD_AND_EXIT = """
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from retryscope import AttemptStampingProcessor, logical_request
from retryscope.instrumentation import AttemptMetricsProcessor, MetricsConfig
from retryscope.instrumentation.metrics import _facts

reader = InMemoryMetricReader()
provider = TracerProvider()
provider.add_span_processor(AttemptStampingProcessor())
provider.add_span_processor(
    AttemptMetricsProcessor(
        meter_provider=MeterProvider(metric_readers=[reader]), config=MetricsConfig()
    )
)
for _ in range(50):
    with logical_request(operation="chat", tracer_provider=provider) as req:
        for outcome in ("rate_limited", "success"):
            with req.attempt("p") as attempt:
                attempt.set_outcome(outcome)
assert reader.get_metrics_data() is not None
print(_facts.__file__)
"""


def test_a_process_recording_metrics_exits_cleanly() -> None:
    """An interpreter that recorded through the installed build shuts down with status 0 (a
    compiled module's teardown runs at exit, where a crash would take the application's
    shutdown with it)."""
    done = subprocess.run(
        [sys.executable, "-c", _RECORD_AND_EXIT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "RETRYSCOPE_DIGEST_KEY": "exit-test-key-0123456789"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == facts.__file__


def _build(
    tmp_path: Path, compiler: Path, appended: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    """``setup.py build_ext`` on a copy of the build's inputs (in ``tmp_path / "src"``),
    ``appended`` added to the copy of ``_hold.py``, with ``compiler`` as CC and ``env``
    added to the environment."""
    tree = tmp_path / "src"
    (tree / "instrumentation" / "metrics").mkdir(parents=True, exist_ok=True)
    sources = [str(_source(m).relative_to(ROOT)) for m in MODULES]
    for name in ("setup.py", "pyproject.toml", "README.md", *sources):
        shutil.copyfile(ROOT / name, tree / name)
    with (tree / "instrumentation" / "metrics" / "_hold.py").open("a") as hold:
        hold.write(appended)
    build = [
        "build_ext",
        "--build-lib",
        str(tmp_path / "lib"),
        "--build-temp",
        str(tmp_path / "temp"),
    ]
    return subprocess.run(
        [sys.executable, "setup.py", "-q", *build],
        cwd=tree,
        env={**os.environ, "CC": str(compiler), **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_a_failed_compile_leaves_the_plain_python_package(tmp_path: Path) -> None:
    """The compiler fails on one of the extensions mypyc makes (the shim of ``_facts``,
    after the modules' shared library built): the build still succeeds, and leaves none of
    them, since a shim without its library, or the library alone, would not import."""
    if importlib.util.find_spec("mypyc") is None:
        pytest.skip("no mypyc here")
    compiler = tmp_path / "cc-failing-on-the-shim"
    compiler.write_text(
        '#!/bin/sh\ncase "$*" in *metrics/_facts.c*) echo "no" >&2; exit 1;; esac\nexec cc "$@"\n'
    )
    compiler.chmod(0o755)
    done = _build(tmp_path, compiler)
    assert done.returncode == 0, done.stderr
    assert "metrics code not compiled" in done.stderr
    assert (tmp_path / "temp").exists()  # the runtime library was compiled first
    assert list((tmp_path / "lib").rglob("*.so")) == []


@pytest.mark.parametrize("why", ["switched off", "mypyc fails"])
def test_a_build_without_compiling_removes_extensions_left_beside_the_sources(
    tmp_path: Path, why: str
) -> None:
    """An editable install builds the extensions beside the sources: a later build that
    does not compile removes them, or they would be imported instead of changed sources."""
    tree = tmp_path / "src"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    stale = [tree / f"{_source(m).relative_to(ROOT).with_suffix('')}{suffix}" for m in MODULES]
    stale.append(tree / "instrumentation" / f"_compiled__mypyc{suffix}")
    kept = tree / "instrumentation" / f"_other{suffix}"  # not one of the build's
    for path in [*stale, kept]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"stale")
    compiler = Path(shutil.which("cc") or "cc")
    if why == "switched off":
        done = _build(tmp_path, compiler, RETRYSCOPE_COMPILE="0")
    else:  # a construct mypyc does not compile (plain Python runs it)
        if importlib.util.find_spec("mypyc") is None:
            pytest.skip("no mypyc here")
        uncompilable = (
            "\n\ndef _each(items: list[int]) -> None:\n    for item in items:\n"
            "        try:\n            continue\n        finally:\n            pass\n"
        )
        done = _build(tmp_path, compiler, uncompilable)
        assert "metrics code not compiled" in done.stderr
    assert done.returncode == 0, done.stderr
    assert [p for p in stale if p.exists()] == []
    assert kept.exists()


@pytest.mark.parametrize("module", ["installed", "plain"])
@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("layer", ("harness", "sdk")),
        ("parent_layer", (None, "harness")),
        ("parent_ordinal", (1, 2)),
        ("operation_ordinal", (1, 2)),
    ],
)
def test_attempts_of_different_groups_are_no_retries_of_one_another(
    plain: ModuleType, module: str, field: str, values: tuple[object, object]
) -> None:
    """A failure and then a success that differ in one part of the retry group's key (and
    arrive one after the other): two groups of one attempt each, so no retry."""
    m = facts if module == "installed" else plain
    attempts, request = _failure_then_success()
    rows = [_row(m, s) for s in attempts]
    for row, value in zip(rows, values, strict=True):
        row.ordinal = 1
        row.parent_layer, row.parent_ordinal, row.operation_ordinal = None, None, None
        setattr(row, field, value)
        if field == "parent_ordinal":
            row.parent_layer = "harness"
    m.request_facts(rows, request)
    assert [r.retry for r in rows] == [False, False]
