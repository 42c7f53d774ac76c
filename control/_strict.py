"""Strict decoding of JSON/TOML mappings into typed fields.

The control plane decodes policies and receipts from untrusted text. Every reader here
names the field it was decoding when it fails: unknown fields, missing fields, wrong types
(a float where an integer belongs, a bool where a number belongs), negative or overflowing
integers, duplicate JSON keys and non-finite numbers are all errors, never coerced.
"""

from __future__ import annotations

import enum
import json
import tomllib
from collections.abc import Mapping
from typing import Any, Final, TypeVar

INT64_MAX: Final = 2**63 - 1
"""Largest ms / micro-unit value (fits a Parquet int64 column)."""
UINT32_MAX: Final = 2**32 - 1
"""Largest count (attempts, priorities, ordinals)."""

E = TypeVar("E", bound=enum.Enum)


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

    def opt_enum(self, name: str, cls: type[E]) -> E | None:
        raw = self._get(name, False)
        return None if raw is None else read_enum(raw, self.path(name), cls)

    def opt_string(self, name: str) -> str | None:
        raw = self._get(name, False)
        return None if raw is None else read_str(raw, self.path(name))

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
