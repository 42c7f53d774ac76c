"""Units of a source (blocks of JSON lines, one JSON document, protobuf messages) → rows.

JSON lines are decoded natively where a block is plain OTLP (:func:`decode_json_lines`),
else line by line by the reference decoder, which reports each malformed line as
``name:number`` and skips it. Every line's nesting depth is measured first, so no parser
ever sees one deeper than ``max_json_depth``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from retryscope.instrumentation.export._columns import SpanColumns
from retryscope.instrumentation.export._config import ExportConfig
from retryscope.instrumentation.export._files import FileNamer, write_partitioned
from retryscope.instrumentation.export._scrub import scrub
from retryscope.instrumentation.ingest._json_depth import deep_lines
from retryscope.instrumentation.ingest._otlp_arrow import decode_json_lines
from retryscope.instrumentation.ingest._otlp_decode import (
    OtlpFormatError,
    decode_proto,
    decode_traces,
)
from retryscope.instrumentation.ingest.limits import IngestLimits

_SMALLEST_SPLIT: Final = 512 << 10
"""A declined block is split in halves while it is larger than this, unless the block
before it was declined whole (then the data is likely odd throughout, and splitting would
only parse it again and again)."""


class SourceWriter:
    """Collects one part's rows (tables from the Arrow fast path, span by span from the
    reference decoder, in order) and writes them in rotated, partitioned files named
    ``ingest-<part>-…``, redacted and content withheld as the exporter does (:func:`scrub`)."""

    def __init__(self, config: ExportConfig, part: str) -> None:
        self.config = config
        self.namer = FileNamer(f"ingest-{part}")
        self.cols = SpanColumns()
        self.tables: list[pa.Table] = []
        self.rows = 0
        self.paths: list[str] = []
        self.withheld_content = 0

    @property
    def pending(self) -> int:
        """Rows decoded but not yet written."""
        return len(self.cols) + sum(int(t.num_rows) for t in self.tables)

    @property
    def files(self) -> int:
        return len(self.paths)

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
        table, withheld = scrub(table, keep_content=self.config.keep_content)
        self.withheld_content += withheld
        self.paths += [str(p) for p in write_partitioned(table, self.config, self.namer)]
        self.rows += table.num_rows


@dataclass
class Units:
    """Decodes the units of one source into its writer; counts spans and skipped units."""

    name: str
    writer: SourceWriter
    limits: IngestLimits
    report: Callable[[str], None]
    spans: int = 0
    skipped: int = 0
    _split: bool = True
    """A block after one the fast path took nothing of is not split again."""

    def problem(self, where: int | str | None, message: str) -> None:
        """Report one skipped unit: ``where`` is a line number, a phrase (``message 3``)
        or None (the whole source)."""
        self.skipped += 1
        if isinstance(where, int):
            self.report(f"{self.name}:{where}: {message}")
        else:
            self.report(f"{self.name}: {where}: {message}" if where else f"{self.name}: {message}")

    def lines(self, first: int, data: bytes) -> None:
        """Complete lines (``data`` ends with a newline), the first numbered ``first``."""
        if not data.strip():
            return  # blank lines only
        lines = data.split(b"\n")[:-1]
        deep = deep_lines(data, self.limits.max_json_depth)
        for index, depth in deep:
            self.problem(first + index, self._too_deep(depth))
            lines[index] = b""
        native = self._block(lines, first, split=self._split)
        self._split = native > 0

    def _too_deep(self, depth: int) -> str:
        return (
            f"nested {depth} levels deep, more than {self.limits.max_json_depth} "
            f"({IngestLimits.named('max_json_depth')}); skipped"
        )

    def _block(self, block: list[bytes], first: int, *, split: bool) -> int:
        """One block natively, or, when the fast path declines it, its halves (when
        ``split``, down to :data:`_SMALLEST_SPLIT` bytes, so one odd line slows only its
        neighbourhood), and at the end line by line; returns the spans decoded natively."""
        table = decode_json_lines(block)
        if table is not None:
            self.writer.add(table)
            self.spans += table.num_rows
            return int(table.num_rows)
        if split and len(block) > 1 and sum(len(line) for line in block) > _SMALLEST_SPLIT:
            half = len(block) // 2
            return self._block(block[:half], first, split=True) + self._block(
                block[half:], first + half, split=True
            )
        for number, raw in enumerate(block, first):
            if raw.strip():
                self.document(raw, number)
        return 0

    def document(self, raw: bytes, number: int | str | None) -> bool:
        """One JSON text (a line, a frame's message or the whole source), already known
        to be within the depth bound; False when it is not valid JSON."""
        try:
            doc = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            self.problem(number, f"invalid UTF-8 at byte {exc.start} of the line")
            return False
        except json.JSONDecodeError as exc:
            self.problem(number, f"invalid JSON: {exc.msg} (column {exc.colno})")
            return False
        except RecursionError:
            self.problem(number, self._too_deep(self.limits.max_json_depth + 1))
            return False
        try:
            self.spans += decode_traces(doc, self.writer.cols)
        except OtlpFormatError as exc:
            self.problem(number, str(exc))
        except RecursionError:
            self.problem(number, self._too_deep(self.limits.max_json_depth + 1))
        self.writer.maybe_flush()
        return True

    def json_text(self, raw: bytes, number: int | str | None) -> None:
        """A JSON text not yet measured (a frame's message, a whole document)."""
        depth = max((d for _, d in deep_lines(raw.replace(b"\n", b" "), 0)), default=0)
        if depth > self.limits.max_json_depth:
            self.problem(number, self._too_deep(depth))
            return
        if b"\n" not in raw.strip():
            table = decode_json_lines([raw])
            if table is not None:
                self.writer.add(table)
                self.spans += table.num_rows
                return
        self.document(raw, number)

    def proto(self, payload: bytes, number: int | str | None) -> None:
        try:
            self.spans += decode_proto(payload, self.writer.cols)
        except OtlpFormatError as exc:
            self.problem(number, str(exc))
        self.writer.maybe_flush()
