"""Settings read from environment variables: one name per setting, its meaning beside it.

A settings class is a frozen dataclass whose fields carry :func:`meta` (what the setting
means, how its variable's text is read and how a value is written back); zero-code setups
construct retryscope's components without arguments, so every setting has a variable.
:func:`read_env` and :func:`write_env` are the two directions; the generated reference
pages list the fields with their variables.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be a positive integer")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("must be a positive number")
    return value


def boolean(text: str) -> bool:
    """``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``, in any case."""
    folded = text.strip().lower()
    if folded not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError("must be true or false")
    return folded in ("1", "true", "yes", "on")


def plain(value: Any) -> str:
    return str(value.value if isinstance(value, enum.Enum) else value)


def meta(
    doc: str, parse: Callable[[str], Any], text: Callable[[Any], str] = plain
) -> dict[str, Any]:
    """A setting's metadata: its meaning (``doc``), how its variable is read (``parse``)
    and how a value is written as variable text (``text``)."""
    return {"doc": doc, "parse": parse, "text": text}


def read_env(
    cls: type[Any], environ: Mapping[str, str], variable: Callable[[str], str]
) -> dict[str, Any]:
    """The settings of dataclass ``cls`` that ``environ`` sets (``variable`` names a field's
    variable; an empty one is unset). A malformed value raises ``ValueError`` naming the
    variable and the problem."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        name = variable(f.name)
        text = environ.get(name, "").strip()
        if not text:
            continue
        try:
            values[f.name] = f.metadata["parse"](text)
        except ValueError as exc:
            raise ValueError(f"{name}={text!r}: {exc}") from None
    return values


def write_env(settings: Any, variable: Callable[[str], str]) -> dict[str, str]:
    """Every setting of ``settings`` as the variable text :func:`read_env` reads back."""
    return {
        variable(f.name): f.metadata["text"](getattr(settings, f.name)) for f in fields(settings)
    }
