"""``retryscope ingest``: OTLP files written by an OpenTelemetry Collector → span Parquet.

Reads, from files or directory trees (hidden files skipped):

* OTLP JSON Lines — one ``TracesData``/``ExportTraceServiceRequest`` per line, as the
  Collector's file exporter writes them (rotated names like ``traces-2026-…​.json`` too);
* single OTLP JSON documents (one object, possibly pretty-printed);
* OTLP protobuf — one ``ExportTraceServiceRequest`` per file (awss3exporter's ``otlp_proto``
  marshaler) or 4-byte length-prefixed messages (the file exporter's ``proto`` format, and
  its ``compression: zstd`` output, where each message is a zstd frame);
* any of these gzip- or zstd-compressed — all recognised by content, never by name.

Each source is read once: the digest recorded in the ledger is of exactly the bytes decoded
(:mod:`._ledger`). A file that grew since it was ingested (the same first bytes, found by
content even under a new name) is read on from where the last run stopped; a file rewritten
in place is named and read whole again; a file that changed while it was read (shrank, or
was modified at the same size) is named, its rows removed, and it is not recorded. Every
source is isolated: one that vanished, loops, cannot be read or is not a regular file is
named and skipped, and the run goes on. Bounds (:class:`IngestLimits`) keep memory and time
finite on any input; what was read before a bound was hit is kept.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final

from retryscope.instrumentation.export._config import ExportConfig
from retryscope.instrumentation.ingest._decode_units import SourceWriter, Units
from retryscope.instrumentation.ingest._framing import (
    BadLength,
    Frame,
    Lines,
    LongLine,
    Reader,
    Tail,
)
from retryscope.instrumentation.ingest._json_depth import deep_lines
from retryscope.instrumentation.ingest._ledger import (
    HEAD_BYTES,
    LEDGER_DIR,
    LEDGER_FILE,
    RESUMABLE,
    Ledger,
    Part,
    exclusive,
    head_digest,
    new_part_id,
)
from retryscope.instrumentation.ingest._source import (
    GZIP_MAGIC,
    ZSTD_MAGIC,
    Budget,
    Identity,
    Logical,
    SourceError,
    frame_payload,
    open_source,
)
from retryscope.instrumentation.ingest.limits import IngestLimits, LimitExceeded

__all__ = ["LEDGER_DIR", "LEDGER_FILE", "IngestSummary", "ingest", "iter_sources"]

_COMPRESSED_SUFFIXES: Final = (".gz", ".zst", ".zstd")
_JSON_SUFFIXES: Final = (".json", ".jsonl", ".ndjson")
_FAMILY: Final = {
    "json-lines": "json",
    "json-document": "json",
    "frames": "frames",
    "proto-message": "proto-message",
}
"""The format a source is detected as, for each format a part is recorded as."""
_PROBLEMS_PER_SOURCE: Final = 100
"""Problems named per source; the rest are counted in one line (a file of garbage lines
must not fill memory with messages)."""


@dataclass(slots=True)
class IngestSummary:
    """What one ingest run did."""

    sources: int = 0
    spans_read: int = 0
    rows_written: int = 0
    files_written: int = 0
    skipped: int = 0
    """Malformed or over-bound lines, documents and messages skipped."""
    duplicate_sources: int = 0
    """Sources with nothing new since they were ingested (the same content, or a copy)."""
    resumed_sources: int = 0
    """Grown sources of which only the part after the last run's end was read."""
    rewritten_sources: int = 0
    """Sources rewritten in place since they were ingested: read whole again."""
    unfinished_sources: int = 0
    """Sources ending in an unfinished unit (a line without its newline, a truncated frame
    or compressed stream): read on from there when they grow."""
    failed_sources: int = 0
    """Sources named and skipped whole: vanished, unreadable, not a regular file, a symlink
    loop, or changed while being read."""
    withheld_content: int = 0
    """Prompt and completion values written as the redaction mark (``keep_content`` off)."""
    problems: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """1 when anything was skipped, else 0."""
        return 1 if self.skipped or self.failed_sources else 0

    def format(self) -> str:
        return (
            f"sources: {self.sources}, spans read: {self.spans_read}, rows written: "
            f"{self.rows_written} in {self.files_written} files, skipped: {self.skipped}, "
            f"duplicates: {self.duplicate_sources} sources, resumed: {self.resumed_sources}, "
            f"rewritten: {self.rewritten_sources}, unfinished: {self.unfinished_sources}, "
            f"failed: {self.failed_sources}, content values withheld: {self.withheld_content}"
        )


def iter_sources(
    paths: Iterable[str | os.PathLike[str]], report: Callable[[str], None] | None = None
) -> list[Path]:
    """Files named, and visible files under directories named, in a stable order. A name
    that does not exist at all raises ``FileNotFoundError``; directories that cannot be
    listed and symbolic links to directories (not followed) are reported."""
    found: list[Path] = []
    tell = report or (lambda _message: None)
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for dirpath, dirnames, filenames in os.walk(
                path, onerror=lambda exc: tell(f"{exc.filename}: cannot be listed: {exc.strerror}")
            ):
                kept = []
                for d in sorted(dirnames):
                    if d.startswith("."):
                        continue
                    if os.path.islink(os.path.join(dirpath, d)):
                        tell(
                            f"{os.path.join(dirpath, d)}: a symbolic link to a directory, not "
                            "followed (name it to read it)"
                        )
                    else:
                        kept.append(d)
                dirnames[:] = kept
                found.extend(Path(dirpath) / n for n in sorted(filenames) if not n.startswith("."))
        elif os.path.lexists(path):
            found.append(path)  # a file, or a link that will be named when it is opened
        else:
            raise FileNotFoundError(f"no such file or directory: {os.fspath(raw)!r}")
    return found


class _Progress:
    """A one-line progress bar on stderr, shown only on a terminal for runs over 2 s."""

    def __init__(self, total_bytes: int, stream: IO[str] = sys.stderr) -> None:
        self.total = max(total_bytes, 1)
        self.stream = stream
        self.enabled = stream.isatty()
        self.started = time.monotonic()
        self.shown = False

    def update(self, done_bytes: int, files: int, total_files: int) -> None:
        if not self.enabled or time.monotonic() - self.started < 2:
            return
        width = 30
        filled = int(width * min(done_bytes / self.total, 1.0))
        self.stream.write(
            f"\ringest [{'#' * filled}{'.' * (width - filled)}] {files}/{total_files} files, "
            f"{done_bytes / 1e6:.1f}/{self.total / 1e6:.1f} MB"
        )
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _remove_leftovers(out: Path, known: set[str]) -> None:
    """Files of parts never recorded: left by a run interrupted before its record."""
    if out.is_dir():
        for path in out.rglob("ingest-*.parquet"):
            parts = path.name.split("-")
            if len(parts) > 2 and parts[1] not in known:
                path.unlink(missing_ok=True)


def ingest(
    sources: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    config: ExportConfig | None = None,
    limits: IngestLimits | None = None,
    report: Callable[[str], None] | None = None,
    progress: IO[str] | None = None,
) -> IngestSummary:
    """Ingest OTLP trace files from ``sources`` into the Parquet data set at ``out``.

    ``report`` receives each problem (``file:line: reason``) as it is found; ``progress``
    (a terminal stream) shows a progress bar on long runs. Raises ``FileNotFoundError`` for
    a named source that does not exist and ``OSError`` when the output cannot be written.
    """
    out_dir = Path(out)
    cfg = (config or ExportConfig()).with_overrides(directory=out_dir)
    summary = IngestSummary()

    def problem(message: str) -> None:
        summary.problems.append(message)
        if report is not None:
            report(message)

    files = iter_sources(sources, problem)
    out_real = os.path.realpath(out_dir) + os.sep
    files = [f for f in files if not os.path.realpath(f).startswith(out_real)]
    with exclusive(out_dir, cfg):
        ledger = Ledger(out_dir, cfg, problem)
        _remove_leftovers(out_dir, ledger.known_prefixes())
        run = _Run(cfg, limits or IngestLimits(), ledger, summary, problem)
        bar = _Progress(sum(_size(f) for f in files), progress or sys.stderr)
        done_bytes = 0
        for index, path in enumerate(files, 1):
            summary.sources += 1
            run.source(path)
            done_bytes += _size(path)
            bar.update(done_bytes, index, len(files))
        bar.close()
    return summary


class _Restart(Exception):
    """Read the source again from its start: resuming after ``after`` (or from 0)."""

    def __init__(self, after: Part | None) -> None:
        self.after = after


class _ChangedWhileRead(Exception):
    pass


@dataclass
class _Run:
    config: ExportConfig
    limits: IngestLimits
    ledger: Ledger
    summary: IngestSummary
    problem: Callable[[str], None]

    def source(self, path: Path) -> None:
        name = os.fspath(path)
        told = 0

        def capped(message: str) -> None:
            nonlocal told
            told += 1
            if told <= _PROBLEMS_PER_SOURCE:
                self.problem(message)

        try:
            try:
                self._read(path, name, capped, after=None, fresh=False)
            except _Restart as restart:
                self._read(path, name, capped, after=restart.after, fresh=True)
        except SourceError as exc:
            self.summary.failed_sources += 1
            self.problem(str(exc))
        except _ChangedWhileRead as exc:
            self.summary.failed_sources += 1
            self.problem(f"{name}: {exc}: nothing of it kept; it is read again on the next run")
        except OSError:
            raise  # the output cannot be written: the run stops, sources done so far stay
        except Exception as exc:  # one source never ends the run
            self.summary.failed_sources += 1
            self.problem(f"{name}: skipped: {type(exc).__name__}: {exc}")
        if told > _PROBLEMS_PER_SOURCE:
            self.problem(f"{name}: {told - _PROBLEMS_PER_SOURCE} more problems not shown")

    def _read(
        self,
        path: Path,
        name: str,
        report: Callable[[str], None],
        *,
        after: Part | None,
        fresh: bool,
    ) -> None:
        raw, identity = open_source(path)
        with raw:
            budget = Budget(self.limits)
            try:
                reader = Reader(Logical(raw, budget))
                head = reader.head(HEAD_BYTES)
            except (OSError, ValueError, LimitExceeded) as exc:
                raise SourceError(f"{name}: cannot be read: {exc}") from None
            detected = _detect(head, path, self.limits)
            tip = self._match(reader, head, name, identity, detected, after=after, fresh=fresh)
            part = new_part_id()
            writer = SourceWriter(self.config, part)
            units = Units(name, writer, self.limits, report)
            fmt = tip.format if tip is not None else detected
            start = reader.offset
            fmt, unfinished = self._decode(fmt, reader, units, budget)
            writer.flush()
            self._check_unchanged(raw, identity, reader, writer)
        summary = self.summary
        summary.spans_read += units.spans
        summary.skipped += units.skipped
        summary.rows_written += writer.rows
        summary.files_written += writer.files
        summary.withheld_content += writer.withheld_content
        if unfinished:
            summary.unfinished_sources += 1
            report(f"{name}: {unfinished}")
        if tip is not None and reader.offset == start:
            summary.duplicate_sources += 1
            return
        if tip is not None:
            summary.resumed_sources += 1
        if reader.offset == 0:
            return  # nothing taken: nothing to recognise it by next time
        self.ledger.record(
            Part(
                part=part,
                source=name,
                device=identity.device,
                inode=identity.inode,
                format=fmt,
                start=start,
                end=reader.offset,
                unit=reader.unit,
                sha256=reader.digest(),
                head=head_digest(head),
                complete=reader.at_end(),
                spans=units.spans,
                files=writer.files,
                resumes=tip.part if tip is not None else None,
                ingested_at=Ledger.now(),
            )
        )

    def _match(
        self,
        reader: Reader,
        head: bytes,
        name: str,
        identity: Identity,
        detected: str,
        *,
        after: Part | None,
        fresh: bool,
    ) -> Part | None:
        """The recorded tip this content continues (taken up to its end), or None (nothing
        taken). The first pass checks every candidate in one read; when the best one is not
        where that read stopped, :class:`_Restart` asks for a second pass."""
        if after is not None:
            if not reader.skip_to(after.end) or reader.digest() != after.sha256:
                raise _ChangedWhileRead("changed while it was read (its start differs)")
            return after
        if not fresh:
            # a recorded part continues only content of its own format (a part of blank
            # lines is no prefix of a protobuf message that starts with the same byte)
            family = _FAMILY.get(detected, detected)
            candidates = [
                t for t in self.ledger.candidates(head) if _FAMILY.get(t.format) == family
            ]
            best: Part | None = None
            for tip in candidates:
                if not reader.skip_to(tip.end):
                    break
                if reader.digest() == tip.sha256:
                    best = tip
            if best is not None and best.format not in RESUMABLE and not reader.at_end():
                best = None  # one whole document or message that grew: read it whole again
            if best is not None and reader.offset == best.end:
                return best
            if reader.offset > 0:
                raise _Restart(best)
        if self.ledger.tip_of(name, identity) is not None:
            self.summary.rewritten_sources += 1
            self.problem(
                f"{name}: rewritten in place since it was ingested (its start no longer "
                "matches what was read): read whole again; the audit model keeps one copy "
                "of spans seen twice"
            )
        return None

    def _decode(
        self, fmt: str, reader: Reader, units: Units, budget: Budget
    ) -> tuple[str, str | None]:
        """Decode the rest of the source: (the format it was read as, why its end is
        unfinished if it is)."""
        try:
            if fmt == "json":
                document = _is_one_document(reader, self.limits)
                fmt = "json-document" if document else "json-lines"
            if fmt == "json-document":
                units.json_text(reader.take(len(reader.buffer)), None)
                return fmt, None
            if fmt == "json-lines":
                return fmt, _json_lines(reader, units, self.limits)
            if fmt == "frames":
                return fmt, _frames(reader, units, budget, self.limits)
            if fmt == "proto-message":
                body = reader.whole(self.limits.max_message_bytes)
                if body is None:
                    units.problem(None, _too_long(self.limits, "protobuf message"))
                else:
                    units.proto(body, None)
                return fmt, None
            if fmt != "empty":
                units.problem(
                    None,
                    "not OTLP trace data (neither JSON, a protobuf message nor "
                    "length-prefixed messages)",
                )
        except LimitExceeded as exc:
            units.problem(None, f"{exc}: the rest of it skipped (spans before are kept)")
        except (OSError, ValueError) as exc:
            units.problem(
                None, f"unreadable after {reader.offset} bytes: {type(exc).__name__}: {exc}"
            )
        return fmt, None

    def _check_unchanged(
        self, raw: IO[bytes], before: Identity, reader: Reader, writer: SourceWriter
    ) -> None:
        """A source that shrank, or was modified at the same size, while it was read may
        have been read half old and half new: its rows are removed."""
        after = Identity.of(raw.fileno())
        read = reader.logical.raw_bytes
        shrank = after.size < before.size or after.size < read
        rewritten = after.size == before.size and after.mtime_ns != before.mtime_ns
        if shrank or rewritten:
            for written in writer.paths:
                Path(written).unlink(missing_ok=True)
            how = f"shrank to {after.size} bytes" if shrank else "was modified at the same size"
            raise _ChangedWhileRead(f"{how} while it was read")


def _too_long(limits: IngestLimits, what: str) -> str:
    return (
        f"{what} longer than {limits.max_message_bytes} bytes "
        f"({IngestLimits.named('max_message_bytes')}); skipped"
    )


def _named_json(path: Path) -> bool:
    """A ``.json``/``.jsonl``/``.ndjson`` name (compressed or not): a source that is not
    recognisably anything else is read as JSON lines, so a broken first line is only that
    line."""
    suffixes = [x for x in path.suffixes if x not in _COMPRESSED_SUFFIXES]
    return bool(suffixes) and suffixes[-1] in _JSON_SUFFIXES


def _is_text(head: bytes) -> bool:
    """UTF-8 without NUL bytes (a cut multi-byte character at the end allowed)."""
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3 and exc.reason == "unexpected end of data"
    return True


def _detect(head: bytes, path: Path, limits: IngestLimits) -> str:
    """The format of a source from its first (decompressed) bytes; the name only breaks
    the tie for a text file whose first line is broken."""
    if not head:
        return "empty"
    length = int.from_bytes(head[:4], "big") if len(head) >= 4 else 0
    plausible = 0 < length <= limits.max_message_bytes
    if plausible and (head[4:8] == ZSTD_MAGIC or head[4:6] == GZIP_MAGIC):
        return "frames"  # the file exporter's compression: zstd
    text = _is_text(head)
    if head.lstrip(b" \t\r\n")[:1] == b"{" and text:
        return "json"
    if head[:1] == b"\x0a" and not text:
        return "proto-message"  # field 1 (resource_spans) of ExportTraceServiceRequest
    if _named_json(path):
        return "json"
    if plausible and head[4:5] in (b"\x0a", b"{"):
        return "frames"
    return "unknown"


def _is_one_document(reader: Reader, limits: IngestLimits) -> bool:
    """Whether a JSON source is one document spanning lines (pretty-printed), all of it
    buffered: its first line is not a complete object by itself, more lines follow, and
    the whole source is at most ``max_message_bytes`` and parses as one value (or is too
    deep to try). A source of one line is a JSON line, reported by its number."""
    import json

    cap = limits.max_message_bytes
    reader.fill(min(cap, 1 << 20))
    cut = reader.buffer.find(b"\n")
    first = bytes(reader.buffer[: cut if cut >= 0 else len(reader.buffer)]).strip()
    if not first or first.endswith(b"}") or cut < 0 or not reader.buffer[cut:].strip():
        return False
    if reader.fill(cap + 1):
        return False
    flat = bytes(reader.buffer).replace(b"\n", b" ")
    if deep_lines(flat, limits.max_json_depth):
        return True  # named as too deep when decoded
    try:
        json.loads(flat)
    except (ValueError, RecursionError):
        return False
    return True


def _json_lines(reader: Reader, units: Units, limits: IngestLimits) -> str | None:
    for item in reader.json_lines(limits.max_message_bytes):
        if isinstance(item, Lines):
            units.lines(item.first, item.data)
        elif isinstance(item, LongLine):
            units.problem(item.number, _too_long(limits, "line"))
        else:
            return _tail(reader, units, item, limits)
    return _stream_end(reader, units)


def _tail(reader: Reader, units: Units, tail: Tail, limits: IngestLimits) -> str | None:
    """The last line, without its newline: taken when it is complete JSON (a file that
    does not end with a newline), else left for the next run (a line still being written)."""
    import json

    if reader.stopped is not None:
        return _stream_end(reader, units)  # cut by a bound, not unfinished
    text = tail.data.strip()
    complete = not text
    if text and not deep_lines(text, limits.max_json_depth):
        try:
            json.loads(text)
            complete = True
        except (ValueError, RecursionError):
            complete = False
    if not complete:
        where = f"line {tail.number} ({len(tail.data)} bytes) has no newline yet"
        return f"{where}: left for the next run{_truncated(reader)}"
    reader.take(len(tail.data))
    reader.unit += 1
    if text:
        units.lines(tail.number, tail.data + b"\n")
    return _stream_end(reader, units)


def _truncated(reader: Reader) -> str:
    return f" ({reader.truncated})" if reader.truncated else ""


def _stream_end(reader: Reader, units: Units) -> str | None:
    """At the end of the data: a bound that cut it is a problem; a compressed stream that
    ends inside a frame is unfinished (returned)."""
    if reader.stopped is not None:
        units.problem(None, f"{reader.stopped}: the rest of it skipped (spans before are kept)")
        return None
    if reader.truncated:
        return f"{reader.truncated} after {reader.offset} bytes: complete units before it kept"
    return None


def _frames(reader: Reader, units: Units, budget: Budget, limits: IngestLimits) -> str | None:
    for item in reader.frames(limits.max_message_bytes):
        if isinstance(item, Frame):
            where = f"message {item.number}"
            try:
                payload = frame_payload(item.payload, budget)
            except ValueError as exc:
                units.problem(where, str(exc))
                continue
            if payload.lstrip(b" \t\r\n")[:1] == b"{":
                units.json_text(payload, where)
            else:
                units.proto(payload, where)
        elif isinstance(item, BadLength):
            units.problem(
                f"message {item.number}",
                f"length prefix {item.length} is 0 or more than {limits.max_message_bytes} "
                f"({IngestLimits.named('max_message_bytes')}): not length-prefixed OTLP from "
                "here on; the rest skipped",
            )
            return None
        elif reader.stopped is not None:
            return _stream_end(reader, units)
        else:
            return (
                f"message {item.number} is truncated ({len(item.data)} bytes so far): left "
                f"for the next run, complete messages before it kept{_truncated(reader)}"
            )
    return _stream_end(reader, units)
