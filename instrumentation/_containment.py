"""Telemetry never raises into the application: each public entry point contains its errors.

Recording entry points — the context API, propagation, streaming, pricing on the request
path, the processors, the exporter and the integrations' public functions — are wrapped by
:func:`contained`. An exception raised inside one

* is **counted** (:func:`contained_errors`, per entry point) and **logged once** per entry
  point (later ones are only counted), with its message redacted;
* is **recorded** where it happened: the name of the entry point is added to
  ``retryscope.contained_errors`` on the span of the request or attempt involved, so the
  data says which of its values are missing and why;
* costs only what was invalid: a :class:`FieldError` names the argument at fault and a
  neutral value for it (``None``: not given), and the call is made again with that argument
  neutral — ``set_cost(reserved=5, actual=-1)`` still records the reservation,
  ``logical_request(idempotency_key=42)`` still opens the request, without that digest.
  Validation therefore happens before any side effect in a contained function. What cannot
  be salvaged returns the entry point's declared fallback (``None``, ``False``, the object
  itself, a request that records what it can).

Configuration objects (``ExportConfig``, ``Price``, ``PriceTable(...)``, ``Usage(...)``,
``LowerLayerConfig``, policies, processor and exporter constructor arguments) still raise a
``ValueError`` naming the problem: they are built at setup, where a mistake must stop the
deployment instead of silently losing data. ``BaseException``s that are not ``Exception``
(``KeyboardInterrupt``, ``SystemExit``, cancellation) always propagate.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any, Final, ParamSpec, TypeVar

from retryscope._fork import reset_in_child
from retryscope.instrumentation._redaction import redact_text
from retryscope.vocabulary import CONTAINED_ERRORS_KEY

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

_log = logging.getLogger(__name__)
_MAX_SALVAGES: Final = 8


class FieldError(ValueError):
    """Argument ``field`` of a public entry point is invalid; ``neutral`` replaces it."""

    def __init__(self, field: str, message: str, neutral: object = None) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.neutral = neutral


def field_value(field: str, compute: Callable[[], T], neutral: T | None = None) -> T | None:
    """``compute()``, or a :class:`FieldError` for ``field`` when it raises."""
    try:
        return compute()
    except FieldError:
        raise
    except Exception as exc:
        raise FieldError(field, f"{type(exc).__name__}: {exc}", neutral) from exc


class _Registry:
    """Contained errors per entry point; which entry points were logged."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.last: dict[str, str] = {}
        reset_in_child(self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # another thread may have held it at the fork

    def count(self, entry: str, description: str) -> bool:
        """Count one error of ``entry``; True when it is its first (to be logged)."""
        with self._lock:
            n = self.counts.get(entry, 0) + 1
            self.counts[entry] = n
            self.last[entry] = description
        return n == 1

    def snapshot(self) -> tuple[dict[str, int], dict[str, str]]:
        with self._lock:
            return dict(self.counts), dict(self.last)


_registry: Final = _Registry()


def contained_errors() -> dict[str, int]:
    """Errors contained so far in this process, by entry point (e.g. ``Attempt.set_cost``)."""
    return _registry.snapshot()[0]


def last_contained_errors() -> dict[str, str]:
    """The latest contained error of each entry point (type and redacted message): what a
    log shows only for the first."""
    return _registry.snapshot()[1]


def _describe(exc: BaseException) -> str:
    try:
        return redact_text(f"{type(exc).__name__}: {exc}")
    except Exception:  # a hostile __str__
        return type(exc).__name__


def mark(target: object, entry: str) -> None:
    """Record on ``target`` (a request or attempt) that ``entry`` failed on it: on its open
    span now, or on its span when it opens (``_contained`` is read by its ``__enter__``)."""
    try:
        names: list[str] | None = getattr(target, "_contained", None)
        if names is None:
            names = []
            target._contained = names  # type: ignore[attr-defined]
        if entry not in names:
            names.append(entry)
        span = getattr(target, "_span", None)
        if span is not None:
            span.set_attribute(CONTAINED_ERRORS_KEY, list(names))
    except Exception:  # a target that cannot take it: counted and logged is enough
        return


def note(entry: str, exc: BaseException, target: object | None = None) -> None:
    """Count ``exc`` against ``entry``, log it if it is the entry's first, mark ``target``."""
    try:
        description = _describe(exc)
        if _registry.count(entry, description):
            _log.warning(
                "retryscope: %s failed and was contained (the application is not affected; "
                "further failures of %s are only counted): %s",
                entry,
                entry,
                description,
            )
        if target is not None:
            mark(target, entry)
    except Exception:  # logging itself failed (a broken handler): nothing more to do
        return


def contained(
    entry: str,
    *,
    fallback: Callable[..., Any] | None = None,
    mark_result: bool = False,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a public entry point ``entry`` so that no ``Exception`` escapes it.

    A :class:`FieldError` naming one of its parameters makes it run again with that
    argument replaced by the error's neutral value (up to a few times, one argument each).
    Otherwise ``fallback(*args, **kwargs)`` answers (default: ``None``). The error is noted
    against ``args[0]`` (a method's object) or, with ``mark_result``, the object returned.
    """

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(fn)
        is_method = next(iter(signature.parameters), None) == "self"

        def recover(exc: Exception, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            errors: list[Exception] = [exc]
            while isinstance(exc, FieldError) and len(errors) <= _MAX_SALVAGES:
                try:
                    bound = signature.bind(*args, **kwargs)
                except TypeError:
                    break
                if exc.field not in signature.parameters or (
                    exc.field in bound.arguments and bound.arguments[exc.field] is exc.neutral
                ):
                    break
                bound.arguments[exc.field] = exc.neutral
                args, kwargs = bound.args, bound.kwargs
                try:
                    salvaged = fn(*args, **kwargs)
                except Exception as again:
                    exc = again
                    errors.append(again)
                    continue
                _note_all(errors, args, salvaged)
                return salvaged
            answer: Any = None
            if fallback is not None:
                try:
                    answer = fallback(*args, **kwargs)
                except Exception as failed:
                    errors.append(failed)
            _note_all(errors, args, answer)
            return answer

        def _note_all(errors: list[Exception], args: tuple[Any, ...], result: Any) -> None:
            target = result if mark_result else (args[0] if is_method and args else None)
            for error in errors:
                note(entry, error, target)

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                return recover(exc, args, kwargs)  # type: ignore[no-any-return]

        return wrapper

    return decorate
