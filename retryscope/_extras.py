"""Optional dependencies: the error that names the extra a feature needs.

The core distribution records and exports spans. The analytics, the UI, the Collector ingest,
the demo and each client integration need an extra (``[project.optional-dependencies]`` in
pyproject.toml). A feature used without its extra raises :class:`MissingExtraError`, which
says what to install and which module is missing, instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager


class MissingExtraError(ModuleNotFoundError):
    """``feature`` needs the ``extra`` extra; ``name`` is the module that is not installed."""

    def __init__(self, feature: str, extra: str, module: str) -> None:
        super().__init__(
            f"{feature} needs the {extra} extra: pip install 'retryscope[{extra}]' "
            f"(module {module!r} is not installed)",
            name=module,
        )
        self.feature = feature
        self.extra = extra


@contextmanager
def extra_needed(feature: str, extra: str) -> Iterator[None]:
    """Turn a third-party module found missing inside the block into :class:`MissingExtraError`.

    A missing module of retryscope itself is a broken install, not a missing extra: it
    propagates unchanged.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = exc.name
        if missing is None or missing.partition(".")[0] == "retryscope":
            raise
        raise MissingExtraError(feature, extra, missing) from exc


def require_extra(feature: str, extra: str, *modules: str) -> None:
    """Import ``modules`` (the third-party imports of ``feature``) or raise
    :class:`MissingExtraError`: a package calls this first, so the error names its extra."""
    with extra_needed(feature, extra):
        for module in modules:
            importlib.import_module(module)
