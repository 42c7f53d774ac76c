"""A model directory: the audit model a distributed build wrote, read like a cached one.

Layout (a local directory or an object-store prefix, ``s3://bucket/prefix``)::

    manifest.json                                  the committed model (written last)
    build-<id>/<table>/part-<00000>.parquet        one part per task and per-request table
    build-<id>/<table>/part-00000.parquet          the tables across requests (one part)

Each build writes into a folder of its own, each task its parts under fixed names (a task
attempt retried or run twice by speculation writes the same rows under the same name,
through a temporary file renamed into place locally; one object PUT on an object store).
The driver commits a build by replacing ``manifest.json`` once every part is verified
(:mod:`._commit`), so a reader sees the previous model or the new one, never a mix, and a
build that failed leaves only a folder no manifest names (removed by the next commit).

The manifest names the files of every table (relative to the directory, so the directory
may be copied or moved), the model's fingerprint (the SQL and versions that built it), and
the data set's files with their sizes: :func:`attach_model` refuses a model of other SQL
or of another state of the data set, so an analysis never reads a stale model.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pyarrow.fs as pafs

from retryscope._fs import make_dirs
from retryscope.analytics import _object_store as object_store
from retryscope.analytics._dataset import DataSet
from retryscope.analytics._queries import sql_string
from retryscope.analytics.model._cache import model_fingerprint
from retryscope.analytics.model._partition import MODEL_TABLES
from retryscope.analytics.model._store import Modes, Store, drop_views

if TYPE_CHECKING:
    from retryscope.analytics._audit_model import AuditModel

FORMAT: Final = 1
"""The layout of a model directory (bump when it changes)."""
MANIFEST: Final = "manifest.json"
BUILD_PREFIX: Final = "build-"
TEMP_PREFIX: Final = ".tmp-"


def part_name(partition: int) -> str:
    """The fixed file name of a task's part: ``part-00042.parquet``."""
    return f"part-{partition:05d}.parquet"


def default_location(data: str) -> str:
    """Where a data set's model goes when no place is given: next to the data set
    (``spans/`` → ``spans.model/``, ``s3://b/spans/`` → ``s3://b/spans.model/``)."""
    return data.rstrip("/") + ".model"


def new_build_id() -> str:
    """A build's folder name: sortable by time, unique across concurrent builds."""
    return f"{BUILD_PREFIX}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(4)}"


class Location:
    """A model directory on a local disk or an object store, through pyarrow's file
    systems (the same code writes both; only the local one can rename atomically)."""

    def __init__(self, uri: str, modes: Modes | None = None) -> None:
        self.is_local = not object_store.is_url(uri)
        self.uri = os.path.abspath(uri) if self.is_local else uri.rstrip("/")
        self.modes = modes or Modes()
        self.fs: pafs.FileSystem
        if self.is_local:
            self.fs, self.root = pafs.LocalFileSystem(), self.uri
        else:
            self.fs, self.root = object_store.filesystem(self.uri)

    def url(self, relative: str) -> str:
        """``relative`` as a path or URL DuckDB and pyarrow read."""
        return f"{self.uri}/{relative}"

    def path(self, relative: str) -> str:
        """``relative`` as a path of :attr:`fs`."""
        return f"{self.root}/{relative}"

    def make_dir(self, relative: str) -> None:
        """Create the folder ``relative`` on a local disk (an object store has no folders:
        a prefix exists once an object is under it)."""
        if self.is_local:
            make_dirs(Path(self.path(relative)), self.modes.directory)

    def put_file(self, local: str, relative: str) -> None:
        """Move the finished local file ``local`` to ``relative``: a rename on the same
        file system (atomic: readers see the old file or the new one), else one upload
        (an object appears whole when its upload completes: no rename is needed)."""
        if self.is_local:
            os.chmod(local, self.modes.file)
            os.replace(local, self.path(relative))
            return
        try:
            pafs.copy_files(local, self.path(relative), destination_filesystem=self.fs)
        finally:
            os.unlink(local)

    def temp_file(self, relative: str, tag: str) -> str:
        """A local path to write ``relative`` into before :meth:`put_file`: next to it on a
        local disk (so the rename is atomic), in the temp directory otherwise."""
        name = f"{TEMP_PREFIX}{os.path.basename(relative)}-{tag}"
        if self.is_local:
            return os.path.join(os.path.dirname(self.path(relative)), name)
        fd, path = tempfile.mkstemp(prefix=name + "-")  # unique: other builds share the folder
        os.close(fd)
        return path

    def write_text(self, relative: str, text: str) -> None:
        tmp = self.temp_file(relative, secrets.token_hex(6))
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        self.put_file(tmp, relative)

    def read_text(self, relative: str) -> str:
        with self.fs.open_input_stream(self.path(relative)) as fh:
            return bytes(fh.read()).decode("utf-8")

    def listing(self, relative: str = "") -> list[str]:
        """Names directly inside ``relative`` (none when it does not exist)."""
        selector = pafs.FileSelector(self.path(relative).rstrip("/"), allow_not_found=True)
        return sorted(os.path.basename(info.path) for info in self.fs.get_file_info(selector))

    def files(self, relative: str) -> dict[str, int]:
        """Every file under ``relative`` (relative to the directory) with its size."""
        selector = pafs.FileSelector(self.path(relative), recursive=True, allow_not_found=True)
        prefix = self.root.rstrip("/") + "/"
        return {
            info.path.removeprefix(prefix): int(info.size or 0)
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.File
        }

    def remove(self, relative: str) -> None:
        info = self.fs.get_file_info(self.path(relative))
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(self.path(relative))
        elif info.type == pafs.FileType.File:
            self.fs.delete_file(self.path(relative))


@dataclass(frozen=True, slots=True)
class Manifest:
    """A committed model: its build folder, the number of task partitions, the files of
    each table, the model's fingerprint, the engine that ran the tasks, and the data set
    it was built from (its root, span rows and, for a local data set, each file's path
    relative to the root and size)."""

    build: str
    partitions: int
    tables: dict[str, list[str]]
    model: str
    engine: str
    root: str
    span_rows: int
    inputs: dict[str, int] | None

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a model manifest of this layout")
        inputs = data["inputs"]
        return cls(
            str(data["build"]),
            int(data["partitions"]),
            {str(t): [str(f) for f in files] for t, files in dict(data["tables"]).items()},
            str(data["model"]),
            str(data["engine"]),
            str(data["root"]),
            int(data["span_rows"]),
            None if inputs is None else {str(k): int(v) for k, v in dict(inputs).items()},
        )


def read_manifest(location: Location) -> Manifest:
    """The model ``location`` holds; a ValueError naming the problem when it holds none."""
    try:
        text = location.read_text(MANIFEST)
    except (OSError, FileNotFoundError) as exc:
        raise ValueError(f"no model at {location.uri} (no {MANIFEST}: {exc})") from exc
    try:
        manifest = Manifest.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{location.url(MANIFEST)} is not a model manifest: {exc}") from exc
    missing = [t for t in MODEL_TABLES if not manifest.tables.get(t)]
    if missing:
        raise ValueError(f"{location.url(MANIFEST)} names no files of {', '.join(missing)}")
    return manifest


def data_set_inputs(dataset: DataSet) -> dict[str, int] | None:
    """The data set's files (relative to its root) with their sizes; None for an
    object-store data set whose objects were not listed (one not made by ``discover``)."""
    if dataset.is_remote:
        if len(dataset.sizes) != len(dataset.files):
            return None
        root = dataset.root.rstrip("/")
        base = root.rsplit("/", 1)[0] if dataset.files == (root,) else root
        return {
            f.removeprefix(base + "/"): size
            for f, size in zip(dataset.files, dataset.sizes, strict=True)
        }
    base = dataset.root if os.path.isdir(dataset.root) else os.path.dirname(dataset.root)
    return {
        os.path.relpath(f, base).replace(os.sep, "/"): os.path.getsize(f) for f in dataset.files
    }


def stale_reason(manifest: Manifest, dataset: DataSet) -> str | None:
    """Why the model of ``manifest`` is not the model of ``dataset`` now (None when it
    is, or when the data set's files cannot be compared: an object-store data set)."""
    if manifest.model != model_fingerprint():
        return "it was built by another version of retryscope, DuckDB or the model's SQL"
    now = data_set_inputs(dataset)
    if manifest.inputs is None or now is None:
        return None
    added = sorted(set(now) - set(manifest.inputs))
    gone = sorted(set(manifest.inputs) - set(now))
    changed = sorted(f for f in set(now) & set(manifest.inputs) if now[f] != manifest.inputs[f])
    if not (added or gone or changed):
        return None
    parts = [
        f"{len(files)} {what} (e.g. {files[0]})"
        for files, what in ((added, "new files"), (gone, "files gone"), (changed, "changed"))
        if files
    ]
    return "the data set changed since it was built: " + ", ".join(parts)


class BuiltModelStore(Store):
    """The tables of a committed model directory, as the model's views read them."""

    def __init__(self, location: Location, manifest: Manifest) -> None:
        self.location, self.manifest = location, manifest

    def files(self, table: str) -> list[str]:
        return [self.location.url(f) for f in self.manifest.tables[table]]

    def relation(self, table: str) -> str:
        listed = ", ".join(sql_string(f) for f in self.files(table))
        return f"read_parquet([{listed}], union_by_name = true)"

    def paths(self) -> list[str]:
        return [f for table in MODEL_TABLES for f in self.files(table)]


def attach_model(audit: AuditModel, model: str) -> BuiltModelStore:
    """Take the model in the model directory ``model`` (local or ``s3://``) as the built
    model of ``audit`` (:func:`~retryscope.analytics.connect`), so every report, finding,
    what-if and UI page reads it instead of building one. A ValueError says why a
    directory cannot serve: no manifest, other SQL, or another state of the data set
    (rebuild it)."""
    con, dataset = audit.con, audit.dataset
    location = Location(model)
    manifest = read_manifest(location)
    reason = stale_reason(manifest, dataset)
    if reason is not None:
        raise ValueError(
            f"the model at {location.uri} is not this data set's model: {reason}; "
            f"build it again (retryscope model {dataset.root} --engine spark --model {model})"
        )
    store = BuiltModelStore(location, manifest)
    object_store.register(con, [location.uri])
    drop_views(con)
    store.point_views(con)
    audit.use(store.paths())
    return store


def manifest_text(manifest: Manifest) -> str:
    return json.dumps(manifest.to_json(), indent=1, sort_keys=True)


def table_files(
    build: str, tables: Sequence[str], parts: Mapping[str, int]
) -> dict[str, list[str]]:
    """The relative files of each of ``tables`` in ``build``, ``parts[table]`` parts each."""
    return {t: [f"{build}/{t}/{part_name(i)}" for i in range(parts[t])] for t in tables}
