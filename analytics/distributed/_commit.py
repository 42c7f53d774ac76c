"""The driver's side of a distributed model build, after the tasks: verify every part,
build the tables across requests over them, and commit the model by replacing the
manifest; then remove the folders of builds no manifest names.

Nothing a task wrote is read as the model until this commit: a missing part, a part whose
footer does not read, or one whose rows differ from what its task reported stops the
build with an error naming it, and the previous model (if any) stays the committed one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import pyarrow.dataset as ds
import pyarrow.parquet as pq

from retryscope.analytics._queries import sql_string
from retryscope.analytics.distributed._layout import (
    BUILD_PREFIX,
    MANIFEST,
    TEMP_PREFIX,
    Location,
    Manifest,
    manifest_text,
    read_manifest,
    table_files,
)
from retryscope.analytics.distributed._task import TaskResult, write_part
from retryscope.analytics.model._cache import model_fingerprint
from retryscope.analytics.model._partition import (
    ACROSS_REQUESTS_TABLES,
    PER_REQUEST_TABLES,
    build_across_requests,
    new_connection,
    point_projections,
)


class BuildError(RuntimeError):
    """A build whose parts are not all there as its tasks reported: nothing committed."""


def verify_parts(
    location: Location, build: str, partitions: int, results: Sequence[TaskResult]
) -> None:
    """Check that each of the ``partitions`` tasks reported once and that each of its
    parts is there, reads, and holds the rows it reported."""
    by_partition = {r.partition: r for r in results}
    if sorted(by_partition) != list(range(partitions)) or len(results) != partitions:
        seen = sorted(r.partition for r in results)
        raise BuildError(f"expected one result from each of {partitions} tasks, got {seen}")
    files = table_files(build, PER_REQUEST_TABLES, dict.fromkeys(PER_REQUEST_TABLES, partitions))
    for table, parts in files.items():
        for partition, relative in enumerate(parts):
            expected = by_partition[partition].table_rows[table]
            try:
                with location.fs.open_input_file(location.path(relative)) as fh:
                    rows = pq.read_metadata(fh).num_rows
            except (OSError, ValueError) as exc:
                raise BuildError(f"part {location.url(relative)} does not read: {exc}") from exc
            if rows != expected:
                raise BuildError(
                    f"part {location.url(relative)} holds {rows} rows; its task wrote {expected}"
                )


def parts_dataset(location: Location, parts: Sequence[str]) -> ds.Dataset:
    """The parts of one table on an object store as one pyarrow dataset (its objects are
    read through :attr:`Location.fs` as DuckDB scans them, a few columns at a time)."""
    return ds.dataset([location.path(p) for p in parts], filesystem=location.fs, format="parquet")


def build_across(location: Location, build: str, partitions: int, threads: int | None) -> None:
    """The tables across requests, by DuckDB over every part of the per-request tables,
    each written as the one part of its table."""
    files = table_files(build, PER_REQUEST_TABLES, dict.fromkeys(PER_REQUEST_TABLES, partitions))
    con = new_connection(threads)
    try:
        for table, parts in files.items():
            if location.is_local:
                listed = ", ".join(sql_string(location.url(p)) for p in parts)
                source = f"read_parquet([{listed}], union_by_name = true)"
            else:  # scanned by pyarrow's S3 client, streamed into DuckDB
                source = f"rs_parts_{table}"
                con.register(source, parts_dataset(location, parts))
            con.execute(f"CREATE TEMP VIEW {table} AS SELECT * FROM {source}")
        point_projections(con, files)
        build_across_requests(con)
        for table in ACROSS_REQUESTS_TABLES:
            location.make_dir(f"{build}/{table}")
            (relative,) = table_files(build, [table], {table: 1})[table]
            write_part(
                location, relative, con.sql(f"SELECT * FROM {table}").to_arrow_table(), "driver"
            )
    finally:
        con.close()


def commit(
    location: Location,
    build: str,
    results: Sequence[TaskResult],
    *,
    partitions: int,
    engine: str,
    root: str,
    inputs: dict[str, int] | None,
    threads: int | None = None,
) -> Manifest:
    """Verify the parts of ``build``, build the tables across requests, replace the
    manifest, and remove the folders of other builds except the one the previous
    manifest named (a reader may still be reading it). Returns the new manifest."""
    verify_parts(location, build, partitions, results)
    build_across(location, build, partitions, threads)
    try:
        previous = read_manifest(location).build
    except ValueError:
        previous = None
    parts = {
        **dict.fromkeys(PER_REQUEST_TABLES, partitions),
        **dict.fromkeys(ACROSS_REQUESTS_TABLES, 1),
    }
    manifest = Manifest(
        build=build,
        partitions=partitions,
        tables=table_files(build, [*PER_REQUEST_TABLES, *ACROSS_REQUESTS_TABLES], parts),
        model=model_fingerprint(),
        engine=engine,
        root=root,
        span_rows=sum(r.span_rows for r in results),
        inputs=inputs,
    )
    location.write_text(MANIFEST, manifest_text(manifest))
    remove_leftovers(location, keep={build, previous})
    return manifest


def remove_leftovers(location: Location, keep: set[str | None]) -> None:
    """Remove the build folders not in ``keep`` (failed or superseded builds) and the
    temporary files attempts that died left in the kept ones."""
    for name in location.listing():
        superseded = name.startswith(BUILD_PREFIX) and name not in keep
        if superseded or name.startswith(TEMP_PREFIX):
            with contextlib.suppress(OSError):
                location.remove(name)
    for build in keep:
        if build is None:
            continue
        for relative in location.files(build):
            if relative.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
                with contextlib.suppress(OSError):
                    location.remove(relative)
