"""The core distribution: recording and export need none of the extras.

Real interpreter processes. One checks what importing the public API loads. The others run
with every optional dependency made unimportable (a meta-path finder that refuses them, as an
interpreter without them installed would): the README's quick start writes real Parquet, and
each CLI command that needs an extra names it, and the missing module, and exits 2 without a
traceback. Installing into a fresh venv is not done here (tests download nothing).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from retryscope._extras import MissingExtraError, extra_needed

ROOT = Path(__file__).resolve().parents[1]
EXTRAS: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "optional-dependencies"
]

OPTIONAL = (
    "duckdb",
    "xxhash",
    "streamlit",
    "altair",
    "pandas",
    "httpx",
    "httpx2",
    "urllib3",
    "aiohttp",
    "botocore",
    "boto3",
    "openai",
    "anthropic",
    "litellm",
    "wrapt",
    "tenacity",
    "stamina",
    "requests",
    "zstandard",
    "s3fs",
    "google.protobuf",
    "opentelemetry.proto",
    "opentelemetry.exporter",
    "opentelemetry.instrumentation",
)
"""Modules of the extras' distributions (import names): the core must work without any."""

ABSENT = (*OPTIONAL, "mypy_extensions")
"""What the core runs without: the extras, and mypy's extensions (a development tool)."""

UI_ONLY = ("streamlit", "altair", "pandas")

RUNNER = """
import importlib.abc
import runpy
import sys

BLOCKED = tuple(sys.argv[1].split(","))
loaded = [m for m in sys.modules if m.startswith(BLOCKED)]
assert not loaded, f"already imported at start-up: {loaded}"


class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
if sys.argv[2] == "-m":
    sys.argv = [sys.argv[3], *sys.argv[4:]]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
"""

QUICK_START = """
import sys
import time

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import retryscope
from retryscope import AttemptStampingProcessor, ParquetSpanExporter

exporter = ParquetSpanExporter(sys.argv[1])
provider = TracerProvider()
provider.add_span_processor(AttemptStampingProcessor())
provider.add_span_processor(BatchSpanProcessor(exporter))
trace.set_tracer_provider(provider)
client = trace.get_tracer("some.http.client")

with retryscope.logical_request(
    operation="chat",
    tenant="acme",
    idempotency_key="order-42",
    request={"messages": [{"role": "user", "content": "hi"}]},
    deadline=time.time_ns() + 30 * 10**9,
    retry_owner="harness",
) as req:
    with req.attempt(route="primary", route_release="model@2026-10", layer="harness") as a:
        a.set_cost(reserved=2_000, actual=0, currency="USD")
        with client.start_as_current_span("POST /v1/chat"):
            pass
        a.set_outcome("retryable", "rate_limited")
    with req.attempt(
        route="fallback", route_release="small@2026-09", layer="harness", route_priority=1
    ) as a:
        a.set_backoff(delay_ms=400, retry_after_ms=250)
        a.set_cost(reserved=2_000, actual=1_350, currency="USD")
        a.set_outcome("success")
provider.shutdown()
"""


def _run(
    args: Sequence[str], *, cwd: Path, blocked: Sequence[str] = ABSENT
) -> subprocess.CompletedProcess[str]:
    """Run ``python RUNNER BLOCKED args...`` (a script path, or ``-m module args...``) in
    ``cwd``, in its own session: on a timeout the whole group is killed (no server left)."""
    runner = cwd / "_not_installed.py"
    runner.write_text(RUNNER)
    command = [sys.executable, str(runner), ",".join(blocked), *args]
    with subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"{command} did not finish: {err}")
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def test_importing_the_api_loads_no_extra() -> None:
    probe = (
        "import json, sys\n"
        "import retryscope, retryscope.instrumentation, retryscope.instrumentation.export\n"
        "import retryscope.cli\n"
        "retryscope.cli.build_parser()\n"
        f"optional = {OPTIONAL!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules\n"
        "    if any(m == o or m.startswith(o + '.') for o in optional))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick start run without any optional dependency; its data directory."""
    work = tmp_path_factory.mktemp("core")
    script = work / "quick_start.py"
    script.write_text(QUICK_START)
    out = work / "retryscope-data"
    done = _run([str(script), str(out)], cwd=work)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return out


def test_quick_start_writes_parquet_without_extras(quick_start: Path) -> None:
    files = sorted(p for p in quick_start.rglob("*.parquet") if not p.name.startswith("."))
    assert files
    spans = pa.concat_tables(pq.read_table(f) for f in files)
    rows = spans.to_pylist()
    by_role: dict[str, list[dict[str, object]]] = {}
    for row in rows:
        by_role.setdefault(str(row["span_role"]), []).append(row)
    (request,) = by_role["logical_request"]
    attempts = sorted(by_role["attempt"], key=lambda r: int(str(r["attempt_ordinal"])))
    assert [(a["route_id"], a["attempt_ordinal"], a["route_priority"]) for a in attempts] == [
        ("primary", 1, 0),
        ("fallback", 2, 1),
    ]
    assert [(a["outcome"], a["outcome_kind"]) for a in attempts] == [
        ("retryable", "rate_limited"),
        ("success", None),
    ]
    assert attempts[1]["cost_actual_micros"] == 1_350
    assert attempts[1]["backoff_delay_ms"] == 400
    # every span (the HTTP client's too) carries the logical request id, and no raw key
    ids = set(pc.unique(spans["logical_request_id"]).to_pylist())
    assert ids == {request["logical_request_id"]}
    assert len(rows) == 4
    assert all("order-42" not in json.dumps(row, default=str) for row in rows)


ANALYTICS_COMMANDS = [
    ["report", "{data}"],
    ["request", "{data}", "some-request-id"],
    ["findings", "{data}"],
    ["whatif", "{data}", "--max-attempts", "1"],
    ["model", "{data}"],
]


@pytest.mark.parametrize(
    ("argv", "extra", "module"),
    [
        *((argv, "analytics", "duckdb") for argv in ANALYTICS_COMMANDS),
        (["ui", "{data}", "--port", "0"], "ui", "streamlit"),
        (["ingest", "{data}", "--out", "{data}-ingested"], "ingest", "zstandard"),
        (["demo", "--no-ui", "--requests", "5", "--out", "{data}-demo"], "demo", "duckdb"),
    ],
    ids=lambda x: x[0] if isinstance(x, list) else None,
)
def test_a_command_without_its_extra_names_it(
    quick_start: Path, argv: list[str], extra: str, module: str
) -> None:
    assert extra in EXTRAS
    args = [a.format(data=quick_start) for a in argv]
    done = _run(["-m", "retryscope.cli", *args], cwd=quick_start.parent)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    command = f"retryscope {argv[0]}"
    assert done.stderr == (
        f"{command} needs the {extra} extra: pip install 'retryscope[{extra}]' "
        f"(module {module!r} is not installed)\n"
    )
    assert not done.stdout
    assert not Path(f"{quick_start}-ingested").exists()
    assert not Path(f"{quick_start}-demo").exists()


def test_ui_without_streamlit_names_the_ui_extra_before_serving(quick_start: Path) -> None:
    """With the analytics installed, only the UI's own packages missing: the parent says so
    instead of starting a server process that would fail."""
    done = _run(
        ["-m", "retryscope.cli", "ui", str(quick_start), "--port", "0"],
        blocked=UI_ONLY,
        cwd=quick_start.parent,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        "retryscope ui needs the ui extra: pip install 'retryscope[ui]' (module 'streamlit' "
    ), done.stderr
    assert "Traceback" not in done.stderr


def test_commands_of_the_core_run_without_extras(tmp_path: Path) -> None:
    """The parser and the control-plane lab need no extra."""
    done = _run(["-m", "retryscope.cli", "--help"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "report" in done.stdout
    done = _run(["-m", "retryscope.cli", "report", "--help"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "RETRYSCOPE_MODEL_CACHE" in done.stdout
    done = _run(["-m", "retryscope.cli", "lab", "--out", str(tmp_path / "lab")], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "lab").glob("*.json"))


@pytest.mark.parametrize(
    ("package", "extra"),
    [
        ("retryscope.analytics", "analytics"),
        ("retryscope.dashboards", "ui"),
        ("retryscope.instrumentation.ingest", "ingest"),
    ],
)
def test_importing_a_package_without_its_extra_names_it(
    tmp_path: Path, package: str, extra: str
) -> None:
    script = tmp_path / "imports.py"
    script.write_text(
        "import importlib, sys\n"
        "from retryscope._extras import MissingExtraError\n"
        "try:\n"
        f"    importlib.import_module({package!r})\n"
        "except MissingExtraError as exc:\n"
        "    print(exc.extra, exc.name, exc, sep='\\n')\n"
        "else:\n"
        "    sys.exit('imported without its extra')\n"
    )
    done = _run([str(script)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got_extra, module, message = done.stdout.splitlines()
    assert got_extra == extra
    assert module in OPTIONAL
    assert message == (
        f"{package} needs the {extra} extra: pip install 'retryscope[{extra}]' "
        f"(module {module!r} is not installed)"
    )


def test_a_missing_module_of_retryscope_itself_is_not_blamed_on_an_extra() -> None:
    with pytest.raises(ModuleNotFoundError) as caught, extra_needed("feature", "analytics"):
        import retryscope._no_such_module  # noqa: F401
    assert not isinstance(caught.value, MissingExtraError)
    assert caught.value.name == "retryscope._no_such_module"


def test_a_missing_third_party_module_names_the_extra() -> None:
    with pytest.raises(MissingExtraError) as caught, extra_needed("retryscope report", "ui"):
        import no_such_distribution.sub  # noqa: F401
    assert caught.value.name == "no_such_distribution"
    assert caught.value.extra == "ui"
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


def test_the_all_extra_holds_every_extra_and_dev_holds_all() -> None:
    """``spark`` (half a gigabyte of jars, a pandas < 3 pin) and ``s3`` (aiobotocore's narrow
    botocore pin) are left out of ``all``; the tests need them, so ``dev`` names them."""
    named = {name for name in EXTRAS if name not in ("all", "dev", "spark", "s3")}
    (everything,) = EXTRAS["all"]
    assert everything.startswith("retryscope[")
    assert set(everything.removeprefix("retryscope[").removesuffix("]").split(",")) == named
    assert "retryscope[all]" in EXTRAS["dev"]
    assert "retryscope[spark]" in EXTRAS["dev"]
    assert "retryscope[s3]" in EXTRAS["dev"]


def test_every_package_folder_and_its_sql_ship() -> None:
    """Every folder of the mapped trees that holds Python modules or SQL is a listed package
    (with its SQL as package data), so a wheel ships what an editable install reads."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    roots = {folder: package for package, folder in config["package-dir"].items()}
    assert set(roots) == {"retryscope", "instrumentation", "control", "analytics", "dashboards"}
    for folder, package in roots.items():
        for d in [ROOT / folder, *(p for p in (ROOT / folder).rglob("*") if p.is_dir())]:
            if "__pycache__" in d.parts or not (any(d.glob("*.py")) or any(d.glob("*.sql"))):
                continue
            name = ".".join([package, *d.relative_to(ROOT / folder).parts])
            assert name in listed, f"{d} holds code but {name} is not in [tool.setuptools] packages"
            if any(d.glob("*.sql")):
                assert "*.sql" in config["package-data"].get(name, []), (
                    f"{name}'s SQL is not shipped"
                )
