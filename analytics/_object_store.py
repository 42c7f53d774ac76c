"""Object-store URLs (``s3://bucket/prefix``) for data sets and model directories.

pyarrow's file systems list objects and read footers, manifests and parts (its S3 client
is built into pyarrow); DuckDB reads Parquet on an object store through the fsspec file
system of the URL's scheme (``s3fs``, the ``s3`` extra) registered on its connection, so
DuckDB's ``httpfs`` extension is not needed. Both take the endpoint, region and
credentials from the standard AWS configuration (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AWS_REGION``,
``~/.aws``, instance and container roles): nothing to configure for retryscope itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs

FSSPEC_SCHEMES: Final = frozenset({"s3"})
"""The schemes DuckDB reads through fsspec (``s3``: ``s3fs``)."""


def is_url(path: str) -> bool:
    """Whether ``path`` names an object store (``scheme://…``), not a local path."""
    return "://" in path


def scheme(url: str) -> str:
    return url.partition("://")[0].lower()


def filesystem(url: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's file system of ``url`` and the path of ``url`` on it (``bucket/key``);
    a ValueError naming the URL when its scheme or configuration is not usable. Made from
    the URL, as here, pyarrow's S3 file system reads ``AWS_ENDPOINT_URL_S3`` and
    ``AWS_ENDPOINT_URL`` (its bare constructor does not)."""
    try:
        fs, path = pafs.FileSystem.from_uri(url)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise ValueError(f"cannot open {url}: {exc}") from exc
    return fs, str(path)


def to_url(url: str, path: str) -> str:
    """The URL of ``path`` (a path of :func:`filesystem` of ``url``) in ``url``'s scheme."""
    return f"{scheme(url)}://{path}"


def register(con: duckdb.DuckDBPyConnection, urls: Iterable[str]) -> None:
    """Let DuckDB on ``con`` read ``urls``: register the fsspec file system of each
    object-store scheme among them (once per connection; its cursors share it). Without
    that implementation installed DuckDB is left to read the URLs itself (``httpfs``)."""
    schemes = {scheme(u) for u in urls if is_url(u)}
    registered = set(con.list_filesystems())
    for name in sorted(schemes - registered):
        if name not in FSSPEC_SCHEMES:
            continue
        try:
            import fsspec

            fs = fsspec.filesystem(name)
        except ImportError:
            continue
        con.register_filesystem(fs)
