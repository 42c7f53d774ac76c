"""Whether a segment's writer is alive, told by a lock it holds rather than by its pid.

A pid says nothing once its process is gone: the next process may get it (a container's
writer is PID 1 each time it starts). So a writer holds an exclusive ``flock`` on a lock
file beside its segments, ``<host>-<pid>-<token>.lock``, from before its first segment until
it closes; the kernel drops the lock when the process dies, whatever process gets the pid
next. A recovery takes the same lock, without waiting, before it touches that writer's
segments: taken, the writer is dead and no other recovery works on them until it is
released; refused, a live writer (or a recovery at work) holds them.

``flock`` locks belong to the open file, so a second open in the same process is refused
as well (two exporters of one process), and a forked child's copy of the descriptor shares
the parent's lock: the child closes its copy (closing never releases the parent's lock).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Final

LOCK_SUFFIX: Final = ".lock"


def hold(path: Path, mode: int) -> int:
    """Create and lock ``path`` for this writer's life; the descriptor to keep open.

    A recovery's sweep may remove a lock file it could lock between its creation and this
    lock (it holds it only for that moment): then it is made again.
    """
    for _ in range(3):
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, mode)  # not open for writing: a
        # read-only remount of the file system is never refused for it
        try:
            os.fchmod(fd, mode)  # exact mode whatever the umask
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits out such a sweep, never a writer
            if os.fstat(fd).st_nlink:
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(f"{path}: removed again and again while being locked")


def take(path: Path) -> int | None:
    """The descriptor of ``path`` locked by this process, or None while another open of it
    holds the lock (its writer is alive, or a recovery works on its segments). Raises
    ``FileNotFoundError`` when there is no lock file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd
