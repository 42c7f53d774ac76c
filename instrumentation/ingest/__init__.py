"""The Collector path: OTLP trace files written by an OpenTelemetry Collector → span Parquet.

:func:`ingest` reads file exporter JSON Lines, awss3exporter ``otlp_json``/``otlp_proto``
objects and single OTLP documents, length-prefixed protobuf and zstd frames (every format
detected from the content) and writes them with the exporter's own partitioned, atomic
writer, exactly once (a ledger of what was read, by content; grown files are read on).
"""

from retryscope._extras import extra_needed

with extra_needed(__name__, "ingest"):  # zstandard and OTLP protobuf
    import zstandard  # noqa: F401  (the extra's first module: named when it is missing)

    from retryscope.instrumentation.ingest._run import IngestSummary, ingest

__all__ = ["IngestSummary", "ingest"]
