"""``retryscope ingest``: OTLP files written by an OpenTelemetry Collector → span Parquet.

Reads, from files or directory trees (hidden files skipped):

* OTLP JSON Lines — one ``TracesData``/``ExportTraceServiceRequest`` per line, as the
  Collector's file exporter writes them (rotated names like ``traces-2026-…​.json`` too);
* single OTLP JSON documents (one object, possibly pretty-printed);
* OTLP protobuf — one ``ExportTraceServiceRequest`` per file (awss3exporter's ``otlp_proto``
  marshaler) or 4-byte length-prefixed messages (the file exporter's ``proto`` format);
* any of these gzip- or zstd-compressed (detected from the content, not the name), so
  awss3exporter layouts (``year=/month=/day=/hour=/minute=`` keys, ``otlp_json`` and
  ``otlp_proto``, ``.gz``) can be synced locally and ingested as they are.

Rows are built by the same :class:`SpanColumns` as the exporter's and written by the same
partitioned, atomic writer. Ingest is idempotent: each source's SHA-256 is recorded in a
ledger (``OUT/.retryscope-ingest/ledger.jsonl``) after its files are in place, and a source
already in the ledger is skipped as a duplicate. Output files carry the source digest in
their name, so files left by an interrupted run are replaced, never duplicated. Malformed
lines are reported as ``file:line: reason`` and skipped; the rest of the file is kept.

A source is read whole at once: ingest closed (rotated) files, not the one the Collector is
still appending to, or its next version will be a different source.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final

import pyarrow as pa
from zstandard import ZstdError

from retryscope.instrumentation.export._columns import SpanColumns
from retryscope.instrumentation.export._config import ExportConfig
from retryscope.instrumentation.export._files import FileNamer, make_dirs, write_partitioned
from retryscope.instrumentation.ingest._otlp_arrow import decode_json_lines
from retryscope.instrumentation.ingest._otlp_decode import (
    OtlpFormatError,
    decode_proto,
    decode_traces,
)

LEDGER_DIR: Final = ".retryscope-ingest"
LEDGER_FILE: Final = "ledger.jsonl"
_GZIP_MAGIC: Final = b"\x1f\x8b"
_ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
_CHUNK: Final = 1 << 20
_PLAIN_JSON: Final = (".json", ".jsonl", ".ndjson")
_BLOCK_BYTES: Final = 8 << 20
"""JSON lines are decoded in blocks of about this size (bounded memory, few native calls)."""
_SMALLEST_SPLIT: Final = 512 << 10
"""A declined block is split in halves while it is larger than this, unless the block
before it was declined whole (then the data is likely odd throughout, and splitting would
only parse it again and again)."""


@dataclass(slots=True)
class IngestSummary:
    """What one ingest run did."""

    sources: int = 0
    spans_read: int = 0
    rows_written: int = 0
    files_written: int = 0
    skipped: int = 0
    """Malformed lines or documents skipped."""
    duplicate_sources: int = 0
    """Sources already ingested (same SHA-256), skipped whole."""
    problems: list[str] = field(default_factory=list)

    def format(self) -> str:
        return (
            f"sources: {self.sources}, spans read: {self.spans_read}, rows written: "
            f"{self.rows_written} in {self.files_written} files, skipped: {self.skipped}, "
            f"duplicates: {self.duplicate_sources} sources"
        )


def iter_sources(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files named, and visible files under directories named, in a stable order."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                found.extend(Path(dirpath) / n for n in sorted(filenames) if not n.startswith("."))
        else:
            raise FileNotFoundError(f"no such file or directory: {os.fspath(raw)!r}")
    return found


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _open_decompressed(path: Path) -> io.BufferedReader:
    """The file's bytes, gunzipped or zstd-decompressed when its content says so (a file
    named as plain JSON is read as it is, so a broken first line is only that line)."""
    raw = path.open("rb")
    if path.suffix in _PLAIN_JSON:
        return raw
    magic = raw.peek(4)[:4]
    if magic.startswith(_GZIP_MAGIC):
        return io.BufferedReader(gzip.GzipFile(fileobj=raw, mode="rb"))
    if magic == _ZSTD_MAGIC:
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
        return io.BufferedReader(reader)
    return raw


def _proto_frames(data: bytes) -> list[bytes] | None:
    """Split 4-byte big-endian length-prefixed messages; None when ``data`` is not framed."""
    frames: list[bytes] = []
    offset = 0
    while offset < len(data):
        if offset + 4 > len(data):
            return None
        size = int.from_bytes(data[offset : offset + 4], "big")
        offset += 4
        if offset + size > len(data):
            return None
        frames.append(data[offset : offset + size])
        offset += size
    return frames


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


class _Ledger:
    """Digests of the sources already ingested into one output directory."""

    def __init__(self, out: Path, config: ExportConfig) -> None:
        self.path = out / LEDGER_DIR / LEDGER_FILE
        self.config = config
        self.digests: set[str] = set()
        if self.path.is_file():
            for number, line in enumerate(self.path.read_text("utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    self.digests.add(str(json.loads(line)["sha256"]))
                except (ValueError, KeyError, TypeError):
                    raise ValueError(f"{self.path}:{number}: corrupt ingest ledger line") from None

    def record(self, digest: str, source: Path, spans: int, files: int) -> None:
        make_dirs(self.path.parent, self.config.dir_mode)
        entry = {
            "sha256": digest,
            "source": os.fspath(source),
            "spans": spans,
            "files": files,
            "ingested_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, self.config.file_mode)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.digests.add(digest)


def _leftovers(out: Path) -> dict[str, list[Path]]:
    """Files of earlier ingest runs by source-digest prefix (to replace unrecorded ones)."""
    found: dict[str, list[Path]] = {}
    if out.is_dir():
        for path in out.rglob("ingest-*.parquet"):
            parts = path.name.split("-")
            if len(parts) > 2:
                found.setdefault(parts[1], []).append(path)
    return found


class _SourceWriter:
    """Collects one source's rows (tables from the Arrow fast path, span by span from the
    reference decoder, in file order) and writes them in rotated, partitioned files."""

    def __init__(self, config: ExportConfig, digest: str) -> None:
        self.config = config
        self.namer = FileNamer(f"ingest-{digest[:16]}")
        self.cols = SpanColumns()
        self.tables: list[pa.Table] = []
        self.rows = 0
        self.files = 0

    @property
    def pending(self) -> int:
        """Rows decoded but not yet written."""
        return len(self.cols) + sum(int(t.num_rows) for t in self.tables)

    def add(self, table: pa.Table) -> None:
        self._close_cols()
        self.tables.append(table)
        self.maybe_flush()

    def _close_cols(self) -> None:
        if len(self.cols):
            self.tables.append(self.cols.to_table())
            self.cols = SpanColumns()

    def maybe_flush(self) -> None:
        if self.pending >= self.config.rotate_rows:
            self.flush()

    def flush(self) -> None:
        self._close_cols()
        if not self.tables:
            return
        table = pa.concat_tables(self.tables)
        self.tables = []
        self.files += len(write_partitioned(table, self.config, self.namer))
        self.rows += table.num_rows


def _ingest_json(
    stream: io.BufferedReader, name: str, writer: _SourceWriter, report: Callable[[str], None]
) -> tuple[int, int]:
    """Spans read and items skipped from a JSON source (JSON Lines or one document).

    A first line that is not JSON by itself may start a document spanning several lines;
    when the whole source is not one JSON document either, it is read as lines, so one
    broken line (invalid JSON, invalid UTF-8, not OTLP) is reported and skipped and every
    other line is kept.
    """
    first = stream.readline()
    head = decode_json_lines([first]) if first.strip() else None
    if head is not None:  # one plain OTLP object on the first line: JSON lines
        writer.add(head)
        spans, skipped = _ingest_lines(stream, name, writer, report, start=2)
        return head.num_rows + spans, skipped
    if first.strip() and not _is_json(first):
        body = first + stream.read()
        try:
            doc = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return _ingest_lines(body.split(b"\n"), name, writer, report)
        try:
            spans = decode_traces(doc, writer.cols)
        except OtlpFormatError as exc:
            report(f"{name}:1: {exc}")
            return 0, 1
        writer.maybe_flush()
        return spans, 0
    return _ingest_lines(itertools.chain([first], stream), name, writer, report)


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return True


def _ingest_lines(
    lines: Iterable[bytes],
    name: str,
    writer: _SourceWriter,
    report: Callable[[str], None],
    *,
    start: int = 1,
) -> tuple[int, int]:
    """Decode JSON lines in blocks of about :data:`_BLOCK_BYTES`: natively where the block
    is plain OTLP (:func:`decode_json_lines`), else line by line, where each malformed line
    is reported as ``name:number`` (counted from ``start``) and skipped. A read error keeps
    the lines read before it."""
    spans = skipped = 0
    block: list[bytes] = []
    size = 0
    first = start
    split = True  # a block after one the fast path took nothing of is not split again
    try:
        for number, raw in enumerate(lines, start):
            if not block:
                first = number
            block.append(raw)
            size += len(raw)
            if size >= _BLOCK_BYTES:
                done = _ingest_block(block, first, name, writer, report, split=split)
                spans, skipped = spans + done.spans, skipped + done.skipped
                split = done.native > 0
                block, size = [], 0
    finally:
        if block:
            done = _ingest_block(block, first, name, writer, report, split=split)
            spans, skipped = spans + done.spans, skipped + done.skipped
    return spans, skipped


@dataclass(frozen=True, slots=True)
class _BlockResult:
    spans: int
    skipped: int
    native: int
    """Spans of the block the fast path decoded."""


def _ingest_block(
    block: list[bytes],
    first: int,
    name: str,
    writer: _SourceWriter,
    report: Callable[[str], None],
    *,
    split: bool,
) -> _BlockResult:
    """One block natively, or, when the fast path declines it, its halves (when ``split``,
    down to :data:`_SMALLEST_SPLIT` bytes, so one odd line slows only its neighbourhood),
    and at the end line by line with the reference decoder."""
    table = decode_json_lines(block)
    if table is not None:
        writer.add(table)
        return _BlockResult(table.num_rows, 0, table.num_rows)
    if split and len(block) > 1 and sum(len(line) for line in block) > _SMALLEST_SPLIT:
        half = len(block) // 2
        a = _ingest_block(block[:half], first, name, writer, report, split=True)
        b = _ingest_block(block[half:], first + half, name, writer, report, split=True)
        return _BlockResult(a.spans + b.spans, a.skipped + b.skipped, a.native + b.native)
    spans = skipped = 0
    for number, raw in enumerate(block, first):
        if not raw.strip():
            continue
        try:
            spans += decode_traces(json.loads(raw.decode("utf-8")), writer.cols)
        except UnicodeDecodeError as exc:
            report(f"{name}:{number}: invalid UTF-8 at byte {exc.start} of the line")
            skipped += 1
        except json.JSONDecodeError as exc:
            report(f"{name}:{number}: invalid JSON: {exc.msg} (column {exc.colno})")
            skipped += 1
        except OtlpFormatError as exc:
            report(f"{name}:{number}: {exc}")
            skipped += 1
        writer.maybe_flush()
    return _BlockResult(spans, skipped, 0)


def _ingest_proto(
    data: bytes, name: str, writer: _SourceWriter, report: Callable[[str], None]
) -> tuple[int, int]:
    frames = _proto_frames(data)
    messages = frames if frames else [data]
    spans = skipped = 0
    for number, message in enumerate(messages, 1):
        try:
            spans += decode_proto(message, writer.cols)
        except OtlpFormatError as exc:
            where = f"{name}: message {number}" if frames else name
            report(f"{where}: {exc}")
            skipped += 1
        writer.maybe_flush()
    return spans, skipped


def ingest(
    sources: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    config: ExportConfig | None = None,
    report: Callable[[str], None] | None = None,
    progress: IO[str] | None = None,
) -> IngestSummary:
    """Ingest OTLP trace files from ``sources`` into the Parquet data set at ``out``.

    ``report`` receives each problem (``file:line: reason``) as it is found; ``progress``
    (a terminal stream) shows a progress bar on long runs.
    """
    out_dir = Path(out)
    cfg = (config or ExportConfig()).with_overrides(directory=out_dir)
    summary = IngestSummary()

    def problem(message: str) -> None:
        summary.problems.append(message)
        if report is not None:
            report(message)

    files = iter_sources(sources)
    out_resolved = out_dir.resolve()
    files = [f for f in files if out_resolved not in f.resolve().parents]
    ledger = _Ledger(out_dir, cfg)
    leftovers = _leftovers(out_dir)
    bar = _Progress(sum(f.stat().st_size for f in files), progress or sys.stderr)
    done_bytes = 0
    for index, path in enumerate(files, 1):
        summary.sources += 1
        digest = file_digest(path)
        if digest in ledger.digests:
            summary.duplicate_sources += 1
        else:
            for stale in leftovers.pop(digest[:16], []):
                stale.unlink(missing_ok=True)
            writer = _SourceWriter(cfg, digest)
            spans, skipped = _ingest_file(path, writer, problem)
            writer.flush()
            ledger.record(digest, path, spans, writer.files)
            summary.spans_read += spans
            summary.skipped += skipped
            summary.rows_written += writer.rows
            summary.files_written += writer.files
        done_bytes += path.stat().st_size
        bar.update(done_bytes, index, len(files))
    bar.close()
    return summary


def _named_json(path: Path) -> bool:
    """A ``.json``/``.jsonl``/``.ndjson`` name (compressed or not): read as JSON even when
    its first line is broken, so the other lines are kept."""
    suffixes = [x for x in path.suffixes if x not in (".gz", ".zst", ".zstd")]
    return bool(suffixes) and suffixes[-1] in _PLAIN_JSON


def _ingest_file(
    path: Path, writer: _SourceWriter, report: Callable[[str], None]
) -> tuple[int, int]:
    name = os.fspath(path)
    try:
        with _open_decompressed(path) as stream:
            head = stream.peek(256).lstrip()[:1]
            if head in (b"{", b"") or _named_json(path):
                return _ingest_json(stream, name, writer, report)
            return _ingest_proto(stream.read(), name, writer, report)
    except (OSError, EOFError, UnicodeDecodeError, ValueError, ZstdError) as exc:
        # truncated or corrupt compression, undecodable text: keep what was read before it
        kept = writer.pending + writer.rows
        report(f"{name}: unreadable after {kept} spans: {type(exc).__name__}: {exc}")
        return kept, 1
