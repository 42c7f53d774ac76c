"""Fork tests' shared pieces: a parent script's helpers (a thread holding locks across
the fork, a bounded wait for the child), and running such a script in its own interpreter
(only its own threads are forked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

FORK_HELPERS = r"""
def held_by_another_thread(locks):
    # another thread takes ``locks`` and holds them; the returned function lets them go
    held, release = threading.Event(), threading.Event()
    def holding():
        for lock in locks:
            lock.acquire()
        held.set()
        release.wait()
        for lock in reversed(locks):
            lock.release()
    thread = threading.Thread(target=holding)
    thread.start()
    held.wait()
    def let_go():
        release.set()
        thread.join()
    return let_go

def wait_for_child(pid, timeout):
    # the child's exit code, or "hung" (then killed) when it is not done within timeout s
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hung"
"""
"""Python source defining ``held_by_another_thread(locks)`` and ``wait_for_child(pid,
timeout)`` (the script imports ``os``, ``threading`` and ``time`` before it)."""


def run_parent(script: str, tmp_path: Path, *args: str, timeout: float) -> dict[str, Any]:
    """Run ``script`` with ``args`` in a fresh interpreter; the JSON object its last line
    prints. Fails with the script's stderr when it exits non-zero."""
    path = tmp_path / "parent.py"
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, str(path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
