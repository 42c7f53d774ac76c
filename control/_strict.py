"""The control plane's JSON codec: dataclasses to plain JSON, and strictly back.

The control plane decodes policies and receipts from untrusted text. Every reader here
names the field it was decoding when it fails: unknown fields, missing fields, wrong types
(a float where an integer belongs, a bool where a number belongs), negative or overflowing
integers, duplicate JSON keys and non-finite numbers are all errors, never coerced.
:func:`to_obj` and :func:`from_obj` map a dataclass to its JSON object and back by its
fields' types, so a format is written once, as the dataclass.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import tomllib
import types
from collections.abc import Hashable, Mapping
from typing import (
    Annotated,
    Any,
    Final,
    TypeAlias,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

INT64_MAX: Final = 2**63 - 1
"""Largest ms / micro-unit value (fits a Parquet int64 column)."""
UINT32_MAX: Final = 2**32 - 1
"""Largest count (attempts, priorities, ordinals)."""
Count: TypeAlias = Annotated[int, UINT32_MAX]
"""An integer field decoded with the bound :data:`UINT32_MAX` (others: :data:`INT64_MAX`)."""

E = TypeVar("E", bound=enum.Enum)
D = TypeVar("D", bound=Hashable)


class DecodeError(ValueError):
    """Base of all strict-decoding errors; ``field`` is the dotted path that failed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class UnknownField(DecodeError):
    """A field the format does not define."""


class MissingField(DecodeError):
    """A required field is absent."""


class WrongType(DecodeError):
    """A field holds a value of the wrong JSON/TOML type."""


class IntegerOutOfRange(DecodeError):
    """An integer is negative or exceeds its bound."""


class InvalidValue(DecodeError):
    """A value of the right type that is not allowed (bad enum member, bad digest, bad JSON)."""


def _reject_constant(name: str) -> Any:
    raise InvalidValue("$", f"non-finite number {name} is not allowed")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidValue(key, "duplicate key")
        out[key] = value
    return out


def load_json(text: str | bytes) -> Any:
    """Parse JSON rejecting duplicate keys and NaN/Infinity."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidValue("$", f"not valid JSON: {exc}") from exc


def load_toml(text: str) -> dict[str, Any]:
    """Parse TOML (tomllib; duplicate keys are already errors there)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidValue("$", f"not valid TOML: {exc}") from exc


class Fields:
    """Reads the fields of one mapping, then checks nothing unknown was left."""

    def __init__(self, value: Any, path: str) -> None:
        if not isinstance(value, Mapping):
            raise WrongType(path, f"expected an object/table, got {type(value).__name__}")
        self._value: Mapping[str, Any] = value
        self._path = path
        self._seen: set[str] = set()

    def path(self, name: str) -> str:
        return f"{self._path}.{name}" if self._path else name

    def _get(self, name: str, required: bool) -> Any:
        self._seen.add(name)
        if name not in self._value:
            if required:
                raise MissingField(self.path(name), "required field is missing")
            return None
        return self._value[name]

    def integer(self, name: str, *, maximum: int = INT64_MAX, minimum: int = 0) -> int:
        return read_int(self._get(name, True), self.path(name), maximum=maximum, minimum=minimum)

    def opt_integer(self, name: str, *, maximum: int = INT64_MAX) -> int | None:
        raw = self._get(name, False)
        return None if raw is None else read_int(raw, self.path(name), maximum=maximum)

    def string(self, name: str) -> str:
        return read_str(self._get(name, True), self.path(name))

    def boolean(self, name: str) -> bool:
        raw = self._get(name, True)
        if not isinstance(raw, bool):
            raise WrongType(self.path(name), f"expected a boolean, got {type(raw).__name__}")
        return raw

    def enum(self, name: str, cls: type[E]) -> E:
        return read_enum(self._get(name, True), self.path(name), cls)

    def string_set(self, name: str) -> frozenset[str]:
        """An array of distinct strings, read as a set (a repeated member is an error)."""
        path = self.path(name)
        out: set[str] = set()
        for i, item in enumerate(self.array(name)):
            value = read_str(item, f"{path}[{i}]")
            if value in out:
                raise InvalidValue(f"{path}[{i}]", f"{value!r} is repeated")
            out.add(value)
        return frozenset(out)

    def enum_set(self, name: str, cls: type[E]) -> frozenset[E]:
        """An array of distinct enum values, read as a set."""
        path = self.path(name)
        members = self.string_set(name)
        return frozenset(read_enum(m, f"{path}[]", cls) for m in sorted(members))

    def array(self, name: str) -> list[Any]:
        raw = self._get(name, True)
        if not isinstance(raw, list):
            raise WrongType(self.path(name), f"expected an array, got {type(raw).__name__}")
        return raw

    def raw(self, name: str, *, required: bool = True) -> Any:
        return self._get(name, required)

    def done(self) -> None:
        """Raise :class:`UnknownField` for the first field that was not read."""
        for key in sorted(self._value):
            if key not in self._seen:
                raise UnknownField(self.path(str(key)), "unknown field")


def read_int(raw: Any, path: str, *, maximum: int = INT64_MAX, minimum: int = 0) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise WrongType(path, f"expected an integer, got {type(raw).__name__} {raw!r}")
    if raw < minimum:
        raise IntegerOutOfRange(path, f"{raw} is below {minimum}")
    if raw > maximum:
        raise IntegerOutOfRange(path, f"{raw} exceeds {maximum}")
    return raw


def read_str(raw: Any, path: str) -> str:
    if not isinstance(raw, str):
        raise WrongType(path, f"expected a string, got {type(raw).__name__}")
    return raw


def read_enum(raw: Any, path: str, cls: type[E]) -> E:
    if not isinstance(raw, str):
        raise WrongType(path, f"expected a string, got {type(raw).__name__}")
    try:
        return cls(raw)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in cls)
        raise InvalidValue(path, f"{raw!r} is not one of: {allowed}") from None


def to_obj(value: Any) -> Any:
    """``value`` as plain JSON: a dataclass as the object of its fields, an enum as its
    value, a set as a sorted array, a tuple as an array."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_obj(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, frozenset):
        return sorted(to_obj(item) for item in value)
    if isinstance(value, tuple):
        return [to_obj(item) for item in value]
    return value


@functools.cache
def _types(cls: Any) -> dict[str, Any]:
    return get_type_hints(cls, include_extras=True)


def from_obj(cls: type[D], raw: Any, path: str) -> D:
    """Strictly decode the object ``raw`` into the dataclass ``cls`` by its fields' types
    (the inverse of :func:`to_obj`); a field with a default may be absent or null."""
    f = Fields(raw, path)
    values = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        has_default = field.default is not dataclasses.MISSING
        if not has_default or f.raw(field.name, required=False) is not None:
            values[field.name] = _read(f, field.name, _types(cls)[field.name])
    f.done()
    return cls(**values)


def _read(f: Fields, name: str, tp: Any) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):  # X | None
        inner = next(a for a in args if a is not type(None))
        return None if f.raw(name, required=False) is None else _read(f, name, inner)
    if origin is Annotated:
        return f.integer(name, maximum=args[1])
    if origin is frozenset:
        item = args[0]
        return f.enum_set(name, item) if issubclass(item, enum.Enum) else f.string_set(name)
    if origin is tuple:
        path = f.path(name)
        return tuple(from_obj(args[0], x, f"{path}[{i}]") for i, x in enumerate(f.array(name)))
    if tp is bool:
        return f.boolean(name)
    if tp is int:
        return f.integer(name)
    if tp is str:
        return f.string(name)
    if issubclass(tp, enum.Enum):
        return f.enum(name, tp)
    return from_obj(tp, f.raw(name), f.path(name))
