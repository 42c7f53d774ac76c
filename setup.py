"""Build hook: compiles the live metrics' per-attempt code with mypyc where it can.

The modules in :data:`COMPILED` run for every attempt span that ends while live metrics
are on (reading the span, building its row, the request's facts when it ends); compiled by
mypyc (part of mypy) they cost about half the instructions (``python -m
bench.instructions``), and calls between them skip the interpreter. They stay plain Python
and are the same code either way: without a C compiler, or with ``RETRYSCOPE_COMPILE=0``,
the package installs without the extensions and imports the sources. Everything else about
the package is in ``pyproject.toml``.
"""

from __future__ import annotations

import os
import shutil
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

COMPILED = (
    "instrumentation/_sdk_finished.py",
    "instrumentation/metrics/_facts.py",
    "instrumentation/metrics/_hold.py",
)
"""Source files compiled (paths in this tree; their package is ``retryscope.<dir>``)."""
GROUP = "retryscope.instrumentation._compiled"
"""mypyc's name for the modules' shared library (``<GROUP>__mypyc``)."""
_ROOT = Path(__file__).resolve().parent
_TREE = Path("build") / "mypyc-src"
"""Where the compiled sources are laid out under their import names for mypyc."""


def _wanted() -> bool:
    return os.environ.get("RETRYSCOPE_COMPILE", "1").strip().lower() not in {"0", "false", "no"}


def _import_tree() -> list[str]:
    """mypyc's arguments: copies of :data:`COMPILED` under ``retryscope/…`` (mypyc names a
    module after the packages around its file; this tree maps ``instrumentation/`` to
    ``retryscope.instrumentation`` as the package-dir table does) and their settings."""
    shutil.rmtree(_ROOT / _TREE, ignore_errors=True)
    paths = []
    for source in COMPILED:
        target = _TREE / "retryscope" / source
        for package in [*reversed(target.parents)][3:]:  # retryscope/ and below
            (_ROOT / package).mkdir(parents=True, exist_ok=True)
            (_ROOT / package / "__init__.py").touch()
        shutil.copyfile(_ROOT / source, _ROOT / target)
        paths.append(str(target))
    # the package's own mypy settings (strict) are for the whole package, checked by
    # ``make typecheck``; here the imports are not analysed (the build environment has none
    # of them), so the module's own annotations are what the compiler uses
    config = _TREE / "mypy.ini"
    (_ROOT / config).write_text("[mypy]\nfollow_imports = skip\nignore_missing_imports = True\n")
    return ["--config-file", str(config), *paths]


def _extensions() -> list[Any]:
    if not _wanted():
        return _plain()
    try:
        from mypyc.build import mypycify
    except ImportError:  # a build environment without mypy: the plain-Python package
        print("retryscope: mypyc not available, metrics code not compiled", file=sys.stderr)
        return _plain()
    try:
        # one shared library, named inside the package (not a top-level module of its own)
        return list(mypycify(_import_tree(), opt_level="3", group_name=GROUP))
    except (Exception, SystemExit) as exc:  # mypyc's failure: the plain-Python package
        print(f"retryscope: metrics code not compiled ({exc})", file=sys.stderr)
        return _plain()


def _plain() -> list[Any]:
    """No extension: and none left beside the sources by an earlier in-place build (an
    editable install builds there), which would still be imported instead of the sources
    that changed since."""
    stems = [Path(source).with_suffix("") for source in COMPILED]
    stems.append(Path(*GROUP.split(".")[1:]).with_name(GROUP.rsplit(".", 1)[1] + "__mypyc"))
    for stem in stems:
        for suffix in EXTENSION_SUFFIXES:
            (_ROOT / f"{stem}{suffix}").unlink(missing_ok=True)
    return []


class OptionalBuildExt(build_ext):
    """``build_ext`` that installs the plain-Python package when compiling fails (no C
    compiler, no Python headers): what it built before the failure is removed too, since
    a compiled module without its runtime library would not import."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            print(f"retryscope: metrics code not compiled ({exc})", file=sys.stderr)
            for ext in self.extensions:
                Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
