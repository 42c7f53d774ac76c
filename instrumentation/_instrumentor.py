"""``RetryscopeInstrumentor``: one switch for every client integration whose library is
installed.

An OpenTelemetry ``BaseInstrumentor`` registered under the ``opentelemetry_instrumentor``
entry point, so ``opentelemetry-instrument`` loads it like any contrib instrumentation.
``instrument()`` enables each integration of :data:`INTEGRATIONS` whose library can be
imported; ``uninstrument()`` removes exactly those it enabled:

* ``httpx``, ``httpx2``: every send of every sync and async client, each try of a
  retrying transport too (:mod:`~retryscope.instrumentation.integrations._httpx_family`),
  the OpenAI and Anthropic SDKs' sends with their ``x-stainless-retry-count``;
* ``urllib3``: every send urllib3 makes, retries inside one ``urlopen`` too (requests,
  botocore/boto3 with its ``amz-sdk-request`` attempt number;
  :mod:`~retryscope.instrumentation.integrations.urllib3`);
* ``grpc``: each blocking grpcio call as one send (grpcio's own retries and hedges run in
  its C core, where no Python hook sees them;
  :mod:`~retryscope.instrumentation.integrations.grpc`);
* ``aiohttp``: every send of every ``ClientSession`` created while it is on, redirect
  hops and aiohttp-retry's tries too
  (:mod:`~retryscope.instrumentation.integrations.aiohttp`);
* ``litellm``: each Router deployment attempt's deployment as the route of its sends
  (:mod:`~retryscope.instrumentation.integrations.litellm`);
* ``stamina``: the retry hook recording stamina's scheduled waits.

SDK call spans (the Anthropic SDK's own, the OpenAI GenAI instrumentation's, botocore's)
need no switch: the stamping processor recognises them (:mod:`._send_spans`).

``instrument(skip=("litellm",))`` or ``RETRYSCOPE_INSTRUMENTATIONS_DISABLED=litellm,...``
leaves integrations out; ``litellm_route_attributes=`` is passed to the LiteLLM one.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

_log = logging.getLogger(__name__)

DISABLED_ENV: Final = "RETRYSCOPE_INSTRUMENTATIONS_DISABLED"
"""Comma-separated names of integrations :class:`RetryscopeInstrumentor` leaves out."""


@dataclass(frozen=True, slots=True)
class Integration:
    """One client integration: the library it needs and how to turn it on and off."""

    name: str
    library: str
    enable: Callable[[dict[str, Any]], None]
    disable: Callable[[], None]

    def available(self) -> bool:
        try:
            return importlib.util.find_spec(self.library) is not None
        except (ImportError, ValueError):
            return False


def _httpx_family(library: str) -> Integration:
    def enable(_: dict[str, Any]) -> None:
        from retryscope.instrumentation.integrations._httpx_family import patch_clients

        patch_clients(library)

    def disable() -> None:
        from retryscope.instrumentation.integrations._httpx_family import unpatch_clients

        unpatch_clients(library)

    return Integration(library, library, enable, disable)


def _enable_urllib3(_: dict[str, Any]) -> None:
    from retryscope.instrumentation.integrations import urllib3

    urllib3.instrument()


def _disable_urllib3() -> None:
    from retryscope.instrumentation.integrations import urllib3

    urllib3.uninstrument()


def _enable_grpc(_: dict[str, Any]) -> None:
    from retryscope.instrumentation.integrations import grpc

    grpc.instrument()


def _disable_grpc() -> None:
    from retryscope.instrumentation.integrations import grpc

    grpc.uninstrument()


def _enable_aiohttp(_: dict[str, Any]) -> None:
    from retryscope.instrumentation.integrations import aiohttp

    aiohttp.instrument()


def _disable_aiohttp() -> None:
    from retryscope.instrumentation.integrations import aiohttp

    aiohttp.uninstrument()


_LITELLM_ON: list[dict[str, Any]] = []


def _on_litellm_import(_module: object) -> None:
    if _LITELLM_ON:
        from retryscope.instrumentation.integrations import litellm

        litellm.instrument(_LITELLM_ON[0].get("litellm_route_attributes"))


def _enable_litellm(options: dict[str, Any]) -> None:
    # Importing litellm is slow (and fetches its model cost map unless
    # LITELLM_LOCAL_MODEL_COST_MAP is set): hook in when the application imports it.
    from wrapt import register_post_import_hook

    _LITELLM_ON[:] = [options]
    register_post_import_hook(_on_litellm_import, "litellm")


def _disable_litellm() -> None:
    _LITELLM_ON.clear()
    if "litellm" in sys.modules:
        from retryscope.instrumentation.integrations import litellm

        litellm.uninstrument()


def _enable_stamina(_: dict[str, Any]) -> None:
    from retryscope.instrumentation.integrations.stamina import install_hook

    install_hook()


def _disable_stamina() -> None:
    from retryscope.instrumentation.integrations.stamina import uninstall_hook

    uninstall_hook()


INTEGRATIONS: Final[tuple[Integration, ...]] = (
    _httpx_family("httpx"),
    _httpx_family("httpx2"),
    Integration("urllib3", "urllib3", _enable_urllib3, _disable_urllib3),
    Integration("grpc", "grpc", _enable_grpc, _disable_grpc),
    Integration("aiohttp", "aiohttp", _enable_aiohttp, _disable_aiohttp),
    Integration("litellm", "litellm", _enable_litellm, _disable_litellm),
    Integration("stamina", "stamina", _enable_stamina, _disable_stamina),
)
"""Every integration the instrumentor knows, in the order it enables them."""


def _skipped(skip: Iterable[str] | None) -> frozenset[str]:
    names = {n.strip() for n in os.environ.get(DISABLED_ENV, "").split(",") if n.strip()}
    return frozenset(names | set(skip or ()))


class RetryscopeInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Enables every retryscope client integration whose library is installed."""

    _enabled: tuple[Integration, ...] = ()

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()  # each integration checks for its own library

    @property
    def enabled(self) -> tuple[str, ...]:
        """Names of the integrations enabled now."""
        return tuple(i.name for i in self._enabled)

    def _instrument(self, **kwargs: Any) -> None:
        skip = _skipped(kwargs.get("skip"))
        enabled = []
        for integration in INTEGRATIONS:
            if integration.name in skip or not integration.available():
                continue
            try:
                integration.enable(kwargs)
            except Exception:  # one broken library must not keep the others off
                _log.exception("retryscope: enabling the %s integration failed", integration.name)
                continue
            enabled.append(integration)
        self._enabled = tuple(enabled)

    def _uninstrument(self, **kwargs: Any) -> None:
        for integration in reversed(self._enabled):
            try:
                integration.disable()
            except Exception:
                _log.exception("retryscope: disabling the %s integration failed", integration.name)
        self._enabled = ()
