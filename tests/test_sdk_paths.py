"""The SDK shortcuts and their public paths: the switch, the probes, and the same data.

``RETRYSCOPE_SDK_PUBLIC_ONLY`` forces every public path in a new process; each probe turns
its shortcut off when the SDK's private structure is not what it expects; and the whole
pipeline (stamping processor, batch processor, exporter, Parquet, report) writes the same
rows and report either way; and no other module names a private OpenTelemetry name.
``make unit-public-sdk`` runs the pipeline tests again with the switch on.
"""

from __future__ import annotations

import ast
import collections
import json
import logging
import operator
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from opentelemetry.sdk.trace import TracerProvider

from retryscope.analytics import build_report, connect
from retryscope.demo._run import generate
from retryscope.instrumentation import _sdk

PATHS = ["span_type", "plain_types", "readable_types"]


def _paths_in_a_new_process(value: str | None) -> tuple[dict[str, bool], str]:
    env = {k: v for k, v in os.environ.items() if k != _sdk.PUBLIC_ONLY_ENV}
    if value is not None:
        env[_sdk.PUBLIC_ONLY_ENV] = value
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from retryscope.instrumentation import _sdk; "
            "print(json.dumps(_sdk.fast_paths()))",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout), done.stderr


def test_the_switch_forces_every_public_path_in_a_new_process() -> None:
    on, _ = _paths_in_a_new_process(None)
    assert list(on) == PATHS
    assert all(on.values())  # this SDK passes every probe
    off, _ = _paths_in_a_new_process(" True ")
    assert off == dict.fromkeys(PATHS, False)
    unknown, stderr = _paths_in_a_new_process("sometimes")
    assert unknown == on
    assert "RETRYSCOPE_SDK_PUBLIC_ONLY='sometimes' is not a boolean" in stderr


def test_this_process_runs_the_paths_the_switch_says() -> None:
    """The switch, and ``public_paths``, hold for the finished-span readers too."""
    assert _sdk._public_only(os.environ.get(_sdk.PUBLIC_ONLY_ENV)) == _sdk.PUBLIC_ONLY
    assert set(_sdk.fast_paths().values()) == {not _sdk.PUBLIC_ONLY}
    span = TracerProvider().get_tracer("t").start_span("s")
    span.end()
    fast = not _sdk.PUBLIC_ONLY
    assert (type(span) in _sdk._paths.readable_types) is fast
    assert (type(span) in _sdk._paths.plain_types) is fast
    assert _sdk.ended_fields(span)[:3] == (span.context, span.start_time, span.end_time)
    with _sdk.public_paths():
        assert not any(_sdk.fast_paths().values())
        assert type(span) not in _sdk._paths.readable_types
        assert type(span) not in _sdk._paths.plain_types
        assert _sdk.finished_attributes(span) == span.attributes
    assert set(_sdk.fast_paths().values()) == {not _sdk.PUBLIC_ONLY}


def test_public_only_reads_booleans(caplog: pytest.LogCaptureFixture) -> None:
    assert [_sdk._public_only(v) for v in ("1", "True", "yes", "ON")] == [True] * 4
    assert [_sdk._public_only(v) for v in (None, "", "0", "no", "off", "False")] == [False] * 6
    with caplog.at_level(logging.WARNING, logger=_sdk.__name__):
        assert not _sdk._public_only("2")
    assert "is not a boolean" in caplog.text


def test_this_sdk_passes_every_probe() -> None:
    probed = _sdk._probe()
    assert all(getattr(probed, name) for name in PATHS)


def _swap_fields(patch: pytest.MonkeyPatch) -> None:
    swapped = ["_parent", "_context", *(f"_{name}" for name in _sdk._FIELDS[2:])]
    patch.setattr(_sdk, "_PRIVATE_FIELDS", operator.attrgetter(*swapped))


class _ElsewhereAttributes(_sdk.BoundedAttributes):
    """Keeps its items in another kind of mapping."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dict = collections.OrderedDict(self._dict)


@pytest.mark.parametrize(
    ("change", "off"),
    [
        (_swap_fields, ["plain_types"]),
        (lambda p: p.setattr(_sdk, "_fast_write", lambda *a, **k: False), ["span_type"]),
        # (the SDK's own spans keep the SDK's class: stamping is off too)
        (lambda p: p.setattr(_sdk, "BoundedAttributes", _ElsewhereAttributes), PATHS[::2]),
    ],
)
def test_a_probe_turns_its_shortcut_off_when_the_structure_differs(
    monkeypatch: pytest.MonkeyPatch, change: Callable[[pytest.MonkeyPatch], None], off: list[str]
) -> None:
    change(monkeypatch)
    probed = _sdk._probe()
    assert [name for name in PATHS if not getattr(probed, name)] == off


def _rows(directory: Path) -> list[tuple[Any, ...]]:
    """Every row of the data set, ids replaced by their row's content (span ids and the
    loopback server's port differ from run to run), sorted."""
    tables = [pq.read_table(f) for f in sorted(directory.rglob("*.parquet"))]
    table = pa.concat_tables(tables, promote_options="default")
    ids = {"trace_id", "span_id", "parent_span_id"}
    rows = table.to_pylist()

    def content(row: dict[str, Any]) -> str:
        text = repr([(k, v) for k, v in row.items() if k not in ids])
        return re.sub(r"127\.0\.0\.1:\d+|'server\.port', '\d+'", "<server>", text)

    by_id = {row["span_id"]: content(row) for row in rows}
    return sorted(
        (content(row), by_id.get(row["parent_span_id"]) if row["parent_span_id"] else None)
        for row in rows
    )


def test_the_pipeline_writes_the_same_rows_and_report_on_both_paths(tmp_path: Path) -> None:
    """The demo's five scenarios (real httpx + instrumentation, stamping, batch processor,
    exporter), once with the shortcuts and once on the public paths."""
    generate(tmp_path / "fast", 40, seed=7, progress=False)
    with _sdk.public_paths():
        generate(tmp_path / "public", 40, seed=7, progress=False)
    fast, public = _rows(tmp_path / "fast"), _rows(tmp_path / "public")
    assert len(fast) > 150
    assert fast == public
    reports = []
    for run in ("fast", "public"):
        con, _ = connect(tmp_path / run)
        reports.append(build_report(con))
    assert reports[0] == reports[1]
    assert reports[0]["logical_requests"] == 40


_SDK_PRIVATE_NAMES = frozenset(
    {
        *(f"_{name}" for name in _sdk._FIELDS),
        "_attributes",
        "_dict",
        "_dq",
        "_immutable",
        "_lock",
        "_queue",
        "_batch_processor",
        "_status_code",
        "_description",
    }
)


def _private_otel_uses(path: Path) -> list[str]:
    """Underscore imports from ``opentelemetry`` and reads of the SDK-private attribute
    names on anything but ``self`` in one source file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("opentelemetry"):
            parts = (node.module or "").split(".") + [alias.name for alias in node.names]
            found += [f"{node.lineno}: import {node.module}" for p in parts if p.startswith("_")]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in _SDK_PRIVATE_NAMES
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        ):
            found.append(f"{node.lineno}: .{node.attr}")
    return [f"{path}:{where}" for where in dict.fromkeys(found)]


def test_no_module_but_sdk_reaches_into_opentelemetry() -> None:
    """Only ``_sdk`` names private structure."""
    root = Path(__file__).resolve().parents[1]
    owners = [root / "instrumentation" / "_sdk.py"]
    sources = [
        path
        for folder in (
            "instrumentation",
            "control",
            "analytics",
            "dashboards",
            "retryscope",
            "bench",
        )
        for path in sorted((root / folder).rglob("*.py"))
        if path not in owners
    ]
    assert len(sources) > 50
    assert [use for path in sources for use in _private_otel_uses(path)] == []
    assert all(_private_otel_uses(path) for path in owners)  # the check sees them
