"""Directories made with an exact mode, shared by the writer, the ingest and the model."""

from __future__ import annotations

import os
from pathlib import Path


def make_dirs(path: Path, mode: int) -> None:
    """Create ``path`` and missing parents with exactly ``mode`` (existing ones are left).

    ``os.makedirs`` applies the process umask to the mode; each directory made here is
    ``chmod``-ed to it instead. A directory a concurrent writer made first is left as it is.
    """
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue  # a concurrent writer made it
        os.chmod(directory, mode)
