"""Target 5: ``retryscope ingest`` on OTLP JSON lines against ``json.loads`` alone.

The input is what the OpenTelemetry Collector's file exporter writes: one
``ExportTraceServiceRequest`` per line in OTLP/JSON (hex trace and span ids, 64-bit
integers as strings), each line one batch of 512 spans of the export benchmark's traffic.
The parsing floor is ``json.loads`` of every line; the ingest must reach at least half its
speed. Skipped, with a message, while ``retryscope.instrumentation.ingest._run`` does not exist.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from bench.export import BATCH, make_spans
from bench.harness import Result, Target, interleave, micros
from bench.settings import Settings
from retryscope import cli

INGEST_MODULE = "retryscope.instrumentation.ingest._run"
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(node: Any) -> Any:
    """OTLP/JSON spells ids as hex; protobuf's JSON mapping spells bytes as base64."""
    if isinstance(node, dict):
        return {
            k: base64.b64decode(v).hex() if k in _ID_KEYS and isinstance(v, str) else _hex_ids(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(x) for x in node]
    return node


def otlp_json_lines(path: Path, spans: int, seed: int) -> Path:
    """A Collector file-exporter file of ``spans`` spans (cached by size and seed)."""
    if path.exists():
        return path
    made = make_spans(spans, seed)
    tmp = path.with_name(f".{path.name}.inprogress")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tmp.open("w", encoding="utf-8") as out:
        for i in range(0, len(made), BATCH):
            message = MessageToDict(encode_spans(made[i : i + BATCH]))
            out.write(json.dumps(_hex_ids(message), separators=(",", ":")) + "\n")
    tmp.replace(path)
    return path


def run(settings: Settings) -> list[Result]:
    n = settings.scaled(25_600, 1_024)
    src = otlp_json_lines(
        settings.data_dir / f"otlp-{n}-seed-{settings.seed}.jsonl", n, settings.seed
    )
    lines = src.read_text(encoding="utf-8").splitlines()
    size = src.stat().st_size

    def parse_only() -> None:
        for line in lines:
            json.loads(line)

    if importlib.util.find_spec(INGEST_MODULE) is None:
        t = interleave({"json": parse_only}, rounds=settings.rounds)
        return [
            Result(
                "ingest",
                "retryscope ingest / json.loads speed",
                None,
                "×",
                Target(at_least=0.5, text="≥ 0.5×"),
                {
                    "json.loads": micros(t.median("json"), n) + "/span",
                    "input": f"{size / 2**20:.0f} MiB",
                },
                note=f"skipped: {INGEST_MODULE} is not there yet (issue 5, `retryscope ingest`)",
            )
        ]

    workdir = Path(tempfile.mkdtemp(prefix="retryscope-bench-ingest-"))

    def clear() -> None:
        shutil.rmtree(workdir / "out", ignore_errors=True)

    def ingest() -> None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = cli.main(["ingest", str(src), "--out", str(workdir / "out")])
        if code != 0:
            raise RuntimeError(f"retryscope ingest exited {code}")

    try:
        t = interleave({"json": parse_only, "ingest": ingest}, rounds=settings.rounds, setup=clear)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return [
        Result(
            "ingest",
            "retryscope ingest / json.loads speed",
            t.ratio("json", "ingest"),
            "×",
            Target(at_least=0.5, text="≥ 0.5×"),
            {
                "ingest": micros(t.median("ingest"), n) + "/span",
                "json.loads": micros(t.median("json"), n) + "/span",
                "input": f"{size / 2**20:.0f} MiB",
            },
        )
    ]
