"""The Collector path: OTLP trace files written by an OpenTelemetry Collector → span Parquet.

:func:`ingest` reads file exporter JSON Lines, awss3exporter ``otlp_json``/``otlp_proto``
objects and single OTLP documents (gzip/zstd detected from the content) and writes them with
the exporter's own partitioned, atomic writer, idempotently (a ledger of source digests).
"""

from retryscope._extras import extra_needed

with extra_needed(__name__, "ingest"):  # zstandard and OTLP protobuf
    from retryscope.instrumentation.ingest._run import IngestSummary, ingest

__all__ = ["IngestSummary", "ingest"]
