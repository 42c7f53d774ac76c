"""Start the Streamlit audit UI as a subprocess bound to a local address."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType

from retryscope._environment import CACHE_ENV, MEMORY_LIMIT_ENV, MODEL_ENV
from retryscope.analytics import new_connection

APP = Path(__file__).with_name("app.py")
DATA_ENV = "RETRYSCOPE_DATA"
TRACE_URL_ENV = "RETRYSCOPE_TRACE_URL"
"""A URL template with ``{trace_id}`` linking a request to a tracing backend."""


def streamlit_command(port: int, address: str) -> list[str]:
    """The command line that serves the app (headless, no usage statistics, no error
    details in the browser)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.address",
        address,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--global.developmentMode",
        "false",
        "--client.toolbarMode",
        "minimal",
        # an error the app's boundary did not catch (a widget callback's) shows no
        # message or traceback: they may hold server paths
        "--client.showErrorDetails",
        "none",
    ]


def serve(
    path: str,
    *,
    port: int = 8501,
    address: str = "127.0.0.1",
    trace_url: str | None = None,
    model_cache: str | None = None,
    memory_limit: str | None = None,
    model: str | None = None,
) -> int:
    """Serve the UI over the data set at ``path`` until interrupted; returns the exit code.
    ``trace_url`` (else ``$RETRYSCOPE_TRACE_URL``) links requests to a tracing backend;
    ``model_cache`` (else ``$RETRYSCOPE_MODEL_CACHE``) caches the built audit model;
    ``memory_limit`` (else ``$RETRYSCOPE_MEMORY_LIMIT``) caps DuckDB's memory; ``model``
    (else ``$RETRYSCOPE_MODEL``) is a built model directory read instead of building one."""
    if not Path(path).exists():
        raise FileNotFoundError(f"no data directory or file at {path}")
    if not 0 < port < 65536:
        raise ValueError(f"port {port} is out of range")
    if trace_url is not None and "{trace_id}" not in trace_url:
        raise ValueError(f"trace URL template {trace_url!r} lacks the {{trace_id}} placeholder")
    if memory_limit is not None:
        new_connection(memory_limit=memory_limit).close()  # a bad size is named here
    env = dict(os.environ, **{DATA_ENV: str(Path(path).resolve())})
    if trace_url is not None:
        env[TRACE_URL_ENV] = trace_url
    if model_cache is not None:
        env[CACHE_ENV] = str(Path(model_cache).resolve())
    if memory_limit is not None:
        env[MEMORY_LIMIT_ENV] = memory_limit
    if model is not None:
        from retryscope.analytics.distributed import Location, read_manifest

        location = Location(model)
        read_manifest(location)  # no model there is named here, not in the browser
        env[MODEL_ENV] = location.uri
    print(f"retryscope UI on http://{address}:{port}  (data: {path}; Ctrl-C stops)", flush=True)
    watcher = None
    if model_cache is not None and model is None:
        watcher = keep_current(path, env)
    proc = subprocess.Popen(streamlit_command(port, address), env=env)  # noqa: S603
    # SIGTERM (a service manager, a test harness) must stop the server too, not orphan it.
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if in_main else None
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 0
    finally:
        if watcher is not None:
            stop_process(watcher)
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def keep_current(path: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Keep the data set's cached model current in the background while the UI serves it:
    ``retryscope model PATH --watch`` in a process of its own, with the server's ``env``
    (its model cache and memory limit). A page opened while it builds shows that build's
    progress (the model's lock relays it) and then reads its model."""
    command = [sys.executable, "-m", "retryscope.cli", "model", path, "--watch"]
    return subprocess.Popen(command, env=env)  # noqa: S603


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc`` as Ctrl-C does (SIGINT), killing it if it has not stopped in 10 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
