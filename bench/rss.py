"""Peak resident memory of the current process, measured so that a child's figure is its own."""

from __future__ import annotations

import resource
import sys
from pathlib import Path

_STATUS = Path("/proc/self/status")


def peak_rss_bytes() -> int:
    """This process's resident high-water mark in bytes.

    Linux's ``VmHWM`` belongs to the address space and starts again at ``exec``; ``ru_maxrss``
    keeps the peak of the process image before the exec, which for a child started by
    ``subprocess`` (vfork + exec) is the *parent's* resident size. ``ru_maxrss`` (KiB on
    Linux, bytes on macOS) is the fallback where ``/proc`` is absent.
    """
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024
