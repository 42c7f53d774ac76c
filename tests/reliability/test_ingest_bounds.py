"""`retryscope ingest` on hostile input, each run in its own process with its peak RSS
measured: a decompression bomb, nesting no parser can hold, a line without an end, a line
of millions of empty objects, a truncated last frame. Each bound is named in the warning,
the good data before and after it is kept, and memory stays bounded (peak RSS measured by
the child itself, not a timing)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
import zstandard

from tests.export_support import make_spans, otlp_json_line, otlp_proto, read_rows

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/status").exists(), reason="peak RSS is read from /proc (Linux)"
)

SPANS = make_spans(1)
GOOD = otlp_json_line(SPANS).encode() + b"\n"
MIB = 1 << 20

ROOT = Path(__file__).resolve().parents[2]
_CHILD = """
import json, sys
from bench.rss import peak_rss_bytes
from retryscope.cli import main
code = main(sys.argv[2:])
peak = peak_rss_bytes()
with open(sys.argv[1], "w") as f:
    json.dump({"code": code, "peak": peak}, f)
"""


def _ingest(tmp: Path, *sources: Path, args: tuple[str, ...] = ()) -> dict[str, Any]:
    """``retryscope ingest SOURCES --out tmp/out`` in a child process: its exit code,
    stderr and peak RSS (bytes)."""
    result = tmp / f"result-{len(list(tmp.glob('result-*')))}.json"
    argv = ["ingest", *map(str, sources), "--out", str(tmp / "out"), *args]
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(result), *argv],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "RETRYSCOPE_PARQUET_PARTITIONING": "none"},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return {**json.loads(result.read_text()), "err": proc.stderr, "out": proc.stdout}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> int:
    """Peak RSS of ingesting one good file: the interpreter and its libraries."""
    tmp = tmp_path_factory.mktemp("baseline")
    (tmp / "good.jsonl").write_bytes(GOOD)
    run = _ingest(tmp, tmp / "good.jsonl")
    assert run["code"] == 0
    return int(run["peak"])


def _compressed(kind: str, pieces: int, piece: bytes) -> bytes:
    """``piece`` repeated ``pieces`` times, gzip- or zstd-compressed in a stream (never
    held whole)."""
    if kind == "gzip":
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        return b"".join(z.compress(piece) for _ in range(pieces)) + z.flush()
    c = zstandard.ZstdCompressor(level=3).compressobj()
    return b"".join(c.compress(piece) for _ in range(pieces)) + c.flush()


@pytest.mark.parametrize(
    ("kind", "body"),
    [("gzip", b"\n" * MIB), ("gzip", b"{}," * (MIB // 3)), ("zstd", b"\n" * MIB)],
    ids=["gzip-newlines", "gzip-objects", "zstd-newlines"],
)
def test_decompression_bomb_stops_at_the_ratio_bound(
    tmp_path: Path, baseline: int, kind: str, body: bytes
) -> None:
    bomb = _compressed(kind, 512, body)  # 512 MiB from about 0.5 MB (gzip) or less
    assert len(bomb) < 600_000
    (tmp_path / "bomb.json").write_bytes(bomb)  # named .json: content decides, not the name
    (tmp_path / "later.jsonl").write_bytes(GOOD)
    run = _ingest(tmp_path, tmp_path / "bomb.json", tmp_path / "later.jsonl")
    assert run["code"] == 1
    assert "--max-ratio / RETRYSCOPE_INGEST_MAX_RATIO" in run["err"]
    assert read_rows(tmp_path / "out").num_rows == len(SPANS)  # the later source is read
    assert run["peak"] - baseline < 160 * MIB, run["peak"] - baseline


def test_zero_bombs_are_rejected_at_once(tmp_path: Path, baseline: int) -> None:
    """512 MiB of zeros, gzip and zstd: not OTLP from their first bytes (a zero length
    prefix), so neither is decompressed further."""
    (tmp_path / "zeros.gz").write_bytes(_compressed("gzip", 512, bytes(MIB)))
    (tmp_path / "zeros.zst").write_bytes(_compressed("zstd", 512, bytes(MIB)))
    run = _ingest(tmp_path, tmp_path / "zeros.gz", tmp_path / "zeros.zst")
    assert run["code"] == 1
    assert run["err"].count("not OTLP trace data") == 2
    assert run["peak"] - baseline < 64 * MIB


def test_decompressed_size_bound_is_configurable(tmp_path: Path) -> None:
    (tmp_path / "many.jsonl.gz").write_bytes(gzip.compress(GOOD * 400))
    run = _ingest(tmp_path, tmp_path / "many.jsonl.gz", args=("--max-decompressed-bytes", "64K"))
    assert run["code"] == 1
    assert "--max-decompressed-bytes / RETRYSCOPE_INGEST_MAX_DECOMPRESSED_BYTES" in run["err"]
    kept = read_rows(tmp_path / "out").num_rows
    assert 0 < kept < 400 * len(SPANS)  # the complete lines before the bound are kept


def test_deep_nesting_is_named_and_the_rest_kept(tmp_path: Path, baseline: int) -> None:
    """100,000 levels would overflow Arrow's native stack (a crash) and Python's decoder
    (RecursionError); the line is measured first and skipped, the rest is read."""
    deep = b'{"resourceSpans":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    deep_object = b'{"resourceSpans":[{"x":' + b'{"a":' * 50_000 + b"1" + b"}" * 50_003 + b"\n"
    (tmp_path / "a.jsonl").write_bytes(GOOD + deep + GOOD + deep_object + GOOD)
    (tmp_path / "b.json").write_bytes(b"{\n" + deep[1:])  # one pretty document, too deep
    (tmp_path / "c.jsonl").write_bytes(GOOD)
    run = _ingest(tmp_path, tmp_path / "a.jsonl", tmp_path / "b.json", tmp_path / "c.jsonl")
    assert run["code"] == 1
    err = run["err"]
    assert f"{tmp_path / 'a.jsonl'}:2: nested 100001 levels deep, more than 64" in err
    assert f"{tmp_path / 'a.jsonl'}:4: nested 50003 levels deep" in err
    assert f"{tmp_path / 'b.json'}: nested" in err
    assert "--max-json-depth / RETRYSCOPE_INGEST_MAX_JSON_DEPTH" in err
    assert read_rows(tmp_path / "out").num_rows == 4 * len(SPANS)
    assert run["peak"] - baseline < 64 * MIB


def test_line_without_end_is_skipped_without_being_held(tmp_path: Path, baseline: int) -> None:
    with (tmp_path / "a.jsonl").open("wb") as f:  # line 2: 300 MiB without a newline
        f.write(GOOD + b'{"resourceSpans":[')
        for _ in range(300):
            f.write(b" " * MIB)
        f.write(b"\n" + GOOD)
    run = _ingest(tmp_path, tmp_path / "a.jsonl")
    assert f"{tmp_path / 'a.jsonl'}:2: line longer than {16 * MIB} bytes" in run["err"]
    assert "--max-message-bytes / RETRYSCOPE_INGEST_MAX_MESSAGE_BYTES" in run["err"]
    assert read_rows(tmp_path / "out").num_rows == 2 * len(SPANS)
    assert run["peak"] - baseline < 96 * MIB, run["peak"] - baseline


def test_memory_of_a_dense_line_is_bounded_by_the_message_bound(
    tmp_path: Path, baseline: int
) -> None:
    """The costliest line within the bound: millions of empty objects, which the reference
    decoder holds as Python objects (about 40 bytes of memory per byte of text)."""
    bound = 4 * MIB
    line = b'{"resourceSpans":[' + b"{}," * ((bound - 40) // 3) + b"{}]}\n"
    assert len(line) <= bound
    (tmp_path / "dense.jsonl").write_bytes(line)
    run = _ingest(tmp_path, tmp_path / "dense.jsonl", args=("--max-message-bytes", "4MiB"))
    assert run["code"] == 0
    assert run["peak"] - baseline < 50 * bound, run["peak"] - baseline


def test_complete_messages_before_a_truncated_frame_are_kept(tmp_path: Path) -> None:
    """The file exporter's ``format: proto`` (length-prefixed messages) and its
    ``compression: zstd`` output (each message a zstd frame), cut inside the last frame:
    the complete messages are written, and the rest is read once the file is whole."""
    spans = make_spans(3)
    messages = [otlp_proto(spans[i : i + 3]) for i in range(0, 9, 3)]
    zstd = zstandard.ZstdCompressor()
    for name, payloads in (
        ("proto.pb", messages),
        (
            "zstd.json",
            [zstd.compress(otlp_json_line(spans[i : i + 3]).encode()) for i in (0, 3, 6)],
        ),
    ):
        framed = b"".join(len(m).to_bytes(4, "big") + m for m in payloads)
        cut = len(framed) - len(payloads[-1]) // 2
        src = tmp_path / name
        src.write_bytes(framed[:cut])
        out = tmp_path / f"out-{name}"
        first = _ingest(tmp_path, src, args=())
        os.replace(tmp_path / "out", out)
        assert first["code"] == 0
        assert f"{src}: message 3 is truncated" in first["err"]
        assert read_rows(out).num_rows == 6
        src.write_bytes(framed)
        os.replace(out, tmp_path / "out")
        second = _ingest(tmp_path, src)
        assert "resumed: 1" in second["out"]
        assert read_rows(tmp_path / "out").num_rows == 9
        os.replace(tmp_path / "out", out)
