"""What has been ingested into one output directory: ``OUT/.retryscope-ingest/ledger.jsonl``.

One line per *part*: a stretch ``start..end`` of a source's content (decompressed) that was
read, decoded and written. ``sha256`` is the digest of the content's first ``end`` bytes,
``head`` that of its first :data:`HEAD_BYTES`; ``unit`` is the number of the line or frame
that starts at ``end``. A part is recorded only after its Parquet files are in place
(``ingest-<part>-….parquet``), so a file whose part is not in the ledger was left by an
interrupted run and is removed by the next one.

A grown file is recognised by content, not by name: its first ``end`` bytes hash to a
recorded ``sha256`` (found through ``head``), and only what follows is read. That holds
when the Collector renames a file on rotation, and for a copy. The latest part of each
chain of growth is a *tip*; only tips are matched.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from retryscope._fs import make_dirs
from retryscope.instrumentation.export._config import ExportConfig
from retryscope.instrumentation.ingest._source import Identity

LEDGER_DIR: Final = ".retryscope-ingest"
LEDGER_FILE: Final = "ledger.jsonl"
LOCK_FILE: Final = "lock"
VERSION: Final = 2
HEAD_BYTES: Final = 4096
RESUMABLE: Final = frozenset({"json-lines", "frames"})
"""Formats read unit by unit: a grown file of these is read on from its recorded end. The
others (one JSON document, one protobuf message) are whole or nothing."""


def head_digest(data: bytes) -> str:
    return hashlib.sha256(data[:HEAD_BYTES]).hexdigest()


def new_part_id() -> str:
    return secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class Part:
    """One recorded part (see the module docstring)."""

    part: str
    source: str
    device: int
    inode: int
    format: str
    start: int
    end: int
    unit: int
    sha256: str
    head: str
    complete: bool
    """The content ended at ``end`` when it was read (nothing unfinished after it)."""
    spans: int
    files: int
    resumes: str | None
    """The part this one continues (the previous tip of its chain)."""
    ingested_at: str

    def record(self) -> dict[str, Any]:
        return {"v": VERSION, **asdict(self)}


class Ledger:
    """The parts recorded under one output directory, and the lock of a run writing there."""

    def __init__(self, out: Path, config: ExportConfig, warn: Callable[[str], None]) -> None:
        self.path = out / LEDGER_DIR / LEDGER_FILE
        self.config = config
        self.parts: dict[str, Part] = {}
        self.legacy: set[str] = set()
        """Output-file prefixes of an older ledger format (whole-file digests): their
        files are kept; their sources are not recognised and are read again."""
        superseded: set[str] = set()
        if self.path.is_file():
            for number, line in enumerate(self.path.read_text("utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    if entry.get("v") is None and "sha256" in entry:
                        self.legacy.add(str(entry["sha256"])[:16])
                        continue
                    entry.pop("v")
                    part = Part(**entry)
                except (ValueError, KeyError, TypeError, AttributeError):
                    raise ValueError(f"{self.path}:{number}: corrupt ingest ledger line") from None
                self.parts[part.part] = part
                if part.resumes:
                    superseded.add(part.resumes)
        if self.legacy:
            warn(
                f"{self.path}: {len(self.legacy)} entries of an older ledger format: their "
                "files are kept, their sources are read again (the audit model keeps one "
                "copy of each span)"
            )
        self.tips: dict[str, Part] = {p: x for p, x in self.parts.items() if p not in superseded}
        self._index()

    def _index(self) -> None:
        self.by_head: dict[str, list[Part]] = {}
        self.short: dict[int, list[Part]] = {}
        self.by_file: dict[tuple[str, int, int], Part] = {}
        for tip in self.tips.values():
            self._add(tip)

    def _bucket(self, tip: Part) -> list[Part]:
        if tip.end >= HEAD_BYTES:
            return self.by_head.setdefault(tip.head, [])
        return self.short.setdefault(tip.end, [])

    def _add(self, tip: Part) -> None:
        self.tips[tip.part] = tip
        self._bucket(tip).append(tip)
        self.by_file[(tip.source, tip.device, tip.inode)] = tip

    def _remove(self, tip: Part) -> None:
        self.tips.pop(tip.part, None)
        bucket = self._bucket(tip)
        bucket[:] = [t for t in bucket if t.part != tip.part]
        key = (tip.source, tip.device, tip.inode)
        if self.by_file.get(key) is tip:
            del self.by_file[key]

    def known_prefixes(self) -> set[str]:
        """Output-file prefixes (part ids) whose files are recorded."""
        return set(self.parts) | self.legacy

    def candidates(self, head: bytes) -> list[Part]:
        """Tips that content starting with ``head`` (its first bytes, up to
        :data:`HEAD_BYTES`) may continue, by ascending ``end``."""
        found = list(self.by_head.get(head_digest(head), [])) if len(head) >= HEAD_BYTES else []
        for end, tips in self.short.items():
            if end <= len(head):
                digest = hashlib.sha256(head[:end]).hexdigest()
                found += [t for t in tips if t.sha256 == digest]
        return sorted(found, key=lambda t: t.end)

    def tip_of(self, source: str, identity: Identity) -> Part | None:
        """The tip last recorded for this very file (same path, device and inode)."""
        return self.by_file.get((source, identity.device, identity.inode))

    def record(self, part: Part) -> None:
        """Append ``part`` (after its files are in place), durably."""
        make_dirs(self.path.parent, self.config.dir_mode)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, self.config.file_mode)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(json.dumps(part.record(), sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.parts[part.part] = part
        previous = self.tips.get(part.resumes) if part.resumes else None
        if previous is not None:
            self._remove(previous)
        self._add(part)

    @staticmethod
    def now() -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@contextlib.contextmanager
def exclusive(out: Path, config: ExportConfig) -> Iterator[None]:
    """Hold the output directory's ingest lock; a second run into it is an error."""
    directory = out / LEDGER_DIR
    make_dirs(directory, config.dir_mode)
    fd = os.open(directory / LOCK_FILE, os.O_WRONLY | os.O_CREAT, config.file_mode)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OSError(f"{out}: another retryscope ingest is writing into it") from None
        yield
    finally:
        os.close(fd)
